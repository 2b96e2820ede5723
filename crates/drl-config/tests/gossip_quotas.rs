//! `scope: gossip` refuses quotas Cloud Control would serve above their
//! limit: slower than 1 unit/s (the allocator's least rate), or with a
//! burst smaller than the cluster (each node holds at least 1).

use drl_config::parse;

fn config(quota: &str, nodes: u32) -> String {
    format!(
        "limits:\n  - name: g\n    quota: {quota}\n    scope: gossip\ncluster:\n  node_id: 1\n  bind: 127.0.0.1:7946\n  seeds: [127.0.0.1:7947]\n  nodes: {nodes}\n"
    )
}

#[test]
fn a_gossip_quota_below_one_per_second_is_refused() {
    for quota in ["2/min", "10/h", "86399/d"] {
        let err = parse(&config(quota, 3), "drl.yaml")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("limit \"g\"")
                && err.contains("below 1 unit per second")
                && err.contains("scope: orbit or redis")
                && err.contains("drl.yaml:2:"),
            "{quota}: {err}"
        );
    }
    // 1 per second and above are served (a burst of 2 for 2 nodes).
    for quota in ["120/min", "7200/h", "2/s", "172800/d"] {
        parse(&config(quota, 2), "drl.yaml").unwrap_or_else(|e| panic!("{quota}: {e}"));
    }
}

#[test]
fn a_gossip_burst_smaller_than_the_cluster_is_refused() {
    let err = parse(&config("5/s", 12), "drl.yaml")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("burst of 5 for 12 nodes") && err.contains("admit 12 at once"),
        "{err}"
    );
    parse(&config("12/s", 12), "drl.yaml").unwrap();
    parse(&config("1000/s", 490), "drl.yaml").unwrap();
}
