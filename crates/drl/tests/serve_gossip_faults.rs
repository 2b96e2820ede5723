//! `scope: gossip` with three real `drl serve` processes under the issue's
//! harder scenarios: FPS with a 1:2:6 split, 10% gossip loss, demand moving
//! between nodes (the paper's Figure 9), a node partitioned while it runs
//! (by rewriting its `cluster.faults` and sending SIGHUP) and healed, and a
//! graceful leave on SIGTERM. Limit 1,000 req/s, margins +/-10%.
//!
//! The scenarios run one at a time (`common::gossip::Cluster` holds a
//! process-wide lock): on a 2-core machine overlapping clusters would
//! measure the machine, not the protocol.

mod common;

use std::time::{Duration, Instant};

use common::gossip::{Cluster, LIMIT, Opts, PER_S, SPLIT, peak_second, totals};
use common::wait_for_or;

/// Admitted per node per second over buckets `[from, from + secs s)`.
fn rates(c: &Cluster, from: u64, secs: u64) -> [u64; 3] {
    let t = totals(&c.buckets(), from, from + secs * PER_S);
    t.map(|(_, a)| a / secs)
}

/// Runs the 1:2:6 load for one 5 s window: the global admitted rate is
/// within 10% of the limit and each node's share of the admissions within
/// 5 points of its share of the demand.
fn steady(opts: Opts) -> Cluster {
    let t0 = Instant::now();
    let mut c = Cluster::start(opts);
    let from = c.bucket_now() + 1;
    c.wait_bucket(from + 5 * PER_S);
    c.stop_all();
    let t = totals(&c.buckets(), from, from + 5 * PER_S);
    let offered: u64 = t.iter().map(|x| x.0).sum::<u64>() / 5;
    let admitted: u64 = t.iter().map(|x| x.1).sum::<u64>() / 5;
    let report = format!(
        "{opts:?}: warm-up {:?}, offered {offered}/s, admitted {admitted}/s, per node (offered, admitted) per 5 s {t:?}, total {:?}",
        c.warm,
        t0.elapsed()
    );
    eprintln!("{report}");
    assert!(
        offered >= LIMIT * 3 / 2,
        "only {offered}/s offered\n{report}"
    );
    assert!(
        admitted.abs_diff(LIMIT) <= LIMIT / 10,
        "admitted {admitted}/s, not within 10% of {LIMIT}/s\n{report}"
    );
    let off: u64 = t.iter().map(|x| x.0).sum();
    let adm: u64 = t.iter().map(|x| x.1).sum();
    let split: usize = SPLIT.iter().sum();
    for (i, (o, a)) in t.iter().enumerate() {
        let want = SPLIT[i] as f64 / split as f64;
        let so = *o as f64 / off as f64;
        let sa = *a as f64 / adm as f64;
        assert!(
            (so - want).abs() <= 0.05,
            "node {}: demand share {so:.3}",
            i + 1
        );
        assert!(
            (sa - want).abs() <= 0.05,
            "node {}: demand share {want:.3}, admitted share {sa:.3}\n{report}",
            i + 1
        );
    }
    c
}

/// FPS (flow = client, `all|<client>` keys) with 1, 2 and 6 clients of
/// 333 req/s: shares follow the demand, the total holds the limit.
#[test]
fn gossip_fps_serve_nodes_shares_follow_demand() {
    steady(Opts {
        algorithm: "fps",
        ..Opts::default()
    });
}

/// `cluster.faults.drop_rate: 0.1` at every node (gossip and SWIM
/// datagrams alike): still within 10% of the limit over 5 s.
#[test]
fn gossip_serve_nodes_hold_the_limit_with_ten_percent_loss() {
    let c = steady(Opts {
        drop_rate: 0.1,
        ..Opts::default()
    });
    for i in 0..3 {
        let sent = c
            .metric(i, "drl_node_datagrams_total{dir=\"out\",result=\"sent\"}")
            .unwrap_or(0.0);
        let dropped = c
            .metric(
                i,
                "drl_node_datagrams_total{dir=\"out\",result=\"injected_drop\"}",
            )
            .unwrap_or(0.0);
        let rate = dropped / (sent + dropped);
        eprintln!("node {}: {sent} sent, {dropped} dropped", i + 1);
        assert!(
            (0.07..0.13).contains(&rate),
            "node {}: {dropped} of {} datagrams dropped",
            i + 1,
            sent + dropped
        );
    }
}

/// The paper's Figure 9, shortened: all the demand (3,000 req/s) moves to
/// node 3, then to node 1, then back to the 1:2:6 split. Within a second of
/// each move the loaded node admits the limit, in the first second it is not
/// starved, and no second admits more than the limit + 10%.
#[test]
fn gossip_serve_shares_follow_moving_demand() {
    let t0 = Instant::now();
    let mut c = Cluster::start(Opts::default());
    let start = c.bucket_now();
    let all: usize = SPLIT.iter().sum();
    let mut report = String::new();
    for to in [2usize, 0] {
        let mut demand = [0; 3];
        demand[to] = all;
        let at = c.bucket_now();
        c.set_demand(demand);
        c.wait_bucket(at + 1 + 2 * PER_S);
        let first = rates(&c, at + 1, 1);
        let second = rates(&c, at + 1 + PER_S, 1);
        report.push_str(&format!(
            "all demand at node {}: first second {first:?}, next {second:?}\n",
            to + 1
        ));
        assert!(
            first[to] > LIMIT * 3 / 10,
            "node {} starved after the move\n{report}",
            to + 1
        );
        assert!(
            second[to] >= LIMIT * 85 / 100 && second[to] <= LIMIT * 11 / 10,
            "within a second node {} should admit the limit\n{report}",
            to + 1
        );
    }
    // Back to 1:2:6: GRD drops with one probability everywhere, so the
    // shares follow the demand as soon as the estimates agree.
    let at = c.bucket_now();
    c.set_demand(SPLIT);
    c.wait_bucket(at + 1 + 2 * PER_S);
    let first = rates(&c, at + 1, 1);
    let second = rates(&c, at + 1 + PER_S, 1);
    report.push_str(&format!(
        "back to 1:2:6: first second {first:?}, next {second:?}\n"
    ));
    let end = c.bucket_now();
    c.stop_all();
    let (peak, at_peak) = peak_second(&c.buckets(), start, end - PER_S);
    eprintln!(
        "{report}peak second {peak} (bucket {at_peak}); total {:?}",
        t0.elapsed()
    );
    for (i, r) in first.iter().enumerate() {
        assert!(
            *r > 0,
            "node {} starved after the move back\n{report}",
            i + 1
        );
    }
    let total: u64 = second.iter().sum();
    assert!(
        total.abs_diff(LIMIT) <= LIMIT / 10,
        "after the move back\n{report}"
    );
    for (i, r) in second.iter().enumerate() {
        let want = SPLIT[i] as f64 / all as f64;
        let share = *r as f64 / total as f64;
        assert!(
            (share - want).abs() <= 0.07,
            "node {}: share {share:.3}, demand share {want:.3}\n{report}",
            i + 1
        );
    }
    assert!(
        peak <= LIMIT * 11 / 10,
        "a second admitted {peak} > limit + 10%\n{report}"
    );
}

/// Node 3 is cut off while it runs (`cluster.faults.isolate: true`, applied
/// by SIGHUP): it falls back to 1/N of the limit, nodes 1 and 2 to (N-1)/N,
/// and no second admits more than the limit + 10%, before or during the
/// partition. Healed the same way, the three count each other again and
/// share the whole limit.
#[test]
fn gossip_serve_partitioned_node_falls_back_to_one_nth_and_heals() {
    let t0 = Instant::now();
    let mut c = Cluster::start(Opts::default());
    let start = c.bucket_now();
    // Only `cluster.faults` reloads; any other change of the section is
    // refused and the node keeps running as it was.
    let other = c.base_config(2).replace("branching: 3", "branching: 2");
    let refused = c.reload_with(2, &other).unwrap_err();
    assert!(
        refused.contains("the `cluster` section changed"),
        "{refused}"
    );
    c.reconfigure(2, "  faults:\n    isolate: true\n");
    let cut = Instant::now();
    let live = |c: &Cluster| [0, 1, 2].map(|i| c.live_nodes(i));
    wait_for_or(
        "both sides to see the partition",
        || format!("live nodes {:?}", live(&c)),
        || live(&c) == [Some(2), Some(2), Some(1)],
    );
    let seen = cut.elapsed();
    // Each side still counts the other's demand for half of stale_after
    // after it declared it down (the other side may detect later); then
    // the majority settles at 2/3.
    let settled = c.wait_rate(&[0, 1], 2 * LIMIT / 3, Duration::from_secs(10));
    eprintln!("majority at 2/3 after {settled:?} more");
    let during = c.loaded_rates(3, 4);
    eprintln!("partition seen after {seen:?}; then per node {during:?}");
    let third = LIMIT / 3;
    assert!(
        during[2].abs_diff(third) <= third / 10,
        "partitioned node admitted {}/s, want {third}/s +/- 10%",
        during[2]
    );
    let majority = during[0] + during[1];
    assert!(
        majority.abs_diff(2 * third) <= 2 * third / 10,
        "nodes 1 and 2 admitted {majority}/s, want {}/s +/- 10%",
        2 * third
    );
    // Heal.
    let heal_at = c.bucket_now();
    c.reconfigure(2, "");
    let healed = Instant::now();
    wait_for_or(
        "the three nodes to count each other again",
        || format!("live nodes {:?}", live(&c)),
        || live(&c) == [Some(3); 3],
    );
    let rejoined = healed.elapsed();
    // Node 3 has 2/3 of the demand: healed, it gets 2/3 of the limit again
    // (not its fallback 1/3), and the cluster as a whole the limit.
    let took = c.wait_rate(&[2], 2 * third, Duration::from_secs(10));
    let after = c.loaded_rates(1, 5);
    let end = c.bucket_now();
    c.stop_all();
    let total: u64 = after.iter().sum();
    assert!(
        total.abs_diff(LIMIT) <= LIMIT / 10,
        "healed cluster admitted {after:?}"
    );
    // Every 1 s window from before the partition until the heal; the heal
    // itself is reported, not asserted. A peer counts only once it has sent
    // since it came up, so the two sides' views agree within a payload
    // (docs/gossip.md, "Healing"; 1,028 and 1,034 in two runs, against up
    // to 1,154 when a peer counted as soon as membership had it up), but
    // two runs are not enough to assert a bound there.
    let b = c.buckets();
    let (peak, at_peak) = peak_second(&b, start, heal_at.saturating_sub(PER_S));
    let (heal_peak, _) = peak_second(&b, heal_at.saturating_sub(PER_S), end - PER_S);
    eprintln!(
        "healed: membership after {rejoined:?}, node 3 at 2/3 after {took:?} more, then {after:?}; peak second {peak} (bucket {at_peak}, partition from {start}), around the heal {heal_peak}; total {:?}",
        t0.elapsed()
    );
    assert!(
        peak <= LIMIT * 11 / 10,
        "a second admitted {peak} > limit + 10% before the heal"
    );
}

/// SIGTERM: the node drains, then leaves the cluster (a SWIM leave), so the
/// others count it gone well before failure detection could notice
/// (`MembershipConfig::detection_ms()`, 1.2 s with the defaults; a silent
/// stop takes at least probe RTT + suspicion, 700 ms).
#[test]
fn gossip_serve_node_leaves_the_cluster_on_sigterm() {
    let mut c = Cluster::start(Opts::default());
    c.stop(0);
    let t = Instant::now();
    c.nodes[0].signal("TERM");
    wait_for_or(
        "nodes 2 and 3 to count 2 live nodes",
        || format!("{:?} {:?}", c.live_nodes(1), c.live_nodes(2)),
        || c.live_nodes(1) == Some(2) && c.live_nodes(2) == Some(2),
    );
    let seen = t.elapsed();
    let status = c.nodes[0].wait_exit();
    // `MembershipConfig::default().detection_ms()`: 2 probe periods, 2 probe
    // RTTs and the suspicion time (drl-node is not a dependency here).
    let detection: u64 = 2 * 200 + 2 * 100 + 600;
    eprintln!("leave seen after {seen:?} (failure detection bound {detection} ms)");
    assert!(status.success(), "drl serve exited with {status}");
    // (The log reader may still be behind the exited process: wait.)
    c.nodes[0].wait_log("left the gossip cluster");
    assert!(
        seen < Duration::from_millis(detection / 2),
        "the leave took {seen:?}: peers fell back on failure detection"
    );
    // The survivors take (N-1)/N of the limit.
    c.wait_rate(&[1, 2], LIMIT * 2 / 3, Duration::from_secs(5));
    c.stop_all();
}
