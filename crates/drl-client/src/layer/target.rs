//! [`Target`]: what one request is checked as.

use std::borrow::Cow;

use super::key::Key;

/// What to check for one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The configured limit's name.
    pub limit: Cow<'static, str>,
    /// The key within the limit (inline when short: see [`Key`]).
    pub key: Key,
    /// The cost.
    pub cost: u64,
}

impl Target {
    /// A check of `cost` on `limit` for `key`.
    pub fn new(limit: impl Into<Cow<'static, str>>, key: impl Into<Key>, cost: u64) -> Self {
        Self {
            limit: limit.into(),
            key: key.into(),
            cost,
        }
    }
}
