//! [`Reservations`]: a limit's open reservations, by id, for the HTTP and
//! native APIs (a `reserve` answers an id; a later `settle` or `release`
//! names it). One bounded [`Ledger`] per limit, made on first use;
//! docs/server.md, "Costs known afterwards". A `redis` limit's
//! reservations are held here too (the store keeps the state, the ledger
//! the estimate, the expiry and the marks the store returned).
//!
//! The ledger belongs to the compiled limit: a reload drops it, closing
//! every open reservation at its estimate (the estimate stays consumed).

use drl_core::{Ledger, Nanos, Reservation};
use parking_lot::Mutex;

/// A limit's open reservations.
#[derive(Debug, Default)]
pub struct Reservations {
    ledger: Mutex<Option<Ledger<String>>>,
}

impl Reservations {
    /// Holds `r` (at most `max_open` open; at the cap the one expiring
    /// first is closed at its estimate) and returns its id.
    pub fn open(&self, r: Reservation<String>, now: Nanos, max_open: usize) -> u64 {
        self.ledger
            .lock()
            .get_or_insert_with(|| Ledger::new(max_open))
            .insert(r, now)
    }

    /// Takes out reservation `id` of `key` to settle it; `None` when it is
    /// unknown, closed, or of another key.
    pub fn take(&self, id: u64, key: &str) -> Option<Reservation<String>> {
        self.ledger.lock().as_mut()?.take(id, key)
    }

    /// Reservations open now.
    pub fn len(&self) -> usize {
        self.ledger.lock().as_ref().map_or(0, Ledger::len)
    }

    /// True when none is open.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
