//! The stats key envoyproxy/ratelimit gives a descriptor's counters when
//! values may name it (`server.envoy_stats_values`), as its `GetLimit`
//! builds it (`src/config/config_impl.go`):
//!
//! - a `detailed_metric` rule: the domain and every entry as `key_value`
//!   (entries matched through a `share_threshold` wildcard as
//!   `key_PATTERN`, so that they stay one series);
//! - otherwise the domain and, per entry, its key followed by `_VALUE`
//!   where the entry matched an exact value (that value), a wildcard (the
//!   pattern; the request's value if the node has `value_to_metric` and
//!   no `share_threshold`) or the key alone with `value_to_metric` (the
//!   request's value). Without either flag this is the rule's path.
//! - an override: the domain and every entry as `key_value` (`key` for an
//!   empty value).

use crate::limits::{EnvoyLevel, Matched};

/// The key of the descriptor `entries` of `domain`, whose rule (found by
/// walking `root`) is `detailed` or not.
pub fn reference_key<'a>(
    domain: &str,
    root: &EnvoyLevel,
    entries: impl IntoIterator<Item = (&'a str, &'a str)> + Clone,
    detailed: bool,
) -> String {
    let mut level = root;
    let mut by_value = String::from(domain);
    let mut shared: Vec<Option<String>> = Vec::new();
    for (k, v) in entries.clone() {
        let Some((node, how)) = level.find_how(k, v) else {
            push_entry(&mut by_value, k, None);
            shared.push(None);
            break;
        };
        let share = match &how {
            Matched::Wildcard(p) if node.share_threshold => Some(p.clone()),
            _ => None,
        };
        let value = match &how {
            Matched::Wildcard(p) => match &share {
                Some(p) => p.as_str(),
                None if node.value_to_metric => v,
                None => p.as_str(),
            },
            Matched::Exact => v,
            Matched::Key if node.value_to_metric => v,
            Matched::Key => "",
        };
        push_entry(&mut by_value, k, (!value.is_empty()).then_some(value));
        shared.push(share);
        if node.children.is_empty() {
            break;
        }
        level = &node.children;
    }
    if !detailed {
        return by_value;
    }
    let mut key = String::from(domain);
    let any_shared = shared.iter().any(Option::is_some);
    for (i, (k, v)) in entries.into_iter().enumerate() {
        let value = match shared.get(i).and_then(Option::as_deref) {
            Some(p) => Some(p),
            None if any_shared && v.is_empty() => None,
            None => Some(v),
        };
        push_entry(&mut key, k, value);
    }
    key
}

/// An override's key: the domain and every entry as `key_value` (`key`
/// for an empty value).
pub fn override_key<'a>(
    domain: &str,
    entries: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> String {
    let mut key = String::from(domain);
    for (k, v) in entries {
        push_entry(&mut key, k, (!v.is_empty()).then_some(v));
    }
    key
}

/// Appends one entry: `.key`, then `_value` if there is one.
fn push_entry(key: &mut String, k: &str, value: Option<&str>) {
    key.push('.');
    key.push_str(k);
    if let Some(v) = value {
        key.push('_');
        key.push_str(v);
    }
}
