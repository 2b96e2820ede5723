//! `drl replay`: decide a CSV trace offline, exactly as a limit would have
//! (the format is in `docs/semantics.md`, "Replay format").

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{self, BufRead, BufReader, BufWriter, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, bail};
use drl_core::{Algorithm, Decision, MultiLimiter, Quota, State};

/// Decide a CSV trace of requests offline, as a limit would have.
///
/// Input rows are `timestamp_ns,key[,cost]` (a header line starting with
/// `timestamp` is optional; cost defaults to 1). Each key has its own state.
/// Output rows are
/// `timestamp_ns,key,allowed,remaining,retry_after_ns,reset_after_ns,delay_ns`.
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
    /// The trace; `-` reads standard input.
    pub file: PathBuf,
}

const AFTER_HELP: &str = "\
Input rows: timestamp_ns,key[,cost]   (header optional; cost defaults to 1)
Output rows: timestamp_ns,key,allowed,remaining,retry_after_ns,reset_after_ns,delay_ns
  (retry_after_ns is empty when no wait can admit the request; delay_ns is
  non-zero only for leaky-queue). Each key has its own state.

Examples:
  drl replay --algorithm gcra --quota 100/s --burst 20 access.csv
  drl replay -a sliding-window -q 10/s -q 300/min - < trace.csv
  drl replay -a token-bucket -q 5/s --summary access.csv
  drl replay -a gcra -q 100/s --store redis://127.0.0.1:6379 access.csv > redis.csv
  drl replay -a gcra -q 100/s --store redis://127.0.0.1:6379 --redis-engine module access.csv

With --store the Redis scripts (or, with --redis-engine module, drl's Redis
module) decide with the trace's timestamps; their output equals the
in-memory output byte for byte (docs/semantics.md).";

/// Rows decided per round trip with --store (one ordered pipeline).
const CHUNK: usize = 512;

/// Where decisions are made.
enum Backend {
    /// In this process, one state per key.
    Memory {
        limiter: MultiLimiter,
        states: HashMap<String, Vec<State>>,
    },
    /// Through Redis scripts, with the trace's timestamps.
    Redis(Box<RedisReplay>),
}

/// What deciding through Redis needs.
struct RedisReplay {
    rt: tokio::runtime::Runtime,
    store: drl_store::RedisStore,
    spec: drl_store::LimitSpec,
}

impl Backend {
    fn new(args: &Args, limiter: MultiLimiter) -> anyhow::Result<Self> {
        let Some(url) = &args.store else {
            return Ok(Backend::Memory {
                limiter,
                states: HashMap::new(),
            });
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
    fn decide(&mut self, rows: &[Row]) -> anyhow::Result<Vec<Decision>> {
        match self {
            Backend::Memory { limiter, states } => Ok(rows
                .iter()
                .map(|row| {
                    let s = match states.get_mut(&row.key) {
                        Some(s) => s,
                        None => states
                            .entry(row.key.clone())
                            .or_insert_with(|| limiter.new_states()),
                    };
                    limiter.decide(s, row.now, row.cost)
                })
                .collect()),
            Backend::Redis(r) => {
                use drl_store::Store;
                let RedisReplay { rt, store, spec } = &**r;
                let checks: Vec<drl_store::Check<'_>> = rows
                    .iter()
                    .map(|r| drl_store::Check {
                        spec,
                        key: &r.key,
                        cost: r.cost,
                        now: r.now,
                    })
                    .collect();
                rt.block_on(store.decide_many(&checks))
                    .into_iter()
                    .zip(rows)
                    .map(|(d, r)| {
                        d.with_context(|| {
                            format!(
                                "Redis failed to decide the row at {} for key {:?}",
                                r.now, r.key
                            )
                        })
                    })
                    .collect()
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

/// One input row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    /// `timestamp_ns`.
    pub now: u64,
    /// `key`.
    pub key: String,
    /// `cost` (default 1).
    pub cost: u64,
}

/// Parses one CSV record; `line` is 1-based for messages.
fn parse_row(rec: &csv::StringRecord, line: u64) -> anyhow::Result<Row> {
    if rec.len() < 2 || rec.len() > 3 {
        bail!(
            "line {line}: expected 2 or 3 fields (timestamp_ns,key[,cost]), found {}",
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
    Ok(Row { now, key, cost })
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
    if let Some(w) = writer.as_mut() {
        w.write_record([
            "timestamp_ns",
            "key",
            "allowed",
            "remaining",
            "retry_after_ns",
            "reset_after_ns",
            "delay_ns",
        ])?;
    }
    let mut backend = Backend::new(&args, limiter)?;
    let mut chunk: Vec<Row> = Vec::with_capacity(CHUNK);
    let mut flush = |chunk: &mut Vec<Row>| -> anyhow::Result<()> {
        let decisions = backend.decide(chunk)?;
        for (row, d) in chunk.iter().zip(&decisions) {
            if args.summary {
                let t = tallies.entry(row.key.clone()).or_default();
                if d.allowed {
                    t.admitted += 1;
                    t.admitted_cost += row.cost as u128;
                } else {
                    t.denied += 1;
                    t.denied_cost += row.cost as u128;
                }
            }
            if let Some(w) = writer.as_mut() {
                write_decision(w, row, d)?;
            }
        }
        chunk.clear();
        Ok(())
    };
    replay_rows(input, |row| {
        chunk.push(row.clone());
        if chunk.len() == CHUNK {
            flush(&mut chunk)?;
        }
        Ok(())
    })?;
    flush(&mut chunk)?;
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
pub fn replay_rows(
    input: impl io::Read,
    mut f: impl FnMut(&Row) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
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
            if rec
                .get(0)
                .is_some_and(|f| f.trim().to_ascii_lowercase().starts_with("timestamp"))
            {
                continue;
            }
        }
        let row = parse_row(&rec, line)?;
        f(&row)?;
    }
}

fn write_decision<W: Write>(w: &mut csv::Writer<W>, row: &Row, d: &Decision) -> anyhow::Result<()> {
    let (mut ts, mut rem, mut retry, mut reset, mut delay) = (
        itoa::Buffer::new(),
        itoa::Buffer::new(),
        itoa::Buffer::new(),
        itoa::Buffer::new(),
        itoa::Buffer::new(),
    );
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
                    cost: 1
                },
                Row {
                    now: 6,
                    key: "b,c".into(),
                    cost: 3
                },
            ]
        );
    }

    #[test]
    fn bad_rows_name_their_line() {
        for (input, msg) in [
            (&b"1,a\nx,b\n"[..], "line 2: timestamp_ns \"x\""),
            (&b"1,a\n2,b,-1\n"[..], "line 2: cost \"-1\""),
            (&b"1\n"[..], "line 1: expected 2 or 3 fields"),
            (&b"1,a,1,1\n"[..], "line 1: expected 2 or 3 fields"),
            (&b"1,a,99999999999999999999\n"[..], "line 1: cost"),
        ] {
            let err = replay_rows(input, |_| Ok(())).unwrap_err().to_string();
            assert!(err.starts_with(msg), "{err:?} should start with {msg:?}");
        }
    }
}
