//! drl-server: the thin server of `drl serve` around `drl-service`'s
//! engine: listeners, connections, HTTP, gRPC, TLS, tokens, the status
//! page, signals and reload.
//!
//! - [`http`]: `POST /v1/check`, forward-auth, health, metrics (axum).
//! - [`grpc`]: the native batched API and Envoy RLS v3, on the `h2` crate
//!   (the two hot methods) and tonic (the rest); messages from `drl-api`.
//! - [`listeners`]: the HTTP and gRPC listeners, moved on reload.
//! - [`conn`]: the accept loop: connection cap, idle and header-read
//!   timeouts, HTTP/1.1 and HTTP/2, plain or TLS.
//! - [`tls`]: listener certificates (rustls), reloaded when they change.
//! - [`auth`]: optional bearer tokens; [`guard`]: the services behind them.
//! - [`server`]: signals, hot reload, graceful drain; [`preflight`]: the
//!   checks of a config before anything binds (also `drl config check`).
//! - [`status`]: the status page's HTML and routes.
//! - [`trace`]: OpenTelemetry spans of Envoy RLS calls (`tracing:`).
//!
//! The config is `drl-config`'s; limits, scopes and the decision engine
//! are `drl-service`'s.

pub mod auth;
pub mod conn;
pub mod conn_threads;
pub mod deadline;
pub mod grpc;
pub mod guard;
pub mod http;
pub mod linger;
pub mod listeners;
pub mod preflight;
pub mod race;
pub mod server;
pub mod status;
pub mod tls;
pub mod trace;
pub mod wall;

pub use drl_config::{Config, ConfigError};
pub use drl_service::Engine;
pub use server::{ServeOptions, serve};
