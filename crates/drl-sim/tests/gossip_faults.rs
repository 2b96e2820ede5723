//! Deterministic fault testing of Cloud Control nodes (the node `drl serve`
//! runs for `scope: gossip`): thousands of seeded scenarios (loss up to
//! 20 %, delay, duplication, reordering, kills and restarts, partitions
//! and heals, wrong suspicions), with the global, k/N, 1/N and
//! steady-state bounds checked on every 1 s window.
//!
//! `DRL_GOSSIP_SEEDS=N` runs N seeds (default 2000);
//! `drl sim faults --protocol gossip --first-seed S --seeds 1` replays one.

use drl_sim::faults::{Protocol, run_seeds};

#[test]
fn bounds_hold_on_many_seeds() {
    let seeds: u64 = std::env::var("DRL_GOSSIP_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2000);
    let first: u64 = std::env::var("DRL_GOSSIP_SEED_START")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    match run_seeds(Protocol::Gossip, first, seeds, &mut |_| {}) {
        Ok(t) => {
            assert!(t.admitted > 0, "no admission in {seeds} seeds");
            if seeds >= 100 {
                assert!(t.crashes > 0 && t.partitions > 0, "faults not injected");
            }
        }
        Err(f) => panic!(
            "{f}\nscenario: {}\nreproduce with: drl sim faults --protocol gossip --first-seed {} --seeds 1",
            f.scenario, f.seed
        ),
    }
}

/// The harness can fail: nodes configured as if each were the whole
/// cluster (N = 1), cut off from each other, admit the limit each; the
/// global bound catches it. With the right N the same cut-off nodes hold
/// 1/N each and pass.
#[test]
fn a_broken_cluster_is_caught() {
    use drl_cluster::cloud_control::Aggregation;
    use drl_sim::faults::gossip::{random_scenario, run};
    let mut caught = 0;
    let seeds: Vec<u64> = (0..40)
        .filter(|s| random_scenario(*s).settings.aggregation == Aggregation::PeerTable)
        .take(20)
        .collect();
    for &seed in &seeds {
        let mut sc = random_scenario(seed);
        sc.demand = vec![sc.limit; sc.demand.len()];
        sc.loss = 1.0;
        sc.faults.clear();
        sc.flaps = 0.0;
        run(&sc, seed).unwrap();
        sc.settings.nodes = 1;
        if let Err(v) = run(&sc, seed) {
            assert!(v.admitted > v.bound, "{v}");
            caught += 1;
        }
    }
    assert_eq!(caught, seeds.len(), "every broken seed is caught");
}

/// A seed is a reproducible test case; another seed is another run.
#[test]
fn the_same_seed_is_the_same_run() {
    use drl_sim::faults::gossip::{random_scenario, trace};
    for seed in [1, 7, 42] {
        let sc = random_scenario(seed);
        assert_eq!(trace(&sc, seed), trace(&sc, seed));
        assert_ne!(trace(&sc, seed).per_node, trace(&sc, seed + 1).per_node);
    }
}

/// Flow Updating at 50 nodes with kills, restarts, partitions, wrong
/// suspicions and 5 % loss: the first seeds hold every bound
/// (`cargo run --release -p drl-sim --example faults_scale -- 50
/// flow-updating 300`: 299 of 300, seed 28 under the steady-state floor,
/// EXPERIMENTS.md).
#[test]
fn flow_updating_at_50_nodes_holds_the_first_seeds() {
    use drl_cluster::cloud_control::Aggregation;
    use drl_sim::faults::gossip::{run, scaled_scenario};
    let mut faults = 0;
    for seed in 0..8 {
        let sc = scaled_scenario(seed, 50, Aggregation::FlowUpdating);
        faults += sc.faults.len();
        if let Err(v) = run(&sc, seed) {
            panic!("seed {seed}: {v}");
        }
    }
    assert!(faults > 0, "faults not injected");
}

/// Issue 43: seeds Flow Updating failed before a node kept to its
/// allowance while its estimate settled after a membership change, and
/// before links with peers no longer neighbours were unwound. At 12 nodes:
/// FPS over the global bound after a cut or kill (14: 6,640 against
/// 5,500; 53: 6,365, and 6,095 after a heal with a one-sided frozen link;
/// 189: 7,328; 205: 6,751; 232: 6,765), GRD partition sides over k/N (3:
/// 3,077 against 2,291; 10: 4,009 against 2,750), survivors over (N-1)/N
/// (139). At 50 nodes: partition sides over k/N (GRD 22: 3,134 against
/// 2,750; 148: 1,955 against 1,650; 279: 3,796 against 3,410; FPS 40,
/// 139, 190). At 490 nodes: FPS over the global bound while capped
/// (74: 5,847 against 5,500) before a capped limiter with a zero local
/// limit stopped refilling its burst.
#[test]
fn flow_updating_holds_the_seeds_it_failed() {
    use drl_cluster::cloud_control::Aggregation;
    use drl_sim::faults::gossip::{run, scaled_scenario};
    let cases: [(u32, &[u64]); 3] = [
        (12, &[3, 10, 14, 53, 139, 189, 205, 232]),
        (50, &[22, 40, 139, 148, 190, 279]),
        (490, &[74]),
    ];
    for (nodes, seeds) in cases {
        for &seed in seeds {
            let sc = scaled_scenario(seed, nodes, Aggregation::FlowUpdating);
            assert!(
                !sc.faults.is_empty(),
                "{nodes} nodes, seed {seed}: no fault"
            );
            if let Err(v) = run(&sc, seed) {
                panic!("{nodes} nodes, seed {seed}: {v}");
            }
        }
    }
}
