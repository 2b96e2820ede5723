//! drl-service: the socket-free core of `drl serve`, shared by every API.
//!
//! Its modules form a DAG (no import circle of more than two files,
//! enforced by `crates/drl/tests/architecture.rs`), from the bottom:
//!
//! - [`sharded`]: per-thread counter shards; [`headers`]: the IETF
//!   RateLimit fields (from `drl-http`).
//! - [`status`]: what the status page records per limit (latency, top
//!   keys, per-second history); the page itself is drl-server's.
//! - [`metrics`]: decision metrics (Prometheus text).
//! - [`scope`]: where a limit's state lives; the extension point for
//!   `redis`, `gossip` and `orbit`.
//! - [`limits`]: a `drl_config::Config` compiled for deciding
//!   (pre-resolved backends, Envoy descriptor trees, limitador namespaces).
//! - [`reservations`]: a limit's open reservations by id.
//! - [`engine`]: the live config, reloads, and the decision path.
//! - [`envoy_override`]: Envoy RLS per-descriptor limit overrides.
//! - [`limitador`]: limitador's namespaces and conditions, decided.
//! - [`check_body`]: the HTTP `POST /v1/check` body, parsed sans-IO.

pub mod check_body;
mod config_files;
pub mod engine;
pub mod envoy_local_cache;
pub mod envoy_metadata;
pub mod envoy_override;
pub mod envoy_stats;
pub mod envoy_stats_key;
pub mod headers;
pub mod limitador;
pub mod limits;
pub mod metrics;
pub mod reservations;
pub mod scope;
pub mod sharded;
pub mod status;

pub use engine::Engine;
