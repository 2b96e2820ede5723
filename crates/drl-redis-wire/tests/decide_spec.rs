//! `DRL.DECIDE`'s wire format (`drl_redis_wire::decide_spec`): whatever is
//! encoded parses back to the same requests, and whatever parses encodes
//! back to the same bytes.

use drl_core::{Algorithm, Quota};
use drl_redis_wire::decide_spec::{self, Clock, Op, Request, algorithm_code, algorithm_of_code};
use proptest::prelude::*;

fn quota() -> impl Strategy<Value = Quota> {
    (1u64..=u64::MAX, 1u64..=u64::MAX, 1u64..=1_000_000)
        .prop_filter_map("quota too large", |(limit, window, burst)| {
            Quota::with_burst(limit, window, burst).ok()
        })
}

fn request() -> impl Strategy<Value = Request> {
    (
        prop_oneof![any::<u64>().prop_map(Clock::Caller), Just(Clock::Server)],
        prop_oneof![Just(Op::Take), Just(Op::Charge), Just(Op::Refund)],
        0usize..Algorithm::ALL.len(),
        any::<u64>(),
        prop::collection::vec((quota(), any::<u64>()), 1..4),
    )
        .prop_map(|(clock, op, a, cost, quotas)| Request {
            clock,
            op,
            algorithm: Algorithm::ALL[a],
            cost,
            marks: if op == Op::Refund {
                quotas.iter().map(|q| q.1).collect()
            } else {
                Vec::new()
            },
            quotas: quotas.into_iter().map(|q| q.0).collect(),
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    #[test]
    fn encode_then_parse_is_the_identity(
        grace in any::<u64>(),
        requests in prop::collection::vec(request(), 1..6),
    ) {
        let raw = decide_spec::encode(grace, &requests);
        let keys: usize = requests.iter().map(|r| r.quotas.len()).sum();
        let marks: usize = requests.iter().map(|r| r.marks.len()).sum();
        prop_assert_eq!(raw.len(), 8 * (2 + requests.len() * 5 + keys * 3 + marks));
        let spec = decide_spec::parse(&raw, keys).unwrap();
        prop_assert_eq!(spec.grace_ms, grace);
        prop_assert_eq!(&spec.decisions, &requests);
        // And back to the very same bytes.
        prop_assert_eq!(decide_spec::encode(spec.grace_ms, &spec.decisions), raw);
        // The flat parse agrees with the owned one.
        let mut flat = decide_spec::Parsed::default();
        decide_spec::parse_into(&mut flat, &decide_spec::encode(grace, &requests), keys).unwrap();
        for ((head, quotas), r) in flat.decisions().zip(&requests) {
            prop_assert_eq!(
                (head.clock, head.op, head.algorithm, head.cost),
                (r.clock, r.op, r.algorithm, r.cost)
            );
            prop_assert_eq!(quotas, &r.quotas[..]);
        }
    }

    #[test]
    fn codes_round_trip_and_nothing_else_parses(code in any::<u64>()) {
        match algorithm_of_code(code) {
            Some(a) => prop_assert_eq!(algorithm_code(a), code),
            None => prop_assert!(code >= 7),
        }
    }
}
