//! The denial cache never changes an answer: against the in-process
//! backend, a cached client and an uncached one fed the same checks at the
//! same times admit and deny exactly the same ones (proptest, every
//! algorithm, single and multi-quota limits).

use std::sync::Arc;

use drl_client::{CacheConfig, Client, InProcess};
use drl_core::{Algorithm, ManualClock};
use futures::executor::block_on;
use proptest::prelude::*;

/// One step: a check of `cost` on key `key` after the clock moved `advance` ns.
#[derive(Debug, Clone)]
struct Step {
    key: u8,
    cost: u64,
    advance: u64,
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    prop::collection::vec(
        (
            0u8..3,
            prop_oneof![3 => 1u64..3, 1 => Just(0u64), 1 => 3u64..7],
            0u64..300_000_000,
        )
            .prop_map(|(key, cost, advance)| Step { key, cost, advance }),
        1..120,
    )
}

fn config(algorithm: Algorithm, multi: bool) -> String {
    let quotas = if multi {
        if algorithm.is_windowed() {
            "quotas: [4/s, 6/2s]".to_string()
        } else {
            "quotas: [{quota: 4/s, burst: 3}, 6/2s]".to_string()
        }
    } else if algorithm.is_windowed() {
        "quota: 4/s".to_string()
    } else {
        "quota: 4/s\n    burst: 3".to_string()
    };
    format!("limits:\n  - name: l\n    algorithm: {algorithm}\n    {quotas}\n")
}

fn client(yaml: &str, clock: Arc<ManualClock>, cached: bool) -> Client {
    let b = InProcess::from_yaml(yaml, "test")
        .unwrap()
        .with_clock(clock);
    if cached {
        Client::in_process_cached(b, CacheConfig::default())
    } else {
        Client::in_process(b)
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn cache_never_turns_a_denial_into_an_admission_or_back(
        alg in prop::sample::select(Algorithm::ALL.to_vec()),
        multi in any::<bool>(),
        steps in steps(),
    ) {
        let yaml = config(alg, multi);
        let start = 1_000_000_000_000;
        let (ca, cb) = (Arc::new(ManualClock::new(start)), Arc::new(ManualClock::new(start)));
        let cached = client(&yaml, ca.clone(), true);
        let plain = client(&yaml, cb.clone(), false);
        for (i, s) in steps.iter().enumerate() {
            ca.advance(s.advance);
            cb.advance(s.advance);
            let key = format!("k{}", s.key);
            let a = block_on(cached.check("l", &key, s.cost)).unwrap();
            let b = block_on(plain.check("l", &key, s.cost)).unwrap();
            prop_assert_eq!(a.allowed, b.allowed, "step {} {:?}: cached {:?} plain {:?}", i, s, a, b);
            if !a.allowed {
                prop_assert_eq!(a.retry_after.is_some(), b.retry_after.is_some(), "step {} {:?}: cached {:?} plain {:?}", i, s, a, b);
                // A cached wait is never longer than the backend's.
                prop_assert!(a.retry_after <= b.retry_after, "step {} {:?}: cached {:?} plain {:?}", i, s, a, b);
            }
        }
    }
}

#[test]
fn a_denied_key_is_answered_from_the_cache_until_retry_after() {
    let clock = Arc::new(ManualClock::new(5_000_000_000));
    let c = client(
        "limits:\n  - name: l\n    algorithm: fixed-window\n    quota: 2/s\n",
        clock.clone(),
        true,
    );
    assert!(block_on(c.check("l", "k", 1)).unwrap().allowed);
    assert!(block_on(c.check("l", "k", 1)).unwrap().allowed);
    let d = block_on(c.check("l", "k", 1)).unwrap();
    assert!(!d.allowed);
    assert_eq!(c.stats().cache_hits, 0);
    for _ in 0..10 {
        assert!(!block_on(c.check("l", "k", 1)).unwrap().allowed);
    }
    assert_eq!(c.stats().cache_hits, 10);
    // A query is never answered from the cache.
    block_on(c.check("l", "k", 0)).unwrap();
    assert_eq!(c.stats().cache_hits, 10);
    clock.advance(d.retry_after.unwrap());
    assert!(block_on(c.check("l", "k", 1)).unwrap().allowed);
    assert_eq!(c.stats().cache_hits, 10);
}
