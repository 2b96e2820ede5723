//! `scope: redis` end-to-end: two `drl serve` processes share one real
//! redis-server, so a limit holds across both. Needs `redis-server`.

mod common;

use common::{Drl, post_json};
use serde_json::json;

#[test]
fn two_nodes_share_a_redis_scoped_limit() {
    let redis = common::Redis::start();
    let port = redis.port;
    let config = format!(
        r#"
redis:
  url: redis://127.0.0.1:{port}
limits:
  - name: global
    algorithm: fixed-window
    quota: 5/h
    scope: redis
  - name: per-node
    algorithm: fixed-window
    quota: 5/h
"#
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
