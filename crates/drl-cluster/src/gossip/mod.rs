//! Gossip: how limiters learn global aggregates without a central point.
//!
//! [`push_sum`] implements the push-sum protocol of Kempe, Dobra and
//! Gehrke (FOCS 2003) as Cloud Control uses it: every estimate interval
//! each limiter folds its new local value into its mass, keeps a share and
//! pushes one share to each of `branching` random peers. Messages carry a
//! per-link sequence number so the receiver can detect and compensate lost
//! updates. [`flow_updating`] averages by idempotent per-link flows
//! (Jesus, Baquero, Almeida), tolerant of loss and of members leaving.

pub mod flow_updating;
mod node_id;
pub mod push_sum;

pub use flow_updating::{FlowMsg, FlowUpdating};
pub use node_id::NodeId;
pub use push_sum::{GossipMsg, LossCompensation, PushSum};
