//! DRL.DECIDE against drl-core on random traces: every algorithm, caller
//! and server time, multi-quota, cost 0, cost above capacity, backwards
//! clocks, u64-extreme times, the same key twice in one call. For each call
//! the reply is decoded and decided again with drl-core's `MultiLimiter` on
//! the returned pre-decision states (as drl-store's `finish` does): the
//! verdicts must agree, the pre-decision states must be the model's, and
//! afterwards every key must hold exactly the model's state text with the
//! specified expiry.

mod common;

use std::collections::HashMap;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use common::trace::{self, Trace};
use common::{Redis, items};
use drl_core::{Limiter, MultiLimiter};
use drl_redis_module::spec::{Clock, Decision, Op};
use drl_redis_wire::state_text;
use proptest::prelude::*;

const GRACE_MS: u64 = 600_000;

fn server() -> &'static Redis {
    static R: OnceLock<Redis> = OnceLock::new();
    R.get_or_init(Redis::start_module)
}

fn wall_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

fn check_trace(t: &Trace) -> Result<(), TestCaseError> {
    static CASE: AtomicU64 = AtomicU64::new(0);
    let prefix = format!("diff{}", CASE.fetch_add(1, Ordering::Relaxed));
    let mut c = server().admin();
    let mut model: HashMap<String, Vec<u8>> = HashMap::new();
    let mut now = t.start;
    for call in &t.calls {
        let mut keys = Vec::new();
        let mut decisions = Vec::new();
        let mut nqs = Vec::new();
        for s in call {
            now = trace::advance(now, s.delta);
            let k = trace::keys(&prefix, t, s);
            nqs.push(k.len());
            keys.extend(k);
            decisions.push(Decision {
                clock: if s.server {
                    Clock::Server
                } else {
                    Clock::Caller(now)
                },
                op: Op::Take,
                algorithm: t.algorithm,
                cost: s.cost,
                quotas: trace::quotas(t, s).to_vec(),
                marks: vec![],
            });
        }
        let started = Instant::now();
        let before = wall_ns() / 1000 * 1000;
        let reply = common::decide(&mut c, &keys, GRACE_MS, &decisions)
            .map_err(|e| TestCaseError::fail(format!("DRL.DECIDE failed: {e}")))?;
        let after = wall_ns();
        let got = items(&reply, &nqs);
        let mut ttl: HashMap<String, u64> = HashMap::new();
        let mut server_now = None;
        let mut ki = 0;
        for (d, (verdict, at, pre)) in decisions.iter().zip(got) {
            match d.clock {
                Clock::Caller(n) => prop_assert_eq!(at, n),
                Clock::Server => {
                    prop_assert!(
                        before <= at && at <= after,
                        "server now {at} not in [{before}, {after}]"
                    );
                    prop_assert_eq!(at % 1000, 0, "microsecond precision");
                    prop_assert_eq!(
                        *server_now.get_or_insert(at),
                        at,
                        "one server time per call"
                    );
                }
            }
            let dkeys = &keys[ki..ki + d.quotas.len()];
            ki += d.quotas.len();
            for (k, p) in dkeys.iter().zip(&pre) {
                let want = model.get(k).cloned().unwrap_or_default();
                prop_assert_eq!(
                    String::from_utf8_lossy(p),
                    String::from_utf8_lossy(&want),
                    "pre-decision state of {}",
                    k
                );
            }
            let ml = MultiLimiter::uniform(d.algorithm, &d.quotas);
            let mut states = ml
                .parts()
                .iter()
                .zip(&pre)
                .map(|(l, raw)| state_text::parse(l, raw))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| TestCaseError::fail(format!("reply state: {e}")))?;
            let decision = ml.decide(&mut states, at, d.cost);
            prop_assert_eq!(
                verdict,
                i64::from(decision.allowed),
                "verdict of {:?} at {}",
                d,
                at
            );
            if decision.allowed && d.cost > 0 {
                for ((k, s), q) in dkeys.iter().zip(&states).zip(&d.quotas) {
                    let fresh_in = Limiter::new(d.algorithm, *q).check(s, at, 0).reset_after;
                    model.insert(k.clone(), state_text::to_text(s));
                    // The protocol: ceil(time until fresh / 1 ms) + grace, at least 1.
                    ttl.insert(k.clone(), (fresh_in.div_ceil(1_000_000) + GRACE_MS).max(1));
                }
            }
        }
        for k in &keys {
            let stored: Option<Vec<u8>> = redis::cmd("GET").arg(k).query(&mut c).unwrap();
            prop_assert_eq!(
                stored.map(|v| String::from_utf8_lossy(&v).into_owned()),
                model
                    .get(k)
                    .map(|v| String::from_utf8_lossy(v).into_owned()),
                "stored state of {}",
                k
            );
            if let Some(&want) = ttl.get(k) {
                let pttl: i64 = redis::cmd("PTTL").arg(k).query(&mut c).unwrap();
                let pttl = pttl as u64;
                // Slack: the time since the call, plus Redis's cached clock.
                let elapsed = started.elapsed().as_millis() as u64 + 10;
                prop_assert!(
                    pttl <= want && pttl + elapsed >= want,
                    "PTTL of {} is {} ms, expected {} (elapsed {} ms)",
                    k,
                    pttl,
                    want,
                    elapsed
                );
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn module_decides_like_drl_core(t in trace::trace(true)) {
        check_trace(&t)?;
    }
}
