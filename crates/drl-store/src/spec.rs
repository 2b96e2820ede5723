//! [`LimitSpec`]: what a store needs to know about a limit.

use drl_core::{Algorithm, MultiLimiter, Quota};

/// A named limit: one algorithm over one or more quotas (all-or-nothing).
/// Two specs are the same limit only if every field is equal; a changed
/// spec starts from fresh state.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LimitSpec {
    /// The limit's name (unique within a config).
    pub name: String,
    /// The algorithm.
    pub algorithm: Algorithm,
    /// The quotas (at least one).
    pub quotas: Vec<Quota>,
}

impl LimitSpec {
    /// A spec; panics if `quotas` is empty.
    pub fn new(name: impl Into<String>, algorithm: Algorithm, quotas: Vec<Quota>) -> Self {
        assert!(!quotas.is_empty(), "a limit needs at least one quota");
        Self {
            name: name.into(),
            algorithm,
            quotas,
        }
    }

    /// The drl-core limiter for this spec.
    pub fn limiter(&self) -> MultiLimiter {
        MultiLimiter::uniform(self.algorithm, &self.quotas)
    }
}
