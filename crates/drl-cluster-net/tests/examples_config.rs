//! The `cluster:` sections of `examples/gossip/node*.yaml` are valid
//! `GossipConfig`s describing one 3-node cluster.

use drl_cluster_net::GossipConfig;

#[test]
fn example_cluster_sections_parse_and_agree() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/gossip");
    let mut binds = Vec::new();
    for i in 1..=3u32 {
        let text = std::fs::read_to_string(dir.join(format!("node{i}.yaml"))).unwrap();
        let doc: serde_norway::Value = serde_norway::from_str(&text).unwrap();
        let cluster = doc.get("cluster").expect("a cluster: section").clone();
        let c: GossipConfig = serde_norway::from_value(cluster).unwrap();
        c.validate().unwrap();
        assert_eq!(c.node_id, i);
        assert_eq!(c.cluster_size(), 3);
        assert!(
            c.key_file.is_some(),
            "the key comes from a file, not the YAML"
        );
        assert!(text.contains(&format!("http: 127.0.0.1:918{i}")));
        assert!(text.contains("scope: gossip") && text.contains("quota: 1000/s"));
        binds.push(c.bind);
        assert!(
            c.seeds
                .iter()
                .all(|s| [9191, 9192, 9193].contains(&s.port()))
        );
    }
    binds.dedup();
    assert_eq!(binds.len(), 3);
}
