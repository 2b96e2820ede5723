//! The dynamic metadata of an Envoy RLS answer
//! (`server.envoy_response_dynamic_metadata`, envoyproxy/ratelimit's
//! `RESPONSE_DYNAMIC_METADATA`): a `google.protobuf.Struct` that Envoy
//! hands to later filters and access logs.
//!
//! Its fields, as the reference fills them (`ratelimitToMetadata` in its
//! `src/service/ratelimit.go`):
//! - `domain`: the request's domain;
//! - `descriptors`: per request descriptor, `entries` (`"key=value"`
//!   strings), `limit` (the override, in protobuf text form) and
//!   `hitsAddend` (a per-descriptor hits addend), each when present;
//! - `hitsAddend`: the request's, when not 0;
//! - `metadata`: the `metadata` maps of the rules of the descriptors that
//!   passed (not over their limit, not unlimited), merged in descriptor
//!   order: a key already present keeps its value, except that two maps
//!   under one key merge the same way, recursively. Absent when empty.

use std::collections::HashMap;

use drl_api::rls_request::RequestView;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use envoy_types::pb::google::protobuf::{ListValue, Struct, Value, value::Kind};

/// A descriptor's `metadata` map from its YAML, as a `Struct`: strings,
/// numbers, booleans, null, lists and maps as themselves; a key that is
/// not a string is written as YAML writes it; a tagged value is its value.
pub fn struct_of_yaml(m: &serde_norway::Mapping) -> Struct {
    Struct {
        fields: m
            .iter()
            .map(|(k, v)| (yaml_key(k), value_of_yaml(v)))
            .collect(),
    }
}

fn yaml_key(k: &serde_norway::Value) -> String {
    match k {
        serde_norway::Value::String(s) => s.clone(),
        other => serde_norway::to_string(other)
            .map(|s| s.trim_end().to_string())
            .unwrap_or_default(),
    }
}

fn value_of_yaml(v: &serde_norway::Value) -> Value {
    use serde_norway::Value as Y;
    let kind = match v {
        Y::Null => Kind::NullValue(0),
        Y::Bool(b) => Kind::BoolValue(*b),
        Y::Number(n) => Kind::NumberValue(n.as_f64().unwrap_or(0.0)),
        Y::String(s) => Kind::StringValue(s.clone()),
        Y::Sequence(items) => Kind::ListValue(ListValue {
            values: items.iter().map(value_of_yaml).collect(),
        }),
        Y::Mapping(m) => Kind::StructValue(struct_of_yaml(m)),
        Y::Tagged(t) => return value_of_yaml(&t.value),
    };
    Value { kind: Some(kind) }
}

fn string(s: String) -> Value {
    Value {
        kind: Some(Kind::StringValue(s)),
    }
}

fn number(n: u64) -> Value {
    Value {
        kind: Some(Kind::NumberValue(n as f64)),
    }
}

/// Merges `src` into `dest`: a key `dest` lacks is added; a key both hold
/// as maps merges recursively; any other key keeps `dest`'s value.
pub fn merge(dest: &mut Struct, src: &Struct) {
    for (k, v) in &src.fields {
        match dest.fields.get_mut(k) {
            None => {
                dest.fields.insert(k.clone(), v.clone());
            }
            Some(Value {
                kind: Some(Kind::StructValue(d)),
            }) => {
                if let Some(Kind::StructValue(s)) = &v.kind {
                    merge(d, s);
                }
            }
            Some(_) => {}
        }
    }
}

/// The dynamic metadata of the answer to `req`, whose descriptors that
/// passed carried the rules' `metadata` maps `passed`, in descriptor order.
pub fn response_metadata<'a>(
    req: &RequestView<'_>,
    passed: impl IntoIterator<Item = &'a Struct>,
) -> Struct {
    let mut fields = HashMap::new();
    fields.insert("domain".to_string(), string(req.domain.to_string()));
    let descriptors = req
        .descriptors
        .iter()
        .map(|d| {
            let mut f = HashMap::new();
            let entries = d
                .entries
                .iter()
                .map(|e| string(format!("{}={}", e.key, e.value)))
                .collect();
            f.insert(
                "entries".to_string(),
                Value {
                    kind: Some(Kind::ListValue(ListValue { values: entries })),
                },
            );
            if let Some(o) = d.limit {
                let unit = Unit::try_from(o.unit)
                    .map_or_else(|_| o.unit.to_string(), |u| u.as_str_name().to_string());
                f.insert(
                    "limit".to_string(),
                    string(format!(
                        "requests_per_unit:{} unit:{unit}",
                        o.requests_per_unit
                    )),
                );
            }
            if let Some(h) = d.hits_addend {
                f.insert("hitsAddend".to_string(), number(h));
            }
            Value {
                kind: Some(Kind::StructValue(Struct { fields: f })),
            }
        })
        .collect();
    fields.insert(
        "descriptors".to_string(),
        Value {
            kind: Some(Kind::ListValue(ListValue {
                values: descriptors,
            })),
        },
    );
    if req.hits_addend != 0 {
        fields.insert("hitsAddend".to_string(), number(u64::from(req.hits_addend)));
    }
    let mut merged = Struct::default();
    for m in passed {
        merge(&mut merged, m);
    }
    if !merged.fields.is_empty() {
        fields.insert(
            "metadata".to_string(),
            Value {
                kind: Some(Kind::StructValue(merged)),
            },
        );
    }
    Struct { fields }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn yaml(s: &str) -> Struct {
        match serde_norway::from_str::<serde_norway::Value>(s).unwrap() {
            serde_norway::Value::Mapping(m) => struct_of_yaml(&m),
            v => panic!("not a map: {v:?}"),
        }
    }

    fn str_of(s: &Struct, k: &str) -> Option<String> {
        match &s.fields.get(k)?.kind {
            Some(Kind::StringValue(v)) => Some(v.clone()),
            _ => None,
        }
    }

    #[test]
    fn yaml_values_become_struct_values() {
        let s = yaml("name: a\nn: 2.5\nb: true\nz: null\nl: [1, x]\nm: {k: v}\n7: seven\n");
        assert_eq!(str_of(&s, "name").as_deref(), Some("a"));
        assert_eq!(s.fields["n"].kind, Some(Kind::NumberValue(2.5)));
        assert_eq!(s.fields["b"].kind, Some(Kind::BoolValue(true)));
        assert_eq!(s.fields["z"].kind, Some(Kind::NullValue(0)));
        let Some(Kind::ListValue(l)) = &s.fields["l"].kind else {
            panic!("a list")
        };
        assert_eq!(l.values.len(), 2);
        let Some(Kind::StructValue(m)) = &s.fields["m"].kind else {
            panic!("a map")
        };
        assert_eq!(str_of(m, "k").as_deref(), Some("v"));
        assert_eq!(str_of(&s, "7").as_deref(), Some("seven"));
    }

    // envoyproxy/ratelimit test/service/ratelimit_test.go:
    // TestOverlappingMetadataReturnsTheFirstValue, and its mergeMetadata's
    // recursion into maps.
    #[test]
    fn the_first_value_of_a_key_wins_and_maps_merge() {
        let mut d = yaml("name: service_1\nnested: {a: 1}\n");
        merge(
            &mut d,
            &yaml("name: service_2\nother: x\nnested: {a: 2, b: 3}\n"),
        );
        assert_eq!(str_of(&d, "name").as_deref(), Some("service_1"));
        assert_eq!(str_of(&d, "other").as_deref(), Some("x"));
        let Some(Kind::StructValue(n)) = &d.fields["nested"].kind else {
            panic!("a map")
        };
        assert_eq!(n.fields["a"].kind, Some(Kind::NumberValue(1.0)));
        assert_eq!(n.fields["b"].kind, Some(Kind::NumberValue(3.0)));
    }
}
