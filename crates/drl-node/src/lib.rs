//! drl-node: the runtime that turns drl-cluster's sans-IO protocol cores
//! into a running cluster node.
//!
//! * [`transport`]: authenticated UDP (HMAC-SHA256, versioned frames,
//!   replay windows, strict bounds) behind a [`transport::Transport`] trait
//!   that gossip, membership and Orbit share, plus a fault-injecting wrapper
//!   for tests;
//! * [`membership`]: SWIM failure detection and join/leave by `foca`;
//! * [`gossip`]: per-key demand estimates and GRD/FPS allocators from
//!   drl-cluster, gossiped in batched datagrams;
//! * [`GossipStore`]: all of it behind `drl_store::Store` (`scope: gossip`),
//!   configured by [`GossipConfig`] (the service's `cluster:` section).

pub mod config;
pub mod gossip;
pub mod membership;
pub mod orbit;
pub mod store;
pub mod transport;

pub use config::{GossipConfig, MembershipConfig};
pub use store::{GossipStore, StartError};
