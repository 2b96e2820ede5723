//! Cloud Control over gossip: drl-cluster's sans-IO
//! [`drl_cluster::cloud_control::Node`] (per-key estimators and allocator,
//! the peer table or push-sum, the 1/N rule, the batched payload), driven
//! from drl-cluster-net's socket, timer and membership.
//!
//! * [`driver::Driver`]: the sans-IO glue (membership events to
//!   `peer_up`/`peer_down`, datagrams with their authenticated sender, the
//!   timer, and the drain of the node's transmit queue to addresses);
//! * `crate::store`: the async shell around it (`GossipStore`).

pub mod driver;

pub use driver::{Driver, DriverStats};
