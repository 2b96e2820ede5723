//! What an Orbit node answers: admissions, denials, messages to send and
//! its counters.

use drl_core::Nanos;

use super::config::NodeId;
use super::table::TableMsg;

/// A message the caller must send: `msg` to node `to`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outgoing {
    /// Destination node.
    pub to: NodeId,
    /// The table to deliver (encode it with [`super::codec::encode`]).
    pub msg: TableMsg,
}

/// Why a request was denied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DenyReason {
    /// `cost > cap`: can never be admitted.
    CostExceedsCap,
    /// The node restarted in this window and sits it out (restart rule).
    Recovering,
    /// The node holds no capacity for the key and does not hold the table.
    Exhausted,
    /// The node's per-window key state is full (`max_keys`).
    TooManyKeys,
    /// The key is longer than [`super::MAX_KEY_LEN`] bytes.
    KeyTooLong,
    /// A charge left the key in debt at this node: every request (queries
    /// included) is denied until what the node obtains repays it, or the
    /// window ends.
    InDebt,
}

/// The decision for one admission request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admit {
    /// Admitted; `remaining` is what this node still holds for the key.
    Allowed {
        /// Capacity this node still holds for the key in this window.
        remaining: u64,
    },
    /// Denied; nothing consumed.
    Denied {
        /// Why.
        reason: DenyReason,
        /// When retrying may succeed (`None`: never, for this cost).
        retry_after: Option<Nanos>,
    },
}

impl Admit {
    /// True if admitted.
    pub fn is_allowed(&self) -> bool {
        matches!(self, Admit::Allowed { .. })
    }
}

/// What a charge did ([`super::OrbitNode::charge`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Charged {
    /// Taken from what the node held for the key (capacity of the window).
    pub consumed: u64,
    /// Recorded as the key's debt at this node (the charge's shortfall).
    /// `consumed + debt <= cost`; the rest (a node that sits out the window,
    /// a key the node has no room for, a key too long) is recorded nowhere.
    pub debt: u64,
    /// A query (`cost = 0`) right after.
    pub answer: Admit,
}

/// What a refund did ([`super::OrbitNode::refund`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Refunded {
    /// Given back to the node's holding for the key (debt repaid first):
    /// at most what was asked and what its reservations still hold in the
    /// reservation's window; 0 once that window is over.
    pub credited: u64,
    /// A query (`cost = 0`) right after.
    pub answer: Admit,
}

/// Counters of what the node did (for metrics and tests).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OrbitStats {
    /// Tables created as the origin.
    pub tables_created: u64,
    /// Table messages accepted and processed.
    pub tables_received: u64,
    /// Tables forwarded.
    pub tables_forwarded: u64,
    /// Forwards sent again because the table had not come back.
    pub tables_resent: u64,
    /// Dropped: for a window that is over.
    pub dropped_stale: u64,
    /// Dropped: duplicate or old hop.
    pub dropped_duplicate: u64,
    /// Dropped: the node sits out this window (restart rule).
    pub dropped_ineligible: u64,
    /// Dropped: delta whose base this node does not have.
    pub dropped_no_base: u64,
    /// Dropped: malformed or inconsistent with the configuration.
    pub dropped_invalid: u64,
    /// Requests admitted.
    pub admitted: u64,
    /// Requests denied.
    pub denied: u64,
}
