//! drl-test-kit: what drl's tests share, in no shipped crate
//! (`publish = false`; only dev-dependencies reach it, enforced by
//! `crates/drl/tests/architecture.rs`).
//!
//! - [`redis`]: real `redis-server` processes (standalone, TLS, drl's
//!   module loaded, a Redis Cluster) on free loopback ports, torn down on
//!   drop; a missing `redis-server` fails the test with an install hint,
//!   never skips.
//! - [`tls`]: a throwaway PKI (rcgen) for TLS tests.
//! - [`envoy`]: Envoy RLS v3 requests and descriptors built from pairs.
//! - [`dns`]: a static DNS server for the discovery tests.
//! - [`prometheus`]: `/metrics` pages read by Prometheus's own parser.
//! - [`drl`]: real `drl serve` processes (the binary a parameter), waits
//!   with deadlines, a minimal blocking HTTP/1.1 client.

pub mod dns;
pub mod drl;
pub mod envoy;
pub mod prometheus;
pub mod redis;
pub mod tls;
