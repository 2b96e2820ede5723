//! Orbit: a ring protocol for strict global caps, no master.
//!
//! The sum over all nodes of what is admitted for a key in a window never
//! exceeds the cap, whatever the network does. The protocol, its invariant
//! and the proof sketch are in `docs/orbit.md`.
//!
//! - [`OrbitNode`]: the sans-IO state machine (requests, messages, timers).
//! - [`codec`]: the binary, versioned, delta-encoded table format.

pub mod codec;
mod config;
mod node;
mod outcome;
mod table;

pub use config::{
    ConfigError, MAX_KEY_LEN, MAX_LANES, MAX_RING, MAX_TABLE_KEYS, NodeId, OrbitConfig, PPM,
};
pub use node::OrbitNode;
pub use outcome::{Admit, Charged, DenyReason, OrbitStats, Outgoing, Refunded};
pub use table::TableMsg;
