//! [`Quota`]: `limit` permits per `window`, with a `burst` capacity.

use std::fmt;
use std::str::FromStr;

use crate::time::{DAY, HOUR, MICROSECOND, MILLISECOND, MINUTE, Nanos, SECOND};

/// Why a quota is invalid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuotaError {
    /// `limit` must be at least 1.
    #[error(
        "limit must be at least 1 (a limit of 0 would deny everything; remove the limit or use a positive number)"
    )]
    ZeroLimit,
    /// `window` must be longer than 0 ns.
    #[error("window must be longer than 0")]
    ZeroWindow,
    /// `burst` must be at least 1.
    #[error("burst must be at least 1")]
    ZeroBurst,
    /// `burst` times the emission interval does not fit in 64-bit nanoseconds.
    #[error(
        "quota too large: burst ({burst}) x emission interval ({interval} ns) exceeds 2^64 ns (about 584 years)"
    )]
    TooLarge {
        /// The burst.
        burst: u64,
        /// The emission interval in ns.
        interval: u64,
    },
    /// The text is not of the form `LIMIT/WINDOW`.
    #[error("invalid quota {text:?}: {why} (expected LIMIT/WINDOW, e.g. 100/s, 5/1500ms, 10000/d)")]
    Syntax {
        /// The input text.
        text: String,
        /// What was wrong with it.
        why: String,
    },
}

/// A rate: `limit` permits per `window` nanoseconds, with capacity `burst`.
///
/// Always valid once constructed: `limit >= 1`, `window >= 1`, `burst >= 1`
/// and `burst * emission_interval` fits in a `u64`.
#[derive(Debug, Clone, Copy)]
pub struct Quota {
    limit: u64,
    window: Nanos,
    burst: u64,
    interval: Nanos,
    /// `x / interval` by multiply-and-shift (exact for every u64): deciders
    /// divide by `T` on every request, and a hardware divide costs more than
    /// the rest of a decision.
    per_interval: strength_reduce::StrengthReducedU64,
    /// `x / window` likewise: the window algorithms find a time's window on
    /// every request.
    per_window: strength_reduce::StrengthReducedU64,
}

impl PartialEq for Quota {
    fn eq(&self, other: &Self) -> bool {
        (self.limit, self.window, self.burst) == (other.limit, other.window, other.burst)
    }
}

impl Eq for Quota {}

impl std::hash::Hash for Quota {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        (self.limit, self.window, self.burst).hash(state)
    }
}

impl Quota {
    /// `limit` permits per `window` ns, burst equal to `limit`.
    pub fn new(limit: u64, window: Nanos) -> Result<Self, QuotaError> {
        Self::with_burst(limit, window, limit)
    }

    /// `limit` permits per `window` ns with capacity `burst`.
    pub fn with_burst(limit: u64, window: Nanos, burst: u64) -> Result<Self, QuotaError> {
        if limit == 0 {
            return Err(QuotaError::ZeroLimit);
        }
        if window == 0 {
            return Err(QuotaError::ZeroWindow);
        }
        if burst == 0 {
            return Err(QuotaError::ZeroBurst);
        }
        let interval = window.div_ceil(limit);
        if (burst as u128) * (interval as u128) > u64::MAX as u128 {
            return Err(QuotaError::TooLarge { burst, interval });
        }
        Ok(Self {
            limit,
            window,
            burst,
            interval,
            per_interval: strength_reduce::StrengthReducedU64::new(interval),
            per_window: strength_reduce::StrengthReducedU64::new(window),
        })
    }

    /// The same rate with another burst.
    pub fn burst_of(self, burst: u64) -> Result<Self, QuotaError> {
        Self::with_burst(self.limit, self.window, burst)
    }

    /// Permits per window.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// The window in nanoseconds.
    pub fn window(&self) -> Nanos {
        self.window
    }

    /// The capacity (defaults to `limit`).
    pub fn burst(&self) -> u64 {
        self.burst
    }

    /// The emission interval `T = ceil(window / limit)` in nanoseconds.
    pub fn emission_interval(&self) -> Nanos {
        self.interval
    }

    /// `floor(ns / T)`: whole permits in `ns` nanoseconds of credit.
    #[inline]
    pub fn permits_in(&self, ns: Nanos) -> u64 {
        ns / self.per_interval
    }

    /// `floor(t / window)`: the index of the window holding time `t`
    /// (windows aligned to time 0).
    #[inline]
    pub fn window_index(&self, t: Nanos) -> u64 {
        t / self.per_window
    }

    /// `burst * T`: the time a full bucket takes to refill from empty.
    pub fn capacity_ns(&self) -> Nanos {
        self.burst * self.interval
    }

    /// Parses `LIMIT/WINDOW` (burst = limit). See [`parse_window`].
    pub fn parse(text: &str) -> Result<Self, QuotaError> {
        let syntax = |why: &str| QuotaError::Syntax {
            text: text.to_string(),
            why: why.to_string(),
        };
        let t = text.trim();
        let (l, w) = t.split_once('/').ok_or_else(|| syntax("missing '/'"))?;
        let l = l.trim().replace('_', "");
        if l.is_empty() {
            return Err(syntax("missing limit before '/'"));
        }
        if !l.bytes().all(|b| b.is_ascii_digit()) {
            return Err(syntax("limit must be a whole number"));
        }
        let limit: u64 = l
            .parse()
            .map_err(|_| syntax("limit does not fit in 64 bits"))?;
        let window = parse_window(w).map_err(|why| syntax(&why))?;
        Self::new(limit, window)
    }
}

impl FromStr for Quota {
    type Err = QuotaError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Quota::parse(s)
    }
}

impl fmt::Display for Quota {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.limit, format_window(self.window))?;
        if self.burst != self.limit {
            write!(f, " (burst {})", self.burst)?;
        }
        Ok(())
    }
}

/// Formats a window in the largest unit that divides it exactly.
pub fn format_window(window: Nanos) -> String {
    const UNITS: [(Nanos, &str); 7] = [
        (DAY, "d"),
        (HOUR, "h"),
        (MINUTE, "m"),
        (SECOND, "s"),
        (MILLISECOND, "ms"),
        (MICROSECOND, "us"),
        (1, "ns"),
    ];
    for (ns, unit) in UNITS {
        if window % ns == 0 {
            let n = window / ns;
            return if n == 1 {
                unit.to_string()
            } else {
                format!("{n}{unit}")
            };
        }
    }
    unreachable!("1 divides everything")
}

/// Parses a window: an optional whole number followed by a unit
/// (`ns`, `us`, `ms`, `s`, `m`/`min`, `h`, `d`; long forms such as `sec`,
/// `second(s)`, `minute(s)`, `hour(s)`, `day(s)` are accepted too).
pub fn parse_window(text: &str) -> Result<Nanos, String> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let unit = unit.trim();
    let count: u64 = if num.is_empty() {
        1
    } else {
        num.parse()
            .map_err(|_| "window count does not fit in 64 bits".to_string())?
    };
    let per = match unit.to_ascii_lowercase().as_str() {
        "ns" | "nanosecond" | "nanoseconds" => 1,
        "us" | "µs" | "microsecond" | "microseconds" => MICROSECOND,
        "ms" | "millisecond" | "milliseconds" => MILLISECOND,
        "s" | "sec" | "secs" | "second" | "seconds" => SECOND,
        "m" | "min" | "mins" | "minute" | "minutes" => MINUTE,
        "h" | "hr" | "hour" | "hours" => HOUR,
        "d" | "day" | "days" => DAY,
        "" => return Err("missing window unit (ns, us, ms, s, m, h, d)".to_string()),
        other => {
            return Err(format!(
                "unknown window unit {other:?} (ns, us, ms, s, m, h, d)"
            ));
        }
    };
    if count == 0 {
        return Err("window must be longer than 0".to_string());
    }
    count
        .checked_mul(per)
        .ok_or_else(|| "window too long: does not fit in 64-bit nanoseconds".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_documented_forms() {
        let q = Quota::parse("100/s").unwrap();
        assert_eq!((q.limit(), q.window(), q.burst()), (100, SECOND, 100));
        assert_eq!(q.emission_interval(), 10_000_000);
        let q = Quota::parse("5/1500ms").unwrap();
        assert_eq!((q.limit(), q.window()), (5, 1_500 * MILLISECOND));
        assert_eq!(Quota::parse("10000/d").unwrap().window(), DAY);
        assert_eq!(Quota::parse("10000/day").unwrap().window(), DAY);
        assert_eq!(Quota::parse("3/10s").unwrap().window(), 10 * SECOND);
        assert_eq!(Quota::parse("1/min").unwrap().window(), MINUTE);
        assert_eq!(Quota::parse(" 7 / 2h ").unwrap().window(), 2 * HOUR);
        assert_eq!(Quota::parse("1_000/us").unwrap().limit(), 1000);
    }

    #[test]
    fn emission_interval_rounds_up() {
        let q = Quota::new(3, 10).unwrap();
        assert_eq!(q.emission_interval(), 4);
        let q = Quota::new(u64::MAX, 1).unwrap();
        assert_eq!(q.emission_interval(), 1);
    }

    #[test]
    fn rejects_zero_overflow_and_junk() {
        assert_eq!(Quota::parse("0/s"), Err(QuotaError::ZeroLimit));
        assert!(matches!(
            Quota::parse("5/0s"),
            Err(QuotaError::Syntax { .. })
        ));
        assert_eq!(Quota::new(5, 0), Err(QuotaError::ZeroWindow));
        assert_eq!(Quota::with_burst(5, 1, 0), Err(QuotaError::ZeroBurst));
        assert!(matches!(
            Quota::parse("99999999999999999999/s"),
            Err(QuotaError::Syntax { .. })
        ));
        assert!(matches!(
            Quota::parse("1/99999999999d"),
            Err(QuotaError::Syntax { .. })
        ));
        for junk in [
            "",
            "abc",
            "10",
            "10/",
            "/s",
            "-1/s",
            "1.5/s",
            "10/fortnight",
            "10/s/s",
        ] {
            assert!(Quota::parse(junk).is_err(), "{junk:?} should be rejected");
        }
        assert!(matches!(
            Quota::with_burst(1, u64::MAX, 2),
            Err(QuotaError::TooLarge { .. })
        ));
        assert!(Quota::with_burst(1, u64::MAX, 1).is_ok());
    }

    #[test]
    fn display_round_trips() {
        for s in [
            "100/s", "5/1500ms", "10000/d", "3/10s", "1/m", "7/2h", "9/ns",
        ] {
            let q = Quota::parse(s).unwrap();
            assert_eq!(Quota::parse(&q.to_string()).unwrap(), q, "{s}");
        }
    }
}
