//! [`Keys`]: a node's active keys, shared between the request path and the
//! node's interval step.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use drl_core::Nanos;
use parking_lot::RwLock;

use super::key::{Admission, Hold, KeyLimit, KeySnapshot, KeyState};
use super::settings::Settings;
use super::wire::MAX_KEY_LEN;
use crate::alloc::FlowId;

type FastMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

/// A key as the request path names it: a limit and an aggregate of it
/// (e.g. a tenant). On the wire it is `limit NUL aggregate`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyRef<'a> {
    /// The limit's name.
    pub limit: &'a str,
    /// The aggregate the global limit applies to.
    pub aggregate: &'a str,
}

/// An admission the node cannot decide.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AdmitError {
    /// The key would exceed `max_keys`.
    #[error("more than {0} active gossip keys")]
    TooManyKeys(usize),
}

/// Stable 64-bit FNV-1a hash (seeds and flow ids must not depend on the
/// process's hash seeds).
pub fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= *b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// The wire key of `key`: `limit NUL aggregate`; keys over
/// [`MAX_KEY_LEN`] bytes travel as the limit name and a hash of the
/// aggregate.
pub fn wire_key(key: KeyRef<'_>) -> Vec<u8> {
    let mut k = Vec::with_capacity(key.limit.len() + 1 + key.aggregate.len());
    k.extend_from_slice(key.limit.as_bytes());
    k.push(0);
    k.extend_from_slice(key.aggregate.as_bytes());
    if k.len() > MAX_KEY_LEN {
        let h = fnv1a(key.aggregate.as_bytes());
        k.truncate(key.limit.len().min(MAX_KEY_LEN - 18));
        k.push(0);
        k.push(b'#');
        k.extend_from_slice(format!("{h:016x}").as_bytes());
    }
    k
}

/// One active key: its names, its wire key (built once), its state.
#[derive(Debug)]
pub(crate) struct KeyEntry {
    pub(crate) wire_key: Vec<u8>,
    pub(crate) limit: String,
    pub(crate) aggregate: String,
    pub(crate) state: KeyState,
}

/// limit name -> aggregate -> state: two levels, so that the request path
/// finds a key by `&str` without building a string.
#[derive(Debug, Default)]
struct KeyTable {
    by_limit: FastMap<String, FastMap<String, Arc<KeyEntry>>>,
    len: usize,
}

impl KeyTable {
    fn get(&self, key: KeyRef<'_>) -> Option<&Arc<KeyEntry>> {
        self.by_limit.get(key.limit)?.get(key.aggregate)
    }
}

/// The active keys of a node. The request path calls [`Keys::admit`]
/// through an `Arc` without touching the node; the node's interval step
/// reads the same table.
#[derive(Debug)]
pub struct Keys {
    settings: Settings,
    seed: u64,
    table: RwLock<KeyTable>,
    live: AtomicU32,
    /// Keys made so far (each key's life is numbered: a reservation's
    /// hold names it).
    made: AtomicU64,
}

impl Keys {
    pub(crate) fn new(settings: Settings, seed: u64) -> Self {
        Self {
            settings,
            seed,
            table: RwLock::new(KeyTable::default()),
            live: AtomicU32::new(1),
            made: AtomicU64::new(0),
        }
    }

    /// Decides `cost` units of `key` (global `limit`) from `flow` at `now`.
    /// Never waits for the network or the interval step (only the key's
    /// decision lock, and the table's write lock when the key is new).
    pub fn admit(
        &self,
        now: Nanos,
        key: KeyRef<'_>,
        limit: KeyLimit,
        cost: u64,
        flow: FlowId,
    ) -> Result<Admission, AdmitError> {
        self.with_state(now, key, limit, |state| state.admit(now, limit, cost, flow))
    }

    /// Consumes `cost` units of `key` (global `limit`) from `flow` at `now`
    /// whatever its state (a cost known afterwards): they count as demand
    /// and the key's allocator consumes them, into debt if it must.
    /// Answers a query right after.
    pub fn charge(
        &self,
        now: Nanos,
        key: KeyRef<'_>,
        limit: KeyLimit,
        cost: u64,
        flow: FlowId,
    ) -> Result<Admission, AdmitError> {
        self.with_state(now, key, limit, |state| {
            state.charge(now, limit, cost, flow)
        })
    }

    /// What a take of `cost` units of `key` (global `limit`) would surely
    /// get at `now`, changing nothing: no demand counted, nothing
    /// consumed, no random draw, no key made (a key not held answers as a
    /// new one would). A token bucket answers whether it holds `cost`;
    /// random drop admits only while its drop probability is 0. For 0:
    /// whether no charge's debt is owed.
    pub fn check(&self, now: Nanos, key: KeyRef<'_>, limit: KeyLimit, cost: u64) -> Admission {
        if let Some(e) = self.table.read().get(key) {
            return e.state.check(now, cost);
        }
        KeyState::new(&self.settings, limit, self.live(), self.seed, now).check(now, cost)
    }

    /// Reserves the estimate `cost` of `key` from `flow` at `now`: a take
    /// (its units count as demand); when admitted, also the [`Hold`] that
    /// bounds its refund.
    pub fn reserve(
        &self,
        now: Nanos,
        key: KeyRef<'_>,
        limit: KeyLimit,
        cost: u64,
        flow: FlowId,
    ) -> Result<(Admission, Option<Hold>), AdmitError> {
        self.with_state(now, key, limit, |state| {
            state.reserve(now, limit, cost, flow)
        })
    }

    /// Gives back up to `units` of the reservation `hold` of `key` at
    /// `now`: into the token bucket that admitted it, at most what it still
    /// holds the bucket below the level it would have had with the
    /// reservation `units` smaller; nothing under random drop, after the
    /// allocator was replaced, or once the key was forgotten. Answers a
    /// query right after and the units given back. Refund a hold at most
    /// once.
    pub fn refund(
        &self,
        now: Nanos,
        key: KeyRef<'_>,
        limit: KeyLimit,
        hold: &Hold,
        units: u64,
    ) -> (Admission, u64) {
        if let Some(e) = self.table.read().get(key) {
            return e.state.refund(now, hold, units);
        }
        (self.check(now, key, limit, 0), 0)
    }

    /// `f` on the state of `key`, made (at most `max_keys`) when it is new.
    fn with_state<T>(
        &self,
        now: Nanos,
        key: KeyRef<'_>,
        limit: KeyLimit,
        f: impl FnOnce(&KeyState) -> T,
    ) -> Result<T, AdmitError> {
        if let Some(e) = self.table.read().get(key) {
            return Ok(f(&e.state));
        }
        Ok(f(&self.entry(now, key, limit)?.state))
    }

    /// The entry of `key`, made (at most `max_keys`) when it is new.
    fn entry(
        &self,
        now: Nanos,
        key: KeyRef<'_>,
        limit: KeyLimit,
    ) -> Result<Arc<KeyEntry>, AdmitError> {
        let mut t = self.table.write();
        if t.get(key).is_none() {
            if t.len >= self.settings.max_keys {
                return Err(AdmitError::TooManyKeys(self.settings.max_keys));
            }
            let wire = wire_key(key);
            let seed = fnv1a(&wire) ^ self.seed;
            let life = self.made.fetch_add(1, Ordering::Relaxed);
            let state =
                KeyState::new(&self.settings, limit, self.live(), seed, now).with_incarnation(life);
            let m = t.by_limit.entry(key.limit.to_string()).or_default();
            m.insert(
                key.aggregate.to_string(),
                Arc::new(KeyEntry {
                    wire_key: wire,
                    limit: key.limit.to_string(),
                    aggregate: key.aggregate.to_string(),
                    state,
                }),
            );
            t.len += 1;
        }
        t.get(key)
            .cloned()
            .ok_or(AdmitError::TooManyKeys(self.settings.max_keys))
    }

    /// The state of `key`, if active.
    pub fn snapshot(&self, key: KeyRef<'_>) -> Option<KeySnapshot> {
        let e = self.table.read().get(key)?.clone();
        Some(e.state.snapshot())
    }

    /// Forgets every key of the limits `keep` says no to (a reload dropped
    /// them).
    pub fn retain_limits(&self, keep: impl Fn(&str) -> bool) {
        let mut t = self.table.write();
        let gone: Vec<String> = t.by_limit.keys().filter(|n| !keep(n)).cloned().collect();
        for n in gone {
            if let Some(m) = t.by_limit.remove(&n) {
                t.len -= m.len();
            }
        }
    }

    /// Number of active keys.
    pub fn len(&self) -> usize {
        self.table.read().len
    }

    /// True when no key is active.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Nodes counted live at the last interval (this one included).
    pub fn live(&self) -> u32 {
        self.live.load(Ordering::Relaxed)
    }

    pub(crate) fn set_live(&self, live: u32) {
        self.live.store(live, Ordering::Relaxed);
    }

    /// Every key, sorted by wire key (deterministic order for the step).
    pub(crate) fn sorted(&self) -> Vec<Arc<KeyEntry>> {
        let mut v: Vec<Arc<KeyEntry>> = self
            .table
            .read()
            .by_limit
            .values()
            .flat_map(|m| m.values().cloned())
            .collect();
        v.sort_unstable_by(|a, b| a.wire_key.cmp(&b.wire_key));
        v
    }

    pub(crate) fn remove(&self, limit: &str, aggregate: &str) {
        let mut t = self.table.write();
        let t = &mut *t;
        if let Some(m) = t.by_limit.get_mut(limit) {
            if m.remove(aggregate).is_some() {
                t.len -= 1;
            }
            if m.is_empty() {
                t.by_limit.remove(limit);
            }
        }
    }
}
