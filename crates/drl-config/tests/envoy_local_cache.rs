//! `server.envoy_local_cache_bytes` (envoyproxy/ratelimit's
//! `LOCAL_CACHE_SIZE_IN_BYTES`): off by default, as there.

#[test]
fn the_local_cache_is_off_by_default_and_sized_in_bytes() {
    let off = drl_config::parse("limits: []\n", "t").unwrap();
    assert_eq!(off.server.envoy_local_cache_bytes, 0);
    let on =
        drl_config::parse("server: {envoy_local_cache_bytes: 1000}\nlimits: []\n", "t").unwrap();
    assert_eq!(on.server.envoy_local_cache_bytes, 1000);
}
