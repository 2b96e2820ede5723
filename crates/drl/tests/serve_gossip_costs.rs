//! Costs known afterwards on `scope: gossip`, end to end: three real `drl
//! serve` processes form a Cloud Control cluster on 127.0.0.1-3, and one
//! of them serves check, reserve, settle (below and above the estimate)
//! and release over `POST /v1/check` (docs/gossip.md, "Costs known
//! afterwards"), and native gRPC `Check` answers the same.
//!
//! FPS: the node's token bucket (depth `burst / 3` = 100,000, refilled at
//! no more than the limit, 100/s) gives a refund back while the
//! reservation still holds it below the level it would have had: all of
//! it here, since the scenario runs in far less than the 50 s the refill
//! would need to reach it. A charge past the bucket leaves the key in
//! debt (10,000 s of refill): checks are denied, queries included. GRD
//! gives nothing back (`"refunded":0`, never the units asked) and has no
//! debt. Envoy's token-quota scenario (2 per minute) is not run: a gossip
//! limit is a rate in whole units per second (at least 1/s) with its burst
//! split over the nodes, so 2 per minute is not a gossip limit.

mod common;

use std::net::UdpSocket;

use common::{Drl, check_one};
use drl_api::pb::rate_limiter_client::RateLimiterClient;
use drl_api::pb::{CheckItem, CheckRequest, CheckResult, Mode};
use serde_json::{Value, json};

/// A free UDP port on `ip` (bound then released).
fn free_udp(ip: &str) -> String {
    let s = UdpSocket::bind((ip, 0)).expect("bind on loopback");
    format!("{ip}:{}", s.local_addr().expect("addr").port())
}

fn cluster(algorithm: &str) -> (Vec<Drl>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("cluster.key");
    std::fs::write(&key, "gossip-costs-test-key-of-32-byte\n").unwrap();
    let udp: Vec<String> = ["127.0.0.1", "127.0.0.2", "127.0.0.3"]
        .iter()
        .map(|ip| free_udp(ip))
        .collect();
    let seeds = udp
        .iter()
        .map(|a| format!("\"{a}\""))
        .collect::<Vec<_>>()
        .join(", ");
    let nodes = (0..3)
        .map(|i| {
            Drl::start(&format!(
                r#"limits:
  - name: tokens
    quota: 100/s
    burst: 300000
    scope: gossip
cluster:
  node_id: {id}
  bind: "{bind}"
  seeds: [{seeds}]
  key_file: "{key}"
  algorithm: {algorithm}
  aggregation: peer-table
  estimate_interval_ms: 50
"#,
                id = i + 1,
                bind = udp[i],
                key = key.display(),
            ))
        })
        .collect();
    (nodes, dir)
}

fn call(d: &Drl, mode: &str, key: &str, cost: u64, id: Option<&str>) -> Value {
    let mut item = json!({"limit": "tokens", "key": key, "cost": cost, "mode": mode});
    if let Some(id) = id {
        item["reservation"] = json!(id);
    }
    check_one(d, item)
}

fn reserve(d: &Drl, key: &str, cost: u64) -> String {
    let r = call(d, "reserve", key, cost, None);
    assert_eq!(r["allowed"], true, "reserve {cost}: {r}");
    r["reservation"]
        .as_str()
        .unwrap_or_else(|| panic!("a reservation id: {r}"))
        .to_string()
}

/// (charged, refunded, expired) of a settle or release.
fn closed(v: &Value) -> (u64, u64, bool) {
    (
        v["charged"]
            .as_u64()
            .unwrap_or_else(|| panic!("charged: {v}")),
        v["refunded"]
            .as_u64()
            .unwrap_or_else(|| panic!("refunded: {v}")),
        v["expired"]
            .as_bool()
            .unwrap_or_else(|| panic!("expired: {v}")),
    )
}

#[test]
fn gossip_fps_reserves_settles_and_releases_with_refunds_into_its_bucket() {
    let (nodes, _dir) = cluster("fps");
    let a = &nodes[0];
    let key = "tenant-fps";
    // A check changes nothing and is answered before any take.
    assert_eq!(call(a, "check", key, 1_000, None)["allowed"], true);

    // Reserve 20,000, settle at 5,000: 15,000 back.
    let id = reserve(a, key, 20_000);
    let s = call(a, "settle", key, 5_000, Some(&id));
    assert_eq!(closed(&s), (0, 15_000, false), "{s}");
    // Settled once: a retry answers the same and applies nothing.
    let again = call(a, "settle", key, 5_000, Some(&id));
    assert_eq!(closed(&again), (0, 15_000, false), "{again}");

    // Reserve 10,000, settle at 12,000: 2,000 charged, nothing back.
    let id = reserve(a, key, 10_000);
    let s = call(a, "settle", key, 12_000, Some(&id));
    assert_eq!(closed(&s), (2_000, 0, false), "{s}");

    // Reserve 10,000 and release it: all of it back.
    let id = reserve(a, key, 10_000);
    let r = call(a, "release", key, 0, Some(&id));
    assert_eq!(closed(&r), (0, 10_000, false), "{r}");

    // A settle naming no reservation: expired, the whole cost charged.
    let u = call(a, "settle", key, 7, Some("123456789"));
    assert_eq!(closed(&u), (7, 0, true), "{u}");

    // Checks pass until a charge past the bucket leaves the key in debt;
    // then a check is denied, a query (cost 0) included.
    assert_eq!(call(a, "check", key, 0, None)["allowed"], true);
    assert_eq!(call(a, "check", key, 1, None)["allowed"], true);
    let c = call(a, "charge", key, 1_000_000, None);
    assert_eq!(c["allowed"], false, "in debt right after: {c}");
    assert_eq!(call(a, "check", key, 0, None)["allowed"], false);
    assert_eq!(call(a, "check", key, 1, None)["allowed"], false);
    assert_eq!(call(a, "take", key, 1, None)["allowed"], false);
    // A reservation is a take: denied in debt, no id.
    let r = call(a, "reserve", key, 1, None);
    assert_eq!(r["allowed"], false, "{r}");
    assert!(
        r.get("reservation").is_none_or(|v| v == "0" || v == 0),
        "{r}"
    );
}

#[test]
fn gossip_grd_reports_no_refund_and_charges_the_excess() {
    let (nodes, _dir) = cluster("grd");
    let a = &nodes[0];
    let key = "tenant-grd";
    // Nothing offered yet: the drop probability is 0, so a check admits.
    assert_eq!(call(a, "check", key, 5, None)["allowed"], true);
    let id = reserve(a, key, 50);
    let s = call(a, "settle", key, 20, Some(&id));
    assert_eq!(closed(&s), (0, 0, false), "GRD gives nothing back: {s}");
    let id = reserve(a, key, 10);
    let s = call(a, "settle", key, 25, Some(&id));
    assert_eq!(closed(&s), (15, 0, false), "{s}");
    let id = reserve(a, key, 10);
    let r = call(a, "release", key, 0, Some(&id));
    assert_eq!(closed(&r), (0, 0, false), "{r}");
}

async fn grpc_one(
    c: &mut RateLimiterClient<tonic::transport::Channel>,
    key: &str,
    cost: u64,
    mode: Mode,
    reservation_id: u64,
) -> CheckResult {
    let item = CheckItem {
        limit: "tokens".into(),
        key: key.into(),
        cost: Some(cost),
        mode: mode as i32,
        reservation_id,
    };
    c.check(CheckRequest {
        requests: vec![item],
    })
    .await
    .unwrap()
    .into_inner()
    .results
    .remove(0)
}

#[tokio::test]
async fn gossip_native_grpc_reserve_settle_release() {
    let (nodes, _dir) = cluster("fps");
    let mut c = RateLimiterClient::connect(nodes[1].grpc_url())
        .await
        .unwrap();
    let key = "tenant-grpc";
    let q = grpc_one(&mut c, key, 100, Mode::Check, 0).await;
    assert!(q.allowed, "{q:?}");
    let r = grpc_one(&mut c, key, 9_000, Mode::Reserve, 0).await;
    assert!(r.allowed, "{r:?}");
    assert_ne!(r.reservation_id, 0, "a reservation id");
    let s = grpc_one(&mut c, key, 4_000, Mode::Settle, r.reservation_id).await;
    assert_eq!(
        (s.charged, s.refunded, s.expired),
        (0, 5_000, false),
        "{s:?}"
    );
    let r = grpc_one(&mut c, key, 3_000, Mode::Reserve, 0).await;
    let s = grpc_one(&mut c, key, 0, Mode::Release, r.reservation_id).await;
    assert_eq!(
        (s.charged, s.refunded, s.expired),
        (0, 3_000, false),
        "{s:?}"
    );
    let q = grpc_one(&mut c, key, 1_000_000, Mode::Charge, 0).await;
    assert!(!q.allowed, "in debt after the charge: {q:?}");
    let q = grpc_one(&mut c, key, 0, Mode::Check, 0).await;
    assert!(!q.allowed, "a query in debt: {q:?}");
}
