//! [`Algorithm`]: the seven local algorithms and their user-facing names.

use std::fmt;
use std::str::FromStr;

/// One of the seven local algorithms of `docs/semantics.md`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Algorithm {
    /// Token bucket with continuous refill (`token-bucket`).
    TokenBucket,
    /// Leaky bucket as a meter (`leaky-bucket`): same decisions as the token bucket.
    LeakyBucket,
    /// Generic cell rate algorithm (`gcra`).
    Gcra,
    /// Leaky bucket as a queue, a shaper that admits with a delay (`leaky-queue`).
    LeakyQueue,
    /// Fixed window counter aligned to time 0 (`fixed-window`).
    FixedWindow,
    /// Sliding window log (`sliding-log`).
    SlidingLog,
    /// Sliding window counter, strict form (`sliding-window`).
    SlidingWindow,
}

impl Algorithm {
    /// All seven, in the order of `docs/semantics.md`.
    pub const ALL: [Algorithm; 7] = [
        Algorithm::TokenBucket,
        Algorithm::LeakyBucket,
        Algorithm::Gcra,
        Algorithm::LeakyQueue,
        Algorithm::FixedWindow,
        Algorithm::SlidingLog,
        Algorithm::SlidingWindow,
    ];

    /// The name users write in config, CLI and API.
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::TokenBucket => "token-bucket",
            Algorithm::LeakyBucket => "leaky-bucket",
            Algorithm::Gcra => "gcra",
            Algorithm::LeakyQueue => "leaky-queue",
            Algorithm::FixedWindow => "fixed-window",
            Algorithm::SlidingLog => "sliding-log",
            Algorithm::SlidingWindow => "sliding-window",
        }
    }

    /// True for the window algorithms, whose capacity is `limit`, not `burst`.
    pub fn is_windowed(self) -> bool {
        matches!(
            self,
            Algorithm::FixedWindow | Algorithm::SlidingLog | Algorithm::SlidingWindow
        )
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An algorithm name that is not one of the seven.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown algorithm {0:?}; expected one of: token-bucket, leaky-bucket, gcra, leaky-queue, fixed-window, sliding-log, sliding-window"
)]
pub struct UnknownAlgorithm(pub String);

impl FromStr for Algorithm {
    type Err = UnknownAlgorithm;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Algorithm::ALL
            .into_iter()
            .find(|a| a.name() == s.trim())
            .ok_or_else(|| UnknownAlgorithm(s.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for a in Algorithm::ALL {
            assert_eq!(a.name().parse::<Algorithm>().unwrap(), a);
        }
        assert!("token_bucket".parse::<Algorithm>().is_err());
    }
}
