//! Decisions per second through [`RedisStore`] against a running Redis.
//!
//! `cargo bench -p drl-store --bench redis -- --url redis://127.0.0.1:6379
//! --clients 50 --pipeline 16 --seconds 5 [--algorithm gcra] [--keys 10000]
//! [--time redis|caller] [--mode many|single] [--in-flight N] [--shared]
//! [--engine lua|module]`
//!
//! Like `redis-benchmark -c CLIENTS -P PIPELINE`: CLIENTS connections (one
//! `RedisStore` each), each keeping PIPELINE decisions in flight:
//!
//! - `--mode many` (default): one task per client sends `decide_many` of
//!   PIPELINE decisions, i.e. one script call carrying PIPELINE decisions;
//! - `--mode single`: PIPELINE tasks per client, each calling `decide` in a
//!   loop (the service's shape); the store's batcher coalesces whatever is
//!   queued into shared calls (`--in-flight`: its `batch_in_flight`).
//!
//! `--shared`: all clients use one `RedisStore` (one connection, one
//! coalescing task), as the service does.
//!
//! `--engine module`: decide with drl's Redis module (`DRL.DECIDE`; the
//! server must run it: `redis-server --loadmodule libdrl_redis_module.so`)
//! instead of the Lua scripts.
//!
//! Prints one line: `decisions_per_sec=N calls_per_sec=N
//! decisions_per_call=X admitted=N errors=N` (calls counted by Redis:
//! `INFO commandstats`, `EVALSHA` or `DRL.DECIDE` calls). Used by
//! `scripts/bench-redis`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use drl_core::{Algorithm, Quota};
use drl_store::{Check, Engine, LimitSpec, RedisConfig, RedisStore, Store, TimeSource};

fn arg(args: &[String], name: &str, default: &str) -> String {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
        .unwrap_or_else(|| default.to_string())
}

/// Decision calls (`EVALSHA` or `DRL.DECIDE`) Redis has executed so far
/// (`INFO commandstats`).
fn decision_calls(admin: &mut redis::Connection, engine: Engine) -> u64 {
    let stat = match engine {
        Engine::Lua => "cmdstat_evalsha:calls=",
        Engine::Module => "cmdstat_drl.decide:calls=",
    };
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(admin)
        .expect("INFO commandstats");
    info.lines()
        .find_map(|l| l.strip_prefix(stat))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |n| n.parse().expect("calls"))
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if !args.iter().any(|a| a == "--url") {
        eprintln!("redis bench: no --url given, nothing to do (see scripts/bench-redis)");
        return;
    }
    let url = arg(&args, "--url", "");
    let clients: usize = arg(&args, "--clients", "50").parse().expect("--clients");
    let pipeline: usize = arg(&args, "--pipeline", "16").parse().expect("--pipeline");
    let seconds: u64 = arg(&args, "--seconds", "5").parse().expect("--seconds");
    let keys: u64 = arg(&args, "--keys", "10000").parse().expect("--keys");
    let algorithm: Algorithm = arg(&args, "--algorithm", "gcra")
        .parse()
        .expect("--algorithm");
    let single = match arg(&args, "--mode", "many").as_str() {
        "many" => false,
        "single" => true,
        other => panic!("--mode {other:?}: expected many or single"),
    };
    let shared = args.iter().any(|a| a == "--shared");
    let engine = match arg(&args, "--engine", "lua").as_str() {
        "lua" => Engine::Lua,
        "module" => Engine::Module,
        other => panic!("--engine {other:?}: expected lua or module"),
    };
    let time = match arg(&args, "--time", "redis").as_str() {
        "caller" => TimeSource::Caller,
        _ => TimeSource::Redis,
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let mut cfg = RedisConfig::single(url.clone());
        cfg.time = time;
        cfg.engine = engine;
        if let Some(n) = args.iter().position(|a| a == "--in-flight") {
            cfg.batch_in_flight = Some(args[n + 1].parse().expect("--in-flight"));
        }
        let spec = Arc::new(LimitSpec::new(
            "bench",
            algorithm,
            vec![Quota::new(1_000_000, 1_000_000_000).unwrap()],
        ));
        let stop = Arc::new(AtomicBool::new(false));
        let done = Arc::new(AtomicU64::new(0));
        let admitted = Arc::new(AtomicU64::new(0));
        let errors = Arc::new(AtomicU64::new(0));
        let mut tasks = Vec::new();
        let shared_store = if shared {
            let store = RedisStore::connect(&cfg).await.expect("connect");
            store
                .load_script()
                .await
                .expect("SCRIPT LOAD / DRL.VERSION");
            Some(store)
        } else {
            None
        };
        for c in 0..clients {
            let store = match &shared_store {
                Some(s) => s.clone(),
                None => {
                    let store = RedisStore::connect(&cfg).await.expect("connect");
                    store
                .load_script()
                .await
                .expect("SCRIPT LOAD / DRL.VERSION");
                    store
                }
            };
            let names: Vec<String> = (0..pipeline)
                .map(|i| format!("key-{}", (c * pipeline + i) as u64 % keys))
                .collect();
            if single {
                for name in names {
                    let (store, spec, stop, done, admitted, errors) = (
                        store.clone(),
                        spec.clone(),
                        stop.clone(),
                        done.clone(),
                        admitted.clone(),
                        errors.clone(),
                    );
                    tasks.push(tokio::spawn(async move {
                        let start = Instant::now();
                        while !stop.load(Ordering::Relaxed) {
                            let now = start.elapsed().as_nanos() as u64 + 1;
                            let check = Check {
                                spec: &spec,
                                key: &name,
                                cost: 1,
                                now,
                            };
                            match store.decide(check).await {
                                Ok(d) => admitted.fetch_add(d.allowed as u64, Ordering::Relaxed),
                                Err(_) => errors.fetch_add(1, Ordering::Relaxed),
                            };
                            done.fetch_add(1, Ordering::Relaxed);
                        }
                    }));
                }
                continue;
            }
            let (spec, stop, done, admitted, errors) = (
                spec.clone(),
                stop.clone(),
                done.clone(),
                admitted.clone(),
                errors.clone(),
            );
            tasks.push(tokio::spawn(async move {
                let start = Instant::now();
                while !stop.load(Ordering::Relaxed) {
                    let now = start.elapsed().as_nanos() as u64 + 1;
                    let checks: Vec<Check<'_>> = names
                        .iter()
                        .map(|k| Check {
                            spec: &spec,
                            key: k,
                            cost: 1,
                            now,
                        })
                        .collect();
                    for r in store.decide_many(&checks).await {
                        match r {
                            Ok(d) => {
                                admitted.fetch_add(d.allowed as u64, Ordering::Relaxed);
                            }
                            Err(_) => {
                                errors.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    }
                    done.fetch_add(pipeline as u64, Ordering::Relaxed);
                }
            }));
        }
        let mut admin = redis::Client::open(url.as_str())
            .and_then(|c| c.get_connection())
            .expect("admin connection");
        // Warm up, then measure.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let c0 = decision_calls(&mut admin, engine);
        let d0 = done.load(Ordering::Relaxed);
        let t0 = Instant::now();
        tokio::time::sleep(Duration::from_secs(seconds)).await;
        let d1 = done.load(Ordering::Relaxed);
        let el = t0.elapsed().as_secs_f64();
        let c1 = decision_calls(&mut admin, engine);
        stop.store(true, Ordering::Relaxed);
        for t in tasks {
            let _ = t.await;
        }
        println!(
            "decisions_per_sec={:.0} calls_per_sec={:.0} decisions_per_call={:.2} admitted={} errors={}",
            (d1 - d0) as f64 / el,
            (c1 - c0) as f64 / el,
            (d1 - d0) as f64 / (c1 - c0).max(1) as f64,
            admitted.load(Ordering::Relaxed),
            errors.load(Ordering::Relaxed)
        );
    });
}
