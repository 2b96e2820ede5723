//! limitador's decision on Envoy RLS v3: every applying rule asked, then
//! counted (see [`super`]).

use drl_api::rls_answer::{Answer, HeaderFields};
use drl_api::rls_request::DescriptorView;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use smallvec::SmallVec;
use tonic::Status;

use super::rules::{Rule, applies};
use crate::engine::{self, Engine};
use crate::headers;
use crate::limits::Limits;
use crate::metrics::{Api, rejected};

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
pub async fn should_rate_limit<'a>(
    engine: &Engine,
    limits: &'a Limits,
    rules: &[Rule],
    descriptors: &[DescriptorView<'_>],
    hits: u64,
) -> Result<Answer<'a>, Status> {
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
        header_names: Some(limits.server.envoy_header_names.as_array()),
        dynamic_metadata: None,
    })
}
