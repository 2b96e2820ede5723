//! The `orbit:` section: the example configs parse and validate, and bad
//! sections and limits are refused with a reason.

use std::path::PathBuf;

use drl_cluster_net::orbit::{KeySource, OrbitConfig};
use drl_core::{Algorithm, Quota};
use drl_store::LimitSpec;

fn example(n: u32) -> serde_norway::Value {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/orbit")
        .join(format!("node{n}.yaml"));
    let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    serde_norway::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn orbit_section(v: &serde_norway::Value) -> OrbitConfig {
    let o = v.get("orbit").expect("an orbit: section").clone();
    serde_norway::from_value(o).expect("orbit section deserializes")
}

#[test]
fn orbit_examples_parse_and_validate() {
    let mut rings = Vec::new();
    for n in 1..=5 {
        let v = example(n);
        let c = orbit_section(&v);
        c.validate().expect("valid orbit section");
        assert_eq!(c.node_id, n);
        assert_eq!(c.key, KeySource::file("cluster.key"));
        assert_eq!(c.bind, c.ring[n as usize - 1].addr);
        rings.push(c.ring.clone());
        // The example's limit is served by Orbit as configured.
        let limit = &v.get("limits").expect("limits")[0];
        assert_eq!(limit.get("scope").and_then(|s| s.as_str()), Some("orbit"));
        let quota = limit.get("quota").and_then(|s| s.as_str()).expect("quota");
        let algo: Algorithm = limit
            .get("algorithm")
            .and_then(|s| s.as_str())
            .expect("algorithm")
            .parse()
            .expect("algorithm name");
        let spec = LimitSpec::new("capped", algo, vec![Quota::parse(quota).expect("quota")]);
        let p = c.protocol_for(&spec).expect("servable by orbit");
        assert_eq!((p.cap, p.window), (3000, 10_000_000_000));
        assert!(p.window >= p.min_window(c.ring.len()));
    }
    assert!(
        rings.windows(2).all(|w| w[0] == w[1]),
        "all nodes share the ring"
    );
}

#[test]
fn orbit_config_defaults_and_refusals() {
    let yaml = "node_id: 2\nbind: 127.0.0.1:0\nkey: {env: DRL_ORBIT_KEY}\nring:\n  - {id: 1, addr: 127.0.0.1:1}\n  - {id: 2, addr: 127.0.0.1:2}\n";
    let c: OrbitConfig = serde_norway::from_str(yaml).expect("minimal section");
    c.validate().expect("valid");
    assert_eq!((c.epoch_ms, c.lanes, c.max_wait_ms), (100, 2, 0));
    assert_eq!(c.key, KeySource::env("DRL_ORBIT_KEY"));

    let typo = format!("{yaml}epoch: 5\n");
    assert!(
        serde_norway::from_str::<OrbitConfig>(&typo).is_err(),
        "unknown field accepted"
    );

    let mut bad = c.clone();
    bad.key.file = Some("k".into());
    assert!(bad.validate().is_err(), "two key sources accepted");
    let mut bad = c.clone();
    bad.node_id = 7;
    assert!(bad.validate().is_err(), "node not in ring accepted");
    let mut bad = c.clone();
    bad.rollover_ratio = 1.0;
    assert!(bad.validate().is_err(), "rollover_ratio 1 accepted");
    let mut bad = c.clone();
    bad.ring.push(bad.ring[0].clone());
    assert!(bad.validate().is_err(), "duplicate member accepted");

    let q = |s: &str| vec![Quota::parse(s).expect("quota")];
    // Window shorter than one lap (100 ms x 2 nodes).
    let short = LimitSpec::new("x", Algorithm::FixedWindow, q("10/150ms"));
    let e = c.protocol_for(&short).expect_err("short window accepted");
    assert!(e.to_string().contains("lap"), "{e}");
    let gcra = LimitSpec::new("x", Algorithm::Gcra, q("10/s"));
    assert!(c.protocol_for(&gcra).is_err(), "gcra accepted");
    let multi = LimitSpec::new(
        "x",
        Algorithm::FixedWindow,
        vec![
            Quota::parse("10/s").expect("q"),
            Quota::parse("100/m").expect("q"),
        ],
    );
    assert!(c.protocol_for(&multi).is_err(), "two quotas accepted");
    assert!(
        c.protocol_for(&LimitSpec::new("x", Algorithm::FixedWindow, q("10/s")))
            .is_ok()
    );
}

/// `key.previous_files` (key rotation): parsed, checked for duplicates and
/// count by `validate`, loaded into a key ring whose send key is `key.file`.
#[test]
fn previous_key_files_parse_validate_and_load() {
    let dir = tempfile::tempdir().unwrap();
    let new = dir.path().join("new.key");
    let old = dir.path().join("old.key");
    std::fs::write(&new, "orbit new key, at least 32 bytes\n").unwrap();
    std::fs::write(&old, "orbit old key, at least 32 bytes\n").unwrap();
    let yaml = format!(
        "node_id: 1\nbind: 127.0.0.1:0\nkey: {{file: {}, previous_files: [{}]}}\nring:\n  - {{id: 1, addr: 127.0.0.1:1}}\n",
        new.display(),
        old.display()
    );
    let mut c: OrbitConfig = serde_norway::from_str(&yaml).unwrap();
    c.validate().unwrap();
    assert_eq!(
        c.key,
        KeySource::file(&new).with_previous(vec![old.clone()])
    );
    let ring = c.key.load_ring().unwrap();
    let id = |p: &std::path::Path| {
        drl_cluster_net::transport::ClusterKey::from_file(p)
            .unwrap()
            .id()
    };
    assert_eq!(ring.ids(), vec![id(&new), id(&old)]);
    c.key.previous_files = vec![old.clone(), old.clone()];
    assert!(c.validate().unwrap_err().to_string().contains("twice"));
    c.key.previous_files = vec![new.clone()];
    assert!(c.validate().is_err(), "the send key again");
    c.key.previous_files = vec![dir.path().join("missing.key")];
    c.validate().unwrap();
    let e = c.key.load_ring().unwrap_err().to_string();
    assert!(e.contains("missing.key"), "{e}");
    let bad: Result<OrbitConfig, _> = serde_norway::from_str(
        "node_id: 1\nbind: 127.0.0.1:0\nkey: {file: a, previous: [b]}\nring: []\n",
    );
    assert!(bad.unwrap_err().to_string().contains("previous_files"));
}
