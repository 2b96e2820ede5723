//! Charges a [`super::Resilient`] store keeps to retry when the store
//! could not take them.

/// At most this many keys wait with a charge the store could not take
/// (see the module docs).
pub const MAX_PENDING_CHARGES: usize = 10_000;

/// At most this many pending charges are retried after one answered call.
pub const FLUSH_PER_CALL: usize = 16;

/// A charge waiting to be retried: the sum of a key's failed charges, at
/// the latest of their stamps.
#[derive(Debug, Clone, Copy)]
pub(super) struct PendingCharge {
    pub(super) cost: u64,
    pub(super) now: drl_core::Nanos,
}
