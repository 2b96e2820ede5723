//! Rate-limit response headers (IETF `RateLimit`, `RateLimit-Policy`,
//! `Retry-After`): they live in [`drl_http::headers`], shared with
//! `drl-client`'s tower layer so both answer alike; re-exported here.

pub use drl_http::headers::{ceil_ms, ceil_secs, policy, ratelimit, retry_after};
