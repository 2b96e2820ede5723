//! [`Reservation`] and [`Settlement`]: a cost reserved as an estimate,
//! settled later with the actual cost (docs/semantics.md, "Costs known
//! afterwards").

use crate::decision::Decision;
use crate::limiter::Mark;
use crate::time::Nanos;

/// An admitted estimate of `cost` for `key`, to be settled with the actual
/// cost ([`crate::KeyedLimiter::settle`]) or released
/// ([`crate::KeyedLimiter::release`]).
///
/// Neither `Clone` nor `Copy`: settling consumes it, so it is settled at
/// most once. Dropping it unsettled settles it at its estimate (the
/// estimate stays consumed), as does settling it at or after
/// [`Reservation::expires_at`], except that a settlement above the
/// estimate still charges the difference. To hand reservations across a
/// wire, keep them in a [`crate::Ledger`].
#[derive(Debug, PartialEq, Eq)]
#[must_use = "a reservation is settled or released; dropped, it stays consumed at its estimate"]
pub struct Reservation<K> {
    pub(crate) key: K,
    pub(crate) cost: u64,
    pub(crate) reserved_at: Nanos,
    pub(crate) expires_at: Nanos,
    pub(crate) marks: Box<[Mark]>,
}

impl<K> Reservation<K> {
    /// A reservation of `cost` for `key` admitted at `reserved_at` with
    /// `marks` (one per quota, as [`crate::MultiLimiter::reserve`] or a
    /// store's reserve returned them), expiring at `expires_at`: for callers
    /// whose state lives elsewhere (a store) and that keep their
    /// reservations in a [`crate::Ledger`]. Settled on a
    /// [`crate::KeyedLimiter`], it must come from that limiter's reserve.
    pub fn new(
        key: K,
        cost: u64,
        reserved_at: Nanos,
        expires_at: Nanos,
        marks: Box<[Mark]>,
    ) -> Self {
        Self {
            key,
            cost,
            reserved_at,
            expires_at,
            marks,
        }
    }

    /// The key it was reserved for.
    pub fn key(&self) -> &K {
        &self.key
    }

    /// The estimate reserved (and consumed).
    pub fn cost(&self) -> u64 {
        self.cost
    }

    /// The `now` of the reservation.
    pub fn reserved_at(&self) -> Nanos {
        self.reserved_at
    }

    /// From this instant on it is settled at its estimate: a later
    /// settlement refunds nothing (it still charges what exceeds the
    /// estimate).
    pub fn expires_at(&self) -> Nanos {
        self.expires_at
    }

    /// The marks that bound its refund, one per quota (see [`Mark`]).
    pub fn marks(&self) -> &[Mark] {
        &self.marks
    }
}

/// What settling (or releasing) a [`Reservation`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settlement {
    /// A query (`cost = 0`) on the key right after: `allowed` is false
    /// while the key is in debt.
    pub decision: Decision,
    /// Units charged beyond the estimate (`actual - estimate`, or 0).
    pub charged: u64,
    /// Units of the estimate returned for refund (`estimate - actual`, or
    /// 0; 0 once expired). Each quota gives back at most this, and only
    /// what of the reservation still holds it back.
    pub refunded: u64,
    /// True if it was settled at or after its expiry.
    pub expired: bool,
}
