//! Random traces for the differential and interop tests: one algorithm and
//! 1-3 quotas per trace, a few subjects (each with one key per quota), and
//! calls of 1-4 decisions with clocks that go forwards, backwards, stand
//! still and reach the ends of u64.

use drl_core::{Algorithm, Quota};
use proptest::prelude::*;

/// One decision of a call.
#[derive(Debug, Clone)]
pub struct Step {
    /// Which subject (its keys: `PREFIX:s:q0`, `PREFIX:s:q1`, ...).
    pub subject: usize,
    /// All quotas (true) or only the first.
    pub all: bool,
    /// Added to the running clock (wrapping into [0, u64::MAX] by saturation).
    pub delta: i128,
    /// Use the server clock instead.
    pub server: bool,
    /// The cost.
    pub cost: u64,
}

/// One trace.
#[derive(Debug, Clone)]
pub struct Trace {
    /// The algorithm.
    pub algorithm: Algorithm,
    /// The quotas.
    pub quotas: Vec<Quota>,
    /// The clock before the first call.
    pub start: u64,
    /// The calls.
    pub calls: Vec<Vec<Step>>,
}

fn quota() -> impl Strategy<Value = Quota> {
    let limit = prop_oneof![Just(1u64), Just(2), Just(3), Just(10), Just(1000), 1u64..50];
    let window = prop_oneof![
        Just(1u64),
        Just(7),
        Just(1_000),
        Just(1_000_000_000),
        Just(60_000_000_000),
        Just(86_400_000_000_000),
        Just(u64::MAX / 3),
        1u64..5_000_000_000,
    ];
    let burst = prop_oneof![Just(0u64), Just(1), Just(2), Just(5)];
    (limit, window, burst).prop_filter_map("valid quota", |(l, w, b)| {
        Quota::with_burst(l, w, if b == 0 { l } else { b }).ok()
    })
}

fn step(server: bool) -> impl Strategy<Value = Step> {
    let delta = prop_oneof![
        Just(0i128),
        -1_000i128..1_000,
        -2_000_000_000i128..2_000_000_000,
        0i128..100_000_000_000,
        Just(i128::from(u64::MAX)),
        Just(-i128::from(u64::MAX)),
    ];
    let cost = prop_oneof![
        Just(0u64),
        Just(1),
        Just(1),
        Just(2),
        Just(3),
        Just(11),
        Just(1001),
        Just(u64::MAX)
    ];
    (0usize..3, any::<bool>(), delta, 0u8..8, cost).prop_map(
        move |(subject, all, delta, s, cost)| Step {
            subject,
            all,
            delta,
            server: server && s == 0,
            cost,
        },
    )
}

/// A trace; server-clock decisions only if `server`.
pub fn trace(server: bool) -> impl Strategy<Value = Trace> {
    let start = prop_oneof![
        Just(0u64),
        Just(1_000_000_000),
        Just(1_700_000_000_000_000_000),
        Just(u64::MAX - 1_000_000_000_000),
        Just(u64::MAX),
        any::<u64>(),
    ];
    (
        0usize..7,
        proptest::collection::vec(quota(), 1..=3),
        start,
        proptest::collection::vec(proptest::collection::vec(step(server), 1..=4), 1..=10),
    )
        .prop_map(|(a, quotas, start, calls)| Trace {
            algorithm: Algorithm::ALL[a],
            quotas,
            start,
            calls,
        })
}

/// Advances the clock by `delta`, saturating at the ends of u64.
pub fn advance(now: u64, delta: i128) -> u64 {
    (i128::from(now) + delta).clamp(0, i128::from(u64::MAX)) as u64
}

/// The keys of `step` (one per quota it uses) under `prefix`.
pub fn keys(prefix: &str, t: &Trace, s: &Step) -> Vec<String> {
    let n = if s.all { t.quotas.len() } else { 1 };
    (0..n)
        .map(|q| format!("{prefix}:{}:q{q}", s.subject))
        .collect()
}

/// The quotas `step` uses.
pub fn quotas<'a>(t: &'a Trace, s: &Step) -> &'a [Quota] {
    if s.all { &t.quotas } else { &t.quotas[..1] }
}
