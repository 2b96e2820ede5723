//! gRPC (tonic): the native batched API ([`native`]) and Envoy RLS v3
//! ([`rls`]), served on one port.

pub mod native;
pub mod rls;

/// Code generated from `proto/drl/v1/ratelimit.proto`.
#[allow(missing_docs, clippy::all)]
pub mod pb {
    tonic::include_proto!("drl.v1");
}
