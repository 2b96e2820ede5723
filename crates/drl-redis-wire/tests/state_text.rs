//! Round trip of the stored state text (`drl_redis_wire::state_text`): every
//! state of every algorithm formats to text that parses back to itself, and
//! the text is canonical (single spaces, plain decimals).

use drl_core::algo;
use drl_core::{Algorithm, Limiter, Quota, State};
use drl_redis_wire::state_text::{format, parse, to_text};
use proptest::prelude::*;

fn state(a: Algorithm, f: [u64; 4], log: Vec<(u64, u64)>) -> State {
    match a {
        Algorithm::TokenBucket => State::TokenBucket(algo::token_bucket::State {
            last: f[0],
            credit: f[1],
        }),
        Algorithm::LeakyBucket => State::LeakyBucket(algo::leaky_bucket::State {
            last: f[0],
            level: f[1],
        }),
        Algorithm::Gcra => State::Gcra(algo::gcra::State {
            last: f[0],
            ahead: f[1],
        }),
        Algorithm::LeakyQueue => State::LeakyQueue(algo::gcra::State {
            last: f[0],
            ahead: f[1],
        }),
        Algorithm::FixedWindow => State::FixedWindow(algo::fixed_window::State {
            last: f[0],
            index: f[1],
            count: f[2],
        }),
        Algorithm::SlidingLog => State::SlidingLog(algo::sliding_log::State::new(
            f[0],
            log.into_iter().collect(),
        )),
        Algorithm::SlidingWindow => State::SlidingWindow(algo::sliding_window::State {
            last: f[0],
            index: f[1],
            prev: f[2],
            curr: f[3],
        }),
    }
}

fn field() -> impl Strategy<Value = u64> {
    prop_oneof![Just(0u64), Just(u64::MAX), any::<u64>(), 0u64..1000]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    #[test]
    fn text_round_trips(
        a in 0usize..7,
        f in [field(), field(), field(), field()],
        log in proptest::collection::vec((field(), field()), 0..6),
    ) {
        let a = Algorithm::ALL[a];
        let l = Limiter::new(a, Quota::new(5, 1_000).unwrap());
        let s = state(a, f, log);
        let text = to_text(&s);
        prop_assert!(!text.is_empty());
        prop_assert!(!text.starts_with(b" ") && !text.ends_with(b" "));
        prop_assert!(!text.windows(2).any(|w| w == b"  "));
        let words: Vec<String> = String::from_utf8(text.clone())
            .unwrap()
            .split(' ')
            .map(str::to_string)
            .collect();
        for w in &words {
            prop_assert_eq!(w.parse::<u64>().unwrap().to_string(), w.clone());
        }
        prop_assert_eq!(parse(&l, &text).unwrap(), s.clone());
        // Appending keeps what was in the buffer.
        let mut buf = b"x".to_vec();
        format(&s, &mut buf);
        prop_assert_eq!(&buf[1..], &text[..]);
    }
}
