//! What a remote check answers when the service cannot decide it within
//! its deadline (down, unreachable, overloaded): the same three choices as
//! the server's store failure policy.

use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;

use drl_core::time::SECOND;
use drl_core::{Decision, DenyReason, KeyedConfig, KeyedLimiter, MultiLimiter, Nanos, Quota};

use crate::config::ClientConfig;

/// The failure policy of a remote client.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum FailurePolicy {
    /// Deny (fail closed), with `Retry-After: 1`.
    Deny,
    /// Admit (fail open).
    Allow,
    /// Decide in this process at `fraction` (0 < f <= 1) of each quota
    /// (e.g. 1/N of it with N clients). Needs the limits' config
    /// ([`crate::RemoteBuilder::config_file`]).
    Local(f64),
}

impl fmt::Display for FailurePolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FailurePolicy::Deny => f.write_str("deny"),
            FailurePolicy::Allow => f.write_str("allow"),
            FailurePolicy::Local(x) => write!(f, "local({x})"),
        }
    }
}

impl FromStr for FailurePolicy {
    type Err = String;
    /// `deny`, `allow`, or `local(0.5)` / `local:0.5`.
    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim();
        match s {
            "deny" => return Ok(Self::Deny),
            "allow" => return Ok(Self::Allow),
            _ => {}
        }
        let arg = s
            .strip_prefix("local(")
            .and_then(|r| r.strip_suffix(')'))
            .or_else(|| s.strip_prefix("local:"));
        match arg.map(|a| a.trim().parse::<f64>()) {
            Some(Ok(f)) if f > 0.0 && f <= 1.0 => Ok(Self::Local(f)),
            Some(_) => Err(format!(
                "failure policy {s:?}: the fraction must be a number in (0, 1], e.g. local(0.5)"
            )),
            None => Err(format!(
                "failure policy {s:?}: expected deny, allow or local(FRACTION)"
            )),
        }
    }
}

/// A quota scaled to `fraction` (at least one permit).
fn scaled(q: &Quota, fraction: f64) -> Quota {
    let f = |v: u64| ((v as f64 * fraction).floor() as u64).max(1);
    Quota::with_burst(f(q.limit()), q.window(), f(q.burst())).unwrap_or(*q)
}

/// The fallback decider: the policy plus, for `local`, one in-memory
/// limiter per configured limit.
#[derive(Debug)]
pub(crate) struct Fallback {
    policy: FailurePolicy,
    local: HashMap<String, KeyedLimiter<String>>,
    limits: HashMap<String, u64>,
}

impl Fallback {
    pub(crate) fn new(
        policy: FailurePolicy,
        config: Option<&ClientConfig>,
    ) -> Result<Self, String> {
        let mut local = HashMap::new();
        let mut limits = HashMap::new();
        if let Some(c) = config {
            for l in &c.limits {
                limits.insert(l.name.clone(), l.quotas[0].limit());
            }
        }
        if let FailurePolicy::Local(f) = policy {
            if !(f > 0.0 && f <= 1.0) {
                return Err(format!(
                    "failure policy local({f}): the fraction must be in (0, 1]"
                ));
            }
            let Some(c) = config else {
                return Err("failure policy local needs the limits' quotas: give the remote client the config file (config_file) or text (config_text)".into());
            };
            for l in &c.limits {
                let quotas: Vec<Quota> = l.quotas.iter().map(|q| scaled(q, f)).collect();
                let keyed = KeyedConfig {
                    max_keys: l.max_keys,
                    max_bytes: l.max_bytes,
                    ..KeyedConfig::default()
                };
                local.insert(
                    l.name.clone(),
                    KeyedLimiter::new(MultiLimiter::uniform(l.algorithm, &quotas), keyed),
                );
            }
        }
        Ok(Self {
            policy,
            local,
            limits,
        })
    }

    pub(crate) fn policy(&self) -> FailurePolicy {
        self.policy
    }

    /// The decision of a check the service could not decide.
    pub(crate) fn decide(&self, limit: &str, key: &str, cost: u64, now: Nanos) -> Decision {
        let quota = self.limits.get(limit).copied().unwrap_or(0);
        let deny = Decision {
            allowed: false,
            remaining: 0,
            limit: quota,
            retry_after: Some(SECOND),
            reset_after: 0,
            delay: 0,
            reason: Some(DenyReason::OverLimit),
        };
        match self.policy {
            FailurePolicy::Deny => deny,
            FailurePolicy::Allow => Decision {
                allowed: true,
                retry_after: Some(0),
                reason: None,
                ..deny
            },
            FailurePolicy::Local(_) => match self.local.get(limit) {
                Some(l) => l.decide(key, now, cost),
                // A limit the config does not know: fail closed.
                None => deny,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_three_policies() {
        assert_eq!("deny".parse::<FailurePolicy>(), Ok(FailurePolicy::Deny));
        assert_eq!("allow".parse::<FailurePolicy>(), Ok(FailurePolicy::Allow));
        assert_eq!(
            "local(0.25)".parse::<FailurePolicy>(),
            Ok(FailurePolicy::Local(0.25))
        );
        assert_eq!(
            "local:1".parse::<FailurePolicy>(),
            Ok(FailurePolicy::Local(1.0))
        );
        assert!("local(0)".parse::<FailurePolicy>().is_err());
        assert!("local(2)".parse::<FailurePolicy>().is_err());
        assert!("open".parse::<FailurePolicy>().is_err());
    }

    #[test]
    fn local_decides_at_the_fraction_of_the_quota() {
        let c = ClientConfig::parse(
            "limits:\n  - name: h\n    algorithm: fixed-window\n    quota: 10/h\n",
            "t",
        )
        .unwrap();
        let f = Fallback::new(FailurePolicy::Local(0.5), Some(&c)).unwrap();
        let admitted = (0..20).filter(|_| f.decide("h", "k", 1, 1).allowed).count();
        assert_eq!(admitted, 5);
        assert!(!f.decide("unknown", "k", 1, 1).allowed);
        assert!(Fallback::new(FailurePolicy::Local(0.5), None).is_err());
    }
}
