//! Fingerprints of the simulator's outputs, for checking that a change to
//! the node's or the engine's representation leaves every result
//! byte-identical: `identity` prints one FNV-1a hash per experiment (the
//! `Debug` text of its full results) and a total. Run it before and after
//! a change and compare.
//!
//! Covered: the paper's baseline (Figure 3's setup) with every algorithm,
//! both aggregations, kills, restarts and a partition; every figure plan
//! (fig6, fig7, fig9, table1, table2) shortened; fig8 at 50 limiters with
//! both aggregations; the gossip fault harness over 30 seeds.

use drl_cluster::alloc::AlgorithmKind;
use drl_cluster::cloud_control::{Aggregation, fnv1a};
use drl_sim::figures::catalog::Figure;
use drl_sim::figures::common::FigureOptions;
use drl_sim::figures::fig8::Fig8;
use drl_sim::scenario::{FaultEvent, SEC, Scenario};

fn main() {
    let mut total = String::new();
    let mut out = |name: &str, text: String| {
        let h = fnv1a(text.as_bytes());
        println!("{name:<40} {h:016x} ({} bytes)", text.len());
        total.push_str(&format!("{h:x}"));
    };
    for agg in [Aggregation::PeerTable, Aggregation::PushSum] {
        for alg in AlgorithmKind::ALL {
            let sc = Scenario {
                aggregation: agg,
                duration: 8 * SEC,
                warmup: 2 * SEC,
                ..Scenario::paper_baseline(alg)
            };
            let r = drl_sim::run(&sc, &mut |_| {}).unwrap();
            out(&format!("baseline {agg} {alg:?}"), format!("{r:?}"));
        }
        let sc = Scenario {
            aggregation: agg,
            duration: 12 * SEC,
            warmup: 2 * SEC,
            gossip_loss: 0.05,
            flows_per_limiter: vec![2, 3, 1, 2, 2],
            faults: vec![
                FaultEvent::Kill {
                    node: 1,
                    at: 2 * SEC,
                },
                FaultEvent::Restart {
                    node: 1,
                    at: 5 * SEC,
                },
                FaultEvent::Partition {
                    groups: vec![vec![0, 1], vec![2, 3, 4]],
                    from: 6 * SEC,
                    until: 9 * SEC,
                },
            ],
            ..Scenario::paper_baseline(AlgorithmKind::Fps)
        };
        let r = drl_sim::run(&sc, &mut |_| {}).unwrap();
        out(&format!("faults {agg}"), format!("{r:?}"));
        for fig in [
            Figure::Fig6,
            Figure::Fig7,
            Figure::Fig9,
            Figure::Table1,
            Figure::Table2,
        ] {
            let plan = fig.plan(&FigureOptions {
                runs: Some(1),
                aggregation: agg,
                duration: Some(20 * SEC),
                ..FigureOptions::default()
            });
            let runs = plan.run(&mut |_| {}).unwrap();
            out(&format!("{} {agg}", fig.name()), format!("{runs:?}"));
        }
        let mut f = Fig8::paper(0.05, 10, 3);
        f.base.aggregation = agg;
        f.limiters = vec![50];
        f.branchings = vec![3];
        let r = f.run(&mut |_| {}).unwrap();
        out(
            &format!("fig8 50 {agg}"),
            format!("{:?}{:?}{}", r.points, r.seconds, r.csv()),
        );
    }
    for seed in 1..=30 {
        let r = drl_sim::faults::gossip::run_seed(seed);
        out(&format!("gossip faults seed {seed}"), format!("{r:?}"));
    }
    println!("total {:016x}", fnv1a(total.as_bytes()));
}
