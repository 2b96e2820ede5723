//! Deterministic fault testing of the Orbit ring: thousands of seeded
//! scenarios (loss, delay, duplication, reordering, crashes and restarts,
//! partitions, wrong suspicions), the invariant checked after every event.
//!
//! `DRL_ORBIT_SEEDS=N` runs N seeds (default 2000);
//! `DRL_ORBIT_SEED=S cargo test -p drl-cluster --test orbit_sim -- reproduce`
//! replays one.

use drl_cluster::orbit::sim::{random_config, run_seed};

fn reproduce_cmd(seed: u64) -> String {
    format!(
        "DRL_ORBIT_SEED={seed} cargo test -p drl-cluster --test orbit_sim -- reproduce --nocapture"
    )
}

#[test]
fn invariant_holds_on_many_seeds() {
    let seeds: u64 = std::env::var("DRL_ORBIT_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2000);
    let first: u64 = std::env::var("DRL_ORBIT_SEED_START")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let mut admitted_total = 0u64;
    let mut crashes = 0u64;
    let mut partitions = 0u64;
    for seed in first..first + seeds {
        match run_seed(seed) {
            Ok(r) => {
                admitted_total += r.admitted.values().sum::<u64>();
                crashes += r.crashes;
                partitions += r.partitions;
            }
            Err(v) => panic!(
                "seed {seed} broke the invariant: {v}\nscenario: {:?}\nreproduce with: {}",
                random_config(seed),
                reproduce_cmd(seed)
            ),
        }
    }
    // The harness must actually exercise admissions and faults.
    assert!(admitted_total > 0, "no admission in {seeds} seeds");
    if seeds >= 200 {
        assert!(crashes > 0 && partitions > 0, "faults not injected");
    }
}

#[test]
fn reproduce() {
    let Some(seed) = std::env::var("DRL_ORBIT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
    else {
        return; // nothing to replay; the seed sweep above is the real test
    };
    let cfg = random_config(seed);
    println!("seed {seed}: {cfg:#?}");
    match run_seed(seed) {
        Ok(r) => println!(
            "seed {seed}: ok, {} events, {} messages, {} crashes, {} partitions, admitted {:?}",
            r.events, r.messages, r.crashes, r.partitions, r.admitted
        ),
        Err(v) => panic!("seed {seed}: {v}\nreproduce with: {}", reproduce_cmd(seed)),
    }
}
