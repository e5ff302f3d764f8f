//! bubblewrap command lines for image builds and agent sessions.

use std::ffi::OsString;
use std::os::fd::RawFd;
use std::path::PathBuf;

/// Path of the bubblewrap binary, if installed.
pub fn bwrap_path() -> Option<PathBuf> {
    ["/usr/bin/bwrap", "/usr/local/bin/bwrap", "/bin/bwrap"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
        .or_else(|| which("bwrap"))
}

/// Find `tool` on the host PATH.
pub fn which(tool: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
}

/// PATH inside the sandbox.
pub const SANDBOX_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Capabilities root keeps while building an image (Docker's default set,
/// without `mknod` and raw sockets).
pub const BUILD_CAPS: &[&str] = &[
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_FOWNER",
    "CAP_FSETID",
    "CAP_KILL",
    "CAP_SETGID",
    "CAP_SETUID",
    "CAP_SETPCAP",
    "CAP_SETFCAP",
    "CAP_NET_BIND_SERVICE",
    "CAP_SYS_CHROOT",
    "CAP_AUDIT_WRITE",
];

/// The number of each capability of [`BUILD_CAPS`] (`linux/capability.h`).
const BUILD_CAP_NUMBERS: &[(&str, u32)] = &[
    ("CAP_CHOWN", 0),
    ("CAP_DAC_OVERRIDE", 1),
    ("CAP_FOWNER", 3),
    ("CAP_FSETID", 4),
    ("CAP_KILL", 5),
    ("CAP_SETGID", 6),
    ("CAP_SETUID", 7),
    ("CAP_SETPCAP", 8),
    ("CAP_NET_BIND_SERVICE", 10),
    ("CAP_SYS_CHROOT", 18),
    ("CAP_AUDIT_WRITE", 29),
    ("CAP_SETFCAP", 31),
];

/// [`BUILD_CAPS`] as a bit mask of capability numbers: what a root test run
/// keeps (the verifier sets it itself, without bubblewrap).
pub fn build_caps_mask() -> u64 {
    BUILD_CAP_NUMBERS
        .iter()
        .filter(|(name, _)| BUILD_CAPS.contains(name))
        .fold(0u64, |mask, (_, n)| mask | 1u64 << *n)
}

/// [`BUILD_CAPS`] as `setpriv --bounding-set` wants them
/// (`+chown,+dac_override,...`).
pub fn build_caps_setpriv() -> String {
    BUILD_CAPS
        .iter()
        .map(|c| format!("+{}", c.trim_start_matches("CAP_").to_ascii_lowercase()))
        .collect::<Vec<_>>()
        .join(",")
}

/// One bind mount.
pub struct Bind {
    /// The host path (must be reachable by the sandbox's root).
    pub source: PathBuf,
    /// Where, inside.
    pub inside: String,
    /// Read-only.
    pub read_only: bool,
}

/// Which capabilities the sandboxed command keeps.
pub enum Caps {
    /// bubblewrap's default (rootless sessions: it drops all but, for uid 0,
    /// those of its own user namespace).
    Default,
    /// Exactly these (bubblewrap runs as root of our user namespace).
    Only(Vec<&'static str>),
}

/// What a bubblewrap sandbox looks like.
pub struct Spec {
    /// The merged root tree (already mounted in the child's namespace).
    pub root: PathBuf,
    /// Share the network namespace bubblewrap starts in.
    pub network: bool,
    /// Extra bind mounts.
    pub binds: Vec<Bind>,
    /// Environment (everything else is cleared).
    pub env: Vec<(String, String)>,
    /// Capabilities to keep.
    pub caps: Caps,
    /// Seccomp programs to load before the command (descriptor numbers).
    pub seccomp: Vec<RawFd>,
    /// Working directory inside.
    pub chdir: String,
    /// The command to run inside.
    pub argv: Vec<String>,
    /// Rootless sessions: a nested user namespace where the command runs as this uid and gid.
    pub user_ns: Option<(u32, u32)>,
}

/// The bubblewrap arguments for `spec`.
pub fn args(spec: &Spec) -> Vec<OsString> {
    let mut a: Vec<OsString> = Vec::new();
    let mut push = |s: &str| a.push(s.into());
    for s in [
        "--die-with-parent",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--hostname",
        "sandbox",
    ] {
        push(s);
    }
    if !spec.network {
        push("--unshare-net");
    }
    if let Some((uid, gid)) = spec.user_ns {
        a.push("--unshare-user".into());
        a.push("--uid".into());
        a.push(uid.to_string().into());
        a.push("--gid".into());
        a.push(gid.to_string().into());
    }
    a.push("--bind".into());
    a.push(spec.root.clone().into());
    a.push("/".into());
    for s in ["--proc", "/proc", "--dev", "/dev"] {
        a.push(s.into());
    }
    for b in &spec.binds {
        a.push(if b.read_only { "--ro-bind" } else { "--bind" }.into());
        a.push(b.source.clone().into());
        a.push(b.inside.clone().into());
    }
    a.push("--clearenv".into());
    for (k, v) in &spec.env {
        a.push("--setenv".into());
        a.push(k.into());
        a.push(v.into());
    }
    if let Caps::Only(caps) = &spec.caps {
        a.push("--cap-drop".into());
        a.push("ALL".into());
        for cap in caps {
            a.push("--cap-add".into());
            a.push(cap.into());
        }
    }
    for fd in &spec.seccomp {
        a.push("--add-seccomp-fd".into());
        a.push(fd.to_string().into());
    }
    a.push("--chdir".into());
    a.push(spec.chdir.clone().into());
    a.push("--".into());
    a.extend(spec.argv.iter().map(OsString::from));
    a
}

/// The agent shell's command and capabilities: bash as `uid`. A non-root
/// agent drops every capability and may never gain one (`setpriv`, or in
/// `rootless` sessions bubblewrap's own user namespace); a root agent keeps
/// Docker's default set (without `mknod`, raw sockets and `ptrace` of
/// others), which holds only inside its user namespace.
pub fn shell_argv(uid: u32, gid: u32, rootless: bool) -> (Vec<String>, Caps) {
    let bash = ["/bin/bash", "--noediting", "--noprofile", "--norc", "-i"].map(String::from);
    if uid == 0 {
        return (bash.to_vec(), Caps::Only(BUILD_CAPS.to_vec()));
    }
    if rootless {
        return (bash.to_vec(), Caps::Default);
    }
    let mut argv: Vec<String> = [
        "/usr/bin/setpriv",
        &format!("--reuid={uid}"),
        &format!("--regid={gid}"),
        "--clear-groups",
        "--inh-caps=-all",
        "--bounding-set=-all",
        "--no-new-privs",
        "--",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    argv.extend(bash);
    (
        argv,
        Caps::Only(vec!["CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP"]),
    )
}

/// The shell environment of an agent account.
pub fn agent_env(user: &str, home: &str) -> Vec<(String, String)> {
    [
        ("PATH", SANDBOX_PATH),
        ("HOME", home),
        ("USER", user),
        ("LOGNAME", user),
        ("SHELL", "/bin/bash"),
        ("TERM", "xterm-256color"),
        ("LANG", "C.UTF-8"),
        ("PS1", ""),
        ("HISTFILE", "/dev/null"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_args_isolate_and_drop_privileges() {
        let (argv, caps) = shell_argv(1000, 1000, false);
        let spec = Spec {
            root: PathBuf::from("/run/endless-mnt/merged"),
            network: false,
            binds: vec![Bind {
                source: PathBuf::from("/run/endless-mnt/x"),
                inside: "/run/endless-verifier".into(),
                read_only: true,
            }],
            env: agent_env("user", "/home/user"),
            caps,
            seccomp: vec![8, 9],
            chdir: "/".into(),
            argv,
            user_ns: None,
        };
        let a: Vec<String> = args(&spec)
            .iter()
            .map(|s| s.to_string_lossy().into_owned())
            .collect();
        let joined = a.join(" ");
        for want in [
            "--unshare-pid",
            "--unshare-net",
            "--die-with-parent",
            "--bind /run/endless-mnt/merged /",
            "--clearenv",
            "--setenv HOME /home/user",
            "--ro-bind /run/endless-mnt/x /run/endless-verifier",
            "--cap-drop ALL --cap-add CAP_SETUID",
            "--add-seccomp-fd 8 --add-seccomp-fd 9",
            "-- /usr/bin/setpriv --reuid=1000 --regid=1000",
            "--no-new-privs -- /bin/bash --noediting --noprofile --norc -i",
        ] {
            assert!(joined.contains(want), "missing `{want}` in {joined}");
        }
        let (root_argv, root_caps) = shell_argv(0, 0, false);
        assert_eq!(root_argv[0], "/bin/bash");
        match root_caps {
            Caps::Only(c) => assert!(!c.contains(&"CAP_SYS_ADMIN") && c.contains(&"CAP_CHOWN")),
            Caps::Default => panic!("a root agent must not keep every capability"),
        }
    }

    #[test]
    fn the_build_set_has_a_number_and_a_setpriv_name_for_each_capability() {
        let mask = build_caps_mask();
        assert_eq!(mask.count_ones() as usize, BUILD_CAPS.len());
        for (name, n) in BUILD_CAP_NUMBERS {
            assert!(BUILD_CAPS.contains(name), "{name}");
            assert!(mask & (1u64 << *n) != 0);
        }
        // Neither CAP_SYS_ADMIN (21) nor CAP_SYS_PTRACE (19) nor CAP_MKNOD (27).
        assert_eq!(mask & (1 << 21 | 1 << 19 | 1 << 27), 0);
        let setpriv = build_caps_setpriv();
        assert!(setpriv.starts_with("+chown,+dac_override,"), "{setpriv}");
        assert!(setpriv.contains("+sys_chroot") && setpriv.contains("+setgid"));
    }
}
