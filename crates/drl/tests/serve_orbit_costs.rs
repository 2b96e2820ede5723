//! Costs known afterwards on `scope: orbit`, end to end: three real `drl
//! serve` processes form an Orbit ring on 127.0.0.1-3, and the token-quota
//! scenario runs over `POST /v1/check` on one of them (docs/orbit.md,
//! "Costs known afterwards"): a limit of 2 per window, a check-only call on
//! the request path and the count charged on the response path; checks 1-3
//! pass, the third charge leaves the key in debt, check 4 is denied. Then a
//! reservation settled below its estimate gives the difference back.
//!
//! The cap is 2 and no node has a local allowance (10% of 2 rounds to 0),
//! so all the capacity circulates in the two lanes' tables (1 each): the
//! node can repay a charge's debt only from a table, and the limit's
//! bounded wait (`max_wait_ms`) lets a check wait for one. No verdict
//! depends on the machine's speed beyond that bound: the scenario must run
//! within one window, and when a slow run straddles a window's end it is
//! run again in the next window with a fresh key (under a hang guard).

mod common;

use std::net::UdpSocket;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::{Drl, check_one};
use serde_json::json;

const WINDOW_MS: u64 = 20_000;
const WINDOW: u64 = WINDOW_MS * 1_000_000;
const HANG_GUARD: Duration = Duration::from_secs(150);

fn unix_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_nanos() as u64
}

/// A free UDP port on `ip` (bound then released).
fn free_udp(ip: &str) -> String {
    let s = UdpSocket::bind((ip, 0)).expect("bind on loopback");
    format!("{ip}:{}", s.local_addr().expect("addr").port())
}

fn node_yaml(id: usize, ring: &[String]) -> String {
    let members: String = ring
        .iter()
        .enumerate()
        .map(|(j, a)| format!("    - {{id: {}, addr: \"{a}\"}}\n", j + 1))
        .collect();
    format!(
        r#"server:
  request_timeout_ms: 15000
limits:
  - name: tokens
    algorithm: fixed-window
    quota: 2/{WINDOW_MS}ms
    scope: orbit
orbit:
  node_id: {id}
  bind: "{bind}"
  key: {{inline: "orbit-costs-test-key-of-32-bytes"}}
  epoch_ms: 100
  heartbeat_ms: 100
  suspect_after_ms: 1000
  max_wait_ms: 6000
  ring:
{members}"#,
        bind = ring[id - 1],
    )
}

/// Runs `scenario` inside one window (from 300 ms after its start), again
/// in the next window if a slow run straddled its end; `scenario` gets a
/// key of its own per try.
fn in_one_window<T>(what: &str, mut scenario: impl FnMut(&str) -> T) -> T {
    let t0 = Instant::now();
    loop {
        assert!(
            t0.elapsed() < HANG_GUARD,
            "{what}: never ran within a window"
        );
        let w = unix_ns() / WINDOW + 1;
        let start = w * WINDOW + 300_000_000;
        while unix_ns() < start {
            std::thread::sleep(Duration::from_millis(20));
        }
        let out = scenario(&format!("{what}-{w}"));
        if unix_ns() / WINDOW == w {
            return out;
        }
        eprintln!("{what}: the run in window {w} straddled its end; again");
    }
}

#[test]
fn orbit_token_quota_charges_into_debt_and_settles_reservations() {
    let ring: Vec<String> = ["127.0.0.1", "127.0.0.2", "127.0.0.3"]
        .iter()
        .map(|ip| free_udp(ip))
        .collect();
    let nodes: Vec<Drl> = (1..=3)
        .map(|id| Drl::start(&node_yaml(id, &ring)))
        .collect();
    let a = &nodes[0];

    // The token quota: request path check-only (cost 0), response path
    // charges the count (1).
    let checks = in_one_window("tokens", |key| {
        let mut allowed = Vec::new();
        for i in 1..=4 {
            let c = check_one(
                a,
                json!({"limit": "tokens", "key": key, "cost": 0, "mode": "check"}),
            );
            allowed.push(c["allowed"].as_bool().expect("allowed"));
            if i < 4 {
                let r = check_one(
                    a,
                    json!({"limit": "tokens", "key": key, "cost": 1, "mode": "charge"}),
                );
                assert!(r.get("allowed").is_some(), "a charge answers a query: {r}");
            }
        }
        allowed
    });
    assert_eq!(
        checks,
        [true, true, true, false],
        "checks 1-3 pass, check 4 (in debt) is denied"
    );

    // A reservation of 2 (the whole cap), settled at 1: 1 comes back, and
    // the node holds it again.
    let (settled, after) = in_one_window("reserve", |key| {
        let r = check_one(
            a,
            json!({"limit": "tokens", "key": key, "cost": 2, "mode": "reserve"}),
        );
        assert_eq!(r["allowed"], true, "the reserve gets the whole cap: {r}");
        let id = r["reservation"]
            .as_str()
            .expect("a reservation id")
            .to_string();
        let s = check_one(
            a,
            json!({"limit": "tokens", "key": key, "cost": 1, "mode": "settle", "reservation": id}),
        );
        let c = check_one(
            a,
            json!({"limit": "tokens", "key": key, "cost": 0, "mode": "check"}),
        );
        (s, c)
    });
    assert_eq!(settled["refunded"], 1, "{settled}");
    assert_eq!(settled["charged"], 0, "{settled}");
    assert_eq!(after["allowed"], true, "{after}");
    assert_eq!(after["remaining"], 1, "the refund is held again: {after}");
}
