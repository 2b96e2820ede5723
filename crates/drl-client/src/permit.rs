//! Costs known afterwards (docs/semantics.md, "Costs known afterwards"):
//! [`Client::reserve`] takes an estimate and answers a [`Permit`], which
//! [`Permit::settle`] closes at the actual cost (refunding or charging the
//! difference) or [`Permit::release`] at 0; [`Client::charge`] consumes a
//! cost whatever remains (the key may go into debt).
//!
//! In process the reservation is drl-core's own; remotely the service
//! holds it (HTTP `mode: reserve`, gRPC `RESERVE`) and the permit keeps its
//! id. When the service cannot be reached, the failure policy answers the
//! reserve (the permit then holds nothing: settling it does nothing) and a
//! charge or settlement is lost.

use std::time::Duration;

use drl_api::{Op, Outcome};
use drl_core::{Decision, Reservation, Settlement};

use crate::client::{Backend, Client};
use crate::error::Error;
use crate::remote::{Item, SendError};

/// How long an in-process reservation stays open before it is settled at
/// its estimate (a remote one: the service's `server.reservation_ttl_ms`).
pub const RESERVATION_TTL: Duration = Duration::from_secs(300);

/// An admitted (or denied) reservation of an estimate, to settle with the
/// actual cost. Dropped unsettled, its estimate stays consumed.
#[derive(Debug)]
#[must_use = "settle or release the permit; dropped, its estimate stays consumed"]
pub struct Permit {
    client: Client,
    limit: String,
    key: String,
    decision: Decision,
    held: Held,
}

#[derive(Debug)]
enum Held {
    /// Denied, or answered by the failure policy: nothing to settle.
    Nothing,
    /// In process.
    Local(Reservation<String>),
    /// In the service, by id.
    Remote(u64),
}

impl Permit {
    /// The reserve's decision: admitted (the estimate is consumed) or not.
    pub fn decision(&self) -> &Decision {
        &self.decision
    }

    /// True if the estimate was admitted.
    pub fn allowed(&self) -> bool {
        self.decision.allowed
    }

    /// Closes the reservation at `actual`: above the estimate the
    /// difference is charged (even past the limit), below it is refunded
    /// (before the reservation expires). A denied permit settles nothing
    /// and answers a query.
    pub async fn settle(self, actual: u64) -> Result<Settlement, Error> {
        self.close(actual, false).await
    }

    /// Closes the reservation at 0: the estimate is refunded.
    pub async fn release(self) -> Result<Settlement, Error> {
        self.close(0, true).await
    }

    async fn close(self, actual: u64, release: bool) -> Result<Settlement, Error> {
        let Permit {
            client,
            limit,
            key,
            decision,
            held,
        } = self;
        match held {
            Held::Nothing => Ok(Settlement {
                decision,
                charged: 0,
                refunded: 0,
                expired: false,
            }),
            Held::Local(r) => {
                let Backend::InProcess(b) = &client.inner.backend else {
                    unreachable!("an in-process reservation comes from an in-process client")
                };
                let l = b.validate(&limit, &key, 0)?;
                Ok(b.settle_at(l, r, actual, b.now()))
            }
            Held::Remote(id) => {
                let op = if release {
                    Op::Release(id)
                } else {
                    Op::Settle(id)
                };
                let o = client.send_one(&limit, &key, actual, op).await?;
                Ok(Settlement {
                    decision: o.decision,
                    charged: o.charged,
                    refunded: o.refunded,
                    expired: o.expired,
                })
            }
        }
    }
}

impl Client {
    /// Reserves `estimate` of `limit` for `key`: a take of the estimate
    /// that, admitted, is later settled at the actual cost.
    pub async fn reserve(&self, limit: &str, key: &str, estimate: u64) -> Result<Permit, Error> {
        let (decision, held) = match &self.inner.backend {
            Backend::InProcess(b) => {
                let l = b.validate(limit, key, estimate)?;
                let (d, r) = b.reserve_at(l, key, estimate, b.now(), RESERVATION_TTL);
                (d, r.map_or(Held::Nothing, Held::Local))
            }
            Backend::Remote(_) => {
                let o = self.send_one(limit, key, estimate, Op::Reserve).await?;
                let held = if o.reservation == 0 {
                    Held::Nothing
                } else {
                    Held::Remote(o.reservation)
                };
                (o.decision, held)
            }
        };
        Ok(Permit {
            client: self.clone(),
            limit: limit.to_string(),
            key: key.to_string(),
            decision,
            held,
        })
    }

    /// Consumes `cost` of `limit` for `key` whatever remains (the key may
    /// go into debt, and is then denied until time repays it); answers a
    /// query right after.
    pub async fn charge(&self, limit: &str, key: &str, cost: u64) -> Result<Decision, Error> {
        match &self.inner.backend {
            Backend::InProcess(b) => {
                let l = b.validate(limit, key, cost)?;
                Ok(b.charge_at(l, key, cost, b.now()))
            }
            Backend::Remote(_) => Ok(self.send_one(limit, key, cost, Op::Charge).await?.decision),
        }
    }

    /// One remote check of `op`, past the denial cache; the failure
    /// policy answers when the service cannot (a query-like outcome that
    /// holds no reservation).
    pub(crate) async fn send_one(
        &self,
        limit: &str,
        key: &str,
        cost: u64,
        op: Op,
    ) -> Result<Outcome, Error> {
        let Backend::Remote(r) = &self.inner.backend else {
            unreachable!("send_one is remote only")
        };
        let rx = r.enqueue(Item {
            limit: limit.to_string(),
            key: key.to_string(),
            cost,
            op,
        });
        let fallback = |why: &str| {
            let d = self.fall_back_decision(r, limit, key, cost, why);
            Ok(Outcome::of(d))
        };
        match tokio::time::timeout(r.deadline, rx).await {
            Ok(Ok(Ok(o))) => Ok(o),
            Ok(Ok(Err(SendError::Refused { not_found, message }))) => Err(if not_found {
                Error::UnknownLimit {
                    limit: limit.to_string(),
                }
            } else {
                Error::Refused(message)
            }),
            Ok(Ok(Err(SendError::Unavailable(why)))) => fallback(&why),
            Ok(Err(_)) => fallback("the coalescing task is gone"),
            Err(_) => fallback("no answer within the deadline"),
        }
    }
}
