//! The layering of ARCHITECTURE.md, enforced: dependencies point down only.
//!
//! [`RULES`] lists, for each lower crate, the crates it must never reach.
//! The check walks the *transitive* closure of normal dependencies (not dev,
//! not build) that cargo resolves when that crate is built alone
//! (`cargo tree -p CRATE --all-features --target all`: every feature of
//! the crate, every target platform, and the features of its dependencies
//! as the crate asks for them, so drl-client's `default-features = false`
//! on drl-config counts), so a forbidden crate reached through any
//! intermediate crate fails the test, and the message shows the path.

use std::collections::{BTreeMap, VecDeque};
use std::path::Path;
use std::process::Command;

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
            // ConfigError and the limit schema are drl-config's.
            "drl-config",
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
            "drl-config",
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
    // drl-client takes drl-config without its `serve` feature: the limit
    // schema and ConfigError, none of the server's stores.
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
            "redis",
            "foca",
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

/// Builds the graph of normal dependencies from `cargo tree --prefix
/// depth` output: each line is a depth and a package (`name vX.Y.Z ...`);
/// its parent is the nearest line above it one level up. A package shown
/// again (marked `(*)`) is the same node, so every edge is kept.
fn graph_from_tree(tree: &str) -> Graph {
    let mut graph: Graph = Vec::new();
    let mut index: BTreeMap<String, usize> = BTreeMap::new();
    // The node at each depth of the current path.
    let mut path: Vec<usize> = Vec::new();
    for line in tree.lines().filter(|l| !l.trim().is_empty()) {
        let digits = line.chars().take_while(char::is_ascii_digit).count();
        let depth: usize = line[..digits].parse().expect("cargo tree: depth prefix");
        let mut words = line[digits..].split_whitespace();
        let name = words.next().expect("cargo tree: package name");
        let id = format!("{name} {}", words.next().unwrap_or(""));
        let node = *index.entry(id).or_insert_with(|| {
            graph.push(Package {
                name: name.to_owned(),
                deps: Vec::new(),
            });
            graph.len() - 1
        });
        path.truncate(depth);
        if let Some(&parent) = path.last()
            && !graph[parent].deps.contains(&node)
        {
            graph[parent].deps.push(node);
        }
        path.push(node);
    }
    graph
}

/// Runs `cargo tree` for `krate` alone (offline first, then online if the
/// offline run cannot resolve): its normal dependencies, every feature of
/// the crate, every target platform.
fn dependency_tree(krate: &str) -> String {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../Cargo.toml");
    let run = |offline: bool| {
        let mut cmd = Command::new(&cargo);
        cmd.args(["tree", "-p", krate, "-e", "normal", "--all-features"])
            .args(["--target", "all", "--prefix", "depth", "--color", "never"])
            .arg("--manifest-path")
            .arg(&manifest);
        if offline {
            cmd.arg("--offline");
        }
        cmd.output().expect("run cargo tree")
    };
    let mut output = run(true);
    if !output.status.success() {
        output = run(false);
    }
    assert!(
        output.status.success(),
        "cargo tree -p {krate} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("cargo tree: UTF-8")
}

#[test]
fn dependencies_point_down_only() {
    let mut found = Vec::new();
    for rule in RULES {
        let graph = graph_from_tree(&dependency_tree(rule.krate));
        found.extend(violations(&graph, std::slice::from_ref(rule)));
    }
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

#[test]
fn a_tree_with_repeated_packages_gives_every_edge() {
    let tree = "0drl-client v0.1.0 (/x)\n1drl-config v0.1.0 (/y)\n2drl-core v0.1.0 (/z)\n1drl-http v0.1.0 (/w)\n2drl-core v0.1.0 (/z) (*)\n";
    let graph = graph_from_tree(tree);
    assert_eq!(graph.len(), 4);
    let name = |i: usize| graph[i].name.as_str();
    let deps = |i: usize| graph[i].deps.iter().map(|&d| name(d)).collect::<Vec<_>>();
    assert_eq!(deps(0), ["drl-config", "drl-http"]);
    assert_eq!(deps(1), ["drl-core"]);
    assert_eq!(deps(3), ["drl-core"]);
    let rule = [Rule {
        krate: "drl-client",
        forbidden: &["drl-core"],
    }];
    assert_eq!(
        violations(&graph, &rule),
        vec![
            "`drl-client` must not depend on `drl-core`, but reaches it through: \
             drl-client -> drl-config -> drl-core"
                .to_owned()
        ]
    );
}
