//! drl-cluster: sans-IO protocol state machines for distributed limits.
//! Inputs are `(now, message)`; outputs are messages to send and local
//! limits. No sockets, no clocks, no threads.
//!
//! Modules are added by the simulator work (estimator, gossip, allocators)
//! and the Orbit work (`orbit`); each owns its own files.

pub mod alloc;
pub mod cloud_control;
pub mod estimator;
pub mod gossip;
pub mod orbit;
