//! drl vs governor, in the same run (docs/performance.md, "drl-core vs governor").
//!
//! Both libraries get time from a shared atomic counter advanced by 1 us per
//! decision (governor through its `FakeRelativeClock`, drl by passing `now`),
//! so the rows compare the limiters, not the clocks. Quota 1,000,000/s with
//! burst 1000: every decision is an admission that writes state.

// The contended rows time two threads with `Instant::now` (criterion's
// `iter_custom`): measuring wall time is this bench's job, unlike the
// library's, which takes `now` as an argument (clippy.toml).
#![allow(clippy::disallowed_methods)]
#![allow(missing_docs)] // criterion_group! generates an undocumented fn

mod common;

use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use drl_core::{Algorithm, AtomicLimiter, KeyedConfig, KeyedLimiter, MultiLimiter, Quota};
use governor::clock::FakeRelativeClock;

const STEP_NS: u64 = 1_000;
const KEYS: u64 = 1_000_000;

fn drl_quota() -> Quota {
    Quota::with_burst(1_000_000, 1_000_000_000, 1000).unwrap()
}

fn gov_quota() -> governor::Quota {
    governor::Quota::per_second(NonZeroU32::new(1_000_000).unwrap())
        .allow_burst(NonZeroU32::new(1000).unwrap())
}

fn drl_keyed() -> KeyedLimiter<u64> {
    KeyedLimiter::new(
        MultiLimiter::uniform(Algorithm::Gcra, &[drl_quota()]),
        KeyedConfig {
            max_keys: 2 * KEYS as usize,
            ..KeyedConfig::default()
        },
    )
}

/// Uniform keys in [0, KEYS), precomputed (xorshift, fixed seed).
fn key_sequence(n: usize) -> Vec<u64> {
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % KEYS
        })
        .collect()
}

fn single_key(c: &mut Criterion) {
    let mut g = c.benchmark_group("one key, one thread");
    let clock = AtomicU64::new(0);
    let direct = AtomicLimiter::new(Algorithm::Gcra, drl_quota()).unwrap();
    g.bench_function("drl direct (AtomicLimiter)", |b| {
        b.iter(|| {
            let now = clock.fetch_add(STEP_NS, Ordering::Relaxed);
            black_box(direct.decide(now, 1).allowed)
        })
    });
    let fake = FakeRelativeClock::default();
    let gov = governor::RateLimiter::direct_with_clock(gov_quota(), fake.clone());
    g.bench_function("governor direct", |b| {
        b.iter(|| {
            fake.advance(Duration::from_nanos(STEP_NS));
            black_box(gov.check().is_ok())
        })
    });
    let keyed = drl_keyed();
    g.bench_function("drl keyed", |b| {
        b.iter(|| {
            let now = clock.fetch_add(STEP_NS, Ordering::Relaxed);
            black_box(keyed.decide(&7u64, now, 1).allowed)
        })
    });
    let fake = FakeRelativeClock::default();
    let gov = governor::RateLimiter::dashmap_with_clock(gov_quota(), fake.clone());
    g.bench_function("governor keyed (dashmap)", |b| {
        b.iter(|| {
            fake.advance(Duration::from_nanos(STEP_NS));
            black_box(gov.check_key(&7u64).is_ok())
        })
    });
    g.finish();
}

/// Two threads hammer one key; reported time is wall time per decision
/// (total wall time / decisions made by both threads).
fn contended(c: &mut Criterion) {
    let mut g = c.benchmark_group("one key, two threads");
    fn run2(iters: u64, f: impl Fn() + Sync) -> Duration {
        let start = Instant::now();
        std::thread::scope(|s| {
            s.spawn(|| (0..iters).for_each(|_| f()));
            (0..iters).for_each(|_| f());
        });
        start.elapsed() / 2
    }
    let clock = Arc::new(AtomicU64::new(0));
    let direct = AtomicLimiter::new(Algorithm::Gcra, drl_quota()).unwrap();
    g.bench_function("drl direct (AtomicLimiter)", |b| {
        b.iter_custom(|iters| {
            run2(iters, || {
                let now = clock.fetch_add(STEP_NS, Ordering::Relaxed);
                black_box(direct.decide(now, 1).allowed);
            })
        })
    });
    let fake = FakeRelativeClock::default();
    let gov = governor::RateLimiter::direct_with_clock(gov_quota(), fake.clone());
    g.bench_function("governor direct", |b| {
        b.iter_custom(|iters| {
            run2(iters, || {
                fake.advance(Duration::from_nanos(STEP_NS));
                black_box(gov.check().is_ok());
            })
        })
    });
    let keyed = drl_keyed();
    g.bench_function("drl keyed", |b| {
        b.iter_custom(|iters| {
            run2(iters, || {
                let now = clock.fetch_add(STEP_NS, Ordering::Relaxed);
                black_box(keyed.decide(&7u64, now, 1).allowed);
            })
        })
    });
    let fake = FakeRelativeClock::default();
    let gov = governor::RateLimiter::dashmap_with_clock(gov_quota(), fake.clone());
    g.bench_function("governor keyed (dashmap)", |b| {
        b.iter_custom(|iters| {
            run2(iters, || {
                fake.advance(Duration::from_nanos(STEP_NS));
                black_box(gov.check_key(&7u64).is_ok());
            })
        })
    });
    g.finish();
}

/// 1,000,000 keys, all present before measuring, hit uniformly.
fn million_keys(c: &mut Criterion) {
    let mut g = c.benchmark_group("1M keys, uniform");
    let seq = key_sequence(1 << 22);
    let mask = seq.len() - 1;
    let clock = AtomicU64::new(0);
    let keyed = drl_keyed();
    for k in 0..KEYS {
        keyed.decide(&k, 0, 1);
    }
    let mut i = 0usize;
    g.bench_function("drl keyed", |b| {
        b.iter(|| {
            i = (i + 1) & mask;
            let now = clock.fetch_add(STEP_NS, Ordering::Relaxed);
            black_box(keyed.decide(&seq[i], now, 1).allowed)
        })
    });
    drop(keyed);
    let fake = FakeRelativeClock::default();
    let gov = governor::RateLimiter::dashmap_with_clock(gov_quota(), fake.clone());
    for k in 0..KEYS {
        let _ = gov.check_key(&k);
    }
    g.bench_function("governor keyed (dashmap)", |b| {
        b.iter(|| {
            i = (i + 1) & mask;
            fake.advance(Duration::from_nanos(STEP_NS));
            black_box(gov.check_key(&seq[i]).is_ok())
        })
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = common::config();
    targets = single_key, contended, million_keys
}
criterion_main!(benches);
