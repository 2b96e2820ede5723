//! Figure 8 past the paper (issue 15): memory and work grow linearly with
//! the number of limiters on a short run, not with its square.
//!
//! A counting global allocator measures, for the same short Figure 8 run
//! at N and 2N limiters, the peak of live heap bytes (memory) and the
//! bytes allocated in total (a proxy for work: a node that walked the
//! membership every interval allocated its list every interval). Doubling
//! N must less than triple both; a quadratic structure (a membership per
//! node, a per-interval scan that collects it) gives about 4×. The single
//! test in this binary keeps other threads' allocations out of the counts.

// A counting allocator is the one place this test needs `unsafe`.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use drl_cluster::cloud_control::Aggregation;
use drl_sim::figures::fig8::Fig8;

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);
static TOTAL: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            let live = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(live, Ordering::Relaxed);
            TOTAL.fetch_add(layout.size(), Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Peak live bytes above the live bytes at the start, and bytes allocated,
/// of a 2 s Figure 8 run (FPS, branching 3, 5 % loss) at `n` limiters.
fn measure(n: usize, aggregation: Aggregation) -> (usize, usize) {
    let mut f = Fig8::paper(0.05, 2, 1);
    f.base.aggregation = aggregation;
    f.limiters = vec![n];
    f.branchings = vec![3];
    f.algorithms = vec![drl_cluster::alloc::AlgorithmKind::Fps];
    let base = LIVE.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    let total = TOTAL.load(Ordering::Relaxed);
    let r = f.run(&mut |_| {}).unwrap();
    assert_eq!(r.points.len(), 1);
    assert!(r.points[0].datagrams_sent > 0);
    let peak = PEAK.load(Ordering::Relaxed) - base;
    (peak, TOTAL.load(Ordering::Relaxed) - total)
}

#[test]
fn doubling_the_limiters_less_than_triples_memory_and_work() {
    for aggregation in [Aggregation::PushSum, Aggregation::PeerTable] {
        let (peak1, total1) = measure(300, aggregation);
        let (peak2, total2) = measure(600, aggregation);
        let (pr, tr) = (peak2 as f64 / peak1 as f64, total2 as f64 / total1 as f64);
        eprintln!(
            "{aggregation}: peak {peak1} -> {peak2} B ({pr:.2}x), allocated {total1} -> {total2} B ({tr:.2}x)"
        );
        assert!(
            pr < 3.0,
            "{aggregation}: peak heap grew {pr:.2}x from 300 to 600 limiters ({peak1} -> {peak2} B)"
        );
        assert!(
            tr < 3.0,
            "{aggregation}: bytes allocated grew {tr:.2}x from 300 to 600 limiters ({total1} -> {total2} B)"
        );
    }
}
