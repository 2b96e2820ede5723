//! limitador's limits compiled into rules: which limits of a namespace
//! apply to a request's descriptors, and under which counter key.

use std::collections::HashMap;
use std::sync::Arc;

use drl_api::rls_request::DescriptorView;
use drl_core::{Algorithm, Quota};
use drl_store::LimitSpec;

use crate::headers;
use crate::limits::{KeyMapping, Limit, envoy_bounds};
use crate::metrics::LimitMetrics;
use crate::scope::{Backend, Stores};
use drl_config::limitador::{Condition, LimitadorSource, Op, Selector};
use drl_config::{ConfigError, KeyConfig};

/// One limit of a limits file, compiled.
#[derive(Debug)]
pub struct Rule {
    /// The drl limit (`None` when `max_value` is 0: always over).
    pub limit: Option<Arc<Limit>>,
    /// Counters of a `max_value: 0` limit.
    pub block: LimitMetrics,
    /// All must hold.
    pub conditions: Vec<Condition>,
    /// All must be present; their values make the key.
    pub variables: Vec<Selector>,
    /// Hits per window.
    pub max_value: u64,
    /// The window, seconds.
    pub seconds: u64,
}

/// Rules by namespace, in file order.
pub type Namespaces = HashMap<String, Vec<Rule>>;

/// Compiles the limits of `sources`; every drl limit made is also pushed
/// to `all` (so a reload keeps the state of unchanged ones).
pub fn build(
    sources: &[LimitadorSource],
    stores: &Stores,
    source: &str,
    all: &mut Vec<Arc<Limit>>,
) -> Result<Namespaces, ConfigError> {
    let mut out = Namespaces::new();
    for src in sources {
        for l in &src.limits {
            let name: Arc<str> = Arc::from(l.name.as_str());
            let limit = if l.max_value == 0 {
                None
            } else {
                let quota = Quota::new(l.max_value, l.seconds.saturating_mul(1_000_000_000))
                    .map_err(|e| ConfigError::new(source, format!("limit {name}: {e}")))?;
                let spec = LimitSpec::new(l.name.clone(), Algorithm::FixedWindow, vec![quota]);
                let bounds = envoy_bounds();
                let backend = stores
                    .backend(src.scope, &spec, bounds)
                    .map_err(|e| ConfigError::new(source, format!("limit {name}: {e}")))?;
                if let Backend::Local(t) = &backend {
                    crate::metrics::register_table(&name, t);
                }
                let limit = Arc::new(Limit {
                    policy: headers::policy(&name, &[quota]),
                    metrics: LimitMetrics::new(&name),
                    name: name.clone(),
                    spec,
                    scope: src.scope,
                    bounds,
                    backend,
                    shadow: false,
                    key: KeyMapping::from_config(&KeyConfig::default()),
                    reservations: Default::default(),
                });
                all.push(limit.clone());
                Some(limit)
            };
            out.entry(l.namespace.clone()).or_default().push(Rule {
                limit,
                block: LimitMetrics::new(&name),
                conditions: l.conditions.clone(),
                variables: l.variables.clone(),
                max_value: l.max_value,
                seconds: l.seconds,
            });
        }
    }
    Ok(out)
}

/// The value of the entry `sel` reads, if the request has it.
pub fn lookup<'a>(sel: &Selector, descriptors: &[DescriptorView<'a>]) -> Option<&'a str> {
    match sel {
        Selector::At { index, key } => descriptors
            .get(*index)?
            .entries
            .iter()
            .rev()
            .find(|e| e.key == *key)
            .map(|e| e.value),
        Selector::Any { key } => descriptors
            .iter()
            .rev()
            .flat_map(|d| d.entries.iter().rev())
            .find(|e| e.key == *key)
            .map(|e| e.value),
    }
}

/// Whether `c` holds (a condition on an absent entry does not).
pub fn holds(c: &Condition, descriptors: &[DescriptorView<'_>]) -> bool {
    match lookup(&c.selector, descriptors) {
        None => false,
        Some(v) => (v == c.value) == (c.op == Op::Eq),
    }
}

/// The counter key of `rule` for this request, or `None` if the rule does
/// not apply. Values are joined by U+001F.
pub fn applies(rule: &Rule, descriptors: &[DescriptorView<'_>]) -> Option<String> {
    if !rule.conditions.iter().all(|c| holds(c, descriptors)) {
        return None;
    }
    let mut key = String::new();
    for (i, v) in rule.variables.iter().enumerate() {
        if i > 0 {
            key.push('\u{1f}');
        }
        key.push_str(lookup(v, descriptors)?);
    }
    Some(key)
}
