//! What an episode changed: a manifest of the sandbox's files (type, mode,
//! owner, size, modification time) before and after, and their
//! difference: files created, modified and deleted. System trees (`/usr`
//! but `/usr/local`, `/proc`, `/sys`, `/dev`, `/run`, libraries, package
//! caches) and the verifier's mount points (`/tests`, `/logs`) are left
//! out: an oracle that changes them is not mutated there.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::sandbox::{SandboxError, Session};

/// Trees the manifest leaves out.
const PRUNED: [&str; 20] = [
    "/proc",
    "/sys",
    "/dev",
    "/run",
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/boot",
    "/snap",
    "/nix",
    "/var/lib",
    "/var/cache",
    "/solution",
    "/tmp/.endless-audit",
    // The verifier's mount points (pytest's and a verifier script's).
    "/tests",
    "/logs",
];

/// One file of a manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// `f` file, `d` directory, `l` symlink, ... (find's `%y`).
    pub kind: char,
    /// Permission bits.
    pub mode: u32,
    /// Owner uid and gid inside the sandbox.
    pub owner: (u32, u32),
    /// Size in bytes.
    pub size: u64,
    /// Modification time (seconds, as find prints it).
    pub mtime: String,
}

/// The files of a sandbox by path.
pub type Manifest = BTreeMap<String, Entry>;

/// How a path changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ChangeKind {
    /// It did not exist before.
    Created,
    /// Its contents, type or mode changed.
    Modified,
    /// It no longer exists.
    Deleted,
}

/// One path the episode changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// The path.
    pub path: String,
    /// How.
    pub kind: ChangeKind,
    /// What it was.
    pub before: Option<Entry>,
    /// What it is.
    pub after: Option<Entry>,
}

/// The shell command that prints the manifest (one line per file:
/// `type TAB mode TAB uid TAB gid TAB size TAB mtime TAB path`), leaving
/// out `also_pruned` too.
pub fn command(also_pruned: &[&str]) -> String {
    let prune: Vec<String> = PRUNED
        .iter()
        .chain(also_pruned)
        .map(|p| format!("-path {}", shell_quote(p)))
        .collect();
    let fmt = "'%y\\t%m\\t%U\\t%G\\t%s\\t%T@\\t%p\\n'";
    format!(
        "find / -mindepth 1 \\( {} \\) -prune -o -printf {fmt} 2>/dev/null; \
         find /usr/local -mindepth 1 -printf {fmt} 2>/dev/null; true",
        prune.join(" -o ")
    )
}

/// The manifest of `session`'s files (run as root beside its shell).
pub fn take(session: &mut Session) -> Result<Manifest, SandboxError> {
    let exchange = session.exchange_dir().map(|(_, inside)| inside);
    let extra: Vec<&str> = exchange.iter().map(String::as_str).collect();
    let argv = vec![
        "/usr/bin/env".to_string(),
        "-C".into(),
        "/".into(),
        "/bin/sh".into(),
        "-c".into(),
        command(&extra),
    ];
    let out = session.run_as_root(&argv, Duration::from_secs(120))?;
    if out.timed_out {
        return Err(SandboxError::Verify(
            "listing the sandbox's files took over 120s".into(),
        ));
    }
    Ok(parse(&out.output))
}

/// Parse the output of [`command`] (lines that do not parse are skipped).
pub fn parse(text: &str) -> Manifest {
    let mut out = Manifest::new();
    for line in text.lines() {
        let mut f = line.splitn(7, '\t');
        let (Some(kind), Some(mode), Some(uid), Some(gid), Some(size), Some(mtime), Some(path)) = (
            f.next(),
            f.next(),
            f.next(),
            f.next(),
            f.next(),
            f.next(),
            f.next(),
        ) else {
            continue;
        };
        let (Some(kind), Ok(mode), Ok(uid), Ok(gid), Ok(size)) = (
            kind.chars().next(),
            u32::from_str_radix(mode, 8),
            uid.parse(),
            gid.parse(),
            size.parse(),
        ) else {
            continue;
        };
        out.insert(
            path.to_string(),
            Entry {
                kind,
                mode,
                owner: (uid, gid),
                size,
                mtime: mtime.to_string(),
            },
        );
    }
    out
}

/// What changed from `before` to `after`. A directory counts as modified
/// only when its type or mode changed (not when files in it did).
pub fn diff(before: &Manifest, after: &Manifest) -> Vec<Change> {
    let mut out = Vec::new();
    for (path, a) in after {
        match before.get(path) {
            None => out.push(Change {
                path: path.clone(),
                kind: ChangeKind::Created,
                before: None,
                after: Some(a.clone()),
            }),
            Some(b) => {
                let changed = b.kind != a.kind
                    || b.mode != a.mode
                    || (a.kind != 'd' && (b.size != a.size || b.mtime != a.mtime));
                if changed {
                    out.push(Change {
                        path: path.clone(),
                        kind: ChangeKind::Modified,
                        before: Some(b.clone()),
                        after: Some(a.clone()),
                    });
                }
            }
        }
    }
    for (path, b) in before {
        if !after.contains_key(path) {
            out.push(Change {
                path: path.clone(),
                kind: ChangeKind::Deleted,
                before: Some(b.clone()),
                after: None,
            });
        }
    }
    out.sort_by(|x, y| x.path.cmp(&y.path));
    out
}

/// `s` quoted for the shell.
pub fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifests_parse_and_diff() {
        let before = parse(
            "f\t644\t1000\t1000\t10\t100.0\t/home/user/a.txt\n\
             d\t755\t1000\t1000\t4096\t100.0\t/home/user\n\
             f\t644\t0\t0\t3\t100.0\t/etc/gone\n\
             garbage line\n",
        );
        assert_eq!(before.len(), 3);
        assert_eq!(before["/home/user/a.txt"].mode, 0o644);
        let after = parse(
            "f\t644\t1000\t1000\t12\t200.0\t/home/user/a.txt\n\
             d\t755\t1000\t1000\t4096\t200.0\t/home/user\n\
             f\t755\t1000\t1000\t0\t200.0\t/home/user/new file.sh\n",
        );
        let d = diff(&before, &after);
        let kinds: Vec<(&str, ChangeKind)> = d.iter().map(|c| (c.path.as_str(), c.kind)).collect();
        assert_eq!(
            kinds,
            vec![
                ("/etc/gone", ChangeKind::Deleted),
                ("/home/user/a.txt", ChangeKind::Modified),
                ("/home/user/new file.sh", ChangeKind::Created),
            ],
            "a directory whose files changed is not itself modified"
        );
    }

    #[test]
    fn the_command_prunes_system_trees_and_extra_paths() {
        let c = command(&["/x'y"]);
        assert!(
            c.contains("-path '/proc'") && c.contains("-path '/x'\\''y'"),
            "{c}"
        );
        assert!(c.contains("find /usr/local"));
    }
}
