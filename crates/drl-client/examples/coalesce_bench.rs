//! Remote coalescing against one call per check (scripts/client-bench):
//! `CALLERS` concurrent tasks check as fast as they can against one
//! running `drl serve`, first through a coalescing client, then through a
//! client that sends one request per check (`max_batch(1)`, as many
//! requests in flight as callers), alternating for `ROUNDS` rounds of
//! `SECONDS` each. Prints decisions/s, mean batch size and p50/p99 per
//! check for both, and the throughput ratio.
//!
//! ```text
//! cargo run --release -p drl-client --example coalesce_bench -- \
//!     grpc|http URL LIMIT [CALLERS=64] [SECONDS=3] [ROUNDS=3]
//! ```

use std::sync::Arc;
use std::time::{Duration, Instant};

use drl_client::{Client, RemoteBuilder};

struct Run {
    decisions: u64,
    secs: f64,
    lat_ns: Vec<u64>,
    mean_batch: f64,
}

async fn run(client: Client, limit: Arc<str>, callers: usize, secs: f64) -> Run {
    let start = Instant::now();
    let end = start + Duration::from_secs_f64(secs);
    let s0 = client.stats();
    let tasks: Vec<_> = (0..callers)
        .map(|i| {
            let client = client.clone();
            let limit = limit.clone();
            tokio::spawn(async move {
                let mut lat = Vec::with_capacity(1 << 16);
                let mut n = 0u64;
                while Instant::now() < end {
                    let key = format!("k{}", (i * 7919 + n as usize) % 4096);
                    let t = Instant::now();
                    client.check(&limit, &key, 1).await.expect("check");
                    lat.push(t.elapsed().as_nanos() as u64);
                    n += 1;
                }
                lat
            })
        })
        .collect();
    let mut lat_ns = Vec::new();
    for t in tasks {
        lat_ns.extend(t.await.expect("caller"));
    }
    let secs = start.elapsed().as_secs_f64();
    let s1 = client.stats();
    assert_eq!(
        s1.fallbacks, s0.fallbacks,
        "a check fell back: is drl serve up?"
    );
    lat_ns.sort_unstable();
    Run {
        decisions: lat_ns.len() as u64,
        secs,
        mean_batch: (s1.checks_sent - s0.checks_sent) as f64
            / (s1.requests - s0.requests).max(1) as f64,
        lat_ns,
    }
}

fn pct(v: &[u64], p: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v[((v.len() - 1) as f64 * p) as usize] as f64 / 1000.0
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let a: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: coalesce_bench grpc|http URL LIMIT [CALLERS] [SECONDS] [ROUNDS]";
    if a.len() < 3 {
        return Err(usage.into());
    }
    let callers: usize = a.get(3).map_or(Ok(64), |s| s.parse())?;
    let secs: f64 = a.get(4).map_or(Ok(3.0), |s| s.parse())?;
    let rounds: usize = a.get(5).map_or(Ok(3), |s| s.parse())?;
    let builder = || match a[0].as_str() {
        "grpc" => Ok(RemoteBuilder::grpc(a[1].clone())),
        "http" => Ok(RemoteBuilder::http(a[1].clone())),
        _ => Err(usage),
    };
    let deadline = Duration::from_secs(5);
    let coalesced = builder()?.deadline(deadline).denial_cache(None).build()?;
    let single = builder()?
        .deadline(deadline)
        .denial_cache(None)
        .max_batch(1)
        .max_in_flight(callers)
        .build()?;
    let limit: Arc<str> = a[2].as_str().into();
    // Warm both connection pools.
    run(coalesced.clone(), limit.clone(), callers, 0.3).await;
    run(single.clone(), limit.clone(), callers, 0.3).await;
    let (mut c_all, mut s_all) = (Vec::new(), Vec::new());
    let (mut c_rate, mut s_rate, mut c_batch) = (0.0, 0.0, 0.0);
    for r in 0..rounds {
        let c = run(coalesced.clone(), limit.clone(), callers, secs).await;
        let s = run(single.clone(), limit.clone(), callers, secs).await;
        let (cr, sr) = (c.decisions as f64 / c.secs, s.decisions as f64 / s.secs);
        println!(
            "round {r}: coalesced {cr:.0}/s (mean batch {:.1}, p50 {:.0} us, p99 {:.0} us) | one per check {sr:.0}/s (p50 {:.0} us, p99 {:.0} us) | ratio {:.2}",
            c.mean_batch,
            pct(&c.lat_ns, 0.5),
            pct(&c.lat_ns, 0.99),
            pct(&s.lat_ns, 0.5),
            pct(&s.lat_ns, 0.99),
            cr / sr
        );
        c_rate += cr;
        s_rate += sr;
        c_batch += c.mean_batch;
        c_all.extend(c.lat_ns);
        s_all.extend(s.lat_ns);
    }
    c_all.sort_unstable();
    s_all.sort_unstable();
    let n = rounds as f64;
    println!(
        "total ({} {callers} callers, {rounds}x{secs}s each): coalesced {:.0}/s mean batch {:.1} p50 {:.0} us p99 {:.0} us; one per check {:.0}/s p50 {:.0} us p99 {:.0} us; ratio {:.2}",
        a[0],
        c_rate / n,
        c_batch / n,
        pct(&c_all, 0.5),
        pct(&c_all, 0.99),
        s_rate / n,
        pct(&s_all, 0.5),
        pct(&s_all, 0.99),
        c_rate / s_rate
    );
    Ok(())
}
