//! A configuration read from several files (`drl serve --config DIR`), as
//! envoyproxy/ratelimit reads its runtime directory: one domain per
//! envoyproxy/ratelimit file, limitador files, and at most one native file
//! for the server settings and native limits.
//!
//! Two files of one domain are refused, or merged with
//! `server.envoy_merge_domains: true` (the reference's
//! `MERGE_DOMAIN_CONFIG`): their top-level descriptors are joined, and a
//! `key`/`value` pair both files define is refused.

use std::collections::BTreeSet;

use crate::envoy::composite;
use crate::{Config, ConfigError, Format, detect, parse};

/// Parses `files` (name, text), in the order given, into one config.
pub fn parse_files(files: &[(String, String)]) -> Result<Config, ConfigError> {
    let mut native: Option<(&str, Config)> = None;
    let mut others: Vec<(&str, Config)> = Vec::new();
    for (name, text) in files {
        let cfg = parse(text, name)?;
        if detect(text) == Format::Native {
            if let Some((first, _)) = &native {
                return Err(ConfigError::new(
                    name,
                    format!(
                        "a second drl config in the directory ({first} is one): only one file may hold `server:` and `limits:`"
                    ),
                ));
            }
            native = Some((name, cfg));
        } else {
            others.push((name, cfg));
        }
    }
    let mut out = native.map_or_else(Config::empty, |(_, c)| c);
    let merge = out.server.envoy_merge_domains;
    // Where each domain was first defined, for the errors.
    let mut owner: Vec<String> = vec![String::from("the drl config"); out.envoy.len()];
    for (name, cfg) in others {
        out.limitador.extend(cfg.limitador);
        for d in cfg.envoy {
            let Some(i) = out.envoy.iter().position(|e| e.domain == d.domain) else {
                owner.push(name.to_string());
                out.envoy.push(d);
                continue;
            };
            if !merge {
                return Err(ConfigError::new(
                    name,
                    format!(
                        "duplicate domain '{}' (also in {}); set server.envoy_merge_domains: true to merge, as MERGE_DOMAIN_CONFIG does",
                        d.domain, owner[i]
                    ),
                ));
            }
            let have: BTreeSet<String> = out.envoy[i]
                .descriptors
                .iter()
                .map(|x| composite(&x.key, x.value.as_deref()))
                .collect();
            for x in &d.descriptors {
                let key = composite(&x.key, x.value.as_deref());
                if have.contains(&key) {
                    return Err(ConfigError::new(
                        name,
                        format!("duplicate descriptor composite key '{}.{key}'", d.domain),
                    ));
                }
            }
            out.envoy[i].descriptors.extend(d.descriptors);
        }
    }
    Ok(out)
}
