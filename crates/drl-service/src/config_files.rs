//! Config files and directories read from disk: an empty file is never a
//! config; a directory is every `*.yaml` / `*.yml` in it
//! (`drl_config::parse_files`).

use std::path::PathBuf;

use drl_config::{self as config, Config, ConfigError};

/// Reads and parses a config file, refusing one that holds no document
/// (empty, whitespace or comments only): an empty file is never a config
/// (a file truncated while being rewritten would otherwise remove every
/// limit).
pub fn load_config_file(path: &std::path::Path) -> Result<Config, ConfigError> {
    if path.is_dir() {
        return load_config_dir(path);
    }
    let (name, text) = read_config_text(path)?;
    config::parse(&text, &name)
}

/// A file's name and text; an unreadable or empty file is an error.
fn read_config_text(path: &std::path::Path) -> Result<(String, String), ConfigError> {
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path)
        .map_err(|e| ConfigError::new(&name, format!("cannot read: {e}")))?;
    if is_empty_document(&text) {
        return Err(ConfigError::new(
            &name,
            "the file is empty (no YAML document, only whitespace or comments); an empty file is never a config, the previous config keeps serving",
        ));
    }
    Ok((name, text))
}

/// Every `*.yaml` and `*.yml` file of `dir` (not its subdirectories, nor
/// names starting with `.`, such as a Kubernetes ConfigMap's `..data`), in
/// name order, as one config ([`drl_config::parse_files`]).
pub fn load_config_dir(dir: &std::path::Path) -> Result<Config, ConfigError> {
    let name = dir.display().to_string();
    let entries = std::fs::read_dir(dir)
        .map_err(|e| ConfigError::new(&name, format!("cannot read the directory: {e}")))?;
    let mut paths: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            let hidden = p
                .file_name()
                .and_then(|n| n.to_str())
                .is_none_or(|n| n.starts_with('.'));
            let yaml = p
                .extension()
                .and_then(|x| x.to_str())
                .is_some_and(|x| x == "yaml" || x == "yml");
            !hidden && yaml && p.is_file()
        })
        .collect();
    paths.sort();
    if paths.is_empty() {
        return Err(ConfigError::new(
            &name,
            "the directory holds no .yaml or .yml file; an empty directory is never a config",
        ));
    }
    let files = paths
        .iter()
        .map(|p| read_config_text(p))
        .collect::<Result<Vec<_>, _>>()?;
    config::parse_files(&files)
}

/// True if `text` holds no YAML document (empty, whitespace, comments).
pub fn is_empty_document(text: &str) -> bool {
    text.lines()
        .map(str::trim)
        .all(|l| l.is_empty() || l.starts_with('#') || l == "---" || l == "...")
}
