//! What can go wrong with a check.

use crate::config::ConfigError;

/// What went wrong with a check (a service that cannot be reached is not
/// an error: the failure policy answers).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// No limit of that name is configured.
    #[error("unknown limit {limit:?}")]
    UnknownLimit {
        /// The name asked for.
        limit: String,
    },
    /// The check is invalid (key too long, cost too large).
    #[error("invalid check: {0}")]
    Invalid(String),
    /// The service refused the check (unknown limit, bad key or cost, no
    /// token).
    #[error("drl refused the check: {0}")]
    Refused(String),
    /// A config file error (with line and column).
    #[error("{0}")]
    Config(#[from] ConfigError),
    /// A setting that cannot work (bad endpoint, policy without config).
    #[error("{0}")]
    Setup(String),
}
