//! The hot path allocates nothing: once a key is held, a decision on it
//! makes no heap allocation (counted by a wrapping global allocator, per
//! thread: the test harness's own threads may allocate meanwhile, and
//! drl-core decides on the caller's thread only).

// A counting allocator is the one place this crate needs `unsafe`.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use drl_core::{Algorithm, KeyedConfig, KeyedLimiter, Limiter, MultiLimiter, Quota};

struct Counting;

thread_local! {
    // Const-initialized, no destructor: usable inside the allocator.
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

/// Allocations made so far by the calling thread.
fn allocs() -> u64 {
    ALLOCS.with(Cell::get)
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        unsafe { System.dealloc(p, l) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn decisions_on_held_keys_do_not_allocate() {
    // Everything but the sliding log (whose log grows by design).
    let algs = [
        Algorithm::TokenBucket,
        Algorithm::LeakyBucket,
        Algorithm::Gcra,
        Algorithm::LeakyQueue,
        Algorithm::FixedWindow,
        Algorithm::SlidingWindow,
    ];
    for alg in algs {
        for quotas in [
            vec![Quota::new(1000, 1_000_000).unwrap()],
            vec![
                Quota::new(1000, 1_000_000).unwrap(),
                Quota::new(5000, 60_000_000).unwrap(),
            ],
        ] {
            let keyed = KeyedLimiter::<u64>::new(
                MultiLimiter::uniform(alg, &quotas),
                KeyedConfig::default(),
            );
            for k in 0..1000u64 {
                keyed.decide(&k, 1, 1);
            }
            let before = allocs();
            let mut allowed = 0;
            for i in 0..100_000u64 {
                allowed += keyed.decide(&(i % 1000), 1 + i * 10, 1).allowed as u64;
            }
            let after = allocs();
            assert!(allowed > 0);
            assert_eq!(
                after - before,
                0,
                "{alg} with {} quotas allocated",
                quotas.len()
            );
        }
    }
    // The plain limiter on a held state never allocates either.
    let l = Limiter::new(Algorithm::Gcra, Quota::new(10, 100).unwrap());
    let mut s = l.new_state();
    let before = allocs();
    for t in 0..10_000 {
        l.decide(&mut s, t, 1);
    }
    assert_eq!(allocs(), before);
}
