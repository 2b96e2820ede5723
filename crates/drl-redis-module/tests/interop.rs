//! The module and drl-store's Lua script serve the same keys: the same
//! random trace is run all-Lua, all-module and alternating between the two
//! on the same keys; every reply, stored state text and expiry must agree
//! (so a state written by either engine is read correctly by the other).

mod common;

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use common::trace::{self, Trace};
use common::{Redis, items};
use drl_redis_module::spec::{Clock, Decision, Op};
use proptest::prelude::*;
use redis::Value;

/// drl-store's general decision script, as drl-store assembles it.
const LUA: &str = concat!(
    include_str!("../../drl-store/lua/prelude.lua"),
    "\n",
    include_str!("../../drl-store/lua/writes.lua"),
    "\n",
    include_str!("../../drl-store/lua/algorithms.lua"),
    "\n",
    include_str!("../../drl-store/lua/main.lua"),
);

const GRACE_MS: u64 = 600_000;

fn server() -> &'static Redis {
    static R: OnceLock<Redis> = OnceLock::new();
    R.get_or_init(Redis::start_module)
}

/// EVALSHA of the Lua script with drl-store's ARGV layout (see main.lua).
fn lua(c: &mut redis::Connection, keys: &[String], decisions: &[Decision]) -> Value {
    static SHA: OnceLock<String> = OnceLock::new();
    let sha = SHA.get_or_init(|| {
        redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(LUA)
            .query(&mut server().admin())
            .expect("SCRIPT LOAD")
    });
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(sha).arg(keys.len()).arg(keys).arg(GRACE_MS);
    for d in decisions {
        match d.clock {
            Clock::Caller(n) => cmd.arg(n),
            Clock::Server => cmd.arg("t"),
        };
        cmd.arg(d.algorithm.name()).arg(d.cost).arg(d.quotas.len());
        for q in &d.quotas {
            let capacity = if d.algorithm.is_windowed() {
                q.limit()
            } else {
                q.burst()
            };
            cmd.arg(q.limit()).arg(q.window()).arg(q.capacity_ns());
            if d.cost > capacity {
                cmd.arg("x");
            } else {
                cmd.arg((d.cost as u128 * q.emission_interval() as u128).to_string());
            }
            cmd.arg((q.limit() as u128 * q.window() as u128).to_string());
        }
    }
    cmd.query(c).expect("EVALSHA")
}

fn check(t: &Trace) -> Result<(), TestCaseError> {
    static CASE: AtomicU64 = AtomicU64::new(0);
    let case = CASE.fetch_add(1, Ordering::Relaxed);
    let prefixes = [
        format!("lua{case}"),
        format!("mod{case}"),
        format!("mix{case}"),
    ];
    let mut c = server().admin();
    let mut now = t.start;
    for (n, call) in t.calls.iter().enumerate() {
        let mut decisions = Vec::new();
        let mut nqs = Vec::new();
        let mut keys: [Vec<String>; 3] = Default::default();
        for s in call {
            now = trace::advance(now, s.delta);
            for (p, k) in prefixes.iter().zip(keys.iter_mut()) {
                k.extend(trace::keys(p, t, s));
            }
            nqs.push(trace::quotas(t, s).len());
            decisions.push(Decision {
                clock: Clock::Caller(now),
                op: Op::Take,
                algorithm: t.algorithm,
                cost: s.cost,
                quotas: trace::quotas(t, s).to_vec(),
                marks: vec![],
            });
        }
        let by_lua = items(&lua(&mut c, &keys[0], &decisions), &nqs);
        let by_module = common::decide(&mut c, &keys[1], GRACE_MS, &decisions)
            .map_err(|e| TestCaseError::fail(format!("DRL.DECIDE: {e}")))?;
        let by_module = items(&by_module, &nqs);
        let mixed = if n % 2 == 0 {
            items(&lua(&mut c, &keys[2], &decisions), &nqs)
        } else {
            let v = common::decide(&mut c, &keys[2], GRACE_MS, &decisions)
                .map_err(|e| TestCaseError::fail(format!("DRL.DECIDE: {e}")))?;
            items(&v, &nqs)
        };
        prop_assert_eq!(&by_lua, &by_module, "Lua vs module replies, call {}", n);
        prop_assert_eq!(&by_lua, &mixed, "Lua vs mixed replies, call {}", n);
        for i in 0..keys[0].len() {
            let mut stored = Vec::new();
            let mut ttls = Vec::new();
            for k in &keys {
                let v: Option<Vec<u8>> = redis::cmd("GET").arg(&k[i]).query(&mut c).unwrap();
                stored.push(v.map(|v| String::from_utf8_lossy(&v).into_owned()));
                let pttl: i64 = redis::cmd("PTTL").arg(&k[i]).query(&mut c).unwrap();
                ttls.push(pttl);
            }
            prop_assert_eq!(
                &stored[0],
                &stored[1],
                "stored by Lua vs module, call {}",
                n
            );
            prop_assert_eq!(&stored[0], &stored[2], "stored by Lua vs mixed, call {}", n);
            let spread = ttls.iter().max().unwrap() - ttls.iter().min().unwrap();
            prop_assert!(
                ttls.iter().all(|&t| t == -2) || (ttls.iter().all(|&t| t > 0) && spread <= 50),
                "expiries of {:?}: {:?}",
                keys.iter().map(|k| &k[i]).collect::<Vec<_>>(),
                ttls
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(150))]

    #[test]
    fn lua_and_module_share_keys(t in trace::trace(false)) {
        check(&t)?;
    }
}

/// A state the Lua script wrote is read by the module and the other way
/// round, on one key (the explicit form of the mixed trace above).
#[test]
fn each_engine_reads_the_others_state() {
    let mut c = server().admin();
    let q = [drl_core::Quota::new(3, 3_000_000_000).unwrap()];
    let d = |now| [common::at(now, drl_core::Algorithm::Gcra, 1, &q)];
    let key = vec!["interop:gcra".to_string()];
    let first = items(&lua(&mut c, &key, &d(10_000_000_000)), &[1]);
    assert_eq!(first[0].2[0], b"");
    let written: String = redis::cmd("GET").arg(&key[0]).query(&mut c).unwrap();
    assert_eq!(written, "10000000000 1000000000");
    let second = items(
        &common::decide(&mut c, &key, GRACE_MS, &d(10_000_000_000)).unwrap(),
        &[1],
    );
    assert_eq!(second[0].0, 1);
    assert_eq!(
        second[0].2[0],
        written.as_bytes(),
        "the module read Lua's state"
    );
    let written: String = redis::cmd("GET").arg(&key[0]).query(&mut c).unwrap();
    assert_eq!(written, "10000000000 2000000000");
    let third = items(&lua(&mut c, &key, &d(10_000_000_000)), &[1]);
    assert_eq!(
        third[0].2[0],
        written.as_bytes(),
        "Lua read the module's state"
    );
    assert_eq!(third[0].0, 1);
    let fourth = items(
        &common::decide(&mut c, &key, GRACE_MS, &d(10_000_000_000)).unwrap(),
        &[1],
    );
    assert_eq!(fourth[0].0, 0, "three of three used, by both engines");
}
