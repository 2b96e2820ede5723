//! Model check of the lock-free cells with loom: every interleaving of
//! concurrent deciders on one 128-bit word (the keyed limiter's exact cell)
//! and on one 64-bit word (the direct limiter's `tat`, `keyed::tat`).
//!
//! Run: `RUSTFLAGS="--cfg loom" cargo test -p drl-core --test loom --release`
//! (`scripts/test` does). The 128-bit compare-exchange is modelled by a loom
//! mutex around a `u128`, which is exactly its contract (a linearizable
//! load and compare-exchange of both words at once); loom then explores
//! every order in which the deciders' loads and exchanges can interleave.
//! The 64-bit word is loom's own `AtomicU64`, with the orderings the
//! limiter uses (relaxed).
#![cfg(loom)]

use drl_core::Quota;
use drl_core::keyed::cell::{self, CellKind, Word128};
use drl_core::keyed::tat::{self, Word64};
use loom::sync::atomic::{AtomicU64, Ordering};
use loom::sync::{Arc, Mutex};

/// loom with a preemption bound of 3 (loom's recommended setting: bugs
/// almost always show within 2-3 preemptions; unbounded takes minutes).
fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(3);
    b.check(f);
}

struct ModelWord(Mutex<u128>);

impl Word128 for ModelWord {
    fn new(v: u128) -> Self {
        ModelWord(Mutex::new(v))
    }
    fn load(&self) -> u128 {
        *self.0.lock().unwrap()
    }
    fn compare_exchange(&self, current: u128, new: u128) -> Result<u128, u128> {
        let mut g = self.0.lock().unwrap();
        if *g == current {
            *g = new;
            Ok(current)
        } else {
            Err(*g)
        }
    }
}

/// Three deciders, burst 2 (a fixed window's limit 2), same instant:
/// exactly two admitted in every interleaving, and the word ends holding
/// exactly two consumptions.
#[test]
fn exactly_burst_admitted_under_every_interleaving() {
    for kind in [
        CellKind::TokenBucket,
        CellKind::LeakyBucket,
        CellKind::Gcra,
        CellKind::FixedWindow,
    ] {
        model(move || {
            // Burst 2 for the bucket family; the fixed window admits its
            // limit (2) per window of 10 ns, and 100 is a window's start.
            let q = if kind == CellKind::FixedWindow {
                Quota::new(2, 10).unwrap()
            } else {
                Quota::with_burst(1, 10, 2).unwrap()
            };
            let word = Arc::new(ModelWord::new(kind.fresh(&q)));
            let handles: Vec<_> = (0..3)
                .map(|_| {
                    let word = word.clone();
                    loom::thread::spawn(move || cell::decide(kind, &q, &*word, 100, 1).allowed)
                })
                .collect();
            let admitted = handles
                .into_iter()
                .map(|h| h.join().unwrap())
                .filter(|&a| a)
                .count();
            assert_eq!(admitted, 2);
            // Nothing left: the next request is denied with a full wait.
            let d = cell::decide(kind, &q, &*word, 100, 1);
            assert_eq!((d.allowed, d.retry_after), (false, Some(10)));
        });
    }
}

/// Two deciders at different times: the clock mark always ends at the
/// later time (both words move together), whichever wins the race.
#[test]
fn clock_mark_and_amount_move_together() {
    model(|| {
        let q = Quota::with_burst(1, 10, 4).unwrap();
        let kind = CellKind::Gcra;
        let word = Arc::new(ModelWord::new(kind.fresh(&q)));
        let w2 = word.clone();
        let a = loom::thread::spawn(move || cell::decide(kind, &q, &*w2, 1_000, 1));
        let b = cell::decide(kind, &q, &*word, 1_005, 1);
        let a = a.join().unwrap();
        assert!(a.allowed && b.allowed);
        let v = word.load();
        let (last, ahead) = ((v >> 64) as u64, v as u64);
        assert_eq!(last, 1_005);
        // Two permits consumed at 1_005 (the earlier one clamped or already
        // drained by 5 ns): tat = 1_005 + 20 or 1_000 + 10 + 10 -> 1_020/1_025.
        assert!(ahead == 20 || ahead == 15, "ahead {ahead}");
    });
}

/// loom's `AtomicU64` as the direct limiter's word, with its orderings.
struct ModelWord64(AtomicU64);

impl Word64 for ModelWord64 {
    fn new(v: u64) -> Self {
        ModelWord64(AtomicU64::new(v))
    }
    fn load(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
    fn compare_exchange(&self, current: u64, new: u64) -> Result<u64, u64> {
        self.0
            .compare_exchange_weak(current, new, Ordering::Relaxed, Ordering::Relaxed)
    }
}

/// The one-word cell: three deciders, burst 2, same instant: exactly two
/// admitted in every interleaving, and `tat` holds exactly two permits.
#[test]
fn one_word_cell_admits_exactly_the_burst() {
    model(|| {
        let q = Quota::with_burst(1, 10, 2).unwrap();
        let word = Arc::new(ModelWord64::new(tat::FRESH));
        let handles: Vec<_> = (0..3)
            .map(|_| {
                let word = word.clone();
                loom::thread::spawn(move || tat::decide(&q, &*word, 100, 1).allowed)
            })
            .collect();
        let admitted = handles
            .into_iter()
            .map(|h| h.join().unwrap())
            .filter(|&a| a)
            .count();
        assert_eq!(admitted, 2);
        assert_eq!(word.load(), 120);
        let d = tat::decide(&q, &*word, 100, 1);
        assert_eq!((d.allowed, d.retry_after), (false, Some(10)));
    });
}

/// The one-word cell with stamps out of order (a request stamped 5 ns
/// before another may decide after it): both are admitted and `tat` counts
/// both permits, whichever wins the race; the late one is judged at its own
/// stamp, so `tat` is 1_000 + 10 + 10 or 1_005 + 10 + 10.
#[test]
fn one_word_cell_counts_every_admission_out_of_order() {
    model(|| {
        let q = Quota::with_burst(1, 10, 4).unwrap();
        let word = Arc::new(ModelWord64::new(tat::FRESH));
        let w2 = word.clone();
        let a = loom::thread::spawn(move || tat::decide(&q, &*w2, 1_000, 1));
        let b = tat::decide(&q, &*word, 1_005, 1);
        let a = a.join().unwrap();
        assert!(a.allowed && b.allowed);
        let t = word.load();
        assert!(t == 1_020 || t == 1_025, "tat {t}");
    });
}
