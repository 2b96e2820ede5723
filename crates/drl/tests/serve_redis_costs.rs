//! Costs known afterwards on `scope: redis` over HTTP `POST /v1/check`,
//! against a real `drl serve` and a real redis-server, with both engines:
//! check, reserve, settle below the estimate (a refund), settle above it
//! (a charge, into debt), release, and a settle of an unknown reservation.
//! The counts live in Redis: a second `drl serve` on the same Redis sees
//! them.

mod common;

use common::{Drl, check_one, remaining_of};
use serde_json::{Value, json};

/// The `redis:` section for `url` and `engine`, a failure policy that
/// denies (so a failing store shows), and two redis-scoped limits: hourly
/// fixed windows (the test stays clear of the hour's end: counts change
/// only by what the test does) and a token bucket.
fn config(url: &str, engine: &str) -> String {
    format!(
        "server:\n  request_timeout_ms: 60000\nredis:\n  url: {url}\n  engine: {engine}\n  \
         connect_timeout_ms: 30000\n  response_timeout_ms: 30000\n\
         redis_resilience:\n  \
         default_policy: {{timeout_ms: 30000, on_store_error: deny}}\nlimits:
  - name: tokens
    algorithm: fixed-window
    quota: 10/h
    scope: redis
  - name: bucket
    algorithm: token-bucket
    quota: 10/h
    scope: redis
"
    )
}

fn settled(s: &Value) -> (Value, Value, Value) {
    (
        s["charged"].clone(),
        s["refunded"].clone(),
        s["expired"].clone(),
    )
}

fn reserve_settle_release(redis: &common::Redis, engine: &str) {
    let cfg = config(&redis.url(), engine);
    let drl = Drl::start(&cfg);
    // A check of the whole limit admits and consumes nothing.
    for _ in 0..3 {
        let r = check_one(
            &drl,
            json!({"limit": "tokens", "key": "c", "cost": 10, "mode": "check"}),
        );
        assert_eq!(
            (r["allowed"].clone(), r["remaining"].clone()),
            (json!(true), json!(0))
        );
    }
    assert_eq!(remaining_of(&drl, "tokens", "c"), 10);

    // Reserve 8: 2 left, a take of 5 is denied.
    let r = check_one(
        &drl,
        json!({"limit": "tokens", "key": "k", "cost": 8, "mode": "reserve"}),
    );
    assert_eq!(
        (r["allowed"].clone(), r["remaining"].clone()),
        (json!(true), json!(2)),
        "{engine}"
    );
    let id = r["reservation"]
        .as_str()
        .expect("a reservation id")
        .to_string();
    assert_eq!(
        check_one(&drl, json!({"limit": "tokens", "key": "k", "cost": 5}))["allowed"],
        false
    );
    // Settled at 3, below the estimate: 5 come back, in Redis.
    let s = check_one(
        &drl,
        json!({"limit": "tokens", "key": "k", "cost": 3, "mode": "settle", "reservation": id}),
    );
    assert_eq!(
        settled(&s),
        (json!(0), json!(5), json!(false)),
        "{engine}: {s}"
    );
    assert_eq!(s["remaining"], 7);
    assert_eq!(remaining_of(&drl, "tokens", "k"), 7);
    // Another node on the same Redis sees the count.
    let other = Drl::start(&cfg);
    assert_eq!(remaining_of(&other, "tokens", "k"), 7);
    // Settled once only: a retry answers the settlement again and applies
    // nothing; on the other node the id is unknown, so its whole actual
    // cost is charged.
    let again = check_one(
        &drl,
        json!({"limit": "tokens", "key": "k", "cost": 3, "mode": "settle", "reservation": id}),
    );
    assert_eq!(
        settled(&again),
        (json!(0), json!(5), json!(false)),
        "{engine}"
    );
    assert_eq!(remaining_of(&other, "tokens", "k"), 7);
    let elsewhere = check_one(
        &other,
        json!({"limit": "tokens", "key": "k", "cost": 3, "mode": "settle", "reservation": id}),
    );
    assert_eq!(
        settled(&elsewhere),
        (json!(3), json!(0), json!(true)),
        "{engine}"
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
    assert_eq!(settled(&s), (json!(0), json!(6), json!(false)), "{engine}");
    assert_eq!(remaining_of(&drl, "tokens", "x"), 10);

    // Settled above the estimate: the difference is charged, into debt;
    // then even a check of 0 is denied.
    let r = check_one(
        &drl,
        json!({"limit": "bucket", "key": "z", "cost": 2, "mode": "reserve"}),
    );
    let id = r["reservation"].as_str().unwrap().to_string();
    let s = check_one(
        &drl,
        json!({"limit": "bucket", "key": "z", "cost": 15, "mode": "settle", "reservation": id}),
    );
    assert_eq!(settled(&s), (json!(13), json!(0), json!(false)), "{engine}");
    assert_eq!(s["allowed"], false);
    let q = check_one(
        &other,
        json!({"limit": "bucket", "key": "z", "cost": 0, "mode": "check"}),
    );
    assert_eq!(
        q["allowed"], false,
        "{engine}: in debt, seen from the other node"
    );
}

#[test]
fn redis_lua_reserve_settle_release() {
    let redis = common::Redis::start();
    reserve_settle_release(&redis, "lua");
}

#[test]
fn redis_module_reserve_settle_release() {
    let redis = common::Redis::start_module();
    reserve_settle_release(&redis, "module");
}
