//! envoyproxy/ratelimit's per-descriptor stats, named as its Prometheus
//! mapping names them (`src/stats/prom/default_mapper.yaml`):
//! `ratelimit_service_rate_limit_{total_hits,over_limit,near_limit,
//! within_limit,shadow_mode}{domain,key1[,key2]}`, so that dashboards and
//! alerts written for the reference read drl's `/metrics` unchanged.
//!
//! Counted in hits, as the reference counts them
//! (`src/limiter/base_limiter.go`), from the rule's count before the hits
//! (`before`), the hits (`h`, `after = before + h`), the limit and the
//! near-limit threshold `floor(limit x 0.8)` (its default
//! `NEAR_LIMIT_RATIO`, computed in 32-bit floats as there):
//! - `total_hits += h`;
//! - over the limit (`after > limit`): `over_limit` gets the hits past the
//!   limit (all of them if `before >= limit`), `near_limit` the hits
//!   between the threshold and the limit, and `shadow_mode` the hits past
//!   the limit when the rule is in shadow mode;
//! - otherwise `within_limit += h`, and `near_limit` gets the hits past the
//!   threshold.
//!
//! The stats key is the rule's path (`domain.key_value.subkey`), split on
//! `.` into `domain`, `key1` and `key2` (deeper parts fold into `key2`'s
//! series, as the reference's mapping folds them). Where the reference
//! names a key by request values (`detailed_metric`, `value_to_metric`,
//! overrides: [`crate::envoy_stats_key`]) drl does so only with
//! `server.envoy_stats_values`, and for at most
//! [`drl_config::ENVOY_STATS_MAX_KEYS`] keys ([`for_key`]): otherwise a
//! client could multiply series without bound.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};

use drl_http::prometheus::{Exposition, Kind};

use crate::sharded::Counters;

const TOTAL: usize = 0;
const OVER: usize = 1;
const NEAR: usize = 2;
const WITHIN: usize = 3;
const SHADOW: usize = 4;
const LOCAL_CACHE: usize = 5;

/// The series names, in counter order.
const NAMES: [(&str, &str); 6] = [
    (
        "ratelimit_service_rate_limit_total_hits",
        "Hits of Envoy RLS descriptors per rule (envoyproxy/ratelimit's total_hits).",
    ),
    (
        "ratelimit_service_rate_limit_over_limit",
        "Hits past the rule's limit (envoyproxy/ratelimit's over_limit).",
    ),
    (
        "ratelimit_service_rate_limit_near_limit",
        "Hits between 80% of the rule's limit and the limit (envoyproxy/ratelimit's near_limit).",
    ),
    (
        "ratelimit_service_rate_limit_within_limit",
        "Hits of requests within the rule's limit (envoyproxy/ratelimit's within_limit).",
    ),
    (
        "ratelimit_service_rate_limit_shadow_mode",
        "Hits past the limit of a shadow-mode rule (envoyproxy/ratelimit's shadow_mode).",
    ),
    (
        "ratelimit_service_rate_limit_over_limit_with_local_cache",
        "Hits answered over the limit from the local over-limit cache (envoyproxy/ratelimit's over_limit_with_local_cache).",
    ),
];

/// Every rule path's counters; a path registered again (a reload) gets the
/// same counters, so they never go back to zero while the process runs.
fn registry() -> &'static Mutex<BTreeMap<String, Arc<Counters<6>>>> {
    static R: OnceLock<Mutex<BTreeMap<String, Arc<Counters<6>>>>> = OnceLock::new();
    R.get_or_init(Default::default)
}

/// One rule's stats.
#[derive(Debug, Clone)]
pub struct EnvoyStats {
    counts: Arc<Counters<6>>,
}

/// The hits of one call split as the reference splits them:
/// `[total, over, near, within, shadow]`.
pub fn split(before: u64, hits: u64, limit: u64, shadow: bool) -> [u64; 5] {
    let after = before.saturating_add(hits);
    let near_threshold = (limit as f32 * 0.8f32).floor() as u64;
    let mut out = [0; 5];
    out[TOTAL] = hits;
    if after > limit {
        let past = if before >= limit { hits } else { after - limit };
        out[OVER] = past;
        if before < limit {
            out[NEAR] = limit - near_threshold.max(before);
        }
        if shadow {
            out[SHADOW] = past;
        }
    } else {
        if after > near_threshold {
            out[NEAR] = if before >= near_threshold {
                hits
            } else {
                after - near_threshold
            };
        }
        out[WITHIN] = hits;
    }
    out
}

impl EnvoyStats {
    /// The stats of the rule at `path` (created at zero the first time).
    pub fn new(path: &str) -> Self {
        let mut r = registry().lock().unwrap_or_else(|e| e.into_inner());
        Self {
            counts: Arc::clone(r.entry(path.to_string()).or_default()),
        }
    }

    /// Counts `hits` on a rule of `limit` per unit whose count was `before`
    /// (any value above `limit` for a count past it).
    #[inline]
    pub fn record(&self, before: u64, hits: u64, limit: u64, shadow: bool) {
        if hits == 0 {
            return;
        }
        let [t, o, n, w, s] = split(before, hits, limit, shadow);
        self.counts
            .add_each([(TOTAL, t), (OVER, o), (NEAR, n), (WITHIN, w), (SHADOW, s)]);
    }

    /// Counts `hits` answered over the limit from the local over-limit
    /// cache ([`crate::envoy_local_cache`]): as the reference counts them,
    /// in `total_hits`, `over_limit`, `over_limit_with_local_cache` and,
    /// for a shadow-mode rule, `shadow_mode`.
    pub fn record_local_cache(&self, hits: u64, shadow: bool) {
        let s = if shadow { hits } else { 0 };
        self.counts.add_each([
            (TOTAL, hits),
            (OVER, hits),
            (LOCAL_CACHE, hits),
            (SHADOW, s),
        ]);
    }
}

/// `(domain, key1, key2)` of a stats key, as the reference's mapping reads
/// it.
fn labels(path: &str) -> (&str, &str, Option<&str>) {
    let mut parts = path.splitn(4, '.');
    let domain = parts.next().unwrap_or("");
    let key1 = parts.next().unwrap_or("");
    (domain, key1, parts.next())
}

/// Stats keys made from request values so far, and keys refused past the
/// bound (counted under their rule's path instead).
static VALUE_KEYS: AtomicU64 = AtomicU64::new(0);
static VALUE_KEYS_REFUSED: AtomicU64 = AtomicU64::new(0);

/// The stats of `key`, a key named by request values
/// (`server.envoy_stats_values`): made on first use while fewer than
/// [`drl_config::ENVOY_STATS_MAX_KEYS`] such keys exist; `None` past that
/// bound (the caller counts under the rule's path), counted in
/// `drl_envoy_stats_keys_refused_total`.
pub fn for_key(key: &str) -> Option<EnvoyStats> {
    let mut r = registry().lock().unwrap_or_else(|e| e.into_inner());
    if let Some(c) = r.get(key) {
        return Some(EnvoyStats {
            counts: Arc::clone(c),
        });
    }
    if VALUE_KEYS.load(Ordering::Relaxed) >= drl_config::ENVOY_STATS_MAX_KEYS as u64 {
        VALUE_KEYS_REFUSED.fetch_add(1, Ordering::Relaxed);
        return None;
    }
    VALUE_KEYS.fetch_add(1, Ordering::Relaxed);
    let c: Arc<Counters<6>> = Arc::default();
    r.insert(key.to_string(), Arc::clone(&c));
    Some(EnvoyStats { counts: c })
}

/// Config loads that succeeded and failed, answers turned OK by the
/// global shadow mode, calls refused by a store and otherwise.
static SERVICE: [AtomicU64; 5] = [const { AtomicU64::new(0) }; 5];
const LOAD_OK: usize = 0;
const LOAD_ERROR: usize = 1;
const GLOBAL_SHADOW: usize = 2;
const REDIS_ERROR: usize = 3;
const SERVICE_ERROR: usize = 4;

/// `server.envoy_stats_tags`, added to every series here.
fn tags() -> &'static RwLock<Vec<(String, String)>> {
    static T: OnceLock<RwLock<Vec<(String, String)>>> = OnceLock::new();
    T.get_or_init(Default::default)
}

/// Sets the labels added to every series (`server.envoy_stats_tags`, the
/// reference's `EXTRA_TAGS`), from the config in force.
pub fn set_tags(t: &BTreeMap<String, String>) {
    *tags().write().unwrap_or_else(|e| e.into_inner()) =
        t.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
}

/// Counts a config load, the first included (the reference's
/// `ratelimit_service_config_load_success` / `_error`).
pub fn config_loaded(ok: bool) {
    let i = if ok { LOAD_OK } else { LOAD_ERROR };
    SERVICE[i].fetch_add(1, Ordering::Relaxed);
}

/// Counts an answer turned OK by `server.envoy_shadow_mode` (the
/// reference's `global_shadow_mode`).
pub fn global_shadow_mode() {
    SERVICE[GLOBAL_SHADOW].fetch_add(1, Ordering::Relaxed);
}

/// Counts a `ShouldRateLimit` call refused with an error: by a store
/// (`redis_error`) or otherwise (`service_error`), as the reference's
/// `should_rate_limit_error{err_type}`.
pub fn call_failed(store: bool) {
    let i = if store { REDIS_ERROR } else { SERVICE_ERROR };
    SERVICE[i].fetch_add(1, Ordering::Relaxed);
}

/// Appends the per-rule families (when an Envoy rule was configured) and
/// `ratelimit_service_total_requests` and `_response_time_seconds` of
/// `ShouldRateLimit` (when it was called).
pub fn render(out: &mut Exposition) {
    crate::envoy_local_cache::render(out);
    let tags = tags().read().unwrap_or_else(|e| e.into_inner()).clone();
    let with = |own: &[(&'static str, &'static str)]| -> Vec<(String, String)> {
        own.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .chain(tags.iter().cloned())
            .collect()
    };
    let sample = |out: &mut Exposition, name: &str, labels: &[(String, String)], v: u64| {
        let l: Vec<(&str, &str)> = labels
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        out.sample(name, &l, v);
    };
    let service = [
        (
            "ratelimit_service_config_load_success",
            LOAD_OK,
            "Config loads that succeeded, the first included (envoyproxy/ratelimit's config_load_success).",
        ),
        (
            "ratelimit_service_config_load_error",
            LOAD_ERROR,
            "Config loads refused (envoyproxy/ratelimit's config_load_error).",
        ),
        (
            "ratelimit_service_global_shadow_mode",
            GLOBAL_SHADOW,
            "Answers turned OK by server.envoy_shadow_mode (envoyproxy/ratelimit's global_shadow_mode).",
        ),
    ];
    for (name, i, help) in service {
        out.family(name, Kind::Counter, help);
        sample(out, name, &with(&[]), SERVICE[i].load(Ordering::Relaxed));
    }
    let refused = VALUE_KEYS_REFUSED.load(Ordering::Relaxed);
    if refused > 0 {
        let name = "drl_envoy_stats_keys_refused_total";
        out.family(
            name,
            Kind::Counter,
            "Stats keys named by request values past the bound, counted under their rule's path.",
        );
        out.sample(name, &[], refused);
    }
    let errors_name = "ratelimit_service_should_rate_limit_error";
    out.family(
        errors_name,
        Kind::Counter,
        "ShouldRateLimit calls refused, by cause (envoyproxy/ratelimit's should_rate_limit_error).",
    );
    for (err_type, i) in [
        ("redis_error", REDIS_ERROR),
        ("service_error", SERVICE_ERROR),
    ] {
        let n = SERVICE[i].load(Ordering::Relaxed);
        sample(out, errors_name, &with(&[("err_type", err_type)]), n);
    }
    let (latency, errors) = crate::metrics::rls_calls();
    let method = with(&[("grpc_method", "ShouldRateLimit")]);
    let total = "ratelimit_service_total_requests";
    out.family(
        total,
        Kind::Counter,
        "ShouldRateLimit calls, answered or refused (envoyproxy/ratelimit's total_requests).",
    );
    sample(out, total, &method, latency.count + errors);
    let time = "ratelimit_service_response_time_seconds";
    out.family(
        time,
        Kind::Histogram,
        "Time to answer ShouldRateLimit (envoyproxy/ratelimit's response_time; drl's buckets).",
    );
    let m: Vec<(&str, &str)> = method
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    crate::metrics::histogram(out, time, &m, &latency);
    let mut series: BTreeMap<(String, String, Option<String>), [u64; 6]> = BTreeMap::new();
    {
        let r = registry().lock().unwrap_or_else(|e| e.into_inner());
        for (path, c) in r.iter() {
            let (d, k1, k2) = labels(path);
            let sums = series
                .entry((d.to_string(), k1.to_string(), k2.map(str::to_string)))
                .or_default();
            for (i, s) in sums.iter_mut().enumerate() {
                *s += c.get(i);
            }
        }
    }
    if series.is_empty() {
        return;
    }
    for (i, (name, help)) in NAMES.iter().enumerate() {
        out.family(name, Kind::Counter, help);
        for ((d, k1, k2), sums) in &series {
            let mut l: Vec<(&str, &str)> = vec![("domain", d), ("key1", k1)];
            if let Some(k2) = k2 {
                l.push(("key2", k2));
            }
            l.extend(tags.iter().map(|(k, v)| (k.as_str(), v.as_str())));
            out.sample(name, &l, sums[i]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    // envoyproxy/ratelimit test/redis/fixed_cache_impl_test.go:
    // TestNearLimit, every step: (count after INCRBY, hits, limit) and the
    // stats it expects (cumulative there; per step here).
    #[test]
    fn the_reference_near_limit_steps() {
        let step = |after: u64, hits: u64, limit: u64| split(after - hits, hits, limit, false);
        // 15 per hour: 11 within; 13 near; 16 over (near stays 1).
        assert_eq!(step(11, 1, 15), [1, 0, 0, 1, 0]);
        assert_eq!(step(13, 1, 15), [1, 0, 1, 1, 0]);
        assert_eq!(step(16, 1, 15), [1, 1, 0, 0, 0]);
        // Hits above 1: all under near (20: 3 to 5), some near (8: 2 to
        // 7), all near (20: 3 to 19), some over (20: 3 to 22), all three
        // (20: 7 to 22), all over (10: 3 to 30).
        assert_eq!(step(5, 3, 20), [3, 0, 0, 3, 0]);
        assert_eq!(step(7, 2, 8), [2, 0, 1, 2, 0]);
        assert_eq!(step(19, 3, 20), [3, 0, 3, 3, 0]);
        assert_eq!(step(22, 3, 20), [3, 2, 1, 0, 0]);
        assert_eq!(step(22, 7, 20), [7, 2, 4, 0, 0]);
        assert_eq!(step(30, 3, 10), [3, 3, 0, 0, 0]);
        // Shadow mode counts the hits past the limit once more.
        assert_eq!(split(10, 10, 15, true), [10, 5, 3, 0, 5]);
    }

    /// Keys named by request values are bounded: past the bound none is
    /// made (the caller counts under the rule's path), and the refusal is
    /// counted; a key made before still answers.
    #[test]
    fn keys_named_by_values_are_bounded() {
        let first = for_key("bound-test.k_0").expect("under the bound");
        let mut n = 1;
        while for_key(&format!("bound-test.k_{n}")).is_some() {
            n += 1;
            assert!(n <= drl_config::ENVOY_STATS_MAX_KEYS, "never refused");
        }
        assert!(VALUE_KEYS_REFUSED.load(Ordering::Relaxed) >= 1);
        first.record(0, 1, 10, false);
        let again = for_key("bound-test.k_0").expect("made before the bound");
        assert_eq!(again.counts.get(TOTAL), 1);
    }

    #[test]
    fn a_path_splits_into_the_mappings_labels() {
        assert_eq!(labels("d.k1_v1"), ("d", "k1_v1", None));
        assert_eq!(labels("d.k1_v1.k2"), ("d", "k1_v1", Some("k2")));
        assert_eq!(labels("d.a.b.c.e"), ("d", "a", Some("b")));
    }

    proptest! {
        /// Hits are split, never made: within the limit every hit is
        /// within (and some near); past it over and near share them.
        #[test]
        fn hits_are_split_not_made(before in 0u64..100, hits in 0u64..100, limit in 0u64..100, shadow: bool) {
            let [t, o, n, w, s] = split(before, hits, limit, shadow);
            prop_assert_eq!(t, hits);
            if before + hits > limit {
                prop_assert_eq!(w, 0);
                prop_assert!(o + n <= hits);
                prop_assert!(o >= 1 || hits == 0);
                prop_assert_eq!(s, if shadow { o } else { 0 });
            } else {
                prop_assert_eq!((o, w, s), (0, hits, 0));
                prop_assert!(n <= hits);
            }
        }
    }
}
