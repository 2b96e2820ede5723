//! [`Ledger`]: outstanding [`Reservation`]s by id, for callers that hand a
//! reservation across a wire and get its id back to settle it. Bounded,
//! sans-IO: time is passed in, and [`Ledger::expire`] closes what has
//! expired.

use std::borrow::Borrow;
use std::collections::{BTreeSet, HashMap};
use std::hash::BuildHasher;

use crate::reservation::Reservation;
use crate::time::Nanos;

/// Outstanding reservations by id, at most `max_open` of them.
///
/// Closing a reservation without settling it (it expired, or room was
/// needed) settles it at its estimate: the estimate stays consumed, which
/// can only deny. Ids are 64-bit values scrambled with a per-ledger random
/// seed; [`Ledger::take`] also checks the key, so an id alone settles
/// nothing of another key.
#[derive(Debug)]
pub struct Ledger<K> {
    open: HashMap<u64, Reservation<K>>,
    by_expiry: BTreeSet<(Nanos, u64)>,
    max_open: usize,
    counter: u64,
    ids: foldhash::quality::RandomState,
    closed: u64,
}

impl<K: Eq> Ledger<K> {
    /// An empty ledger holding at most `max_open` reservations (at least 1).
    pub fn new(max_open: usize) -> Self {
        Self {
            open: HashMap::new(),
            by_expiry: BTreeSet::new(),
            max_open: max_open.max(1),
            counter: 0,
            ids: foldhash::quality::RandomState::default(),
            closed: 0,
        }
    }

    /// Holds `r` and returns its id. First closes what has expired at
    /// `now`; if the ledger is still full, closes the reservation that
    /// expires first (settled at its estimate).
    pub fn insert(&mut self, r: Reservation<K>, now: Nanos) -> u64 {
        self.expire(now);
        if self.open.len() >= self.max_open
            && let Some(&(at, id)) = self.by_expiry.iter().next()
        {
            self.by_expiry.remove(&(at, id));
            self.open.remove(&id);
            self.closed += 1;
        }
        let id = loop {
            self.counter = self.counter.wrapping_add(1);
            let id = self.ids.hash_one(self.counter);
            if !self.open.contains_key(&id) {
                break id;
            }
        };
        self.by_expiry.insert((r.expires_at, id));
        self.open.insert(id, r);
        id
    }

    /// Takes out the reservation `id` of `key` to settle or release it
    /// (`None` if unknown, closed, or of another key). An expired one is
    /// still returned: settling it refunds nothing.
    pub fn take<Q>(&mut self, id: u64, key: &Q) -> Option<Reservation<K>>
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        if self.open.get(&id)?.key.borrow() != key {
            return None;
        }
        let r = self.open.remove(&id)?;
        self.by_expiry.remove(&(r.expires_at, id));
        Some(r)
    }

    /// Closes every reservation whose expiry is at or before `now`
    /// (settled at its estimate: nothing to undo); returns how many.
    pub fn expire(&mut self, now: Nanos) -> usize {
        let mut n = 0;
        while let Some(&(at, id)) = self.by_expiry.iter().next() {
            if at > now {
                break;
            }
            self.by_expiry.remove(&(at, id));
            self.open.remove(&id);
            n += 1;
        }
        self.closed += n as u64;
        n
    }

    /// Reservations held.
    pub fn len(&self) -> usize {
        self.open.len()
    }

    /// True when none is held.
    pub fn is_empty(&self) -> bool {
        self.open.is_empty()
    }

    /// Reservations closed unsettled so far (expired or pushed out),
    /// each settled at its estimate.
    pub fn closed(&self) -> u64 {
        self.closed
    }
}
