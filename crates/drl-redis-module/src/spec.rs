//! The `spec` argument of `DRL.DECIDE` (protocol v3): the one definition
//! in `drl_redis_wire::decide_spec`, re-exported here. drl-store's `module`
//! engine encodes with the same code, so the two sides cannot drift apart
//! (the algorithm codes are explicit there and pinned by a test).
//!
//! ```text
//! word 0  MAGIC (magic + version)
//! word 1  expiry grace, ms
//! then per decision: mode (bit 0 clock: 0 caller, 1 server; bits 1-2:
//!   0 take, 1 charge, 2 refund), now (ns), algorithm
//!   (drl_redis_wire::decide_spec::algorithm_code), cost, nq (>= 1),
//!   then nq x (limit, window ns, burst), and a refund's mark per quota
//! ```

pub use drl_redis_wire::decide_spec::{
    Clock, Head, MAGIC, Op, Parsed, Spec, VERSION, algorithm_code, algorithm_of_code, encode,
    parse, parse_into, write_header, write_record,
};

/// One decision of a spec (drl-core's [`drl_redis_wire::decide_spec::Request`],
/// under the name this crate's callers use).
pub use drl_redis_wire::decide_spec::Request as Decision;
