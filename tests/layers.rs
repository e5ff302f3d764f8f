//! The dependency layers of the crate, checked.
//!
//! Reads every `src/**/*.rs`, collects which top-level module names which
//! (`crate::x` in `use` lines, paths and expressions, including grouped
//! `use crate::{x, y}`, and `super::super::x` chains that climb out of a
//! top-level module; `super::` within a module is not an edge),
//! and compares the edges with [`LAYERS`] and [`SAME_LAYER`]: a module may use
//! any module on a lower layer, and a module on its own layer only where
//! [`SAME_LAYER`] lists the edge. Comments and string literals are skipped.
//!
//! A failure lists every offending `file:line` with its edge, and every
//! cycle between top-level modules. A third check looks for import cycles
//! between the files of `src/` (a shared piece belongs in its own file):
//! everywhere between plain files, and under [`STRICT_ROOTS`] also through
//! `mod.rs` files and their re-exports, followed to the file that defines
//! the item (a cycle that passes a `mod.rs`, such as a neutral file naming
//! an item a backend's `mod.rs` re-exports, is invisible otherwise). A
//! fourth keeps the rooms of `src/sandbox` to [`ROOM_RULES`] and the
//! backend-neutral files ([`NEUTRAL`]) off every backend.

#![allow(clippy::unwrap_used)] // tests and benches fail loudly

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Top-level modules, bottom layer first. `main` (the binary) and `lib`
/// (the module declarations) sit above everything.
const LAYERS: &[&[&str]] = &[
    // 1. Foundations: atomic files, the task model, settings, tracing set-up,
    // the memory allocator, counted nouns for messages.
    &["fsutil", "task", "config", "logging", "allocator", "plural"],
    // 2. Storage and engines that know tasks but run nothing.
    &["store", "images", "procgen", "model"],
    // 3. Running things: sandboxes, verification, chat models.
    &["sandbox", "verify", "llm"],
    // 4. Episodes and their evaluation.
    &["agent", "eval"],
    // 5. Pipelines built on episodes.
    &["generate", "rl", "audit"],
    // 6. Jobs, the use cases both front ends call, and the environment
    // server (a use case the CLI starts).
    &["jobs", "workbench", "serve"],
    // 7. Front ends, and the clap definitions the CLI front end reads.
    &["cli", "commands", "tui"],
    // 8. Benchmarks: they time the use cases and both front ends (the TUI
    // bench renders the TUI's views); only the binary calls them.
    &["bench"],
    // 9. The binary (the one place that links both front ends) and the
    // crate root (module declarations).
    &["main", "lib"],
];

/// Edges allowed between modules of the same layer (`from`, `to`).
const SAME_LAYER: &[(&str, &str)] = &[
    // The task model writes bundles atomically.
    ("task", "fsutil"),
    // Settings are written atomically and parsed with the task model's
    // TOML helpers and errors.
    ("config", "fsutil"),
    ("config", "task"),
    // Verification runs its tests inside a sandbox session.
    ("verify", "sandbox"),
    // Evaluation reads the episodes and failure labels the agent records.
    ("eval", "agent"),
    // Generation's optional last stage is the task audit (which uses nothing of generate).
    ("generate", "audit"),
    // The use cases report through job events.
    ("workbench", "jobs"),
    // The CLI turns the clap definitions into use-case calls.
    ("commands", "cli"),
];

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|layer| layer.contains(&module))
}

/// One `crate::x` reference.
#[derive(Debug, Clone)]
struct Use {
    file: PathBuf,
    line: usize,
    from: String,
    to: String,
}

/// The source with comments and the contents of string and char literals
/// blanked out (newlines kept, so line numbers still hold).
fn strip(src: &str) -> String {
    let b: Vec<char> = src.chars().collect();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    let keep_newlines = |s: &[char], out: &mut String| {
        for c in s {
            out.push(if *c == '\n' { '\n' } else { ' ' });
        }
    };
    while i < b.len() {
        let c = b[i];
        let next = b.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < b.len() && b[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let start = i;
            let mut depth = 0;
            while i < b.len() {
                if b[i] == '/' && b.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if b[i] == '*' && b.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            keep_newlines(&b[start..i.min(b.len())], &mut out);
        } else if c == 'r'
            && (next == Some('"') || next == Some('#'))
            && !(i > 0 && (b[i - 1].is_alphanumeric() || b[i - 1] == '_'))
        {
            // Raw string: r"..." or r#"..."#.
            let mut j = i + 1;
            let mut hashes = 0;
            while b.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if b.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            let start = i;
            j += 1;
            loop {
                if j >= b.len() {
                    break;
                }
                if b[j] == '"' && (0..hashes).all(|k| b.get(j + 1 + k) == Some(&'#')) {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            keep_newlines(&b[start..j.min(b.len())], &mut out);
            i = j;
        } else if c == '"' {
            let start = i;
            i += 1;
            while i < b.len() && b[i] != '"' {
                if b[i] == '\\' {
                    i += 1;
                }
                i += 1;
            }
            i += 1;
            keep_newlines(&b[start..i.min(b.len())], &mut out);
        } else if c == '\'' {
            // A char literal ('x', '\n', '\u{..}') or a lifetime ('a).
            if next == Some('\\') {
                let start = i;
                i += 2;
                while i < b.len() && b[i] != '\'' {
                    i += 1;
                }
                i += 1;
                keep_newlines(&b[start..i.min(b.len())], &mut out);
            } else if b.get(i + 2) == Some(&'\'') {
                out.push_str("   ");
                i += 3;
            } else {
                out.push(c);
                i += 1;
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The top-level modules named after each `crate::` in `code`, with their
/// line numbers.
fn crate_refs(code: &str) -> Vec<(usize, String)> {
    let chars: Vec<char> = code.chars().collect();
    let mut refs = Vec::new();
    let mut line = 1;
    let mut i = 0;
    let pat: Vec<char> = "crate::".chars().collect();
    while i < chars.len() {
        if chars[i] == '\n' {
            line += 1;
        }
        let at_word_start = i == 0 || !is_ident(chars[i - 1]);
        if at_word_start && chars[i..].starts_with(&pat) {
            let mut j = i + pat.len();
            while j < chars.len() && chars[j].is_whitespace() {
                j += 1;
            }
            if chars.get(j) == Some(&'{') {
                // `crate::{a, b::c, d::{e, f}}`: the first segment of each item.
                let mut depth = 0;
                let mut expect_item = true;
                let mut k = j;
                let mut l = line;
                while k < chars.len() {
                    let ch = chars[k];
                    match ch {
                        '\n' => l += 1,
                        '{' => {
                            depth += 1;
                            if depth == 1 {
                                expect_item = true;
                            }
                        }
                        '}' => {
                            depth -= 1;
                            if depth == 0 {
                                break;
                            }
                        }
                        ',' if depth == 1 => expect_item = true,
                        c if depth == 1 && expect_item && is_ident(c) => {
                            let s: String =
                                chars[k..].iter().take_while(|c| is_ident(**c)).collect();
                            k += s.len();
                            refs.push((l, s));
                            expect_item = false;
                            continue;
                        }
                        _ => {}
                    }
                    k += 1;
                }
            } else {
                let s: String = chars[j..].iter().take_while(|c| is_ident(**c)).collect();
                if !s.is_empty() {
                    refs.push((line, s));
                }
            }
            i += pat.len();
            continue;
        }
        i += 1;
    }
    refs
}

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

/// How many modules deep a file of `src/` is: `config.rs` and `sandbox/mod.rs`
/// 1, `sandbox/doctor.rs` 2.
fn depth_of(rel: &Path) -> usize {
    let n = rel.components().count();
    if rel.file_name().is_some_and(|f| f == "mod.rs") {
        n - 1
    } else {
        n
    }
}

/// The top-level modules named by `super::` chains long enough to leave a
/// file `depth` modules deep (`super::super::verify` from `sandbox/doctor.rs`).
/// Inline modules make a chain longer; it still ends at the crate root.
fn super_refs(code: &str, depth: usize) -> Vec<(usize, String)> {
    let mut refs = Vec::new();
    for (n, line) in code.lines().enumerate() {
        let mut rest = line;
        while let Some(at) = rest.find("super::") {
            let before = &rest[..at];
            let start_of_word = !before.ends_with(|c: char| is_ident(c) || c == ':');
            let mut tail = &rest[at..];
            let mut count = 0;
            while let Some(t) = tail.strip_prefix("super::") {
                count += 1;
                tail = t.trim_start();
            }
            if start_of_word && count >= depth {
                let name: String = tail.chars().take_while(|c| is_ident(*c)).collect();
                if !name.is_empty() {
                    refs.push((n + 1, name));
                }
            }
            rest = &rest[at + "super::".len() * count.max(1)..];
        }
    }
    refs
}

/// The top-level module a file of `src/` belongs to.
fn module_of(rel: &Path) -> String {
    let first = rel.components().next().unwrap().as_os_str();
    let first = first.to_str().unwrap();
    first.strip_suffix(".rs").unwrap_or(first).to_string()
}

fn all_uses() -> Vec<Use> {
    let src = src_dir();
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut uses = Vec::new();
    for file in files {
        let rel = file.strip_prefix(&src).unwrap().to_path_buf();
        let from = module_of(&rel);
        let code = strip(&std::fs::read_to_string(&file).unwrap());
        let mut refs = crate_refs(&code);
        refs.extend(super_refs(&code, depth_of(&rel)));
        for (line, to) in refs {
            // `crate::self`/`crate::Item` at the root are not module edges.
            if to != from && layer_of(&to).is_some() {
                uses.push(Use {
                    file: Path::new("src").join(&rel),
                    line,
                    from: from.clone(),
                    to,
                });
            }
        }
    }
    uses
}

fn allowed(from: &str, to: &str) -> bool {
    match (layer_of(from), layer_of(to)) {
        (Some(f), Some(t)) if t < f => true,
        (Some(f), Some(t)) if t == f => SAME_LAYER.contains(&(from, to)),
        _ => false,
    }
}

/// Cycles in the module graph: each strongly connected component with more
/// than one module (Tarjan's algorithm).
fn cycles(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct State<'a> {
        edges: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<String, usize>,
        low: BTreeMap<String, usize>,
        stack: Vec<String>,
        on_stack: BTreeSet<String>,
        next: usize,
        out: Vec<Vec<String>>,
    }
    fn visit(s: &mut State, v: &str) {
        s.index.insert(v.to_string(), s.next);
        s.low.insert(v.to_string(), s.next);
        s.next += 1;
        s.stack.push(v.to_string());
        s.on_stack.insert(v.to_string());
        let succ: Vec<String> = s
            .edges
            .get(v)
            .map(|e| e.iter().cloned().collect())
            .unwrap_or_default();
        for w in succ {
            if !s.index.contains_key(&w) {
                visit(s, &w);
                let lw = s.low[&w];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(lw);
            } else if s.on_stack.contains(&w) {
                let iw = s.index[&w];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(iw);
            }
        }
        if s.low[v] == s.index[v] {
            let mut comp = Vec::new();
            loop {
                let w = s.stack.pop().unwrap();
                s.on_stack.remove(&w);
                let done = w == v;
                comp.push(w);
                if done {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                s.out.push(comp);
            }
        }
    }
    let mut s = State {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        next: 0,
        out: Vec::new(),
    };
    let nodes: Vec<String> = edges.keys().cloned().collect();
    for v in nodes {
        if !s.index.contains_key(&v) {
            visit(&mut s, &v);
        }
    }
    s.out
}

/// The module path of a file of `src/`: `sandbox/doctor.rs` is
/// `[sandbox, doctor]`, `sandbox/mod.rs` `[sandbox]`, `lib.rs` `[]`.
fn module_path(rel: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .with_extension("")
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if parts.last().is_some_and(|p| p == "mod") || parts == ["lib"] || parts == ["main"] {
        parts.pop();
    }
    parts
}

/// Every module path in `code` that starts with `crate::`, `super::`,
/// `self::` or (2018-style) one of the file's own `children` followed by
/// `::`, as segments from the crate root, given the file's path `here`
/// (grouped imports expanded one level).
fn module_paths(code: &str, here: &[String], children: &[String]) -> Vec<Vec<String>> {
    let chars: Vec<char> = code.chars().collect();
    let word = |i: usize| -> String { chars[i..].iter().take_while(|c| is_ident(**c)).collect() };
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let starts_word = i == 0 || (!is_ident(chars[i - 1]) && chars[i - 1] != ':');
        if !starts_word || !is_ident(chars[i]) {
            i += 1;
            continue;
        }
        let first = word(i);
        let followed = chars[i + first.len()..].starts_with(&[':', ':']);
        let relative = first == "self" || children.contains(&first);
        if !(first == "crate" || first == "super" || (relative && followed)) {
            i += first.len();
            continue;
        }
        let mut base: Vec<String> = Vec::new();
        let mut supers = 0;
        let mut j = i;
        // The chain of `super::` / `crate::` / `self::`, then `a::b::`.
        loop {
            let w = word(j);
            if w.is_empty() || !chars[j + w.len()..].starts_with(&[':', ':']) {
                break;
            }
            match w.as_str() {
                "crate" | "self" if j == i => {}
                "super" if base.is_empty() => supers += 1,
                _ => base.push(w.clone()),
            }
            j += w.len() + 2;
        }
        let mut root: Vec<String> = if first == "crate" {
            Vec::new()
        } else {
            here[..here.len().saturating_sub(supers)].to_vec()
        };
        root.extend(base);
        let last = word(j);
        if chars.get(j) == Some(&'{') {
            // `{a::X, b}`: the leading segments of each item.
            let mut depth = 0;
            let mut item: Vec<String> = Vec::new();
            let mut k = j;
            while k < chars.len() {
                match chars[k] {
                    '{' => depth += 1,
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    ',' if depth == 1 => {
                        let mut p = root.clone();
                        p.append(&mut item);
                        out.push(p);
                    }
                    c if depth == 1 && is_ident(c) => {
                        let w = word(k);
                        item.push(w.clone());
                        k += w.len();
                        continue;
                    }
                    _ => {}
                }
                k += 1;
            }
            root.append(&mut item);
            out.push(root);
            i = k.max(i + 1);
        } else {
            if !last.is_empty() {
                root.push(last.clone());
            }
            out.push(root);
            i = j + last.len().max(1);
        }
    }
    out
}

/// The modules a file declares (`mod x;`, `pub mod x;`, `pub(crate) mod x;`).
fn child_modules(code: &str) -> Vec<String> {
    code.split(';')
        .filter_map(|stmt| {
            let words: Vec<&str> = stmt.split_whitespace().collect();
            match words.as_slice() {
                [.., "mod", name] if words.len() <= 3 => Some(name.to_string()),
                _ => None,
            }
        })
        .collect()
}

/// The `pub use` statements of `code` (any visibility), each without its
/// `pub ... use` and `;`, with `as` written `@`.
fn reexports(code: &str) -> Vec<(usize, usize, String)> {
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(at) = code[from..].find("pub") {
        let start = from + at;
        from = start + 3;
        if start > 0 && code[..start].ends_with(|c: char| is_ident(c)) {
            continue;
        }
        let rest = &code[start + 3..];
        let rest_trim = rest.trim_start();
        let vis_len = if rest_trim.starts_with('(') {
            rest_trim.find(')').map_or(0, |p| p + 1)
        } else {
            0
        };
        let after = rest_trim[vis_len..].trim_start();
        if !after.starts_with("use ") {
            continue;
        }
        let Some(end) = after.find(';') else { continue };
        let body = after["use ".len()..end].replace(" as ", "@");
        let body: String = body.chars().filter(|c| !c.is_whitespace()).collect();
        let stmt_end = code.len() - after.len() + end + 1;
        out.push((start, stmt_end, body));
        from = stmt_end;
    }
    out
}

/// The items of one `use` tree (`a::{b, c::D@E, f::*}`), each as its path
/// under `prefix` and the name it is known by (`*` for a glob).
fn use_items(tree: &str, prefix: &[String], out: &mut Vec<(Vec<String>, String)>) {
    let segments = |s: &str| -> Vec<String> {
        s.split("::")
            .map(str::trim)
            .filter(|x| !x.is_empty())
            .map(String::from)
            .collect()
    };
    if let (Some(open), Some(close)) = (tree.find('{'), tree.rfind('}')) {
        let mut p = prefix.to_vec();
        p.extend(segments(&tree[..open]));
        let inner = &tree[open + 1..close];
        let mut depth = 0;
        let mut start = 0;
        for (n, c) in inner.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    use_items(&inner[start..n], &p, out);
                    start = n + 1;
                }
                _ => {}
            }
        }
        if start < inner.len() {
            use_items(&inner[start..], &p, out);
        }
        return;
    }
    let (path, alias) = match tree.split_once('@') {
        Some((p, a)) => (p, Some(a.trim().to_string())),
        None => (tree, None),
    };
    let mut p = prefix.to_vec();
    p.extend(segments(path));
    if p.last().is_some_and(|l| l == "self") {
        p.pop();
    }
    let Some(last) = p.last().cloned() else {
        return;
    };
    out.push((p, alias.unwrap_or(last)));
}

/// `path` (as written in a file of module `here` with `children`) from the
/// crate root; `None` for another crate's path.
fn absolute(path: &[String], here: &[String], children: &[String]) -> Option<Vec<String>> {
    let first = path.first()?;
    let mut out = match first.as_str() {
        "crate" => Vec::new(),
        "super" => {
            let supers = path.iter().take_while(|s| *s == "super").count();
            let mut p = here[..here.len().saturating_sub(supers)].to_vec();
            p.extend(path[supers..].iter().cloned());
            return Some(p);
        }
        "self" => here.to_vec(),
        c if children.contains(&c.to_string()) => {
            let mut p = here.to_vec();
            p.push(c.to_string());
            p
        }
        _ => return None,
    };
    out.extend(path[1..].iter().cloned());
    Some(out)
}

/// Whether `code` defines an item called `name`.
fn defines(code: &str, name: &str) -> bool {
    [
        "struct", "enum", "fn", "const", "static", "trait", "type", "union", "mod",
    ]
    .iter()
    .any(|kw| {
        let pat = format!("{kw} {name}");
        code.match_indices(&pat).any(|(at, _)| {
            let before_ok = at == 0 || !code[..at].ends_with(|c: char| is_ident(c));
            let after_ok = !code[at + pat.len()..].starts_with(|c: char| is_ident(c));
            before_ok && after_ok
        })
    })
}

/// The files of `src/`, what they re-export, and where a path leads.
struct FileMap {
    /// Module path to file (`src/...`).
    by_path: BTreeMap<Vec<String>, String>,
    /// File to its code (comments and strings blanked, tests cut off).
    code: BTreeMap<String, String>,
    /// (module, name) to the path a `pub use` gives that name.
    named: BTreeMap<(Vec<String>, String), Vec<String>>,
    /// Module to the modules it re-exports everything of (`pub use x::*`).
    globs: BTreeMap<Vec<String>, Vec<Vec<String>>>,
}

/// Files that only declare and re-export modules (their `pub use` lines are
/// no imports of their own).
fn is_decl(f: &str) -> bool {
    f.ends_with("/mod.rs") || f == "src/lib.rs" || f == "src/main.rs"
}

impl FileMap {
    fn new() -> FileMap {
        let src = src_dir();
        let mut files = Vec::new();
        rust_files(&src, &mut files);
        let mut map = FileMap {
            by_path: BTreeMap::new(),
            code: BTreeMap::new(),
            named: BTreeMap::new(),
            globs: BTreeMap::new(),
        };
        for f in &files {
            let rel = f.strip_prefix(&src).unwrap();
            let name = format!("src/{}", rel.display());
            let here = module_path(rel);
            let code = strip(&std::fs::read_to_string(f).unwrap());
            let code = code.split("#[cfg(test)]").next().unwrap_or("").to_string();
            let children = child_modules(&code);
            for (_, _, tree) in reexports(&code) {
                let mut items = Vec::new();
                use_items(&tree, &[], &mut items);
                for (path, known_as) in items {
                    let Some(abs) = absolute(&path, &here, &children) else {
                        continue;
                    };
                    if known_as == "*" {
                        let mut module = abs;
                        module.pop();
                        map.globs.entry(here.clone()).or_default().push(module);
                    } else {
                        map.named.insert((here.clone(), known_as), abs);
                    }
                }
            }
            if !here.is_empty() {
                map.by_path.insert(here, name.clone());
            }
            map.code.insert(name, code);
        }
        map
    }

    /// The file that defines what `path` names, following re-exports
    /// (`follow`), or the file of its longest module prefix.
    fn resolve(&self, path: &[String], follow: bool, hops: usize) -> Option<String> {
        let n = (1..=path.len())
            .rev()
            .find(|n| self.by_path.contains_key(&path[..*n]))?;
        let file = &self.by_path[&path[..n]];
        if follow && n < path.len() && hops < 16 {
            let (module, name) = (path[..n].to_vec(), path[n].clone());
            if let Some(target) = self.named.get(&(module.clone(), name.clone())) {
                let mut p = target.clone();
                p.extend(path[n + 1..].iter().cloned());
                return self.resolve(&p, true, hops + 1);
            }
            for glob in self.globs.get(&module).into_iter().flatten() {
                if let Some(g) = self.by_path.get(glob) {
                    if defines(&self.code[g], &name) {
                        let mut p = glob.clone();
                        p.extend(path[n..].iter().cloned());
                        return self.resolve(&p, true, hops + 1);
                    }
                }
            }
        }
        Some(file.clone())
    }
}

/// Import edges between files of `src/`, from the code before any
/// `#[cfg(test)]`.
///
/// `Strict` follows a path through the `pub use` lines of the modules it
/// passes to the file that defines the item, so a module's `mod.rs` is a
/// file like any other: what it defines and what its own code uses
/// (`self::x`, `x::` for its own module `x`) are edges, what it only
/// declares and re-exports is not. `Lenient` stops at the file of the
/// longest module prefix and leaves `mod.rs` files out.
fn file_edges(mode: Mode) -> BTreeMap<String, BTreeSet<String>> {
    let strict = mode == Mode::Strict;
    let map = FileMap::new();
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (name, code) in &map.code {
        if !strict && is_decl(name) {
            continue;
        }
        let rel = Path::new(name).strip_prefix("src").unwrap();
        let here = module_path(rel);
        let mut code = code.clone();
        if is_decl(name) {
            // Re-exports are declarations, not uses.
            for (start, end, _) in reexports(&code.clone()) {
                let blank: String = code[start..end]
                    .chars()
                    .map(|c| if c == '\n' { '\n' } else { ' ' })
                    .collect();
                code.replace_range(start..end, &blank);
            }
        }
        let children = if strict {
            child_modules(&code)
        } else {
            Vec::new()
        };
        for path in module_paths(&code, &here, &children) {
            if let Some(t) = map.resolve(&path, strict, 0) {
                if t != *name && (strict || !is_decl(&t)) {
                    edges.entry(name.clone()).or_default().insert(t);
                }
            }
        }
    }
    edges
}

/// How [`file_edges`] reads paths.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Strict,
    Lenient,
}

/// Where [`Mode::Strict`] cycles are refused: all of `src/` (a prefix left
/// out here would be checked by the lenient graph only).
const STRICT_ROOTS: &[&str] = &["src/"];

/// The backend-neutral files of `src/sandbox`: sessions, their types and
/// errors, which every backend uses and which use no backend.
const NEUTRAL: &[&str] = &[
    "src/sandbox/asciicast.rs",
    "src/sandbox/audience.rs",
    "src/sandbox/backend.rs",
    "src/sandbox/detach.rs",
    "src/sandbox/error.rs",
    "src/sandbox/fds.rs",
    "src/sandbox/image.rs",
    "src/sandbox/marker.rs",
    "src/sandbox/marker_filter.rs",
    "src/sandbox/session.rs",
    "src/sandbox/spawner.rs",
    "src/sandbox/streaming.rs",
    "src/sandbox/types.rs",
];

/// The backends and the rooms of the local one.
const BACKENDS: &[&str] = &[
    "src/sandbox/isolate/",
    "src/sandbox/verifier/",
    "src/sandbox/local/",
    "src/sandbox/apptainer.rs",
    "src/sandbox/oci/",
    "src/sandbox/container.rs",
];

/// The rooms of `src/sandbox` (files under the first prefix) and what they
/// may not import (files under the others): isolation knows no image and no
/// verifier, the verifier no backend, image building no session control.
const ROOM_RULES: &[(&str, &[&str])] = &[
    (
        "src/sandbox/isolate/",
        &["src/sandbox/verifier/", "src/sandbox/local/"],
    ),
    ("src/sandbox/verifier/", &["src/sandbox/local/"]),
    (
        "src/sandbox/local/build/",
        &["src/sandbox/local/control.rs", "src/sandbox/local/state.rs"],
    ),
];

#[test]
fn no_cycles_between_files() {
    let found = cycles(&file_edges(Mode::Lenient));
    assert!(
        found.is_empty(),
        "file import cycles (move the shared piece to its own file): {found:?}"
    );
    let strict: Vec<Vec<String>> = cycles(&file_edges(Mode::Strict))
        .into_iter()
        .filter(|c| {
            c.iter()
                .any(|f| STRICT_ROOTS.iter().any(|r| f.starts_with(r)))
        })
        .collect();
    assert!(
        strict.is_empty(),
        "file import cycles through re-exports or mod.rs (move the shared piece to its own file): {strict:?}"
    );
}

#[test]
fn sandbox_rooms_keep_their_rules() {
    let mut rules: Vec<(&str, Vec<&str>)> = ROOM_RULES
        .iter()
        .map(|(room, banned)| (*room, banned.to_vec()))
        .collect();
    for neutral in NEUTRAL {
        rules.push((neutral, BACKENDS.to_vec()));
    }
    let mut bad = Vec::new();
    for (from, to) in file_edges(Mode::Strict) {
        for (room, banned) in &rules {
            if !from.starts_with(room) {
                continue;
            }
            for t in to
                .iter()
                .filter(|t| banned.iter().any(|b| t.starts_with(b)))
            {
                bad.push(format!("{from} -> {t}"));
            }
        }
    }
    assert!(
        bad.is_empty(),
        "imports against the rooms of src/sandbox (ROOM_RULES, NEUTRAL in tests/layers.rs):\n{}",
        bad.join("\n")
    );
}

#[test]
fn the_file_graph_follows_reexports_and_children() {
    let mut items = Vec::new();
    use_items("a::{b, c::D@E, f::{self, g}, h::*}", &[], &mut items);
    let want: Vec<(Vec<String>, String)> = [
        (vec!["a", "b"], "b"),
        (vec!["a", "c", "D"], "E"),
        (vec!["a", "f"], "f"),
        (vec!["a", "f", "g"], "g"),
        (vec!["a", "h", "*"], "*"),
    ]
    .iter()
    .map(|(p, n)| (p.iter().map(|s| s.to_string()).collect(), n.to_string()))
    .collect();
    assert_eq!(items, want);
    let here = vec!["sandbox".to_string(), "local".to_string()];
    let children = vec!["bwrap".to_string()];
    let found = module_paths(
        "use self::control::X; bwrap::args(&s); let bwrap = 1; super::Backend",
        &here,
        &children,
    );
    let want: Vec<Vec<&str>> = vec![
        vec!["sandbox", "local", "control", "X"],
        vec!["sandbox", "local", "bwrap", "args"],
        vec!["sandbox", "Backend"],
    ];
    assert_eq!(found, want);
    assert!(defines("pub struct LocalBackend {", "LocalBackend"));
    assert!(!defines("pub struct LocalBackends {", "LocalBackend"));
}

#[test]
fn every_top_level_module_is_in_the_table() {
    let src = src_dir();
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let missing: BTreeSet<String> = files
        .iter()
        .map(|f| module_of(f.strip_prefix(&src).unwrap()))
        .filter(|m| layer_of(m).is_none())
        .collect();
    assert!(
        missing.is_empty(),
        "top-level modules missing from LAYERS in tests/layers.rs: {missing:?}"
    );
}

#[test]
fn modules_use_only_lower_layers() {
    let bad: Vec<String> = all_uses()
        .into_iter()
        .filter(|u| !allowed(&u.from, &u.to))
        .map(|u| format!("{}:{}: {} -> {}", u.file.display(), u.line, u.from, u.to))
        .collect();
    assert!(
        bad.is_empty(),
        "{} use(s) against the layer table in tests/layers.rs:\n{}",
        bad.len(),
        bad.join("\n")
    );
}

#[test]
fn no_cycles_between_top_level_modules() {
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for u in all_uses() {
        edges.entry(u.from).or_default().insert(u.to);
    }
    let found = cycles(&edges);
    assert!(found.is_empty(), "module cycles: {found:?}");
}

#[test]
fn the_scanner_sees_through_comments_strings_and_groups() {
    let code = strip(
        "use crate::a::X; // crate::b\n\
         let s = \"crate::c\"; let c = '\"'; let r = r#\"crate::d\"#;\n\
         /* crate::e */ fn f<'a>() { crate::g::h(); }\n\
         use crate::{i::J, k, l::{m, n}};\n",
    );
    let found: Vec<(usize, String)> = crate_refs(&code);
    let want: Vec<(usize, String)> = [(1, "a"), (3, "g"), (4, "i"), (4, "k"), (4, "l")]
        .iter()
        .map(|(l, s)| (*l, s.to_string()))
        .collect();
    assert_eq!(found, want);
    let up = strip("use super::super::verify::PYTHON;\nuse super::local;\n");
    assert_eq!(super_refs(&up, 2), vec![(1, "verify".to_string())]);
    assert!(super_refs(&up, 3).is_empty());
}
