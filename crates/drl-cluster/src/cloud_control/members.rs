//! What a [`super::Node`] knows of its peers, kept so that its interval
//! step never walks the whole membership: the members up (shared between
//! nodes started from one [`Roster`], copied on a node's first change),
//! the members down, a record per peer heard from, and the peer table's
//! values by key.
//!
//! Sizes: O(members) once per roster plus O(peers heard from) per node, so
//! a simulator running N nodes that all know each other holds one
//! membership, not N (with push-sum a node hears from about `2 log2 N`
//! peers; with the peer table from every peer, which is the table's
//! nature: each node keeps each peer's latest value).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use drl_core::Nanos;

use super::node::PeerId;

/// Members reported up at one moment, shareable by many nodes:
/// [`super::Node::roster_up`] with the same roster on N nodes keeps one
/// copy of the membership instead of N (until a node's membership
/// changes, when that node takes its own copy).
#[derive(Debug, Clone)]
pub struct Roster {
    pub(crate) up: Arc<BTreeMap<PeerId, Nanos>>,
    pub(crate) at: Nanos,
}

impl Roster {
    /// `members` (duplicates ignored) reported up at `now`.
    pub fn new(now: Nanos, members: impl IntoIterator<Item = PeerId>) -> Self {
        Self {
            up: Arc::new(members.into_iter().map(|id| (id, now)).collect()),
            at: now,
        }
    }

    /// Members in the roster.
    pub fn len(&self) -> usize {
        self.up.len()
    }

    /// True when the roster names no member.
    pub fn is_empty(&self) -> bool {
        self.up.is_empty()
    }
}

/// What a node knows about one peer it has heard from.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Heard {
    /// When its last valid payload arrived.
    pub(crate) at: Nanos,
    /// Digest of its membership view, from its latest payload.
    pub(crate) view: u64,
    /// When membership last said it came up, while it is up
    /// ([`NOT_UP`] otherwise): a copy of the membership's entry, so that
    /// counting peers walks this table alone.
    pub(crate) up_at: Nanos,
    /// Its incarnation, from its payloads.
    pub(crate) instance: u32,
    /// Wire keys the peer table holds a value of it for.
    pub(crate) keys: u32,
}

/// [`Heard::up_at`] of a peer membership does not have up.
pub(crate) const NOT_UP: Nanos = Nanos::MAX;

impl Heard {
    /// Counted toward `live` and the remote sums: membership says it is
    /// up, it has sent since (so it counts this node too: a node sends
    /// only to peers it has up), and recently, with the same view.
    pub(crate) fn counted(&self, now: Nanos, stale: Nanos, view: u64) -> bool {
        self.up_at != NOT_UP
            && self.view == view
            && self.at >= self.up_at
            && now.saturating_sub(self.at) <= stale
    }
}

/// One wire key's values in the peer table: each peer's latest value and
/// its arrival time, in ascending peer id (the remote sum adds them in
/// that order). A sorted vector: the sum walks it every interval, a new
/// peer is inserted once.
#[derive(Debug, Default, Clone)]
pub(crate) struct PeerValues(Vec<(PeerId, f32, Nanos)>);

impl PeerValues {
    fn find(&self, peer: PeerId) -> Result<usize, usize> {
        self.0.binary_search_by_key(&peer, |e| e.0)
    }

    /// Sets `peer`'s value if it has one; false if not.
    pub(crate) fn update(&mut self, peer: PeerId, value: f32, at: Nanos) -> bool {
        match self.find(peer) {
            Ok(i) => {
                self.0[i] = (peer, value, at);
                true
            }
            Err(_) => false,
        }
    }

    /// Adds (or sets) `peer`'s value.
    pub(crate) fn insert(&mut self, peer: PeerId, value: f32, at: Nanos) {
        match self.find(peer) {
            Ok(i) => self.0[i] = (peer, value, at),
            Err(i) => self.0.insert(i, (peer, value, at)),
        }
    }

    /// Forgets `peer`'s value.
    pub(crate) fn remove(&mut self, peer: PeerId) {
        if let Ok(i) = self.find(peer) {
            self.0.remove(i);
        }
    }

    /// Keeps the values `keep(peer, arrival)` says yes to.
    pub(crate) fn retain(&mut self, mut keep: impl FnMut(PeerId, Nanos) -> bool) {
        self.0.retain(|e| keep(e.0, e.2));
    }

    /// True when no peer has a value.
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The values, in ascending peer id.
    pub(crate) fn values(&self) -> impl Iterator<Item = f32> + '_ {
        self.0.iter().map(|e| e.1)
    }
}

/// Derived from the members up, recomputed only when they change.
#[derive(Debug, Clone)]
pub(crate) struct Derived {
    /// Digest of the view: this node and the peers up, ascending.
    pub(crate) view: u64,
    /// Push-sum's links (computed on first use).
    pub(crate) fan: Option<Vec<PeerId>>,
}

/// A node's membership and what it heard.
#[derive(Debug, Default)]
pub(crate) struct Members {
    /// Members up, with when each came up. Shared with other nodes
    /// started from the same [`Roster`]; may hold this node's own id
    /// (every accessor skips it).
    up: Arc<BTreeMap<PeerId, Nanos>>,
    /// Members down, with when each went down, while they are.
    pub(crate) down: BTreeMap<PeerId, Nanos>,
    /// Peers heard from (never forgotten, as before: a record is small).
    /// Hashed: only counts are taken over it, and the peer table's `live`
    /// walks it every interval (contiguous, unlike a tree).
    pub(crate) heard: HashMap<PeerId, Heard, foldhash::fast::RandomState>,
    /// Peer table: per wire key (hashed: nothing depends on the order of
    /// keys), each peer's latest value and its arrival time (ascending
    /// peer id: the remote sum adds them in that order).
    pub(crate) values: HashMap<Vec<u8>, PeerValues, foldhash::fast::RandomState>,
    /// Cache of what depends on `up` alone.
    pub(crate) derived: Option<Derived>,
    /// No value in `values` arrived before this (the oldest left by the
    /// last scan; later arrivals are newer): while it is fresh and no
    /// peer is down, a scan for stale values would find none.
    oldest: Nanos,
}

impl Members {
    /// When `peer` came up, if membership has it up (never for `me`).
    pub(crate) fn up_at(&self, me: PeerId, peer: PeerId) -> Option<Nanos> {
        if peer == me {
            None
        } else {
            self.up.get(&peer).copied()
        }
    }

    /// Peers up, ascending (`me` skipped).
    pub(crate) fn up_ids(&self, me: PeerId) -> impl Iterator<Item = PeerId> + '_ {
        self.up.keys().copied().filter(move |&id| id != me)
    }

    /// Number of peers up.
    pub(crate) fn up_count(&self, me: PeerId) -> u32 {
        (self.up.len() - usize::from(self.up.contains_key(&me))) as u32
    }

    /// Takes `roster` as the membership when none was reported yet (shared,
    /// not copied); otherwise reports each of its members up.
    pub(crate) fn roster_up(&mut self, me: PeerId, roster: &Roster) {
        if self.up.is_empty() && self.down.is_empty() {
            self.up = Arc::clone(&roster.up);
            for (id, h) in &mut self.heard {
                if let Some(&t) = self.up.get(id) {
                    h.up_at = t;
                }
            }
            self.derived = None;
        } else {
            for &id in roster.up.keys() {
                self.peer_up(me, roster.at, id);
            }
        }
    }

    /// Membership: `peer` is up at `now` (nothing if it already is).
    pub(crate) fn peer_up(&mut self, me: PeerId, now: Nanos, peer: PeerId) {
        if peer == me || self.up.contains_key(&peer) {
            return;
        }
        Arc::make_mut(&mut self.up).insert(peer, now);
        self.down.remove(&peer);
        if let Some(h) = self.heard.get_mut(&peer) {
            h.up_at = now;
        }
        self.derived = None;
    }

    /// Membership: `peer` is down at `now` (nothing if it is not up).
    pub(crate) fn peer_down(&mut self, me: PeerId, now: Nanos, peer: PeerId) {
        if peer == me || !self.up.contains_key(&peer) {
            return;
        }
        Arc::make_mut(&mut self.up).remove(&peer);
        self.down.insert(peer, now);
        if let Some(h) = self.heard.get_mut(&peer) {
            h.up_at = NOT_UP;
        }
        self.derived = None;
    }

    /// Digest of the view of `me`: itself and the peers it has up
    /// (FNV-1a over the ids, ascending).
    pub(crate) fn compute_view(&self, me: PeerId) -> u64 {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        let mut mix = |id: PeerId| {
            for b in id.to_be_bytes() {
                h ^= b as u64;
                h = h.wrapping_mul(0x0100_0000_01b3);
            }
        };
        let mut me_done = false;
        for id in self.up_ids(me) {
            if !me_done && id > me {
                mix(me);
                me_done = true;
            }
            mix(id);
        }
        if !me_done {
            mix(me);
        }
        h
    }

    /// The view digest, from the cache (filled if needed).
    pub(crate) fn view(&mut self, me: PeerId) -> u64 {
        match &self.derived {
            Some(d) => d.view,
            None => {
                let view = self.compute_view(me);
                self.derived = Some(Derived { view, fan: None });
                view
            }
        }
    }

    /// Forgets every value of `peer` in the peer table.
    pub(crate) fn clear_values(&mut self, peer: PeerId) {
        for m in self.values.values_mut() {
            m.remove(peer);
        }
        self.values.retain(|_, m| !m.is_empty());
        if let Some(h) = self.heard.get_mut(&peer) {
            h.keys = 0;
        }
    }

    /// Drops the values older than `stale`, and every value of the peers
    /// down for longer than `hold`.
    pub(crate) fn expire_values(&mut self, now: Nanos, stale: Nanos, hold: Nanos) {
        if self.down.is_empty() && now.saturating_sub(self.oldest) <= stale {
            return;
        }
        let down = &self.down;
        let heard = &mut self.heard;
        let mut oldest = now;
        for m in self.values.values_mut() {
            m.retain(|peer, t| {
                let gone = now.saturating_sub(t) > stale
                    || (!down.is_empty()
                        && down
                            .get(&peer)
                            .is_some_and(|d| now.saturating_sub(*d) > hold));
                if gone && let Some(h) = heard.get_mut(&peer) {
                    h.keys -= 1;
                }
                if !gone {
                    oldest = oldest.min(t);
                }
                !gone
            });
        }
        self.values.retain(|_, m| !m.is_empty());
        self.oldest = oldest;
    }
}
