//! Costs known afterwards on a [`KeyedLimiter`]: check, charge, and
//! reserve → settle / release (docs/semantics.md, "Costs known
//! afterwards"). Each operation is atomic for its key, under the same
//! bounds as [`KeyedLimiter::decide`]: an operation that writes nothing
//! creates no entry, and a key without an entry starts from what the
//! summary of evicted state holds for it (debt included).

use std::borrow::Borrow;
use std::hash::Hash;

use super::slot::{Applied, Op};
use super::{KeyBytes, KeyedLimiter, Tables};
use crate::decision::Decision;
use crate::reservation::{Reservation, Settlement};
use crate::time::Nanos;

impl<K: Hash + Eq + Clone + Send + Sync + KeyBytes> KeyedLimiter<K> {
    fn apply<Q>(&self, key: &Q, now: Nanos, op: Op) -> Applied
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        match &self.tables {
            Tables::Cell(ctx, t) => t.apply(ctx, key, now, op),
            Tables::Locked(t) => t.apply(&self.limiter, key, now, op),
        }
    }

    /// What a request of `cost` at `now` for `key` would get, changing
    /// nothing (a *check*; with `cost = 0`, a query, which is denied while
    /// the key is in debt).
    pub fn check<Q>(&self, key: &Q, now: Nanos, cost: u64) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.apply(key, now, Op::Check(cost)).decision
    }

    /// Consumes `cost` at `now` for `key` in every quota, even past the
    /// limit (the key goes into debt and every request is denied until
    /// time repays it). Returns a query right after: `allowed` is false
    /// exactly when the key is in debt.
    pub fn charge<Q>(&self, key: &Q, now: Nanos, cost: u64) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.apply(key, now, Op::Charge(cost)).decision
    }

    /// [`KeyedLimiter::charge`] that also returns a query of the key's
    /// state just before the charge, read atomically with it: `(before,
    /// after)`. What envoyproxy/ratelimit's per-descriptor stats need (the
    /// count before and after the hits).
    pub fn charge_seen<Q>(&self, key: &Q, now: Nanos, cost: u64) -> (Decision, Decision)
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let a = self.apply(key, now, Op::ChargeSeen(cost));
        let before = a.before.expect("a seen charge reports its query");
        (before, a.decision)
    }

    /// Reserves an estimate: decided and consumed like
    /// [`KeyedLimiter::decide`]; when admitted, returns the
    /// [`Reservation`] to settle, which expires at `now + ttl`.
    pub fn reserve<Q>(
        &self,
        key: &Q,
        now: Nanos,
        cost: u64,
        ttl: Nanos,
    ) -> (Decision, Option<Reservation<K>>)
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let a = self.apply(key, now, Op::Reserve(cost));
        let r = a.marks.map(|marks| Reservation {
            key: key.to_owned(),
            cost,
            reserved_at: now,
            expires_at: now.saturating_add(ttl),
            marks,
        });
        (a.decision, r)
    }

    /// Settles a reservation with the `actual` cost at `now`: above the
    /// estimate, the difference is charged (into debt if need be); below
    /// it and before the expiry, the difference is refunded, each quota
    /// giving back only what of the reservation still holds it back.
    pub fn settle(&self, r: Reservation<K>, now: Nanos, actual: u64) -> Settlement {
        let expired = now >= r.expires_at;
        let (decision, charged, refunded) = if actual > r.cost {
            let extra = actual - r.cost;
            (self.charge(&r.key, now, extra), extra, 0)
        } else if actual < r.cost && !expired {
            let back = r.cost - actual;
            let d = self.apply(&r.key, now, Op::Refund(&r.marks, back)).decision;
            (d, 0, back)
        } else {
            (self.check(&r.key, now, 0), 0, 0)
        };
        Settlement {
            decision,
            charged,
            refunded,
            expired,
        }
    }

    /// Releases a reservation at `now`: settles it at 0, refunding as much
    /// of it as still holds the key back (nothing once expired).
    pub fn release(&self, r: Reservation<K>, now: Nanos) -> Settlement {
        self.settle(r, now, 0)
    }
}
