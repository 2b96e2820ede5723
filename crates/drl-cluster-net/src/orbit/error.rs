//! Why the Orbit runtime could not start or serve a limit.

use crate::transport::{KeyError, TransportError};

/// The Orbit runtime could not start, or a limit cannot be served by it.
#[derive(Debug, thiserror::Error)]
pub enum OrbitError {
    /// The `orbit:` section is invalid.
    #[error("orbit config: {0}")]
    Config(String),
    /// A limit cannot be served with `scope: orbit`.
    #[error("{0}")]
    Limit(String),
    /// The cluster key could not be loaded.
    #[error("orbit: {0}")]
    Key(#[from] KeyError),
    /// The socket could not be bound.
    #[error("orbit: {0}")]
    Transport(#[from] TransportError),
}
