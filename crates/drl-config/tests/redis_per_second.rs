//! `redis_per_second:` is read, and refused without `redis:`.

use drl_config::parse;

#[test]
fn a_per_second_redis_needs_the_main_one() {
    let err = parse(
        "redis_per_second:\n  url: redis://127.0.0.1:6380\nlimits: []\n",
        "drl.yaml",
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("drl.yaml:1:") && err.contains("needs the `redis:` section too"),
        "{err}"
    );
    let cfg = parse(
        "redis:\n  url: redis://127.0.0.1:6379\nredis_per_second:\n  url: redis://127.0.0.1:6380\nlimits: []\n",
        "drl.yaml",
    )
    .unwrap();
    assert_eq!(
        cfg.redis_per_second.and_then(|r| r.url).as_deref(),
        Some("redis://127.0.0.1:6380")
    );
}
