//! Envoy RLS v3 `ShouldRateLimit`, deciding as envoyproxy/ratelimit does:
//! each request descriptor is matched against its domain's descriptor tree
//! ([`crate::limits::match_descriptor`]); every matched rule decides on its
//! own (a fixed window per unit, one counter per distinct descriptor
//! value); `replaces` drops the rules it names; `shadow_mode` answers OK
//! whatever the decision; `unlimited` answers OK with `limit_remaining` =
//! `u32::MAX`; the overall code is OVER_LIMIT if any descriptor is. A
//! descriptor's `limit` override replaces the configured rule
//! ([`crate::envoy_override`]).
//!
//! One difference, per docs/semantics.md: a denied request consumes
//! nothing (envoyproxy/ratelimit counts hits over the limit too).
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
use std::time::Instant;

use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus, RateLimit as PbRateLimit,
};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitService;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::Duration;
use tonic::{Request, Response, Status};

use crate::engine::{self, Engine};
use crate::envoy_override::{OverrideError, state_key};
use crate::headers::ceil_secs;
use crate::limits::{EnvoyRule, RuleKind, match_descriptor};
use crate::metrics::{Api, rejected};

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

fn duration(ns: u64) -> Duration {
    Duration {
        seconds: (ns / 1_000_000_000) as i64,
        nanos: (ns % 1_000_000_000) as i32,
    }
}

fn current_limit(rule: &EnvoyRule) -> PbRateLimit {
    PbRateLimit {
        name: rule.name.clone().unwrap_or_default(),
        requests_per_unit: rule.requests_per_unit,
        unit: rule.unit.proto(),
    }
}

#[tonic::async_trait]
impl RateLimitService for RlsService {
    async fn should_rate_limit(
        &self,
        req: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        let started = Instant::now();
        let req = req.into_inner();
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
        let limits = self.engine.limits();
        if let Some(rules) = limits.limitador.get(&req.domain) {
            let hits = u64::from(req.hits_addend.max(1));
            let resp = crate::limitador::should_rate_limit(
                &self.engine,
                &limits,
                rules,
                &req.descriptors,
                hits,
            )
            .await?;
            self.engine.api_metrics.observe(Api::EnvoyRls, started);
            return Ok(Response::new(resp));
        }
        let Some(root) = limits.domains.get(&req.domain) else {
            rejected(Api::EnvoyRls, "unknown_domain");
            let mut known: Vec<&str> = limits.domains.keys().map(String::as_str).collect();
            known.sort_unstable();
            return Err(Status::not_found(format!(
                "unknown rate limit domain {:?}; configured domains: {}",
                req.domain,
                known.join(", ")
            )));
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
                .filter_map(|(i, d)| d.limit.as_ref().map(|o| (i, o.requests_per_unit, o.unit)))
                .collect();
            let made = self
                .engine
                .overrides
                .rules(&req.domain, &wanted, self.engine.now())
                .map_err(|e| {
                    rejected(Api::EnvoyRls, e.kind());
                    match e {
                        OverrideError::UnknownUnit { .. } => {
                            Status::invalid_argument(e.to_string())
                        }
                        OverrideError::TooMany { .. } => Status::resource_exhausted(e.to_string()),
                    }
                })?;
            overridden.resize(req.descriptors.len(), None);
            for (&(i, _, _), r) in wanted.iter().zip(made) {
                overridden[i] = Some(r);
            }
        }
        let is_override = |i: usize| overridden.get(i).is_some_and(Option::is_some);
        let mut rules: Vec<Option<&EnvoyRule>> = req
            .descriptors
            .iter()
            .enumerate()
            .map(|(i, d)| match overridden.get(i) {
                Some(Some(r)) => Some(&**r),
                _ => match_descriptor(root, d.entries.iter().map(|e| (&e.key, &e.value))),
            })
            .collect();
        let replaced: BTreeSet<&str> = rules
            .iter()
            .flatten()
            .flat_map(|r| r.replaces.iter().map(String::as_str))
            .collect();
        if !replaced.is_empty() {
            for r in rules.iter_mut() {
                if r.and_then(|r| r.name.as_deref())
                    .is_some_and(|n| replaced.contains(n))
                {
                    *r = None;
                }
            }
        }
        let now = self.engine.now();
        let mut statuses = Vec::with_capacity(rules.len());
        let mut overall = Code::Ok;
        // (remaining, rule, reset_ns) of the most restrictive limited status.
        let mut tightest: Option<(u64, &EnvoyRule, u64)> = None;
        let mut key = String::new();
        for (i, (d, rule)) in req.descriptors.iter().zip(&rules).enumerate() {
            let cost = d.hits_addend.as_ref().map_or(hits, |h| h.value);
            let Some(rule) = rule else {
                statuses.push(DescriptorStatus {
                    code: Code::Ok as i32,
                    ..Default::default()
                });
                continue;
            };
            let status = match &rule.kind {
                RuleKind::Unlimited => DescriptorStatus {
                    code: Code::Ok as i32,
                    limit_remaining: u32::MAX,
                    ..Default::default()
                },
                RuleKind::Block(m) => {
                    m.record(false);
                    let window = rule.unit.window();
                    let reset = window - now % window;
                    let code = if rule.shadow {
                        m.shadow_allowed();
                        Code::Ok
                    } else {
                        Code::OverLimit
                    };
                    if tightest.is_none_or(|t| t.0 > 0) {
                        tightest = Some((0, rule, reset));
                    }
                    DescriptorStatus {
                        code: code as i32,
                        current_limit: Some(current_limit(rule)),
                        limit_remaining: 0,
                        duration_until_reset: Some(duration(reset)),
                        ..Default::default()
                    }
                }
                RuleKind::Limited(limit) => {
                    if is_override(i) {
                        state_key(
                            &mut key,
                            d.entries.iter().map(|e| (e.key.as_str(), e.value.as_str())),
                        );
                    } else {
                        // The rule's path names the keys: values suffice.
                        key.clear();
                        for (j, e) in d.entries.iter().enumerate() {
                            if j > 0 {
                                key.push('\u{1f}');
                            }
                            key.push_str(&e.value);
                        }
                    }
                    if key.len() > limits.server.max_key_bytes {
                        // Too long to hold. Envoy takes an RLS error as a
                        // failure and, by default (`failure_mode_deny:
                        // false`), lets the request through: an error would
                        // let any long header value bypass the limit. So
                        // this descriptor is over the limit instead.
                        rejected(Api::EnvoyRls, "key_too_long");
                        DescriptorStatus {
                            code: Code::OverLimit as i32,
                            current_limit: Some(current_limit(rule)),
                            limit_remaining: 0,
                            ..Default::default()
                        }
                    } else {
                        let dec = match engine::decide(limit, &key, cost, now).await {
                            Ok(dec) => dec,
                            Err(e) => {
                                rejected(Api::EnvoyRls, e.kind());
                                return Err(Status::unavailable(e.to_string()));
                            }
                        };
                        let reset = if dec.reset_after == 0 {
                            let window = rule.unit.window();
                            window - now % window
                        } else {
                            dec.reset_after
                        };
                        if tightest.is_none_or(|t| t.0 > dec.remaining) {
                            tightest = Some((dec.remaining, rule, reset));
                        }
                        DescriptorStatus {
                            code: if dec.allowed {
                                Code::Ok
                            } else {
                                Code::OverLimit
                            } as i32,
                            current_limit: Some(current_limit(rule)),
                            limit_remaining: u32::try_from(dec.remaining).unwrap_or(u32::MAX),
                            duration_until_reset: Some(duration(reset)),
                            ..Default::default()
                        }
                    }
                }
            };
            if status.code == Code::OverLimit as i32 {
                overall = Code::OverLimit;
            }
            statuses.push(status);
        }
        let mut response_headers_to_add = Vec::new();
        if limits.server.envoy_response_headers
            && let Some((remaining, rule, reset)) = tightest
        {
            let h = |k: &str, v: String| HeaderValue {
                key: k.to_string(),
                value: v,
                ..Default::default()
            };
            let w = rule.unit.window() / 1_000_000_000;
            response_headers_to_add.push(h(
                "RateLimit-Limit",
                format!("{0}, {0};w={w}", rule.requests_per_unit),
            ));
            response_headers_to_add.push(h("RateLimit-Remaining", remaining.to_string()));
            response_headers_to_add.push(h("RateLimit-Reset", ceil_secs(reset).to_string()));
        }
        self.engine.api_metrics.observe(Api::EnvoyRls, started);
        Ok(Response::new(RateLimitResponse {
            overall_code: overall as i32,
            statuses,
            response_headers_to_add,
            ..Default::default()
        }))
    }
}
