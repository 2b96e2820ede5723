//! [`Limits`]: a configuration compiled for deciding. Built once per
//! (re)load; every request then finds its limit by one hash lookup and
//! decides through a pre-resolved [`Backend`].

use std::collections::HashMap;
use std::sync::Arc;

use drl_core::{Algorithm, Quota};
use drl_store::LimitSpec;
use http::{HeaderName, HeaderValue};

use crate::headers;
use crate::metrics::LimitMetrics;
use crate::scope::{Backend, KeyBounds, Stores};
use drl_config::envoy::{EnvoyDescriptor, EnvoyDomain, EnvoyLimitKind, Unit, composite};
use drl_config::{Config, ConfigError, KeyConfig, ListenConfig, Scope, ServerConfig};

type FastMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

/// How forward-auth derives a key from headers.
#[derive(Debug, Clone)]
pub struct KeyMapping {
    /// The headers whose values, joined by `|`, make the key.
    pub headers: Vec<HeaderName>,
    /// Stands in for a missing header.
    pub default: Option<String>,
}

impl KeyMapping {
    /// The mapping a limit's `key:` section describes.
    pub fn from_config(k: &KeyConfig) -> Self {
        Self {
            headers: k
                .headers
                .iter()
                .filter_map(|h| HeaderName::from_bytes(h.to_ascii_lowercase().as_bytes()).ok())
                .collect(),
            default: k.default.clone(),
        }
    }
}

/// One decidable limit.
#[derive(Debug)]
pub struct Limit {
    /// The name clients use and metrics show.
    pub name: Arc<str>,
    /// Algorithm and quotas.
    pub spec: LimitSpec,
    /// Where state lives.
    pub scope: Scope,
    /// Most keys and bytes held.
    pub bounds: KeyBounds,
    /// How it decides.
    pub backend: Backend,
    /// Always allow, but count what would have been denied.
    pub shadow: bool,
    /// Forward-auth key mapping.
    pub key: KeyMapping,
    /// Pre-registered metric handles.
    pub metrics: LimitMetrics,
    /// The `RateLimit-Policy` header value.
    pub policy: HeaderValue,
    /// Open reservations (HTTP and native APIs); shared with the limit it
    /// replaces when a reload keeps its state ([`Limits::keep_reservations`]).
    pub reservations: Arc<crate::reservations::Reservations>,
}

/// What an Envoy descriptor node limits to.
#[derive(Debug)]
pub enum RuleKind {
    /// `unlimited: true`.
    Unlimited,
    /// `requests_per_unit: 0`: every request is over the limit.
    Block(LimitMetrics),
    /// A fixed-window limit.
    Limited(Arc<Limit>),
}

/// A `rate_limit` of an Envoy descriptor node.
#[derive(Debug)]
pub struct EnvoyRule {
    /// The stats path, e.g. `messaging.message_type_marketing.to_number`.
    pub path: Arc<str>,
    /// What it limits to.
    pub kind: RuleKind,
    /// `rate_limit.name`.
    pub name: Option<String>,
    /// `rate_limit.replaces`.
    pub replaces: Vec<String>,
    /// `shadow_mode`.
    pub shadow: bool,
    /// `quota_mode`.
    pub quota: bool,
    /// Per entry of the descriptors it matches: the wildcard value to count
    /// under instead of the request's value, where the path to this rule
    /// went through a `share_threshold` wildcard (empty when none did).
    pub share: Vec<Option<Arc<str>>>,
    /// Window unit (`Second` for unlimited).
    pub unit: Unit,
    /// Requests per unit (0 for unlimited).
    pub requests_per_unit: u32,
    /// The descriptor's `metadata` map, for the answer's dynamic metadata
    /// (`server.envoy_response_dynamic_metadata`).
    pub metadata: Option<Arc<envoy_types::pb::google::protobuf::Struct>>,
    /// envoyproxy/ratelimit's stats of this rule (none for unlimited).
    pub stats: Option<crate::envoy_stats::EnvoyStats>,
    /// `detailed_metric` (stats named by the request's values, with
    /// `server.envoy_stats_values`).
    pub detailed: bool,
}

/// A node of a domain's descriptor tree.
#[derive(Debug, Default)]
pub struct EnvoyNode {
    /// The rule when a request descriptor ends here.
    pub rule: Option<EnvoyRule>,
    /// Nested descriptors.
    pub children: EnvoyLevel,
    /// `value_to_metric` of this descriptor.
    pub value_to_metric: bool,
    /// `share_threshold` of this descriptor.
    pub share_threshold: bool,
}

/// How an entry found its node ([`EnvoyLevel::find_how`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Matched {
    /// By its exact value.
    Exact,
    /// By a wildcard value (the pattern, `*` included).
    Wildcard(String),
    /// By the key alone (no value in the config).
    Key,
}

/// One level of a descriptor tree, by key.
#[derive(Debug, Default)]
pub struct EnvoyLevel {
    by_key: FastMap<String, KeyNodes>,
}

#[derive(Debug, Default)]
struct KeyNodes {
    exact: FastMap<String, EnvoyNode>,
    /// Values with `*` (anywhere), split on it, in config order.
    wildcards: Vec<(Vec<String>, EnvoyNode)>,
    any: Option<Box<EnvoyNode>>,
}

/// True if `value` matches a pattern split on `*` (each `*` matches any
/// run of characters, the empty one too), as envoyproxy/ratelimit matches
/// wildcard values (`foo*`, `bar*b`, `foo*bar*baz`).
pub fn wildcard_match(parts: &[String], value: &str) -> bool {
    let (Some(first), Some(last)) = (parts.first(), parts.last()) else {
        return false;
    };
    if parts.len() == 1 {
        return first == value;
    }
    let fixed: usize = parts.iter().map(String::len).sum();
    if value.len() < fixed || !value.starts_with(first.as_str()) || !value.ends_with(last.as_str())
    {
        return false;
    }
    let mut rest = &value[first.len()..value.len() - last.len()];
    for part in &parts[1..parts.len() - 1] {
        match rest.find(part.as_str()) {
            Some(i) => rest = &rest[i + part.len()..],
            None => return false,
        }
    }
    true
}

impl EnvoyLevel {
    /// The node for an entry, as envoyproxy/ratelimit picks it: the exact
    /// value, then the first wildcard value (in config order) that
    /// matches, then the key alone.
    pub fn find(&self, key: &str, value: &str) -> Option<&EnvoyNode> {
        let k = self.by_key.get(key)?;
        if let Some(n) = k.exact.get(value) {
            return Some(n);
        }
        if let Some((_, n)) = k.wildcards.iter().find(|(p, _)| wildcard_match(p, value)) {
            return Some(n);
        }
        k.any.as_deref()
    }

    /// [`EnvoyLevel::find`], saying how the node was found.
    pub fn find_how(&self, key: &str, value: &str) -> Option<(&EnvoyNode, Matched)> {
        let k = self.by_key.get(key)?;
        if let Some(n) = k.exact.get(value) {
            return Some((n, Matched::Exact));
        }
        if let Some((p, n)) = k.wildcards.iter().find(|(p, _)| wildcard_match(p, value)) {
            return Some((n, Matched::Wildcard(p.join("*"))));
        }
        k.any.as_deref().map(|n| (n, Matched::Key))
    }

    /// True when the level has no descriptors.
    pub fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }
}

/// The rule for a request descriptor, matched as envoyproxy/ratelimit
/// does: walk the tree one entry per level; the descriptor gets the rule of
/// the node its last entry lands on (none if the walk leaves the tree
/// early, or the node has no `rate_limit`).
pub fn match_descriptor<I, K, V>(root: &EnvoyLevel, entries: I) -> Option<&EnvoyRule>
where
    I: IntoIterator<Item = (K, V)>,
    K: AsRef<str>,
    V: AsRef<str>,
{
    let mut level = root;
    let mut node = None;
    for (k, v) in entries {
        let n = level.find(k.as_ref(), v.as_ref())?;
        node = Some(n);
        level = &n.children;
    }
    node?.rule.as_ref()
}

/// Up to this many native limits, [`Limits::get`] scans their names
/// instead of hashing: a hash and a probe cost about 90 instructions per
/// check (callgrind; docs/performance.md, "The service"), a scan of a few names far
/// fewer.
pub const SCAN_NAMES: usize = 8;

/// A compiled configuration.
#[derive(Debug)]
pub struct Limits {
    /// Native limits, in config order.
    pub limits: Vec<Arc<Limit>>,
    /// The names of `limits`, in the same order: searched in place when
    /// there are at most [`SCAN_NAMES`] of them.
    names: Box<[Box<str>]>,
    by_name: FastMap<Box<str>, usize>,
    /// Envoy domains by name.
    pub domains: FastMap<String, EnvoyLevel>,
    /// Every fixed-window limit made from Envoy descriptors (and from
    /// limitador limits files).
    pub envoy_limits: Vec<Arc<Limit>>,
    /// limitador limits by namespace (RLS domain).
    pub limitador: crate::limitador::rules::Namespaces,
    /// True when every limit in `envoy_limits` is in memory (`local`): an
    /// Envoy RLS call then never waits on a store, and is answered without
    /// a future ([`crate::grpc::hot`]).
    pub rls_in_memory: bool,
    /// The store of Envoy rules and overrides under `server.envoy_scope:
    /// redis` (a [`Backend::Store`]; `None`: in memory).
    pub envoy_store: Option<Backend>,
    /// The local over-limit cache of `envoy_store`'s rules
    /// (`server.envoy_local_cache_bytes` > 0).
    pub envoy_local_cache: Option<Arc<crate::envoy_local_cache::LocalCache>>,
    /// Request bounds.
    pub server: ServerConfig,
    /// Listener addresses (read at start only).
    pub listen: ListenConfig,
    /// False only for [`Limits::not_loaded`]: no configuration has loaded
    /// yet, and every decision is refused.
    pub loaded: bool,
}

impl Limits {
    /// Compiles `config`, wiring each limit to its store in `stores`.
    pub fn build(config: &Config, stores: &Stores, source: &str) -> Result<Limits, ConfigError> {
        let mut limits = Vec::with_capacity(config.limits.len());
        let mut by_name = FastMap::default();
        for (i, l) in config.limits.iter().enumerate() {
            let spec = LimitSpec::new(l.name.clone(), l.algorithm, l.quotas.clone());
            let bounds = KeyBounds {
                max_keys: l.max_keys,
                max_bytes: l.max_bytes,
            };
            let backend = stores
                .backend(l.scope, &spec, bounds)
                .map_err(|e| ConfigError::new(source, format!("limit {:?}: {e}", l.name)))?;
            if let Backend::Local(t) = &backend {
                crate::metrics::register_table(&l.name, t);
            }
            let name: Arc<str> = Arc::from(l.name.as_str());
            limits.push(Arc::new(Limit {
                policy: headers::policy(&name, &l.quotas),
                metrics: LimitMetrics::new(&name).with_status(
                    config
                        .status
                        .enabled
                        .then(|| crate::status::for_limit(&name, l.top_keys)),
                ),
                name,
                spec,
                scope: l.scope,
                bounds,
                backend,
                shadow: l.shadow,
                key: KeyMapping::from_config(&l.key),
                reservations: Default::default(),
            }));
            by_name.insert(Box::from(l.name.as_str()), i);
        }
        let mut domains = FastMap::default();
        let mut envoy_limits = Vec::new();
        for d in &config.envoy {
            let level = build_domain(
                d,
                config.server.envoy_scope,
                stores,
                source,
                &mut envoy_limits,
            )?;
            domains.insert(d.domain.clone(), level);
        }
        let limitador =
            crate::limitador::rules::build(&config.limitador, stores, source, &mut envoy_limits)?;
        let envoy_store = match config.server.envoy_scope {
            Scope::Local => None,
            scope => {
                // The store itself, for overrides (a probe spec: no state;
                // an hour, so the main Redis, never `redis_per_second`).
                let probe = LimitSpec::new(
                    String::new(),
                    drl_core::Algorithm::FixedWindow,
                    vec![drl_core::Quota::new(1, drl_core::time::HOUR).expect("a valid quota")],
                );
                match stores.backend(scope, &probe, envoy_bounds()) {
                    Ok(b @ Backend::Store(_)) => Some(b),
                    Ok(Backend::Local(_)) => None,
                    Err(e) => {
                        return Err(ConfigError::new(source, format!("server.envoy_scope: {e}")));
                    }
                }
            }
        };
        let rls_in_memory =
            envoy_store.is_none() && envoy_limits.iter().all(|l| l.backend.local().is_some());
        let names = limits.iter().map(|l| Box::from(&*l.name)).collect();
        // The last step that can fail is done: the tags are this config's.
        crate::envoy_stats::set_tags(&config.server.envoy_stats_tags);
        Ok(Limits {
            limits,
            names,
            by_name,
            domains,
            envoy_limits,
            rls_in_memory,
            envoy_local_cache: (envoy_store.is_some() && config.server.envoy_local_cache_bytes > 0)
                .then(|| {
                    Arc::new(crate::envoy_local_cache::LocalCache::new(
                        config.server.envoy_local_cache_bytes,
                    ))
                }),
            envoy_store,
            limitador,
            server: config.server.clone(),
            listen: config.listen.clone(),
            loaded: true,
        })
    }

    /// What serves before the first configuration has loaded (`drl serve
    /// --wait-for-config`): no limit, no domain, default bounds, and
    /// `loaded` false, so that every API answers
    /// [`crate::engine::NOT_LOADED`] instead of deciding.
    pub fn not_loaded(stores: &Stores) -> Limits {
        let mut l = Limits::build(&Config::empty(), stores, "<not loaded>")
            .expect("an empty config always compiles");
        l.loaded = false;
        l
    }

    /// The native limit called `name`: a scan of the names when there are
    /// few (most configs: it compares lengths first, then the bytes of the
    /// names of that length), a hash lookup otherwise.
    #[inline]
    pub fn get(&self, name: &str) -> Option<&Arc<Limit>> {
        let i = if self.names.len() <= SCAN_NAMES {
            self.names.iter().position(|n| **n == *name)?
        } else {
            *self.by_name.get(name)?
        };
        Some(&self.limits[i])
    }

    /// (scope, spec, bounds) of every limit: what a reload must keep.
    pub fn live(&self) -> Vec<(Scope, LimitSpec, KeyBounds)> {
        self.limits
            .iter()
            .chain(self.envoy_limits.iter())
            .map(|l| (l.scope, l.spec.clone(), l.bounds))
            .collect()
    }

    /// After a reload: every native limit that keeps its state (same name,
    /// scope, spec and bounds as one of `old`) keeps `old`'s open
    /// reservations too, so that they settle with their refunds; the
    /// others start with none. Call before the limits are shared.
    pub fn keep_reservations(&mut self, old: &Limits) {
        for l in &mut self.limits {
            let Some(o) = old.get(&l.name) else { continue };
            if (o.scope, &o.spec, o.bounds) != (l.scope, &l.spec, l.bounds) {
                continue;
            }
            if let Some(l) = Arc::get_mut(l) {
                l.reservations = Arc::clone(&o.reservations);
            }
        }
    }

    /// Names of every native limit, in config order.
    pub fn names(&self) -> Vec<&str> {
        self.limits.iter().map(|l| &*l.name).collect()
    }
}

/// The bounds of every limit made from an Envoy descriptor (the file
/// format has no field for them): the defaults.
pub fn envoy_bounds() -> KeyBounds {
    KeyBounds::keys(drl_config::DEFAULT_MAX_KEYS)
}

fn build_domain(
    d: &EnvoyDomain,
    scope: Scope,
    stores: &Stores,
    source: &str,
    all: &mut Vec<Arc<Limit>>,
) -> Result<EnvoyLevel, ConfigError> {
    build_level(&d.descriptors, &d.domain, &[], scope, stores, source, all)
}

fn build_level(
    descriptors: &[EnvoyDescriptor],
    parent_path: &str,
    parent_share: &[Option<Arc<str>>],
    scope: Scope,
    stores: &Stores,
    source: &str,
    all: &mut Vec<Arc<Limit>>,
) -> Result<EnvoyLevel, ConfigError> {
    let mut level = EnvoyLevel::default();
    for d in descriptors {
        let path = format!("{parent_path}.{}", composite(&d.key, d.value.as_deref()));
        // The wildcard values this level's path counts under, one per level.
        let mut share = parent_share.to_vec();
        share.push(
            d.value
                .as_deref()
                .filter(|_| d.share_threshold)
                .map(Arc::from),
        );
        let rule_share = if share.iter().any(Option::is_some) {
            share.clone()
        } else {
            Vec::new()
        };
        let rule = match &d.rate_limit {
            None => None,
            Some(rl) => {
                let path: Arc<str> = Arc::from(path.as_str());
                let stats = (!matches!(rl.kind, EnvoyLimitKind::Unlimited))
                    .then(|| crate::envoy_stats::EnvoyStats::new(&path));
                let (kind, unit, rpu) = match rl.kind {
                    EnvoyLimitKind::Unlimited => (RuleKind::Unlimited, Unit::Second, 0),
                    EnvoyLimitKind::Limited {
                        requests_per_unit: 0,
                        unit,
                    } => (RuleKind::Block(LimitMetrics::new(&path)), unit, 0),
                    EnvoyLimitKind::Limited {
                        requests_per_unit,
                        unit,
                    } => {
                        let quota = Quota::new(u64::from(requests_per_unit), unit.window())
                            .map_err(|e| ConfigError::new(source, format!("{path}: {e}")))?;
                        let spec =
                            LimitSpec::new(path.to_string(), Algorithm::FixedWindow, vec![quota]);
                        let backend = stores
                            .backend(scope, &spec, envoy_bounds())
                            .map_err(|e| ConfigError::new(source, format!("{path}: {e}")))?;
                        if let Backend::Local(t) = &backend {
                            crate::metrics::register_table(&path, t);
                        }
                        let limit = Arc::new(Limit {
                            policy: headers::policy(&path, &[quota]),
                            metrics: LimitMetrics::new(&path),
                            name: path.clone(),
                            spec,
                            scope,
                            bounds: envoy_bounds(),
                            backend,
                            shadow: d.shadow_mode,
                            key: KeyMapping::from_config(&KeyConfig::default()),
                            reservations: Default::default(),
                        });
                        all.push(limit.clone());
                        (RuleKind::Limited(limit), unit, requests_per_unit)
                    }
                };
                Some(EnvoyRule {
                    path,
                    kind,
                    name: rl.name.clone(),
                    replaces: rl.replaces.clone(),
                    shadow: d.shadow_mode,
                    quota: d.quota_mode,
                    share: rule_share,
                    unit,
                    requests_per_unit: rpu,
                    metadata: d
                        .metadata
                        .as_ref()
                        .map(|m| Arc::new(crate::envoy_metadata::struct_of_yaml(m))),
                    stats,
                    detailed: d.detailed_metric,
                })
            }
        };
        let node = EnvoyNode {
            rule,
            children: build_level(&d.descriptors, &path, &share, scope, stores, source, all)?,
            value_to_metric: d.value_to_metric,
            share_threshold: d.share_threshold,
        };
        let k = level.by_key.entry(d.key.clone()).or_default();
        match d.value.as_deref() {
            None => k.any = Some(Box::new(node)),
            Some(v) if v.contains('*') => {
                k.wildcards
                    .push((v.split('*').map(str::to_string).collect(), node));
            }
            Some(v) => {
                k.exact.insert(v.to_string(), node);
            }
        }
    }
    Ok(level)
}

#[cfg(test)]
mod tests {
    use super::*;
    use drl_config as config;

    fn limits(yaml: &str) -> Limits {
        let cfg = config::parse(yaml, "<test>").unwrap();
        Limits::build(&cfg, &Stores::new(), "<test>").unwrap()
    }

    fn rule<'a>(l: &'a Limits, domain: &str, entries: &[(&str, &str)]) -> Option<&'a str> {
        let root = l.domains.get(domain).unwrap();
        match_descriptor(root, entries.iter().copied()).map(|r| &*r.path)
    }

    #[test]
    fn most_specific_node_wins_per_level() {
        let l = limits(
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n  - key: k\n    value: v\n    rate_limit: {unit: second, requests_per_unit: 2}\n  - key: k\n    value: va*\n    rate_limit: {unit: second, requests_per_unit: 3}\n  - key: k\n    value: val*\n    rate_limit: {unit: second, requests_per_unit: 4}\n",
        );
        assert_eq!(rule(&l, "d", &[("k", "v")]), Some("d.k_v"));
        // The first wildcard in config order, as envoyproxy/ratelimit
        // (src/config/config_impl.go, GetLimit) picks it.
        assert_eq!(
            rule(&l, "d", &[("k", "value")]),
            Some("d.k_va*"),
            "first wildcard"
        );
        assert_eq!(rule(&l, "d", &[("k", "vax")]), Some("d.k_va*"));
        assert_eq!(rule(&l, "d", &[("k", "other")]), Some("d.k"));
        assert_eq!(rule(&l, "d", &[("x", "v")]), None);
        assert_eq!(rule(&l, "d", &[("k", "v"), ("k", "v")]), None, "too deep");
    }

    /// Wildcards anywhere in a value (envoyproxy/ratelimit's
    /// test/config/config_test.go, the wildcard cases): each `*` matches
    /// any run of characters, the empty one too.
    #[test]
    fn wildcards_match_anywhere_in_a_value() {
        let l = limits(
            "domain: d\ndescriptors:\n  - key: a\n    value: bar*b\n    rate_limit: {unit: second, requests_per_unit: 1}\n  - key: a\n    value: foo*bar*baz\n    rate_limit: {unit: second, requests_per_unit: 2}\n  - key: a\n    value: '*end'\n    rate_limit: {unit: second, requests_per_unit: 3}\n",
        );
        for (value, want) in [
            ("barb", Some("d.a_bar*b")),
            ("bar-xyz-b", Some("d.a_bar*b")),
            ("barbx", None),
            ("bar", None),
            ("foobarbaz", Some("d.a_foo*bar*baz")),
            ("foo-1-bar-2-baz", Some("d.a_foo*bar*baz")),
            ("foo-baz-bar", None),
            ("foobaz", None),
            ("the end", Some("d.a_*end")),
        ] {
            assert_eq!(rule(&l, "d", &[("a", value)]), want, "{value}");
        }
    }

    proptest::proptest! {
        /// `wildcard_match` agrees with a regular expression built from the
        /// pattern (`*` as `.*`, the rest literal).
        #[test]
        fn wildcard_match_is_a_glob(pattern in "[ab*]{0,6}", value in "[ab]{0,8}") {
            let parts: Vec<String> = pattern.split('*').map(str::to_string).collect();
            let re = format!("^{}$", parts.join(".*"));
            let want = regex_lite_match(&re, &value);
            proptest::prop_assert_eq!(wildcard_match(&parts, &value), want, "{} {}", pattern, value);
        }
    }

    /// A tiny matcher for `^lit(.*lit)*$` patterns over `[ab]`: the
    /// reference for the property above (backtracking, exponential but
    /// tiny inputs).
    fn regex_lite_match(re: &str, value: &str) -> bool {
        fn go(parts: &[&str], v: &str, first: bool) -> bool {
            match parts.split_first() {
                None => v.is_empty(),
                Some((p, rest)) => {
                    if first {
                        v.strip_prefix(p).is_some_and(|r| go(rest, r, false))
                    } else {
                        (0..=v.len())
                            .any(|i| v[i..].strip_prefix(p).is_some_and(|r| go(rest, r, false)))
                    }
                }
            }
        }
        let body = &re[1..re.len() - 1];
        let parts: Vec<&str> = body.split(".*").collect();
        go(&parts, value, true)
    }

    #[test]
    fn a_node_without_rate_limit_limits_nothing() {
        let l = limits(
            "domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - key: b\n        rate_limit: {unit: minute, requests_per_unit: 5}\n",
        );
        assert_eq!(rule(&l, "d", &[("a", "1")]), None);
        assert_eq!(rule(&l, "d", &[("a", "1"), ("b", "2")]), Some("d.a.b"));
        assert_eq!(l.envoy_limits.len(), 1);
    }

    #[test]
    fn native_limits_resolve_by_name_and_keep_their_limiter_across_builds() {
        let yaml = "limits:\n  - name: a\n    quota: 10/s\n  - name: b\n    algorithm: sliding-log\n    quotas: [1/s, {quota: 5/m}]\n";
        let stores = Stores::new();
        let cfg = config::parse(yaml, "<test>").unwrap();
        let one = Limits::build(&cfg, &stores, "<test>").unwrap();
        let two = Limits::build(&cfg, &stores, "<test>").unwrap();
        assert_eq!(one.names(), ["a", "b"]);
        assert_eq!(one.get("b").unwrap().spec.quotas.len(), 2);
        assert!(one.get("c").is_none());
        match (
            &one.get("a").unwrap().backend,
            &two.get("a").unwrap().backend,
        ) {
            (Backend::Local(x), Backend::Local(y)) => assert!(Arc::ptr_eq(x, y)),
            _ => panic!("local scope"),
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]

        /// Both ways of finding a limit (the scan of a few names, the hash
        /// map past [`SCAN_NAMES`]) find every configured name, at its
        /// place, and nothing else: not a prefix, not an extension.
        #[test]
        fn every_configured_name_and_only_those_are_found(
            names in proptest::collection::btree_set("[a-d]{1,4}", 1..2 * SCAN_NAMES),
            probe in "[a-d]{0,5}",
        ) {
            let mut yaml = String::from("limits:\n");
            for n in &names {
                yaml.push_str(&format!("  - name: {n}\n    quota: 10/s\n"));
            }
            let cfg = config::parse(&yaml, "<test>").unwrap();
            let l = Limits::build(&cfg, &Stores::new(), "<test>").unwrap();
            for n in &names {
                proptest::prop_assert_eq!(&*l.get(n).unwrap().name, n.as_str());
            }
            proptest::prop_assert_eq!(l.get(&probe).is_some(), names.contains(&probe));
            if let Some(found) = l.get(&probe) {
                proptest::prop_assert_eq!(&*found.name, probe.as_str());
            }
        }
    }
}
