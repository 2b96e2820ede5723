//! `scope: gossip` with three real `drl serve` processes under the issue's
//! harder scenarios: FPS with a 1:2:6 split, 10% gossip loss, demand moving
//! between nodes (the paper's Figure 9), a node partitioned while it runs
//! (by rewriting its `cluster.faults` and sending SIGHUP) and healed, and a
//! graceful leave on SIGTERM. Limit 1,000 req/s, margins +/-10%.
//!
//! The scenarios run one at a time (`common::gossip::Cluster` holds a
//! process-wide lock): on a 2-core machine overlapping clusters would
//! measure the machine, not the protocol.
//!
//! No verdict depends on how fast this machine is: every "the cluster gets
//! there" is a wait on the condition (a window in which the clients really
//! offered their demand and the admissions hold) under a hang guard; "not
//! starved" counts the first requests after an event, whenever they were
//! sent; "no second above the limit + 10%" is an upper bound, which a slow
//! machine only makes easier to keep.

mod common;

use std::time::Instant;

use common::gossip::{Cluster, LIMIT, Opts, PER_S, SPLIT, Window, first_offers, peak_second};
use common::wait_for_or;

/// Whether window `t` of `secs` s offered more than the limit, admitted
/// within 10% of it, and gave each node a share of the admissions within
/// `points` of its share of the offered demand.
fn holds_the_limit_by_demand(t: &Window, secs: u64, points: f64) -> Result<(), String> {
    let off: u64 = t.iter().map(|x| x.0).sum();
    let adm: u64 = t.iter().map(|x| x.1).sum();
    if off / secs < LIMIT * 3 / 2 {
        return Err(format!("only {}/s offered: {t:?}", off / secs));
    }
    // Safety: no window measured admits more than the limit + 10%, not
    // even one the wait goes past.
    assert!(
        adm / secs <= LIMIT * 11 / 10,
        "admitted {}/s > limit + 10%: {t:?}",
        adm / secs
    );
    if adm / secs < LIMIT * 9 / 10 {
        return Err(format!("admitted {}/s: {t:?}", adm / secs));
    }
    for (i, (o, a)) in t.iter().enumerate() {
        let so = *o as f64 / off as f64;
        let sa = *a as f64 / adm as f64;
        if (so - sa).abs() > points {
            return Err(format!(
                "node {}: demand share {so:.3}, admitted share {sa:.3}: {t:?}",
                i + 1
            ));
        }
    }
    Ok(())
}

/// Runs the 1:2:6 load until a 5 s window admits within 10% of the limit
/// with each node's share of the admissions within 5 points of its share of
/// the demand; no 5 s window measured on the way admits more than the
/// limit + 10%.
fn steady(opts: Opts) -> Cluster {
    let t0 = Instant::now();
    let mut c = Cluster::start(opts);
    let from = c.bucket_now() + 1;
    c.eventually(&format!("{opts:?}: the limit by demand"), from, 5, |t| {
        holds_the_limit_by_demand(t, 5, 0.05)
    });
    let end = c.bucket_now();
    c.stop_all();
    // Reported: the busiest second (the first seconds after the warm-up
    // may still carry the estimates' transient; the 5 s windows measured
    // are the bound asserted).
    let (peak, at) = peak_second(&c.buckets(), from, end.saturating_sub(PER_S));
    eprintln!(
        "{opts:?}: warm-up {:?}, peak second {peak} (bucket {at}), total {:?}",
        c.warm,
        t0.elapsed()
    );
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
            .metric(
                i,
                "drl_cluster_net_datagrams_total{dir=\"out\",result=\"sent\"}",
            )
            .unwrap_or(0.0);
        let dropped = c
            .metric(
                i,
                "drl_cluster_net_datagrams_total{dir=\"out\",result=\"injected_drop\"}",
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
/// node 3, then to node 1, then back to the 1:2:6 split. The loaded node's
/// first requests after each move are not starved, the loaded node then
/// reaches a second admitting the limit, back at 1:2:6 the shares follow
/// the demand again, and no second admits more than the limit + 10%.
#[test]
fn gossip_serve_shares_follow_moving_demand() {
    let t0 = Instant::now();
    let mut c = Cluster::start(Opts::default());
    // Settled first: the safety bound holds from there on.
    let start = c.settled(2);
    let all: usize = SPLIT.iter().sum();
    for to in [2usize, 0] {
        let mut demand = [0; 3];
        demand[to] = all;
        let at = c.bucket_now() + 1;
        c.set_demand(demand);
        // Its first ten 100 ms buckets with answers after the move (tens
        // of requests, however long the client took to send them): GRD's
        // drop probability is the cluster's, so the node admits from the
        // start, before its own estimate catches up.
        c.wait_bucket(at + 1);
        wait_for_or(
            "ten buckets of answers at the loaded node",
            || format!("{:?}", first_offers(&c.buckets(), to, at + 1, 10)),
            || {
                let b = c.buckets();
                b.range(at + 1..).filter(|(_, v)| v[to].0 > 0).count() >= 10
            },
        );
        let (offered, first) = first_offers(&c.buckets(), to, at + 1, 10);
        eprintln!(
            "all demand at node {}: first ten buckets {offered} checks, {first} admitted",
            to + 1
        );
        assert!(
            first > offered / 10,
            "node {} starved after the move: {first} of {offered}",
            to + 1
        );
        c.eventually(&format!("node {} at the limit", to + 1), at + 1, 1, |t| {
            let (o, a) = t[to];
            if o < LIMIT * 3 / 2 {
                return Err(format!("only {o} offered: {t:?}"));
            }
            if !(LIMIT * 85 / 100..=LIMIT * 11 / 10).contains(&a) {
                return Err(format!("admitted {a}: {t:?}"));
            }
            Ok(())
        });
    }
    // Back to 1:2:6: GRD drops with one probability everywhere, so the
    // shares follow the demand as soon as the estimates agree.
    let at = c.bucket_now() + 1;
    c.set_demand(SPLIT);
    c.wait_bucket(at + 1);
    wait_for_or(
        "ten buckets of answers at every node",
        || format!("{:?}", c.buckets().range(at + 1..).last()),
        || {
            let b = c.buckets();
            (0..3).all(|i| b.range(at + 1..).filter(|(_, v)| v[i].0 > 0).count() >= 10)
        },
    );
    for i in 0..3 {
        let (offered, first) = first_offers(&c.buckets(), i, at + 1, 10);
        assert!(
            first > 0,
            "node {} starved after the move back: {first} of {offered}",
            i + 1
        );
    }
    c.eventually("back to 1:2:6", at + 1, 1, |t| {
        holds_the_limit_by_demand(t, 1, 0.07)
    });
    let end = c.bucket_now();
    c.stop_all();
    let (peak, at_peak) = peak_second(&c.buckets(), start, end.saturating_sub(PER_S));
    eprintln!(
        "peak second {peak} (bucket {at_peak}); total {:?}",
        t0.elapsed()
    );
    assert!(
        peak <= LIMIT * 11 / 10,
        "a second admitted {peak} > limit + 10%"
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
    // Settled first: the safety bound holds from there on.
    let start = c.settled(2);
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
    // node 3 settles at 1/3 and the majority at 2/3.
    let third = LIMIT / 3;
    let (_, during) = c.eventually(
        "1/3 and 2/3 across the partition",
        c.bucket_now() + 1,
        3,
        |t| {
            let node3 = t[2].1 / 3;
            let majority = (t[0].1 + t[1].1) / 3;
            if node3.abs_diff(third) > third / 10 {
                return Err(format!(
                    "partitioned node {node3}/s, want {third}/s +/- 10%: {t:?}"
                ));
            }
            if majority.abs_diff(2 * third) > 2 * third / 10 {
                return Err(format!(
                    "nodes 1 and 2 {majority}/s, want {}/s +/- 10%: {t:?}",
                    2 * third
                ));
            }
            Ok(())
        },
    );
    eprintln!("partition seen after {seen:?}; then {during:?}");
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
    let (_, after) = c.eventually("the healed cluster", heal_at + 1, 1, |t| {
        let node3 = t[2].1;
        let total: u64 = t.iter().map(|x| x.1).sum();
        if node3.abs_diff(2 * third) > 2 * third / 10 {
            return Err(format!(
                "node 3 {node3}/s, want {}/s +/- 10%: {t:?}",
                2 * third
            ));
        }
        if total.abs_diff(LIMIT) > LIMIT / 10 {
            return Err(format!("total {total}/s, want {LIMIT}/s +/- 10%: {t:?}"));
        }
        Ok(())
    });
    let end = c.bucket_now();
    c.stop_all();
    // Every 1 s window from before the partition until the heal; the heal
    // itself is reported, not asserted. A peer counts only once it has sent
    // since it came up, so the two sides' views agree within a payload
    // (docs/gossip.md, "Healing"; 1,028 and 1,034 in two runs, against up
    // to 1,154 when a peer counted as soon as membership had it up), but
    // two runs are not enough to assert a bound there.
    let b = c.buckets();
    let (peak, at_peak) = peak_second(&b, start, heal_at.saturating_sub(PER_S));
    let (heal_peak, _) = peak_second(&b, heal_at.saturating_sub(PER_S), end.saturating_sub(PER_S));
    eprintln!(
        "healed: membership after {rejoined:?}, then {after:?}; peak second {peak} (bucket {at_peak}, partition from {start}), around the heal {heal_peak}; total {:?}",
        t0.elapsed()
    );
    assert!(
        peak <= LIMIT * 11 / 10,
        "a second admitted {peak} > limit + 10% before the heal"
    );
}

/// SIGTERM: the node drains, then leaves the cluster (a SWIM leave), exits
/// cleanly, and the others count it gone and take (N-1)/N of the limit.
/// That the leave is seen without waiting for failure detection is proven
/// without a clock in drl-cluster-net's `gossip_cluster.rs`
/// (`join_restores_the_limit_and_leave_is_seen_at_once`: suspicion
/// longer than the test's hang guard); `drl serve` does not expose the
/// membership timings to do the same here.
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
    eprintln!("leave seen after {seen:?}");
    assert!(status.success(), "drl serve exited with {status}");
    // (The log reader may still be behind the exited process: wait.)
    c.nodes[0].wait_log("left the gossip cluster");
    // The survivors take (N-1)/N of the limit.
    let survivors = LIMIT * 2 / 3;
    c.eventually("the survivors at 2/3", c.bucket_now() + 1, 1, |t| {
        let rate = t[1].1 + t[2].1;
        if rate.abs_diff(survivors) > survivors / 10 {
            return Err(format!("{rate}/s, want {survivors} +/- 10%: {t:?}"));
        }
        Ok(())
    });
    c.stop_all();
}
