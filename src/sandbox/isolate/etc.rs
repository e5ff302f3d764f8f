//! The minimal `/etc` of the host base layer.
//!
//! The host's `/etc` holds secrets (`shadow`, SSH host keys, TLS private
//! keys, credentials in tool configs) that no task needs. The base offers a
//! copy of an allow-list instead: what the dynamic loader, Python, `apt`,
//! `dpkg`, PAM and the shell need, the CA certificates, and generated account
//! files (system accounts only, every password locked). Only world-readable
//! entries are copied, so nothing the host keeps private can slip in with
//! an allowed directory. The copy is owned by the sandbox's root (see
//! [`super::userns`]) and cached until one of the copied entries changes.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::userns::IdMap;
use crate::sandbox::SandboxError;

/// Bump when what is copied or generated changes.
const VERSION: &str = "etc-v1";

/// Entries of the host's `/etc` offered to sandboxes (when world-readable).
const ALLOWED: &[&str] = &[
    "adduser.conf",
    "alternatives",
    "apt",
    "bash.bashrc",
    "bindresvport.blacklist",
    "ca-certificates",
    "ca-certificates.conf",
    "debconf.conf",
    "debian_version",
    "default",
    "deluser.conf",
    "dpkg",
    "environment",
    "ethertypes",
    "fonts",
    "gai.conf",
    "host.conf",
    "inputrc",
    "issue",
    "issue.net",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "locale.alias",
    "locale.gen",
    "localtime",
    "login.defs",
    "magic",
    "magic.mime",
    "mime.types",
    "mke2fs.conf",
    "mtab",
    "netconfig",
    "networks",
    "nsswitch.conf",
    "os-release",
    "pam.conf",
    "pam.d",
    "perl",
    "profile",
    "profile.d",
    "protocols",
    "python3",
    "rpc",
    "security",
    "services",
    "sgml",
    "shells",
    "skel",
    "ssl",
    "terminfo",
    "timezone",
    "ucf.conf",
    "vim",
    "xattr.conf",
    "xml",
];

/// Whether a top-level `/etc` entry is offered (the list above, plus
/// versioned Python directories such as `python3.11`).
fn allowed(name: &str) -> bool {
    ALLOWED.contains(&name)
        || name
            .strip_prefix("python3.")
            .is_some_and(|v| !v.is_empty() && v.chars().all(|c| c.is_ascii_digit()))
}

/// A fingerprint of the host entries the copy is made from.
pub fn fingerprint(host_etc: &Path, map: Option<IdMap>) -> String {
    let mut h = Sha256::new();
    h.update(VERSION.as_bytes());
    h.update(format!("{:?}", map.map(|m| m.base)).as_bytes());
    let mut names: Vec<String> = std::fs::read_dir(host_etc)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| allowed(n) || matches!(n.as_str(), "passwd" | "group" | "resolv.conf"))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    for n in names {
        if let Ok(m) = std::fs::symlink_metadata(host_etc.join(&n)) {
            h.update(format!("{n}:{}:{}:{};", m.mtime(), m.mtime_nsec(), m.size()).as_bytes());
        }
    }
    hex::encode(&h.finalize()[..8])
}

/// Build the minimal `/etc` from `host_etc` into `dest` (which must not
/// exist), owned as `map` says (rootless: left to the caller's own ids).
pub fn build(host_etc: &Path, dest: &Path, map: Option<IdMap>) -> Result<(), SandboxError> {
    let io = |what: &'static str, p: &Path| SandboxError::io(what, p.to_path_buf());
    std::fs::create_dir_all(dest).map_err(io("create minimal /etc", dest))?;
    std::fs::set_permissions(dest, std::fs::Permissions::from_mode(0o755))
        .map_err(io("chmod minimal /etc", dest))?;
    let mut names: Vec<String> = std::fs::read_dir(host_etc)
        .map_err(io("read host /etc", host_etc))?
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| allowed(n))
        .collect();
    names.sort();
    for name in names {
        copy_entry(&host_etc.join(&name), &dest.join(&name), map.is_some())?;
    }
    let passwd = std::fs::read_to_string(host_etc.join("passwd")).unwrap_or_default();
    let group = std::fs::read_to_string(host_etc.join("group")).unwrap_or_default();
    let (passwd, users) = system_accounts(&passwd, "root:x:0:0:root:/root:/bin/bash");
    let (group, _) = system_accounts(&group, "root:x:0:");
    let group = strip_members(&group);
    let shadow: String = users
        .iter()
        .map(|u| format!("{u}:*:19000:0:99999:7:::\n"))
        .collect();
    let gshadow: String = group
        .lines()
        .filter_map(|l| l.split(':').next())
        .map(|g| format!("{g}:*::\n"))
        .collect();
    let resolv = std::fs::read_to_string(host_etc.join("resolv.conf")).unwrap_or_default();
    let shadow_gid = group
        .lines()
        .find(|l| l.starts_with("shadow:"))
        .and_then(|l| l.split(':').nth(2))
        .and_then(|g| g.parse::<u32>().ok())
        .unwrap_or(0);
    let generated: [(&str, &str, u32, u32); 7] = [
        ("passwd", &passwd, 0o644, 0),
        ("group", &group, 0o644, 0),
        ("shadow", &shadow, 0o640, shadow_gid),
        ("gshadow", &gshadow, 0o640, shadow_gid),
        ("hostname", "sandbox\n", 0o644, 0),
        (
            "hosts",
            "127.0.0.1\tlocalhost\n127.0.1.1\tsandbox\n::1\tlocalhost ip6-localhost ip6-loopback\n",
            0o644,
            0,
        ),
        ("resolv.conf", &resolv, 0o644, 0),
    ];
    for (name, content, mode, gid) in generated {
        let p = dest.join(name);
        std::fs::write(&p, content).map_err(io("write minimal /etc file", &p))?;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode))
            .map_err(io("chmod minimal /etc file", &p))?;
        if let Some(map) = map {
            std::os::unix::fs::lchown(&p, Some(map.host(0)), Some(map.host(gid)))
                .map_err(io("chown minimal /etc file", &p))?;
        }
    }
    if let Some(map) = map {
        shift_owners(dest, map)?;
    }
    Ok(())
}

/// Copy `from` to `to`: directories recursively, symlinks as links, files
/// by content; anything not world-readable is left out. Owners are kept
/// when `owners` (we are root), else the copy is ours.
fn copy_entry(from: &Path, to: &Path, owners: bool) -> Result<(), SandboxError> {
    let io = |what: &'static str, p: &Path| SandboxError::io(what, p.to_path_buf());
    let Ok(meta) = std::fs::symlink_metadata(from) else {
        return Ok(());
    };
    let ft = meta.file_type();
    if ft.is_symlink() {
        let target = std::fs::read_link(from).map_err(io("read link", from))?;
        std::os::unix::fs::symlink(&target, to).map_err(io("copy link", to))?;
        if owners {
            let _ = std::os::unix::fs::lchown(to, Some(meta.uid()), Some(meta.gid()));
        }
        return Ok(());
    }
    if meta.mode() & 0o004 == 0 {
        return Ok(());
    }
    if ft.is_dir() {
        if meta.mode() & 0o001 == 0 {
            return Ok(());
        }
        std::fs::create_dir(to).map_err(io("copy directory", to))?;
        let mut children: Vec<PathBuf> = std::fs::read_dir(from)
            .map_err(io("read directory", from))?
            .flatten()
            .map(|e| e.path())
            .collect();
        children.sort();
        for child in children {
            if let Some(name) = child.file_name() {
                copy_entry(&child, &to.join(name), owners)?;
            }
        }
    } else if ft.is_file() {
        std::fs::copy(from, to).map_err(io("copy file", to))?;
    } else {
        return Ok(());
    }
    std::fs::set_permissions(to, std::fs::Permissions::from_mode(meta.mode() & 0o7777))
        .map_err(io("chmod copy", to))?;
    if owners {
        std::os::unix::fs::lchown(to, Some(meta.uid()), Some(meta.gid()))
            .map_err(io("chown copy", to))?;
    }
    Ok(())
}

/// Shift every owner under `dir` (host ids) into the sandbox's range.
fn shift_owners(dir: &Path, map: IdMap) -> Result<(), SandboxError> {
    for entry in walkdir::WalkDir::new(dir).into_iter().flatten() {
        let p = entry.path();
        let Ok(m) = std::fs::symlink_metadata(p) else {
            continue;
        };
        if m.uid() >= map.count && m.gid() >= map.count {
            continue; // already shifted (the generated files)
        }
        std::os::unix::fs::lchown(p, Some(map.host(m.uid())), Some(map.host(m.gid())))
            .map_err(SandboxError::io("shift owner into the sandbox range", p))?;
    }
    Ok(())
}

/// System accounts (id below 1000, and `nobody`) of a passwd- or group-style
/// text, with `fallback` when there is no root line; also their names.
fn system_accounts(text: &str, fallback: &str) -> (String, Vec<String>) {
    let mut out = String::new();
    let mut names = Vec::new();
    for line in text.lines() {
        let fields: Vec<&str> = line.split(':').collect();
        let Some(id) = fields.get(2).and_then(|v| v.parse::<u32>().ok()) else {
            continue;
        };
        if id < 1000 || id == 65_534 {
            let mut fields = fields.clone();
            if fields.len() > 1 {
                fields[1] = "x";
            }
            out.push_str(&fields.join(":"));
            out.push('\n');
            names.push(fields[0].to_string());
        }
    }
    if !names.iter().any(|n| n == "root") {
        out.insert_str(0, &format!("{fallback}\n"));
        names.insert(0, "root".into());
    }
    (out, names)
}

/// Group lines without their member lists (they name host accounts).
fn strip_members(group: &str) -> String {
    group
        .lines()
        .map(|l| {
            let mut f: Vec<&str> = l.split(':').collect();
            if f.len() >= 4 {
                f[3] = "";
            }
            format!("{}\n", f.join(":"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_system_accounts_survive() {
        let passwd = "root:x:0:0:root:/root:/bin/bash\nalice:x:1000:1000::/home/alice:/bin/bash\nnobody:x:65534:65534::/nonexistent:/usr/sbin/nologin\n";
        let (out, names) = system_accounts(passwd, "root:x:0:0:root:/root:/bin/bash");
        assert_eq!(names, vec!["root", "nobody"]);
        assert!(!out.contains("alice"));
        assert_eq!(strip_members("sudo:x:27:alice,bob\n"), "sudo:x:27:\n");
        let (out, names) = system_accounts("", "root:x:0:");
        assert_eq!((out.as_str(), names.len()), ("root:x:0:\n", 1));
    }

    #[test]
    fn secrets_are_not_copied() {
        let host = tempfile::tempdir().unwrap();
        let h = host.path();
        std::fs::write(h.join("passwd"), "root:x:0:0:root:/root:/bin/bash\n").unwrap();
        std::fs::write(h.join("shadow"), "root:$6$secret:1::::::\n").unwrap();
        std::fs::create_dir_all(h.join("ssl/private")).unwrap();
        std::fs::write(h.join("ssl/private/key.pem"), "KEY").unwrap();
        std::fs::set_permissions(
            h.join("ssl/private"),
            std::fs::Permissions::from_mode(0o700),
        )
        .unwrap();
        std::fs::write(h.join("ssl/openssl.cnf"), "cnf").unwrap();
        std::fs::write(h.join("gitconfig"), "[credential]").unwrap();
        std::os::unix::fs::symlink("/usr/share/zoneinfo/UTC", h.join("localtime")).unwrap();
        let out = tempfile::tempdir().unwrap();
        let dest = out.path().join("etc");
        build(h, &dest, None).unwrap();
        assert!(dest.join("ssl/openssl.cnf").exists());
        assert!(!dest.join("ssl/private").exists(), "private keys stay out");
        assert!(
            !dest.join("gitconfig").exists(),
            "configs outside the list stay out"
        );
        let shadow = std::fs::read_to_string(dest.join("shadow")).unwrap();
        assert_eq!(shadow, "root:*:19000:0:99999:7:::\n");
        assert_eq!(
            std::fs::read_link(dest.join("localtime")).unwrap(),
            PathBuf::from("/usr/share/zoneinfo/UTC")
        );
        assert!(allowed("python3.11") && !allowed("python3.x") && !allowed("shadow"));
    }
}
