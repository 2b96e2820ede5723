//! Costs known afterwards over HTTP `POST /v1/check` and the native gRPC
//! `Check`, against a real `drl serve`: an item's `mode` (take, check,
//! charge, reserve, settle, release), reservations by id, and many
//! settlements racing on one key (the final state is the sequential sum).

mod common;

use common::{Drl, check_one, post_json, remaining_of};
use drl_api::pb::rate_limiter_client::RateLimiterClient;
use drl_api::pb::{CheckItem, CheckRequest, CheckResult, Mode};
use serde_json::{Value, json};

/// Hourly fixed windows (the test helpers keep each test clear of the hour's
/// end), so that counts only change by what the test does.
const CONFIG: &str = "
limits:
  - name: tokens
    algorithm: fixed-window
    quota: 10/h
  - name: big
    algorithm: fixed-window
    quota: 1000000/h
  - name: bucket
    algorithm: token-bucket
    quota: 10/h
";

fn check(drl: &Drl, items: Value) -> (u16, Value) {
    let (s, _, v) = post_json(
        &drl.url("/v1/check"),
        &json!({ "requests": items }).to_string(),
    );
    (s, v)
}

#[test]
fn http_charge_goes_past_the_limit() {
    let drl = Drl::start(CONFIG);
    let r = check_one(&drl, json!({"limit": "tokens", "key": "a", "cost": 8}));
    assert_eq!(r["allowed"], true);
    // A charge of 5 with 2 left: consumed anyway; the answer is a query
    // right after, denied (the key is in debt).
    let r = check_one(
        &drl,
        json!({"limit": "tokens", "key": "a", "cost": 5, "mode": "charge"}),
    );
    assert_eq!(
        (r["allowed"].clone(), r["remaining"].clone()),
        (json!(false), json!(0))
    );
    // A check changes nothing and is denied, as is a take of 1.
    let r = check_one(
        &drl,
        json!({"limit": "tokens", "key": "a", "cost": 0, "mode": "check"}),
    );
    assert_eq!(r["allowed"], false);
    let r = check_one(&drl, json!({"limit": "tokens", "key": "a", "cost": 1}));
    assert_eq!(r["allowed"], false);
    // A check of 2 on a fresh key admits and consumes nothing.
    for _ in 0..3 {
        let r = check_one(
            &drl,
            json!({"limit": "tokens", "key": "b", "cost": 10, "mode": "check"}),
        );
        assert_eq!(
            (r["allowed"].clone(), r["remaining"].clone()),
            (json!(true), json!(0))
        );
    }
    assert_eq!(remaining_of(&drl, "tokens", "b"), 10);
}

#[test]
fn http_reserve_then_settle_or_release() {
    let drl = Drl::start(CONFIG);
    let r = check_one(
        &drl,
        json!({"limit": "tokens", "key": "k", "cost": 8, "mode": "reserve"}),
    );
    assert_eq!(
        (r["allowed"].clone(), r["remaining"].clone()),
        (json!(true), json!(2))
    );
    let id = r["reservation"]
        .as_str()
        .expect("a reservation id")
        .to_string();
    assert_eq!(
        check_one(&drl, json!({"limit": "tokens", "key": "k", "cost": 5}))["allowed"],
        false
    );
    // The actual cost was 3: 5 come back.
    let s = check_one(
        &drl,
        json!({"limit": "tokens", "key": "k", "cost": 3, "mode": "settle", "reservation": id}),
    );
    assert_eq!(
        (
            s["charged"].clone(),
            s["refunded"].clone(),
            s["expired"].clone()
        ),
        (json!(0), json!(5), json!(false)),
        "{s}"
    );
    assert_eq!(remaining_of(&drl, "tokens", "k"), 7);
    // Settled once only: a retried settle answers the settlement again
    // and applies nothing.
    let again = check_one(
        &drl,
        json!({"limit": "tokens", "key": "k", "cost": 3, "mode": "settle", "reservation": id}),
    );
    assert_eq!(
        (
            again["expired"].clone(),
            again["charged"].clone(),
            again["refunded"].clone()
        ),
        (json!(false), json!(0), json!(5)),
        "{again}"
    );
    assert_eq!(remaining_of(&drl, "tokens", "k"), 7);
    // An id never opened: expired, its whole actual cost charged
    // (stricter than any settlement).
    let unknown = check_one(
        &drl,
        json!({"limit": "tokens", "key": "k", "cost": 3, "mode": "settle", "reservation": "12345"}),
    );
    assert_eq!(
        (unknown["expired"].clone(), unknown["charged"].clone()),
        (json!(true), json!(3))
    );
    assert_eq!(remaining_of(&drl, "tokens", "k"), 4);

    // Release gives the whole estimate back; another key's id does nothing.
    let r = check_one(
        &drl,
        json!({"limit": "tokens", "key": "x", "cost": 6, "mode": "reserve"}),
    );
    let id = r["reservation"].as_str().unwrap().to_string();
    let wrong = check_one(
        &drl,
        json!({"limit": "tokens", "key": "y", "mode": "release", "reservation": id}),
    );
    assert_eq!(wrong["expired"], true);
    assert_eq!(remaining_of(&drl, "tokens", "x"), 4);
    let s = check_one(
        &drl,
        json!({"limit": "tokens", "key": "x", "mode": "release", "reservation": id}),
    );
    assert_eq!(s["refunded"], 6);
    assert_eq!(remaining_of(&drl, "tokens", "x"), 10);

    // A settlement above the estimate charges the difference, into debt.
    let r = check_one(
        &drl,
        json!({"limit": "bucket", "key": "z", "cost": 2, "mode": "reserve"}),
    );
    let id = r["reservation"].as_str().unwrap().to_string();
    let s = check_one(
        &drl,
        json!({"limit": "bucket", "key": "z", "cost": 15, "mode": "settle", "reservation": id}),
    );
    assert_eq!(
        (s["charged"].clone(), s["allowed"].clone()),
        (json!(13), json!(false))
    );
}

#[test]
fn http_refuses_bad_modes() {
    let drl = Drl::start(CONFIG);
    for (item, needle) in [
        (
            json!({"limit": "tokens", "key": "k", "mode": "spend"}),
            "unknown mode",
        ),
        (
            json!({"limit": "tokens", "key": "k", "mode": "settle"}),
            "needs `reservation`",
        ),
        (
            json!({"limit": "tokens", "key": "k", "mode": "take", "reservation": "1"}),
            "goes with mode",
        ),
        (
            json!({"limit": "tokens", "key": "k", "mode": "release", "reservation": "-1"}),
            "not an id",
        ),
    ] {
        let (s, v) = check(&drl, json!([item]));
        assert_eq!(s, 400, "{item}: {v}");
        assert!(v.to_string().contains(needle), "{item}: {v}");
    }
}

#[test]
fn racing_settlements_sum_as_if_sequential() {
    let drl = Drl::start(CONFIG);
    const N: u64 = 64;
    const ESTIMATE: u64 = 100;
    // Reserve N estimates on one key.
    let ids: Vec<String> = (0..N)
        .map(|_| {
            let r = check_one(
                &drl,
                json!({"limit": "big", "key": "hot", "cost": ESTIMATE, "mode": "reserve"}),
            );
            r["reservation"].as_str().unwrap().to_string()
        })
        .collect();
    assert_eq!(remaining_of(&drl, "big", "hot"), 1_000_000 - N * ESTIMATE);
    // Settle them from 8 threads at once, actuals below and above the
    // estimate, with takes and charges on the same key in between.
    let actual = |i: u64| (i * 37) % 211; // 0..=210
    let url = drl.url("/v1/check");
    std::thread::scope(|s| {
        for t in 0..8u64 {
            let ids = &ids;
            let url = &url;
            s.spawn(move || {
                for i in (t..N).step_by(8) {
                    let body = json!({"requests": [
                        {"limit": "big", "key": "hot", "cost": actual(i), "mode": "settle",
                         "reservation": ids[i as usize]},
                        {"limit": "big", "key": "hot", "cost": 1, "mode": "charge"},
                        {"limit": "big", "key": "hot", "cost": 2},
                    ]});
                    let (st, _, v) = post_json(url, &body.to_string());
                    assert_eq!(st, 200, "{v}");
                    assert_eq!(v["results"][0]["expired"], false, "{v}");
                }
            });
        }
    });
    let settled: u64 = (0..N).map(actual).sum();
    assert_eq!(
        remaining_of(&drl, "big", "hot"),
        1_000_000 - settled - N * (1 + 2),
        "the sequential sum"
    );
}

fn item(limit: &str, key: &str, cost: u64, mode: Mode, reservation_id: u64) -> CheckItem {
    CheckItem {
        limit: limit.into(),
        key: key.into(),
        cost: Some(cost),
        mode: mode as i32,
        reservation_id,
    }
}

async fn grpc_one(
    c: &mut RateLimiterClient<tonic::transport::Channel>,
    i: CheckItem,
) -> CheckResult {
    c.check(CheckRequest { requests: vec![i] })
        .await
        .unwrap()
        .into_inner()
        .results
        .remove(0)
}

#[tokio::test]
async fn native_grpc_charge_reserve_settle() {
    let drl = Drl::start(CONFIG);
    let mut c = RateLimiterClient::connect(drl.grpc_url()).await.unwrap();
    let r = grpc_one(&mut c, item("tokens", "g", 9, Mode::Reserve, 0)).await;
    assert!(r.allowed);
    assert_ne!(r.reservation_id, 0, "a reservation id");
    let s = grpc_one(
        &mut c,
        item("tokens", "g", 4, Mode::Settle, r.reservation_id),
    )
    .await;
    assert_eq!((s.refunded, s.charged, s.expired), (5, 0, false));
    assert_eq!(s.remaining, 6);
    let q = grpc_one(&mut c, item("tokens", "g", 6, Mode::Check, 0)).await;
    assert!(q.allowed);
    let q = grpc_one(&mut c, item("tokens", "g", 7, Mode::Charge, 0)).await;
    assert_eq!((q.allowed, q.remaining), (false, 0));
    let q = grpc_one(&mut c, item("tokens", "g", 0, Mode::Check, 0)).await;
    assert!(!q.allowed, "in debt after the charge");
    // A mode this server does not know, and a settle without an id, are
    // refused before anything is decided.
    let mut bad = item("tokens", "g", 1, Mode::Take, 0);
    bad.mode = 42;
    let e = c
        .check(CheckRequest {
            requests: vec![bad],
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    let e = c
        .check(CheckRequest {
            requests: vec![item("tokens", "g", 1, Mode::Settle, 0)],
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
}

#[test]
fn an_expired_reservation_refunds_nothing() {
    // `reservation_ttl_ms: 0`: a reservation expires as it is made, so its
    // settlement refunds nothing (its estimate stays consumed); what goes
    // over the estimate is still charged.
    let drl = Drl::start(&format!("server:\n  reservation_ttl_ms: 0\n{CONFIG}"));
    let r = check_one(
        &drl,
        json!({"limit": "tokens", "key": "e", "cost": 8, "mode": "reserve"}),
    );
    let id = r["reservation"].as_str().unwrap().to_string();
    let s = check_one(
        &drl,
        json!({"limit": "tokens", "key": "e", "cost": 3, "mode": "settle", "reservation": id}),
    );
    assert_eq!(
        (s["expired"].clone(), s["refunded"].clone()),
        (json!(true), json!(0)),
        "{s}"
    );
    assert_eq!(remaining_of(&drl, "tokens", "e"), 2);
    let r = check_one(
        &drl,
        json!({"limit": "tokens", "key": "f", "cost": 2, "mode": "reserve"}),
    );
    let id = r["reservation"].as_str().unwrap().to_string();
    let s = check_one(
        &drl,
        json!({"limit": "tokens", "key": "f", "cost": 5, "mode": "settle", "reservation": id}),
    );
    assert_eq!(
        (s["expired"].clone(), s["charged"].clone()),
        (json!(true), json!(3))
    );
    assert_eq!(remaining_of(&drl, "tokens", "f"), 5);
}

/// A free UDP port on loopback (for the one-node gossip cluster below).
fn free_udp_port() -> u16 {
    std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A reload that keeps a limit keeps its open reservations (the settle
/// still refunds); one that changes the limit closes them at their
/// estimates (the settle answers expired and charges its whole cost).
#[test]
fn a_reload_keeps_the_reservations_of_a_limit_it_keeps() {
    let drl = Drl::start_with(CONFIG, &["--no-watch"]);
    let reserve = |limit: &str| {
        let r = check_one(
            &drl,
            json!({"limit": limit, "key": "r", "cost": 8, "mode": "reserve"}),
        );
        r["reservation"].as_str().expect("an id").to_string()
    };
    let (kept, changed) = (reserve("tokens"), reserve("bucket"));
    // `tokens` unchanged, `bucket` now 20/h: a reload.
    std::fs::write(
        &drl.config,
        CONFIG.replace(
            "  - name: bucket\n    algorithm: token-bucket\n    quota: 10/h",
            "  - name: bucket\n    algorithm: token-bucket\n    quota: 20/h",
        ),
    )
    .unwrap();
    drl.signal("HUP");
    drl.wait_log("config reloaded (SIGHUP)");
    let settle = |limit: &str, id: &str| {
        check_one(
            &drl,
            json!({"limit": limit, "key": "r", "cost": 3, "mode": "settle", "reservation": id}),
        )
    };
    let s = settle("tokens", &kept);
    assert_eq!(
        (s["expired"].clone(), s["refunded"].clone()),
        (json!(false), json!(5)),
        "{s}"
    );
    assert_eq!(remaining_of(&drl, "tokens", "r"), 7);
    let s = settle("bucket", &changed);
    assert_eq!(
        (s["expired"].clone(), s["charged"].clone()),
        (json!(true), json!(3)),
        "{s}"
    );
}

/// A gossip limit charges (docs/gossip.md, "Costs known afterwards"): an
/// FPS node draws the charge from its bucket into debt, so the answer (a
/// query right after) is denied and so are takes until the refill repays
/// it; a check and a reserve are denied while it lasts
/// (serve_gossip_costs.rs has the rest). The debt, 49,990 at 10/s, lasts
/// more than an hour: no refill during the test admits anything.
#[test]
fn a_gossip_limit_charges_into_debt() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("cluster.key");
    std::fs::write(&key, "another-test-cluster-key-32-byte\n").unwrap();
    let bind = format!("127.0.0.1:{}", free_udp_port());
    let drl = Drl::start(&format!(
        "limits:
  - name: shared
    quota: 10/s
    scope: gossip
cluster:
  node_id: 1
  bind: \"{bind}\"
  seeds: [\"{bind}\"]
  key_file: \"{}\"
  algorithm: fps
",
        key.display()
    ));
    let r = check_one(
        &drl,
        json!({"limit": "shared", "key": "t", "cost": 50_000, "mode": "charge"}),
    );
    assert_eq!(r["allowed"], false, "in debt right after: {r}");
    let t = check_one(&drl, json!({"limit": "shared", "key": "t", "cost": 1}));
    assert_eq!(t["allowed"], false, "a take while in debt: {t}");
    for mode in ["check", "reserve"] {
        let r = check_one(
            &drl,
            json!({"limit": "shared", "key": "t", "cost": 1, "mode": mode}),
        );
        assert_eq!(r["allowed"], false, "{mode} while in debt: {r}");
    }
}
