//! Mutants of an end state: small damage to what the oracle changed (a
//! file emptied, truncated by its last line, a line duplicated or dropped,
//! a number changed, a file removed, a permission reverted, a deleted file
//! put back). Tests that accept a mutant do not check what it broke.

use super::snapshot::{Change, ChangeKind};

/// Text files larger than this are only removed or re-permissioned, not
/// edited line by line (a mutant travels as one base64 argument).
pub const MAX_EDITED_BYTES: usize = 64 * 1024;

/// What a mutant does to its path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Replace the file's contents (mode and owner kept).
    Write(Vec<u8>),
    /// Remove the path (recursively for a directory).
    Remove,
    /// Set the permission bits.
    Chmod(u32),
    /// Create an empty file where the oracle deleted one.
    Recreate,
}

/// One mutant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mutant {
    /// The path it damages.
    pub path: String,
    /// The mutation's name (`emptied`, `last line dropped`, ...).
    pub kind: &'static str,
    /// What it does.
    pub action: Action,
    /// The damage as a diff against the oracle's end state.
    pub diff: String,
}

/// The mutants of one change; `content` is the file's contents at the end
/// state (for regular files the oracle created or modified, when
/// readable), `original` its contents before the oracle (for files it
/// modified). Edits of a modified file touch only the lines the oracle
/// wrote, and one mutant reverts the modification whole.
pub fn of_change(change: &Change, content: Option<&[u8]>, original: Option<&[u8]>) -> Vec<Mutant> {
    let mut out = Vec::new();
    let path = change.path.as_str();
    let mutant = |kind: &'static str, action: Action, diff: String| Mutant {
        path: path.to_string(),
        kind,
        action,
        diff,
    };
    match change.kind {
        ChangeKind::Deleted => {
            if change.before.as_ref().is_some_and(|b| b.kind == 'f') {
                out.push(mutant(
                    "deleted file put back (empty)",
                    Action::Recreate,
                    format!(
                        "--- /dev/null\n+++ {path}\n(an empty file where the oracle deleted one)"
                    ),
                ));
            }
        }
        ChangeKind::Created | ChangeKind::Modified => {
            let Some(after) = &change.after else {
                return out;
            };
            let as_text = |c: Option<&[u8]>| {
                c.filter(|c| c.len() <= MAX_EDITED_BYTES)
                    .and_then(|c| std::str::from_utf8(c).ok())
                    .map(str::to_string)
            };
            if after.kind == 'f' {
                if let Some(text) = as_text(content) {
                    let old = as_text(original);
                    let edits = match &old {
                        // Only its mode changed: nothing the oracle wrote to edit.
                        Some(old) if *old == text => Vec::new(),
                        Some(old) => {
                            let mut e = text_mutants_of(&text, &written_lines(old, &text), path);
                            if *old != text {
                                e.push(("modification reverted", old.clone()));
                            }
                            e
                        }
                        None => text_mutants_of(&text, &content_lines(&text), path),
                    };
                    for (kind, new) in without_equivalents(&text, edits) {
                        let diff = line_diff(path, &text, &new);
                        out.push(mutant(kind, Action::Write(new.into_bytes()), diff));
                    }
                }
            }
            if change.kind == ChangeKind::Created {
                let what = if after.kind == 'd' {
                    "directory"
                } else {
                    "file"
                };
                out.push(mutant(
                    if after.kind == 'd' {
                        "directory removed"
                    } else {
                        "file removed"
                    },
                    Action::Remove,
                    format!(
                        "--- {path}\n+++ /dev/null\n(the {what} the oracle created is removed)"
                    ),
                ));
                if after.kind == 'f' && after.mode & 0o111 != 0 {
                    let mode = after.mode & !0o111;
                    out.push(mutant(
                        "permission reverted",
                        Action::Chmod(mode),
                        format!("{path}: mode {:o} -> {mode:o} (not executable)", after.mode),
                    ));
                }
            } else if let Some(before) = change.before.as_ref().filter(|b| b.mode != after.mode) {
                out.push(mutant(
                    "permission reverted",
                    Action::Chmod(before.mode),
                    format!(
                        "{path}: mode {:o} -> {:o} (as before the oracle)",
                        after.mode, before.mode
                    ),
                ));
            }
        }
    }
    out
}

/// The indexes of the lines of `text` that say something: not blank, not
/// a comment (`#`, `//`, `;`), not a shell's `set` of options.
pub fn content_lines(text: &str) -> Vec<usize> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| {
            let t = l.trim();
            !(t.is_empty()
                || t.starts_with('#')
                || t.starts_with("//")
                || t.starts_with(';')
                || t.starts_with("set -"))
        })
        .map(|(i, _)| i)
        .collect()
}

/// The content lines of `new` the oracle wrote: those not in `old` (as
/// many times).
pub fn written_lines(old: &str, new: &str) -> Vec<usize> {
    let mut left: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    for l in old.lines() {
        *left.entry(l).or_default() += 1;
    }
    let content: std::collections::HashSet<usize> = content_lines(new).into_iter().collect();
    let mut out = Vec::new();
    for (i, l) in new.lines().enumerate() {
        match left.get_mut(l) {
            Some(n) if *n > 0 => *n -= 1,
            _ if content.contains(&i) => out.push(i),
            _ => {}
        }
    }
    out
}

/// Whether `path` (holding `text`) is a configuration file or a script,
/// where a line duplicated sets the same thing twice or repeats an
/// idempotent command: most likely an equivalent mutant, not a weak test.
fn duplicates_are_equivalent(path: &str, text: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    let ext = name.rsplit_once('.').map_or("", |(_, e)| e);
    name.starts_with('.')
        || name.ends_with("rc")
        || text.starts_with("#!")
        || [
            "ini",
            "conf",
            "cfg",
            "env",
            "toml",
            "yaml",
            "yml",
            "properties",
            "json",
            "sh",
            "bash",
            "py",
        ]
        .contains(&ext)
}

/// Whether `path` is state a tool keeps for itself (a repository's
/// `.git`, caches, shell histories): not mutated, since tests rightly do
/// not check it.
pub fn is_bookkeeping(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    ["/.git/", "/__pycache__/", "/.cache/", "/.pytest_cache/"]
        .iter()
        .any(|d| path.contains(d) || path.ends_with(d.trim_end_matches('/')))
        || name.ends_with(".pyc")
        || [
            ".bash_history",
            ".python_history",
            ".sqlite_history",
            ".viminfo",
            ".lesshst",
            ".wget-hsts",
        ]
        .contains(&name)
}

/// Drop the edits that mean the same as `text`: a JSON document that
/// parses to the same value.
fn without_equivalents(
    text: &str,
    edits: Vec<(&'static str, String)>,
) -> Vec<(&'static str, String)> {
    let Ok(json) = serde_json::from_str::<serde_json::Value>(text) else {
        return edits;
    };
    edits
        .into_iter()
        .filter(|(_, new)| {
            serde_json::from_str::<serde_json::Value>(new).ok().as_ref() != Some(&json)
        })
        .collect()
}

/// The edits of a text file touching only the lines `lines` (indexes):
/// `(kind, new text)`, each differing from it.
pub fn text_mutants_of(text: &str, lines: &[usize], path: &str) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    if text.is_empty() {
        return out;
    }
    out.push(("emptied", String::new()));
    let trailing = text.ends_with('\n');
    let all: Vec<&str> = text.lines().collect();
    let join = |ls: Vec<&str>| {
        let mut s = ls.join("\n");
        if trailing && !ls.is_empty() {
            s.push('\n');
        }
        s
    };
    let without = |k: usize| {
        let mut v = all.clone();
        v.remove(k);
        join(v)
    };
    if let (Some(&first), Some(&last)) = (lines.first(), lines.last()) {
        if all.len() >= 2 {
            out.push(("last line dropped", without(last)));
            if first != last {
                out.push(("first line dropped", without(first)));
            }
        }
        if !duplicates_are_equivalent(path, text) {
            let mid = lines[lines.len() / 2];
            let mut dup = all.clone();
            dup.insert(mid, all[mid]);
            out.push(("a line duplicated", join(dup)));
        }
        if let Some(&k) = lines
            .iter()
            .find(|&&k| all[k].contains(|c: char| c.is_ascii_digit()))
        {
            if let Some(changed) = change_number(all[k]) {
                let mut v = all.clone();
                v[k] = &changed;
                out.push(("a number changed", join(v.clone())));
            }
        }
    }
    out.retain(|(_, new)| new != text);
    out
}

/// The edits of a text file (every content line may be touched).
pub fn text_mutants(text: &str) -> Vec<(&'static str, String)> {
    text_mutants_of(text, &content_lines(text), "")
}

/// `text` with its first decimal number increased by one, if it has one.
pub fn change_number(text: &str) -> Option<String> {
    let start = text.find(|c: char| c.is_ascii_digit())?;
    let len = text[start..]
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len() - start);
    let digits = &text[start..start + len];
    // Decimal increment without overflow: 199 -> 200, 9 -> 10.
    let mut bytes: Vec<u8> = digits.bytes().collect();
    let mut i = bytes.len();
    loop {
        if i == 0 {
            bytes.insert(0, b'1');
            break;
        }
        i -= 1;
        if bytes[i] == b'9' {
            bytes[i] = b'0';
        } else {
            bytes[i] += 1;
            break;
        }
    }
    let new = String::from_utf8(bytes).ok()?;
    Some(format!("{}{new}{}", &text[..start], &text[start + len..]))
}

/// A unified-style diff of one edit: the lines both share at the start
/// and end are context, the rest removed and added (at most 20 each).
pub fn line_diff(path: &str, old: &str, new: &str) -> String {
    let a: Vec<&str> = old.lines().collect();
    let b: Vec<&str> = new.lines().collect();
    let prefix = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let suffix = a[prefix..]
        .iter()
        .rev()
        .zip(b[prefix..].iter().rev())
        .take_while(|(x, y)| x == y)
        .count();
    let mut out = format!(
        "--- {path}\n+++ {path} (mutant)\n@@ line {} @@\n",
        prefix + 1
    );
    if prefix > 0 {
        out.push_str(&format!(" {}\n", a[prefix - 1]));
    }
    let removed = &a[prefix..a.len() - suffix];
    let added = &b[prefix..b.len() - suffix];
    for (sign, lines) in [('-', removed), ('+', added)] {
        for l in lines.iter().take(20) {
            out.push_str(&format!("{sign}{l}\n"));
        }
        if lines.len() > 20 {
            out.push_str(&format!("{sign}… ({} more lines)\n", lines.len() - 20));
        }
    }
    if removed.is_empty() && added.is_empty() {
        out.push_str("(only the final newline changed)\n");
    }
    if suffix > 0 {
        out.push_str(&format!(" {}\n", a[a.len() - suffix]));
    }
    out
}

/// Take mutants from each file's list in turn (first of each, then second
/// of each, ...) up to `max`, so a cap keeps every file represented.
pub fn interleave(per_file: Vec<Vec<Mutant>>, max: usize) -> Vec<Mutant> {
    let mut iters: Vec<_> = per_file.into_iter().map(Vec::into_iter).collect();
    let mut out = Vec::new();
    loop {
        let mut any = false;
        for it in iters.iter_mut() {
            if out.len() >= max {
                return out;
            }
            if let Some(m) = it.next() {
                out.push(m);
                any = true;
            }
        }
        if !any {
            return out;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::snapshot::Entry;

    fn entry(kind: char, mode: u32) -> Entry {
        Entry {
            kind,
            mode,
            owner: (1000, 1000),
            size: 1,
            mtime: "1".into(),
        }
    }

    #[test]
    fn text_mutants_differ_from_the_original() {
        let m = text_mutants("a\nb 41\nc\n");
        let kinds: Vec<&str> = m.iter().map(|x| x.0).collect();
        assert_eq!(
            kinds,
            vec![
                "emptied",
                "last line dropped",
                "first line dropped",
                "a line duplicated",
                "a number changed"
            ]
        );
        assert_eq!(m[1].1, "a\nb 41\n");
        assert_eq!(m[2].1, "b 41\nc\n");
        assert_eq!(m[3].1, "a\nb 41\nb 41\nc\n");
        assert_eq!(m[4].1, "a\nb 42\nc\n");
        assert!(text_mutants("").is_empty());
        assert_eq!(text_mutants("x").len(), 2, "emptied and duplicated");
    }

    #[test]
    fn modified_files_are_mutated_where_the_oracle_wrote_and_equivalents_dropped() {
        let old = "# settings\nmode=prod\nthreads=4\n";
        let new = "# settings\nmode=prod\nthreads=4\nbackup=on\n";
        assert_eq!(written_lines(old, new), vec![3]);
        let modified = Change {
            path: "/home/user/app.conf".into(),
            kind: ChangeKind::Modified,
            before: Some(entry('f', 0o644)),
            after: Some(entry('f', 0o644)),
        };
        let m = of_change(&modified, Some(new.as_bytes()), Some(old.as_bytes()));
        let kinds: Vec<&str> = m.iter().map(|x| x.kind).collect();
        // No duplicate in a config file (setting a key twice means the same).
        assert_eq!(
            kinds,
            vec!["emptied", "last line dropped", "modification reverted"]
        );
        assert_eq!(m[1].action, Action::Write(old.as_bytes().to_vec()));
        // Comments are not the content: the first content line is dropped.
        let t = text_mutants("# head\na 1\nb\n");
        assert_eq!(t[2], ("first line dropped", "# head\nb\n".to_string()));
        // A JSON line duplicated parses to the same document: equivalent, dropped.
        let json = "{\n  \"a\": 1,\n  \"b\": 2\n}\n";
        let created = Change {
            path: "/home/user/out.json".into(),
            kind: ChangeKind::Created,
            before: None,
            after: Some(entry('f', 0o644)),
        };
        let kinds: Vec<&str> = of_change(&created, Some(json.as_bytes()), None)
            .iter()
            .map(|x| x.kind)
            .collect();
        assert!(!kinds.contains(&"a line duplicated"), "{kinds:?}");
        assert!(kinds.contains(&"a number changed"), "{kinds:?}");
    }

    #[test]
    fn tool_bookkeeping_and_mode_only_changes_are_not_edited() {
        assert!(is_bookkeeping("/home/user/repo/.git/logs/HEAD"));
        assert!(is_bookkeeping("/home/user/repo/.git"));
        assert!(is_bookkeeping("/home/user/.bash_history"));
        assert!(!is_bookkeeping("/home/user/gitlog.txt"));
        let chmodded = Change {
            path: "/home/user/run.sh".into(),
            kind: ChangeKind::Modified,
            before: Some(entry('f', 0o644)),
            after: Some(entry('f', 0o755)),
        };
        let m = of_change(&chmodded, Some(b"echo 1\n"), Some(b"echo 1\n"));
        assert_eq!(m.len(), 1);
        assert_eq!(m[0].action, Action::Chmod(0o644));
    }

    #[test]
    fn numbers_increment_with_carry() {
        assert_eq!(change_number("n=199;").unwrap(), "n=200;");
        assert_eq!(change_number("9").unwrap(), "10");
        assert_eq!(change_number("none"), None);
    }

    #[test]
    fn diffs_show_the_edit_with_context() {
        let d = line_diff("/f", "a\nb\nc\n", "a\nc\n");
        assert_eq!(d, "--- /f\n+++ /f (mutant)\n@@ line 2 @@\n a\n-b\n c\n");
    }

    #[test]
    fn changes_give_their_mutants() {
        let created = Change {
            path: "/home/user/run.sh".into(),
            kind: ChangeKind::Created,
            before: None,
            after: Some(entry('f', 0o755)),
        };
        let m = of_change(&created, Some(b"echo 1\n"), None);
        let kinds: Vec<&str> = m.iter().map(|x| x.kind).collect();
        assert_eq!(
            kinds,
            vec![
                "emptied",
                "a number changed",
                "file removed",
                "permission reverted"
            ],
            "no duplicated line in a script"
        );
        assert_eq!(m[3].action, Action::Chmod(0o644));
        let deleted = Change {
            path: "/tmp/x".into(),
            kind: ChangeKind::Deleted,
            before: Some(entry('f', 0o644)),
            after: None,
        };
        assert_eq!(of_change(&deleted, None, None)[0].action, Action::Recreate);
        let chmodded = Change {
            path: "/srv/d".into(),
            kind: ChangeKind::Modified,
            before: Some(entry('d', 0o755)),
            after: Some(entry('d', 0o700)),
        };
        assert_eq!(
            of_change(&chmodded, None, None)[0].action,
            Action::Chmod(0o755)
        );
    }

    #[test]
    fn interleaving_keeps_every_file() {
        let mk = |p: &str, n: usize| -> Vec<Mutant> {
            (0..n)
                .map(|_| Mutant {
                    path: p.into(),
                    kind: "k",
                    action: Action::Remove,
                    diff: String::new(),
                })
                .collect()
        };
        let out = interleave(vec![mk("a", 5), mk("b", 1), mk("c", 2)], 4);
        let paths: Vec<&str> = out.iter().map(|m| m.path.as_str()).collect();
        assert_eq!(paths, vec!["a", "b", "c", "a"]);
    }
}
