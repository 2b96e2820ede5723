//! The repository stands on its own: no git-tracked file points outside it
//! (`../shared/...`, the design notes the project started from) or names a
//! path of one particular machine (an absolute `/work/...` path, where the
//! project was developed). A reader who clones drl must be able to follow
//! every reference; benchmark commands use relative paths,
//! `$CARGO_TARGET_DIR` or "a scratch dir" instead.

use std::path::Path;
use std::process::Command;

/// This file names the patterns it looks for, so it is not checked.
const SELF: &str = "crates/drl-core/tests/no_outside_paths.rs";

/// Each offending place as `path:line: text`.
fn offences(path: &str, text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.contains("../shared") || has_absolute_work_path(line) {
            out.push(format!("{path}:{}: {}", i + 1, line.trim()));
        }
    }
    out
}

/// True if `line` holds `/work/` as the start of an absolute path (not as
/// the tail of a relative one, such as `src/work/`).
fn has_absolute_work_path(line: &str) -> bool {
    line.match_indices("/work/").any(|(at, _)| {
        line[..at].chars().next_back().is_none_or(|c| {
            !(c.is_alphanumeric() || matches!(c, '.' | '_' | '-' | '/' | '~' | '$'))
        })
    })
}

#[test]
fn the_pattern_finds_what_it_should() {
    assert!(has_absolute_work_path(
        "CARGO_TARGET_DIR=/work/x cargo bench"
    ));
    assert!(has_absolute_work_path("/work/main/README.md"));
    assert!(has_absolute_work_path("see `/work/shared/DESIGN.md`"));
    assert!(!has_absolute_work_path("crates/x/src/work/mod.rs"));
    assert!(!has_absolute_work_path("$HOME/work/drl"));
    assert_eq!(offences("f", "a\nsee ../shared/X.md\n").len(), 1);
    assert!(offences("f", "docs/semantics.md").is_empty());
}

#[test]
fn no_tracked_file_points_outside_the_repository() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = Command::new("git")
        .args(["ls-files", "-z"])
        .current_dir(&root)
        .output()
        .expect("this test needs git on PATH and runs in a git checkout of drl");
    assert!(
        out.status.success(),
        "git ls-files failed in {}: {}",
        root.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let files: Vec<&str> = std::str::from_utf8(&out.stdout)
        .expect("utf-8 file names")
        .split('\0')
        .filter(|p| !p.is_empty() && *p != SELF)
        .collect();
    assert!(files.len() > 100, "only {} tracked files?", files.len());
    let mut found = Vec::new();
    for path in files {
        // A file deleted in the work tree but still tracked is skipped.
        let Ok(bytes) = std::fs::read(root.join(path)) else {
            continue;
        };
        found.extend(offences(path, &String::from_utf8_lossy(&bytes)));
    }
    assert!(
        found.is_empty(),
        "tracked files point outside the repository (write the contract's \
         place as docs/semantics.md, and paths relative to the repository, \
         $CARGO_TARGET_DIR or \"a scratch dir\"):\n{}",
        found.join("\n")
    );
}
