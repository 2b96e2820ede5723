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
//! (the values come from Envoy's route config, so there are few).
//!
//! Metrics label every override of a domain `DOMAIN.limit_override`.

use std::collections::HashMap;
use std::sync::Arc;

use drl_core::{Algorithm, KeyedConfig, KeyedLimiter, Quota};
use drl_store::LimitSpec;

use crate::config::envoy::Unit;
use crate::config::{DEFAULT_MAX_KEYS, KeyConfig, Scope};
use crate::headers;
use crate::limits::{EnvoyRule, KeyMapping, Limit, RuleKind};
use crate::metrics::LimitMetrics;
use crate::scope::Backend;

type FastMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

/// The override rules of one domain, by (unit, requests_per_unit).
type DomainRules = FastMap<(Unit, u32), Arc<EnvoyRule>>;

/// The most distinct (domain, unit, requests_per_unit) overrides held.
pub const MAX_OVERRIDE_LIMITS: usize = 1024;

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
    /// [`MAX_OVERRIDE_LIMITS`] distinct overrides are already held.
    #[error(
        "descriptors[{index}]: too many distinct limit overrides in use (at most {MAX_OVERRIDE_LIMITS} (domain, unit, requests_per_unit) combinations)"
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

    /// The rule for an override of descriptor `index` in `domain`; made on
    /// first use.
    pub fn rule(
        &self,
        index: usize,
        domain: &str,
        requests_per_unit: u32,
        unit: i32,
    ) -> Result<Arc<EnvoyRule>, OverrideError> {
        let unit = Unit::from_proto(unit).ok_or(OverrideError::UnknownUnit { index, unit })?;
        let k = (unit, requests_per_unit);
        if let Some(r) = self.rules.read().get(domain).and_then(|m| m.get(&k)) {
            return Ok(r.clone());
        }
        let mut rules = self.rules.write();
        if let Some(r) = rules.get(domain).and_then(|m| m.get(&k)) {
            return Ok(r.clone());
        }
        if rules.values().map(FastMap::len).sum::<usize>() >= MAX_OVERRIDE_LIMITS {
            return Err(OverrideError::TooMany { index });
        }
        let rule = Arc::new(make_rule(domain, unit, requests_per_unit));
        rules
            .entry(domain.to_string())
            .or_default()
            .insert(k, rule.clone());
        Ok(rule)
    }

    /// Drops the overrides of domains for which `keep` is false (after a
    /// reload removed them).
    pub fn retain_domains(&self, mut keep: impl FnMut(&str) -> bool) {
        self.rules.write().retain(|d, _| keep(d));
    }

    /// How many distinct overrides are held.
    pub fn len(&self) -> usize {
        self.rules.read().values().map(FastMap::len).sum()
    }

    /// True when no override is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn make_rule(domain: &str, unit: Unit, requests_per_unit: u32) -> EnvoyRule {
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
            let limiter = KeyedLimiter::new(
                spec.limiter(),
                KeyedConfig {
                    max_keys: DEFAULT_MAX_KEYS,
                    ..KeyedConfig::default()
                },
            );
            RuleKind::Limited(Arc::new(Limit {
                policy: headers::policy(&path, &[quota]),
                metrics: LimitMetrics::new(&path),
                name: path.clone(),
                spec,
                scope: Scope::Local,
                max_keys: DEFAULT_MAX_KEYS,
                backend: Backend::Local(Arc::new(limiter)),
                shadow: false,
                key: KeyMapping::from_config(&KeyConfig::default()),
            }))
        }
    };
    EnvoyRule {
        path,
        kind,
        name: None,
        replaces: Vec::new(),
        shadow: false,
        unit,
        requests_per_unit,
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

    #[test]
    fn one_rule_per_domain_unit_and_rate() {
        let o = Overrides::new();
        let a = o.rule(0, "d", 5, 1).unwrap();
        assert!(Arc::ptr_eq(&a, &o.rule(3, "d", 5, 1).unwrap()));
        assert!(!Arc::ptr_eq(&a, &o.rule(0, "d", 6, 1).unwrap()));
        assert!(!Arc::ptr_eq(&a, &o.rule(0, "d", 5, 2).unwrap()));
        assert!(!Arc::ptr_eq(&a, &o.rule(0, "e", 5, 1).unwrap()));
        assert_eq!(o.len(), 4);
        assert!(matches!(
            o.rule(0, "d", 0, 4).unwrap().kind,
            RuleKind::Block(_)
        ));
        o.retain_domains(|d| d == "e");
        assert_eq!(o.len(), 1);
    }

    #[test]
    fn unknown_units_are_refused_with_the_descriptor_index() {
        let o = Overrides::new();
        for unit in [0, 8, -1] {
            let e = o.rule(2, "d", 5, unit).unwrap_err();
            assert_eq!(e, OverrideError::UnknownUnit { index: 2, unit });
            assert!(e.to_string().starts_with("descriptors[2]: "), "{e}");
        }
        assert!(o.is_empty());
    }

    #[test]
    fn the_number_of_overrides_is_bounded() {
        let o = Overrides::new();
        for rpu in 1..=MAX_OVERRIDE_LIMITS as u32 {
            o.rule(0, "d", rpu, 1).unwrap();
        }
        assert_eq!(
            o.rule(1, "d", 0xffff_ffff, 1).unwrap_err(),
            OverrideError::TooMany { index: 1 }
        );
        // Those already held keep working.
        o.rule(0, "d", 7, 1).unwrap();
    }

    #[test]
    fn state_keys_name_keys_and_values() {
        let mut k = String::new();
        state_key(&mut k, [("a", "1"), ("b", "2")]);
        let ab = k.clone();
        state_key(&mut k, [("a", "1"), ("c", "2")]);
        assert_ne!(ab, k);
    }
}
