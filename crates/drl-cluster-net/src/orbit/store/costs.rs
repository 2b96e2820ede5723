//! Costs known afterwards on [`OrbitStore`]: charge, check, reserve and
//! refund, each on the limit's node (docs/orbit.md, "Costs known
//! afterwards"). A reservation's mark is the window it was admitted in.

use drl_store::{LimitSpec, StoreError};

use super::{OrbitCharge, OrbitDecision, OrbitStore};

impl OrbitStore {
    /// Charges `cost` for `key` now whatever it holds; never waits. The
    /// shortfall becomes the key's debt at this node: its requests here are
    /// denied until what the node obtains repays it, or the window ends.
    pub fn charge_at(
        &self,
        spec: &LimitSpec,
        key: &str,
        cost: u64,
    ) -> Result<OrbitCharge, StoreError> {
        let (decision, c, _, _) = self.apply(spec, key, |n, now| {
            let c = n.charge(now, key.as_bytes(), cost);
            (c.answer, c)
        })?;
        Ok(OrbitCharge {
            decision,
            consumed: c.consumed,
            debt: c.debt,
        })
    }

    /// What a take of `cost` would get, changing nothing; with a bounded
    /// wait, it waits as a take does (for a table to bring capacity or
    /// repay a debt) and answers what a take would get then.
    pub async fn check_at(
        &self,
        spec: &LimitSpec,
        key: &str,
        cost: u64,
    ) -> Result<OrbitDecision, StoreError> {
        self.waiting(spec, key, |n, now| (n.check(now, key.as_bytes(), cost), ()))
            .await
            .map(|(d, ())| d)
    }

    /// A take of the estimate `cost` (with the limit's bounded wait); when
    /// admitted, also its mark: the window it was admitted in.
    pub async fn reserve_at(
        &self,
        spec: &LimitSpec,
        key: &str,
        cost: u64,
    ) -> Result<(OrbitDecision, Option<u64>), StoreError> {
        self.waiting(spec, key, |n, now| n.reserve(now, key.as_bytes(), cost))
            .await
    }

    /// Gives back up to `amount` of a reservation of `key` admitted in
    /// window `mark`: into this node's holding if that window is still the
    /// current one, at most what this node's reservations of the key hold
    /// in it; nothing otherwise. Answers a query right after and the units
    /// given back.
    pub fn refund_at(
        &self,
        spec: &LimitSpec,
        key: &str,
        amount: u64,
        mark: u64,
    ) -> Result<(OrbitDecision, u64), StoreError> {
        let (d, credited, _, _) = self.apply(spec, key, |n, now| {
            let r = n.refund(now, key.as_bytes(), amount, mark);
            (r.answer, r.credited)
        })?;
        Ok((d, credited))
    }
}
