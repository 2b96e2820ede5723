//! One Redis connection (a server or a cluster) and how its errors read
//! as store errors.

use redis::aio::ConnectionManager;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, ErrorKind, RedisError, ServerErrorKind, Value};

use super::errors;
use crate::StoreError;

/// A connection to one Redis, or to a Redis Cluster.
#[derive(Clone)]
pub(crate) enum Conn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl Conn {
    pub(crate) async fn query(&self, cmd: &Cmd) -> redis::RedisResult<Value> {
        match self {
            Conn::Single(c) => cmd.query_async(&mut c.clone()).await,
            Conn::Cluster(c) => cmd.query_async(&mut c.clone()).await,
        }
    }
}

/// A redis error as a store error. Connection-level timeouts (the
/// `response_timeout_ms` of the config) are reported as `Timeout(0)` when
/// the configured value is not at hand; [`RedisStore`] methods fill it in.
pub(crate) fn backend(e: RedisError) -> StoreError {
    if e.is_timeout() {
        StoreError::Timeout(0)
    } else {
        StoreError::Backend(errors::describe(&e))
    }
}

/// True if Redis answered that it does not know a script (`NOSCRIPT`).
pub(crate) fn is_noscript(e: &RedisError) -> bool {
    e.kind() == ErrorKind::Server(ServerErrorKind::NoScript)
}
