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
//! - [`grpc`]: the native batched API and Envoy RLS v3, on the `h2` crate
//!   (the two hot methods) and tonic (the rest).
//! - [`listeners`]: the HTTP and gRPC listeners, moved on reload.
//! - [`conn`]: the accept loop: connection cap, idle and header-read
//!   timeouts, HTTP/1.1 and HTTP/2, plain or TLS.
//! - [`tls`]: listener certificates (rustls), reloaded when they change.
//! - [`auth`]: optional bearer tokens; [`guard`]: the services behind them.
//! - [`server`]: signals, hot reload, graceful drain; [`preflight`]: the
//!   checks of a config before anything binds (also `drl config check`).
//! - [`status`]: the status page at `/` and `GET /v1/status` (per-limit
//!   history, latency, top keys; gossip, Orbit and Redis state).

pub mod auth;
pub mod check_body;
pub mod config;
pub mod conn;
pub mod deadline;
pub mod engine;
pub mod envoy_override;
pub mod grpc;
pub mod guard;
pub mod headers;
pub mod http;
pub mod limitador;
pub mod limits;
pub mod linger;
pub mod listeners;
pub mod metrics;
pub mod preflight;
pub mod race;
pub mod scope;
pub mod server;
pub mod sharded;
pub mod status;
pub mod tls;
pub mod wall;

pub use config::{Config, ConfigError};
pub use engine::Engine;
pub use server::{ServeOptions, serve};
