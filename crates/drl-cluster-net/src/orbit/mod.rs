//! The Orbit service runtime: [`OrbitStore`], a [`drl_store::Store`] that
//! runs `drl_cluster::orbit::OrbitNode` (the sans-IO ring protocol, see
//! `docs/orbit.md`) on the authenticated UDP transport of
//! [`crate::transport`], with a tokio timer and a heartbeat failure
//! detector. Configuration, wire payloads and operation are described in
//! `docs/orbit-runtime.md`.
//!
//! Decisions are local: a request is admitted or denied from the node's own
//! state, without waiting on the network, unless the limit is configured
//! with a bounded wait (`max_wait_ms`) and the node has used up both its
//! share and its local allowance.

mod config;
mod error;
mod ring_id;
mod store;
pub mod wire;

pub use config::{KeySource, LimitSettings, MAX_MESSAGE_BYTES, OrbitConfig, RingMember};
pub use error::OrbitError;
pub use ring_id::limit_id;
pub use store::{KeyWindow, OrbitCharge, OrbitDecision, OrbitStore, RuntimeStats};
