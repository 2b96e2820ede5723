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
    let deadline = Duration::from_millis(300);
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
    assert!(took >= deadline - Duration::from_millis(20), "{took:?}");
    assert!(took < deadline + Duration::from_secs(2), "{took:?}");
    drl.signal("CONT");
    // Back: decided by the service again (the key's count went on).
    let d = deny.check("hourly", "a", 1).await.unwrap();
    assert!(d.allowed && d.remaining <= 8, "{d:?}");

    // SIGKILL: the policy answers at once (connection refused), within
    // the deadline.
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
    assert!(
        t.elapsed() < 10 * (deadline + Duration::from_secs(1)),
        "{:?}",
        t.elapsed()
    );
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
    let drl = tokio::task::block_in_place(|| {
        Drl::start("limits:\n  - name: short\n    algorithm: fixed-window\n    quota: 2/2s\n")
    });
    let c = RemoteBuilder::grpc(drl.grpc_url()).build().unwrap();
    // Admit until a denial early in a window: the flood below must fit in
    // its wait (on a loaded machine, 200 tasks can take longer than the
    // last few milliseconds of a window). A denial late in a window is
    // waited out (the key is answered from the cache, then admitted by
    // the server in the next window) and the next one taken.
    let start = Instant::now();
    let denial = loop {
        let d = c.check("short", "k", 1).await.unwrap();
        assert!(start.elapsed() < DEADLINE);
        if d.allowed {
            continue;
        }
        if d.retry_after.unwrap() >= 1_000_000_000 {
            break d;
        }
        while !c.check("short", "k", 1).await.unwrap().allowed {
            assert!(start.elapsed() < DEADLINE);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    // What the server decided so far: the flood must add nothing.
    let (admitted, denied) = (
        decisions(&drl, "short", "allowed"),
        decisions(&drl, "short", "denied"),
    );
    assert!(denied >= 1.0);
    assert!(denial.retry_after.unwrap() > 0);
    let sent = c.stats().checks_sent;
    // A flood on the denied key: answered locally, nothing reaches drl.
    let floods = 200;
    let hits = c.stats().cache_hits;
    let all: Vec<_> = (0..floods)
        .map(|_| {
            let c = c.clone();
            tokio::spawn(async move { c.check("short", "k", 1).await.unwrap() })
        })
        .collect();
    for h in all {
        assert!(!h.await.unwrap().allowed);
    }
    assert_eq!(c.stats().cache_hits - hits, floods);
    assert_eq!(c.stats().checks_sent, sent);
    assert_eq!(decisions(&drl, "short", "denied"), denied);
    assert_eq!(decisions(&drl, "short", "allowed"), admitted);
    // After retry_after the key goes to the server again and is admitted.
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
    let total = decisions(&drl, "short", "allowed") + decisions(&drl, "short", "denied");
    assert_eq!(total, c.stats().checks_sent as f64);
    // A cost-0 query is never answered from the cache: exhaust the key
    // again, then query it.
    let mut tries = 0;
    while c.check("short", "k", 1).await.unwrap().allowed {
        tries += 1;
        assert!(tries < 10);
    }
    let sent = c.stats().checks_sent;
    let hits = c.stats().cache_hits;
    c.check("short", "k", 0).await.unwrap();
    assert_eq!(c.stats().checks_sent, sent + 1, "the query went to drl");
    assert_eq!(c.stats().cache_hits, hits);
}
