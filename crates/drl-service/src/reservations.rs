//! [`Reservations`]: a limit's open reservations, by id, for the HTTP and
//! native APIs (a `reserve` answers an id; a later `settle` or `release`
//! names it). One bounded [`Ledger`] per limit, made on first use;
//! docs/server.md, "Costs known afterwards". A `redis`, `orbit` or `gossip` limit's
//! reservations are held here too (the store keeps the state, the ledger
//! the estimate, the expiry and the marks the store returned).
//!
//! The ledger belongs to the compiled limit; a reload that keeps the
//! limit's state (same name, scope, spec and bounds) keeps its ledger, and
//! one that changes the limit closes every open reservation at its
//! estimate (the estimate stays consumed).

use drl_api::{CheckRequest, Op, Outcome};
use drl_config::ServerConfig;
use drl_core::{Ledger, Nanos, Reservation};
use drl_store::{Check as StoreCheck, LimitSpec, Store, StoreError};
use parking_lot::Mutex;

/// A limit's open reservations, and the settlements of the ones closed
/// last (so that a retried settle answers again instead of charging twice).
#[derive(Debug, Default)]
pub struct Reservations {
    ledger: Mutex<Option<Ledger<String>>>,
    settled: Mutex<Settled>,
}

/// What a settle or release did: units charged and refunded, and whether
/// the reservation had expired.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Closed {
    /// Units charged beyond the estimate.
    pub charged: u64,
    /// Units refunded: what the store reports it gave back.
    pub refunded: u64,
    /// Whether it had expired.
    pub expired: bool,
}

/// The last settlements by id, oldest first out.
#[derive(Debug, Default)]
struct Settled {
    by_id: std::collections::HashMap<u64, (String, Closed)>,
    order: std::collections::VecDeque<u64>,
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

    /// Records that reservation `id` of `key` was closed with `c`; the last
    /// `keep` closings are remembered.
    pub fn remember(&self, id: u64, key: &str, c: Closed, keep: usize) {
        let mut s = self.settled.lock();
        if keep == 0 || s.by_id.insert(id, (key.to_string(), c)).is_some() {
            return;
        }
        s.order.push_back(id);
        while s.order.len() > keep {
            if let Some(old) = s.order.pop_front() {
                s.by_id.remove(&old);
            }
        }
    }

    /// How reservation `id` of `key` was closed, if it is among the last
    /// closings remembered.
    pub fn closed(&self, id: u64, key: &str) -> Option<Closed> {
        let s = self.settled.lock();
        let (k, c) = s.by_id.get(&id)?;
        (k == key).then_some(*c)
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

/// Applies check, reserve, settle or release `r` on the limit of `spec`,
/// whose state is in `store` (Redis, Orbit, gossip) and whose open reservations are
/// `open`, as [`crate::engine::apply_local`] does in memory: a reserve
/// takes the estimate in the store and keeps its marks in the limit's
/// ledger; a settle charges the excess in the store, or refunds the
/// shortfall before the expiry (one atomic call each, every quota) and
/// answers the units the store reports it gave back. The
/// expiry is judged on this node's clock at `now`; the store decides on
/// its own clock (Redis `TIME` by default), on which the marks were taken.
/// An unknown reservation answers as in [`crate::engine::apply_local`]:
/// `expired`, the whole actual cost charged. (Takes and charges are
/// applied too, for completeness.)
pub async fn apply_store(
    spec: &LimitSpec,
    open: &Reservations,
    store: &dyn Store,
    r: &CheckRequest<'_>,
    now: Nanos,
    server: &ServerConfig,
) -> Result<Outcome, StoreError> {
    let at = |cost| StoreCheck {
        spec,
        key: r.key,
        cost,
        now,
    };
    let settlement = |decision, charged, refunded, expired| Outcome {
        decision,
        reservation: 0,
        charged,
        refunded,
        expired,
    };
    match r.op {
        Op::Take => store.decide(at(r.cost)).await.map(Outcome::of),
        Op::Charge => store.charge(at(r.cost)).await.map(Outcome::of),
        Op::Check => store.check(at(r.cost)).await.map(Outcome::of),
        Op::Reserve => {
            let ttl = server
                .reservation_ttl_ms
                .saturating_mul(drl_core::time::MILLISECOND);
            let (decision, marks) = store.reserve(at(r.cost)).await?;
            let reservation = marks.map_or(0, |marks| {
                let held = Reservation::new(
                    r.key.to_string(),
                    r.cost,
                    now,
                    now.saturating_add(ttl),
                    marks,
                );
                open.open(held, now, server.max_reservations)
            });
            Ok(Outcome {
                reservation,
                ..Outcome::of(decision)
            })
        }
        Op::Settle(id) | Op::Release(id) => {
            let actual = if matches!(r.op, Op::Settle(_)) {
                r.cost
            } else {
                0
            };
            let Some(held) = open.take(id, r.key) else {
                if let Some(c) = open.closed(id, r.key) {
                    // Settled already: the same answer, nothing applied.
                    let d = store.check(at(0)).await?;
                    return Ok(settlement(d, c.charged, c.refunded, c.expired));
                }
                let d = if actual > 0 {
                    store.charge(at(actual)).await?
                } else {
                    store.check(at(0)).await?
                };
                return Ok(settlement(d, actual, 0, true));
            };
            let expired = now >= held.expires_at();
            let estimate = held.cost();
            let out = if actual > estimate {
                let extra = actual - estimate;
                let d = store.charge(at(extra)).await?;
                settlement(d, extra, 0, expired)
            } else if actual < estimate && !expired {
                // The units the store gave back, not the ones asked for (a
                // refund dropped or one the scope cannot make gives 0).
                let (d, back) = store.refund(at(estimate - actual), held.marks()).await?;
                settlement(d, 0, back, expired)
            } else {
                let d = store.check(at(0)).await?;
                settlement(d, 0, 0, expired)
            };
            let c = Closed {
                charged: out.charged,
                refunded: out.refunded,
                expired: out.expired,
            };
            open.remember(id, r.key, c, server.max_reservations);
            Ok(out)
        }
    }
}
