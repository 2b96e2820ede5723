//! The trace `drl replay` reads: rows, their kinds, and the CSV reader.

use std::io;

use anyhow::bail;

/// What a row asks of the limit (docs/semantics.md, "Costs known
/// afterwards").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Kind {
    /// Admit and consume, or deny and consume nothing (the default).
    #[default]
    Take,
    /// Decide as a take would, change nothing.
    Check,
    /// Consume whatever remains (into debt if need be).
    Charge,
    /// Take the estimate `cost`, opening the reservation `id` if admitted.
    Reserve,
    /// Close the reservation `id` at the actual `cost`.
    Settle,
    /// Close the reservation `id` at 0.
    Release,
}

impl Kind {
    fn parse(s: &str) -> Option<Kind> {
        Some(match s {
            "" | "take" => Kind::Take,
            "check" => Kind::Check,
            "charge" => Kind::Charge,
            "reserve" => Kind::Reserve,
            "settle" => Kind::Settle,
            "release" => Kind::Release,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Kind::Take => "take",
            Kind::Check => "check",
            Kind::Charge => "charge",
            Kind::Reserve => "reserve",
            Kind::Settle => "settle",
            Kind::Release => "release",
        }
    }

    /// True for the kinds that name a reservation.
    fn has_id(self) -> bool {
        matches!(self, Kind::Reserve | Kind::Settle | Kind::Release)
    }
}

/// One input row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    /// `timestamp_ns`.
    pub now: u64,
    /// `key`.
    pub key: String,
    /// `cost` (default 1; a settle's actual cost; ignored by release).
    pub cost: u64,
    /// `kind` (default take).
    pub kind: Kind,
    /// `id`: the reservation a reserve opens or a settle/release closes.
    pub id: String,
}

/// Parses one CSV record; `line` is 1-based for messages.
pub(super) fn parse_row(rec: &csv::StringRecord, line: u64) -> anyhow::Result<Row> {
    if rec.len() < 2 || rec.len() > 5 {
        bail!(
            "line {line}: expected 2 to 5 fields (timestamp_ns,key[,cost[,kind[,id]]]), found {}",
            rec.len()
        );
    }
    let now = rec[0].trim().parse::<u64>().map_err(|_| {
        anyhow::anyhow!(
            "line {line}: timestamp_ns {:?} is not a whole number of nanoseconds (0 to 2^64-1)",
            &rec[0]
        )
    })?;
    let key = rec[1].to_string();
    let cost = match rec.get(2).map(str::trim) {
        None | Some("") => 1,
        Some(c) => c.parse::<u64>().map_err(|_| {
            anyhow::anyhow!("line {line}: cost {c:?} is not a whole number from 0 to 2^64-1")
        })?,
    };
    let kind_field = rec.get(3).map_or("", str::trim);
    let kind = Kind::parse(kind_field).ok_or_else(|| {
        anyhow::anyhow!(
            "line {line}: kind {kind_field:?} is not one of take, check, charge, reserve, settle, release"
        )
    })?;
    let id = rec.get(4).map_or("", str::trim).to_string();
    if kind.has_id() && id.is_empty() {
        bail!("line {line}: a {} row needs a reservation id", kind.name());
    }
    Ok(Row {
        now,
        key,
        cost,
        kind,
        id,
    })
}

/// Reads every row of `input` (skipping an optional header) and hands it
/// to `f`; stops at the first bad row with an error naming its line.
#[cfg(test)]
fn replay_rows(
    input: impl io::Read,
    mut f: impl FnMut(&Row) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    replay_records(input, |row, _| f(row))
}

/// As [`replay_rows`], also telling `f` whether the trace's first line
/// (header or row) has a kind column (4 fields or more).
pub(super) fn replay_records(
    input: impl io::Read,
    mut f: impl FnMut(&Row, bool) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let mut has_kind = false;
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .comment(Some(b'#'))
        .from_reader(input);
    let mut rec = csv::StringRecord::new();
    let mut first = true;
    loop {
        let more = reader.read_record(&mut rec).map_err(|e| {
            let line = e.position().map_or(0, |p| p.line());
            anyhow::anyhow!("line {line}: {e}")
        })?;
        if !more {
            return Ok(());
        }
        let line = rec.position().map_or(0, |p| p.line());
        if first {
            first = false;
            has_kind = rec.len() >= 4;
            if rec
                .get(0)
                .is_some_and(|f| f.trim().to_ascii_lowercase().starts_with("timestamp"))
            {
                continue;
            }
        }
        let row = parse_row(&rec, line)?;
        f(&row, has_kind)?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_parse_with_optional_header_and_cost() {
        let mut rows = vec![];
        replay_rows(&b"timestamp_ns,key,cost\n5,a\n6,\"b,c\",3\n"[..], |r| {
            rows.push(r.clone());
            Ok(())
        })
        .unwrap();
        assert_eq!(
            rows,
            vec![
                Row {
                    now: 5,
                    key: "a".into(),
                    cost: 1,
                    kind: Kind::Take,
                    id: String::new(),
                },
                Row {
                    now: 6,
                    key: "b,c".into(),
                    cost: 3,
                    kind: Kind::Take,
                    id: String::new(),
                },
            ]
        );
    }

    #[test]
    fn bad_rows_name_their_line() {
        for (input, msg) in [
            (&b"1,a\nx,b\n"[..], "line 2: timestamp_ns \"x\""),
            (&b"1,a\n2,b,-1\n"[..], "line 2: cost \"-1\""),
            (&b"1\n"[..], "line 1: expected 2 to 5 fields"),
            (&b"1,a,1,take,x,y\n"[..], "line 1: expected 2 to 5 fields"),
            (&b"1,a,1,borrow\n"[..], "line 1: kind \"borrow\""),
            (
                &b"1,a,1,settle\n"[..],
                "line 1: a settle row needs a reservation id",
            ),
            (&b"1,a,99999999999999999999\n"[..], "line 1: cost"),
        ] {
            let err = replay_rows(input, |_| Ok(())).unwrap_err().to_string();
            assert!(err.starts_with(msg), "{err:?} should start with {msg:?}");
        }
    }
}
