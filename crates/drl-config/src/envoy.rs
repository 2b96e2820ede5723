//! envoyproxy/ratelimit configuration files, loaded unchanged.
//!
//! The format (as their README documents it): a `domain`, and a tree of
//! `descriptors`, each with a `key`, an optional `value` (exact, or a
//! prefix ending in `*`), an optional `rate_limit` (`unit` +
//! `requests_per_unit`, or `unlimited: true`; optional `name` and
//! `replaces`), `shadow_mode`, `detailed_metric` and nested `descriptors`.
//! `metadata` (a map) is returned in the RLS answer's dynamic metadata
//! when `server.envoy_response_dynamic_metadata` is on;
//! `detailed_metric` and `value_to_metric` name the stats by request
//! values only with `server.envoy_stats_values` (bounded);
//! `share_threshold` on a wildcard value makes every matching value count
//! as one.

use std::collections::BTreeSet;

use drl_core::Nanos;
use drl_core::time::{DAY, HOUR, MINUTE, SECOND};
use serde::Deserialize;

use crate::ConfigError;

/// One domain: a file of envoyproxy/ratelimit.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnvoyDomain {
    /// The domain (requests name it; missing or empty is refused).
    #[serde(default)]
    pub domain: String,
    /// The top-level descriptors.
    #[serde(default)]
    pub descriptors: Vec<EnvoyDescriptor>,
}

/// A descriptor node.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(try_from = "RawDescriptor")]
pub struct EnvoyDescriptor {
    /// The entry key to match.
    pub key: String,
    /// The entry value: `None` matches any value (each value counts
    /// separately); a value ending in `*` matches by prefix.
    pub value: Option<String>,
    /// The limit applied when a request descriptor ends here.
    pub rate_limit: Option<EnvoyRateLimit>,
    /// Decide and count, but always answer OK.
    pub shadow_mode: bool,
    /// A quota: over its limit it answers OVER_LIMIT for its descriptor,
    /// but the request is OVER_LIMIT only if no other limit passes it
    /// (every quota descriptor over, or an ordinary one over).
    pub quota_mode: bool,
    /// Name the stats of this rule by the request's values (used with
    /// `server.envoy_stats_values`; otherwise the rule's path names them).
    pub detailed_metric: bool,
    /// Name this level of the stats key by the request's value (used with
    /// `server.envoy_stats_values`).
    pub value_to_metric: bool,
    /// `share_threshold` (wildcard values only): every value that matches
    /// the wildcard counts under the wildcard itself, one counter for all.
    pub share_threshold: bool,
    /// `metadata`: a map returned, merged with the other passing
    /// descriptors', in the answer's dynamic metadata
    /// (`server.envoy_response_dynamic_metadata`).
    pub metadata: Option<serde_norway::Mapping>,
    /// Nested descriptors.
    pub descriptors: Vec<EnvoyDescriptor>,
}

#[derive(Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a descriptor: a map with key, and optionally value, rate_limit, descriptors"
)]
struct RawDescriptor {
    key: String,
    #[serde(default)]
    value: Option<String>,
    #[serde(default)]
    rate_limit: Option<EnvoyRateLimit>,
    #[serde(default)]
    shadow_mode: bool,
    #[serde(default)]
    detailed_metric: bool,
    #[serde(default)]
    descriptors: Option<Vec<EnvoyDescriptor>>,
    #[serde(default)]
    quota_mode: bool,
    #[serde(default)]
    share_threshold: bool,
    #[serde(default)]
    value_to_metric: bool,
    #[serde(default)]
    metadata: Option<serde_norway::Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRateLimit {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    replaces: Vec<Replace>,
    #[serde(default)]
    unit: Option<Unit>,
    #[serde(default)]
    requests_per_unit: Option<u32>,
    #[serde(default)]
    unlimited: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Replace {
    name: String,
}

/// A time unit of envoyproxy/ratelimit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Unit {
    /// One second.
    Second,
    /// One minute.
    Minute,
    /// One hour.
    Hour,
    /// One day.
    Day,
    /// Seven days.
    Week,
    /// 30 days (as envoyproxy/ratelimit counts a month).
    Month,
    /// 365 days.
    Year,
}

impl Unit {
    /// Parses a unit name, case-insensitively.
    pub fn parse(s: &str) -> Option<Unit> {
        Some(match s.to_ascii_lowercase().as_str() {
            "second" => Unit::Second,
            "minute" => Unit::Minute,
            "hour" => Unit::Hour,
            "day" => Unit::Day,
            "week" => Unit::Week,
            "month" => Unit::Month,
            "year" => Unit::Year,
            _ => return None,
        })
    }

    /// The window length.
    pub fn window(self) -> Nanos {
        match self {
            Unit::Second => SECOND,
            Unit::Minute => MINUTE,
            Unit::Hour => HOUR,
            Unit::Day => DAY,
            Unit::Week => 7 * DAY,
            Unit::Month => 30 * DAY,
            Unit::Year => 365 * DAY,
        }
    }

    /// The Envoy RLS v3 enum value.
    pub fn proto(self) -> i32 {
        match self {
            Unit::Second => 1,
            Unit::Minute => 2,
            Unit::Hour => 3,
            Unit::Day => 4,
            Unit::Month => 5,
            Unit::Year => 6,
            Unit::Week => 7,
        }
    }

    /// The unit of an Envoy RLS v3 enum value (`RateLimitUnit` /
    /// `RateLimitResponse.RateLimit.Unit`; 0 is `UNKNOWN`).
    pub fn from_proto(v: i32) -> Option<Unit> {
        Some(match v {
            1 => Unit::Second,
            2 => Unit::Minute,
            3 => Unit::Hour,
            4 => Unit::Day,
            5 => Unit::Month,
            6 => Unit::Year,
            7 => Unit::Week,
            _ => return None,
        })
    }

    /// The lowercase name.
    pub fn name(self) -> &'static str {
        match self {
            Unit::Second => "second",
            Unit::Minute => "minute",
            Unit::Hour => "hour",
            Unit::Day => "day",
            Unit::Week => "week",
            Unit::Month => "month",
            Unit::Year => "year",
        }
    }
}

impl<'de> Deserialize<'de> for Unit {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = Unit;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a unit: second, minute, hour, day, week, month or year")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Unit, E> {
                Unit::parse(v).ok_or_else(|| {
                    E::custom(format!(
                        "invalid rate limit unit {v:?} (second, minute, hour, day, week, month, year)"
                    ))
                })
            }
        }
        d.deserialize_str(V)
    }
}

/// A descriptor's rate limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EnvoyLimitKind {
    /// `requests_per_unit` per `unit` (0 blocks every request).
    Limited {
        /// The unit (window).
        unit: Unit,
        /// Requests per unit.
        requests_per_unit: u32,
    },
    /// `unlimited: true`: always OK.
    Unlimited,
}

/// A descriptor's `rate_limit` block.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(try_from = "RawRateLimit")]
pub struct EnvoyRateLimit {
    /// Optional name, the target of other limits' `replaces`.
    pub name: Option<String>,
    /// Names of limits this one replaces when both match.
    pub replaces: Vec<String>,
    /// The limit.
    pub kind: EnvoyLimitKind,
}

impl TryFrom<RawRateLimit> for EnvoyRateLimit {
    type Error = String;
    fn try_from(r: RawRateLimit) -> Result<Self, String> {
        let kind = if r.unlimited {
            if r.unit.is_some() || r.requests_per_unit.is_some() {
                return Err(
                    "an unlimited rate_limit must not also set unit or requests_per_unit".into(),
                );
            }
            EnvoyLimitKind::Unlimited
        } else {
            let unit = r
                .unit
                .ok_or("rate_limit needs a unit (second, minute, hour, day, week, month, year)")?;
            let requests_per_unit = r
                .requests_per_unit
                .ok_or("rate_limit needs requests_per_unit")?;
            EnvoyLimitKind::Limited {
                unit,
                requests_per_unit,
            }
        };
        let mut replaces = Vec::new();
        for rep in r.replaces {
            if rep.name.is_empty() {
                return Err("should not have an empty replaces entry (each needs a name)".into());
            }
            if r.name.as_deref() == Some(rep.name.as_str()) {
                return Err(format!(
                    "replaces should not contain name of same descriptor ({:?})",
                    rep.name
                ));
            }
            replaces.push(rep.name);
        }
        Ok(EnvoyRateLimit {
            name: r.name.filter(|n| !n.is_empty()),
            replaces,
            kind,
        })
    }
}

impl TryFrom<RawDescriptor> for EnvoyDescriptor {
    type Error = String;
    fn try_from(r: RawDescriptor) -> Result<Self, String> {
        if r.key.is_empty() {
            return Err("descriptor has empty key".into());
        }
        let rate_limit = r.rate_limit;
        let descriptors = r.descriptors.unwrap_or_default();
        let mut seen = BTreeSet::new();
        for d in &descriptors {
            if !seen.insert((d.key.as_str(), d.value.as_deref())) {
                return Err(format!(
                    "duplicate descriptor composite key {:?}",
                    composite(&d.key, d.value.as_deref())
                ));
            }
        }
        let value = r.value.filter(|v| !v.is_empty());
        // envoyproxy/ratelimit's rule and words (config_impl.go).
        if r.share_threshold && !value.as_deref().is_some_and(|v| v.contains('*')) {
            return Err(format!(
                "share_threshold can only be used with wildcard values (containing '*'), but found key '{}'",
                composite(&r.key, value.as_deref())
            ));
        }
        let metadata = match r.metadata {
            None | Some(serde_norway::Value::Null) => None,
            Some(serde_norway::Value::Mapping(m)) => Some(m),
            Some(_) => {
                return Err(format!(
                    "metadata of descriptor {:?} must be a map",
                    composite(&r.key, value.as_deref())
                ));
            }
        };
        Ok(EnvoyDescriptor {
            key: r.key,
            value,
            metadata,
            rate_limit,
            shadow_mode: r.shadow_mode,
            quota_mode: r.quota_mode,
            detailed_metric: r.detailed_metric,
            value_to_metric: r.value_to_metric,
            share_threshold: r.share_threshold,
            descriptors,
        })
    }
}

/// `key_value` or `key`: envoyproxy/ratelimit's name of a descriptor level.
pub fn composite(key: &str, value: Option<&str>) -> String {
    match value {
        Some(v) => format!("{key}_{v}"),
        None => key.to_string(),
    }
}

/// Parses one envoyproxy/ratelimit file.
pub fn parse_domain(text: &str, source: &str) -> Result<EnvoyDomain, ConfigError> {
    let d: EnvoyDomain =
        serde_norway::from_str(text).map_err(|e| crate::yaml::yaml_error(source, &e))?;
    d.check(text, source)?;
    Ok(d)
}

impl EnvoyDomain {
    pub(crate) fn check(&self, text: &str, source: &str) -> Result<(), ConfigError> {
        if self.domain.is_empty() {
            return Err(
                ConfigError::new(source, "the domain must not be empty").locate(text, &["domain"])
            );
        }
        let mut seen = BTreeSet::new();
        for d in &self.descriptors {
            if !seen.insert((d.key.as_str(), d.value.as_deref())) {
                return Err(ConfigError::new(
                    source,
                    format!(
                        "duplicate descriptor composite key {:?}",
                        composite(&d.key, d.value.as_deref())
                    ),
                )
                .locate_nth(text, &["key:", &d.key], 1));
            }
        }
        Ok(())
    }
}
