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
mod store;
pub mod wire;

pub use config::{KeySource, LimitSettings, MAX_MESSAGE_BYTES, OrbitConfig, RingMember};
pub use store::{KeyWindow, OrbitDecision, OrbitStore, RuntimeStats};

use drl_store::LimitSpec;

use crate::transport::{KeyError, TransportError};

/// The Orbit runtime could not start, or a limit cannot be served by it.
#[derive(Debug, thiserror::Error)]
pub enum OrbitError {
    /// The `orbit:` section is invalid.
    #[error("orbit config: {0}")]
    Config(String),
    /// A limit cannot be served with `scope: orbit`.
    #[error("{0}")]
    Limit(String),
    /// The cluster key could not be loaded.
    #[error("orbit: {0}")]
    Key(#[from] KeyError),
    /// The socket could not be bound.
    #[error("orbit: {0}")]
    Transport(#[from] TransportError),
}

/// The fingerprint that names a limit's ring on the wire: FNV-1a (64 bit)
/// over the limit's name, cap and window, so that nodes with different
/// definitions of a limit never exchange tables for it.
pub fn limit_id(spec: &LimitSpec) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |b: &[u8]| {
        for &x in b {
            h ^= u64::from(x);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    };
    eat(spec.name.as_bytes());
    eat(&[0xff]);
    for q in &spec.quotas {
        eat(&q.limit().to_le_bytes());
        eat(&q.window().to_le_bytes());
    }
    h
}
