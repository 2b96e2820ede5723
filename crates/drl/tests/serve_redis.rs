//! `scope: redis` end-to-end: two `drl serve` processes share one real
//! redis-server, so a limit holds across both. Needs `redis-server`.

mod common;

use common::{Drl, post_json};
use serde_json::json;

#[test]
fn two_nodes_share_a_redis_scoped_limit() {
    let redis = common::Redis::start();
    let config = config(
        &redis.url(),
        "lua",
        r#"
  - name: global
    algorithm: fixed-window
    quota: 5/h
    scope: redis
  - name: per-node
    algorithm: fixed-window
    quota: 5/h
"#,
    );
    let a = Drl::start(&config);
    let b = Drl::start(&config);
    let ask = |d: &Drl, limit: &str| {
        let body = json!({"requests":[{"limit": limit, "key": "tenant"}]}).to_string();
        let (s, _, v) = post_json(&d.url("/v1/check"), &body);
        assert_eq!(s, 200, "{v}");
        v["results"][0]["allowed"].as_bool().unwrap()
    };
    let mut allowed = 0;
    for i in 0..10 {
        let node = if i % 2 == 0 { &a } else { &b };
        allowed += usize::from(ask(node, "global"));
    }
    assert_eq!(allowed, 5, "the redis-scoped limit holds across both nodes");
    // The local one is per node: 5 on each.
    let local: usize = (0..10)
        .map(|i| usize::from(ask(if i % 2 == 0 { &a } else { &b }, "per-node")))
        .sum();
    assert_eq!(local, 10);
}

/// The `redis:` and `redis_resilience:` sections of every test here, then
/// `limits` (the YAML list under `limits:`). A debug build on a busy box: a
/// deadline that only a hung store reaches (the default 5 ms made these
/// tests flaky when they ran in parallel, and 2 s is within reach of a
/// loaded machine), the request deadline above it, and deny on store
/// errors so that a failing store shows.
fn config(url: &str, engine: &str, limits: &str) -> String {
    format!(
        "server:\n  request_timeout_ms: 60000\nredis:\n  url: {url}\n  engine: {engine}\n  \
         connect_timeout_ms: 30000\n  response_timeout_ms: 30000\n\
         redis_resilience:\n  \
         default_policy: {{timeout_ms: 30000, on_store_error: deny}}\nlimits:{limits}"
    )
}

/// Calls of `commands` (names as in `INFO commandstats`) the Redis at
/// `port` has served.
fn calls(port: u16, commands: &[&str]) -> u64 {
    let out = std::process::Command::new("redis-cli")
        .args(["-p", &port.to_string(), "INFO", "commandstats"])
        .output()
        .expect("redis-cli (apt-get install -y redis-tools)");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let (name, rest) = l.strip_prefix("cmdstat_")?.split_once(":calls=")?;
            commands.contains(&name).then_some(())?;
            rest.split(',').next()?.parse::<u64>().ok()
        })
        .sum()
}

/// Script calls (`EVALSHA` + `EVAL`) the Redis at `port` has served.
fn script_calls(port: u16) -> u64 {
    calls(port, &["evalsha", "eval"])
}

#[test]
fn a_batch_of_redis_checks_shares_script_calls_and_keeps_order() {
    let redis = common::Redis::start();
    let port = redis.port;
    let config = config(
        &redis.url(),
        "lua",
        r#"
  - name: global
    algorithm: gcra
    quota: 30/h
    burst: 30
    scope: redis
  - name: local
    algorithm: gcra
    quota: 1000/s
"#,
    );
    let d = Drl::start(&config);
    // Warm the connection and the script cache with one check.
    let one = json!({"requests":[{"limit": "global", "key": "warm"}]}).to_string();
    assert_eq!(post_json(&d.url("/v1/check"), &one).0, 200);
    let before = script_calls(port);
    // A local check first, then 60 redis checks on one key, a local one in
    // the middle.
    let mut reqs = vec![json!({"limit": "local", "key": "a"})];
    for i in 0..60 {
        reqs.push(json!({"limit": "global", "key": "tenant", "cost": 1}));
        if i == 30 {
            reqs.push(json!({"limit": "local", "key": "b"}));
        }
    }
    let body = json!({ "requests": reqs }).to_string();
    let (s, _, v) = post_json(&d.url("/v1/check"), &body);
    assert_eq!(s, 200, "{v}");
    let results = v["results"].as_array().unwrap();
    assert_eq!(results.len(), 62);
    let global: Vec<bool> = results
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != 0 && *i != 32)
        .map(|(_, r)| r["allowed"].as_bool().unwrap())
        .collect();
    assert_eq!(global.len(), 60);
    assert!(
        global[..30].iter().all(|a| *a),
        "first 30 admitted: {global:?}"
    );
    assert!(global[30..].iter().all(|a| !*a), "then denied: {global:?}");
    assert_eq!(results[0]["allowed"], true);
    assert_eq!(results[32]["allowed"], true);
    let calls = script_calls(port) - before;
    assert!(
        (1..=10).contains(&calls),
        "60 checks in one batch took {calls} script calls (expected coalescing)"
    );
}

/// `DRL.DECIDE` calls the Redis at `port` has served.
fn module_calls(port: u16) -> u64 {
    calls(port, &["drl.decide"])
}

/// `engine: module`: two nodes hammering one key concurrently through one
/// Redis with drl's module admit exactly the global quota, decided by
/// `DRL.DECIDE` (no script runs).
#[test]
fn two_nodes_share_one_limit_through_the_module() {
    let redis = common::Redis::start_module();
    let port = redis.port;
    let config = config(
        &redis.url(),
        "module",
        r#"
  - name: global
    algorithm: sliding-window
    quota: 25/h
    scope: redis
"#,
    );
    let a = Drl::start(&config);
    let b = Drl::start(&config);
    let admitted: usize = std::thread::scope(|s| {
        let workers: Vec<_> = (0..6)
            .map(|t| {
                let node = if t % 2 == 0 { &a } else { &b };
                s.spawn(move || {
                    let body = json!({"requests": (0..5)
                        .map(|_| json!({"limit": "global", "key": "tenant"}))
                        .collect::<Vec<_>>()})
                    .to_string();
                    let mut n = 0;
                    for _ in 0..2 {
                        let (st, _, v) = post_json(&node.url("/v1/check"), &body);
                        assert_eq!(st, 200, "{v}");
                        n += v["results"]
                            .as_array()
                            .unwrap()
                            .iter()
                            .filter(|r| r["allowed"] == true)
                            .count();
                    }
                    n
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).sum()
    });
    assert_eq!(
        admitted,
        25,
        "60 requests over two nodes: exactly the quota; logs:\n{}\n{}",
        a.log.lock().unwrap().join("\n"),
        b.log.lock().unwrap().join("\n")
    );
    assert!(module_calls(port) > 0, "decided by the module");
    assert_eq!(script_calls(port), 0, "no script ran");
}

/// `engine: module` on a Redis WITHOUT the module: `drl serve` starts, logs
/// the clear error (naming the server, how to fix it) without waiting for a
/// request, and the limit's `on_store_error` decides (deny here).
#[test]
fn a_missing_module_is_logged_at_startup_and_the_policy_applies() {
    let redis = common::Redis::start();
    let url = redis.url();
    let config = config(
        &redis.url(),
        "module",
        r#"
  - name: global
    algorithm: gcra
    quota: 5/h
    scope: redis
"#,
    );
    let d = Drl::start(&config);
    let logged =
        |d: &Drl| {
            d.log.lock().unwrap().iter().any(|l| {
                l.contains(&url) && l.contains("--loadmodule") && l.contains("engine: lua")
            })
        };
    common::wait_for("the missing-module error in the log", || logged(&d));
    let body = json!({"requests":[{"limit": "global", "key": "tenant"}]}).to_string();
    let (s, _, v) = post_json(&d.url("/v1/check"), &body);
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["results"][0]["allowed"], false, "deny policy: {v}");
    assert_eq!(script_calls(redis.port), 0, "no fallback to the scripts");
}
