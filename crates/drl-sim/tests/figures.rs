//! The claims of the paper's Figures 6, 7, 9 and Tables 1, 2 on short
//! runs with fixed seeds, and their determinism (the same seed gives
//! byte-identical output files).

use drl_core::Nanos;
use drl_sim::figures::catalog::Figure;
use drl_sim::figures::common::{FigureOptions, VariantRuns};
use drl_sim::figures::{fig6, fig7, fig9, table1, table2};
use drl_sim::scenario::{MS, SEC};

fn run(fig: Figure, runs: u32, duration: Option<Nanos>) -> Vec<VariantRuns> {
    let o = FigureOptions {
        runs: Some(runs),
        duration,
        ..FigureOptions::default()
    };
    fig.plan(&o).run(&mut |_| {}).unwrap()
}

/// Table 2: every aggregate within 10 % of the paper's and within 5 % of
/// each other, FPS gives the long-RTT flows more than CTB does (and the
/// short-RTT ones less), and FPS's long/short ratio is far above CTB's and
/// GRD's (the paper's claim). Why its long-RTT flows get twice the paper's
/// rate: `tests/table2_rtt.rs`.
#[test]
fn table2_aggregates_and_rtt_fairness() {
    let runs = run(Figure::Table2, 3, Some(40 * SEC));
    let t = table2::results(&runs);
    for (label, c) in &t {
        let paper = c.paper.unwrap()[0];
        assert!(
            (c.aggregate_mbps - paper).abs() <= 0.1 * paper,
            "{label}: aggregate {} vs paper {paper}",
            c.aggregate_mbps
        );
    }
    assert!(
        t["fps"].long_rtt_mbps > t["ctb"].long_rtt_mbps,
        "fps long {} vs ctb long {}",
        t["fps"].long_rtt_mbps,
        t["ctb"].long_rtt_mbps
    );
    assert!(t["fps"].short_rtt_mbps < t["ctb"].short_rtt_mbps);
    // Through one bucket short RTTs win.
    assert!(t["ctb"].short_rtt_mbps > 2.0 * t["ctb"].long_rtt_mbps);
    // The paper: "FPS provides a higher degree of fairness between RTTs,
    // but all three limiters deliver equivalent aggregate rates".
    let ratio = |l: &str| t[l].long_rtt_mbps / t[l].short_rtt_mbps;
    for other in ["ctb", "grd"] {
        assert!(
            ratio("fps") > 2.0 * ratio(other),
            "long/short: fps {} vs {other} {}",
            ratio("fps"),
            ratio(other)
        );
    }
    let aggs: Vec<f64> = t.values().map(|c| c.aggregate_mbps).collect();
    let (lo, hi) = aggs
        .iter()
        .fold((f64::MAX, f64::MIN), |(a, b), &x| (a.min(x), b.max(x)));
    assert!(hi - lo < 0.05 * hi, "aggregates {aggs:?}");
}

/// Figure 6: with one flow per limiter joining every 10 s, every variant
/// holds the limit; FPS at 500 ms is steadier per flow than GRD at 500 ms,
/// and GRD at 50 ms is fairer across the active flows than GRD at 500 ms.
/// On the peer table every variant is within 1 Mbps of 10. On Flow
/// Updating (the default aggregation) GRD at 50 ms delivers 8.90: a node
/// counts a rise of its own demand not yet averaged for every node (safe
/// at a cold start, where all may rise at once) and a fall once, so a
/// steady demand's noise reads the others higher than they are and GRD
/// drops more (EXPERIMENTS.md, "Scale matrix", "Verdict"). Its bound here
/// is 1.2 under.
#[test]
fn fig6_flow_dynamics() {
    use drl_cluster::cloud_control::Aggregation;
    for aggregation in [Aggregation::PeerTable, Aggregation::FlowUpdating] {
        let o = FigureOptions {
            runs: Some(1),
            aggregation,
            ..FigureOptions::default()
        };
        let runs = Figure::Fig6.plan(&o).run(&mut |_| {}).unwrap();
        let d = fig6::results(&runs);
        for (label, x) in &d {
            let under = if aggregation == Aggregation::FlowUpdating && label == "grd-50ms" {
                1.2
            } else {
                1.0
            };
            assert!(
                x.aggregate_mbps < 11.0 && x.aggregate_mbps > 10.0 - under,
                "{aggregation}: {label}: aggregate {}",
                x.aggregate_mbps
            );
        }
        assert!(
            d["fps-500ms"].flow_stddev_500ms < d["grd-500ms"].flow_stddev_500ms,
            "{aggregation}: {d:?}"
        );
        assert!(
            d["grd-50ms"].epoch_jain > d["grd-500ms"].epoch_jain,
            "{aggregation}: {d:?}"
        );
    }
}

/// Figure 6 with push-sum: FPS settles as it does with the peer table.
/// Its second regime sets the weight from the estimate of the others; an
/// error of push-sum's estimate went into the weight and from it into the
/// others' estimates, and weights reached 10^5-10^6 (aggregate deviation
/// 3.79 Mbps over 500 ms, Jain 0.952; 5.93 and 0.778 before 2d67199). The
/// weight is now bounded by the demand over the fastest sampled flow.
#[test]
fn fig6_fps_settles_with_push_sum() {
    let o = FigureOptions {
        runs: Some(1),
        aggregation: drl_cluster::cloud_control::Aggregation::PushSum,
        ..FigureOptions::default()
    };
    let runs = Figure::Fig6.plan(&o).run(&mut |_| {}).unwrap();
    let d = fig6::results(&runs);
    let fps = &d["fps-500ms"];
    assert!((fps.aggregate_mbps - 10.0).abs() < 1.0, "{fps:?}");
    assert!(fps.aggregate_stddev_500ms < 2.0, "{fps:?}");
    assert!(fps.epoch_jain > 0.98, "{fps:?}");
}

/// Figure 7: behind the 2 Mbps bottleneck limiter 2 forwards at most
/// 2 Mbps and FPS gives limiter 1 the rest; after the join FPS reaches
/// 90 % of the 40 % share within about 8 s and settles near 40 %.
#[test]
fn fig7_fps_reapportions_around_a_bottleneck() {
    let runs = run(Figure::Fig7, 1, Some(50 * SEC));
    let b = fig7::results(&runs);
    let fps = &b["fps"];
    assert!(fps.bottlenecked_mbps[1] <= 2.05, "{fps:?}");
    assert!(
        fps.bottlenecked_mbps[0] > 7.0,
        "limiter 1 takes the rest: {fps:?}"
    );
    let t = fps.time_to_target_s.expect("FPS reaches the 40 % share");
    assert!(t <= 10.0, "{t} s to 40 %");
    assert!(
        (fps.limiter2_share_after - 0.4).abs() < 0.08,
        "share {}",
        fps.limiter2_share_after
    );
    assert!(fps.upstream_drops > 0.0);
}

/// Figure 9: while the demand sits at 4 of the 10 sites, static 1/N
/// delivers about 4/10 of the limit and FPS nearly all of it; with the
/// demand spread both deliver the limit.
#[test]
fn fig9_fps_follows_the_demand_static_does_not() {
    let runs = run(Figure::Fig9, 1, Some(60 * SEC));
    let s = fig9::results(&runs);
    let (st, fps) = (&s["static"], &s["fps"]);
    assert!(st.phases[0].of_limit > 0.9, "{st:?}");
    assert!(fps.phases[0].of_limit > 0.9, "{fps:?}");
    assert!((st.phases[1].of_limit - 0.4).abs() < 0.06, "{st:?}");
    assert!(fps.phases[1].of_limit > 0.9, "{fps:?}");
}

/// Figure 9 on Flow Updating: FPS delivers the limit in both phases and
/// no 1 s window from 1 s on exceeds +10 %. Limiters of 3 transfers whose
/// weight rose with no flow measured yet published weights of 207,141
/// within 200 ms; the averaged estimate of the others' sum then read 0 at
/// limiters still holding such a weight, each took the whole limit, and
/// FPS admitted 21.56 Mbps against 5 in its first phase (`Fps::anchored`).
#[test]
fn fig9_fps_holds_the_limit_on_flow_updating() {
    let o = FigureOptions {
        runs: Some(1),
        duration: Some(60 * SEC),
        aggregation: drl_cluster::cloud_control::Aggregation::FlowUpdating,
        ..FigureOptions::default()
    };
    let runs = Figure::Fig9.plan(&o).run(&mut |_| {}).unwrap();
    let fps = &fig9::results(&runs)["fps"];
    for p in &fps.phases {
        assert!((p.of_limit - 1.0).abs() < 0.1, "{fps:?}");
    }
    assert_eq!(fps.windows_over_110pct, 0.0, "{fps:?}");
    assert!(fps.max_1s_mbps <= 5.5, "{fps:?}");
}

/// Table 1: the bulk flows and the Web flows both get service, bulk
/// fairness is high for every variant, and larger objects see higher
/// delivered rates (handshakes and slow start dominate small ones).
#[test]
fn table1_bulk_and_web_share_the_limit() {
    let runs = run(Figure::Table1, 2, Some(40 * SEC));
    let t = table1::results(&runs);
    for (label, c) in &t {
        let total = (c.bulk_goodput_kbps + c.web_goodput_kbps) / 1e3;
        assert!(
            (total - 10.0).abs() < 1.5,
            "{label}: total goodput {total} Mbps"
        );
        assert!(c.web_goodput_kbps > 500.0, "{label}: {c:?}");
        assert!(c.bulk_fairness > 0.9, "{label}: {c:?}");
        let h = c.web_rate_hmean_kbps;
        assert!(h[0] < h[1] && h[1] < h[2], "{label}: {h:?}");
    }
    // GRD drops SYN-ACKs with its global drop probability and a lost one
    // costs a 3 s timeout: with them unpoliced no handshake is retried and
    // small objects are served at least twice as fast, near the paper's
    // GRD column (25.84 Kbps below 5 KB).
    let (grd, free) = (&t["grd"], &t["grd-syn-unpoliced"]);
    assert!(grd.syn_retries > 10.0, "{grd:?}");
    assert_eq!(free.syn_retries, 0.0, "{free:?}");
    assert!(
        free.web_rate_hmean_kbps[0] > 2.0 * grd.web_rate_hmean_kbps[0],
        "{grd:?} {free:?}"
    );
}

/// Every figure writes the same bytes for the same seed.
#[test]
fn figures_are_deterministic() {
    for fig in [
        Figure::Fig6,
        Figure::Fig7,
        Figure::Fig9,
        Figure::Table1,
        Figure::Table2,
    ] {
        let o = FigureOptions {
            runs: Some(1),
            duration: Some(12 * SEC),
            seed: 9,
            ..FigureOptions::default()
        };
        let write = |dir: &std::path::Path| {
            let plan = fig.plan(&o);
            let runs = plan.run(&mut |_| {}).unwrap();
            fig.write(&plan, &runs, dir, 500 * MS).unwrap()
        };
        let (da, db) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let (fa, fb) = (write(da.path()), write(db.path()));
        assert_eq!(fa.len(), 5, "{fa:?}");
        for (x, y) in fa.iter().zip(&fb) {
            let (bx, by) = (std::fs::read(x).unwrap(), std::fs::read(y).unwrap());
            assert!(!bx.is_empty());
            assert!(
                bx == by,
                "{}: {} differs between runs",
                fig.name(),
                x.display()
            );
        }
    }
}
