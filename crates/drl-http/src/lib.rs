//! drl-http: the HTTP answers `drl serve`'s forward-auth and `drl-client`'s
//! tower layer give, in one place so both answer byte for byte alike.
//!
//! - [`headers`]: the IETF `RateLimit` / `RateLimit-Policy` headers and
//!   `Retry-After`.
//! - [`prometheus`]: the Prometheus text format, written once for every
//!   hand-rendered `/metrics` family of the server and the relay.
//! - [`problem`]: RFC 9457 `application/problem+json` bodies, including the
//!   429 of a denial ([`problem::rate_limited`]).
//!
//! Depends only on drl-core, `http` and serde_json: no server, no runtime.

pub mod headers;
pub mod problem;
pub mod prometheus;
