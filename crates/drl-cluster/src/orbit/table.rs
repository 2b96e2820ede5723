//! The usage table: the wire message ([`TableMsg`]) and the in-memory table
//! a node holds while the table visits it.

use std::collections::BTreeMap;

use super::config::NodeId;

/// A table as it travels between two ring neighbours: the unit the codec
/// encodes and the transport authenticates.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct TableMsg {
    /// Window index the table belongs to.
    pub window: u64,
    /// Lane (independent table lineage) of the window.
    pub lane: u32,
    /// Hop number: 1 for the first forward of the window, +1 per forward.
    pub hop: u32,
    /// Node that forwarded it.
    pub from: NodeId,
    /// 0 for a full table; otherwise the hop of the receiver's own last
    /// forward, on which `entries` is a delta.
    pub base_hop: u32,
    /// The pool of a fresh table (`cap - local_total`): the value of every
    /// key absent from the table. Also a configuration cross-check.
    pub pool: u64,
    /// For each ring position, the hop at which that node last forwarded
    /// this table in this window (0 = never).
    pub visits: Vec<u32>,
    /// `(key, free, modified)`: keys strictly increasing; `modified` is the
    /// hop at which `free` last changed (`<= hop`, and `> base_hop` in a
    /// delta). Exact hops keep later deltas minimal.
    pub entries: Vec<(Vec<u8>, u64, u32)>,
}

impl TableMsg {
    /// True if the message is a delta on the receiver's base.
    pub fn is_delta(&self) -> bool {
        self.base_hop != 0
    }
}

/// One key of an in-memory table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Entry {
    /// Capacity of the window no node holds yet.
    pub free: u64,
    /// The hop at which `free` last changed (0: never in this window).
    pub modified: u32,
    /// What the current visit must leave in the table (valid if `visit`
    /// is the holder's current visit id; local bookkeeping, not sent).
    pub reserve: u64,
    /// Visit id `reserve` belongs to (0: none).
    pub visit: u32,
}

/// The table while a node holds it (or keeps it as delta base).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Table {
    pub window: u64,
    pub lane: u32,
    /// Hop of the message that brought it (0 at the origin).
    pub hop: u32,
    pub visits: Vec<u32>,
    pub entries: BTreeMap<Vec<u8>, Entry>,
}

impl Table {
    /// A fresh table at the origin.
    pub fn fresh(window: u64, lane: u32, nodes: usize) -> Self {
        Self {
            window,
            lane,
            hop: 0,
            visits: vec![0; nodes],
            entries: BTreeMap::new(),
        }
    }

    /// Free capacity of `key` (absent keys hold the pool).
    pub fn free(&self, key: &[u8], pool: u64) -> u64 {
        self.entries.get(key).map_or(pool, |e| e.free)
    }

    /// The message for a forward with hop `hop`; a delta on `base` when
    /// `base != 0`.
    pub fn to_msg(&self, from: NodeId, hop: u32, base: u32, pool: u64) -> TableMsg {
        let entries = self
            .entries
            .iter()
            .filter(|(_, e)| base == 0 || e.modified > base)
            .map(|(k, e)| (k.clone(), e.free, e.modified))
            .collect();
        TableMsg {
            window: self.window,
            lane: self.lane,
            hop,
            from,
            base_hop: base,
            pool,
            visits: self.visits.clone(),
            entries,
        }
    }
}
