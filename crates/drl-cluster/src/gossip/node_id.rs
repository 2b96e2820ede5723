//! How a limiter is named within a cluster.

/// A limiter's identity within a cluster: its index, `0..n`.
pub type NodeId = u32;
