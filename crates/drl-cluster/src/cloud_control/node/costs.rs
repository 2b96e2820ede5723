//! Costs known afterwards on [`Node`], besides the charge: check, reserve
//! and refund, each on the node's key table (docs/gossip.md, "Costs known
//! afterwards").

use drl_core::Nanos;

use super::Node;
use crate::alloc::FlowId;
use crate::cloud_control::key::{Admission, Hold, KeyLimit};
use crate::cloud_control::table::{AdmitError, KeyRef};

impl Node {
    /// What a take of `cost` would surely get at `now`, changing nothing
    /// ([`Keys::check`](crate::cloud_control::Keys::check)).
    pub fn check(&self, now: Nanos, key: KeyRef<'_>, limit: KeyLimit, cost: u64) -> Admission {
        self.keys.check(now, key, limit, cost)
    }

    /// A take of the estimate `cost` that also returns what bounds its
    /// refund ([`Keys::reserve`](crate::cloud_control::Keys::reserve)).
    pub fn reserve(
        &self,
        now: Nanos,
        key: KeyRef<'_>,
        limit: KeyLimit,
        cost: u64,
        flow: FlowId,
    ) -> Result<(Admission, Option<Hold>), AdmitError> {
        self.keys.reserve(now, key, limit, cost, flow)
    }

    /// Gives back up to `units` of a reservation ([`Keys::refund`](crate::cloud_control::Keys::refund)); the
    /// units given back.
    pub fn refund(
        &self,
        now: Nanos,
        key: KeyRef<'_>,
        limit: KeyLimit,
        hold: &Hold,
        units: u64,
    ) -> (Admission, u64) {
        self.keys.refund(now, key, limit, hold, units)
    }
}
