//! Hand-computed traces for each algorithm (docs/semantics.md), including ties at
//! exact boundaries, a clock going backwards, cost 0, cost > capacity and
//! u64 extremes.

use drl_core::{Algorithm, Decision, DenyReason, Limiter, Quota};

/// `(now, cost, allowed, remaining, retry_after, reset_after, delay)`.
type Row = (u64, u64, bool, u64, Option<u64>, u64, u64);

fn run(algorithm: Algorithm, quota: Quota, rows: &[Row]) {
    let l = Limiter::new(algorithm, quota);
    let mut s = l.new_state();
    for (i, &(now, cost, allowed, remaining, retry, reset, delay)) in rows.iter().enumerate() {
        let d: Decision = l.decide(&mut s, now, cost);
        let got = (
            now,
            cost,
            d.allowed,
            d.remaining,
            d.retry_after,
            d.reset_after,
            d.delay,
        );
        assert_eq!(
            got,
            (now, cost, allowed, remaining, retry, reset, delay),
            "{algorithm} row {i}: (now, cost, allowed, remaining, retry_after, reset_after, delay)"
        );
        assert_eq!(d.limit, quota.limit());
        match (d.allowed, d.retry_after) {
            (true, _) => assert_eq!(d.reason, None),
            (false, None) => assert_eq!(d.reason, Some(DenyReason::CostExceedsCapacity)),
            (false, Some(_)) => assert_eq!(d.reason, Some(DenyReason::OverLimit)),
        }
    }
}

/// 2 per 10 ns: T = 5 ns, burst 2, capacity 10 ns.
fn bucket_rows() -> Vec<Row> {
    vec![
        (0, 1, true, 1, Some(0), 5, 0),
        (0, 1, true, 0, Some(0), 10, 0),
        (0, 1, false, 0, Some(5), 10, 0),
        (4, 1, false, 0, Some(1), 6, 0),
        // exactly one T later: the token is there (tie admits)
        (5, 1, true, 0, Some(0), 10, 0),
        // clock goes backwards: treated as arriving at 5
        (3, 1, false, 0, Some(5), 10, 0),
        // a query reports and consumes nothing
        (5, 0, true, 0, Some(0), 10, 0),
        (7, 0, true, 0, Some(0), 8, 0),
        // cost above burst: never, whatever the wait
        (100, 3, false, 2, None, 0, 0),
        // refill is capped at burst
        (100, 2, true, 0, Some(0), 10, 0),
        (110, 2, true, 0, Some(0), 10, 0),
        (111, 1, false, 0, Some(4), 9, 0),
    ]
}

#[test]
fn token_bucket_trace() {
    run(
        Algorithm::TokenBucket,
        Quota::new(2, 10).unwrap(),
        &bucket_rows(),
    );
}

#[test]
fn leaky_bucket_meter_trace_equals_token_bucket() {
    run(
        Algorithm::LeakyBucket,
        Quota::new(2, 10).unwrap(),
        &bucket_rows(),
    );
}

#[test]
fn gcra_trace_equals_token_bucket() {
    run(Algorithm::Gcra, Quota::new(2, 10).unwrap(), &bucket_rows());
}

#[test]
fn burst_differs_from_limit() {
    // 1 per 10 ns with burst 3: three at once, then one per 10 ns.
    let q = Quota::with_burst(1, 10, 3).unwrap();
    let rows: Vec<Row> = vec![
        (1000, 1, true, 2, Some(0), 10, 0),
        (1000, 1, true, 1, Some(0), 20, 0),
        (1000, 1, true, 0, Some(0), 30, 0),
        (1000, 1, false, 0, Some(10), 30, 0),
        (1010, 1, true, 0, Some(0), 30, 0),
    ];
    for a in [
        Algorithm::TokenBucket,
        Algorithm::LeakyBucket,
        Algorithm::Gcra,
    ] {
        run(a, q, &rows);
    }
}

#[test]
fn emission_interval_rounds_up_so_never_more_than_quota() {
    // 3 per 10 ns: T = 4 (not 3.33), burst 3.
    let q = Quota::new(3, 10).unwrap();
    let rows: Vec<Row> = vec![
        (0, 3, true, 0, Some(0), 12, 0),
        (3, 1, false, 0, Some(1), 9, 0),
        // an exact 10/3 ns interval would hold 3 tokens at 10; T = 4 holds 2
        (10, 3, false, 2, Some(2), 2, 0),
        (12, 3, true, 0, Some(0), 12, 0),
    ];
    run(Algorithm::TokenBucket, q, &rows);
    run(Algorithm::Gcra, q, &rows);
}

#[test]
fn leaky_queue_trace() {
    // 2 per 10 ns: T = 5, room for 2 permits of backlog.
    let rows: Vec<Row> = vec![
        (0, 1, true, 1, Some(0), 5, 0),
        (0, 1, true, 0, Some(0), 10, 5),
        (0, 1, false, 0, Some(5), 10, 0),
        (7, 1, true, 0, Some(0), 8, 3),
        (7, 0, true, 0, Some(0), 8, 0),
        (2, 1, false, 0, Some(3), 8, 0), // backwards: as at 7
        (15, 1, true, 1, Some(0), 5, 0), // drained exactly
        (15, 3, false, 1, None, 5, 0),
        (15, 2, false, 1, Some(5), 5, 0),
    ];
    run(Algorithm::LeakyQueue, Quota::new(2, 10).unwrap(), &rows);
}

#[test]
fn leaky_queue_fresh_admits_burst_with_growing_delay() {
    let q = Quota::with_burst(1, 100, 4).unwrap();
    let l = Limiter::new(Algorithm::LeakyQueue, q);
    let mut s = l.new_state();
    for k in 0..4u64 {
        let d = l.decide(&mut s, 50, 1);
        assert!(d.allowed);
        assert_eq!(d.delay, k * 100);
    }
    assert!(!l.decide(&mut s, 50, 1).allowed);
}

#[test]
fn fixed_window_trace() {
    // 3 per 10 ns, windows [0,10), [10,20), ...
    let rows: Vec<Row> = vec![
        (0, 2, true, 1, Some(0), 10, 0),
        (9, 1, true, 0, Some(0), 1, 0),
        (9, 1, false, 0, Some(1), 1, 0),
        // the window boundary belongs to the next window
        (10, 1, true, 2, Some(0), 10, 0),
        // backwards: as at 10
        (5, 3, false, 2, Some(10), 10, 0),
        (19, 4, false, 2, None, 1, 0),
        (19, 0, true, 2, Some(0), 1, 0),
        // an empty window is fresh: nothing to reset
        (25, 0, true, 3, Some(0), 0, 0),
        (25, 3, true, 0, Some(0), 5, 0),
    ];
    run(Algorithm::FixedWindow, Quota::new(3, 10).unwrap(), &rows);
}

#[test]
fn sliding_log_trace() {
    // 3 per 10 ns; an entry at ts counts while now - ts < 10.
    let rows: Vec<Row> = vec![
        (0, 1, true, 2, Some(0), 10, 0),
        (4, 2, true, 0, Some(0), 10, 0),
        (9, 1, false, 0, Some(1), 5, 0),
        // the entry at 0 stops counting at exactly 10
        (10, 1, true, 0, Some(0), 10, 0),
        (12, 2, false, 0, Some(2), 8, 0),
        // backwards: as at 10, the last admission (a denial leaves no mark)
        (8, 2, false, 0, Some(4), 10, 0),
        (14, 2, true, 0, Some(0), 10, 0),
        (14, 4, false, 0, None, 10, 0),
        (30, 0, true, 3, Some(0), 0, 0),
    ];
    run(Algorithm::SlidingLog, Quota::new(3, 10).unwrap(), &rows);
}

#[test]
fn sliding_window_trace() {
    // 4 per 10 ns.
    let rows: Vec<Row> = vec![
        (0, 4, true, 0, Some(0), 20, 0),
        // window 1: prev = 4 weighs 4*8/10 = 3.2; 3.2 + 1 > 4
        (12, 1, false, 0, Some(1), 8, 0),
        // at 13 prev weighs 2.8: fits
        (13, 1, true, 0, Some(0), 17, 0),
        // 4 more cannot fit until prev and curr are both gone: window 3
        (13, 4, false, 0, Some(17), 17, 0),
        (5, 0, true, 0, Some(0), 17, 0), // backwards: as at 13
        (13, 5, false, 0, None, 17, 0),
        // a gap of two windows zeroes both counts
        (100, 4, true, 0, Some(0), 20, 0),
    ];
    run(Algorithm::SlidingWindow, Quota::new(4, 10).unwrap(), &rows);
}

#[test]
fn sliding_window_remaining_counts_the_weighted_previous_window() {
    let l = Limiter::new(Algorithm::SlidingWindow, Quota::new(10, 100).unwrap());
    let mut s = l.new_state();
    assert!(l.decide(&mut s, 0, 10).allowed);
    // at 150: prev weighs 10 * 50/100 = 5, so 5 fit.
    let d = l.check(&s, 150, 0);
    assert_eq!(d.remaining, 5);
    assert!(l.decide(&mut s, 150, 5).allowed);
    let d = l.check(&s, 150, 1);
    assert!(!d.allowed);
    // prev's weight must fall by 1 permit: 10 ns later.
    assert_eq!(d.retry_after, Some(10));
    assert!(l.check(&s, 160, 1).allowed);
    assert!(!l.check(&s, 159, 1).allowed);
}

#[test]
fn u64_extremes_never_panic_and_stay_exact() {
    let quotas = [
        Quota::new(1, 1).unwrap(),
        Quota::new(u64::MAX, 1).unwrap(),
        Quota::new(1, u64::MAX).unwrap(),
        Quota::new(u64::MAX, u64::MAX).unwrap(),
        Quota::with_burst(2, u64::MAX / 2, 2).unwrap(),
    ];
    let times = [0, 1, u64::MAX / 2, u64::MAX - 1, u64::MAX, 3];
    let costs = [0, 1, 2, u64::MAX];
    for a in Algorithm::ALL {
        for q in quotas {
            let l = Limiter::new(a, q);
            let mut s = l.new_state();
            for &t in &times {
                for &c in &costs {
                    let d = l.decide(&mut s, t, c);
                    let cap = if a.is_windowed() {
                        q.limit()
                    } else {
                        q.burst()
                    };
                    if c > cap {
                        assert!(!d.allowed && d.retry_after.is_none(), "{a} {q} t={t} c={c}");
                    }
                    assert!(
                        d.remaining <= cap,
                        "{a} {q}: remaining {} > {cap}",
                        d.remaining
                    );
                }
            }
        }
    }
    // At the very end of time a full bucket still admits its burst.
    let l = Limiter::new(Algorithm::Gcra, Quota::new(3, 30).unwrap());
    let mut s = l.new_state();
    for _ in 0..3 {
        assert!(l.decide(&mut s, u64::MAX, 1).allowed);
    }
    let d = l.decide(&mut s, u64::MAX, 1);
    assert_eq!((d.allowed, d.retry_after), (false, Some(10)));
}
