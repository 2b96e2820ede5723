//! Costs known afterwards on an Orbit node: charge (into debt), check,
//! reserve and refund (docs/orbit.md, "Costs known afterwards").
//!
//! The rules, each keeping `admitted + charged - refunded <= cap + debt`
//! per key and window (takes alone: `admitted - refunded <= cap`):
//! - a charge consumes what the node holds for the key (after taking from
//!   any table it holds) and records the rest as the key's debt here;
//! - while a key has debt its holding is 0: whatever the node obtains for
//!   it (table grants, refunds) repays the debt first, and every request
//!   for it is denied;
//! - a refund gives back at most what this node's reservations of the key
//!   still hold in the reservation's window, and nothing once that window
//!   is over;
//! - debt and reservations end with the window, as a fixed window's count
//!   does.

use drl_core::Nanos;

use super::rule::Rule;
use super::{KeyState, OrbitNode};
use crate::orbit::config::MAX_KEY_LEN;
use crate::orbit::outcome::{Admit, Charged, DenyReason, Refunded};

/// What one lane's rebalance of one key would do.
pub(super) struct Plan {
    /// The node's new holding (before any debt is repaid from it).
    pub(super) keep: u64,
    /// The table's new free capacity for the key.
    pub(super) free: u64,
    /// What the visit must leave in the table for the key.
    pub(super) reserve: u64,
}

impl KeyState {
    /// Repays the debt from the holding, as far as the holding goes.
    pub(super) fn repay(&mut self) {
        let r = self.holding.min(self.debt);
        self.holding -= r;
        self.debt -= r;
    }
}

impl OrbitNode {
    /// Charges `cost` for `key` whatever it holds (a cost known afterwards;
    /// any cost, above the cap too): consumes what the node holds for the
    /// key, after taking what it may from any table it holds, and records
    /// the rest as the key's debt at this node. The key's requests here are
    /// denied until that debt is repaid or the window ends.
    pub fn charge(&mut self, now: Nanos, key: &[u8], cost: u64) -> Charged {
        let now = self.observe(now);
        let room = self.keys.contains_key(key) || self.keys.len() < self.cfg.max_keys;
        if !self.is_eligible(self.window) || key.len() > MAX_KEY_LEN || !room {
            // Nothing held to consume, and nowhere to record a debt (the
            // key's requests are denied here anyway).
            return Charged {
                consumed: 0,
                debt: 0,
                answer: self.peek(now, key, 0),
            };
        }
        self.want(now, key, cost);
        let (mut consumed, mut debt) = (0, 0);
        if let Some(ks) = self.keys.get_mut(key) {
            consumed = cost.min(ks.holding);
            ks.holding -= consumed;
            debt = cost - consumed;
            ks.debt = ks.debt.saturating_add(debt);
        }
        Charged {
            consumed,
            debt,
            answer: self.peek(now, key, 0),
        }
    }

    /// What [`OrbitNode::admit`] of `cost` would answer now, changing
    /// nothing (no capacity moves, no demand is counted).
    pub fn check(&mut self, now: Nanos, key: &[u8], cost: u64) -> Admit {
        let now = self.observe(now);
        self.peek(now, key, cost)
    }

    /// A take of the estimate `cost` that, when admitted, also returns its
    /// mark: the window it was admitted in, for [`OrbitNode::refund`].
    pub fn reserve(&mut self, now: Nanos, key: &[u8], cost: u64) -> (Admit, Option<u64>) {
        let d = self.admit(now, key, cost);
        if !d.is_allowed() {
            return (d, None);
        }
        if let Some(ks) = self.keys.get_mut(key) {
            ks.reserved = ks.reserved.saturating_add(cost);
        }
        (d, Some(self.window))
    }

    /// Gives back up to `amount` of a reservation of `key` admitted with
    /// `mark`: into the key's holding (its debt repaid first) if `mark` is
    /// the current window, never more than this node's reservations of
    /// the key still hold in it; nothing otherwise.
    pub fn refund(&mut self, now: Nanos, key: &[u8], amount: u64, mark: u64) -> Refunded {
        let now = self.observe(now);
        let mut credited = 0;
        if mark == self.window
            && let Some(ks) = self.keys.get_mut(key)
        {
            credited = amount.min(ks.reserved);
            ks.reserved -= credited;
            ks.admitted = ks.admitted.saturating_sub(credited);
            ks.holding = ks.holding.saturating_add(credited);
            ks.repay();
        }
        Refunded {
            credited,
            answer: self.peek(now, key, 0),
        }
    }

    /// The debt `key` has at this node in its current window.
    pub fn debt(&self, key: &[u8]) -> u64 {
        self.keys.get(key).map_or(0, |k| k.debt)
    }

    /// The denials every request meets before its key is looked at.
    pub(super) fn refuse(&self, now: Nanos, key: &[u8], cost: u64) -> Option<Admit> {
        let to_next_window = self.to_next_window(now);
        let (reason, retry_after) = if cost > self.cfg.cap {
            (DenyReason::CostExceedsCap, None)
        } else if !self.is_eligible(self.window) {
            (DenyReason::Recovering, Some(to_next_window))
        } else if key.len() > MAX_KEY_LEN {
            (DenyReason::KeyTooLong, None)
        } else if !self.keys.contains_key(key) && self.keys.len() >= self.cfg.max_keys {
            (DenyReason::TooManyKeys, Some(to_next_window))
        } else {
            return None;
        };
        Some(Admit::Denied {
            reason,
            retry_after,
        })
    }

    /// The denial of a key that holds too little (`Exhausted`) or is in
    /// debt (`InDebt`): retry when the table is expected back, or in the
    /// next window, whichever is sooner.
    pub(super) fn short(&self, now: Nanos, in_debt: bool) -> Admit {
        Admit::Denied {
            reason: if in_debt {
                DenyReason::InDebt
            } else {
                DenyReason::Exhausted
            },
            retry_after: Some(self.lap().min(self.to_next_window(now)).max(1)),
        }
    }

    fn to_next_window(&self, now: Nanos) -> Nanos {
        (self.window + 1)
            .saturating_mul(self.cfg.window)
            .saturating_sub(now)
    }

    /// Rebalances `key` with each table the node holds while the key is in
    /// debt or holds less than `cost`.
    /// Counts `cost` as demand for `key` (a new key starts holding its
    /// local allowance), then takes what it may from a table this node
    /// holds ([`OrbitNode::obtain`]).
    pub(super) fn want(&mut self, now: Nanos, key: &[u8], cost: u64) {
        let local = self.local;
        let ks = self.keys.entry(key.to_vec()).or_insert(KeyState {
            holding: local,
            ..KeyState::default()
        });
        ks.demand = ks.demand.saturating_add(cost);
        self.obtain(now, key, cost);
    }

    pub(super) fn obtain(&mut self, now: Nanos, key: &[u8], cost: u64) {
        for lane in 0..self.lanes.len() {
            let short = self
                .keys
                .get(key)
                .is_some_and(|ks| ks.debt > 0 || cost > ks.holding);
            if short && self.lanes[lane].held.is_some() {
                self.rebalance_key(now, lane, key, cost);
            }
        }
    }

    /// What `admit(now, key, cost)` would answer, on copies.
    fn peek(&self, now: Nanos, key: &[u8], cost: u64) -> Admit {
        if let Some(d) = self.refuse(now, key, cost) {
            return d;
        }
        let mut ks = self.keys.get(key).copied().unwrap_or(KeyState {
            holding: self.local,
            ..KeyState::default()
        });
        ks.demand = ks.demand.saturating_add(cost);
        let rule = self.rule(now);
        for lane in 0..self.lanes.len() {
            if ks.debt > 0 || cost > ks.holding {
                if let Some(p) = self.plan_key(&rule, lane, key, &ks, cost) {
                    ks.holding = p.keep;
                    ks.repay();
                }
            }
        }
        if ks.debt == 0 && cost <= ks.holding {
            Admit::Allowed {
                remaining: ks.holding - cost,
            }
        } else {
            self.short(now, ks.debt > 0)
        }
    }

    /// The rebalance of `key` (state `ks`) against lane `lane`'s held table
    /// with `want` raised to at least `min_want` plus the debt; `None` if
    /// the node does not hold that table or it has no room for the key.
    pub(super) fn plan_key(
        &self,
        rule: &Rule,
        lane: usize,
        key: &[u8],
        ks: &KeyState,
        min_want: u64,
    ) -> Option<Plan> {
        let l = self.lanes.get(lane)?;
        let held = l.held.as_ref()?;
        let (f, reserve) = match held.table.entries.get(key) {
            Some(e) if e.visit == held.visit => (e.free, e.reserve),
            Some(e) => (e.free, rule.reserve(e.free)),
            None if held.table.entries.len() >= self.cfg.max_keys => return None,
            None => (l.pool, rule.reserve(l.pool)),
        };
        let want = rule.want(ks).max(min_want.saturating_add(ks.debt));
        let (keep, free) = rule.split(ks.holding, f, reserve, want);
        Some(Plan {
            keep,
            free,
            reserve,
        })
    }
}
