//! drl-client's remote backend against real `drl serve` processes: the
//! failure policy answers within the deadline when the service is killed
//! or stopped, the client recovers when it is restarted, and the denial
//! cache sends nothing for a denied key until its `retry_after` (counted
//! at the server's `/metrics`).

mod common;

use std::time::{Duration, Instant};

use common::{DEADLINE, Drl, http_get, metric};
use drl_client::{Client, FailurePolicy, RemoteBuilder};

const CONFIG: &str = r#"
limits:
  - name: hourly
    algorithm: fixed-window
    quota: 10/h
"#;

/// `drl_decisions_total{limit,result}` at the server.
fn decisions(drl: &Drl, limit: &str, result: &str) -> f64 {
    let url = drl.url("/metrics");
    let (_, text) = tokio::task::block_in_place(|| http_get(&url)).expect("metrics");
    metric(
        &text,
        &format!(r#"drl_decisions_total{{limit="{limit}",result="{result}"}}"#),
    )
    .unwrap_or(0.0)
}

fn client(b: RemoteBuilder, drl: &Drl, policy: FailurePolicy, deadline: Duration) -> Client {
    b.deadline(deadline)
        .on_failure(policy)
        .config_file(&drl.config)
        .unwrap()
        .build()
        .unwrap()
}

/// Kill, stop and restart, for one protocol.
async fn kill_stop_restart(grpc: bool) {
    // Long enough that a check a loaded machine answers slowly is still
    // the service's answer (at 300 ms the first one, on a fresh
    // connection, sometimes was the policy's); a stopped service is
    // waited on for this long, once per protocol.
    let deadline = Duration::from_secs(3);
    let mut drl = tokio::task::block_in_place(|| Drl::start(CONFIG));
    let builder = |drl: &Drl| {
        if grpc {
            RemoteBuilder::grpc(drl.grpc_url())
        } else {
            RemoteBuilder::http(drl.url(""))
        }
    };
    let deny = client(builder(&drl), &drl, FailurePolicy::Deny, deadline);
    let local = client(builder(&drl), &drl, FailurePolicy::Local(0.5), deadline);
    let allow = client(builder(&drl), &drl, FailurePolicy::Allow, deadline);
    let d = deny.check("hourly", "a", 1).await.unwrap();
    assert!(d.allowed && d.remaining == 9, "{d:?}");
    assert_eq!(deny.stats().fallbacks, 0);

    // SIGSTOP: connections hang; the deadline bounds every check.
    drl.signal("STOP");
    let t = Instant::now();
    let d = deny.check("hourly", "a", 1).await.unwrap();
    let took = t.elapsed();
    assert!(!d.allowed, "deny policy: {d:?}");
    assert_eq!(deny.stats().fallbacks, 1);
    // The deadline, not the stopped service, ended the wait: never
    // early, and a hang guard (not a latency bound) above.
    assert!(took >= deadline - Duration::from_millis(20), "{took:?}");
    assert!(took < DEADLINE, "{took:?}");
    drl.signal("CONT");
    // Back: decided by the service again (the key's count went on).
    let d = deny.check("hourly", "a", 1).await.unwrap();
    assert!(d.allowed && d.remaining <= 8, "{d:?}");

    // SIGKILL: the policy answers at once (connection refused), not
    // after the deadline.
    let http = drl.http.to_string();
    let grpc_addr = drl.grpc.to_string();
    drl.child.kill().unwrap();
    drl.child.wait().unwrap();
    let t = Instant::now();
    assert!(!deny.check("hourly", "b", 1).await.unwrap().allowed);
    assert!(allow.check("hourly", "b", 1).await.unwrap().allowed);
    // local(0.5) of 10/h: 5 admitted in this process, then denied.
    let admitted = futures_count(&local, 8).await;
    assert_eq!(admitted, 5);
    // Ten checks, none waiting on the deadline (refused at once): ten
    // waits of it would take 30 s, a loaded machine's ten refused
    // connections far less.
    assert!(t.elapsed() < 10 * deadline, "{:?}", t.elapsed());
    assert!(deny.stats().fallbacks >= 2);
    assert_eq!(local.stats().fallbacks, 8);

    // Restarted on the same ports: the clients recover by themselves.
    let drl = tokio::task::block_in_place(|| {
        Drl::start_args(CONFIG, &["--http", &http, "--grpc", &grpc_addr])
    });
    let start = Instant::now();
    loop {
        let before = deny.stats().fallbacks;
        let d = deny.check("hourly", "c", 1).await.unwrap();
        if deny.stats().fallbacks == before {
            // Decided by the new process: a fresh key, a fresh server.
            assert!(d.allowed && d.remaining == 9, "{d:?}");
            break;
        }
        assert!(start.elapsed() < DEADLINE, "the client did not recover");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let before = local.stats().fallbacks;
    assert!(local.check("hourly", "c", 1).await.unwrap().allowed);
    assert_eq!(
        local.stats().fallbacks,
        before,
        "local policy client recovered too"
    );
    assert!(decisions(&drl, "hourly", "allowed") >= 2.0);
}

/// How many of `n` checks on key `l` the client admits.
async fn futures_count(c: &Client, n: usize) -> usize {
    let mut admitted = 0;
    for _ in 0..n {
        if c.check("hourly", "l", 1).await.unwrap().allowed {
            admitted += 1;
        }
    }
    admitted
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_killed_stopped_restarted() {
    kill_stop_restart(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_killed_stopped_restarted() {
    kill_stop_restart(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn denial_cache_sends_nothing_until_retry_after() {
    // `slow` (1/h, gcra): a denial's retry_after is about an hour, so the
    // flood below is inside it however slow the machine (on a 2/2s fixed
    // window the flood had to fit in what was left of a window).
    // `short` (2/2s): its retry_after runs out within the test.
    let drl = tokio::task::block_in_place(|| {
        Drl::start(
            "limits:\n  - name: slow\n    algorithm: gcra\n    quota: 1/h\n  \
             - name: short\n    algorithm: fixed-window\n    quota: 2/2s\n",
        )
    });
    // A hang guard as the deadline: with the default 100 ms (then fail
    // open) a loaded machine's slow answer was an admission.
    let c = RemoteBuilder::grpc(drl.grpc_url())
        .deadline(DEADLINE)
        .build()
        .unwrap();
    assert!(c.check("slow", "k", 1).await.unwrap().allowed);
    let denial = c.check("slow", "k", 1).await.unwrap();
    assert!(!denial.allowed);
    assert!(denial.retry_after.unwrap() >= 60_000_000_000, "{denial:?}");
    // What the server decided so far: the flood must add nothing.
    let (admitted, denied) = (
        decisions(&drl, "slow", "allowed"),
        decisions(&drl, "slow", "denied"),
    );
    assert_eq!((admitted, denied), (1.0, 1.0));
    let sent = c.stats().checks_sent;
    // A flood on the denied key: answered locally, nothing reaches drl.
    let floods = 200;
    let hits = c.stats().cache_hits;
    let all: Vec<_> = (0..floods)
        .map(|_| {
            let c = c.clone();
            tokio::spawn(async move { c.check("slow", "k", 1).await.unwrap() })
        })
        .collect();
    for h in all {
        assert!(!h.await.unwrap().allowed);
    }
    assert_eq!(c.stats().cache_hits - hits, floods);
    assert_eq!(c.stats().checks_sent, sent);
    assert_eq!(decisions(&drl, "slow", "denied"), denied);
    assert_eq!(decisions(&drl, "slow", "allowed"), admitted);
    // A cost-0 query is never answered from the cache.
    let hits = c.stats().cache_hits;
    c.check("slow", "k", 0).await.unwrap();
    assert_eq!(c.stats().checks_sent, sent + 1, "the query went to drl");
    assert_eq!(c.stats().cache_hits, hits);

    // After retry_after the key goes to the server again and is admitted:
    // exhaust `short`, then ask until admitted (a condition, however long
    // the rest of the window), the cache answering meanwhile.
    let mut tries = 0;
    while c.check("short", "k", 1).await.unwrap().allowed {
        tries += 1;
        assert!(tries < 10);
    }
    let admitted = decisions(&drl, "short", "allowed");
    let start = Instant::now();
    loop {
        if c.check("short", "k", 1).await.unwrap().allowed {
            break;
        }
        assert!(start.elapsed() < DEADLINE);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(decisions(&drl, "short", "allowed"), admitted + 1.0);
    // Every check sent was decided at the server, and nothing else was.
    let total: f64 = ["slow", "short"]
        .iter()
        .flat_map(|l| ["allowed", "denied"].map(|r| decisions(&drl, l, r)))
        .sum();
    assert_eq!(total, c.stats().checks_sent as f64);
}
