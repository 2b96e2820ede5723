//! The house rules of ARCHITECTURE.md that a crate's *files* must keep:
//!
//! - no import circle of more than two files inside any crate (the
//!   strongly connected components of the file-level import graph have at
//!   most two files);
//! - no crate's source (`src/`, tests inside it included) over
//!   [`MAX_CRATE_LINES`] lines.
//!
//! The import graph is read from the source text: every `crate::`,
//! `super::` and `self::` path, every `use` of a child module declared with
//! `mod`, each resolved to the file of the longest module prefix that has
//! one. `mod` declarations are containment, not imports; test code (files
//! named `tests.rs`, and everything from a `#[cfg(test)]` line on) is left
//! out, since a test module reaching back into its parent is no circle a
//! reader has to follow.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// Most lines of source one crate may hold.
const MAX_CRATE_LINES: usize = 10_000;

/// Largest import circle allowed, in files.
const MAX_CIRCLE: usize = 2;

/// Source files over [`LONG_FILE`] lines allowed (issue 46: at most 2).
const MAX_LONG_FILES: usize = 2;
const LONG_FILE: usize = 800;

/// Functions over [`LONG_FN`] lines allowed (issue 46: at most 4).
const MAX_LONG_FNS: usize = 4;
const LONG_FN: usize = 150;

/// One crate's module files: module path (`["status", "tick"]`) → file.
struct Crate {
    name: String,
    files: BTreeMap<Vec<String>, PathBuf>,
}

fn workspace_crates() -> Vec<Crate> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut out = Vec::new();
    let mut dirs: Vec<_> = fs::read_dir(&root)
        .expect("read crates/")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.join("src").is_dir())
        .collect();
    dirs.sort();
    for dir in dirs {
        let src = dir.join("src");
        let mut files = BTreeMap::new();
        for file in rust_files(&src) {
            let rel = file.strip_prefix(&src).expect("under src");
            // Binaries are crates of their own; their files are leaves here.
            if rel.starts_with("bin") || rel.file_name().is_some_and(|n| n == "tests.rs") {
                continue;
            }
            files.insert(module_path(rel), file);
        }
        out.push(Crate {
            name: dir.file_name().unwrap().to_string_lossy().into_owned(),
            files,
        });
    }
    out
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).expect("read dir") {
            let p = e.expect("entry").path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// `status/tick.rs` → `["status", "tick"]`; `status/mod.rs` → `["status"]`;
/// `lib.rs` and `main.rs` → `[]`.
fn module_path(rel: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .iter()
        .map(|s| s.to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().expect("a file name");
    let stem = last.trim_end_matches(".rs");
    if !(stem == "mod" || (parts.is_empty() && (stem == "lib" || stem == "main"))) {
        parts.push(stem.to_string());
    }
    parts
}

/// The text of a file without comments and without its test code.
fn code_of(text: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        let t = line.trim_start();
        if t.starts_with("#[cfg(test)]") {
            break;
        }
        if t.starts_with("//") {
            continue;
        }
        let line = match line.find("//") {
            // A `//` inside a string literal (a URL) is rare in paths'
            // company; cutting there only drops text after it.
            Some(i) => &line[..i],
            None => line,
        };
        out.push_str(line);
        out.push('\n');
    }
    out
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Every path the code names that starts at one of `roots`, as its
/// segments after the root, brace groups expanded (`crate::{a::X, b}` →
/// `[a, X]`, `[b]`). Each is returned with the root it started from.
fn paths_from(code: &str, roots: &[&str]) -> Vec<(String, Vec<String>)> {
    let bytes: Vec<char> = code.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if !is_ident(bytes[i]) || (i > 0 && (is_ident(bytes[i - 1]) || bytes[i - 1] == ':')) {
            i += 1;
            continue;
        }
        let start = i;
        while i < bytes.len() && is_ident(bytes[i]) {
            i += 1;
        }
        let word: String = bytes[start..i].iter().collect();
        if !roots.contains(&word.as_str()) || !code_at(&bytes, i, "::") {
            continue;
        }
        let mut found = Vec::new();
        let mut prefix = Vec::new();
        i = read_tree(&bytes, i + 2, &mut prefix, &mut found);
        out.extend(found.into_iter().map(|p| (word.clone(), p)));
    }
    out
}

fn code_at(s: &[char], i: usize, pat: &str) -> bool {
    pat.chars()
        .enumerate()
        .all(|(k, c)| s.get(i + k) == Some(&c))
}

/// Reads a use tree at `i` (after a `::`), pushing each complete path
/// (prefix + segments) into `out`; returns the index after it.
fn read_tree(
    s: &[char],
    mut i: usize,
    prefix: &mut Vec<String>,
    out: &mut Vec<Vec<String>>,
) -> usize {
    let depth = prefix.len();
    loop {
        while s.get(i).is_some_and(|c| c.is_whitespace()) {
            i += 1;
        }
        if s.get(i) == Some(&'{') {
            i += 1;
            loop {
                while s.get(i).is_some_and(|c| c.is_whitespace() || *c == ',') {
                    i += 1;
                }
                if s.get(i).is_none_or(|c| *c == '}') {
                    i += 1;
                    break;
                }
                let before = i;
                i = read_tree(s, i, prefix, out);
                if i == before {
                    i += 1;
                }
            }
            prefix.truncate(depth);
            return i;
        }
        let start = i;
        while s.get(i).is_some_and(|c| is_ident(*c)) {
            i += 1;
        }
        if i == start {
            // `*` or something else: the path so far.
            if s.get(i) == Some(&'*') {
                i += 1;
            }
            out.push(prefix.clone());
            prefix.truncate(depth);
            return i;
        }
        prefix.push(s[start..i].iter().collect());
        if code_at(s, i, "::") {
            i += 2;
            continue;
        }
        out.push(prefix.clone());
        prefix.truncate(depth);
        return i;
    }
}

/// Child modules a file declares (`mod x;`, `pub mod x;`, `pub(crate) mod x;`).
fn declared_children(code: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for line in code.lines() {
        let t = line.trim();
        let t = t
            .strip_prefix("pub(crate) ")
            .or_else(|| t.strip_prefix("pub "))
            .unwrap_or(t);
        if let Some(rest) = t.strip_prefix("mod ")
            && let Some(name) = rest.strip_suffix(';')
        {
            out.insert(name.trim().to_string());
        }
    }
    out
}

/// A path as the crate root sees it, from a file at `module`: `None` for
/// a path outside the crate.
fn absolute(
    module: &[String],
    children: &BTreeSet<String>,
    root: &str,
    rest: &[String],
) -> Option<Vec<String>> {
    let mut p: Vec<String> = match root {
        "crate" => Vec::new(),
        "self" => module.to_vec(),
        "super" => {
            let mut m = module.to_vec();
            m.pop();
            let mut rest = rest;
            while rest.first().is_some_and(|s| s == "super") {
                m.pop();
                rest = &rest[1..];
            }
            m.extend(rest.iter().cloned());
            return Some(m);
        }
        child if children.contains(child) => {
            let mut m = module.to_vec();
            m.push(child.to_string());
            m
        }
        _ => return None,
    };
    p.extend(rest.iter().cloned());
    Some(p)
}

/// What a file re-exports (`pub use x::Y;`): name → the path it names
/// (`None`: outside the crate).
fn reexports(
    module: &[String],
    code: &str,
    children: &BTreeSet<String>,
) -> BTreeMap<String, Option<Vec<String>>> {
    let mut out = BTreeMap::new();
    for stmt in code.split(';') {
        let t = stmt.trim();
        let Some(tree) = t
            .strip_prefix("pub use ")
            .or_else(|| t.strip_prefix("pub(crate) use "))
        else {
            continue;
        };
        let chars: Vec<char> = tree.chars().collect();
        let mut found = Vec::new();
        read_tree(&chars, 0, &mut Vec::new(), &mut found);
        for mut path in found {
            if path.last().is_some_and(|s| s == "self") {
                path.pop();
            }
            let (Some(name), Some(first)) = (path.last().cloned(), path.first().cloned()) else {
                continue;
            };
            let target = absolute(module, children, &first, &path[1..]);
            out.insert(name, target);
        }
    }
    out
}

/// The file-level import graph of one crate: file index → imported files.
fn import_graph(krate: &Crate) -> (Vec<&Vec<String>>, Vec<BTreeSet<usize>>) {
    let modules: Vec<&Vec<String>> = krate.files.keys().collect();
    let index: BTreeMap<&Vec<String>, usize> =
        modules.iter().enumerate().map(|(i, m)| (*m, i)).collect();
    let mut codes = Vec::new();
    let mut exports = Vec::new();
    for module in &modules {
        let text = fs::read_to_string(&krate.files[*module]).expect("read source");
        let code = code_of(&text);
        let children = declared_children(&code);
        exports.push(reexports(module, &code, &children));
        codes.push((code, children));
    }
    // The file a path leads to, through re-exports to the file that
    // defines the name (`crate::Engine` re-exported from `engine` is
    // `engine.rs`'s); `None` outside the crate.
    let resolve = |path: &[String]| -> Option<usize> {
        let mut path = path.to_vec();
        for _ in 0..16 {
            let (n, file) = (0..=path.len())
                .rev()
                .find_map(|n| index.get(&path[..n].to_vec()).map(|f| (n, *f)))?;
            match path.get(n).and_then(|name| exports[file].get(name)) {
                Some(Some(target)) if *target != path[..=n] => {
                    let mut next = target.clone();
                    next.extend(path[n + 1..].iter().cloned());
                    path = next;
                }
                Some(None) => return None,
                _ => return Some(file),
            }
        }
        None
    };
    let mut edges = vec![BTreeSet::new(); modules.len()];
    for (from, module) in modules.iter().enumerate() {
        let (code, children) = &codes[from];
        let mut roots = vec!["crate", "super", "self"];
        roots.extend(children.iter().map(String::as_str));
        for (root, rest) in paths_from(code, &roots) {
            let Some(p) = absolute(module, children, &root, &rest) else {
                continue;
            };
            if let Some(to) = resolve(&p).filter(|t| *t != from) {
                edges[from].insert(to);
            }
        }
    }
    (modules, edges)
}

/// Strongly connected components (Tarjan), each as sorted file indices.
fn components(edges: &[BTreeSet<usize>]) -> Vec<Vec<usize>> {
    struct T<'a> {
        edges: &'a [BTreeSet<usize>],
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        on: Vec<bool>,
        stack: Vec<usize>,
        next: usize,
        out: Vec<Vec<usize>>,
    }
    fn visit(t: &mut T<'_>, v: usize) {
        t.index[v] = Some(t.next);
        t.low[v] = t.next;
        t.next += 1;
        t.stack.push(v);
        t.on[v] = true;
        for &w in t.edges[v].iter() {
            match t.index[w] {
                None => {
                    visit(t, w);
                    t.low[v] = t.low[v].min(t.low[w]);
                }
                Some(iw) if t.on[w] => t.low[v] = t.low[v].min(iw),
                Some(_) => {}
            }
        }
        if Some(t.low[v]) == t.index[v] {
            let mut c = Vec::new();
            while let Some(w) = t.stack.pop() {
                t.on[w] = false;
                c.push(w);
                if w == v {
                    break;
                }
            }
            c.sort();
            t.out.push(c);
        }
    }
    let n = edges.len();
    let mut t = T {
        edges,
        index: vec![None; n],
        low: vec![0; n],
        on: vec![false; n],
        stack: Vec::new(),
        next: 0,
        out: Vec::new(),
    };
    for v in 0..n {
        if t.index[v].is_none() {
            visit(&mut t, v);
        }
    }
    t.out
}

fn name(m: &[String]) -> String {
    if m.is_empty() {
        "lib".into()
    } else {
        m.join("::")
    }
}

#[test]
fn no_crate_has_an_import_circle_of_more_than_two_files() {
    let mut found = Vec::new();
    for krate in workspace_crates() {
        let (modules, edges) = import_graph(&krate);
        for c in components(&edges) {
            if c.len() > MAX_CIRCLE {
                let names: Vec<String> = c.iter().map(|&i| name(modules[i])).collect();
                let mut inside = Vec::new();
                for &a in &c {
                    for b in edges[a].iter().filter(|b| c.contains(b)) {
                        inside.push(format!("{} -> {}", name(modules[a]), name(modules[*b])));
                    }
                }
                found.push(format!(
                    "{}: {} files: {} ({})",
                    krate.name,
                    c.len(),
                    names.join(", "),
                    inside.join("; ")
                ));
            }
        }
    }
    assert!(
        found.is_empty(),
        "import circles of more than {MAX_CIRCLE} files (ARCHITECTURE.md):\n  {}",
        found.join("\n  ")
    );
}

#[test]
fn no_crate_has_more_than_ten_thousand_lines_of_source() {
    let mut found = Vec::new();
    for krate in workspace_crates() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("..")
            .join(&krate.name)
            .join("src");
        let lines: usize = rust_files(&dir)
            .iter()
            .map(|f| fs::read_to_string(f).expect("read").lines().count())
            .sum();
        if lines > MAX_CRATE_LINES {
            found.push(format!("{}: {lines} lines", krate.name));
        }
    }
    assert!(
        found.is_empty(),
        "crates over {MAX_CRATE_LINES} lines of source:\n  {}",
        found.join("\n  ")
    );
}

/// The reader finds the edges a reader would: brace groups, `super`,
/// child modules, and nothing from comments or tests.
#[test]
fn the_reader_resolves_the_paths_a_file_names() {
    let code = code_of(
        "use crate::{a::{self, X}, b::c::Y};\n\
         use super::super::d;\n\
         // use crate::e;\n\
         use child::Z;\n\
         fn f() { crate::g::h(); }\n\
         #[cfg(test)]\n\
         mod tests { use crate::t; }\n",
    );
    let got = paths_from(&code, &["crate", "super", "child"]);
    let want: Vec<(String, Vec<String>)> = [
        ("crate", &["a", "self"][..]),
        ("crate", &["a", "X"]),
        ("crate", &["b", "c", "Y"]),
        ("super", &["super", "d"]),
        ("child", &["Z"]),
        ("crate", &["g", "h"]),
    ]
    .iter()
    .map(|(r, p)| (r.to_string(), p.iter().map(|s| s.to_string()).collect()))
    .collect();
    assert_eq!(got, want);
}

/// Tarjan finds a three-file circle and leaves two-file ones alone.
#[test]
fn components_find_a_three_file_circle() {
    let edges: Vec<BTreeSet<usize>> = vec![
        [1].into(), // 0 -> 1
        [2].into(), // 1 -> 2
        [0].into(), // 2 -> 0
        [4].into(), // 3 -> 4
        [3].into(), // 4 -> 3
        BTreeSet::new(),
    ];
    let mut sizes: Vec<usize> = components(&edges).iter().map(Vec::len).collect();
    sizes.sort();
    assert_eq!(sizes, vec![1, 2, 3]);
}

/// Every `src/` file of every workspace crate: (`crate/src/path`, file).
fn all_source_files() -> Vec<(String, PathBuf)> {
    let mut out = Vec::new();
    for krate in workspace_crates() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("..")
            .join(&krate.name)
            .join("src");
        for f in rust_files(&dir) {
            let rel = f.strip_prefix(&dir).unwrap_or(&f).to_path_buf();
            out.push((format!("{}/src/{}", krate.name, rel.display()), f));
        }
    }
    out
}

#[test]
fn at_most_two_source_files_are_over_eight_hundred_lines() {
    let mut long: Vec<String> = all_source_files()
        .into_iter()
        .filter_map(|(c, f)| {
            let n = fs::read_to_string(&f).expect("read").lines().count();
            (n > LONG_FILE).then(|| format!("{c} ({n})"))
        })
        .collect();
    long.sort();
    assert!(
        long.len() <= MAX_LONG_FILES,
        "{} files over {LONG_FILE} lines (at most {MAX_LONG_FILES}):\n  {}",
        long.len(),
        long.join("\n  ")
    );
}

/// A line with string and char literals blanked and `//` comments cut,
/// for counting braces.
fn braces_of(line: &str) -> String {
    let mut out = String::new();
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' => {
                while let Some(d) = chars.next() {
                    match d {
                        '\\' => {
                            chars.next();
                        }
                        '"' => break,
                        _ => {}
                    }
                }
            }
            '/' if chars.peek() == Some(&'/') => break,
            '\'' => {
                // A char literal ('{', '\\'), not a lifetime ('a).
                let rest: String = chars.clone().take(3).collect();
                let mut r = rest.chars();
                match (r.next(), r.next(), r.next()) {
                    (Some('\\'), Some(_), Some('\'')) => {
                        chars.nth(2);
                    }
                    (Some(_), Some('\''), _) => {
                        chars.nth(1);
                    }
                    _ => {}
                }
            }
            '{' | '}' => out.push(c),
            _ => {}
        }
    }
    out
}

/// The functions of a file's non-test code longer than `limit` lines, as
/// (lines, name).
fn long_functions(text: &str, limit: usize) -> Vec<(usize, String)> {
    let lines: Vec<&str> = text
        .lines()
        .take_while(|l| !l.trim_start().starts_with("#[cfg(test)]"))
        .collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let mut t = line.trim_start();
        for prefix in [
            "pub(crate) ",
            "pub(super) ",
            "pub ",
            "async ",
            "const ",
            "unsafe ",
        ] {
            t = t.strip_prefix(prefix).unwrap_or(t);
        }
        let Some(rest) = t.strip_prefix("fn ") else {
            continue;
        };
        let name: String = rest.chars().take_while(|&c| is_ident(c)).collect();
        let (mut depth, mut started) = (0i64, false);
        for (j, l) in lines.iter().enumerate().skip(i) {
            for b in braces_of(l).chars() {
                depth += if b == '{' { 1 } else { -1 };
                started = true;
            }
            if started && depth == 0 {
                if j - i + 1 > limit {
                    out.push((j - i + 1, name.clone()));
                }
                break;
            }
            if !started && l.trim_end().ends_with(';') {
                break;
            }
        }
    }
    out
}

#[test]
fn at_most_four_functions_are_over_one_hundred_fifty_lines() {
    let mut long = Vec::new();
    for (c, f) in all_source_files() {
        if f.file_name().is_some_and(|n| n == "tests.rs") {
            continue;
        }
        let text = fs::read_to_string(&f).expect("read");
        for (n, name) in long_functions(&text, LONG_FN) {
            long.push(format!("{c} {name} ({n})"));
        }
    }
    long.sort();
    assert!(
        long.len() <= MAX_LONG_FNS,
        "{} functions over {LONG_FN} lines (at most {MAX_LONG_FNS}):\n  {}",
        long.len(),
        long.join("\n  ")
    );
}

/// The function counter counts what a reader would: braces in strings,
/// chars and comments do not count; lifetimes are not chars.
#[test]
fn the_function_counter_skips_strings_chars_and_comments() {
    let body: String = (0..5).map(|_| "    let s = \"}{\"; // }\n").collect();
    let text =
        format!("fn long<'a>(x: &'a str) {{\n    let c = '{{';\n{body}}}\nfn short() {{}}\n");
    assert_eq!(long_functions(&text, 3), vec![(8, "long".to_string())]);
    assert!(long_functions(&text, 8).is_empty());
}
