//! The layering of ARCHITECTURE.md, enforced: dependencies point down only.
//!
//! [`RULES`] lists, for each lower crate, the crates it must never reach.
//! The check walks the *transitive* closure of normal dependencies (not dev,
//! not build) in `cargo metadata`'s resolved graph, for every feature and
//! every target platform, so a forbidden crate reached through any
//! intermediate crate fails the test, and the message shows the path.

use std::collections::{BTreeMap, VecDeque};
use std::path::Path;
use std::process::Command;

use serde_json::Value;

/// One rule: `krate` must not depend, directly or transitively, on any of
/// `forbidden`.
struct Rule {
    /// The package whose dependency closure is checked.
    krate: &'static str,
    /// Packages that must not appear in that closure.
    forbidden: &'static [&'static str],
}

/// "Dependencies point down only" (ARCHITECTURE.md), as a never-list.
const RULES: &[Rule] = &[
    Rule {
        krate: "drl-core",
        forbidden: &[
            "drl-cluster",
            "drl-store",
            "drl-server",
            "drl-sim",
            "drl-cluster-net",
            "drl-redis-module",
            "drl",
            // No async runtime in the algorithms.
            "tokio",
        ],
    },
    Rule {
        krate: "drl-cluster",
        forbidden: &[
            "drl-store",
            "drl-cluster-net",
            "drl-server",
            "drl-sim",
            "drl-redis-module",
            "drl",
            // Sans-IO protocol cores: no async runtime.
            "tokio",
        ],
    },
    Rule {
        krate: "drl-sim",
        forbidden: &[
            "drl-store",
            "drl-cluster-net",
            "drl-server",
            "drl-redis-module",
            "drl",
        ],
    },
    Rule {
        krate: "drl-cluster-net",
        forbidden: &["drl-server", "drl"],
    },
    Rule {
        krate: "drl-http",
        forbidden: &[
            "drl-cluster",
            "drl-store",
            "drl-cluster-net",
            "drl-server",
            "drl-sim",
            "drl-redis-module",
            "drl",
            // Response building only: no runtime, no framework.
            "tokio",
            "axum",
        ],
    },
    Rule {
        krate: "drl-client",
        forbidden: &[
            "drl-cluster",
            "drl-store",
            "drl-cluster-net",
            "drl-server",
            "drl-service",
            "drl-sim",
            "drl-redis-module",
            "drl",
        ],
    },
    Rule {
        krate: "drl-relay",
        forbidden: &["drl-server", "drl-sim", "drl-redis-module", "drl"],
    },
    Rule {
        krate: "drl-redis-wire",
        forbidden: &[
            "drl-cluster",
            "drl-store",
            "drl-cluster-net",
            "drl-server",
            "drl-sim",
            "drl-redis-module",
            "drl",
            // Formats only: no runtime.
            "tokio",
        ],
    },
    Rule {
        krate: "drl-api",
        forbidden: &[
            "drl-cluster",
            "drl-store",
            "drl-cluster-net",
            "drl-config",
            "drl-service",
            "drl-server",
            "drl-sim",
            "drl-redis-module",
            "drl",
        ],
    },
    Rule {
        krate: "drl-config",
        forbidden: &["drl-api", "drl-service", "drl-server", "drl-sim", "drl"],
    },
    // The service core: no listeners, no file watching (tonic and the
    // Redis client still bring their own transports in, for the status
    // type and the stores).
    Rule {
        krate: "drl-service",
        forbidden: &["drl-server", "drl-bench", "drl-sim", "drl", "notify"],
    },
    // The bench wing ships in nothing.
    Rule {
        krate: "drl",
        forbidden: &["drl-bench"],
    },
    Rule {
        krate: "drl-server",
        forbidden: &["drl-bench", "drl"],
    },
];

/// One package of a dependency graph.
struct Package {
    /// The package name (`drl-core`, `tokio`).
    name: String,
    /// Indices (into the graph) of its normal dependencies.
    deps: Vec<usize>,
}

/// A resolved dependency graph: packages and their normal dependency edges.
type Graph = Vec<Package>;

/// Every rule broken in `graph`, one message per (crate, forbidden
/// dependency), naming the shortest path by which the crate reaches it.
///
/// A rule whose crate is not in the graph is reported too: a renamed crate
/// must not silently turn its rule off.
fn violations(graph: &Graph, rules: &[Rule]) -> Vec<String> {
    let mut out = Vec::new();
    for rule in rules {
        let roots: Vec<usize> = (0..graph.len())
            .filter(|&i| graph[i].name == rule.krate)
            .collect();
        if roots.is_empty() {
            out.push(format!(
                "rule for `{}`: no such package in the dependency graph \
                 (renamed or removed? update RULES in crates/drl/tests/architecture.rs)",
                rule.krate
            ));
            continue;
        }
        for root in roots {
            // Breadth-first, so each path found is a shortest one.
            let mut parent: Vec<Option<usize>> = vec![None; graph.len()];
            let mut seen = vec![false; graph.len()];
            let mut queue = VecDeque::from([root]);
            seen[root] = true;
            let mut reached: BTreeMap<&str, usize> = BTreeMap::new();
            while let Some(at) = queue.pop_front() {
                for &dep in &graph[at].deps {
                    if seen[dep] {
                        continue;
                    }
                    seen[dep] = true;
                    parent[dep] = Some(at);
                    let name = graph[dep].name.as_str();
                    if rule.forbidden.contains(&name) {
                        reached.entry(name).or_insert(dep);
                    }
                    queue.push_back(dep);
                }
            }
            for (name, end) in reached {
                let mut path = vec![graph[end].name.as_str()];
                let mut at = end;
                while let Some(p) = parent[at] {
                    path.push(graph[p].name.as_str());
                    at = p;
                }
                path.reverse();
                out.push(format!(
                    "`{}` must not depend on `{}`, but reaches it through: {}",
                    rule.krate,
                    name,
                    path.join(" -> ")
                ));
            }
        }
    }
    out
}

/// Builds the graph of normal dependencies from `cargo metadata`'s JSON.
///
/// An edge is kept if any of its kinds is normal (`"kind": null`), whatever
/// its target platform; dev-only and build-only edges are dropped.
fn graph_from_metadata(metadata: &Value) -> Graph {
    let packages = metadata["packages"]
        .as_array()
        .expect("cargo metadata: packages array");
    let nodes = metadata["resolve"]["nodes"]
        .as_array()
        .expect("cargo metadata: resolve.nodes array (not run with --no-deps?)");
    let name_of: BTreeMap<&str, &str> = packages
        .iter()
        .map(|p| {
            (
                p["id"].as_str().expect("package id"),
                p["name"].as_str().expect("package name"),
            )
        })
        .collect();
    let index: BTreeMap<&str, usize> = nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (n["id"].as_str().expect("node id"), i))
        .collect();
    nodes
        .iter()
        .map(|n| {
            let id = n["id"].as_str().expect("node id");
            let deps = n["deps"]
                .as_array()
                .expect("node deps")
                .iter()
                .filter(|d| {
                    d["dep_kinds"]
                        .as_array()
                        .expect("dep_kinds")
                        .iter()
                        .any(|k| k["kind"].is_null())
                })
                .map(|d| index[d["pkg"].as_str().expect("dep pkg")])
                .collect();
            Package {
                name: name_of[id].to_owned(),
                deps,
            }
        })
        .collect()
}

/// Runs `cargo metadata` on the workspace (offline first, then online if
/// the offline run cannot resolve) and parses its JSON.
fn workspace_metadata() -> Value {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../Cargo.toml");
    let run = |offline: bool| {
        let mut cmd = Command::new(&cargo);
        cmd.args(["metadata", "--format-version", "1", "--all-features"])
            .arg("--manifest-path")
            .arg(&manifest);
        if offline {
            cmd.arg("--offline");
        }
        cmd.output().expect("run cargo metadata")
    };
    let mut output = run(true);
    if !output.status.success() {
        output = run(false);
    }
    assert!(
        output.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("cargo metadata: JSON")
}

#[test]
fn dependencies_point_down_only() {
    let graph = graph_from_metadata(&workspace_metadata());
    let found = violations(&graph, RULES);
    assert!(
        found.is_empty(),
        "forbidden dependencies (ARCHITECTURE.md: dependencies point down only):\n  {}",
        found.join("\n  ")
    );
}

/// A graph from `(name, [dependency names])` rows; every name must have a row.
fn hand_built(rows: &[(&str, &[&str])]) -> Graph {
    let index: BTreeMap<&str, usize> = rows
        .iter()
        .enumerate()
        .map(|(i, (name, _))| (*name, i))
        .collect();
    rows.iter()
        .map(|(name, deps)| Package {
            name: (*name).to_owned(),
            deps: deps.iter().map(|d| index[d]).collect(),
        })
        .collect()
}

#[test]
fn a_forbidden_crate_reached_through_an_intermediate_is_reported_with_its_path() {
    let graph = hand_built(&[
        ("drl-cluster", &["drl-core", "helper"]),
        ("drl-core", &[]),
        ("helper", &["drl-cluster-net"]),
        ("drl-cluster-net", &["drl-core"]),
    ]);
    let rules = [Rule {
        krate: "drl-cluster",
        forbidden: &["drl-cluster-net", "drl-server"],
    }];
    assert_eq!(
        violations(&graph, &rules),
        vec![
            "`drl-cluster` must not depend on `drl-cluster-net`, but reaches it through: \
             drl-cluster -> helper -> drl-cluster-net"
                .to_owned()
        ]
    );
}

#[test]
fn an_allowed_graph_has_no_violations_and_a_missing_crate_is_reported() {
    let graph = hand_built(&[
        ("drl-cluster-net", &["drl-cluster"]),
        ("drl-cluster", &["drl-core"]),
        ("drl-core", &["parking_lot"]),
        ("parking_lot", &[]),
    ]);
    let ok = [Rule {
        krate: "drl-cluster",
        forbidden: &["drl-cluster-net"],
    }];
    assert!(violations(&graph, &ok).is_empty());

    let stale = [Rule {
        krate: "drl-gone",
        forbidden: &["drl-cluster-net"],
    }];
    let found = violations(&graph, &stale);
    assert_eq!(found.len(), 1);
    assert!(found[0].contains("drl-gone"), "{found:?}");
}
