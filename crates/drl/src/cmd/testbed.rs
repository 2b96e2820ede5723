//! `drl testbed`: the paper's setup on one machine, on real kernel TCP:
//! sites in network namespaces, each with bulk TCP senders and its
//! `drl relay`, a veth path to one shared receiver (docs/relay.md,
//! "Testbed").

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use drl_relay::netns::{RelayProcess, Topology, cleanup_prefix};
use drl_relay::report::{Parameters, Run, Summary, svg};
use drl_relay::traffic::{Senders, Sink, in_netns, metric};
use drl_relay::units::{parse_rate, parse_size};

/// Arguments of `drl testbed`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    cmd: Sub,
}

#[derive(Debug, clap::Subcommand)]
enum Sub {
    /// Figure 3 on real TCP: two sites (3 and 7 flows), one global limit,
    /// each algorithm in turn; writes summary.json, rates.csv, fig3.svg.
    Fig3(Fig3Args),
    /// Packets per second through a relay (a benchmark): the kernel
    /// forwarding alone, a no-op relay that accepts everything, and a
    /// relay whose GRD limit never drops (same queue, same batching).
    Pps(PpsArgs),
    /// Remove every namespace (and with it the relays' rules) a killed
    /// testbed left behind.
    Cleanup {
        /// Namespace name prefix.
        #[arg(long, default_value = "drltb")]
        prefix: String,
    },
}

/// Arguments of `drl testbed fig3`.
#[derive(Debug, clap::Args)]
pub struct Fig3Args {
    /// Output directory.
    #[arg(long, default_value = "testbed-out/fig3")]
    out: PathBuf,
    /// Seconds per algorithm.
    #[arg(long, default_value_t = 60.0)]
    duration: f64,
    /// Seconds left out of the averages at the start.
    #[arg(long, default_value_t = 10.0)]
    warmup: f64,
    /// RTT the relays add by holding verdicts, ms.
    #[arg(long, default_value_t = 40)]
    rtt_ms: u64,
    /// Algorithms, comma-separated: ctb (one relay at the receiver sees
    /// all traffic), gtb, grd, fps (a relay per site, gossiping).
    #[arg(long, default_value = "ctb,gtb,grd,fps")]
    algorithms: String,
    /// TCP congestion control of the senders (reno, cubic, bbr).
    #[arg(long, default_value = "reno")]
    cc: String,
    /// The global limit.
    #[arg(long, default_value = "10Mbit/s")]
    limit: String,
    /// Token bucket depth (CTB, GTB, FPS; split over the sites by
    /// gossip scope).
    #[arg(long, default_value = "75000")]
    burst: String,
    /// Flows per site, comma-separated.
    #[arg(long, default_value = "3,7")]
    flows: String,
    /// Gossip (estimate) interval, ms.
    #[arg(long, default_value_t = 50)]
    interval_ms: u64,
    /// Round-trip time between the relays, ms: each gossip datagram is
    /// held half of it (the cluster transport's fault delay), as
    /// `drl sim --limiter-rtt-ms` does; 0 sends gossip at once.
    #[arg(long, default_value_t = 40)]
    limiter_rtt_ms: u64,
    /// Namespace name prefix (at most 8 bytes; a run first removes what
    /// an earlier run with this prefix left).
    #[arg(long, default_value = "drltb")]
    prefix: String,
}

/// Arguments of `drl testbed pps`.
#[derive(Debug, clap::Args)]
pub struct PpsArgs {
    /// Seconds per measurement.
    #[arg(long, default_value_t = 5.0)]
    seconds: f64,
    /// Rounds (each measures the no-op and the GRD relay once,
    /// interleaved; the kernel alone first and last).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// UDP payload bytes.
    #[arg(long, default_value_t = 64)]
    size: usize,
    /// Namespace name prefix.
    #[arg(long, default_value = "drlpps")]
    prefix: String,
    /// Where the relays' configs and logs go.
    #[arg(long, default_value = "testbed-out/pps")]
    out: PathBuf,
}

const PORT: u16 = 5001;
const GOSSIP_PORT: u16 = 7946;
/// [`relay_yaml`]'s pseudo-algorithm for the receiver's relay that only
/// holds verdicts (started with `--accept-all`): the RTT of the
/// per-site algorithms.
const DELAY_ONLY: &str = "delay";

/// Runs `drl testbed`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    match args.cmd {
        Sub::Cleanup { prefix } => {
            let removed = cleanup_prefix(&format!("{prefix}-"))?;
            println!(
                "removed {} namespaces: {}",
                removed.len(),
                removed.join(" ")
            );
            Ok(ExitCode::SUCCESS)
        }
        Sub::Fig3(a) => fig3(a),
        Sub::Pps(a) => pps(a),
    }
}

/// Set by SIGINT/SIGTERM: the run stops and cleans up.
fn stop_flag() -> Arc<AtomicBool> {
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    std::thread::spawn(move || {
        let Ok(rt) = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        else {
            return;
        };
        rt.block_on(async move {
            use tokio::signal::unix::{SignalKind, signal};
            let (Ok(mut t), Ok(mut i)) = (
                signal(SignalKind::terminate()),
                signal(SignalKind::interrupt()),
            ) else {
                return;
            };
            tokio::select! {
                _ = t.recv() => {}
                _ = i.recv() => {}
            }
            s.store(true, Ordering::Relaxed);
        });
    });
    stop
}

fn relay_yaml(
    site: usize,
    sites: &[SocketAddr],
    algorithm: &str,
    a: &Fig3Args,
    key: &Path,
) -> String {
    let peers: Vec<String> = sites.iter().map(|s| s.to_string()).collect();
    // The RTT is always added at the receiver's INPUT hook, never at a
    // sender's OUTPUT: a packet held there still counts against its
    // socket's TCP Small Queues budget (about two packets), which caps
    // each flow near 2 x 1.5 KB per RTT, about 1 Mbps at 40 ms, whatever
    // the limit (docs/relay.md, "Testbed").
    let delay = if algorithm == "ctb" || algorithm == DELAY_ONLY {
        a.rtt_ms
    } else {
        0
    };
    let common = format!(
        "queue: 0\ndelay_ms: {delay}\nlisten: 127.0.0.1:9464\nalgorithm: {}\n",
        if algorithm == DELAY_ONLY {
            "ctb"
        } else {
            algorithm
        }
    );
    let class = format!(
        "classes:\n  - name: fig3\n    match: {{ dst: 10.77.0.0/16, protocol: tcp, dport: {PORT} }}\n    \
         quota: {}\n    burst: {}\n",
        a.limit, a.burst
    );
    // No `faults:` key without a delay: a build without fault injection
    // refuses the key.
    let faults = match a.limiter_rtt_ms / 2 {
        0 => String::new(),
        d => format!("  faults: {{ delay_ms: {d} }}\n"),
    };
    if algorithm == "ctb" || algorithm == DELAY_ONLY {
        format!("{common}chain: INPUT\nscope: local\n{class}")
    } else {
        format!(
            "{common}chain: OUTPUT\nscope: gossip\ncluster:\n  node_id: {site}\n  bind: {}\n  \
             seeds: [{}]\n  key_file: {}\n  estimate_interval_ms: {}\n{faults}{class}",
            sites[site - 1],
            peers.join(", "),
            key.display(),
            a.interval_ms,
        )
    }
}

fn fig3(a: Fig3Args) -> anyhow::Result<ExitCode> {
    if a.prefix.is_empty() || a.prefix.len() > 8 {
        bail!("--prefix must be 1-8 bytes (namespace names derive from it)");
    }
    let limit_bps = parse_rate(&a.limit).map_err(anyhow::Error::msg)? * 8;
    let depth = parse_size(&a.burst).map_err(anyhow::Error::msg)?;
    let flows: Vec<usize> = a
        .flows
        .split(',')
        .map(|f| f.trim().parse())
        .collect::<Result<_, _>>()
        .context("--flows: comma-separated flow counts, e.g. 3,7")?;
    if flows.is_empty() || flows.contains(&0) {
        bail!("--flows: at least one site, each with at least one flow");
    }
    if a.warmup >= a.duration {
        bail!("--warmup must be shorter than --duration");
    }
    let algorithms: Vec<String> = a
        .algorithms
        .split(',')
        .map(|s| s.trim().to_string())
        .collect();
    for alg in &algorithms {
        if !["ctb", "gtb", "grd", "fps", "grd-smooth", "fps-mean"].contains(&alg.as_str()) {
            bail!("--algorithms: unknown {alg:?} (ctb, gtb, grd, fps, grd-smooth, fps-mean)");
        }
    }
    // The relays' gossip delay is the fault injector's (`cluster.faults`),
    // which only a build with the cargo feature `fault-injection` has.
    let gossip = algorithms.iter().any(|alg| alg != "ctb");
    if gossip && a.limiter_rtt_ms / 2 > 0 && !drl_cluster_net::FAULT_INJECTION {
        bail!(
            "--limiter-rtt-ms delays gossip with the cluster transport's fault injector, \
             which this build lacks: build drl with `--features fault-injection`, \
             or pass --limiter-rtt-ms 0"
        );
    }
    std::fs::create_dir_all(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
    let exe = std::env::current_exe().context("locating the drl binary")?;
    let stop = stop_flag();
    let stale = cleanup_prefix(&format!("{}-", a.prefix))?;
    if !stale.is_empty() {
        eprintln!(
            "testbed: removed namespaces left by an earlier run: {}",
            stale.join(" ")
        );
    }
    let topo = Topology::build(&a.prefix, flows.len(), None)
        .context("building the testbed (needs root: network namespaces, veth, iptables)")?;
    let key = a.out.join("cluster.key");
    let mut k = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut k))
        .context("reading /dev/urandom for the cluster key")?;
    std::fs::write(&key, k)?;
    let gossip: Vec<SocketAddr> = topo
        .sites
        .iter()
        .map(|s| SocketAddr::new(IpAddr::V4(s.addr), GOSSIP_PORT))
        .collect();
    let metrics_addr: SocketAddr = "127.0.0.1:9464".parse().expect("literal");
    let mut runs = Vec::new();
    for alg in &algorithms {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        eprintln!("testbed: {alg}: {} s", a.duration);
        let relays = start_relays(
            alg,
            &topo,
            &gossip,
            &a,
            &key,
            &exe,
            metrics_addr,
            flows.len(),
        )?;
        // Receiver, then senders.
        let sink = in_netns(topo.rx.name(), || {
            Sink::bind(SocketAddr::from(([0, 0, 0, 0], PORT)))
        })?;
        let mut senders = Vec::new();
        for (site, n) in topo.sites.iter().zip(&flows) {
            let dst = SocketAddr::new(IpAddr::V4(site.sink_addr), PORT);
            let (n, cc) = (*n, a.cc.clone());
            senders.push(in_netns(site.ns.name(), move || {
                Senders::start(dst, n, Some(&cc), None)
            })?);
        }
        let site_ips: Vec<IpAddr> = topo.sites.iter().map(|s| IpAddr::V4(s.addr)).collect();
        let samples = sample(&sink, &site_ips, &flows, a.duration, &stop);
        for s in senders {
            s.stop();
        }
        // Bytes each limiting relay allowed and dropped (the receiver's
        // delay line, first for the per-site algorithms, limits nothing).
        let limiting = if alg == "ctb" {
            &relays[..]
        } else {
            &relays[1..]
        };
        let relay_bytes = limiting
            .iter()
            .map(|r| {
                let m = r.metrics().unwrap_or_default();
                let bytes = |v: &str| {
                    metric(&m, "drl_relay_bytes_total", &[&format!("verdict=\"{v}\"")])
                        .unwrap_or(0.0)
                };
                (bytes("allowed"), bytes("dropped"))
            })
            .collect();
        for mut r in relays {
            r.stop();
        }
        drop(sink);
        runs.push(Run {
            algorithm: alg.clone(),
            flows_per_site: flows.clone(),
            samples,
            relay_bytes,
        });
    }
    drop(topo);
    if stop.load(Ordering::Relaxed) {
        eprintln!("testbed: interrupted; namespaces removed");
        return Ok(ExitCode::from(130));
    }
    let limit_mbps = limit_bps as f64 / 1e6;
    let summary = Summary {
        algorithms: runs
            .iter()
            .map(|r| (r.algorithm.clone(), r.summary(a.warmup, limit_mbps)))
            .collect::<BTreeMap<_, _>>(),
        parameters: Parameters {
            flows: flows.clone(),
            limit_mbps,
            depth_bytes: depth,
            flow_rtt_ms: a.rtt_ms as f64,
            estimate_interval_ms: a.interval_ms as f64,
            limiter_rtt_ms: a.limiter_rtt_ms as f64,
            duration_s: a.duration,
            warmup_s: a.warmup,
            congestion_control: a.cc.clone(),
        },
    };
    write_fig3(&a.out, &runs, &summary, limit_mbps, a.duration)?;
    Ok(ExitCode::SUCCESS)
}

/// Writes `summary.json`, `fig3.svg` and `rates.csv` into `out`, and one
/// line per algorithm on stdout.
fn write_fig3(
    out: &Path,
    runs: &[Run],
    summary: &Summary,
    limit_mbps: f64,
    duration: f64,
) -> anyhow::Result<()> {
    std::fs::write(out.join("summary.json"), summary.to_json())?;
    std::fs::write(out.join("fig3.svg"), svg(runs, limit_mbps, duration))?;
    let mut csv = String::from("algorithm,t_s,site,mbps\n");
    for r in runs {
        for (t, sites) in r.site_series(1.0) {
            for (i, v) in sites.iter().enumerate() {
                csv.push_str(&format!("{},{t:.1},{},{v:.6}\n", r.algorithm, i + 1));
            }
        }
    }
    std::fs::write(out.join("rates.csv"), csv)?;
    for (alg, s) in &summary.algorithms {
        println!(
            "{alg:>10}: aggregate {:.3} Mbps, sites {:?} Mbps, Jain {:.3}, relays dropped {:?} of the bytes offered",
            s.aggregate_mbps, s.limiter_mbps, s.jain, s.relay_drop_fraction
        );
    }
    println!(
        "wrote {}/{{summary.json,fig3.svg,rates.csv}}",
        out.display()
    );
    Ok(())
}

/// Starts the relays of one algorithm's run: one central relay for
/// `ctb`; otherwise the receiver's delay line and one relay per site,
/// waited on until each counts every site live.
#[allow(clippy::too_many_arguments)]
fn start_relays(
    alg: &str,
    topo: &Topology,
    gossip: &[SocketAddr],
    a: &Fig3Args,
    key: &Path,
    exe: &Path,
    metrics_addr: SocketAddr,
    sites: usize,
) -> anyhow::Result<Vec<RelayProcess>> {
    let mut relays = Vec::new();
    if alg == "ctb" {
        let cfg = a.out.join("relay-ctb.yaml");
        std::fs::write(&cfg, relay_yaml(0, gossip, alg, a, key))?;
        relays.push(RelayProcess::start(
            &topo.rx,
            exe,
            &cfg,
            metrics_addr,
            &a.out.join("relay-ctb.log"),
        )?);
    } else {
        let cfg = a.out.join("relay-delay.yaml");
        std::fs::write(&cfg, relay_yaml(0, gossip, DELAY_ONLY, a, key))?;
        relays.push(RelayProcess::start_with(
            &topo.rx,
            exe,
            &cfg,
            metrics_addr,
            &a.out.join(format!("relay-{alg}-delay.log")),
            &["--accept-all"],
        )?);
        for (i, site) in topo.sites.iter().enumerate() {
            let cfg = a.out.join(format!("relay-{alg}-{}.yaml", i + 1));
            std::fs::write(&cfg, relay_yaml(i + 1, gossip, alg, a, key))?;
            relays.push(RelayProcess::start(
                &site.ns,
                exe,
                &cfg,
                metrics_addr,
                &a.out.join(format!("relay-{alg}-{}.log", i + 1)),
            )?);
        }
        // Wait until every relay counts every site live.
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            // The first relay is the receiver's delay line.
            let live = relays.iter().skip(1).all(|r| {
                r.metrics()
                    .ok()
                    .and_then(|m| metric(&m, "drl_relay_live_nodes", &[]))
                    == Some(sites as f64)
            });
            if live {
                break;
            }
            if Instant::now() > deadline {
                bail!("{alg}: the relays did not see each other within 20 s");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    Ok(relays)
}

/// Samples the bytes the sink received from each flow every 100 ms until
/// `duration` seconds pass (or a stop): one row per sample, flows in site
/// order.
fn sample(
    sink: &Sink,
    site_ips: &[IpAddr],
    flows: &[usize],
    duration: f64,
    stop: &AtomicBool,
) -> Vec<(f64, Vec<u64>)> {
    let start = Instant::now();
    let mut samples = Vec::new();
    loop {
        let t = start.elapsed().as_secs_f64();
        let by_peer = sink.by_peer();
        let mut row = Vec::new();
        for (ip, n) in site_ips.iter().zip(flows) {
            let mut peers: Vec<(u16, u64)> = by_peer
                .iter()
                .filter(|(p, _)| p.ip() == *ip)
                .map(|(p, b)| (p.port(), *b))
                .collect();
            peers.sort_unstable();
            peers.resize(*n, (0, 0));
            row.extend(peers.iter().map(|(_, b)| *b));
        }
        samples.push((t, row));
        if t >= duration || stop.load(Ordering::Relaxed) {
            break;
        }
        let next = Duration::from_millis(100 * samples.len() as u64);
        std::thread::sleep(next.saturating_sub(start.elapsed()));
    }
    samples
}

fn pps(a: PpsArgs) -> anyhow::Result<ExitCode> {
    use drl_relay::traffic::{UdpFlood, UdpSink};
    const UDP_PORT: u16 = 9000;
    if a.prefix.is_empty() || a.prefix.len() > 8 {
        bail!("--prefix must be 1-8 bytes");
    }
    std::fs::create_dir_all(&a.out)?;
    let exe = std::env::current_exe().context("locating the drl binary")?;
    let _ = cleanup_prefix(&format!("{}-", a.prefix))?;
    let topo = Topology::build(&a.prefix, 1, None)
        .context("building the testbed (needs root: network namespaces, veth, iptables)")?;
    let site = &topo.sites[0];
    let dst = SocketAddr::new(IpAddr::V4(site.sink_addr), UDP_PORT);
    let sink = in_netns(topo.rx.name(), move || {
        UdpSink::bind(SocketAddr::from(([0, 0, 0, 0], UDP_PORT)))
    })?;
    let yaml = |alg: &str, quota: &str| {
        format!(
            "queue: 0\nlisten: 127.0.0.1:9464\nalgorithm: {alg}\nscope: local\nclasses:\n  - name: udp\n    \
             match: {{ dst: 10.77.0.0/16, protocol: udp, dport: {UDP_PORT} }}\n    quota: {quota}\n"
        )
    };
    let cfg_noop = a.out.join("relay-noop.yaml");
    let cfg_grd = a.out.join("relay-grd.yaml");
    std::fs::write(&cfg_noop, yaml("ctb", "100Gbit/s"))?;
    std::fs::write(&cfg_grd, yaml("grd", "100Gbit/s"))?;
    let metrics_addr: SocketAddr = "127.0.0.1:9464".parse().expect("literal");
    let size = a.size;
    // One measurement: flood for `seconds`, delivered datagrams/s.
    let measure = |what: &str| -> anyhow::Result<f64> {
        let flood = in_netns(site.ns.name(), move || UdpFlood::start(dst, size))?;
        std::thread::sleep(Duration::from_millis(500));
        let (t0, c0) = (Instant::now(), sink.count());
        std::thread::sleep(Duration::from_secs_f64(a.seconds));
        let pps = (sink.count() - c0) as f64 / t0.elapsed().as_secs_f64();
        drop(flood);
        eprintln!("{what:>12}: {pps:>10.0} packets/s delivered");
        Ok(pps)
    };
    let relay_run = |cfg: &Path, extra: &[&str], name: &str| -> anyhow::Result<(f64, String)> {
        let mut r = RelayProcess::start_with(
            &site.ns,
            &exe,
            cfg,
            metrics_addr,
            &a.out.join(format!("{name}.log")),
            extra,
        )?;
        let pps = measure(name)?;
        let m = r.metrics()?;
        r.stop();
        Ok((pps, m))
    };
    let mut kernel = vec![measure("kernel")?];
    let (mut noop, mut grd) = (Vec::new(), Vec::new());
    let mut grd_drops = 0.0;
    let mut queue_drops = 0.0;
    for _ in 0..a.rounds {
        let (p, m) = relay_run(&cfg_noop, &["--accept-all"], "noop")?;
        noop.push(p);
        queue_drops += metric(&m, "drl_relay_queue_kernel_dropped_total", &[]).unwrap_or(0.0);
        let (p, m) = relay_run(&cfg_grd, &[], "grd")?;
        grd.push(p);
        grd_drops += metric(&m, "drl_relay_packets_total", &["verdict=\"dropped\""]).unwrap_or(0.0);
    }
    kernel.push(measure("kernel")?);
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (k, n, g) = (median(&mut kernel), median(&mut noop), median(&mut grd));
    println!(
        "kernel forwarding (no NFQUEUE): {k:.0} packets/s (median of {})",
        kernel.len()
    );
    println!(
        "no-op relay (--accept-all):     {n:.0} packets/s (median of {}; {:.3} of the kernel)",
        noop.len(),
        n / k
    );
    println!(
        "GRD relay, never dropping:      {g:.0} packets/s (median of {}; {:.3} of the no-op relay)",
        grd.len(),
        g / n
    );
    println!("GRD drops: {grd_drops}; no-op relay's kernel queue-full drops: {queue_drops}");
    Ok(ExitCode::SUCCESS)
}
