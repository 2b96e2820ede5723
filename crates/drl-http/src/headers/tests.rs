//! The fields as a structured-field parser (`sfv`, RFC 9651) reads them,
//! against draft-ietf-httpapi-ratelimit-headers-11's types.

use super::*;
use drl_core::{Algorithm, DenyReason, Limiter, MultiLimiter};
use proptest::prelude::*;
use sfv::{BareItem, ListEntry, Parser};

fn denial(retry_ms: Option<u64>) -> Decision {
    Decision {
        allowed: false,
        remaining: 0,
        limit: 100,
        retry_after: retry_ms.map(|m| m * 1_000_000),
        reset_after: 1_500_000_000,
        delay: 0,
        reason: Some(DenyReason::OverLimit),
    }
}

/// One parsed item: its String and its Integer parameters. Fails on any
/// other item or parameter type, or on a negative Integer.
#[derive(Debug)]
struct Parsed {
    name: String,
    params: Vec<(String, u64)>,
}

impl Parsed {
    fn get(&self, k: &str) -> Option<u64> {
        self.params.iter().find(|(n, _)| n == k).map(|p| p.1)
    }
}

/// `v` parsed as an sf-list of String items with non-negative Integer
/// parameters (the draft's §3 and §4 types).
fn parse_list(v: &HeaderValue) -> Result<Vec<Parsed>, String> {
    let list: sfv::List = Parser::new(v.as_bytes())
        .parse()
        .map_err(|e| format!("{v:?}: {e}"))?;
    let mut out = Vec::new();
    for entry in list {
        let ListEntry::Item(item) = entry else {
            return Err(format!("{v:?}: an inner list"));
        };
        let BareItem::String(name) = &item.bare_item else {
            return Err(format!("{v:?}: item not a String"));
        };
        let mut params = Vec::new();
        for (k, p) in &item.params {
            let n = p
                .as_integer()
                .ok_or_else(|| format!("{v:?}: {} not an Integer", k.as_str()))?;
            let n = u64::try_from(i64::from(n)).map_err(|_| format!("{v:?}: negative"))?;
            params.push((k.as_str().to_owned(), n));
        }
        out.push(Parsed {
            name: name.as_str().to_owned(),
            params,
        });
    }
    Ok(out)
}

fn names(p: &[Parsed]) -> Vec<&str> {
    p.iter().map(|i| i.name.as_str()).collect()
}

#[test]
fn policy_lists_each_quota_with_its_window() {
    let one = [Quota::parse("100/s").unwrap()];
    assert_eq!(policy("api", &one), "\"api\";q=100;w=1");
    let two = [Quota::parse("5/h").unwrap(), Quota::parse("2/m").unwrap()];
    let p = policy("m", &two);
    assert_eq!(p, "\"m.0\";q=5;w=3600, \"m.1\";q=2;w=60");
    let parsed = parse_list(&p).unwrap();
    assert_eq!(names(&parsed), ["m.0", "m.1"]);
    // No sub-second window in the draft: `w` is left out, never rounded.
    let half = [Quota::new(10, SECOND / 2).unwrap()];
    assert_eq!(policy("h", &half), "\"h\";q=10");
}

#[test]
fn names_become_valid_strings() {
    let one = [Quota::parse("1/s").unwrap()];
    let p = policy("a\"b\\c é", &one);
    assert_eq!(p, r#""a\"b\\c %C3%A9";q=1;w=1"#);
    assert_eq!(parse_list(&p).unwrap()[0].name, "a\"b\\c %C3%A9");
    let d = denial(Some(10));
    let rl = ratelimit(&p, &d);
    assert_eq!(parse_list(&rl).unwrap()[0].name, "a\"b\\c %C3%A9");
    assert_eq!(binding_name(&p, &d), "a\"b\\c %C3%A9");
}

#[test]
fn integers_are_capped_at_fifteen_digits() {
    let mut d = denial(None);
    d.allowed = true;
    d.remaining = u64::MAX;
    d.limit = u64::MAX;
    let p = policy_of_decision("x", &d);
    assert_eq!(p, "\"x\";q=999999999999999");
    let rl = ratelimit(&p, &d);
    assert_eq!(parse_list(&rl).unwrap()[0].get("r"), Some(SF_INTEGER_MAX));
}

#[test]
fn ratelimit_names_the_binding_quota() {
    let two = [Quota::parse("5/h").unwrap(), Quota::parse("2/m").unwrap()];
    let p = policy("m", &two);
    let mut d = denial(Some(1_001));
    d.limit = 2;
    assert_eq!(ratelimit(&p, &d), "\"m.1\";r=0;t=2");
    d.limit = 5;
    assert_eq!(ratelimit(&p, &d), "\"m.0\";r=0;t=2");
    assert_eq!(binding_name(&p, &d), "m.0");
    // Equal quotas: the longest window.
    let same = [Quota::parse("2/s").unwrap(), Quota::parse("2/m").unwrap()];
    d.limit = 2;
    assert_eq!(binding_name(&policy("s", &same), &d), "s.1");
    // A decision no quota matches (failure policy): the first.
    d.limit = 77;
    assert_eq!(binding_name(&p, &d), "m.0");
}

#[test]
fn t_and_retry_after_agree_on_a_denial() {
    let p = policy("api", &[Quota::parse("100/s").unwrap()]);
    let d = denial(Some(1_001));
    assert_eq!(ratelimit(&p, &d), "\"api\";r=0;t=2");
    assert_eq!(retry_after(&d).unwrap(), "2");
    assert_eq!(retry_after(&denial(Some(0))).unwrap(), "1");
    assert_eq!(ratelimit(&p, &denial(Some(0))), "\"api\";r=0;t=1");
    // No wait admits: no Retry-After, `t` is the reset.
    assert!(retry_after(&denial(None)).is_none());
    assert_eq!(ratelimit(&p, &denial(None)), "\"api\";r=0;t=2");
    let mut ok = denial(Some(0));
    ok.allowed = true;
    assert!(retry_after(&ok).is_none());
    assert_eq!(ratelimit(&p, &ok), "\"api\";r=0;t=2");
    assert_eq!(policy_of_decision("api", &d), "\"api\";q=100");
}

fn quota() -> impl Strategy<Value = Quota> {
    (
        1u64..=1_000_000_000_000_000_000,
        prop_oneof![(1u64..=86_400).prop_map(|s| s * SECOND), 1u64..=10 * SECOND,],
    )
        .prop_filter_map("valid quota", |(l, w)| Quota::new(l, w).ok())
}

fn decision(limits: Vec<u64>) -> impl Strategy<Value = Decision> {
    (
        any::<bool>(),
        any::<u64>(),
        prop_oneof![proptest::sample::select(limits), any::<u64>()],
        proptest::option::of(any::<u64>()),
        any::<u64>(),
    )
        .prop_map(
            |(allowed, remaining, limit, retry_after, reset_after)| Decision {
                allowed,
                remaining,
                limit,
                retry_after: if allowed { Some(0) } else { retry_after },
                reset_after,
                delay: 0,
                reason: (!allowed).then_some(DenyReason::OverLimit),
            },
        )
}

proptest! {
    /// Every field written parses as an sf-list of Strings with the
    /// draft's Integer parameters; `RateLimit` has one item, naming a
    /// policy `RateLimit-Policy` lists, the one whose `q` is the
    /// decision's when there is one.
    #[test]
    fn every_field_parses_as_the_draft_says(
        name in "[ -~\\té]{0,12}",
        (quotas, d) in proptest::collection::vec(quota(), 1..5).prop_flat_map(|qs| {
            let limits = qs.iter().map(|q| q.limit()).collect();
            (Just(qs), decision(limits))
        }),
        from_decision in any::<bool>(),
    ) {
        let p = if from_decision { policy_of_decision(&name, &d) } else { policy(&name, &quotas) };
        let pol = parse_list(&p).map_err(TestCaseError::fail)?;
        prop_assert!(!pol.is_empty());
        for item in &pol {
            prop_assert!(item.get("q").is_some(), "{:?}", p);
            if let Some(w) = item.get("w") {
                prop_assert!(w >= 1);
            }
            for (k, _) in &item.params {
                prop_assert!(k == "q" || k == "w", "{:?}", p);
            }
        }
        let mut unique = names(&pol);
        unique.dedup();
        prop_assert_eq!(unique.len(), pol.len());
        if !from_decision {
            for (item, q) in pol.iter().zip(&quotas) {
                prop_assert_eq!(item.get("q"), Some(q.limit().min(SF_INTEGER_MAX)));
                if q.window() % SECOND == 0 {
                    prop_assert_eq!(item.get("w"), Some(q.window() / SECOND));
                } else {
                    prop_assert_eq!(item.get("w"), None);
                }
            }
        }

        let rl = ratelimit(&p, &d);
        let rl_items = parse_list(&rl).map_err(TestCaseError::fail)?;
        prop_assert_eq!(rl_items.len(), 1);
        let it = &rl_items[0];
        let named = pol.iter().find(|i| i.name == it.name);
        prop_assert!(named.is_some(), "{:?} names no item of {:?}", rl, p);
        prop_assert_eq!(it.params.len(), 2);
        prop_assert_eq!(it.get("r"), Some(d.remaining.min(SF_INTEGER_MAX)));
        let t = it.get("t").unwrap();
        match retry_after(&d) {
            Some(ra) => prop_assert_eq!(ra.to_str().unwrap().parse::<u64>().unwrap(), t),
            None => prop_assert_eq!(t, ceil_secs(d.reset_after)),
        }
        let q = d.limit.min(SF_INTEGER_MAX);
        if pol.iter().any(|i| i.get("q") == Some(q)) {
            prop_assert_eq!(named.unwrap().get("q"), Some(q));
        }
        prop_assert_eq!(binding_name(&p, &d), it.name.clone());
    }

    /// Against drl-core's multi-quota limiter: the item `RateLimit` names
    /// is a quota whose remaining is at least `r` (never a promise beyond
    /// a listed policy), and exactly the binding one (its remaining is
    /// `r`) when the quotas' limits differ.
    #[test]
    fn the_named_quota_binds(
        algorithm in proptest::sample::select(Algorithm::ALL.to_vec()),
        spec in proptest::collection::vec((1u64..6, 1u64..5), 2..4),
        steps in proptest::collection::vec((0u64..3 * SECOND, 1u64..4), 1..40),
    ) {
        let quotas: Vec<Quota> = spec
            .iter()
            .map(|&(l, w)| Quota::new(l, w * SECOND / 2).unwrap())
            .collect();
        let distinct = {
            let mut l: Vec<u64> = quotas.iter().map(|q| q.limit()).collect();
            l.sort_unstable();
            l.windows(2).all(|w| w[0] != w[1])
        };
        let m = MultiLimiter::uniform(algorithm, &quotas);
        let p = policy("api", &quotas);
        let mut states = m.new_states();
        let mut now = 1_000 * SECOND;
        for (dt, cost) in steps {
            now += dt;
            // Each quota's own answer, as the combined decision sees it.
            let parts: Vec<Decision> = m
                .parts()
                .iter()
                .zip(&states)
                .map(|(l, s): (&Limiter, _)| l.check(s, now, cost))
                .collect();
            let d = m.decide(&mut states, now, cost);
            let name = binding_name(&p, &d);
            let i: usize = name.strip_prefix("api.").unwrap().parse().unwrap();
            let least = parts.iter().map(|x| x.remaining).min().unwrap();
            prop_assert_eq!(d.remaining, least);
            prop_assert!(parts[i].remaining >= d.remaining);
            if distinct {
                prop_assert_eq!(parts[i].remaining, d.remaining, "{:?} {:?}", parts, d);
            }
        }
    }
}
