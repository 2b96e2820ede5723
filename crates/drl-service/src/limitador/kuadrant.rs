//! limitador's own API (`kuadrant.service.ratelimit.v1.RateLimitService`)
//! on a namespace's rules: `CheckRateLimit` asks, `Report` charges.
//!
//! As limitador-server's handler (`limitador-server/src/envoy_rls/
//! kuadrant_service.rs`) decides: a check asks whether one hit fits every
//! applying limit (`is_rate_limited(namespace, ctx, 1)`; `hits_addend` is
//! not read) and changes nothing; a report counts `hits_addend` (where 0
//! means 1) on every applying limit, past the limit if need be
//! (`update_counters`), so the next check is over the limit.

use drl_api::rls_request::DescriptorView;
use tonic::Status;

use super::rules::{Rule, applies};
use crate::engine::{self, Engine};
use crate::limits::Limits;
use crate::metrics::{Api, rejected};

/// The hits a check asks room for (limitador-server passes 1 whatever
/// the request's `hits_addend`).
pub const CHECK_HITS: u64 = 1;

/// `CheckRateLimit`: `true` if every applying limit has room for
/// [`CHECK_HITS`]. Nothing is counted. A `max_value: 0` limit, or a
/// counter key longer than `server.max_key_bytes`, is over the limit
/// (never an error: an error must not let a request through).
pub async fn check(
    engine: &Engine,
    limits: &Limits,
    rules: &[Rule],
    descriptors: &[DescriptorView<'_>],
) -> Result<bool, Status> {
    let now = engine.now();
    for r in rules {
        let Some(k) = applies(r, descriptors) else {
            continue;
        };
        let Some(l) = &r.limit else {
            r.block.record(false);
            return Ok(false);
        };
        if k.len() > limits.server.max_key_bytes {
            rejected(Api::EnvoyRls, "key_too_long");
            return Ok(false);
        }
        let d = engine::decide_raw(l, &k, 0, now).await.map_err(|e| {
            rejected(Api::EnvoyRls, e.kind());
            Status::unavailable(e.to_string())
        })?;
        if !d.allowed || d.remaining < CHECK_HITS {
            l.metrics.record(false);
            return Ok(false);
        }
    }
    Ok(true)
}

/// `Report`: charges `hits` on every applying limit, even past the limit
/// (drl's *charge*, docs/semantics.md "Costs known afterwards"). A
/// `max_value: 0` limit has nothing to count. A key longer than
/// `server.max_key_bytes` is refused (INVALID_ARGUMENT) before anything is
/// counted; a store that cannot charge (or fails) answers UNAVAILABLE with
/// its reason: the caller learns the hits were not all counted.
pub async fn report(
    engine: &Engine,
    limits: &Limits,
    rules: &[Rule],
    descriptors: &[DescriptorView<'_>],
    hits: u64,
) -> Result<(), Status> {
    let now = engine.now();
    let mut hit = Vec::new();
    for r in rules {
        let (Some(k), Some(l)) = (applies(r, descriptors), &r.limit) else {
            continue;
        };
        if k.len() > limits.server.max_key_bytes {
            rejected(Api::EnvoyRls, "key_too_long");
            return Err(Status::invalid_argument(format!(
                "limit {:?}: counter key is {} bytes; at most {} (server.max_key_bytes)",
                l.name,
                k.len(),
                limits.server.max_key_bytes
            )));
        }
        hit.push((l, k));
    }
    for (l, k) in hit {
        engine::charge_raw(l, &k, hits, now).await.map_err(|e| {
            rejected(Api::EnvoyRls, e.kind());
            Status::unavailable(e.to_string())
        })?;
    }
    Ok(())
}
