//! Issue 15, defect 2: with the peer table at 490 limiters (branching 3) a
//! limiter's value reaches each peer once per 163 intervals (8.15 s), so
//! while flows keep arriving (one every 100 ms, the paper's §5.6 setup) the
//! others count every new or grown demand at its old value, often 0, and
//! hand the limit out without it. Before the fix the limiters' local limits
//! summed to 127 Mbps against 50 and the aggregate reached 129 Mbps in a
//! second; a limiter now claims only the share of what its peers have
//! heard (`IntervalInput::heard`). Not yet within 10 % at this scale while
//! demand grows (EXPERIMENTS.md, "Figure 8"): the bound here is 1.5x.
//!
//! Flow Updating (the default aggregation) on the same run: the aggregate
//! peaks at 70.8 Mbps in second 3 and is within +10 % from second 8 on,
//! where the peer table still admits 63-68 Mbps. Its local limits summed
//! to 396 Mbps at 2-3 s, not bounded here: limiters whose neighbourhood
//! has not yet heard the others' weights (their `remote` reads 0) hold the
//! whole limit, mostly unused (EXPERIMENTS.md, "Scale matrix").

use drl_cluster::alloc::AlgorithmKind;
use drl_cluster::cloud_control::Aggregation;
use drl_sim::figures::fig8::{Fig8, aggregate_per_second};

#[test]
fn lagging_peers_do_not_hand_the_limit_out_twice() {
    let f = Fig8::paper(0.05, 12, 5);
    for aggregation in [Aggregation::PeerTable, Aggregation::FlowUpdating] {
        let mut sc = f.scenario(AlgorithmKind::Fps, 3, 490);
        sc.aggregation = aggregation;
        let r = drl_sim::run(&sc, &mut |_| {}).unwrap();
        assert!(r.gossip_lost > 0);
        let limit = 50.0;
        let secs = aggregate_per_second(&r);
        assert!(
            secs.iter().all(|&m| m <= 1.5 * limit),
            "{aggregation:?}: aggregate per second {secs:.1?}"
        );
        // And the limit is used: the cluster is not starved either.
        assert!(
            secs[5..].iter().all(|&m| m >= 0.8 * limit),
            "{aggregation:?}: {secs:.1?}"
        );
        if aggregation == Aggregation::PeerTable {
            // The claims: the sum of the local limits at every interval.
            let mut by_tick: std::collections::BTreeMap<u64, f64> = Default::default();
            for t in &r.ticks {
                *by_tick.entry(t.at).or_default() += t.local_limit.unwrap_or(0.0) * 8.0 / 1e6;
            }
            let worst = by_tick.values().copied().fold(0.0, f64::max);
            assert!(
                worst <= 1.5 * limit,
                "local limits summed to {worst:.1} Mbps"
            );
        } else {
            // Flow Updating converges while demand still grows.
            assert!(secs[8..].iter().all(|&m| m <= 1.1 * limit), "{secs:.1?}");
        }
    }
}
