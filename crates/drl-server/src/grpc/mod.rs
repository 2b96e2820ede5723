//! gRPC: the native batched API ([`native`]), Envoy RLS v3 ([`rls`]) and
//! limitador's Kuadrant API ([`kuadrant`]), served on one port. The native
//! `Check` and `ShouldRateLimit` arrive through [`hot`] on the `h2` crate
//! directly ([`direct`]; messages framed and read by `drl-api`); tonic's
//! services over the same handler functions answer every other path
//! (the Kuadrant API included), behind the same token guard.

pub mod direct;
pub mod hot;
pub mod kuadrant;
pub mod native;
pub mod rls;
