//! One soak run: start the processes, drive the load, inject the faults,
//! check every second, sample resources, and write the results.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs::File;
use std::io::BufWriter;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::checks::Checker;
use crate::faults::{self, Shared};
use crate::load::{self, BAD_INPUTS, Recorder, Target, unix_ns};
use crate::processes::{Group, wait_ready};
use crate::resources::{self, Resources};
use crate::topology::{Broken, Topology};

/// What to run.
#[derive(Debug, Clone)]
pub struct Options {
    /// How long the load runs.
    pub duration: Duration,
    /// Seed of the fault schedule and of the flood keys.
    pub seed: u64,
    /// Where the results go (created).
    pub out: PathBuf,
    /// The `drl` binary.
    pub drl: PathBuf,
    /// A deliberate misconfiguration (self-test of the checks).
    pub broken: Option<Broken>,
    /// Gossip findings do not fail the run (see `Checker::gossip_advisory`).
    pub gossip_advisory: bool,
}

/// What a run found.
#[derive(Debug)]
pub struct Report {
    /// Every failed check, as printed.
    pub failures: Vec<String>,
    /// The summary text (also in `summary.txt`).
    pub summary: String,
}

/// Runs a soak with `opts` (builds its own tokio runtime).
pub fn run(opts: &Options) -> Result<Report> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(soak(opts))
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

async fn soak(opts: &Options) -> Result<Report> {
    std::fs::create_dir_all(&opts.out).with_context(|| format!("create {}", opts.out.display()))?;
    let logs = opts.out.join("logs");
    std::fs::create_dir_all(&logs)?;
    let dir = tempfile::tempdir()?;
    let topo = Topology::new(dir.path(), &logs, opts.broken)?;
    topo.write_configs()?;
    let load_at_start = loadavg();
    let http = reqwest::Client::builder()
        .pool_idle_timeout(Duration::from_secs(5))
        // After a stopped node resumes, its delayed requests each open a
        // connection; without this bound the pool keeps all of them warm
        // (reused in turn, never idle 5 s) and the fd check would judge
        // the client's pool instead of the server.
        .pool_max_idle_per_host(4)
        .timeout(load::TIMEOUT)
        .connect_timeout(Duration::from_secs(1))
        .build()?;

    let sh = Arc::new(Shared {
        topo: Mutex::new(topo),
        drl: opts.drl.clone(),
        injected: Mutex::new(Vec::new()),
        failures: Mutex::new(Vec::new()),
        t0_ns: Default::default(),
    });
    let (targets, names, groups) = start(&sh, opts, &http, &logs).await?;

    let rec = Arc::new(Recorder::new());
    // The fault task's messages count seconds from the load's start too.
    sh.t0_ns.store(rec.t0_ns, Ordering::Relaxed);
    let stop = Arc::new(AtomicBool::new(false));
    let mut loads = Vec::new();
    for t in &targets {
        loads.push(tokio::spawn(load::drive(
            t.clone(),
            rec.clone(),
            http.clone(),
            stop.clone(),
            opts.seed,
        )));
    }
    let fault_task = tokio::spawn(faults::run(
        sh.clone(),
        http.clone(),
        opts.seed,
        Duration::from_secs(15),
        opts.duration,
        stop.clone(),
    ));

    let checks_log = BufWriter::new(File::create(opts.out.join("checks.log"))?);
    let mut checker = Checker::new(
        names.clone(),
        groups.clone(),
        rec.t0_ns,
        Box::new(checks_log),
    );
    checker.gossip_advisory = opts.gossip_advisory;
    let mut res = Resources::new(Box::new(BufWriter::new(File::create(
        opts.out.join("resources.csv"),
    )?)));
    let begin = Instant::now();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let mut n = 0u64;
    while begin.elapsed() < opts.duration {
        tick.tick().await;
        n += 1;
        let faults_now = sh.injected.lock().unwrap().clone();
        checker.step(&rec, &faults_now, unix_ns());
        if n % resources::EVERY.as_secs() == 1 {
            let pids: Vec<(String, u32)> = {
                let t = sh.topo.lock().unwrap();
                t.procs
                    .iter()
                    .filter_map(|p| p.pid().map(|pid| (p.name.clone(), pid)))
                    .collect()
            };
            res.sample(begin.elapsed().as_secs(), &pids);
        }
        if n % 10 == 0 {
            progress(n, &rec, &faults_now, &checker, &sh);
        }
    }
    let end_ns = unix_ns();
    stop.store(true, Ordering::Relaxed);
    for l in loads {
        let _ = l.await;
    }
    let drain = Instant::now();
    while rec.in_flight.load(Ordering::Relaxed) > 0
        && drain.elapsed() < load::TIMEOUT + Duration::from_secs(2)
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let _ = fault_task.await;
    let faults_all = sh.injected.lock().unwrap().clone();
    checker.upto(&rec, &faults_all, end_ns);

    let warmup = (opts.duration.as_secs() / 5).max(30);
    let (res_fail, res_lines) = res.verdict(warmup);
    let failures = failures_of(&sh, &checker, res_fail);
    {
        let mut t = sh.topo.lock().unwrap();
        for p in t.procs.iter_mut() {
            p.terminate(Duration::from_secs(5));
        }
    }

    let summary = summarize(
        opts,
        &rec,
        &faults_all,
        &checker,
        &res,
        &res_lines,
        &failures,
        &load_at_start,
        warmup,
    );
    std::fs::write(opts.out.join("summary.txt"), &summary)?;
    Ok(Report { failures, summary })
}

/// Starts Redis, then every node, and waits until each answers; the load
/// targets, and every process's name and group.
async fn start(
    sh: &Shared,
    opts: &Options,
    http: &reqwest::Client,
    logs: &std::path::Path,
) -> Result<(Vec<Target>, Vec<String>, Vec<Group>)> {
    // Redis first (the Redis nodes connect at start), then every node.
    let started = Instant::now();
    let redis = sh.topo.lock().unwrap().redis_server();
    let order: Vec<usize> = std::iter::once(redis).chain(0..redis).collect();
    for (k, &i) in order.iter().enumerate() {
        let (group, addr) = {
            let mut t = sh.topo.lock().unwrap();
            t.procs[i].spawn(&opts.drl)?;
            (t.procs[i].group, t.procs[i].http)
        };
        if k == 0 {
            wait_ready(http, group, addr).await?;
        }
    }
    let targets: Vec<Target> = {
        let t = sh.topo.lock().unwrap();
        (0..redis)
            .map(|i| Target {
                node: i,
                group: t.procs[i].group,
                http: t.procs[i].http,
                grpc: t.procs[i].grpc,
            })
            .collect()
    };
    for t in &targets {
        wait_ready(http, t.group, t.http)
            .await
            .with_context(|| format!("node {} (log: {})", t.node, logs.display()))?;
    }
    let (names, groups): (Vec<String>, Vec<Group>) = {
        let t = sh.topo.lock().unwrap();
        t.procs.iter().map(|p| (p.name.clone(), p.group)).unzip()
    };
    eprintln!(
        "drl-soak: {} processes ready in {:?}; load for {:?}",
        names.len(),
        started.elapsed(),
        opts.duration
    );
    Ok((targets, names, groups))
}

/// One progress line on stderr.
fn progress(
    n: u64,
    rec: &Recorder,
    faults_now: &[crate::faults::Injected],
    checker: &Checker,
    sh: &Shared,
) {
    let (req, ans, err) = rec.with(|c| {
        (
            c.requests.values().sum::<u64>(),
            c.answered,
            c.errors.values().sum::<u64>(),
        )
    });
    eprintln!(
        "drl-soak: s={n} requests={req} answered={ans} errors={err} faults={} failures={} load={}",
        faults_now.len(),
        checker.failures.len() + sh.failures.lock().unwrap().len(),
        loadavg()
    );
}

/// Every failure: the fault task's, panics in any node's log, the
/// checker's and the resource verdict's (printed unless the checker
/// already printed them).
fn failures_of(sh: &Shared, checker: &Checker, res_fail: Vec<String>) -> Vec<String> {
    // Panics in any node's log are failures too.
    let mut failures = sh.failures.lock().unwrap().clone();
    for p in sh.topo.lock().unwrap().procs.iter() {
        let panics = p.count_log("panicked");
        if panics > 0 {
            failures.push(format!(
                "logs: {} logged {panics} panic(s) (see {})",
                p.name,
                p.log.display()
            ));
        }
    }
    failures.extend(checker.failures.iter().cloned());
    failures.extend(res_fail);
    for f in &failures {
        if !checker.failures.contains(f) {
            eprintln!("FAIL {f}");
        }
    }
    failures
}

#[allow(clippy::too_many_arguments)]
fn summarize(
    opts: &Options,
    rec: &Recorder,
    faults: &[faults::Injected],
    checker: &Checker,
    res: &Resources,
    res_lines: &[String],
    failures: &[String],
    load_at_start: &str,
    warmup: u64,
) -> String {
    let secs = opts.duration.as_secs_f64();
    let mut s = String::new();
    let _ = writeln!(s, "drl-soak summary");
    let _ = writeln!(
        s,
        "seed {} | load {:.0} s | broken: {} | drl: {}",
        opts.seed,
        secs,
        opts.broken
            .map(|b| format!("{b:?}"))
            .unwrap_or_else(|| "no".into()),
        opts.drl.display()
    );
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    let _ = writeln!(
        s,
        "machine: {cores} cores, load average at start {load_at_start}, at end {}",
        loadavg()
    );
    rec.with(|c| {
        let total: u64 = c.requests.values().sum();
        let _ = writeln!(s, "\nrequests: {total} ({:.1}/s)", total as f64 / secs);
        for (k, v) in &c.requests {
            let _ = writeln!(s, "  {k:<6} {v:>10} ({:.1}/s)", *v as f64 / secs);
        }
        let _ = writeln!(s, "checks sent by limit:");
        for (k, v) in &c.checks {
            let _ = writeln!(s, "  {k:<6} {v:>10} ({:.1}/s)", *v as f64 / secs);
        }
        let _ = writeln!(
            s,
            "answered: {} ({:.3}% of requests)",
            c.answered,
            100.0 * c.answered as f64 / total.max(1) as f64
        );
        let _ = writeln!(s, "errors by kind:");
        if c.errors.is_empty() {
            let _ = writeln!(s, "  none");
        }
        for (k, v) in &c.errors {
            let _ = writeln!(s, "  {k:<24} {v:>8}");
        }
        let _ = writeln!(
            s,
            "admissions whose window could not be told (answer slower than a window):"
        );
        if c.unattributed.is_empty() {
            let _ = writeln!(s, "  none");
        }
        for (k, v) in &c.unattributed {
            let _ = writeln!(s, "  {k:<6} {v:>8}");
        }
        let _ = writeln!(s, "bad inputs tried (kind: answer -> count):");
        for kind in BAD_INPUTS {
            let got: Vec<String> = c
                .bad
                .iter()
                .filter(|((k, _), _)| *k == kind)
                .map(|((_, st), n)| format!("{st} x{n}"))
                .collect();
            let _ = writeln!(s, "  {kind:<20} {}", got.join(", "));
        }
    });
    let mut by_kind: BTreeMap<&str, u64> = BTreeMap::new();
    for f in faults {
        *by_kind.entry(f.kind).or_default() += 1;
    }
    let _ = writeln!(s, "\nfaults injected: {}", faults.len());
    for (k, v) in &by_kind {
        let _ = writeln!(s, "  {k:<18} {v:>5}");
    }
    let _ = writeln!(
        s,
        "\nchecks (passed / failed / excluded, max admitted in a checked unit;"
    );
    let _ = writeln!(
        s,
        "  answers: failed = unexplained, excluded = failed connections to a node being killed or stopped):"
    );
    for (k, t) in &checker.tallies {
        let _ = writeln!(
            s,
            "  {k:<8} {:>6} / {:>4} / {:>5}  max {}",
            t.passed, t.failed, t.excluded, t.max
        );
    }
    let _ = writeln!(s, "\nresources (max over the run: RSS MiB, open fds):");
    for (k, (rss, fds)) in res.maxima() {
        let _ = writeln!(s, "  {k:<14} {:>8.1} MiB {fds:>5} fds", rss as f64 / 1024.0);
    }
    let _ = writeln!(s, "growth after a warm-up of {warmup} s per pid:");
    for l in res_lines {
        let _ = writeln!(s, "  {l}");
    }
    let _ = writeln!(s, "\nfailures: {}", failures.len());
    for f in failures.iter().take(100) {
        let _ = writeln!(s, "  {f}");
    }
    if failures.len() > 100 {
        let _ = writeln!(s, "  ... {} more in checks.log", failures.len() - 100);
    }
    let _ = writeln!(
        s,
        "\nverdict: {}",
        if failures.is_empty() { "PASS" } else { "FAIL" }
    );
    s
}
