//! drl-config: the service configuration: drl's native YAML format, an
//! envoyproxy/ratelimit file loaded unchanged (see `envoy`), or a
//! limitador limits file (see `limitador`).
//!
//! Parsing is two steps: `parse` turns text into a `Config` (syntax and
//! every per-field check, with line and column); `drl-service`'s
//! `Limits::build` then turns a `Config` into decidable limits (store
//! wiring). Nothing here opens a socket or a store.
//!
//! Features: `serve` (default) is the whole server config (its `redis:`,
//! `cluster:` and `orbit:` sections bring drl-store and drl-cluster-net in).
//! Without it (`default-features = false`, as drl-client and drl-relay
//! take it) the crate holds [`ConfigError`], the limit schema
//! ([`limits`]) and [`yaml_error`] only.

mod error;
pub mod limits;
mod yaml;

#[cfg(feature = "serve")]
mod dir;
#[cfg(feature = "serve")]
pub mod envoy;
#[cfg(feature = "serve")]
pub mod limitador;
#[cfg(feature = "serve")]
mod native;
#[cfg(feature = "serve")]
pub mod sections;

pub use error::ConfigError;
pub use limits::{
    DEFAULT_BYTES_PER_KEY, DEFAULT_MAX_COST, DEFAULT_MAX_KEY_BYTES, DEFAULT_MAX_KEYS,
    ENVOY_STATS_MAX_KEYS, KeyConfig, LimitConfig, QuotaEntry, Scope,
};
pub use yaml::yaml_error;

#[cfg(feature = "serve")]
pub use serve::*;

/// The whole server config: formats, files, the embedded default.
#[cfg(feature = "serve")]
mod serve {
    use std::path::Path;

    use crate::{ConfigError, Scope, envoy, limitador, yaml_error};

    pub use crate::dir::parse_files;
    pub use crate::native::{
        Config, EnvoyHits, GrpcEngine, HttpEngine, ListenConfig, ServerConfig, UnknownDomain,
    };

    /// The configuration served when `drl serve` is started without `--config`.
    pub const EMBEDDED_DEFAULT: &str = include_str!("default.yaml");

    /// Which format a file is in.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Format {
        /// drl's native format (`limits:` ...).
        Native,
        /// An envoyproxy/ratelimit file (`domain:` + `descriptors:`).
        Envoy,
        /// A limitador limits file (a list of limits with `namespace`).
        Limitador,
    }

    /// Detects the format: a top-level `domain` key means envoyproxy/ratelimit.
    pub fn detect(text: &str) -> Format {
        match serde_norway::from_str::<serde_norway::Value>(text) {
            // A top-level `domain`, or `descriptors` without `limits`: an
            // envoyproxy/ratelimit file (one missing its domain is refused for
            // that, as the reference refuses it).
            Ok(serde_norway::Value::Mapping(m))
                if m.contains_key("domain")
                    || (m.contains_key("descriptors") && !m.contains_key("limits")) =>
            {
                Format::Envoy
            }
            _ if limitador::looks_like(text) => Format::Limitador,
            _ => Format::Native,
        }
    }

    /// Parses a configuration text (either format). `source_name` names it in
    /// errors.
    pub fn parse(text: &str, source_name: &str) -> Result<Config, ConfigError> {
        match detect(text) {
            Format::Envoy => {
                let domain = envoy::parse_domain(text, source_name)?;
                let cfg = Config {
                    envoy: vec![domain],
                    ..Config::empty()
                };
                cfg.validate(text, source_name)?;
                Ok(cfg)
            }
            Format::Limitador => {
                let cfg = Config {
                    limitador: vec![limitador::LimitadorSource {
                        file: source_name.into(),
                        scope: Scope::Local,
                        limits: limitador::parse(text, source_name)?,
                    }],
                    ..Config::empty()
                };
                cfg.validate(text, source_name)?;
                Ok(cfg)
            }
            Format::Native => {
                let mut cfg: Config =
                    serde_norway::from_str(text).map_err(|e| yaml_error(source_name, &e))?;
                load_limitador(&mut cfg, text, source_name)?;
                cfg.validate(text, source_name)?;
                Ok(cfg)
            }
        }
    }

    /// Reads the limitador files a native config names (`limitador:`), and
    /// checks that namespaces, envoy domains and limit names do not collide.
    fn load_limitador(cfg: &mut Config, text: &str, source_name: &str) -> Result<(), ConfigError> {
        for src in &mut cfg.limitador {
            let name = src.file.display().to_string();
            let at = |m: String| ConfigError::new(source_name, m).locate(text, &["file:", &name]);
            let body = std::fs::read_to_string(&src.file)
                .map_err(|e| at(format!("limitador.file {name}: cannot read: {e}")))?;
            src.limits = limitador::parse(&body, &name)?;
            let missing = match src.scope {
                Scope::Local => None,
                Scope::Redis => cfg.redis.is_none().then_some("redis"),
                Scope::Gossip => cfg.cluster.is_none().then_some("cluster"),
                Scope::Orbit => cfg.orbit.is_none().then_some("orbit"),
            };
            if let Some(section) = missing {
                return Err(at(format!(
                    "limitador.file {name} has scope {}, but the config has no `{section}:` section",
                    src.scope
                )));
            }
        }
        let mut names = std::collections::BTreeSet::new();
        for l in cfg.limitador.iter().flat_map(|s| &s.limits) {
            if cfg.envoy.iter().any(|d| d.domain == l.namespace) {
                return Err(ConfigError::new(
                    source_name,
                    format!(
                        "limitador namespace {:?} is also an envoy domain: one RLS domain, one format",
                        l.namespace
                    ),
                )
                .locate(text, &["limitador:"]));
            }
            if !names.insert(l.name.as_str()) {
                return Err(ConfigError::new(
                    source_name,
                    format!("limitador limit {:?} is defined by two files", l.name),
                )
                .locate(text, &["limitador:"]));
            }
        }
        Ok(())
    }

    /// Reads and parses a configuration file.
    pub fn load_file(path: &Path) -> Result<Config, ConfigError> {
        let name = path.display().to_string();
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigError::new(&name, format!("cannot read: {e}")))?;
        parse(&text, &name)
    }

    /// The embedded default configuration.
    pub fn embedded() -> Config {
        parse(EMBEDDED_DEFAULT, "<embedded>").expect("the embedded default config is valid")
    }
}
