//! limitador itself as the oracle: the `limitador` crate (limitador-server's
//! library, from crates.io) and a real `drl serve` are given the same limits
//! file, then the same random sequences of Envoy RLS `ShouldRateLimit`,
//! Kuadrant `CheckRateLimit` and `Report` calls, each mapped to the
//! library call limitador-server's handlers make
//! (`check_rate_limited_and_update`, `is_rate_limited(.., 1)` and
//! `update_counters`, with the descriptors bound as `descriptors` and a
//! `hits_addend` of 0 meaning 1). Every answer must be the same.
//!
//! Windows are an hour and a run takes seconds: limitador's windows start
//! at a counter's first hit and drl's at the top of the hour (drl's test
//! launcher starts clear of it), so no window ends within a run. Each
//! sequence uses its own `app.id` values, so the sequences of one process
//! never share a counter.

mod common;

use std::collections::HashMap;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use common::Drl;
use drl_api::kuadrant::rate_limit_service_client::RateLimitServiceClient as KuadrantClient;
use drl_test_kit::envoy::request;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use limitador::RateLimiter;
use limitador::limit::{Context, Expression, Limit, Predicate};
use proptest::prelude::*;

/// (namespace, max_value, conditions, variables), every window an hour.
const LIMITS: &[(&str, u64, &[&str], &[&str])] = &[
    (
        "api",
        5,
        &["descriptors[0].method == 'GET'"],
        &["descriptors[0].app"],
    ),
    (
        "api",
        3,
        &["descriptors[0].method == 'POST'"],
        &["descriptors[0].app"],
    ),
    ("api", 7, &[], &["descriptors[0].app"]),
    (
        "api",
        0,
        &["descriptors[0].method == 'DELETE'"],
        &["descriptors[0].app"],
    ),
    (
        "two",
        4,
        &[
            "descriptors[0].method == 'GET'",
            "descriptors[1].tier == 'free'",
        ],
        &["descriptors[0].app"],
    ),
    (
        "two",
        9,
        &[],
        &["descriptors[0].app", "descriptors[1].tier"],
    ),
];

/// The limits as limitador's YAML limits file.
fn yaml() -> String {
    let mut s = String::from("---\n");
    for (ns, max, conds, vars) in LIMITS {
        let list = |xs: &[&str]| {
            xs.iter()
                .map(|x| format!("\"{x}\""))
                .collect::<Vec<_>>()
                .join(", ")
        };
        s.push_str(&format!(
            "- namespace: {ns}\n  max_value: {max}\n  seconds: 3600\n  conditions: [{}]\n  variables: [{}]\n",
            list(conds),
            list(vars)
        ));
    }
    s
}

fn oracle() -> RateLimiter {
    let rl = RateLimiter::new(10_000);
    for (ns, max, conds, vars) in LIMITS {
        rl.add_limit(Limit::new(
            *ns,
            *max,
            3600,
            conds.iter().map(|c| Predicate::parse(*c).unwrap()),
            vars.iter().map(|v| Expression::parse(*v).unwrap()),
        ));
    }
    rl
}

#[derive(Debug, Clone)]
enum Call {
    Should,
    Check,
    Report,
}

#[derive(Debug, Clone)]
struct Step {
    call: Call,
    namespace: &'static str,
    method: &'static str,
    app: u8,
    tier: Option<&'static str>,
    hits: u32,
}

fn step() -> impl Strategy<Value = Step> {
    (
        prop_oneof![Just(Call::Should), Just(Call::Check), Just(Call::Report)],
        prop_oneof![Just("api"), Just("two"), Just("none")],
        prop_oneof![Just("GET"), Just("POST"), Just("DELETE")],
        0u8..2,
        prop_oneof![Just(None), Just(Some("free")), Just(Some("paid"))],
        0u32..4,
    )
        .prop_map(|(call, namespace, method, app, tier, hits)| Step {
            call,
            namespace,
            method,
            app,
            // `two`'s limits read `descriptors[1]`, which the library's
            // condition evaluation requires to exist (it panics on an
            // index out of bounds): always send it there.
            tier: if namespace == "two" {
                tier.or(Some("paid"))
            } else {
                tier
            },
            hits,
        })
}

struct Under {
    drl: Drl,
    rt: tokio::runtime::Runtime,
    oracle: RateLimiter,
}

fn under() -> &'static Under {
    static U: OnceLock<Under> = OnceLock::new();
    U.get_or_init(|| Under {
        drl: Drl::start(&yaml()),
        rt: tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap(),
        oracle: oracle(),
    })
}

static SEQUENCE: AtomicU64 = AtomicU64::new(0);

/// drl's overall code (or error status) and limitador's for one step.
fn both(u: &Under, s: &Step, seq: u64) -> (Result<i32, tonic::Code>, Result<i32, tonic::Code>) {
    let app = format!("{seq}-{}", s.app);
    let mut first = vec![("method", s.method), ("app", app.as_str())];
    first.sort_unstable();
    let mut descriptors: Vec<Vec<(&str, &str)>> = vec![first];
    if let Some(t) = s.tier {
        descriptors.push(vec![("tier", t)]);
    }
    let refs: Vec<&[(&str, &str)]> = descriptors.iter().map(Vec::as_slice).collect();
    let req = request(s.namespace, &refs, s.hits);
    let drl_answer = u.rt.block_on(async {
        let answer = match s.call {
            Call::Should => {
                RateLimitServiceClient::connect(u.drl.grpc_url())
                    .await
                    .unwrap()
                    .should_rate_limit(req)
                    .await
            }
            Call::Check => {
                KuadrantClient::connect(u.drl.grpc_url())
                    .await
                    .unwrap()
                    .check_rate_limit(req)
                    .await
            }
            Call::Report => {
                KuadrantClient::connect(u.drl.grpc_url())
                    .await
                    .unwrap()
                    .report(req)
                    .await
            }
        };
        answer
            .map(|a| a.into_inner().overall_code)
            .map_err(|e| e.code())
    });
    // limitador-server's handlers.
    let values: Vec<HashMap<String, String>> = descriptors
        .iter()
        .map(|d| {
            d.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        })
        .collect();
    let mut ctx = Context::default();
    ctx.list_binding("descriptors".to_string(), values);
    let ns = s.namespace.into();
    let hits = u64::from(if s.hits == 0 { 1 } else { s.hits });
    // An error of the library is limitador-server's UNAVAILABLE.
    let limited = match s.call {
        Call::Should => u
            .oracle
            .check_rate_limited_and_update(&ns, &ctx, hits, false)
            .map(|r| r.limited),
        Call::Check => u.oracle.is_rate_limited(&ns, &ctx, 1).map(|r| r.limited),
        Call::Report => u.oracle.update_counters(&ns, &ctx, hits).map(|()| false),
    };
    let oracle_answer = limited
        .map(|l| if l { Code::OverLimit } else { Code::Ok } as i32)
        .map_err(|_| tonic::Code::Unavailable);
    (drl_answer, oracle_answer)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Every call of a random sequence answers as limitador answers.
    #[test]
    fn drl_answers_as_limitador(steps in prop::collection::vec(step(), 1..40)) {
        let u = under();
        let seq = SEQUENCE.fetch_add(1, Ordering::Relaxed);
        for (i, s) in steps.iter().enumerate() {
            let (drl, lim) = both(u, s, seq);
            prop_assert_eq!(drl, lim, "step {} {:?}", i, s);
        }
    }
}
