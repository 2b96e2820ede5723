//! drl-client: rate limits from application code, decided in this process
//! or by a running `drl serve`, and a tower layer that puts them in front
//! of any HTTP service.
//!
//! One API, three backends: [`Client::check`] and [`Client::check_batch`]
//! return drl-core's [`Decision`], whether the client is
//!
//! - [`Client::in_process`]: the same config file as `drl serve`, decided
//!   in this process with drl-core (every limit `scope: local`), no network;
//! - [`RemoteBuilder::grpc`]: `drl serve`'s native gRPC API;
//! - [`RemoteBuilder::http`]: `drl serve`'s HTTP/JSON `POST /v1/check`.
//!
//! A remote client coalesces concurrent checks into batches (never waiting
//! for a batch to fill), bounds each check by a deadline and answers with
//! its [`FailurePolicy`] when the service cannot decide in time. A denial
//! cache ([`cache`]) answers a key denied with `retry_after` locally until
//! then.
//!
//! [`RateLimitLayer`] (tower, so axum too) maps each request to a limit,
//! key and cost ([`extract`] has helpers for a header, the peer address and
//! a path prefix); a denial answers 429 `application/problem+json` with
//! `Retry-After` and the IETF `RateLimit` / `RateLimit-Policy` headers,
//! exactly as `drl serve`'s forward-auth (the code is shared: drl-http).
//!
//! ```no_run
//! # async fn demo() -> Result<(), drl_client::Error> {
//! use drl_client::{Client, InProcess, RemoteBuilder, FailurePolicy};
//! let local = Client::in_process(InProcess::from_file("drl.yaml")?);
//! let d = local.check("api", "tenant-7", 1).await?;
//! let remote = RemoteBuilder::grpc("http://127.0.0.1:8081")
//!     .on_failure(FailurePolicy::Deny)
//!     .build()?;
//! let d2 = remote.check("api", "tenant-7", 1).await?;
//! # let _ = (d, d2); Ok(()) }
//! ```

pub mod cache;
mod check;
mod client;
pub mod config;
mod error;
pub mod extract;
pub mod in_process;
pub mod layer;
mod permit;
pub mod policy;
pub mod remote;

pub use cache::{CacheConfig, DenialCache};
pub use check::{Check, Stats};
pub use client::Client;
pub use config::{ClientConfig, ConfigError};
pub use drl_core::Decision;
pub use drl_core::Settlement;
pub use error::Error;
pub use in_process::InProcess;
pub use layer::{RateLimit, RateLimitLayer, Reserve, ReserveLayer, Target, UsageHeader};
pub use permit::{Permit, RESERVATION_TTL};
pub use policy::FailurePolicy;
pub use remote::{Protocol, RemoteBuilder};
