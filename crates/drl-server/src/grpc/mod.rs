//! gRPC: the native batched API ([`native`]) and Envoy RLS v3 ([`rls`]),
//! served on one port. Their calls arrive through [`hot`] on the `h2`
//! crate directly ([`direct`]; messages framed and read by `drl-api`);
//! tonic's services over the same handler functions answer every other
//! path.

pub mod direct;
pub mod hot;
pub mod native;
pub mod rls;
