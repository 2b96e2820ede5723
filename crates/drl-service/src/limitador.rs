//! limitador's decision rules on Envoy RLS v3, for limits read from a
//! limitador limits file ([`drl_config::limitador`]).
//!
//! A request's `domain` is the namespace. Every limit of the namespace
//! whose conditions all hold and whose variables are all present applies,
//! with one counter per distinct tuple of variable values (a fixed window
//! of `seconds`). The request is allowed only if every applying limit has
//! room for its hits (`hits_addend`, 0 meaning 1); then each applying
//! limit counts them. A denied request counts nothing (limitador and drl
//! agree here). With no applying limit the request is allowed.
//!
//! With several applying limits drl first asks each (a query, which
//! writes nothing) and counts only if all have room. Two concurrent
//! requests can both pass the queries and then one be denied by a later
//! limit after an earlier one counted it: that wastes capacity, it never
//! admits beyond a limit (each count is itself a checked decision).

use std::collections::HashMap;
use std::sync::Arc;

use drl_api::rls_answer::{Answer, HeaderFields};
use drl_api::rls_request::DescriptorView;
use drl_core::{Algorithm, Quota};
use drl_store::LimitSpec;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use smallvec::SmallVec;
use tonic::Status;

use crate::engine::{self, Engine};
use crate::headers;
use crate::limits::{KeyMapping, Limit, Limits, envoy_bounds};
use crate::metrics::{Api, LimitMetrics, rejected};
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

/// Decides one RLS request for a limitador namespace: `true` if allowed,
/// and the (remaining, rule, reset ns) of the tightest applying limit.
pub async fn decide<'r>(
    engine: &Engine,
    limits: &Limits,
    rules: &'r [Rule],
    descriptors: &[DescriptorView<'_>],
    hits: u64,
) -> Result<(bool, Option<(u64, &'r Rule, u64)>), Status> {
    let mut hit: Vec<(&Rule, String)> = Vec::new();
    for r in rules {
        if let Some(k) = applies(r, descriptors) {
            hit.push((r, k));
        }
    }
    let now = engine.now();
    let window_end = |r: &Rule| {
        let w = r.seconds.saturating_mul(1_000_000_000).max(1);
        w - now % w
    };
    let mut tightest: Option<(u64, &Rule, u64)> = None;
    if hit.is_empty() {
        return Ok((true, None));
    }
    for &(r, ref k) in &hit {
        if r.limit.is_none() {
            r.block.record(false);
            return Ok((false, Some((0, r, window_end(r)))));
        }
        if k.len() > limits.server.max_key_bytes {
            // An error would let Envoy pass the request (fail open).
            rejected(Api::EnvoyRls, "key_too_long");
            return Ok((false, Some((0, r, window_end(r)))));
        }
    }
    let store_err = |e: engine::CheckError| {
        rejected(Api::EnvoyRls, e.kind());
        Status::unavailable(e.to_string())
    };
    if hit.len() > 1 {
        // Ask all before counting any: all or nothing.
        for &(r, ref k) in &hit {
            let Some(l) = &r.limit else { continue };
            let d = engine::decide_raw(l, k, 0, now).await.map_err(store_err)?;
            if !d.allowed || d.remaining < hits {
                l.metrics.record(false);
                return Ok((false, Some((d.remaining, r, window_end(r)))));
            }
        }
    }
    let mut allowed = true;
    for &(r, ref k) in &hit {
        let Some(l) = &r.limit else { continue };
        let d = engine::decide(l, k, hits, now).await.map_err(store_err)?;
        let reset = if d.reset_after == 0 {
            window_end(r)
        } else {
            d.reset_after
        };
        if tightest.is_none_or(|t| t.0 > d.remaining) {
            tightest = Some((d.remaining, r, reset));
        }
        if !d.allowed {
            allowed = false;
            break;
        }
    }
    Ok((allowed, tightest))
}

/// The RLS answer for a limitador namespace (no per-descriptor statuses,
/// as limitador; `RateLimit-*` headers of the tightest limit when
/// `server.envoy_response_headers` is on).
pub async fn should_rate_limit(
    engine: &Engine,
    limits: &Limits,
    rules: &[Rule],
    descriptors: &[DescriptorView<'_>],
    hits: u64,
) -> Result<Answer<'static>, Status> {
    let (allowed, tightest) = decide(engine, limits, rules, descriptors, hits).await?;
    let headers = tightest
        .filter(|_| limits.server.envoy_response_headers)
        .map(|(remaining, rule, reset)| HeaderFields {
            requests_per_unit: rule.max_value,
            window_secs: rule.seconds,
            remaining,
            reset_secs: headers::ceil_secs(reset),
        });
    Ok(Answer {
        overall_code: if allowed { Code::Ok } else { Code::OverLimit } as i32,
        statuses: SmallVec::new(),
        headers,
    })
}
