//! YAML parser errors as [`ConfigError`]s.

use crate::error::ConfigError;

/// A serde_norway error as a [`ConfigError`] at the place it reports.
pub fn yaml_error(source_name: &str, e: &serde_norway::Error) -> ConfigError {
    ConfigError::from_parser(
        source_name,
        e.to_string(),
        e.location().map(|l| (l.line(), l.column())),
    )
}
