//! What drl writes into Redis, in one place for both ends: the client
//! (drl-store's Lua scripts and module calls) and the server
//! (drl-redis-module).
//!
//! - [`decide_spec`]: the binary request of `DRL.DECIDE` (protocol v2).
//! - [`state_text`]: a limiter's state as the text stored under its key,
//!   read and written alike by the Lua scripts' callers and the module.

#![forbid(unsafe_code)]

pub mod decide_spec;
pub mod state_text;
