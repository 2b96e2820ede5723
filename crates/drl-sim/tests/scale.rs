//! Scale under gossip loss (paper §5.6): 490 limiters, branching 3, 5 % of
//! the gossip lost, 50 Mbps. With push-sum (the aggregation that mixes fast
//! enough at this size, EXPERIMENTS.md "Scale under gossip loss"), GRD and
//! FPS hold the limit within +10 % in every second after their warm-up.
//! Flow Updating holds them too, FPS from its first second. The peer
//! table's runs (slower to converge here, and several times slower to
//! simulate) are in EXPERIMENTS.md, not in the suite.

use drl_cluster::alloc::AlgorithmKind;
use drl_cluster::cloud_control::Aggregation;
use drl_sim::scenario::{SEC, Scenario};

/// Mbps forwarded in each whole second.
fn per_second(r: &drl_sim::RunResult) -> Vec<f64> {
    let bins = (SEC / r.scenario.bin) as usize;
    let secs = r.forwarded[0].len() / bins;
    (0..secs)
        .map(|s| {
            let bytes: u64 = r
                .forwarded
                .iter()
                .map(|v| v[s * bins..(s + 1) * bins].iter().sum::<u64>())
                .sum();
            bytes as f64 * 8.0 / 1e6
        })
        .collect()
}

fn holds(algorithm: AlgorithmKind, secs: u64, from: usize) {
    let sc = Scenario::paper_scaling(490, algorithm, Aggregation::PushSum, 0.05, secs);
    holds_in(sc, from);
}

/// Asserts every second from `from` within 50 Mbps ± 10 %; returns them all.
fn holds_in(sc: Scenario, from: usize) -> Vec<f64> {
    let algorithm = sc.algorithm;
    let r = drl_sim::run(&sc, &mut |_| {}).unwrap();
    let mbps = per_second(&r);
    assert!(r.gossip_lost > 0, "loss was injected");
    for (s, m) in mbps.iter().enumerate().skip(from) {
        assert!(
            *m <= 55.0 && *m >= 45.0,
            "{algorithm}: second {s}: {m:.1} Mbps against 50 ± 10 % ({mbps:.1?})"
        );
    }
    mbps
}

#[test]
fn grd_push_sum_holds_490_limiters_under_loss() {
    holds(AlgorithmKind::Grd, 12, 3);
}

#[test]
fn fps_push_sum_holds_490_limiters_under_loss() {
    holds(AlgorithmKind::Fps, 16, 9);
}

/// Flow Updating, every flow starting within 500 ms: FPS never over +10 %
/// (the start-up the peer table and push-sum overshoot) and within ±10 %
/// from the second second (before a flow is measured a weight is at most
/// the flows sampled, and a limiter claims what its neighbours have
/// averaged: the local limits sum to 17, 30, 40 and 51 Mbps at 0.3, 0.55,
/// 0.8 and 1.05 s, and the first second admits 24.6), GRD from the third
/// (EXPERIMENTS.md, "Scale matrix").
#[test]
fn fps_flow_updating_holds_490_limiters_from_the_start() {
    let mut sc =
        Scenario::paper_scaling(490, AlgorithmKind::Fps, Aggregation::FlowUpdating, 0.05, 10);
    sc.start_spread = 500 * drl_sim::scenario::MS;
    let mbps = holds_in(sc, 1);
    assert!(mbps[0] <= 55.0, "first second {:.1} Mbps", mbps[0]);
}

#[test]
fn grd_flow_updating_holds_490_limiters_under_loss() {
    let mut sc =
        Scenario::paper_scaling(490, AlgorithmKind::Grd, Aggregation::FlowUpdating, 0.05, 10);
    sc.start_spread = 500 * drl_sim::scenario::MS;
    holds_in(sc, 3);
}
