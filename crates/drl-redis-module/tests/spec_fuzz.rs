//! The spec parser and the decision logic on arbitrary input: never a
//! panic, only a clear error; whatever parses re-encodes to the same bytes.

use drl_core::{Algorithm, Quota};
use drl_redis_module::decide::Call;
use drl_redis_module::spec::{self, Clock, Decision, MAGIC, Op, parse, parse_into};
use proptest::prelude::*;

fn valid() -> Vec<u8> {
    spec::encode(
        3,
        &[
            Decision {
                clock: Clock::Caller(10),
                op: Op::Take,
                algorithm: Algorithm::SlidingLog,
                cost: 1,
                quotas: vec![Quota::new(3, 100).unwrap(), Quota::new(9, 1_000).unwrap()],
                marks: vec![],
            },
            Decision {
                clock: Clock::Server,
                op: Op::Take,
                algorithm: Algorithm::Gcra,
                cost: 2,
                quotas: vec![Quota::new(2, 50).unwrap()],
                marks: vec![],
            },
        ],
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn mutated_specs_parse_or_fail_cleanly(
        edits in proptest::collection::vec((0usize..200, any::<u8>()), 0..6),
        cut in 0usize..200,
        keys in 0usize..5,
    ) {
        let mut raw = valid();
        for (at, b) in edits {
            let n = raw.len();
            raw[at % n] = b;
        }
        raw.truncate(cut.max(8).min(raw.len()));
        match parse(&raw, keys) {
            Ok(s) => {
                prop_assert_eq!(spec::encode(s.grace_ms, &s.decisions).len(), raw.len());
                let used: usize = s.decisions.iter().map(|d| d.quotas.len()).sum();
                prop_assert_eq!(used, keys);
                // Clock::Server drops the `now` word; otherwise identical.
                if s.decisions.iter().all(|d| matches!(d.clock, Clock::Caller(_))) {
                    prop_assert_eq!(spec::encode(s.grace_ms, &s.decisions), raw);
                }
            }
            Err(e) => prop_assert!(!e.is_empty()),
        }
    }

    #[test]
    fn random_words_never_panic(words in proptest::collection::vec(any::<u64>(), 0..40), keys in 0usize..8) {
        let mut raw: Vec<u8> = MAGIC.to_le_bytes().to_vec();
        for w in words {
            raw.extend_from_slice(&w.to_le_bytes());
        }
        let _ = parse(&raw, keys);
    }

    #[test]
    fn garbage_states_are_errors_not_panics(
        a in 0usize..7,
        stored in proptest::collection::vec(prop_oneof![Just(b' '), Just(b'1'), Just(b'9'), any::<u8>()], 0..40),
        cost in 0u64..4,
        now in any::<u64>(),
    ) {
        let d = Decision {
            clock: Clock::Caller(now),
            op: Op::Take,
            algorithm: Algorithm::ALL[a],
            cost,
            quotas: vec![Quota::new(3, 1_000).unwrap()],
            marks: vec![],
        };
        let mut call = Call::default();
        let keys: Vec<&[u8]> = vec![b"k"];
        parse_into(&mut call.spec, &spec::encode(0, &[d]), 1).unwrap();
        call.begin(&keys);
        call.values[0].extend_from_slice(&stored);
        match call.decide(&keys, || 0) {
            Ok(()) => prop_assert_eq!(call.reply_len(), 3),
            Err(e) => prop_assert!(e.starts_with("corrupt state at key \"k\": "), "{}", e),
        }
    }
}
