//! drl's bench wing (`publish = false`): tools that measure drl, kept out
//! of the crates that ship.
//!
//! - `drl-minimal-server`: parses the same requests as `drl serve` and
//!   answers the same shapes without deciding; the floor of the
//!   side-by-side benchmarks (`scripts/bench-peers`, `scripts/bench-server`).
//! - `loadgen`: HTTP/1.1 and gRPC load with rotating bodies, fixed-rate
//!   pacing and every answer checked. Its gRPC goes through hyper's HTTP/2
//!   client: a load generator shares no protocol code with the server it
//!   measures.
//! - `key_flood`: millions of distinct keys against one limit
//!   (`scripts/key-flood`).
//! - `batch_cost`, `topkeys_cost`: per-item costs of a batch and of the
//!   status page's top-keys sketch (`scripts/batch-cost`, `scripts/status-cost`).
