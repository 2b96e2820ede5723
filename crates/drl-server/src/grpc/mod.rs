//! gRPC (tonic): the native batched API ([`native`]) and Envoy RLS v3
//! ([`rls`]), served on one port. [`direct`] serves unary methods on the
//! `h2` crate without tonic's transport, framing messages with [`frame`].

pub mod direct;
pub mod frame;
pub mod hot;
pub mod native;
pub mod rls;

/// Code generated from `proto/drl/v1/ratelimit.proto`.
#[allow(missing_docs, clippy::all)]
pub mod pb {
    tonic::include_proto!("drl.v1");
}
