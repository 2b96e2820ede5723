//! Envoy RLS v3 `ShouldRateLimit`, deciding as envoyproxy/ratelimit does:
//! each request descriptor is matched against its domain's descriptor tree
//! ([`drl_service::limits::match_descriptor`]); every matched rule decides on its
//! own (a fixed window per unit, one counter per distinct descriptor
//! value); `replaces` drops the rules it names; `shadow_mode` answers OK
//! whatever the decision; `unlimited` answers OK with `limit_remaining` =
//! `u32::MAX`; the overall code is OVER_LIMIT if any descriptor is. A
//! descriptor's `limit` override replaces the configured rule
//! ([`drl_service::envoy_override`]).
//!
//! A hit (`hits_addend` > 0, the request's or the descriptor's) is a
//! *charge* by default, as envoyproxy/ratelimit counts it: consumed even
//! past the limit, the answer OVER_LIMIT exactly when the count is then
//! over the limit (with `limit_remaining` 0), so a response-path count
//! (Envoy's `apply_on_stream_done`) denies the next request until the
//! window rolls over. A descriptor's `hits_addend` of 0 checks only.
//! `server.envoy_hits: take` answers as drl's other APIs do instead: a
//! denied hit consumes nothing (docs/semantics.md, "Costs known
//! afterwards").
//!
//! Another: a limited descriptor whose state key (its values, or its keys
//! and values under an override) is longer than `server.max_key_bytes` is
//! answered OVER_LIMIT without being held, and counted as
//! `drl_requests_rejected_total{api="envoy_rls",reason="key_too_long"}`. An
//! error status would not do: Envoy lets a request through when its rate
//! limit service fails (unless `failure_mode_deny` is set), so an error
//! would let any long header value bypass the limit.

use std::collections::BTreeSet;
use std::sync::Arc;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitService;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::Struct;
use smallvec::SmallVec;
use tonic::{Request, Response, Status};

use drl_api::rls_answer::{Answer, HeaderFields, LimitFields, StatusFields};
use drl_api::rls_request::{EntryView, INLINE_DESCRIPTORS, RequestView};
use drl_config::{EnvoyHits, UnknownDomain};
use drl_core::time::Nanos;
use drl_service::engine::{self, Engine};
use drl_service::envoy_local_cache as local_cache;
use drl_service::envoy_metadata;
use drl_service::envoy_override::{OverrideError, state_key};
use drl_service::headers::ceil_secs;
use drl_service::limits::{EnvoyRule, Limits, RuleKind, match_descriptor};
use drl_service::metrics::{Api, rejected};

/// The `envoy.service.ratelimit.v3.RateLimitService`.
#[derive(Debug, Clone)]
pub struct RlsService {
    engine: Arc<Engine>,
}

impl RlsService {
    /// A service deciding with `engine`.
    pub fn new(engine: Arc<Engine>) -> Self {
        Self { engine }
    }
}

/// A status's `current_limit`: the rule.
fn limit_fields(rule: &EnvoyRule) -> LimitFields<'_> {
    LimitFields {
        name: rule.name.as_deref().unwrap_or(""),
        requests_per_unit: rule.requests_per_unit,
        unit: rule.unit.proto(),
    }
}

/// The state key of a limited descriptor: under an override its keys and
/// values ([`state_key`]); otherwise its values joined by U+001F (the
/// rule's path names the keys), each value matched by a `share_threshold`
/// wildcard replaced by the wildcard (`share`, one counter for every value
/// it matches). One entry without an override is its value itself,
/// borrowed; otherwise the key is built in `buf`.
fn descriptor_key<'a>(
    buf: &'a mut String,
    entries: &'a [EntryView<'a>],
    is_override: bool,
    share: &'a [Option<Arc<str>>],
) -> &'a str {
    if is_override {
        state_key(buf, entries.iter().map(|e| (e.key, e.value)));
        return buf;
    }
    let value = |j: usize, e: &'a EntryView<'a>| -> &'a str {
        share.get(j).and_then(Option::as_deref).unwrap_or(e.value)
    };
    if let [one] = entries {
        return value(0, one);
    }
    buf.clear();
    for (j, e) in entries.iter().enumerate() {
        if j > 0 {
            buf.push('\u{1f}');
        }
        buf.push_str(value(j, e));
    }
    buf
}

/// The `RateLimit-*` headers of the most restrictive limited status: its
/// rule, the requests it has left, and the nanoseconds until it resets.
fn header_fields(rule: &EnvoyRule, remaining: u64, reset: u64) -> HeaderFields {
    HeaderFields {
        requests_per_unit: u64::from(rule.requests_per_unit),
        window_secs: rule.unit.window() / 1_000_000_000,
        remaining,
        reset_secs: ceil_secs(reset),
    }
}

/// Which descriptors count their hits under
/// `server.envoy_stop_increment_when_over_limit` (envoyproxy/ratelimit's
/// `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`): when some limited
/// descriptor would pass its limit with its hits, only those count and the
/// others are checked without counting; `None` when every one counts.
async fn counted_descriptors(
    req: &RequestView<'_>,
    rules: &[Option<&EnvoyRule>],
    hits: u64,
    is_override: &impl Fn(usize) -> bool,
    max_key_bytes: usize,
    now: Nanos,
) -> Result<Option<Vec<bool>>, Status> {
    let mut key_buf = String::new();
    let mut passing = vec![false; rules.len()];
    for (i, (d, rule)) in req.descriptors.iter().zip(rules).enumerate() {
        let Some(rule) = rule else { continue };
        let RuleKind::Limited(limit) = &rule.kind else {
            continue;
        };
        let cost = d.hits_addend.unwrap_or(hits);
        let key = descriptor_key(&mut key_buf, &d.entries, is_override(i), &rule.share);
        if cost == 0 || key.len() > max_key_bytes {
            continue;
        }
        let _span = limit
            .backend
            .local()
            .is_none()
            .then(crate::trace::store_span)
            .flatten();
        let now_state = engine::decide_raw(limit, key, 0, now).await.map_err(|e| {
            rejected(Api::EnvoyRls, e.kind());
            Status::unavailable(e.to_string())
        })?;
        passing[i] = now_state.remaining < cost;
    }
    Ok(passing.iter().any(|&p| p).then_some(passing))
}

/// `ns` rounded up to whole seconds (still in nanoseconds): what
/// envoyproxy/ratelimit sends as `duration_until_reset` (`unit - now %
/// unit`, in seconds).
/// The answer's dynamic metadata: the request, and the `metadata` of the
/// rules of the descriptors that passed (OK, and not unlimited), as
/// envoyproxy/ratelimit gives them.
fn dynamic_metadata(
    req: &RequestView<'_>,
    rules: &[Option<&EnvoyRule>],
    statuses: &[StatusFields<'_>],
) -> Struct {
    let passed = rules.iter().zip(statuses).filter_map(|(r, s)| {
        let r = (*r)?;
        let ok = s.code == Code::Ok as i32 && !matches!(r.kind, RuleKind::Unlimited);
        r.metadata.as_deref().filter(|_| ok)
    });
    envoy_metadata::response_metadata(req, passed)
}

/// The stats of descriptor `d` under the key envoyproxy/ratelimit names
/// by its values (`server.envoy_stats_values`); `None` when that key is the
/// rule's path, or past the bound on such keys.
fn value_stats(
    domain: &str,
    root: &drl_service::limits::EnvoyLevel,
    d: &drl_api::rls_request::DescriptorView<'_>,
    rule: &EnvoyRule,
    is_override: bool,
) -> Option<drl_service::envoy_stats::EnvoyStats> {
    use drl_service::envoy_stats_key::{override_key, reference_key};
    let entries = d.entries.iter().map(|e| (e.key, e.value));
    let key = if is_override {
        override_key(domain, entries)
    } else {
        reference_key(domain, root, entries, rule.detailed)
    };
    if key == *rule.path {
        return None;
    }
    drl_service::envoy_stats::for_key(&key)
}

/// The count a query `d` of a rule of `limit` per unit shows: `limit -
/// remaining`, or past the limit (`limit + 1`) when the key is in debt.
fn count_of(d: &drl_core::Decision, limit: u64) -> u64 {
    if d.allowed || d.remaining > 0 {
        limit.saturating_sub(d.remaining)
    } else {
        limit.saturating_add(1)
    }
}

fn whole_seconds(ns: u64) -> u64 {
    ns.div_ceil(drl_core::time::SECOND)
        .saturating_mul(drl_core::time::SECOND)
}

#[tonic::async_trait]
impl RateLimitService for RlsService {
    async fn should_rate_limit(
        &self,
        req: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        let span = crate::trace::rls_span(req.metadata().as_ref());
        let call = should_rate_limit(&self.engine, req.into_inner());
        match span {
            Some(span) => crate::trace::within(span, call).await,
            None => call.await,
        }
        .map(Response::new)
    }
}

/// One `ShouldRateLimit` call, whichever transport carried it (tonic's
/// service above, or [`super::direct`]): the response, or the status to
/// answer, counted in the metrics either way.
pub async fn should_rate_limit(
    engine: &Engine,
    req: RateLimitRequest,
) -> Result<RateLimitResponse, Status> {
    let started = engine.now();
    should_rate_limit_on(
        engine,
        &engine.limits(),
        &RequestView::of(&req),
        started,
        |a| a.message(),
    )
    .await
}

/// [`should_rate_limit`] on `limits` (the caller's reading of
/// [`Engine::limits`]), the answer rendered by `render`
/// ([`Answer::message`] for tonic, [`Answer::encode`] for the hot path).
/// When `limits.rls_in_memory`, every decision is made in memory and the
/// future is ready at its first poll.
pub async fn should_rate_limit_on<R>(
    engine: &Engine,
    limits: &Limits,
    req: &RequestView<'_>,
    started: Nanos,
    render: impl FnOnce(&Answer<'_>) -> R,
) -> Result<R, Status> {
    // `started` (the caller's clock reading, or the stamp of the read
    // that completed the request) serves as the request's start, the
    // decisions' `now` and the overrides' clock; one more reading at the
    // end.
    crate::trace::note_domain(req.domain);
    if req.domain.is_empty() {
        rejected(Api::EnvoyRls, "empty_domain");
        return Err(Status::invalid_argument(
            "rate limit domain must not be empty",
        ));
    }
    if req.descriptors.is_empty() {
        rejected(Api::EnvoyRls, "empty_descriptors");
        return Err(Status::invalid_argument(
            "rate limit descriptor list must not be empty",
        ));
    }
    // Before the first config has loaded (`--wait-for-config`), an
    // error, never an answer: envoyproxy/ratelimit's words and
    // `service_error`, with UNAVAILABLE (the reference's plain Go error is
    // UNKNOWN) since the condition passes once a config loads.
    if !limits.loaded {
        rejected(Api::EnvoyRls, "no_config");
        return Err(Status::unavailable(engine::NOT_LOADED));
    }
    // (`limitador` is a SipHash map: skip the hash when it is empty.)
    if !limits.limitador.is_empty()
        && let Some(rules) = limits.limitador.get(req.domain)
    {
        let hits = u64::from(req.hits_addend.max(1));
        let answer = drl_service::limitador::decide::should_rate_limit(
            engine,
            limits,
            rules,
            &req.descriptors,
            hits,
        )
        .await?;
        let took = engine.now().saturating_sub(started);
        engine.api_metrics.observe_ns(Api::EnvoyRls, took);
        return Ok(render(&answer));
    }
    let Some(root) = limits.domains.get(req.domain) else {
        if limits.server.envoy_unknown_domain == UnknownDomain::NotFound {
            rejected(Api::EnvoyRls, "unknown_domain");
            let mut known: Vec<&str> = limits.domains.keys().map(String::as_str).collect();
            known.sort_unstable();
            return Err(Status::not_found(format!(
                "unknown rate limit domain {:?}; configured domains: {}",
                req.domain,
                known.join(", ")
            )));
        }
        // As envoyproxy/ratelimit: no limit applies to a domain it has no
        // config for; every descriptor is OK, without a current limit.
        metrics::counter!("drl_envoy_unknown_domain_total").increment(1);
        let statuses = req
            .descriptors
            .iter()
            .map(|_| StatusFields {
                code: Code::Ok as i32,
                current_limit: None,
                limit_remaining: 0,
                duration_until_reset: None,
            })
            .collect();
        engine
            .api_metrics
            .observe_ns(Api::EnvoyRls, engine.now().saturating_sub(started));
        let dynamic_metadata = limits
            .server
            .envoy_response_dynamic_metadata
            .then(|| envoy_metadata::response_metadata(req, []));
        return Ok(render(&Answer {
            overall_code: Code::Ok as i32,
            statuses,
            headers: None,
            header_names: None,
            dynamic_metadata,
        }));
    };
    let hits = if req.hits_addend == 0 {
        1
    } else {
        u64::from(req.hits_addend)
    };
    // A descriptor's `limit` override replaces whatever the config would
    // apply, matched or not (as envoyproxy/ratelimit does).
    let mut overridden: Vec<Option<Arc<EnvoyRule>>> = Vec::new();
    if req.descriptors.iter().any(|d| d.limit.is_some()) {
        let wanted: Vec<(usize, u32, i32)> = req
            .descriptors
            .iter()
            .enumerate()
            .filter_map(|(i, d)| d.limit.map(|o| (i, o.requests_per_unit, o.unit)))
            .collect();
        let made = engine
            .overrides
            .rules_in(req.domain, &wanted, started, limits.envoy_store.as_ref())
            .map_err(|e| {
                rejected(Api::EnvoyRls, e.kind());
                match e {
                    OverrideError::UnknownUnit { .. } => Status::invalid_argument(e.to_string()),
                    OverrideError::TooMany { .. } => Status::resource_exhausted(e.to_string()),
                }
            })?;
        overridden.resize(req.descriptors.len(), None);
        for (&(i, _, _), r) in wanted.iter().zip(made) {
            overridden[i] = Some(r);
        }
    }
    let is_override = |i: usize| overridden.get(i).is_some_and(Option::is_some);
    // The rule of each descriptor; on the stack for the usual few.
    let n = req.descriptors.len();
    let mut rules_inline: [Option<&EnvoyRule>; INLINE_DESCRIPTORS] = [None; INLINE_DESCRIPTORS];
    let mut rules_heap: Vec<Option<&EnvoyRule>>;
    let rules: &mut [Option<&EnvoyRule>] = if n <= INLINE_DESCRIPTORS {
        &mut rules_inline[..n]
    } else {
        rules_heap = vec![None; n];
        &mut rules_heap
    };
    for (i, (d, slot)) in req.descriptors.iter().zip(rules.iter_mut()).enumerate() {
        *slot = match overridden.get(i) {
            Some(Some(r)) => Some(&**r),
            _ => match_descriptor(root, d.entries.iter().map(|e| (e.key, e.value))),
        };
    }
    if rules.iter().flatten().any(|r| !r.replaces.is_empty()) {
        let replaced: BTreeSet<&str> = rules
            .iter()
            .flatten()
            .flat_map(|r| r.replaces.iter().map(String::as_str))
            .collect();
        for r in rules.iter_mut() {
            if r.and_then(|r| r.name.as_deref())
                .is_some_and(|n| replaced.contains(n))
            {
                *r = None;
            }
        }
    }
    let now = started;
    let mut tally = engine::Tally::new(now);
    let mut statuses = SmallVec::with_capacity(rules.len());
    // Over-limit ordinary descriptors, and quota descriptors over and in all
    // (`quota_mode`): the request is over if any ordinary one is, or every
    // quota one is (envoyproxy/ratelimit's rule).
    let (mut over, mut quota_over, mut quotas) = (0usize, 0usize, 0usize);
    // (remaining, rule, reset_ns) of the most restrictive limited status.
    let mut tightest: Option<(u64, &EnvoyRule, u64)> = None;
    let mut key_buf = String::new();
    let counted = if limits.server.envoy_stop_increment_when_over_limit {
        counted_descriptors(
            req,
            rules,
            hits,
            &is_override,
            limits.server.max_key_bytes,
            now,
        )
        .await?
    } else {
        None
    };
    for (i, (d, rule)) in req.descriptors.iter().zip(rules.iter()).enumerate() {
        let hits_i = d.hits_addend.unwrap_or(hits);
        // Checked without counting (`envoy_stop_increment_when_over_limit`).
        let cost = match &counted {
            Some(c) if !c[i] => 0,
            _ => hits_i,
        };
        let Some(rule) = rule else {
            // Without a limit: a passing quota under the global quota mode.
            quotas += usize::from(limits.server.envoy_quota_mode);
            statuses.push(StatusFields {
                code: Code::Ok as i32,
                ..Default::default()
            });
            continue;
        };
        // The reference's stats named by request values, when asked.
        let value_stats = if limits.server.envoy_stats_values {
            value_stats(req.domain, root, d, rule, is_override(i))
        } else {
            None
        };
        let stats = value_stats.as_ref().or(rule.stats.as_ref());
        let status = match &rule.kind {
            RuleKind::Unlimited => StatusFields {
                code: Code::Ok as i32,
                limit_remaining: u32::MAX,
                ..Default::default()
            },
            RuleKind::Block(m) => {
                m.record(false);
                if let Some(st) = stats {
                    st.record(0, hits_i, 0, rule.shadow);
                }
                let window = rule.unit.window();
                let reset = whole_seconds(window - now % window);
                let code = if rule.shadow {
                    m.shadow_allowed();
                    Code::Ok
                } else {
                    Code::OverLimit
                };
                if tightest.is_none_or(|t| t.0 > 0) {
                    tightest = Some((0, rule, reset));
                }
                StatusFields {
                    code: code as i32,
                    current_limit: Some(limit_fields(rule)),
                    limit_remaining: 0,
                    duration_until_reset: Some(reset),
                }
            }
            RuleKind::Limited(limit) => {
                let key = descriptor_key(&mut key_buf, &d.entries, is_override(i), &rule.share);
                if key.len() > limits.server.max_key_bytes {
                    // Too long to hold. Envoy takes an RLS error as a
                    // failure and, by default (`failure_mode_deny:
                    // false`), lets the request through: an error would
                    // let any long header value bypass the limit. So
                    // this descriptor is over the limit instead.
                    rejected(Api::EnvoyRls, "key_too_long");
                    if let Some(st) = stats {
                        let rpu = u64::from(rule.requests_per_unit);
                        st.record(rpu, hits_i, rpu, rule.shadow);
                    }
                    StatusFields {
                        code: Code::OverLimit as i32,
                        current_limit: Some(limit_fields(rule)),
                        limit_remaining: 0,
                        duration_until_reset: None,
                    }
                } else {
                    // The count before the hits, for the reference's stats.
                    let rpu = u64::from(rule.requests_per_unit);
                    let mut before = None;
                    // The local over-limit cache, for rules in a store.
                    let at = (
                        std::ptr::from_ref::<EnvoyRule>(rule) as usize,
                        (rpu, rule.unit.window()),
                    );
                    let lookup = (limits.envoy_local_cache.as_deref())
                        .filter(|_| limit.backend.local().is_none())
                        .map(|c| local_cache::Lookup::new(c, req.domain, at.0, at.1, now, key));
                    let cached = lookup.as_ref().filter(|l| l.hit);
                    // A store round trip is traced (when a call is).
                    let in_store = cached.is_none() && limit.backend.local().is_none();
                    let span = in_store.then(crate::trace::store_span).flatten();
                    let decided = if let Some(l) = cached {
                        Ok(l.denial())
                    } else if cost > 0 && limits.server.envoy_hits == EnvoyHits::Charge {
                        match limit.backend.local() {
                            Some(k) => {
                                let (seen, after) = k.charge_seen(key, now, cost);
                                before = Some(count_of(&seen, rpu));
                                Ok(after)
                            }
                            None => engine::charge_raw(limit, key, cost, now).await,
                        }
                    } else {
                        engine::decide_raw(limit, key, cost, now).await
                    };
                    drop(span);
                    if let (Some(l), Ok(d)) = (&lookup, &decided) {
                        l.after(d);
                    }
                    if let (Some(st), Some(_)) = (stats, cached) {
                        st.record_local_cache(hits_i, rule.shadow);
                    } else if let (Some(st), Ok(d)) = (stats, &decided) {
                        // A take consumed `cost` when admitted, nothing
                        // when denied. Hits checked without counting are
                        // counted as the reference counts them: as if the
                        // count they left had come from them.
                        let before = before.unwrap_or_else(|| {
                            let now_count = count_of(d, rpu);
                            if cost == 0 || d.allowed {
                                now_count.saturating_sub(hits_i)
                            } else {
                                now_count
                            }
                        });
                        st.record(before, hits_i, rpu, rule.shadow);
                    }
                    let dec = match decided {
                        Ok(dec) => tally.settle(limit, key, cost, dec),
                        Err(e) => {
                            tally.finish(engine.now());
                            rejected(Api::EnvoyRls, e.kind());
                            return Err(Status::unavailable(e.to_string()));
                        }
                    };
                    let reset = whole_seconds(if dec.reset_after == 0 {
                        let window = rule.unit.window();
                        window - now % window
                    } else {
                        dec.reset_after
                    });
                    if tightest.is_none_or(|t| t.0 > dec.remaining) {
                        tightest = Some((dec.remaining, rule, reset));
                    }
                    StatusFields {
                        code: if dec.allowed {
                            Code::Ok
                        } else {
                            Code::OverLimit
                        } as i32,
                        current_limit: Some(limit_fields(rule)),
                        limit_remaining: u32::try_from(dec.remaining).unwrap_or(u32::MAX),
                        duration_until_reset: Some(reset),
                    }
                }
            }
        };
        // Unlimited descriptors count as neither kind.
        if !matches!(rule.kind, RuleKind::Unlimited) {
            let is_over = status.code == Code::OverLimit as i32;
            if limits.server.envoy_quota_mode || rule.quota {
                quotas += 1;
                quota_over += usize::from(is_over);
            } else {
                over += usize::from(is_over);
            }
        }
        statuses.push(status);
    }
    let mut overall = if over > 0 || (quotas > 0 && quota_over == quotas) {
        Code::OverLimit
    } else {
        Code::Ok
    };
    if overall == Code::OverLimit && limits.server.envoy_shadow_mode {
        overall = Code::Ok;
        drl_service::envoy_stats::global_shadow_mode();
    }
    let headers = match tightest {
        Some((remaining, rule, reset)) if limits.server.envoy_response_headers => {
            Some(header_fields(rule, remaining, reset))
        }
        _ => None,
    };
    let end = engine.now();
    tally.finish(end);
    engine
        .api_metrics
        .observe_ns(Api::EnvoyRls, end.saturating_sub(started));
    let dynamic_metadata = limits
        .server
        .envoy_response_dynamic_metadata
        .then(|| dynamic_metadata(req, rules, &statuses));
    Ok(render(&Answer {
        overall_code: overall as i32,
        statuses,
        headers,
        header_names: Some(limits.server.envoy_header_names.as_array()),
        dynamic_metadata,
    }))
}

#[cfg(test)]
mod tests;
