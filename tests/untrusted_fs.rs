//! Path-based filesystem calls in the code that handles trees endless does
//! not trust, found.
//!
//! Image and step directories, verifier environments, task bundles, job
//! directories and the workspaces of other nodes are reached through
//! `endless::fsutil` (see its module docs): a path-based `std::fs` call
//! there follows whatever link a task planted. This test scans the source
//! files that handle those trees ([`UNTRUSTED`]) for path-based calls
//! (`std::fs::` functions, `File::open`/`create`, `OpenOptions`, `chown`,
//! `lchown`, `symlink`) outside their test modules, and fails for each one
//! whose line, or the line above, lacks a `// trusted: why` comment (a
//! fresh temporary of our own, a tree no one else can write meanwhile). A
//! file whose every path is trusted for one reason says it once, in its
//! module docs (`//! trusted: why`).

#![allow(clippy::unwrap_used)] // tests and benches fail loudly

use std::path::{Path, PathBuf};

/// Where untrusted trees are handled: a top-level module of `src/` and a
/// file name found anywhere below it (`None`: every file of the module).
/// Matched by name, so that a file keeps being checked when it moves
/// within its module; a name that matches no file fails the test (update
/// the list when a file is renamed).
const UNTRUSTED: &[(&str, Option<&str>)] = &[
    // Image building: image and step directories, the step cache, the
    // flattened and evicted images, their layout, verifier environments.
    ("sandbox", Some("image.rs")),
    ("sandbox", Some("buildstep.rs")),
    ("sandbox", Some("stepcache.rs")),
    ("sandbox", Some("flatten.rs")),
    ("sandbox", Some("evict.rs")),
    ("sandbox", Some("layout.rs")),
    ("sandbox", Some("verifier_env.rs")),
    // Image archives, pulled and unpacked layers, the image store.
    ("images", None),
    // Workspaces: task bundles imported, other nodes' workspaces merged.
    ("store", None),
    // Task bundles.
    ("task", None),
    // Harbor job directories and runs imported from other tools.
    ("workbench", Some("harbor_job.rs")),
    ("workbench", Some("import_runs.rs")),
];

/// `std::fs` functions that take a path.
const FS_FUNCTIONS: &[&str] = &[
    "read",
    "read_to_string",
    "read_dir",
    "write",
    "create_dir",
    "create_dir_all",
    "remove_file",
    "remove_dir",
    "remove_dir_all",
    "rename",
    "copy",
    "hard_link",
    "metadata",
    "symlink_metadata",
    "set_permissions",
    "canonicalize",
    "read_link",
    "soft_link",
    "symlink",
    "chown",
    "lchown",
];

/// Other path-based calls, matched as written.
const OTHER_CALLS: &[&str] = &[
    "File::open(",
    "File::create(",
    "File::create_new(",
    "OpenOptions::new(",
    "File::options(",
];

/// The justification a path-based call needs.
const MARK: &str = "// trusted:";

/// The justification, once for a whole file, in its module docs.
const FILE_MARK: &str = "//! trusted:";

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Whether `code` (one line, comments removed) calls a path-based function.
fn path_based(code: &str) -> bool {
    if OTHER_CALLS.iter().any(|c| code.contains(c)) {
        return true;
    }
    let calls = |name: &str, prefix: &str| {
        let needle = format!("{prefix}{name}");
        code.match_indices(&needle).any(|(at, _)| {
            let before = code[..at].chars().next_back();
            let after = code[at + needle.len()..].trim_start();
            !before.is_some_and(is_ident) && after.starts_with('(')
        })
    };
    FS_FUNCTIONS.iter().any(|f| calls(f, "fs::"))
        || ["chown", "lchown", "symlink"].iter().any(|f| calls(f, ""))
}

/// The offending lines of one file: `(line number, line)` for each
/// path-based call before the file's test module that lacks [`MARK`].
fn unmarked(src: &str) -> Vec<(usize, String)> {
    if src.lines().any(|l| l.trim_start().starts_with(FILE_MARK)) {
        return Vec::new();
    }
    let lines: Vec<&str> = src.lines().collect();
    let mut found = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("#[cfg(test)]") {
            break;
        }
        let code = trimmed.split("//").next().unwrap_or("");
        if !path_based(code) {
            continue;
        }
        let above = i.checked_sub(1).map_or("", |j| lines[j]);
        if !line.contains(MARK) && !above.contains(MARK) {
            found.push((i + 1, trimmed.to_string()));
        }
    }
    found
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The files [`UNTRUSTED`] names, and the entries that named none.
fn untrusted_files() -> (Vec<PathBuf>, Vec<String>) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    let mut missing = Vec::new();
    for (module, name) in UNTRUSTED {
        let mut all = Vec::new();
        let dir = src.join(module);
        if dir.is_dir() {
            rust_files(&dir, &mut all);
        }
        let before = files.len();
        files.extend(
            all.into_iter()
                .filter(|p| name.is_none_or(|n| p.file_name().is_some_and(|f| f == n))),
        );
        if files.len() == before {
            missing.push(format!("{module}/**/{}", name.unwrap_or("*.rs")));
        }
    }
    files.sort();
    files.dedup();
    (files, missing)
}

#[test]
fn untrusted_trees_are_touched_only_through_fsutil() {
    let (files, missing) = untrusted_files();
    assert!(
        missing.is_empty(),
        "no file matches {missing:?}: update UNTRUSTED in tests/untrusted_fs.rs"
    );
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut report = Vec::new();
    for file in &files {
        let src = std::fs::read_to_string(file).unwrap();
        for (n, line) in unmarked(&src) {
            let rel = file.strip_prefix(root).unwrap_or(file);
            report.push(format!("{}:{n}: {line}", rel.display()));
        }
    }
    assert!(
        report.is_empty(),
        "path-based filesystem calls in code that handles untrusted trees; use \
         endless::fsutil (UntrustedDir, open_beneath, BundleDir), or say why the \
         path is safe with a `{MARK} why` comment on the line or the line above:\n{}",
        report.join("\n")
    );
}

#[test]
fn the_scanner_finds_calls_and_honours_the_mark() {
    let src = "use std::fs;\n\
               fn f(p: &Path) {\n\
               let a = std::fs::read(p);\n\
               let b = fs::write (p, b\"x\");\n\
               let c = File::open(p);\n\
               std::os::unix::fs::chown(p, None, None);\n\
               // trusted: our own temporary\n\
               fs::remove_file(p);\n\
               let d = fs::metadata(p); // trusted: read-only, ours\n\
               fchown(&f, None, None); fs_read(p); f.read(&mut b);\n\
               let e = f.metadata(); // fs::read(p) in a comment\n\
               }\n\
               #[cfg(test)]\n\
               mod tests { fn t() { std::fs::read(\"x\"); } }\n";
    let lines: Vec<usize> = unmarked(src).into_iter().map(|(n, _)| n).collect();
    assert_eq!(lines, [3, 4, 5, 6]);
    let whole = format!("//! A module.\n//! trusted: the private cache only\n{src}");
    assert!(unmarked(&whole).is_empty());
}
