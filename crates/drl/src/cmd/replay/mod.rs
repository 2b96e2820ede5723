//! `drl replay`: decide a CSV trace offline, exactly as a limit would have
//! (the format is in `docs/semantics.md`, "Replay format").

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, BufRead, BufReader, BufWriter, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, bail};
use drl_core::{Algorithm, MultiLimiter, Quota};

mod decide;
mod trace;

use decide::{Outcome, Replay};
use trace::replay_records;
pub use trace::{Kind, Row};

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
module) decide with the trace's timestamps; every kind of row replays
there, and the output equals the in-memory output byte for byte
(docs/semantics.md).";

/// Rows decided per round trip with --store (one ordered pipeline).
const CHUNK: usize = 512;

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
    let mut backend = Replay::new(&args, limiter)?;
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
