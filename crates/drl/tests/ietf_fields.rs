//! End-to-end: the `RateLimit-Policy` and `RateLimit` fields and the 429
//! body a real `drl serve` forward-auth (`/v1/auth/{limit}`) answers, read
//! with a structured-field parser (`sfv`, RFC 9651) and checked against
//! draft-ietf-httpapi-ratelimit-headers-11: both fields are Lists of String
//! items with Integer parameters (§3, §4), the `RateLimit` item names a
//! listed policy (the one that binds), `Retry-After` does not end before
//! the effective window `t` (§6), and a denial is a `quota-exceeded`
//! problem with `violated-policies` (§5.1).

mod common;

use common::{Drl, header, http_request};
use sfv::{BareItem, ListEntry, Parser};

const CONFIG: &str = r#"
limits:
  - name: solo
    algorithm: token-bucket
    quota: 2/h
    key:
      headers: [x-k]
  - name: minute-binds
    algorithm: token-bucket
    quotas: [5/h, 2/m]
    key:
      headers: [x-k]
  - name: hour-binds
    algorithm: token-bucket
    quotas: [2/h, 5/m]
    key:
      headers: [x-k]
"#;

/// One item: its String and its parameters, each a non-negative Integer.
#[derive(Debug)]
struct Item {
    name: String,
    params: Vec<(String, u64)>,
}

impl Item {
    fn get(&self, k: &str) -> Option<u64> {
        self.params.iter().find(|(n, _)| n == k).map(|p| p.1)
    }
}

/// `v` parsed as an sf-list; panics unless every member is a String item
/// whose parameters are non-negative Integers.
fn list(v: &str) -> Vec<Item> {
    let parsed: sfv::List = Parser::new(v)
        .parse()
        .unwrap_or_else(|e| panic!("{v:?} is no sf-list: {e}"));
    parsed
        .into_iter()
        .map(|e| {
            let ListEntry::Item(i) = e else {
                panic!("{v:?}: an inner list")
            };
            let BareItem::String(name) = &i.bare_item else {
                panic!("{v:?}: an item that is not a String")
            };
            let params = i
                .params
                .iter()
                .map(|(k, p)| {
                    let n = p.as_integer().unwrap_or_else(|| panic!("{v:?}: {k:?}"));
                    let n = u64::try_from(i64::from(n)).expect("non-negative");
                    (k.as_str().to_owned(), n)
                })
                .collect();
            Item {
                name: name.as_str().to_owned(),
                params,
            }
        })
        .collect()
}

/// One forward-auth answer, its fields parsed: status, policy items, the
/// `RateLimit` item, `Retry-After`, body.
struct Answer {
    status: u16,
    policy: Vec<Item>,
    rl: Item,
    retry_after: Option<u64>,
    body: String,
}

fn ask(drl: &Drl, limit: &str, key: &str) -> Answer {
    let url = drl.url(&format!("/v1/auth/{limit}"));
    let (status, h, body) = http_request("GET", &url, &[("x-k", key)], b"").unwrap();
    let policy = list(header(&h, "ratelimit-policy").expect("RateLimit-Policy"));
    let mut rl = list(header(&h, "ratelimit").expect("RateLimit"));
    assert_eq!(rl.len(), 1, "one service limit item");
    let rl = rl.remove(0);
    // The draft's parameters only, with the draft's ranges.
    for p in &policy {
        assert!(p.get("q").is_some(), "q is required: {p:?}");
        assert!(p.get("w").is_none_or(|w| w >= 1), "w is non-zero: {p:?}");
        assert!(p.params.iter().all(|(k, _)| k == "q" || k == "w"), "{p:?}");
    }
    assert!(rl.get("r").is_some() && rl.get("t").is_some(), "{rl:?}");
    assert_eq!(rl.params.len(), 2, "{rl:?}");
    assert!(
        policy.iter().any(|p| p.name == rl.name),
        "RateLimit names {:?}, not a listed policy: {policy:?}",
        rl.name
    );
    let retry_after = header(&h, "retry-after").map(|v| v.parse().unwrap());
    Answer {
        status,
        policy,
        rl,
        retry_after,
        body,
    }
}

/// Admissions down to `r=0`, then a 429; each `RateLimit` names `binds`.
fn run(drl: &Drl, limit: &str, binds: &str, policy: &[(&str, u64, u64)], key: &str) {
    for r in (0..2).rev() {
        let a = ask(drl, limit, key);
        assert_eq!(a.status, 200, "{}", a.body);
        let listed: Vec<_> = a
            .policy
            .iter()
            .map(|p| (p.name.as_str(), p.get("q").unwrap(), p.get("w").unwrap()))
            .collect();
        assert_eq!(listed, policy);
        assert_eq!(a.rl.name, binds);
        assert_eq!(a.rl.get("r"), Some(r));
        assert!(a.retry_after.is_none());
    }
    let denied = ask(drl, limit, key);
    assert_eq!(denied.status, 429, "{}", denied.body);
    assert_eq!(denied.rl.name, binds);
    assert_eq!(denied.rl.get("r"), Some(0));
    // Retry-After does not point before the end of the effective window.
    let retry = denied
        .retry_after
        .expect("Retry-After on a denial a wait admits");
    assert!(
        retry >= denied.rl.get("t").unwrap(),
        "{retry} {:?}",
        denied.rl
    );
    let p: serde_json::Value = serde_json::from_str(&denied.body).unwrap();
    assert_eq!(
        p["type"],
        "https://iana.org/assignments/http-problem-types#quota-exceeded"
    );
    assert_eq!(p["status"], 429);
    assert_eq!(p["violated-policies"], serde_json::json!([binds]));
    assert_eq!(p["limit"], limit);
    assert!(p["retry_after_ms"].as_u64().unwrap() > 0);
}

#[test]
fn a_single_quota_limit_names_its_policy() {
    let drl = Drl::start(CONFIG);
    run(&drl, "solo", "solo", &[("solo", 2, 3600)], "a");
}

#[test]
fn a_multi_quota_limit_names_the_quota_that_binds() {
    let drl = Drl::start(CONFIG);
    let minute = [("minute-binds.0", 5, 3600), ("minute-binds.1", 2, 60)];
    run(&drl, "minute-binds", "minute-binds.1", &minute, "a");
    let hour = [("hour-binds.0", 2, 3600), ("hour-binds.1", 5, 60)];
    run(&drl, "hour-binds", "hour-binds.0", &hour, "a");
}
