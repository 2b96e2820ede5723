//! limitador's decision rules on Envoy RLS v3, for limits read from a
//! limitador limits file ([`drl_config::limitador`]).
//!
//! A request's `domain` is the namespace. Every limit of the namespace
//! whose conditions all hold and whose variables are all present applies,
//! with one counter per distinct tuple of variable values (a fixed window
//! of `seconds`). The request is allowed only if every applying limit has
//! room for its hits (`hits_addend`, 0 meaning 1); then each applying
//! limit counts them. A denied request counts nothing (limitador and drl
//! agree here). With no applying limit the request is allowed.
//!
//! With several applying limits drl first asks each (a query, which
//! writes nothing) and counts only if all have room. Two concurrent
//! requests can both pass the queries and then one be denied by a later
//! limit after an earlier one counted it: that wastes capacity, it never
//! admits beyond a limit (each count is itself a checked decision).
//!
//! limitador's own API (`CheckRateLimit`, `Report`) decides on the same
//! rules in [`kuadrant`].

pub mod decide;
pub mod kuadrant;
pub mod rules;
