//! One seed of the gossip fault harness at scale, traced: the scenario,
//! what each side of the cut in force admitted per second, and every
//! 100 ms the live nodes' local limits and remote sums.
//!
//! `cargo run --release -p drl-sim --example faults_probe -- NODES AGGREGATION SEED [FROM_S] [TO_S]`
//! (NODES 0: the random scenario of SEED, as `tests/gossip_faults.rs` runs
//! it; AGGREGATION is then the seed's own).

use drl_cluster::cloud_control::{Aggregation, KeyRef};
use drl_sim::faults::gossip::{observe, random_scenario, run, scaled_scenario};

const KEY: KeyRef<'static> = KeyRef {
    limit: "api",
    aggregate: "tenant",
};

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let nodes: u32 = a[1].parse().unwrap();
    let agg: Aggregation = a[2].parse().unwrap();
    let seed: u64 = a[3].parse().unwrap();
    let from: f64 = a.get(4).map_or(0.0, |s| s.parse().unwrap());
    let to: f64 = a.get(5).map_or(1e9, |s| s.parse().unwrap());
    let brief = std::env::var_os("BRIEF").is_some();
    let sc = if nodes == 0 {
        random_scenario(seed)
    } else {
        scaled_scenario(seed, nodes, agg)
    };
    println!(
        "alg {} branching {} detection {} ms limit {} demand {:?}",
        sc.settings.algorithm,
        sc.settings.branching,
        sc.detection / 1_000_000,
        sc.limit,
        sc.demand
    );
    println!("flaps/s {} faults:", sc.flaps);
    for f in &sc.faults {
        println!("  {f:?}");
    }
    println!("verdict: {:?}", run(&sc, seed).err());
    let mut last_side = Vec::new();
    let r = observe(&sc, seed, &mut |now, ns, alive, side| {
        let t = now as f64 / 1e9;
        if now % 100_000_000 != 0 || t < from || t > to {
            return;
        }
        if side != last_side.as_slice() {
            last_side = side.to_vec();
        }
        let mut sum = [0.0f64; 2];
        let mut line = String::new();
        for (i, n) in ns.iter().enumerate() {
            if !alive[i] {
                line.push_str(" x");
                continue;
            }
            if let Some(s) = n.keys().snapshot(KEY) {
                let ll = s
                    .local_limit
                    .unwrap_or_else(|| s.local_rate * (1.0 - s.drop_probability.unwrap_or(0.0)));
                let ll = if ll.is_finite() { ll } else { 0.0 };
                sum[side[i] as usize] += ll;
                line.push_str(&format!(
                    " {i}:{:.0}/{:.1}/{:.1}/{}{}",
                    ll,
                    s.published,
                    s.remote,
                    s.live_nodes,
                    if side[i] { "*" } else { "" }
                ));
            }
        }
        if brief {
            line.clear();
        }
        // Flow Updating: the estimates' sum against the values' sum (equal
        // when no flow is one-sided), and the one-sided flows.
        let wk = drl_cluster::cloud_control::wire_key(KEY);
        let (mut sl, mut se) = (0.0, 0.0);
        let mut states = std::collections::BTreeMap::new();
        for (i, n) in ns.iter().enumerate() {
            if alive[i]
                && let Some(st) = n.flow_state(&wk)
            {
                sl += st.local;
                se += st.estimate;
                states.insert(i as u32, st.flows);
            }
        }
        let mut odd = Vec::new();
        for (&i, fl) in &states {
            for &(j, f) in fl {
                let back = states
                    .get(&j)
                    .and_then(|g| g.iter().find(|x| x.0 == i).map(|x| x.1));
                if back.is_none_or(|b| (b + f).abs() > 0.3) && f.abs() > 0.3 {
                    odd.push(format!("{i}->{j}:{f:.2}/{back:?}"));
                }
            }
        }
        if !states.is_empty() {
            line.push_str(&format!(
                " | values {sl:.2} estimates {se:.2} one-sided {odd:?}"
            ));
        }
        println!(
            "t={t:.1} sum(local limits) side0 {:.0} side1 {:.0} |{line}",
            sum[0], sum[1]
        );
    });
    println!("per second: {:?}", r.per_second);
}
