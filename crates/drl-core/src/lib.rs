//! drl-core: the seven local rate-limiting algorithms of the contract in
//! `docs/semantics.md`, multi-limit decisions, costs known afterwards
//! (check, charge into debt, reserve and settle), and a concurrent keyed
//! limiter with bounded memory. Pure and synchronous: time is always
//! passed in as `u64` nanoseconds; the decisions read no clock and do no
//! I/O ([`time`] holds the clocks callers read, through rustix's safe
//! calls). No unsafe code.

#![forbid(unsafe_code)]

pub mod algo;
pub mod algorithm;
pub mod decision;
pub mod keyed;
pub mod ledger;
pub mod limiter;
pub mod multi;
pub mod quota;
pub mod reservation;
pub mod time;

pub use algorithm::{Algorithm, UnknownAlgorithm};
pub use decision::{Decision, DenyReason};
pub use keyed::{AtomicLimiter, KeyBytes, KeyedConfig, KeyedLimiter, KeyedStats};
pub use ledger::Ledger;
pub use limiter::{Limiter, Mark, State};
pub use multi::MultiLimiter;
pub use quota::{Quota, QuotaError};
pub use reservation::{Reservation, Settlement};
pub use time::{Clock, ManualClock, Nanos, SystemClock};
