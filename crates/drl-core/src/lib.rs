//! drl-core: the seven local rate-limiting algorithms of the contract in
//! `docs/semantics.md`, multi-limit decisions, and a concurrent keyed
//! limiter with bounded memory; also the wire format of the Redis module's
//! `DRL.DECIDE` ([`decide_spec`]), shared by its encoder and its parser.
//! Pure and synchronous: time is always passed in as `u64` nanoseconds;
//! nothing here reads a clock or does I/O.

pub mod algo;
pub mod algorithm;
pub mod config_error;
pub mod decide_spec;
pub mod decision;
pub mod keyed;
pub mod limiter;
pub mod multi;
pub mod quota;
pub mod state_text;
pub mod time;
pub mod topk;

pub use algorithm::{Algorithm, UnknownAlgorithm};
pub use config_error::ConfigError;
pub use decision::{Decision, DenyReason};
pub use keyed::{AtomicLimiter, KeyBytes, KeyedConfig, KeyedLimiter, KeyedStats};
pub use limiter::{Limiter, State};
pub use multi::MultiLimiter;
pub use quota::{Quota, QuotaError};
pub use time::{Clock, ManualClock, Nanos, SystemClock};
