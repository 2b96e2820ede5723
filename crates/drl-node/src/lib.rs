//! drl-node: the runtime that turns drl-cluster's sans-IO protocol cores
//! into a running cluster node.
//!
//! * [`transport`]: authenticated UDP (HMAC-SHA256, versioned frames,
//!   replay windows, strict bounds) behind a [`transport::Transport`] trait
//!   that gossip, membership and Orbit share, plus a fault-injecting wrapper
//!   for tests.

pub mod orbit;
pub mod transport;
