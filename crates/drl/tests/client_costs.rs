//! drl-client's costs known afterwards against a real `drl serve`, over
//! gRPC and HTTP: `Client::reserve` then `Permit::settle` / `release`, and
//! `Client::charge` past the limit; and the same calls in process.

mod common;

use std::time::Duration;

use common::Drl;
use drl_client::{Client, FailurePolicy, InProcess, RemoteBuilder};

const CONFIG: &str = "
limits:
  - name: tokens
    algorithm: fixed-window
    quota: 10/h
";

/// The remote clients (gRPC, HTTP) of `drl`, failing closed (a failure
/// policy answer would show as a wrong count below).
fn remotes(drl: &Drl) -> [Client; 2] {
    let make = |b: RemoteBuilder| {
        b.deadline(Duration::from_secs(10))
            .on_failure(FailurePolicy::Deny)
            .denial_cache(None)
            .build()
            .unwrap()
    };
    [
        make(RemoteBuilder::grpc(drl.grpc_url())),
        make(RemoteBuilder::http(format!("http://{}", drl.http))),
    ]
}

/// Reserve 8, settle at 3 (5 back), reserve 4 and release it, charge past
/// the limit: the same answers from every client.
async fn budget(c: &Client, key: &str) {
    let p = c.reserve("tokens", key, 8).await.unwrap();
    assert!(p.allowed());
    assert_eq!(p.decision().remaining, 2);
    let denied = c.reserve("tokens", key, 5).await.unwrap();
    assert!(!denied.allowed());
    let none = denied.settle(5).await.unwrap();
    assert_eq!(
        (none.charged, none.refunded),
        (0, 0),
        "a denied permit holds nothing"
    );
    let s = p.settle(3).await.unwrap();
    assert_eq!((s.charged, s.refunded, s.expired), (0, 5, false));
    assert_eq!(s.decision.remaining, 7);
    let p = c.reserve("tokens", key, 4).await.unwrap();
    assert_eq!(p.decision().remaining, 3);
    let s = p.release().await.unwrap();
    assert_eq!((s.refunded, s.decision.remaining), (4, 7));
    let d = c.charge("tokens", key, 9).await.unwrap();
    assert_eq!((d.allowed, d.remaining), (false, 0), "in debt");
    let d = c.check("tokens", key, 0).await.unwrap();
    assert!(!d.allowed, "a query is denied in debt");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remote_permits_settle_in_the_service() {
    let drl = Drl::start(CONFIG);
    let [grpc, http] = remotes(&drl);
    budget(&grpc, "over-grpc").await;
    budget(&http, "over-http").await;
}

#[tokio::test]
async fn in_process_permits_settle_here() {
    let c = Client::in_process(InProcess::from_yaml(CONFIG, "<test>").unwrap());
    budget(&c, "here").await;
}

/// The same budget on `scope: redis`, both engines, over the native gRPC
/// API and HTTP: the reservation's marks travel to Redis and back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remote_permits_settle_in_redis_with_both_engines() {
    for (redis, engine) in [
        (common::Redis::start(), "lua"),
        (common::Redis::start_module(), "module"),
    ] {
        let config = format!(
            "redis:\n  url: {}\n  engine: {engine}\n  connect_timeout_ms: 30000\n  \
             response_timeout_ms: 30000\nredis_resilience:\n  \
             default_policy: {{timeout_ms: 30000, on_store_error: deny}}\n{}    scope: redis\n",
            redis.url(),
            CONFIG.trim_start_matches('\n')
        );
        let drl = Drl::start(&config);
        let [grpc, http] = remotes(&drl);
        budget(&grpc, &format!("grpc-{engine}")).await;
        budget(&http, &format!("http-{engine}")).await;
        let keys = drl_test_kit::redis::raw_command(redis.port, "KEYS *").unwrap();
        for client in ["grpc", "http"] {
            assert!(
                keys.contains(&format!("{client}-{engine}")),
                "{engine}: the {client} budget lives in Redis: {keys:?}"
            );
        }
    }
}
