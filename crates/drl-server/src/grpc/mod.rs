//! gRPC: the native batched API ([`native`]) and Envoy RLS v3 ([`rls`]),
//! served on one port. Their calls arrive through [`hot`] on the `h2`
//! crate directly ([`direct`], messages framed by [`frame`]); tonic's
//! services over the same handler functions answer every other path.

pub mod direct;
pub mod frame;
pub mod hot;
pub mod native;
#[cfg(test)]
mod proto_gen;
pub mod rls;
pub mod rls_answer;
pub mod rls_request;
pub mod wire;

/// Code generated from `proto/drl/v1/ratelimit.proto`.
#[allow(missing_docs, clippy::all)]
pub mod pb {
    tonic::include_proto!("drl.v1");
}
