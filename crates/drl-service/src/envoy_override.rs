//! Envoy RLS per-descriptor limit overrides (`RateLimitDescriptor.limit`,
//! a `RateLimitOverride { requests_per_unit, unit }`), decided as
//! envoyproxy/ratelimit does: the override replaces whatever the config
//! would apply to that descriptor, and applies even when no configured
//! rule matches (the domain must be known). It is never in shadow mode,
//! has no name (so no `replaces` drops it) and replaces nothing.
//! `requests_per_unit: 0` denies every request, like a configured 0.
//!
//! State: one fixed-window limiter per (domain, unit, requests_per_unit),
//! so a changed override starts a fresh counter rather than reusing the
//! old one (envoyproxy/ratelimit keys its counters by unit only). Within a
//! limiter each distinct descriptor (its keys and values) counts
//! separately. Overrides outlive reloads (a domain that is gone drops its
//! overrides); at most [`MAX_OVERRIDE_LIMITS`] distinct overrides are held
//! (the values come from Envoy's route config, so there are few), each
//! holding at most [`OVERRIDE_MAX_KEYS`] keys (and the default bytes per
//! key): all of them together at most [`OVERRIDE_BYTES`], whatever a
//! client sends.
//!
//! **Bounded, never stuck.** A request's overrides are all validated before
//! any is made, so a refused request leaves nothing behind. When the table
//! is full and a request needs new overrides, room is made first from
//! overrides that hold no live state (dropping them changes no decision;
//! a reload drops those too), then from the least recently used override
//! idle for at least [`OVERRIDE_IDLE`] (its counters start over, like a
//! key's `evicted_live`; counted as
//! `drl_override_evictions_total{kind="live"}`). Only while every held
//! override was used within the last [`OVERRIDE_IDLE`] is a new one refused
//! (RESOURCE_EXHAUSTED).
//!
//! Metrics label every override of a domain `DOMAIN.limit_override`.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use drl_core::{Algorithm, KeyedLimiter, Nanos, Quota};
use drl_store::LimitSpec;

use crate::headers;
use crate::limits::{EnvoyRule, KeyMapping, Limit, RuleKind};
use crate::metrics::LimitMetrics;
use crate::scope::{Backend, KeyBounds};
use drl_config::envoy::Unit;
use drl_config::{KeyConfig, Scope};

type FastMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

/// One held override: its rule and when it was last used.
#[derive(Debug)]
struct Held {
    rule: Arc<EnvoyRule>,
    last_used: AtomicU64,
}

impl Held {
    /// True if dropping it changes no decision (no key holds live state).
    fn is_stateless(&self, now: Nanos) -> bool {
        match &self.rule.kind {
            RuleKind::Limited(l) => match &l.backend {
                Backend::Local(k) => {
                    k.sweep(now);
                    // Empty and with nothing in its summary of evicted
                    // state: dropping it cannot admit more.
                    k.is_stateless(now)
                }
                // The state is in the store: dropping the handle loses none.
                Backend::Store(_) => true,
            },
            RuleKind::Block(_) | RuleKind::Unlimited => true,
        }
    }
}

/// The override rules of one domain, by (unit, requests_per_unit, whether
/// the state is in a store).
type DomainRules = FastMap<(Unit, u32, bool), Held>;

/// The most distinct (domain, unit, requests_per_unit) overrides held.
pub const MAX_OVERRIDE_LIMITS: usize = 128;

/// The most bytes of keys and state all overrides hold together (the
/// manifests give the whole process 512 MiB).
pub const OVERRIDE_BYTES: usize = 64 << 20;

/// The most keys one override holds: its share of [`OVERRIDE_BYTES`] at
/// the default bytes per key (4,096 keys, 512 KiB).
pub const OVERRIDE_MAX_KEYS: usize =
    OVERRIDE_BYTES / MAX_OVERRIDE_LIMITS / drl_config::DEFAULT_BYTES_PER_KEY;

const _: () = assert!(
    MAX_OVERRIDE_LIMITS * OVERRIDE_MAX_KEYS * drl_config::DEFAULT_BYTES_PER_KEY <= OVERRIDE_BYTES
);

/// An override unused for this long may be evicted to make room for a new
/// one when the table is full (1 s).
pub const OVERRIDE_IDLE: Nanos = drl_core::time::SECOND;

/// Why an override cannot be applied (the whole request is refused).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OverrideError {
    /// The unit is `UNKNOWN` (0) or not a unit at all.
    #[error(
        "descriptors[{index}]: limit override has unknown unit {unit}; expected SECOND (1), MINUTE (2), HOUR (3), DAY (4), MONTH (5), YEAR (6) or WEEK (7)"
    )]
    UnknownUnit {
        /// Position of the descriptor.
        index: usize,
        /// The unit sent.
        unit: i32,
    },
    /// [`MAX_OVERRIDE_LIMITS`] distinct overrides are held, each used
    /// within the last [`OVERRIDE_IDLE`] (or one request asks for more).
    #[error(
        "descriptors[{index}]: too many distinct limit overrides in use (at most {MAX_OVERRIDE_LIMITS} (domain, unit, requests_per_unit) combinations, all used within the last second)"
    )]
    TooMany {
        /// Position of the descriptor.
        index: usize,
    },
}

impl OverrideError {
    /// A short stable name for metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            OverrideError::UnknownUnit { .. } => "override_unknown_unit",
            OverrideError::TooMany { .. } => "too_many_overrides",
        }
    }
}

/// The rules made for overrides, by domain then (unit, requests_per_unit).
#[derive(Debug, Default)]
pub struct Overrides {
    rules: parking_lot::RwLock<FastMap<String, DomainRules>>,
}

impl Overrides {
    /// No overrides yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// The rules for the overrides of one request in `domain`: `wanted`
    /// holds (descriptor index, requests_per_unit, unit) per override.
    /// Made on first use. Every unit is checked and room for every new
    /// override is found before any is made: on an error nothing was added.
    pub fn rules(
        &self,
        domain: &str,
        wanted: &[(usize, u32, i32)],
        now: Nanos,
    ) -> Result<Vec<Arc<EnvoyRule>>, OverrideError> {
        self.rules_in(domain, wanted, now, None)
    }

    /// [`Overrides::rules`] with their state in `store` (a
    /// [`Backend::Store`], under `server.envoy_scope: redis`: every drl
    /// process on that store counts an override's descriptors together),
    /// or in memory (`None`).
    pub fn rules_in(
        &self,
        domain: &str,
        wanted: &[(usize, u32, i32)],
        now: Nanos,
        store: Option<&Backend>,
    ) -> Result<Vec<Arc<EnvoyRule>>, OverrideError> {
        let stored = store.is_some();
        let keys = wanted
            .iter()
            .map(|&(index, rpu, unit)| {
                Unit::from_proto(unit)
                    .map(|u| (index, (u, rpu, stored)))
                    .ok_or(OverrideError::UnknownUnit { index, unit })
            })
            .collect::<Result<Vec<_>, _>>()?;
        {
            let rules = self.rules.read();
            if let Some(m) = rules.get(domain) {
                let found: Option<Vec<_>> = keys
                    .iter()
                    .map(|(_, k)| m.get(k).map(|h| touch(h, now)))
                    .collect();
                if let Some(found) = found {
                    return Ok(found);
                }
            }
        }
        let mut rules = self.rules.write();
        // Those held are used now (so never evicted below); the rest are new.
        let mut new: Vec<(usize, (Unit, u32, bool))> = Vec::new();
        if let Some(m) = rules.get(domain) {
            for &(i, k) in &keys {
                match m.get(&k) {
                    Some(h) => {
                        touch(h, now);
                    }
                    None if !new.iter().any(|(_, n)| *n == k) => new.push((i, k)),
                    None => {}
                }
            }
        } else {
            for &(i, k) in &keys {
                if !new.iter().any(|(_, n)| *n == k) {
                    new.push((i, k));
                }
            }
        }
        if let Some(&(index, _)) = new.get(MAX_OVERRIDE_LIMITS) {
            return Err(OverrideError::TooMany { index });
        }
        let held = count(&rules);
        if held + new.len() > MAX_OVERRIDE_LIMITS {
            make_room(&mut rules, held + new.len() - MAX_OVERRIDE_LIMITS, now);
            let held = count(&rules);
            if held + new.len() > MAX_OVERRIDE_LIMITS {
                let index = new[MAX_OVERRIDE_LIMITS - held].0;
                return Err(OverrideError::TooMany { index });
            }
        }
        let m = rules.entry(domain.to_string()).or_default();
        for (_, (unit, rpu, stored)) in new {
            let held = Held {
                rule: Arc::new(make_rule(domain, unit, rpu, store)),
                last_used: AtomicU64::new(now),
            };
            m.insert((unit, rpu, stored), held);
        }
        Ok(keys.iter().map(|(_, k)| touch(&m[k], now)).collect())
    }

    /// Drops every override that holds no live state (dropping it changes
    /// no decision); returns how many. A reload calls it.
    pub fn drop_stateless(&self, now: Nanos) -> usize {
        let mut rules = self.rules.write();
        let before = count(&rules);
        for m in rules.values_mut() {
            m.retain(|_, h| !h.is_stateless(now));
        }
        rules.retain(|_, m| !m.is_empty());
        before - count(&rules)
    }

    /// Drops the overrides of domains for which `keep` is false (after a
    /// reload removed them).
    pub fn retain_domains(&self, mut keep: impl FnMut(&str) -> bool) {
        self.rules.write().retain(|d, _| keep(d));
    }

    /// How many distinct overrides are held.
    pub fn len(&self) -> usize {
        count(&self.rules.read())
    }

    /// True when no override is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Marks `h` used at `now`; returns its rule.
fn touch(h: &Held, now: Nanos) -> Arc<EnvoyRule> {
    h.last_used.fetch_max(now, Ordering::Relaxed);
    h.rule.clone()
}

fn count(rules: &FastMap<String, DomainRules>) -> usize {
    rules.values().map(FastMap::len).sum()
}

/// Frees up to `need` slots: first overrides with no live state, then the
/// least recently used ones idle for at least [`OVERRIDE_IDLE`].
fn make_room(rules: &mut FastMap<String, DomainRules>, need: usize, now: Nanos) {
    let mut freed = 0;
    for m in rules.values_mut() {
        m.retain(|_, h| {
            // Not those this request uses (marked at `now`).
            let drop =
                freed < need && h.last_used.load(Ordering::Relaxed) < now && h.is_stateless(now);
            freed += usize::from(drop);
            !drop
        });
    }
    metrics::counter!("drl_override_evictions_total", "kind" => "fresh").increment(freed as u64);
    if freed < need {
        let mut idle: Vec<(Nanos, String, (Unit, u32, bool))> = rules
            .iter()
            .flat_map(|(d, m)| {
                m.iter().filter_map(move |(k, h)| {
                    let used = h.last_used.load(Ordering::Relaxed);
                    (now.saturating_sub(used) >= OVERRIDE_IDLE).then(|| (used, d.clone(), *k))
                })
            })
            .collect();
        idle.sort_unstable_by_key(|(used, _, _)| *used);
        let evict = idle.len().min(need - freed);
        for (_, d, k) in idle.into_iter().take(evict) {
            if let Some(m) = rules.get_mut(&d) {
                m.remove(&k);
            }
        }
        metrics::counter!("drl_override_evictions_total", "kind" => "live").increment(evict as u64);
    }
    rules.retain(|_, m| !m.is_empty());
}

fn make_rule(
    domain: &str,
    unit: Unit,
    requests_per_unit: u32,
    store: Option<&Backend>,
) -> EnvoyRule {
    let path: Arc<str> = Arc::from(format!("{domain}.limit_override"));
    // A u32 rate per unit always makes a valid quota; only 0 is refused,
    // and 0 blocks.
    let kind = match Quota::new(u64::from(requests_per_unit), unit.window()) {
        Err(_) => RuleKind::Block(LimitMetrics::new(&path)),
        Ok(quota) => {
            let spec = LimitSpec::new(
                format!("{path}:{requests_per_unit}/{}", unit.name()),
                Algorithm::FixedWindow,
                vec![quota],
            );
            let bounds = KeyBounds::keys(OVERRIDE_MAX_KEYS);
            let (scope, backend) = match store {
                Some(b) => (Scope::Redis, b.clone()),
                None => {
                    let limiter =
                        Arc::new(KeyedLimiter::new(spec.limiter(), bounds.keyed_config()));
                    crate::metrics::register_table(&path, &limiter);
                    (Scope::Local, Backend::Local(limiter))
                }
            };
            RuleKind::Limited(Arc::new(Limit {
                policy: headers::policy(&path, &[quota]),
                metrics: LimitMetrics::new(&path),
                name: path.clone(),
                spec,
                scope,
                bounds,
                backend,
                shadow: false,
                key: KeyMapping::from_config(&KeyConfig::default()),
                reservations: Default::default(),
            }))
        }
    };
    let stats = crate::envoy_stats::EnvoyStats::new(&path);
    EnvoyRule {
        path,
        kind,
        name: None,
        replaces: Vec::new(),
        shadow: false,
        quota: false,
        share: Vec::new(),
        unit,
        requests_per_unit,
        metadata: None,
        stats: Some(stats),
        detailed: false,
    }
}

/// The state key of a descriptor under an override: every entry's key and
/// value (the override limiter is shared by all descriptors of a domain).
pub fn state_key<'a>(out: &mut String, entries: impl IntoIterator<Item = (&'a str, &'a str)>) {
    out.clear();
    for (i, (k, v)) in entries.into_iter().enumerate() {
        if i > 0 {
            out.push('\u{1e}');
        }
        out.push_str(k);
        out.push('\u{1f}');
        out.push_str(v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Nanos = drl_core::time::SECOND;

    fn one(o: &Overrides, index: usize, domain: &str, rpu: u32, unit: i32) -> Arc<EnvoyRule> {
        o.rules(domain, &[(index, rpu, unit)], S).unwrap()[0].clone()
    }

    /// Uses override `rule` once for key "k" at `now` (live state for an
    /// hour-long window).
    fn hit(rule: &EnvoyRule, now: Nanos) {
        let RuleKind::Limited(l) = &rule.kind else {
            panic!("limited")
        };
        let d = l.backend.decide_now("k", 1, now).unwrap();
        assert!(d.allowed);
    }

    #[test]
    fn one_rule_per_domain_unit_and_rate() {
        let o = Overrides::new();
        let a = one(&o, 0, "d", 5, 1);
        assert!(Arc::ptr_eq(&a, &one(&o, 3, "d", 5, 1)));
        assert!(!Arc::ptr_eq(&a, &one(&o, 0, "d", 6, 1)));
        assert!(!Arc::ptr_eq(&a, &one(&o, 0, "d", 5, 2)));
        assert!(!Arc::ptr_eq(&a, &one(&o, 0, "e", 5, 1)));
        assert_eq!(o.len(), 4);
        assert!(matches!(one(&o, 0, "d", 0, 4).kind, RuleKind::Block(_)));
        o.retain_domains(|d| d == "e");
        assert_eq!(o.len(), 1);
        // One request naming the same override twice gets the same rule.
        let two = o.rules("e", &[(0, 5, 1), (1, 5, 1)], S).unwrap();
        assert!(Arc::ptr_eq(&two[0], &two[1]));
        assert_eq!(o.len(), 1);
    }

    #[test]
    fn unknown_units_are_refused_with_the_descriptor_index() {
        let o = Overrides::new();
        for unit in [0, 8, -1] {
            let e = o.rules("d", &[(2, 5, unit)], S).unwrap_err();
            assert_eq!(e, OverrideError::UnknownUnit { index: 2, unit });
            assert!(e.to_string().starts_with("descriptors[2]: "), "{e}");
        }
        assert!(o.is_empty());
    }

    /// Issue 14, defect 2: one refused call filled every slot (overrides
    /// were made descriptor by descriptor until the bad one). Now nothing
    /// is left behind: not by a bad unit, not by too many at once.
    #[test]
    fn a_refused_request_leaves_nothing_behind() {
        let o = Overrides::new();
        let mut wanted: Vec<(usize, u32, i32)> =
            (1..=1000u32).map(|r| (r as usize, r, 3)).collect();
        wanted.push((1000, 7, 0));
        assert_eq!(
            o.rules("d", &wanted, S).unwrap_err(),
            OverrideError::UnknownUnit {
                index: 1000,
                unit: 0
            }
        );
        assert!(o.is_empty());
        let too_many: Vec<(usize, u32, i32)> = (1..=MAX_OVERRIDE_LIMITS as u32 + 1)
            .map(|r| (r as usize, r, 3))
            .collect();
        assert_eq!(
            o.rules("d", &too_many, S).unwrap_err(),
            OverrideError::TooMany {
                index: MAX_OVERRIDE_LIMITS + 1
            }
        );
        assert!(o.is_empty());
        one(&o, 0, "d", 5, 1);
        assert_eq!(o.len(), 1);
    }

    /// The table is bounded, but never stuck: overrides without live state
    /// make room at once; live ones once idle for OVERRIDE_IDLE (least
    /// recently used first); only while all were used within it is a new
    /// one refused. A reload drops the stateless ones.
    #[test]
    fn the_number_of_overrides_is_bounded_but_idle_ones_make_room() {
        let o = Overrides::new();
        // An attacker's 1,024 distinct overrides, each with live state.
        for rpu in 1..=MAX_OVERRIDE_LIMITS as u32 {
            let r = o.rules("d", &[(0, rpu, 3)], S).unwrap();
            hit(&r[0], S);
        }
        assert_eq!(o.len(), MAX_OVERRIDE_LIMITS);
        // All used within the last second: a new one is refused...
        assert_eq!(
            o.rules("d", &[(1, 0xffff_ffff, 3)], S + S / 2).unwrap_err(),
            OverrideError::TooMany { index: 1 }
        );
        // ...those held keep working...
        let kept = o.rules("d", &[(0, 7, 3)], S + S / 2).unwrap();
        hit(&kept[0], S + S / 2);
        // ...and once the attacker's are idle, a new one is served in place
        // of a least recently used one (never 7, used since).
        let late = 3 * S;
        let r = o.rules("d", &[(0, 0xffff_ffff, 3)], late).unwrap();
        hit(&r[0], late);
        assert_eq!(o.len(), MAX_OVERRIDE_LIMITS);
        let again = o.rules("d", &[(0, 7, 3)], late).unwrap();
        assert!(
            Arc::ptr_eq(&kept[0], &again[0]),
            "recently used override kept"
        );
        // A reload an hour later drops every override without live state.
        assert_eq!(o.drop_stateless(3600 * S + late), MAX_OVERRIDE_LIMITS);
        assert!(o.is_empty());
    }

    #[test]
    fn overrides_without_live_state_make_room_at_once() {
        let o = Overrides::new();
        for rpu in 1..=MAX_OVERRIDE_LIMITS as u32 {
            o.rules("d", &[(0, rpu, 3)], S).unwrap();
        }
        // Same instant, all just used, but none holds state.
        o.rules("d", &[(0, 0xffff_ffff, 3)], S + 1).unwrap();
        assert_eq!(o.len(), MAX_OVERRIDE_LIMITS);
    }

    #[test]
    fn state_keys_name_keys_and_values() {
        let mut k = String::new();
        state_key(&mut k, [("a", "1"), ("b", "2")]);
        let ab = k.clone();
        state_key(&mut k, [("a", "1"), ("c", "2")]);
        assert_ne!(ab, k);
    }

    /// However many distinct overrides and keys a client sends, the rules
    /// held never exceed [`MAX_OVERRIDE_LIMITS`], each bounded to its
    /// share of [`OVERRIDE_BYTES`].
    #[test]
    fn overrides_are_bounded_in_count_and_bytes() {
        let o = Overrides::new();
        let mut held = Vec::new();
        for rpu in 1..=MAX_OVERRIDE_LIMITS as u32 {
            held.extend(o.rules("d", &[(0, rpu, 1)], 0).unwrap());
        }
        // All in use now: one more is refused, nothing is added.
        assert_eq!(
            o.rules("d", &[(0, 10_000, 1)], 0).unwrap_err(),
            OverrideError::TooMany { index: 0 }
        );
        assert_eq!(o.len(), MAX_OVERRIDE_LIMITS);
        let mut bytes = 0;
        for r in &held {
            let RuleKind::Limited(l) = &r.kind else {
                continue;
            };
            assert!(l.bounds.max_keys <= OVERRIDE_MAX_KEYS);
            bytes += l.bounds.max_bytes;
        }
        assert!(bytes <= OVERRIDE_BYTES, "{bytes}");
        // Fill one override far past its keys: its table stays bounded.
        let RuleKind::Limited(l) = &held[0].kind else {
            panic!("a limited rule")
        };
        let Backend::Local(k) = &l.backend else {
            panic!("in memory")
        };
        for i in 0..3 * OVERRIDE_MAX_KEYS {
            let _ = k.decide(format!("key-{i:08}").as_str(), 0, 1);
        }
        assert!(k.len() <= OVERRIDE_MAX_KEYS, "{}", k.len());
    }
}
