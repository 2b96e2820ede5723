//! Issue 15, defect 4: `grd-smooth` was in the default algorithm lists of
//! `drl sim fig3`/`fig4`/`fig5` although, beyond two limiters, each
//! limiter integrates its own estimate of the global forwarded rate and
//! the drop probabilities drift apart (9.40 Mbps and Jain 0.686 at five
//! limiters). The defaults now hold only algorithms that keep the limit and
//! CTB's fairness at five limiters, besides GTB, the paper's own negative
//! result, kept to show it.

use drl_cluster::alloc::AlgorithmKind;
use drl_cluster::cloud_control::Aggregation;
use drl_sim::experiment::default_algorithms;
use drl_sim::scenario::{SEC, Scenario};

/// Five limiters with 1, 2, 3, 4 and 0 flows, 10 Mbps, 30 s, seed 1.
fn five(algorithm: AlgorithmKind) -> (f64, f64) {
    five_on(algorithm, Scenario::paper_baseline(algorithm).aggregation)
}

fn five_on(algorithm: AlgorithmKind, aggregation: Aggregation) -> (f64, f64) {
    let sc = Scenario {
        flows_per_limiter: vec![1, 2, 3, 4, 0],
        duration: 30 * SEC,
        aggregation,
        ..Scenario::paper_baseline(algorithm)
    };
    let r = drl_sim::run(&sc, &mut |_| {}).unwrap();
    (r.aggregate_mbps(), r.jain())
}

#[test]
fn every_default_algorithm_holds_at_five_limiters() {
    let (_, ctb_jain) = five(AlgorithmKind::Ctb);
    for figure in ["baseline", "fig3", "fig4", "fig5"] {
        for a in default_algorithms(figure) {
            if a == AlgorithmKind::Gtb || a.is_central() {
                continue;
            }
            let (mbps, j) = five(a);
            assert!(
                (mbps - 10.0).abs() <= 0.3,
                "{figure}: {a} delivers {mbps:.3} Mbps at five limiters"
            );
            assert!(
                j >= ctb_jain - 0.02,
                "{figure}: {a} Jain {j:.3} at five limiters, CTB {ctb_jain:.3}"
            );
        }
    }
}

/// The test above, on the peer table, catches `grd-smooth`: at five
/// limiters it misses the limit or CTB's fairness. (On Flow Updating, the
/// default aggregation, it holds there: 9.97 Mbps, Jain 0.987. It stays out
/// of the defaults while the peer table, still selectable, breaks it.)
#[test]
fn grd_smooth_fails_at_five_limiters_and_is_not_a_default() {
    let (_, ctb_jain) = five_on(AlgorithmKind::Ctb, Aggregation::PeerTable);
    let (mbps, j) = five_on(AlgorithmKind::GrdSmooth, Aggregation::PeerTable);
    assert!(
        (mbps - 10.0).abs() > 0.3 || j < ctb_jain - 0.02,
        "grd-smooth holds at five limiters on the peer table now ({mbps:.3} Mbps, \
         Jain {j:.3}): reconsider it for the defaults"
    );
    for figure in ["baseline", "fig3", "fig4", "fig5"] {
        assert!(!default_algorithms(figure).contains(&AlgorithmKind::GrdSmooth));
    }
}
