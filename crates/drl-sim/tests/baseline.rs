//! End-to-end checks of the simulator on the paper's baseline (3 vs 7 TCP
//! flows, 10 Mbps), with shortened runs so the debug-mode suite stays fast.

use drl_cluster::alloc::AlgorithmKind;
use drl_sim::experiment::Experiment;
use drl_sim::report;
use drl_sim::scenario::{MS, SEC, Scenario};

fn short(algorithm: AlgorithmKind, secs: u64, seed: u64) -> Scenario {
    Scenario {
        duration: secs * SEC,
        warmup: 5 * SEC,
        seed,
        ..Scenario::paper_baseline(algorithm)
    }
}

fn experiment(algs: &[AlgorithmKind], secs: u64, runs: u32, seed: u64) -> Experiment {
    Experiment {
        base: short(AlgorithmKind::Ctb, secs, seed),
        algorithms: algs.to_vec(),
        runs,
        timescales: vec![1_000 * MS, 100 * MS],
    }
}

#[test]
fn same_seed_gives_byte_identical_outputs() {
    use AlgorithmKind::*;
    let exp = experiment(&[Ctb, Gtb, Grd, GrdSmooth, Fps, FpsMean], 8, 2, 42);
    let a = exp.run(&mut |_| {}).unwrap();
    let b = exp.run(&mut |_| {}).unwrap();
    let da = tempfile::tempdir().unwrap();
    let db = tempfile::tempdir().unwrap();
    let fa = report::write_all(&a, da.path(), 500 * MS).unwrap();
    let fb = report::write_all(&b, db.path(), 500 * MS).unwrap();
    assert_eq!(fa.len(), fb.len());
    assert!(fa.len() >= 8, "{fa:?}");
    for (x, y) in fa.iter().zip(&fb) {
        assert_eq!(x.file_name(), y.file_name());
        let bx = std::fs::read(x).unwrap();
        let by = std::fs::read(y).unwrap();
        assert!(!bx.is_empty());
        assert!(bx == by, "{} differs between identical runs", x.display());
    }
    // A different seed changes the traffic.
    let c = experiment(&[Ctb], 8, 1, 43).run(&mut |_| {}).unwrap();
    assert_ne!(
        c.algorithms[0].runs[0].forwarded,
        a.algorithms[0].runs[0].forwarded
    );
}

#[test]
fn summary_json_has_the_documented_shape() {
    use AlgorithmKind::*;
    let res = experiment(&[Ctb, Fps], 7, 1, 5).run(&mut |_| {}).unwrap();
    let v: serde_json::Value = serde_json::to_value(res.summary()).unwrap();
    for alg in ["ctb", "fps"] {
        let a = &v["algorithms"][alg];
        assert!(a["aggregate_mbps"].as_f64().unwrap() > 0.0);
        assert_eq!(a["limiter_mbps"].as_array().unwrap().len(), 2);
        let j = a["jain"].as_f64().unwrap();
        assert!(j > 0.0 && j <= 1.0);
    }
    assert_eq!(v["parameters"]["flows"], serde_json::json!([3, 7]));
}

/// Every algorithm holds the aggregate at the limit; GTB hands the 7-flow
/// limiter nearly everything; GRD and FPS split about 3:7 (FPS's split
/// varies by ±0.05 from seed to seed: the mean of three runs).
#[test]
fn baseline_rates_and_splits() {
    use AlgorithmKind::*;
    let res = experiment(&[Ctb, Gtb, Grd, GrdSmooth, Fps, FpsMean], 30, 3, 1)
        .run(&mut |_| {})
        .unwrap();
    let s = res.summary();
    for (name, a) in &s.algorithms {
        assert!(
            (a.aggregate_mbps - 10.0).abs() <= 0.5,
            "{name}: aggregate {} Mbps",
            a.aggregate_mbps
        );
    }
    let share = |n: &str| s.algorithms[n].limiter_share[0];
    assert!(share("gtb") < 0.1, "gtb 3-flow share {}", share("gtb"));
    // FPS's split is the noisiest: with the service's node it measured
    // 0.30-0.41 over single 30 s runs (0.39 as the mean of seeds 1-3 here;
    // the earlier simulator-only limiter gave 0.29-0.36 on the same seeds
    // with another random stream). 3:7 is 0.3; 1:1 would be 0.5.
    // `fps-mean` (our variant, not a default) is left out: once the flows
    // no longer phase-lock (1 ms jitter, EXPERIMENTS.md) it gives the
    // 3-flow side 0.15 on these seeds; it is only held to the limit above.
    // `grd-smooth` (not a default either) gives the 3-flow side 0.41 on
    // Flow Updating, the default aggregation (0.3 ± 0.06 on the peer
    // table): a rise of a node's own value not yet averaged counts for
    // both nodes, a fall once, so the noisier side (7 flows) reads the
    // other higher and drops more (EXPERIMENTS.md, "Verdict").
    for (n, tol) in [("grd", 0.06), ("grd-smooth", 0.12), ("fps", 0.12)] {
        assert!(
            (share(n) - 0.3).abs() < tol,
            "{n}: 3-flow share {}",
            share(n)
        );
    }
    // The reference itself: one bucket for all ten flows splits about 3:7.
    assert!(
        (share("ctb") - 0.3).abs() < 0.08,
        "ctb: 3-flow share {}",
        share("ctb")
    );
}

/// Jain's index over several runs: GRD at or above CTB, FPS at least CTB,
/// GTB far below (the paper's Figure 5).
#[test]
fn fairness_ordering_over_runs() {
    use AlgorithmKind::*;
    let mut exp = experiment(&[Ctb, Gtb, Grd, Fps], 40, 5, 100);
    exp.base.warmup = 10 * SEC;
    let res = exp.run(&mut |_| {}).unwrap();
    let s = res.summary();
    let j = |n: &str| s.algorithms[n].jain;
    assert!(j("grd") >= j("ctb"), "grd {} vs ctb {}", j("grd"), j("ctb"));
    assert!(j("grd") > 0.95, "grd {}", j("grd"));
    // FPS polices with token buckets like CTB: at least as fair (within
    // run-to-run noise), never down near GTB.
    assert!(
        j("fps") >= j("ctb") - 0.05,
        "fps {} vs ctb {}",
        j("fps"),
        j("ctb")
    );
    // GTB starves the 3-flow limiter: well below every other algorithm.
    for n in ["ctb", "grd", "fps"] {
        assert!(j("gtb") < j(n) - 0.15, "gtb {} vs {n} {}", j("gtb"), j(n));
    }
    assert!(j("gtb") < 0.7, "gtb {}", j("gtb"));
}

/// Figure 4: at 100 ms, random drop is burstier than the token buckets.
#[test]
fn short_timescale_burstiness() {
    use AlgorithmKind::*;
    let res = experiment(&[Ctb, Grd, Fps], 25, 2, 7)
        .run(&mut |_| {})
        .unwrap();
    let s = res.summary();
    let sd = |n: &str| {
        s.algorithms[n]
            .timescales
            .iter()
            .find(|t| t.timescale_ms == 100)
            .unwrap()
            .stddev_mbps
    };
    assert!(sd("grd") > sd("ctb"), "grd {} ctb {}", sd("grd"), sd("ctb"));
    // FPS is far less bursty than GRD but, once the flows no longer
    // phase-lock (1 ms jitter), burstier than CTB: 1.33 against 0.74 Mbps
    // over 10 runs (EXPERIMENTS.md, "Phase lock"); with 50 µs it was the
    // smoother of the two (1.44 against 1.82). Bound: the 10-run ratio,
    // 1.8 (these two runs: 1.34 against 0.77 since an FPS limiter that
    // left idle holds its burst until its weight is published, 1.6 before).
    assert!(sd("fps") < sd("grd"), "fps {} grd {}", sd("fps"), sd("grd"));
    assert!(
        sd("fps") <= sd("ctb") * 1.8,
        "fps {} ctb {}",
        sd("fps"),
        sd("ctb")
    );
    // At 1 s every algorithm delivers about the limit.
    for (n, a) in &s.algorithms {
        let one = a
            .timescales
            .iter()
            .find(|t| t.timescale_ms == 1000)
            .unwrap();
        assert!((one.mean_mbps - 10.0).abs() < 0.6, "{n}: {}", one.mean_mbps);
    }
}

#[test]
fn invalid_scenarios_are_errors_not_panics() {
    let mut sc = short(AlgorithmKind::Fps, 5, 1);
    sc.flows_per_limiter = vec![0, 0];
    assert!(drl_sim::run(&sc, &mut |_| {}).is_err());
    let mut sc = short(AlgorithmKind::Fps, 5, 1);
    sc.gossip_loss = 1.5;
    assert!(drl_sim::run(&sc, &mut |_| {}).is_err());
    let mut sc = short(AlgorithmKind::Fps, 5, 1);
    sc.warmup = sc.duration;
    assert!(drl_sim::run(&sc, &mut |_| {}).is_err());
}

/// Lossy gossip still converges: GRD keeps the aggregate near the limit with
/// 20 % of gossip messages lost (the paper's sequence-number compensation).
#[test]
fn lossy_gossip_with_compensation() {
    let mut sc = short(AlgorithmKind::Grd, 25, 3);
    sc.gossip_loss = 0.2;
    let r = drl_sim::run(&sc, &mut |_| {}).unwrap();
    assert!(r.gossip_lost > 0);
    assert!(
        (r.aggregate_mbps() - 10.0).abs() < 0.8,
        "{}",
        r.aggregate_mbps()
    );
}

/// The paper's §5.6 on the service's node: three limiters, one killed at
/// 10 s; once membership reports it (1.2 s), the survivors hold (N-1)/N
/// of the limit, and before the kill the cluster held the whole limit.
/// With push-sum too: the survivors take back their links with the dead
/// limiter (`PushSum::reclaim`), which recovers the mass it held (without
/// that, GRD stayed under (N-1)/N and FPS over the whole limit).
#[test]
fn a_killed_limiter_leaves_the_survivors_n_minus_1_over_n() {
    use drl_cluster::cloud_control::Aggregation;
    use drl_sim::scenario::FaultEvent;
    for aggregation in [Aggregation::PeerTable, Aggregation::PushSum] {
        for algorithm in [AlgorithmKind::Grd, AlgorithmKind::Fps] {
            let sc = Scenario {
                flows_per_limiter: vec![3, 3, 3],
                aggregation,
                faults: vec![FaultEvent::Kill {
                    node: 2,
                    at: 10 * SEC,
                }],
                ..short(algorithm, 20, 3)
            };
            let r = drl_sim::engine::run(&sc, &mut |_| {}).unwrap();
            let bins_per_s = (SEC / sc.bin) as usize;
            let mbps = |from: u64, to: u64, limiters: &[usize]| {
                let bytes: u64 = limiters
                    .iter()
                    .map(|&l| {
                        r.forwarded[l][from as usize * bins_per_s..to as usize * bins_per_s]
                            .iter()
                            .sum::<u64>()
                    })
                    .sum();
                bytes as f64 * 8.0 / 1e6 / (to - from) as f64
            };
            let before = mbps(5, 10, &[0, 1, 2]);
            let after = mbps(13, 20, &[0, 1]);
            let what = format!("{algorithm} {aggregation}");
            assert!((before - 10.0).abs() < 1.0, "{what}: before {before}");
            assert!(
                (after - 10.0 * 2.0 / 3.0).abs() < 0.67,
                "{what}: after {after} (2/3 of 10 = 6.67)"
            );
        }
    }
}
