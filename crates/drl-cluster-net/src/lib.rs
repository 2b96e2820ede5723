//! drl-cluster-net: the runtime that turns drl-cluster's sans-IO protocol cores
//! into a running cluster node.
//!
//! * [`transport`]: authenticated UDP (HMAC-SHA256, versioned frames,
//!   replay windows, strict bounds) behind a [`transport::Transport`] trait
//!   that gossip, membership and Orbit share, plus a fault-injecting wrapper
//!   for tests (cargo feature `fault-injection`, off in shipped builds);
//! * [`membership`]: SWIM failure detection and join/leave by `foca`;
//! * [`discovery`]: `dns:NAME:PORT` seeds resolved periodically;
//! * [`gossip`]: the sans-IO [`gossip::Driver`] that feeds drl-cluster's
//!   Cloud Control node (`drl_cluster::cloud_control::Node`: per-key
//!   estimators and allocators, aggregation, the 1/N rule, the payload)
//!   with membership events, datagrams and a timer, and drains what it
//!   sends;
//! * [`GossipStore`]: all of it behind `drl_store::Store` (`scope: gossip`),
//!   configured by [`GossipConfig`] (the service's `cluster:` section,
//!   mapped to the node's `Settings` by [`GossipConfig::settings`]).

/// True in a build with the test-only fault injector (cargo feature
/// `fault-injection`: `cluster.faults`, `orbit.fault`).
pub const FAULT_INJECTION: bool = cfg!(feature = "fault-injection");

pub mod config;
pub mod discovery;
pub mod gossip;
pub mod membership;
pub mod orbit;
pub mod store;
mod test_only;
pub mod transport;

pub use config::{GossipConfig, MembershipConfig};
pub use store::{GossipStore, StartError};
