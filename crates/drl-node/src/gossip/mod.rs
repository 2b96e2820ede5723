//! Cloud Control over gossip: per limit key, a demand estimator and an
//! allocator from drl-cluster (GRD or FPS), driven by the node loop.
//!
//! * [`state::KeyState`]: one aggregate's estimators and allocator; the
//!   request path calls [`state::KeyState::decide`] (local, never waits on
//!   the network), the node loop calls [`state::KeyState::tick`] once per
//!   estimate interval;
//! * [`state::Peers`]: the latest value each peer published per key, with
//!   its age; stale values and values of peers that membership declared
//!   down count as zero (paper §5.6);
//! * [`wire`]: the batched, prefix-compressed payload.

pub mod state;
pub mod wire;
