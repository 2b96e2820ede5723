//! Tests of one key's state: the 1/N rule, demand in cost units, lagging
//! and settling claims.

use super::*;
use crate::cloud_control::Aggregation;

const MS: Nanos = 1_000_000;

#[test]
fn one_over_n_rule() {
    assert_eq!(effective_limit(1_000, 3, 3), 1_000);
    assert_eq!(effective_limit(1_000, 2, 3), 666);
    assert_eq!(effective_limit(1_000, 1, 3), 333);
    assert_eq!(effective_limit(1_000, 4, 3), 1_000);
    assert_eq!(effective_limit(1_000, 0, 3), 333);
}

fn settings(algorithm: AlgorithmKind, nodes: u32) -> Settings {
    Settings {
        ewma: 0.0,
        ..Settings::new(algorithm, nodes)
    }
}

#[test]
fn demand_is_counted_in_cost_units() {
    let s = settings(AlgorithmKind::Grd, 1);
    let lim = KeyLimit {
        rate: 1_000,
        depth: 100,
    };
    let k = KeyState::new(&s, lim, 1, 1, 0);
    // 50 requests of cost 2 in 50 ms: 2,000 units/s, twice the limit.
    for i in 0..50 {
        k.admit(i * MS, lim, 2, 0);
    }
    k.tick(&s, 50 * MS, 0.0, 1);
    let snap = k.snapshot();
    assert!(
        (snap.local_rate - 2_000.0).abs() < 1e-6,
        "{}",
        snap.local_rate
    );
    assert!((snap.drop_probability.unwrap() - 0.5).abs() < 1e-9);
    assert_eq!(snap.admitted + snap.denied, 100);
}

#[test]
fn a_lost_peer_moves_the_limit_without_forgetting_the_drop_rate() {
    let s = settings(AlgorithmKind::Grd, 3);
    let lim = KeyLimit {
        rate: 900,
        depth: 100,
    };
    let k = KeyState::new(&s, lim, 3, 1, 0);
    for i in 0..90 {
        k.admit(i * MS / 2, lim, 1, 0);
    }
    // 1,800/s here, 0 elsewhere, not yet published: this node claims
    // its third of the headroom only, p = 5/6.
    k.tick(&s, 50 * MS, 0.0, 3);
    assert!((k.snapshot().drop_probability.unwrap() - 5.0 / 6.0).abs() < 1e-9);
    // Published (the peers hold 1,800): p = 1/2.
    for i in 0..90 {
        k.admit(50 * MS + i * MS / 2, lim, 1, 0);
    }
    k.tick(&s, 100 * MS, 0.0, 3);
    assert!((k.snapshot().drop_probability.unwrap() - 0.5).abs() < 1e-9);
    // A peer lost: the limit in force drops to 600 at once, and the
    // allocator keeps dropping meanwhile (a rebuilt GRD would admit
    // everything until its next interval).
    for i in 0..90 {
        k.admit(100 * MS + i * MS / 2, lim, 1, 0);
    }
    k.tick(&s, 150 * MS, 0.0, 2);
    let snap = k.snapshot();
    assert_eq!(snap.effective_limit, 600);
    assert!((snap.drop_probability.unwrap() - (1.0 - 600.0 / 1_800.0)).abs() < 1e-9);
    assert!(snap.denied > 30, "kept dropping: {snap:?}");
}
/// Issue 15, defect 2: with the peer table at scale a node's new
/// weight reaches its peers over a round of `ceil((N - 1) / branching)`
/// intervals; until then it claims only the share of what they hold.
#[test]
fn a_lagging_weight_claims_only_what_the_peers_heard() {
    let lim = KeyLimit {
        rate: 1_000_000,
        depth: 10_000,
    };
    let run = |nodes: u32, branching: u32| {
        let s = Settings {
            branching,
            aggregation: Aggregation::PeerTable,
            ..settings(AlgorithmKind::Fps, nodes)
        };
        assert_eq!(s.dissemination_rounds() > 1, nodes > branching + 1);
        let k = KeyState::new(&s, lim, nodes, 1, 0);
        let mut out = Vec::new();
        for t in 1..=400u64 {
            // Ten flows at full speed; the others' weights sum to 90.
            for i in 0..100 {
                k.admit((t - 1) * 50 * MS + i * MS / 2, lim, 5_000, i % 10);
            }
            k.tick(&s, t * 50 * MS, 90.0, nodes);
            out.push(k.snapshot());
        }
        out
    };
    // Three nodes, branching 2: every peer hears every value; the node
    // claims nothing before it published a weight once, then for its
    // first second (`fps::WAKE_CLAIM`) the share of the weight it
    // published the interval before (what the peers hold), then its
    // weight's share.
    let direct = run(3, 2);
    assert_eq!(direct[0].heard, Some(0.0));
    assert_eq!(direct[0].local_limit, Some(0.0));
    for (i, snap) in direct.iter().enumerate().skip(1) {
        assert_eq!(snap.heard, None);
        let first_second = (i as u64 + 1) * 50 * MS < crate::alloc::fps::WAKE_CLAIM;
        let w = if first_second {
            direct[i - 1].published
        } else {
            snap.published
        };
        let share = w * 1e6 / (w + 90.0);
        assert!(
            (snap.local_limit.unwrap() - share).abs() < 1e-6 * share,
            "interval {i}: {snap:?}"
        );
    }
    // 100 nodes, branching 1: 99 intervals per round. Early on the
    // peers have heard a fraction of the weight and the node claims
    // that fraction's share only; it converges to the full share.
    let lagging = run(100, 1);
    // At the first interval the peers have heard nothing: no claim.
    assert_eq!(lagging[0].heard, Some(0.0));
    assert_eq!(lagging[0].local_limit, Some(0.0));
    for snap in &lagging {
        let claim = snap.published.min(snap.heard.unwrap());
        let share = claim * 1e6 / (claim + 90.0);
        assert!(snap.local_limit.unwrap() <= share + 1e-6, "{snap:?}");
    }
    let last = lagging.last().unwrap();
    let full = last.published * 1e6 / (last.published + 90.0);
    assert!(
        (last.local_limit.unwrap() - full).abs() < 0.02 * full,
        "{last:?}"
    );
}

/// Issue 43: while a Flow Updating estimate settles after a
/// membership change, whatever the remote sums read (0, negative,
/// swinging) and however the limit in force moves, a key admits at
/// most its allowance from the interval before the change, scaled
/// down with the limit in force and never up. Without the cap, a
/// remote sum read at 0 handed an FPS node the whole limit.
mod settling {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn never_admits_more_than_before_the_change(
            fps in any::<bool>(),
            demand in 200u64..4_000,
            flows in 1u64..6,
            before in 1.0f64..5_000.0,
            remotes in proptest::collection::vec(-500.0f64..5_000.0, 5..40),
            lives in proptest::collection::vec(1u32..=10, 5..40),
        ) {
            let alg = if fps { AlgorithmKind::Fps } else { AlgorithmKind::Grd };
            let s = Settings {
                aggregation: crate::cloud_control::Aggregation::FlowUpdating,
                ..Settings::new(alg, 10)
            };
            let lim = KeyLimit { rate: 10_000, depth: 500 };
            let k = KeyState::new(&s, lim, 10, 7, 0);
            let per_tick = demand / 20;
            let mut t = 0u64;
            let admit_interval = |t: u64| {
                for i in 0..per_tick {
                    k.admit(t * 50 * MS + i * 50 * MS / per_tick.max(1), lim, 1, i % flows);
                }
            };
            let quiet = Settle::default();
            // Settled: 20 intervals with a steady remote sum.
            for _ in 0..20 {
                t += 1;
                admit_interval(t);
                k.tick_heard(&s, t * 50 * MS, before, 10, None, quiet);
            }
            let snap = k.snapshot();
            let allowed = |snap: &KeySnapshot| match (snap.local_limit, snap.drop_probability) {
                (Some(l), _) => l,
                (None, Some(p)) => snap.local_rate * (1.0 - p),
                _ => f64::INFINITY,
            };
            let cap = {
                let a = allowed(&snap);
                if snap.local_limit.is_none() && snap.drop_probability == Some(0.0) {
                    snap.effective_limit as f64 * snap.local_rate
                        / (snap.local_rate + snap.remote).max(1e-9)
                } else {
                    a
                }
            };
            let eff0 = snap.effective_limit as f64;
            // A change, then the remote sums swing while it settles.
            for (i, (&r, &live)) in remotes.iter().zip(lives.iter().cycle()).enumerate() {
                t += 1;
                admit_interval(t);
                let settle = Settle { changed: i == 0, settling: true };
                k.tick_heard(&s, t * 50 * MS, r, live, None, settle);
                let snap = k.snapshot();
                let bound = cap * (snap.effective_limit as f64 / eff0).min(1.0);
                prop_assert!(
                    allowed(&snap) <= bound + 1e-6 * bound.max(1.0),
                    "interval {i}: allowed {} > {bound} ({snap:?})", allowed(&snap)
                );
            }
            // Settled again: the cap is gone (the node may take more).
            t += 1;
            admit_interval(t);
            k.tick_heard(&s, t * 50 * MS, 0.0, 10, None, quiet);
            if fps {
                prop_assert!(k.snapshot().local_limit.unwrap() >= 0.0);
            }
        }
    }
}
