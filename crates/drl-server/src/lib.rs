//! drl-server: the rate-limit service behind `drl serve`.
//!
//! - [`config`]: the YAML config (native, or envoyproxy/ratelimit files
//!   loaded unchanged), with line/column errors.
//! - [`scope`]: where a limit's state lives; the extension point for
//!   `redis`, `gossip` and `orbit`.
//! - [`limits`]: a config compiled for deciding (pre-resolved backends,
//!   Envoy descriptor trees).
//! - [`engine`]: the live config, reloads, and the decision path shared by
//!   every API.
//! - [`envoy_override`]: Envoy RLS per-descriptor limit overrides.
//! - [`http`]: `POST /v1/check`, forward-auth, health, metrics (axum).
//! - [`grpc`]: the native batched API and Envoy RLS v3 (tonic).
//! - [`listeners`]: the HTTP and gRPC listeners, moved on reload.
//! - [`server`]: signals, hot reload, graceful drain.

pub mod config;
pub mod deadline;
pub mod engine;
pub mod envoy_override;
pub mod grpc;
pub mod headers;
pub mod http;
pub mod limits;
pub mod listeners;
pub mod metrics;
pub mod scope;
pub mod server;
pub mod sharded;

pub use config::{Config, ConfigError};
pub use engine::Engine;
pub use server::{ServeOptions, serve};
