//! Prometheus metrics. Handles are registered once per limit at config
//! load, so a decision only bumps an atomic. Labels are bounded: the limit
//! name (from the config) and the result, never the key.
//!
//! - `drl_decisions_total{limit,result}`: result is `allowed` or `denied`
//!   (a shadow-mode limit counts what it would have decided).
//! - `drl_shadow_allowed_total{limit}`: denials a shadow-mode limit let through.
//! - `drl_request_duration_seconds{api}`: time to decide one request (a
//!   batch counts once), api in `http_check|forward_auth|grpc_check|envoy_rls`.
//! - `drl_requests_rejected_total{api,reason}`: requests refused before
//!   deciding (bad JSON, unknown limit, bad cost, ...).
//! - `drl_config_reloads_total{result}`: `ok` or `error`.
//! - `drl_keys_held{limit}`, `drl_key_bytes_held{limit}` (gauges) and
//!   `drl_keys_evicted_total{limit,kind}` (`fresh`: no effect on decisions;
//!   `live`: that key's state folded into the limit's summary of evicted
//!   state, never an over-admission), `drl_keys_summary_denials_total`
//!   (denials the summary made where a fresh key would have been
//!   admitted: what bounded memory costs): the
//!   in-memory table of every `local` limit, read at scrape time
//!   ([`register_table`]), never on the decision path.
//!
//! The first three are written on every decision and live in per-thread
//! shards ([`crate::sharded`]), rendered by [`render`]; everything else
//! goes through the `metrics` crate and its Prometheus recorder, whose
//! output [`render`] appends.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

use drl_core::KeyedLimiter;
use drl_http::prometheus::{Exposition, Kind};

use crate::sharded::{Counters, LATENCY_BOUNDS_NS, LatencyHistogram, le_label};

const ALLOWED: usize = 0;
const DENIED: usize = 1;
const SHADOW: usize = 2;

/// Every limit's counters by name. Registering a name again (a reload, or
/// a second engine in the process) returns the same counters, so they
/// never go back to zero while the process runs.
fn limit_registry() -> &'static Mutex<BTreeMap<String, Arc<LimitCounts>>> {
    static R: OnceLock<Mutex<BTreeMap<String, Arc<LimitCounts>>>> = OnceLock::new();
    R.get_or_init(Default::default)
}

/// One limit name's counters, and whether it ever decided (read once a
/// second by the status sampler for every configured limit: one flag, not
/// the sum of every shard, so idle limits cost next to nothing).
#[derive(Debug, Default)]
struct LimitCounts {
    counts: Counters<3>,
    used: std::sync::atomic::AtomicBool,
}

/// Bumped whenever a limit name decides for the first time (rare: once
/// per name per process), so the status sampler re-reads which limits are
/// used only then, instead of touching every configured limit each second.
static FIRST_USES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How many limit names have decided for the first time so far (see
/// [`LimitMetrics::used`]).
pub fn first_uses() -> u64 {
    FIRST_USES.load(std::sync::atomic::Ordering::Acquire)
}

impl LimitCounts {
    #[inline]
    fn mark_used(&self) {
        use std::sync::atomic::Ordering::{AcqRel, Relaxed};
        // A load first: after the first decision the line is only read.
        if !self.used.load(Relaxed) && !self.used.swap(true, AcqRel) {
            FIRST_USES.fetch_add(1, AcqRel);
        }
    }
}

/// One limit's decision counters.
#[derive(Debug, Clone)]
pub struct LimitMetrics {
    counts: Arc<LimitCounts>,
    /// What the status page records (latency, top keys), if it is on.
    status: Option<Arc<crate::status::LimitStatus>>,
}

impl LimitMetrics {
    /// The counters of limit `name` (created at zero the first time).
    pub fn new(name: &str) -> Self {
        let mut r = limit_registry().lock().unwrap_or_else(|e| e.into_inner());
        let counts = Arc::clone(r.entry(name.to_string()).or_default());
        Self {
            counts,
            status: None,
        }
    }

    /// These counters, with the status page's recording `status`.
    pub fn with_status(mut self, status: Option<Arc<crate::status::LimitStatus>>) -> Self {
        self.status = status;
        self
    }

    /// The status page's recording for this limit, if on.
    #[inline]
    pub fn status(&self) -> Option<&crate::status::LimitStatus> {
        self.status.as_deref()
    }

    /// Counts one decision.
    #[inline]
    pub fn record(&self, allowed: bool) {
        self.counts.mark_used();
        self.counts
            .counts
            .add(if allowed { ALLOWED } else { DENIED }, 1);
    }

    /// Counts `allowed` admissions and `denied` denials at once.
    #[inline]
    pub fn record_many(&self, allowed: u64, denied: u64) {
        self.counts.mark_used();
        self.counts
            .counts
            .add_each([(ALLOWED, allowed), (DENIED, denied)]);
    }

    /// Counts a denial that shadow mode let through.
    #[inline]
    pub fn shadow_allowed(&self) {
        self.counts.mark_used();
        self.counts.counts.add(SHADOW, 1);
    }

    /// (allowed, denied, shadow-allowed) so far.
    pub fn totals(&self) -> (u64, u64, u64) {
        (
            self.counts.counts.get(ALLOWED),
            self.counts.counts.get(DENIED),
            self.counts.counts.get(SHADOW),
        )
    }

    /// True once this limit name decided anything (since the process
    /// started; reloads keep it).
    #[inline]
    pub fn used(&self) -> bool {
        self.counts.used.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// A keyed table reported under a limit name.
struct Table {
    limiter: std::sync::Weak<KeyedLimiter<String>>,
    /// (evicted_fresh, evicted_live, summary_denials) when last read.
    seen: (u64, u64, u64),
}

/// What the tables of one name reported: live ones, and the evictions of
/// tables already dropped (as last read).
#[derive(Default)]
struct Tables {
    live: Vec<Table>,
    dropped: (u64, u64, u64),
}

fn table_registry() -> &'static Mutex<BTreeMap<String, Tables>> {
    static R: OnceLock<Mutex<BTreeMap<String, Tables>>> = OnceLock::new();
    R.get_or_init(Default::default)
}

/// Reports the in-memory table `limiter` under limit `name` in the
/// keys-held and eviction series (once per table; several tables may share
/// a name, e.g. the overrides of a domain, and are summed). Held weakly:
/// a table dropped by a reload leaves the series, its evictions (as last
/// scraped) stay counted.
pub fn register_table(name: &str, limiter: &Arc<KeyedLimiter<String>>) {
    let mut r = table_registry().lock().unwrap_or_else(|e| e.into_inner());
    let t = r.entry(name.to_string()).or_default();
    let weak = Arc::downgrade(limiter);
    if !t.live.iter().any(|x| x.limiter.ptr_eq(&weak)) {
        t.live.push(Table {
            limiter: weak,
            seen: (0, 0, 0),
        });
    }
}

/// Keys held, bytes held, evicted fresh, evicted live, summary denials,
/// per limit name.
type TableRow = (String, usize, usize, u64, u64, u64);

/// Reads every registered table (shard read locks, at scrape time).
fn table_rows() -> Vec<TableRow> {
    let mut r = table_registry().lock().unwrap_or_else(|e| e.into_inner());
    let mut rows = Vec::with_capacity(r.len());
    for (name, t) in r.iter_mut() {
        let (mut keys, mut bytes) = (0, 0);
        let mut dropped = t.dropped;
        t.live.retain_mut(|x| match x.limiter.upgrade() {
            Some(l) => {
                let s = l.stats();
                x.seen = (s.evicted_fresh, s.evicted_live, s.summary_denials);
                keys += s.keys;
                bytes += s.bytes;
                true
            }
            None => {
                dropped.0 += x.seen.0;
                dropped.1 += x.seen.1;
                dropped.2 += x.seen.2;
                false
            }
        });
        t.dropped = dropped;
        let (fresh, live, denials) = t.live.iter().fold(dropped, |(f, l, d), x| {
            (f + x.seen.0, l + x.seen.1, d + x.seen.2)
        });
        rows.push((name.clone(), keys, bytes, fresh, live, denials));
    }
    rows
}

/// Appends the keyed-table series.
fn render_tables(out: &mut Exposition) {
    let rows = table_rows();
    if rows.is_empty() {
        return;
    }
    let held = "drl_keys_held";
    out.family(
        held,
        Kind::Gauge,
        "Keys held in memory per local limit (at most max_keys).",
    );
    for (name, keys, ..) in &rows {
        out.sample(held, &[("limit", name)], *keys);
    }
    let bytes_held = "drl_key_bytes_held";
    out.family(
        bytes_held,
        Kind::Gauge,
        "Bytes of keys and state held per local limit (entries plus key bytes; at most max_bytes).",
    );
    for (name, _, bytes, ..) in &rows {
        out.sample(bytes_held, &[("limit", name)], *bytes);
    }
    let evicted = "drl_keys_evicted_total";
    out.family(evicted, Kind::Counter, "Keys dropped to stay within max_keys / max_bytes: fresh (no effect on decisions) or live (folded into the limit's summary of evicted state: never an over-admission).");
    for (name, _, _, fresh, live, _) in &rows {
        for (kind, n) in [("fresh", fresh), ("live", live)] {
            out.sample(evicted, &[("limit", name), ("kind", kind)], *n);
        }
    }
    let denials = "drl_keys_summary_denials_total";
    out.family(denials, Kind::Counter, "Denials by the summary of evicted state where a fresh key would have been admitted (the false denials bounded memory costs).");
    for (name, .., n) in &rows {
        out.sample(denials, &[("limit", name)], *n);
    }
}

/// The APIs that decide, as metric labels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    /// `POST /v1/check`.
    HttpCheck,
    /// The forward-auth endpoint.
    ForwardAuth,
    /// The native gRPC API.
    GrpcCheck,
    /// Envoy RLS v3.
    EnvoyRls,
}

impl Api {
    /// Every API, in label order.
    pub const ALL: [Api; 4] = [
        Api::HttpCheck,
        Api::ForwardAuth,
        Api::GrpcCheck,
        Api::EnvoyRls,
    ];

    /// The label value.
    pub fn label(self) -> &'static str {
        match self {
            Api::HttpCheck => "http_check",
            Api::ForwardAuth => "forward_auth",
            Api::GrpcCheck => "grpc_check",
            Api::EnvoyRls => "envoy_rls",
        }
    }
}

fn latency() -> &'static [LatencyHistogram; Api::ALL.len()] {
    static H: OnceLock<[LatencyHistogram; Api::ALL.len()]> = OnceLock::new();
    H.get_or_init(Default::default)
}

/// The per-API latency histograms (one set per process).
#[derive(Debug, Clone)]
pub struct ApiMetrics {
    hist: &'static [LatencyHistogram; Api::ALL.len()],
}

impl Default for ApiMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl ApiMetrics {
    /// The process's histograms.
    pub fn new() -> Self {
        Self { hist: latency() }
    }

    /// Records one request's decision time.
    #[inline]
    pub fn observe(&self, api: Api, since: Instant) {
        let ns = u64::try_from(since.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.observe_ns(api, ns);
    }

    /// Records one request of `api` that took `ns` nanoseconds (for the
    /// APIs that already read the clock at both ends of their decisions).
    #[inline]
    pub fn observe_ns(&self, api: Api, ns: u64) {
        self.hist[api as usize].record_ns(ns);
    }
}

/// Appends the decision counters and latency histograms.
fn render_hot(out: &mut Exposition) {
    let limits: Vec<(String, Arc<LimitCounts>)> = {
        let r = limit_registry().lock().unwrap_or_else(|e| e.into_inner());
        r.iter().map(|(k, v)| (k.clone(), Arc::clone(v))).collect()
    };
    if !limits.is_empty() {
        let decisions = "drl_decisions_total";
        out.family(decisions, Kind::Counter, "Decisions per limit and result (a shadow-mode limit counts what it would have decided).");
        for (name, c) in &limits {
            for (result, i) in [("allowed", ALLOWED), ("denied", DENIED)] {
                out.sample(
                    decisions,
                    &[("limit", name), ("result", result)],
                    c.counts.get(i),
                );
            }
        }
        let shadow = "drl_shadow_allowed_total";
        out.family(
            shadow,
            Kind::Counter,
            "Denials a shadow-mode limit let through.",
        );
        for (name, c) in &limits {
            out.sample(shadow, &[("limit", name)], c.counts.get(SHADOW));
        }
    }
    out.family(
        "drl_request_duration_seconds",
        Kind::Histogram,
        "Time to decide one request (a batch counts once).",
    );
    for (api, h) in Api::ALL.iter().zip(latency()) {
        histogram(
            out,
            "drl_request_duration_seconds",
            &[("api", api.label())],
            &h.snapshot(),
        );
    }
}

/// Appends the series of one latency histogram `name` (its family line
/// written by the caller), labelled by `label`.
pub(crate) fn histogram(
    out: &mut Exposition,
    name: &str,
    labels: &[(&str, &str)],
    s: &crate::sharded::LatencySnapshot,
) {
    let bucket = format!("{name}_bucket");
    let les: Vec<String> = LATENCY_BOUNDS_NS.iter().map(|&b| le_label(b)).collect();
    let bounds = les.iter().map(String::as_str).chain(["+Inf"]);
    let counts = s.cumulative.iter().copied().chain([s.count]);
    for (le, n) in bounds.zip(counts) {
        let mut l: Vec<(&str, &str)> = labels.to_vec();
        l.push(("le", le));
        out.sample(&bucket, &l, n);
    }
    out.sample(&format!("{name}_sum"), labels, s.sum_ns as f64 / 1e9);
    out.sample(&format!("{name}_count"), labels, s.count);
}

/// Envoy RLS calls answered (the latency histogram's count and sum), and
/// calls refused with an error, for envoyproxy/ratelimit's
/// `total_requests` and `response_time` ([`crate::envoy_stats`]).
pub(crate) fn rls_calls() -> (crate::sharded::LatencySnapshot, u64) {
    (
        latency()[Api::EnvoyRls as usize].snapshot(),
        rls_errors().get(0),
    )
}

fn rls_errors() -> &'static Counters<1> {
    static C: OnceLock<Counters<1>> = OnceLock::new();
    C.get_or_init(Default::default)
}

/// The whole `/metrics` page: the decision counters and latency histograms,
/// then everything recorded through the `metrics` crate.
pub fn render(handle: &PrometheusHandle) -> String {
    let mut out = Exposition::with_capacity(8192);
    render_hot(&mut out);
    render_tables(&mut out);
    crate::envoy_stats::render(&mut out);
    out.push_page(&handle.render());
    out.finish()
}
/// Counts a request refused before deciding.
pub fn rejected(api: Api, reason: &'static str) {
    metrics::counter!("drl_requests_rejected_total", "api" => api.label(), "reason" => reason)
        .increment(1);
    if api == Api::EnvoyRls {
        rls_errors().add(0, 1);
        // envoyproxy/ratelimit's error counter: a store that failed is its
        // `redis_error`, anything else its `service_error`.
        crate::envoy_stats::call_failed(reason == "store_unavailable");
    }
}

/// Installs the Prometheus recorder (once per process) and returns its handle.
pub fn install() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let recorder = PrometheusBuilder::new().build_recorder();
            let handle = recorder.handle();
            // Fails only if another recorder was installed first (tests);
            // then this handle renders an empty registry, which is fine.
            let _ = metrics::set_global_recorder(recorder);
            handle
        })
        .clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page() -> String {
        render(&PrometheusBuilder::new().build_recorder().handle())
    }

    fn sample(page: &str, series: &str) -> Option<String> {
        page.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
            .map(str::to_string)
    }

    #[test]
    fn limit_counters_render_with_escaped_names_and_survive_re_registration() {
        let name = "tests.render \"quoted\" back\\slash";
        let m = LimitMetrics::new(name);
        m.record(true);
        m.record(true);
        m.record(false);
        m.record_many(3, 4);
        m.shadow_allowed();
        // A reload registers the name again: same counters.
        let again = LimitMetrics::new(name);
        again.record(false);
        assert_eq!(m.totals(), (5, 6, 1));
        let p = page();
        let esc = r#"tests.render \"quoted\" back\\slash"#;
        assert_eq!(
            sample(
                &p,
                &format!(r#"drl_decisions_total{{limit="{esc}",result="allowed"}}"#)
            )
            .as_deref(),
            Some("5"),
            "{p}"
        );
        assert_eq!(
            sample(
                &p,
                &format!(r#"drl_decisions_total{{limit="{esc}",result="denied"}}"#)
            )
            .as_deref(),
            Some("6")
        );
        assert_eq!(
            sample(&p, &format!(r#"drl_shadow_allowed_total{{limit="{esc}"}}"#)).as_deref(),
            Some("1")
        );
        // One TYPE line per metric family.
        assert_eq!(p.matches("# TYPE drl_decisions_total counter").count(), 1);
    }

    #[test]
    fn latency_renders_as_a_cumulative_prometheus_histogram() {
        let m = ApiMetrics::new();
        let before = latency()[Api::ForwardAuth as usize].snapshot();
        m.observe(Api::ForwardAuth, Instant::now());
        let after = latency()[Api::ForwardAuth as usize].snapshot();
        assert_eq!(after.count, before.count + 1);
        let p = page();
        let bucket = |le: &str| {
            sample(
                &p,
                &format!(r#"drl_request_duration_seconds_bucket{{api="forward_auth",le="{le}"}}"#),
            )
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or_else(|| panic!("no bucket le={le} in\n{p}"))
        };
        let mut prev = 0;
        let labels = LATENCY_BOUNDS_NS.iter().map(|&b| le_label(b));
        for le in labels.chain(["+Inf".to_string()]) {
            let n = bucket(&le);
            assert!(n >= prev, "bucket le={le} went down");
            prev = n;
        }
        let count = sample(
            &p,
            r#"drl_request_duration_seconds_count{api="forward_auth"}"#,
        );
        assert_eq!(count.and_then(|v| v.parse::<u64>().ok()), Some(prev));
        assert!(prev >= 1);
        // Every API has its series, recorded or not.
        for api in Api::ALL {
            assert!(
                p.contains(&format!(
                    r#"drl_request_duration_seconds_count{{api="{}"}}"#,
                    api.label()
                )),
                "{p}"
            );
        }
    }
}
