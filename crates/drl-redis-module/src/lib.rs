//! drl's native Redis module (`redis-server --loadmodule libdrl_redis_module.so`).
//!
//! It adds `DRL.DECIDE key_1 ... key_K spec`, which decides a batch of rate
//! limit decisions (takes, charges that may go into debt, and refunds of
//! reservations) with drl-core
//! itself inside Redis, and `DRL.VERSION`.
//! The protocol (spec layout, reply, stored state, errors, replication) is
//! described in `docs/redis.md`, "The native module"; it mirrors the Lua
//! scripts of drl-store exactly, so both engines can serve the same keys.
//!
//! The crate is also an `rlib`: [`spec`] encodes and parses the spec,
//! [`decide`] is the whole decision logic without Redis (the FFI layer only
//! reads keys, calls it and writes back), and [`artifact`] builds the
//! shared library and returns its path for tests and benchmarks.

pub mod artifact;
mod command;
pub mod decide;
mod ffi;
pub mod spec;

/// The protocol version `DRL.VERSION` returns (`drl_redis_wire::decide_spec::VERSION`).
pub const PROTOCOL_VERSION: i64 = drl_redis_wire::decide_spec::VERSION as i64;
