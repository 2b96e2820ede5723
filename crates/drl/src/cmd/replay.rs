//! `drl replay`: decide a CSV trace offline, exactly as a limit would have
//! (the format is in `docs/semantics.md`, "Replay format").

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{self, BufRead, BufReader, BufWriter, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, bail};
use drl_core::{Algorithm, Decision, Mark, MultiLimiter, Quota, State};

/// Decide a CSV trace of requests offline, as a limit would have.
///
/// Input rows are `timestamp_ns,key[,cost[,kind[,id]]]` (a header line
/// starting with `timestamp` is optional; cost defaults to 1, kind to
/// `take`; `check`, `charge`, `reserve`, `settle`, `release` are the costs
/// known afterwards, reservations named by `id`). Each key has its own
/// state. Output rows are
/// `timestamp_ns,key,allowed,remaining,retry_after_ns,reset_after_ns,delay_ns`,
/// followed by `kind,charged,refunded` when the trace's first line has a
/// kind column.
///
/// Examples:
///   drl replay --algorithm gcra --quota 100/s --burst 20 access.csv
///   drl replay --algorithm sliding-window --quota 10/s --quota 300/min - < trace.csv
///   drl replay --algorithm token-bucket --quota 5/s --summary access.csv
///   drl replay -a gcra -q 100/s --store redis://127.0.0.1:6379 access.csv
///
/// With --store, decisions are made by drl's Redis scripts with the trace's
/// timestamps (the caller's clock), so the output can be diffed against the
/// in-memory result: both follow docs/semantics.md bit for bit.
#[derive(Debug, clap::Args)]
#[command(after_help = AFTER_HELP)]
pub struct Args {
    /// Algorithm: token-bucket, leaky-bucket, gcra, leaky-queue,
    /// fixed-window, sliding-log, sliding-window.
    #[arg(long, short = 'a', value_parser = parse_algorithm)]
    pub algorithm: Algorithm,
    /// Quota as LIMIT/WINDOW (e.g. 100/s, 5/1500ms, 10000/d). Repeat it for
    /// a multi-limit: a request is admitted only if every quota admits it.
    #[arg(long, short = 'q', required = true, value_parser = parse_quota)]
    pub quota: Vec<Quota>,
    /// Capacity (defaults to the limit). Only with a single --quota.
    #[arg(long, short = 'b')]
    pub burst: Option<u64>,
    /// Print admitted/denied counts per key instead of one row per request
    /// (rows still go to --output if given).
    #[arg(long)]
    pub summary: bool,
    /// Write the decision rows to this file instead of standard output.
    #[arg(long, short = 'o')]
    pub output: Option<PathBuf>,
    /// Decide through Redis instead of in memory: `redis://HOST:PORT`, or
    /// several comma-separated URLs of Redis Cluster nodes.
    #[arg(long, value_name = "URL")]
    pub store: Option<String>,
    /// With --store: prefix of the Redis keys (default: a fresh
    /// `drl-replay:<pid>-<time>:` so a replay never touches live limits;
    /// its keys expire on their own).
    #[arg(long, requires = "store")]
    pub key_prefix: Option<String>,
    /// With --store: what decides in Redis, `lua` (the scripts, default) or
    /// `module` (drl's native module; every server must run
    /// `redis-server --loadmodule libdrl_redis_module.so`).
    #[arg(long, requires = "store", value_name = "ENGINE", value_parser = parse_engine)]
    pub redis_engine: Option<drl_store::Engine>,
    /// How long a reservation stays open: settled at or after its expiry
    /// it refunds nothing (docs/semantics.md, "Expiry").
    #[arg(long, value_name = "MS", default_value_t = 300_000)]
    pub reservation_ttl_ms: u64,
    /// The trace; `-` reads standard input.
    pub file: PathBuf,
}

const AFTER_HELP: &str = "\
Input rows: timestamp_ns,key[,cost[,kind[,id]]]   (header optional; cost
  defaults to 1, kind to take; kinds: take, check, charge, reserve (cost =
  estimate), settle (cost = actual), release; reserve/settle/release name a
  reservation by id)
Output rows: timestamp_ns,key,allowed,remaining,retry_after_ns,reset_after_ns,delay_ns
  [,kind,charged,refunded when the first line has a kind column]
  (retry_after_ns is empty when no wait can admit the request; delay_ns is
  non-zero only for leaky-queue; charge, settle and release answer a query
  right after). Each key has its own state.

Examples:
  drl replay --algorithm gcra --quota 100/s --burst 20 access.csv
  drl replay -a sliding-window -q 10/s -q 300/min - < trace.csv
  drl replay -a token-bucket -q 5/s --summary access.csv
  drl replay -a gcra -q 100/s --store redis://127.0.0.1:6379 access.csv > redis.csv
  drl replay -a gcra -q 100/s --store redis://127.0.0.1:6379 --redis-engine module access.csv

With --store the Redis scripts (or, with --redis-engine module, drl's Redis
module) decide with the trace's timestamps; their output equals the
in-memory output byte for byte (docs/semantics.md). With --store only take
and charge rows replay (a check, reserve, settle or release row is an
error).";

/// Rows decided per round trip with --store (one ordered pipeline).
const CHUNK: usize = 512;

/// Where decisions are made.
enum Backend {
    /// In this process, one state per key.
    Memory(Box<MemoryReplay>),
    /// Through Redis scripts, with the trace's timestamps.
    Redis(Box<RedisReplay>),
}

/// Deciding in this process: drl-core's `MultiLimiter`, one state per key,
/// and the open reservations by id.
struct MemoryReplay {
    limiter: MultiLimiter,
    states: HashMap<String, Vec<State>>,
    open: HashMap<String, Open>,
    ttl: u64,
}

/// A reservation a reserve row opened.
struct Open {
    key: String,
    estimate: u64,
    expires_at: u64,
    /// The quotas' marks when admitted; `None`: denied (settles nothing).
    marks: Option<Box<[Mark]>>,
}

/// What one row did.
#[derive(Debug, Clone, Copy)]
struct Outcome {
    /// The decision (for charge, settle and release: a query right after).
    decision: Decision,
    /// Units charged beyond the estimate (settle only).
    charged: u64,
    /// Units refunded (settle and release only).
    refunded: u64,
}

impl Outcome {
    fn of(decision: Decision) -> Self {
        Self {
            decision,
            charged: 0,
            refunded: 0,
        }
    }
}

/// What deciding through Redis needs.
struct RedisReplay {
    rt: tokio::runtime::Runtime,
    store: drl_store::RedisStore,
    spec: drl_store::LimitSpec,
}

impl MemoryReplay {
    /// One row, as docs/semantics.md ("Costs known afterwards") says;
    /// settle follows drl-core's `KeyedLimiter::settle` on the same parts.
    fn row(&mut self, row: &Row) -> anyhow::Result<Outcome> {
        let limiter = &self.limiter;
        let states = match self.states.get_mut(&row.key) {
            Some(s) => s,
            None => self
                .states
                .entry(row.key.clone())
                .or_insert_with(|| limiter.new_states()),
        };
        let now = row.now;
        Ok(match row.kind {
            Kind::Take => Outcome::of(limiter.decide(states, now, row.cost)),
            Kind::Check => Outcome::of(limiter.check(states, now, row.cost)),
            Kind::Charge => Outcome::of(limiter.charge(states, now, row.cost)),
            Kind::Reserve => {
                if self.open.contains_key(&row.id) {
                    bail!(
                        "the row at {now} for key {:?} reserves id {:?}, which is still open",
                        row.key,
                        row.id
                    );
                }
                let (d, marks) = limiter.reserve(states, now, row.cost);
                self.open.insert(
                    row.id.clone(),
                    Open {
                        key: row.key.clone(),
                        estimate: row.cost,
                        expires_at: now.saturating_add(self.ttl),
                        marks,
                    },
                );
                Outcome::of(d)
            }
            Kind::Settle | Kind::Release => {
                let what = row.kind.name();
                let Some(r) = self.open.remove(&row.id) else {
                    bail!(
                        "the row at {now} for key {:?} {what}s id {:?}, which no reserve row opened (or is closed)",
                        row.key,
                        row.id
                    );
                };
                if r.key != row.key {
                    bail!(
                        "the row at {now} {what}s id {:?} for key {:?}, but it was reserved for key {:?}",
                        row.id,
                        row.key,
                        r.key
                    );
                }
                let actual = if row.kind == Kind::Release {
                    0
                } else {
                    row.cost
                };
                let Some(marks) = r.marks else {
                    // Denied: it holds nothing; the answer is a query.
                    return Ok(Outcome::of(limiter.check(states, now, 0)));
                };
                let expired = now >= r.expires_at;
                if actual > r.estimate {
                    let extra = actual - r.estimate;
                    Outcome {
                        decision: limiter.charge(states, now, extra),
                        charged: extra,
                        refunded: 0,
                    }
                } else if actual < r.estimate && !expired {
                    let back = r.estimate - actual;
                    Outcome {
                        decision: limiter.refund(states, now, &marks, back),
                        charged: 0,
                        refunded: back,
                    }
                } else {
                    Outcome::of(limiter.check(states, now, 0))
                }
            }
        })
    }
}

impl Backend {
    fn new(args: &Args, limiter: MultiLimiter) -> anyhow::Result<Self> {
        let Some(url) = &args.store else {
            return Ok(Backend::Memory(Box::new(MemoryReplay {
                limiter,
                states: HashMap::new(),
                open: HashMap::new(),
                ttl: args.reservation_ttl_ms.saturating_mul(1_000_000),
            })));
        };
        let urls: Vec<&str> = url
            .split(',')
            .map(str::trim)
            .filter(|u| !u.is_empty())
            .collect();
        let mut cfg = match urls.as_slice() {
            [] => bail!("--store needs a URL such as redis://127.0.0.1:6379"),
            [one] => drl_store::RedisConfig::single(*one),
            many => drl_store::RedisConfig::cluster(many.iter().copied()),
        };
        cfg.time = drl_store::TimeSource::Caller;
        cfg.engine = args.redis_engine.unwrap_or_default();
        cfg.key_prefix = match &args.key_prefix {
            Some(p) => p.clone(),
            None => format!(
                "drl-replay:{}-{}:",
                std::process::id(),
                drl_core::Clock::now(&drl_core::SystemClock)
            ),
        };
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("cannot start the async runtime")?;
        let store = rt
            .block_on(async {
                let s = drl_store::RedisStore::connect(&cfg).await?;
                s.ping().await?;
                Ok::<_, drl_store::StoreError>(s)
            })
            .with_context(|| format!("cannot reach Redis at {url}"))?;
        // Lua: loads the scripts; module: checks DRL.VERSION, so a missing
        // module is reported before the first row.
        rt.block_on(store.load_script())
            .with_context(|| format!("cannot decide with Redis at {url}"))?;
        let spec = drl_store::LimitSpec::new(
            "replay",
            args.algorithm,
            limiter.parts().iter().map(|l| *l.quota()).collect(),
        );
        Ok(Backend::Redis(Box::new(RedisReplay { rt, store, spec })))
    }

    /// Decides `rows` in order.
    fn decide(&mut self, rows: &[Row]) -> anyhow::Result<Vec<Outcome>> {
        match self {
            Backend::Memory(m) => rows.iter().map(|row| m.row(row)).collect(),
            Backend::Redis(r) => {
                use drl_store::Store;
                let RedisReplay { rt, store, spec } = &**r;
                fn check<'a>(spec: &'a drl_store::LimitSpec, r: &'a Row) -> drl_store::Check<'a> {
                    drl_store::Check {
                        spec,
                        key: &r.key,
                        cost: r.cost,
                        now: r.now,
                    }
                }
                let failed = |r: &Row| {
                    format!(
                        "Redis failed to decide the row at {} for key {:?}",
                        r.now, r.key
                    )
                };
                let mut out = Vec::with_capacity(rows.len());
                let mut rest = rows;
                while let Some(first) = rest.first() {
                    match first.kind {
                        Kind::Take => {
                            // A run of takes: one ordered pipeline.
                            let n = rest
                                .iter()
                                .position(|r| r.kind != Kind::Take)
                                .unwrap_or(rest.len());
                            let (run, tail) = rest.split_at(n);
                            let checks: Vec<_> = run.iter().map(|r| check(spec, r)).collect();
                            for (d, r) in
                                rt.block_on(store.decide_many(&checks)).into_iter().zip(run)
                            {
                                out.push(Outcome::of(d.with_context(|| failed(r))?));
                            }
                            rest = tail;
                        }
                        Kind::Charge => {
                            let d = rt
                                .block_on(store.charge(check(spec, first)))
                                .with_context(|| failed(first))?;
                            out.push(Outcome::of(d));
                            rest = &rest[1..];
                        }
                        other => bail!(
                            "the row at {} for key {:?} is a {}: with --store, replay takes and charges only (reservations and checks replay in memory)",
                            first.now,
                            first.key,
                            other.name()
                        ),
                    }
                }
                Ok(out)
            }
        }
    }
}

fn parse_algorithm(s: &str) -> Result<Algorithm, String> {
    s.parse()
        .map_err(|e: drl_core::UnknownAlgorithm| e.to_string())
}

fn parse_engine(s: &str) -> Result<drl_store::Engine, String> {
    match s {
        "lua" => Ok(drl_store::Engine::Lua),
        "module" => Ok(drl_store::Engine::Module),
        other => Err(format!("unknown engine {other:?}: expected lua or module")),
    }
}

fn parse_quota(s: &str) -> Result<Quota, String> {
    Quota::parse(s).map_err(|e| e.to_string())
}

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

    fn name(self) -> &'static str {
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
fn parse_row(rec: &csv::StringRecord, line: u64) -> anyhow::Result<Row> {
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

/// Per-key totals for `--summary`.
#[derive(Debug, Default, Clone, Copy)]
struct Tally {
    admitted: u64,
    denied: u64,
    admitted_cost: u128,
    denied_cost: u128,
}

/// Runs `drl replay`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let limiter = limiter(&args)?;
    let input: Box<dyn BufRead> = if args.file.as_os_str() == "-" {
        Box::new(BufReader::new(io::stdin().lock()))
    } else {
        Box::new(BufReader::new(File::open(&args.file).with_context(
            || format!("cannot open {}", args.file.display()),
        )?))
    };
    let rows_out: Option<Box<dyn Write>> = match (&args.output, args.summary) {
        (Some(p), _) => Some(Box::new(
            File::create(p).with_context(|| format!("cannot create {}", p.display()))?,
        )),
        (None, false) => Some(Box::new(io::stdout().lock())),
        (None, true) => None,
    };
    let mut tallies: BTreeMap<String, Tally> = BTreeMap::new();
    let mut writer =
        rows_out.map(|w| csv::Writer::from_writer(BufWriter::with_capacity(1 << 16, w)));
    // Written before the first row: with the kind columns when the
    // trace's first line has a kind column.
    let mut extended: Option<bool> = None;
    let mut backend = Backend::new(&args, limiter)?;
    let mut chunk: Vec<Row> = Vec::with_capacity(CHUNK);
    let mut header_done = false;
    let mut flush = |chunk: &mut Vec<Row>, ext: bool| -> anyhow::Result<()> {
        if let (Some(w), false) = (writer.as_mut(), header_done) {
            header_done = true;
            let mut cols = vec![
                "timestamp_ns",
                "key",
                "allowed",
                "remaining",
                "retry_after_ns",
                "reset_after_ns",
                "delay_ns",
            ];
            if ext {
                cols.extend(["kind", "charged", "refunded"]);
            }
            w.write_record(cols)?;
        }
        let outcomes = backend.decide(chunk)?;
        for (row, o) in chunk.iter().zip(&outcomes) {
            if args.summary {
                tally(tallies.entry(row.key.clone()).or_default(), row, o);
            }
            if let Some(w) = writer.as_mut() {
                write_decision(w, row, o, ext)?;
            }
        }
        chunk.clear();
        Ok(())
    };
    replay_records(input, |row, has_kind| {
        let ext = *extended.get_or_insert(has_kind);
        chunk.push(row.clone());
        if chunk.len() == CHUNK {
            flush(&mut chunk, ext)?;
        }
        Ok(())
    })?;
    flush(&mut chunk, extended.unwrap_or(false))?;
    if let Some(mut w) = writer {
        w.flush().context("cannot write the decisions")?;
    }
    if args.summary {
        print_summary(&tallies)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The limiter the arguments describe.
fn limiter(args: &Args) -> anyhow::Result<MultiLimiter> {
    let quotas = match (args.burst, args.quota.as_slice()) {
        (None, qs) => qs.to_vec(),
        (Some(b), [q]) => vec![q.burst_of(b).context("invalid --burst")?],
        (Some(_), _) => bail!("--burst applies to a single --quota; give one quota per limit"),
    };
    Ok(MultiLimiter::uniform(args.algorithm, &quotas))
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
fn replay_records(
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

/// Adds what `row` did to its key's tally: takes and reserves count as
/// requests; the consumed cost counts admitted takes and reserves, charges,
/// and settlements' charges less their refunds.
fn tally(t: &mut Tally, row: &Row, o: &Outcome) {
    match row.kind {
        Kind::Take | Kind::Reserve if o.decision.allowed => {
            t.admitted += 1;
            t.admitted_cost += row.cost as u128;
        }
        Kind::Take | Kind::Reserve => {
            t.denied += 1;
            t.denied_cost += row.cost as u128;
        }
        Kind::Charge => t.admitted_cost += row.cost as u128,
        Kind::Settle | Kind::Release => {
            t.admitted_cost =
                (t.admitted_cost + o.charged as u128).saturating_sub(o.refunded as u128);
        }
        Kind::Check => {}
    }
}

fn write_decision<W: Write>(
    w: &mut csv::Writer<W>,
    row: &Row,
    o: &Outcome,
    extended: bool,
) -> anyhow::Result<()> {
    let d = &o.decision;
    let (mut ts, mut rem, mut retry, mut reset, mut delay) = (
        itoa::Buffer::new(),
        itoa::Buffer::new(),
        itoa::Buffer::new(),
        itoa::Buffer::new(),
        itoa::Buffer::new(),
    );
    if extended {
        let (mut ch, mut rf) = (itoa::Buffer::new(), itoa::Buffer::new());
        w.write_record([
            ts.format(row.now),
            row.key.as_str(),
            if d.allowed { "true" } else { "false" },
            rem.format(d.remaining),
            match d.retry_after {
                Some(r) => retry.format(r),
                None => "",
            },
            reset.format(d.reset_after),
            delay.format(d.delay),
            row.kind.name(),
            ch.format(o.charged),
            rf.format(o.refunded),
        ])?;
        return Ok(());
    }
    w.write_record([
        ts.format(row.now),
        row.key.as_str(),
        if d.allowed { "true" } else { "false" },
        rem.format(d.remaining),
        match d.retry_after {
            Some(r) => retry.format(r),
            None => "",
        },
        reset.format(d.reset_after),
        delay.format(d.delay),
    ])?;
    Ok(())
}

fn print_summary(tallies: &BTreeMap<String, Tally>) -> anyhow::Result<()> {
    let mut out = io::stdout().lock();
    let width = tallies.keys().map(|k| k.len()).max().unwrap_or(3).max(3);
    writeln!(
        out,
        "{:<width$}  {:>10}  {:>10}  {:>8}  {:>14}  {:>14}",
        "key", "admitted", "denied", "denied%", "admitted_cost", "denied_cost"
    )?;
    let mut total = Tally::default();
    for (k, t) in tallies {
        writeln!(out, "{}", summary_line(k, t, width))?;
        total.admitted += t.admitted;
        total.denied += t.denied;
        total.admitted_cost += t.admitted_cost;
        total.denied_cost += t.denied_cost;
    }
    writeln!(out, "{}", summary_line("(all)", &total, width))?;
    Ok(())
}

fn summary_line(key: &str, t: &Tally, width: usize) -> String {
    let n = t.admitted + t.denied;
    let pct = if n == 0 {
        0.0
    } else {
        100.0 * t.denied as f64 / n as f64
    };
    format!(
        "{key:<width$}  {:>10}  {:>10}  {:>7.2}%  {:>14}  {:>14}",
        t.admitted, t.denied, pct, t.admitted_cost, t.denied_cost
    )
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
