//! Key-flood load driver (issue 14, item 5), run by `scripts/key-flood`
//! against a release `drl serve` with one local limit.
//!
//! ```text
//! key_flood --grpc ADDR --http ADDR --pid PID --limit NAME
//!           [--keys 10000000] [--batch 1000] [--senders 4] [--hot 100]
//!           [--rate 100000] [--paced 2000000]
//! ```
//!
//! 1. Exhausts `--hot` hot keys (each then holds live state for the whole
//!    run: the limit's quota must not refill within it).
//! 2. Baseline: `--senders` tasks send batches of `--batch` checks over a
//!    fixed set of keys (the hot keys' neighbours; no new key after the
//!    first pass), as fast as they can, `--keys` checks in all, while a
//!    probe task sends one single-check call on a hot key every 500 µs and
//!    records its round trip.
//! 3. Flood: the same, but every check names a new, distinct key (`--keys`
//!    distinct keys in all).
//! 4. Equal offered load: `--paced` checks at `--rate` checks/s, first over
//!    the fixed keys (the unflooded run), then over new distinct keys with
//!    the table full (every insert evicts), the probe running in both.
//! 5. Reports RSS (before, after each phase, peak), the keys, bytes and
//!    evictions the server's `/metrics` shows, the probe's p50/p99/p999 in
//!    every phase and the two p99 ratios, and how many hot keys were
//!    admitted after the flood (each must be matched by a live eviction).
//!
//! The probe's calls share the server with the senders in every phase. At
//! full speed both phases saturate the server, so the probe's p99 there is
//! mostly queueing behind batches and its ratio is roughly the ratio of the
//! two phases' per-check costs; at equal offered load (below the flood's
//! saturation) the ratio isolates what distinct keys cost each decision
//! (inserts, sweeps, evictions) at the same load. The goal (p99 within 2x
//! of the unflooded run) is judged on the equal-load ratio; both are
//! reported.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use drl_api::pb::rate_limiter_client::RateLimiterClient;
use drl_api::pb::{CheckItem, CheckRequest};
use tonic::transport::Channel;

struct Args {
    grpc: String,
    http: String,
    pid: u32,
    limit: String,
    keys: u64,
    batch: u64,
    senders: u64,
    hot: u64,
    rate: u64,
    paced: u64,
}

fn args() -> Args {
    let mut a = Args {
        grpc: String::new(),
        http: String::new(),
        pid: 0,
        limit: "flood".into(),
        keys: 10_000_000,
        batch: 1_000,
        senders: 4,
        hot: 100,
        rate: 100_000,
        paced: 2_000_000,
    };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        let v = it.next().unwrap_or_else(|| panic!("{k} needs a value"));
        match k.as_str() {
            "--grpc" => a.grpc = v,
            "--http" => a.http = v,
            "--pid" => a.pid = v.parse().expect("--pid"),
            "--limit" => a.limit = v,
            "--keys" => a.keys = v.parse().expect("--keys"),
            "--batch" => a.batch = v.parse().expect("--batch"),
            "--senders" => a.senders = v.parse().expect("--senders"),
            "--hot" => a.hot = v.parse().expect("--hot"),
            "--rate" => a.rate = v.parse().expect("--rate"),
            "--paced" => a.paced = v.parse().expect("--paced"),
            _ => panic!("unknown argument {k}"),
        }
    }
    assert!(
        !a.grpc.is_empty() && !a.http.is_empty() && a.pid > 0,
        "--grpc, --http and --pid are required"
    );
    a
}

/// (VmRSS, VmHWM) of `pid`, bytes.
fn rss(pid: u32) -> (u64, u64) {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc status");
    let field = |name: &str| -> u64 {
        s.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .map_or(0, |kb: u64| kb * 1024)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

fn mb(b: u64) -> String {
    format!("{:.1} MB", b as f64 / 1e6)
}

/// A metric's value from a Prometheus text page.
fn metric(page: &str, series: &str) -> f64 {
    page.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(f64::NAN)
}

async fn scrape(http: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(http)
        .await
        .expect("connect http");
    let req = format!("GET /metrics HTTP/1.1\r\nHost: {http}\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    out
}

async fn check(
    c: &mut RateLimiterClient<Channel>,
    limit: &str,
    keys: impl Iterator<Item = String>,
) -> Vec<bool> {
    let requests = keys
        .map(|key| CheckItem {
            limit: limit.to_string(),
            key,
            cost: None,
            ..Default::default()
        })
        .collect();
    c.check(CheckRequest { requests })
        .await
        .expect("check")
        .into_inner()
        .results
        .iter()
        .map(|r| r.allowed)
        .collect()
}

fn hot_key(i: u64) -> String {
    format!("hot-{i:08}")
}

/// One phase's load: `total` checks, at full speed (`rate` 0) or paced to
/// `rate` checks/s in all, over fixed keys or distinct keys from `base` on.
#[derive(Clone, Copy)]
struct Load {
    total: u64,
    rate: u64,
    distinct: bool,
    base: u64,
}

/// Runs senders and the probe until `load.total` checks were sent; returns
/// the probe's sorted round trips (µs) and the elapsed time.
async fn phase(a: &Arc<Args>, chan: &Channel, load: Load) -> (Vec<u64>, Duration) {
    let Load {
        total,
        rate,
        distinct,
        base,
    } = load;
    let sent = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut senders = Vec::new();
    for s in 0..a.senders {
        let (a, sent, chan) = (a.clone(), sent.clone(), chan.clone());
        senders.push(tokio::spawn(async move {
            let mut c = RateLimiterClient::new(chan).max_decoding_message_size(64 << 20);
            // Paced: each sender sends one batch per `senders x batch / rate`
            // seconds, so all of them together offer `rate` checks/s.
            let mut tick = (rate > 0).then(|| {
                let every = Duration::from_secs_f64((a.senders * a.batch) as f64 / rate as f64);
                let mut t = tokio::time::interval_at(
                    tokio::time::Instant::now() + every.mul_f64(s as f64 / a.senders as f64),
                    every,
                );
                t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
                t
            });
            loop {
                if let Some(t) = tick.as_mut() {
                    t.tick().await;
                }
                let first = sent.fetch_add(a.batch, Ordering::Relaxed);
                if first >= total {
                    break;
                }
                let n = a.batch.min(total - first);
                let keys = (first..first + n).map(|i| {
                    if distinct {
                        format!("flood-{:012}", base + i)
                    } else {
                        // A fixed set of 10,000 keys, as long as flood keys.
                        format!("fixed-{:012}", (i + s) % 10_000)
                    }
                });
                check(&mut c, &a.limit, keys).await;
            }
        }));
    }
    let probe = {
        let (a, done, chan) = (a.clone(), done.clone(), chan.clone());
        tokio::spawn(async move {
            let mut c = RateLimiterClient::new(chan);
            let mut rtt = Vec::new();
            let mut tick = tokio::time::interval(Duration::from_micros(500));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut i = 0;
            while done.load(Ordering::Relaxed) == 0 {
                tick.tick().await;
                let t = Instant::now();
                let allowed = check(&mut c, &a.limit, std::iter::once(hot_key(i % a.hot))).await;
                rtt.push(t.elapsed().as_micros() as u64);
                if allowed[0] {
                    // Only a live eviction of that hot key can do this.
                    eprintln!("key_flood: hot key {} admitted during the run", i % a.hot);
                }
                i += 1;
            }
            rtt
        })
    };
    for s in senders {
        s.await.unwrap();
    }
    done.store(1, Ordering::Relaxed);
    let mut rtt = probe.await.unwrap();
    rtt.sort_unstable();
    (rtt, started.elapsed())
}

fn pct(sorted: &[u64], p: f64) -> u64 {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

#[tokio::main]
async fn main() {
    let a = Arc::new(args());
    let chan = Channel::from_shared(format!("http://{}", a.grpc))
        .unwrap()
        .connect()
        .await
        .expect("connect grpc");
    let mut c = RateLimiterClient::new(chan.clone());
    // 1. Hot keys, exhausted.
    let mut admitted_hot = 0;
    loop {
        let got = check(&mut c, &a.limit, (0..a.hot).map(hot_key)).await;
        let n = got.iter().filter(|&&x| x).count();
        if n == 0 {
            break;
        }
        admitted_hot += n;
    }
    println!(
        "hot keys: {} exhausted ({admitted_hot} admitted first)",
        a.hot
    );
    let (rss0, _) = rss(a.pid);
    println!("RSS at start: {}", mb(rss0));

    // 2. Baseline (fixed keys), 3. flood (distinct keys).
    let full = |distinct, base| Load {
        total: a.keys,
        rate: 0,
        distinct,
        base,
    };
    let (base, base_t) = phase(&a, &chan, full(false, 0)).await;
    let (rss1, _) = rss(a.pid);
    let page = scrape(&a.http).await;
    let held_base = metric(&page, &format!("drl_keys_held{{limit=\"{}\"}}", a.limit));
    println!(
        "baseline: {} checks over 10,000 fixed keys in {:.1} s ({:.0}/s); RSS {}; keys held {held_base}",
        a.keys,
        base_t.as_secs_f64(),
        a.keys as f64 / base_t.as_secs_f64(),
        mb(rss1)
    );
    let (flood, flood_t) = phase(&a, &chan, full(true, 0)).await;
    let (rss2, hwm) = rss(a.pid);
    println!(
        "flood: {} distinct keys in {:.1} s ({:.0}/s); RSS {} (peak {})",
        a.keys,
        flood_t.as_secs_f64(),
        a.keys as f64 / flood_t.as_secs_f64(),
        mb(rss2),
        mb(hwm)
    );
    let page = scrape(&a.http).await;
    let l = &a.limit;
    let held = metric(&page, &format!("drl_keys_held{{limit=\"{l}\"}}"));
    let bytes = metric(&page, &format!("drl_key_bytes_held{{limit=\"{l}\"}}"));
    let fresh = metric(
        &page,
        &format!("drl_keys_evicted_total{{limit=\"{l}\",kind=\"fresh\"}}"),
    );
    let live = metric(
        &page,
        &format!("drl_keys_evicted_total{{limit=\"{l}\",kind=\"live\"}}"),
    );
    println!(
        "keys held {held}, bytes held {bytes} ({}), evicted fresh {fresh}, evicted live {live}",
        mb(bytes as u64)
    );

    // 4. Hot keys after the flood.
    let after = check(&mut c, &a.limit, (0..a.hot).map(hot_key)).await;
    let readmitted = after.iter().filter(|&&x| x).count();
    println!(
        "hot keys admitted after the flood: {readmitted} of {} (each would be a live eviction)",
        a.hot
    );

    // 5. Equal offered load: the unflooded run, then distinct keys into the
    // full table (new keys, numbered past the flood's).
    let paced = |distinct, base| Load {
        total: a.paced,
        rate: a.rate,
        distinct,
        base,
    };
    let (base_eq, base_eq_t) = phase(&a, &chan, paced(false, 0)).await;
    let (flood_eq, flood_eq_t) = phase(&a, &chan, paced(true, a.keys)).await;
    let (rss3, hwm) = rss(a.pid);
    for (name, n, t) in [
        ("baseline", a.paced, base_eq_t),
        ("flood", a.paced, flood_eq_t),
    ] {
        println!(
            "equal load {name}: {n} checks offered at {}/s, sent in {:.1} s ({:.0}/s)",
            a.rate,
            t.as_secs_f64(),
            n as f64 / t.as_secs_f64()
        );
    }
    println!(
        "RSS after the equal-load flood {} (peak {})",
        mb(rss3),
        mb(hwm)
    );

    for (name, r) in [
        ("baseline at full speed", &base),
        ("flood at full speed", &flood),
        ("baseline at equal load", &base_eq),
        ("flood at equal load", &flood_eq),
    ] {
        println!(
            "probe {name}: {} calls, p50 {} us, p99 {} us, p99.9 {} us",
            r.len(),
            pct(r, 0.5),
            pct(r, 0.99),
            pct(r, 0.999)
        );
    }
    let ratio_full = pct(&flood, 0.99) as f64 / pct(&base, 0.99) as f64;
    let ratio = pct(&flood_eq, 0.99) as f64 / pct(&base_eq, 0.99) as f64;
    println!("p99 flood / baseline at full speed (both saturated): {ratio_full:.2}");
    println!(
        "p99 flood / baseline at equal load ({}/s): {ratio:.2}",
        a.rate
    );
    println!(
        "RESULT rss_start={rss0} rss_baseline={rss1} rss_flood={} rss_peak={hwm} keys_held={held} bytes_held={bytes} evicted_fresh={fresh} evicted_live={live} hot_readmitted={readmitted} p99_base_us={} p99_flood_us={} ratio={ratio:.2} ratio_full={ratio_full:.2}",
        rss2.max(rss3),
        pct(&base_eq, 0.99),
        pct(&flood_eq, 0.99)
    );
}
