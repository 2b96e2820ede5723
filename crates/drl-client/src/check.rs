//! One check of a batch, and a client's counters.

/// One check of a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    /// The configured limit's name.
    pub limit: String,
    /// The key within the limit (a tenant, an API key, an address).
    pub key: String,
    /// The cost (1 for one request; 0 only queries).
    pub cost: u64,
}

impl Check {
    /// A check of `cost` on `limit` for `key`.
    pub fn new(limit: impl Into<String>, key: impl Into<String>, cost: u64) -> Self {
        Self {
            limit: limit.into(),
            key: key.into(),
            cost,
        }
    }
}

/// Counters of a client, for tests and dashboards.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Stats {
    /// Checks answered from the denial cache.
    pub cache_hits: u64,
    /// Checks answered by the failure policy.
    pub fallbacks: u64,
    /// Requests sent to the service (remote only).
    pub requests: u64,
    /// Checks sent to the service (remote only); `checks_sent / requests`
    /// is the mean batch size.
    pub checks_sent: u64,
}
