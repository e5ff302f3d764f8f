//! What the sandbox API does inside one sandbox: run a command, unpack an
//! archive, pack a path. Each runs beside the sandbox's shell exactly as
//! the verifier does (see [`Session::run_verifier`]): in the sandbox's
//! namespaces and cgroups, as the task's user (or, where the sandbox maps
//! them, another account of its `/etc/passwd`) without capabilities (as
//! root: with Docker's default set, as the agent's root shell), under
//! the sandbox's seccomp filter, never as anyone on the host. Separate
//! standard output and error come back through two pipes only the server
//! holds (the command's stdout, and file descriptor 3 for its stderr or
//! for an archive); a command's output is handed over as it comes.

use std::time::{Duration, Instant};

use super::utf8_pieces::Utf8Pieces;
use crate::sandbox::net;
use crate::sandbox::{Pipe, SandboxError, Session, VerifierCall, WarmHints, CAPTURE_LIMIT};

/// PATH inside a sandbox.
const PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Exit status the download script uses for a missing path.
const MISSING: i32 = 44;

/// Why an operation in a sandbox failed.
#[derive(Debug, thiserror::Error)]
pub enum OpError {
    /// The path does not exist inside the sandbox.
    #[error("no such file or directory in the sandbox: {0}")]
    Missing(String),
    /// What came back is larger than the server keeps.
    #[error("{0} is larger than the {limit} bytes one request may return", limit = CAPTURE_LIMIT)]
    TooLarge(String),
    /// The command inside failed (what it said).
    #[error("{what} failed in the sandbox (exit {code}): {output}")]
    Failed {
        /// What was being done.
        what: String,
        /// Its exit status (`none`: killed or timed out).
        code: String,
        /// What it printed.
        output: String,
    },
    /// The user asked for cannot run commands in this sandbox (why, naming
    /// the `user` field).
    #[error("user: {0}")]
    User(String),
    /// The sandbox itself failed (it ended, or cannot start a process).
    #[error("the sandbox failed: {0}")]
    Sandbox(#[from] SandboxError),
}

/// Who commands run as in one sandbox, and where by default.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Identity {
    /// The account's name.
    pub user: String,
    /// Its uid inside the sandbox.
    pub uid: u32,
    /// Its home directory.
    pub home: String,
    /// Where commands run unless told otherwise.
    pub workdir: String,
}

/// A command to run.
#[derive(Debug, Clone)]
pub struct ExecRequest {
    /// Shell command line (run by bash, or sh where there is no bash).
    pub command: String,
    /// Working directory (default: the sandbox's).
    pub cwd: Option<String>,
    /// Variables set on top of the image's environment.
    pub env: Vec<(String, String)>,
    /// Killed after this long.
    pub timeout: Duration,
}

/// How a command ended (its output went to the caller as it came).
#[derive(Debug, Clone)]
pub struct ExecEnd {
    /// Exit status (`None`: killed, or timed out).
    pub exit_code: Option<i32>,
    /// It ran past its timeout and was killed.
    pub timed_out: bool,
    /// Output past [`CAPTURE_LIMIT`] bytes of one stream was dropped.
    pub truncated: bool,
    /// Wall-clock time.
    pub duration: Duration,
}

/// Which of a command's streams a piece of output is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
}

impl Stream {
    /// Its name on the wire.
    pub fn name(self) -> &'static str {
        match self {
            Stream::Stdout => "stdout",
            Stream::Stderr => "stderr",
        }
    }
}

/// An account of a sandbox's `/etc/passwd`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Account {
    /// Its name.
    pub name: String,
    /// Its uid inside the sandbox.
    pub uid: u32,
    /// Its primary gid.
    pub gid: u32,
    /// Its home directory.
    pub home: String,
}

/// The accounts of a `/etc/passwd` (lines that are not `name:pw:uid:gid:
/// gecos:home:shell` are skipped).
pub fn parse_passwd(text: &str) -> Vec<Account> {
    text.lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split(':').collect();
            if f.len() < 7 || f[0].is_empty() || line.starts_with('#') {
                return None;
            }
            Some(Account {
                name: f[0].to_string(),
                uid: f[2].parse().ok()?,
                gid: f[3].parse().ok()?,
                home: f[5].to_string(),
            })
        })
        .collect()
}

/// A `user` as a client names it: an account's name, or a uid.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Wanted {
    Name(String),
    Uid(u32),
}

impl std::fmt::Display for Wanted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Wanted::Name(n) => write!(f, "{n:?}"),
            Wanted::Uid(u) => write!(f, "uid {u}"),
        }
    }
}

/// `user` of an exec (a name, a uid, or a uid as text, as Harbor passes
/// it); `None`: not given.
fn wanted(user: Option<&serde_json::Value>) -> Result<Option<Wanted>, OpError> {
    let bad = |v: &serde_json::Value| {
        OpError::User(format!(
            "{v} is neither an account name nor a uid (0 to 4294967294)"
        ))
    };
    match user {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(v @ serde_json::Value::Number(n)) => n
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .filter(|n| *n != u32::MAX)
            .map(|n| Some(Wanted::Uid(n)))
            .ok_or_else(|| bad(v)),
        Some(v @ serde_json::Value::String(s)) => {
            if let Ok(n) = s.parse::<u32>() {
                return Ok(Some(Wanted::Uid(n)));
            }
            let ok = !s.is_empty()
                && s.len() <= 256
                && !s.contains([':', '\n', '\0'])
                && !s.chars().any(char::is_control);
            if ok {
                Ok(Some(Wanted::Name(s.clone())))
            } else {
                Err(bad(v))
            }
        }
        Some(v) => Err(bad(v)),
    }
}

/// Who an exec asking for `user` runs as in `session`: `None` for the
/// sandbox's own user (also when not given), else another account of the
/// sandbox's `/etc/passwd` whose ids the sandbox maps. Refused, naming
/// the field, when the sandbox runs no other users (a rootless one), the
/// account does not exist there, or its ids are not mapped.
pub fn resolve_user(
    session: &mut Session,
    who: &Identity,
    user: Option<&serde_json::Value>,
) -> Result<Option<Account>, OpError> {
    let Some(want) = wanted(user)? else {
        return Ok(None);
    };
    let own = match &want {
        Wanted::Name(n) => n == &who.user || (n == "root" && who.uid == 0),
        Wanted::Uid(u) => *u == who.uid,
    };
    if own {
        return Ok(None);
    }
    if !session.runs_other_users() {
        return Err(OpError::User(format!(
            "commands in this sandbox run as {} (uid {}) only: the server runs unprivileged, \
             so its sandboxes map no other user; {want} is not available",
            who.user, who.uid
        )));
    }
    let c = call(who, "cat /etc/passwd", &[], &[]);
    let (out, _, _) = session.run_verifier(&c, Vec::new(), Duration::from_secs(30))?;
    if out.code != Some(0) {
        return Err(OpError::Failed {
            what: "reading the sandbox's /etc/passwd".into(),
            code: code(out.code),
            output: out.output,
        });
    }
    let account = parse_passwd(&out.output)
        .into_iter()
        .find(|a| match &want {
            Wanted::Name(n) => &a.name == n,
            Wanted::Uid(u) => a.uid == *u,
        })
        .ok_or_else(|| {
            OpError::User(format!(
                "{want} is not an account of the sandbox's /etc/passwd"
            ))
        })?;
    if !session.maps_ids((account.uid, account.gid)) {
        return Err(OpError::User(format!(
            "{} (uid {}, gid {}) is outside the ids the sandbox maps",
            account.name, account.uid, account.gid
        )));
    }
    Ok(Some(account))
}

/// The script every exec runs: the host's CA bundle where the sandbox has
/// one (see [`exec_script`]), the image's environment (`ENV` lines) over
/// it, the caller's variables over that, stderr onto fd 3, the working
/// directory (the caller's, which must exist, else the sandbox's, else
/// home), then the command under bash.
const EXEC_SCRIPT: &str = r#"if [ -r /.endless/env.sh ]; then . /.endless/env.sh >/dev/null 2>&1; fi
exec 2>&3 3>&-
cwd=$1; workdir=$2; cmd=$3; shift 3
for kv in "$@"; do export "$kv"; done
if [ -n "$cwd" ]; then
  cd -- "$cwd" 2>/dev/null || { echo "endless: cannot change to the working directory $cwd" >&2; exit 126; }
else
  cd -- "$workdir" 2>/dev/null || cd 2>/dev/null || cd /
fi
if [ -x /bin/bash ]; then exec /bin/bash -c "$cmd"; fi
exec /bin/sh -c "$cmd""#;

/// [`EXEC_SCRIPT`] after the variables that name the host's CA bundle, set
/// where a sandbox with network has it bound (as its shell has them): a
/// command's `curl` and `pip` then trust what the host trusts, a
/// TLS-inspecting proxy's CA included, as build steps and sessions do.
fn exec_script() -> String {
    let vars: Vec<String> = net::ca_env()
        .into_iter()
        .map(|(k, v)| format!("{k}='{v}'"))
        .collect();
    format!(
        "if [ -r {dir}/ca.crt ]; then export {vars}; fi\n{EXEC_SCRIPT}",
        dir = net::CA_INSIDE,
        vars = vars.join(" ")
    )
}

/// Unpack the archive on stdin into `$1` (created when missing).
const UNPACK_SCRIPT: &str = r#"mkdir -p -- "$1" && exec tar -x --no-same-owner -f - -C "$1""#;

/// Pack `$1` (a directory's content, or one file under its own name) onto fd 3.
const PACK_SCRIPT: &str = r#"p=$1
if [ -d "$p" ]; then exec tar -c -f - -C "$p" . 1>&3 3>&-; fi
if [ -e "$p" ] || [ -L "$p" ]; then
  d=$(dirname -- "$p"); b=$(basename -- "$p")
  exec tar -c -f - -C "$d" -- "$b" 1>&3 3>&-
fi
exit 44"#;

/// A call beside the shell running `script` with `args`.
fn call(
    identity: &Identity,
    script: &str,
    args: &[&str],
    extra_env: &[(&str, &str)],
) -> VerifierCall {
    let mut argv: Vec<String> = vec!["/bin/sh".into(), "-c".into(), script.into(), "sh".into()];
    argv.extend(args.iter().map(|a| a.to_string()));
    let mut env = vec![
        ("PATH".to_string(), PATH.to_string()),
        ("HOME".to_string(), identity.home.clone()),
        ("USER".to_string(), identity.user.clone()),
        ("LOGNAME".to_string(), identity.user.clone()),
        ("SHELL".to_string(), "/bin/bash".to_string()),
        ("LANG".to_string(), "C.UTF-8".to_string()),
    ];
    env.extend(
        extra_env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string())),
    );
    VerifierCall {
        argv,
        env,
        cwd: "/".into(),
        warm: false,
        sealed_env: false,
        hints: WarmHints::default(),
        files: Vec::new(),
    }
}

/// Who runs commands in the freshly started `session` (`user` is the name
/// the session reports; the uid is asked inside).
pub fn identity(session: &mut Session) -> Result<Identity, OpError> {
    let info = session.info().clone();
    let who = Identity {
        user: info.user.clone(),
        uid: 0,
        home: crate::sandbox::home_of(&info.user),
        workdir: info.workdir.clone(),
    };
    let c = call(&who, "id -u", &[], &[]);
    let (out, _, _) = session.run_verifier(&c, Vec::new(), Duration::from_secs(30))?;
    let uid = out
        .output
        .trim()
        .parse::<u32>()
        .map_err(|_| OpError::Failed {
            what: "asking the sandbox's uid".into(),
            code: code(out.code),
            output: out.output.clone(),
        })?;
    Ok(Identity { uid, ..who })
}

/// Run `req` in `session` as `account` (`None`: the sandbox's user),
/// handing `output` its stdout and stderr as text as they come (each
/// piece cut at a character boundary); `started` is called once the
/// command is about to start (an error before then means nothing ran).
/// Setting `cancel` kills it (its client went away).
pub fn exec(
    session: &mut Session,
    identity: &Identity,
    account: Option<&Account>,
    req: &ExecRequest,
    cancel: &std::sync::atomic::AtomicBool,
    started: &mut dyn FnMut(),
    output: &mut dyn FnMut(Stream, &str),
) -> Result<ExecEnd, OpError> {
    // No cwd: the sandbox's workdir, else home (as its shell does).
    let cwd = req.cwd.clone().unwrap_or_default();
    let vars: Vec<String> = req.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let mut args = vec![
        cwd.as_str(),
        identity.workdir.as_str(),
        req.command.as_str(),
    ];
    args.extend(vars.iter().map(String::as_str));
    let as_account = account.map(|a| Identity {
        user: a.name.clone(),
        uid: a.uid,
        home: a.home.clone(),
        workdir: identity.workdir.clone(),
    });
    let c = call(
        as_account.as_ref().unwrap_or(identity),
        &exec_script(),
        &args,
        &[],
    );
    let start = Instant::now();
    // EXEC_SCRIPT moves stderr onto fd 3 before anything runs: the output
    // pipe (stdout and stderr) carries stdout only.
    let mut text = [Utf8Pieces::default(), Utf8Pieces::default()];
    let exit = session.run_beside_streaming(
        &c,
        account.map(|a| (a.uid, a.gid)),
        req.timeout,
        cancel,
        started,
        &mut |pipe, bytes| {
            let stream = match pipe {
                Pipe::Output => Stream::Stdout,
                Pipe::Fd3 => Stream::Stderr,
            };
            let piece = text[stream as usize].push(bytes);
            if !piece.is_empty() {
                output(stream, &piece);
            }
        },
    )?;
    for stream in [Stream::Stdout, Stream::Stderr] {
        let rest = text[stream as usize].finish();
        if !rest.is_empty() {
            output(stream, &rest);
        }
    }
    Ok(ExecEnd {
        exit_code: exit.code,
        timed_out: exit.timed_out,
        truncated: exit.truncated,
        duration: start.elapsed(),
    })
}

/// Unpack `archive` (checked already, see [`super::tar_io::check_upload`])
/// into directory `dir` of `session`.
pub fn upload(
    session: &mut Session,
    identity: &Identity,
    dir: &str,
    archive: Vec<u8>,
    timeout: Duration,
) -> Result<(), OpError> {
    let c = call(identity, UNPACK_SCRIPT, &[dir], &[]);
    let (out, _, _) = session.run_verifier(&c, archive, timeout)?;
    if out.code == Some(0) {
        return Ok(());
    }
    Err(OpError::Failed {
        what: format!("unpacking into {dir}"),
        code: code(out.code),
        output: out.output,
    })
}

/// A tar archive of `path` in `session`: a directory's content, or a file
/// (or link) as one entry under its own name.
pub fn download(
    session: &mut Session,
    identity: &Identity,
    path: &str,
    timeout: Duration,
) -> Result<Vec<u8>, OpError> {
    let c = call(identity, PACK_SCRIPT, &[path], &[]);
    let (out, archive, _) = session.run_verifier(&c, Vec::new(), timeout)?;
    match out.code {
        Some(0) if archive.len() >= CAPTURE_LIMIT => Err(OpError::TooLarge(path.to_string())),
        Some(0) => Ok(archive),
        Some(MISSING) => Err(OpError::Missing(path.to_string())),
        other => Err(OpError::Failed {
            what: format!("packing {path}"),
            code: code(other),
            output: out.output,
        }),
    }
}

fn code(c: Option<i32>) -> String {
    c.map_or_else(|| "none".into(), |c| c.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwd_accounts_are_read_and_bad_lines_skipped() {
        let text = "root:x:0:0:root:/root:/bin/bash\n\
                    # a comment:x:1:1::/:/bin/sh\n\
                    broken:x:notanumber:1::/:/bin/sh\n\
                    short:x:1\n\
                    agent:x:1000:1001:Agent,,,:/home/agent:/bin/bash\n";
        let accounts = parse_passwd(text);
        assert_eq!(
            accounts,
            [
                Account {
                    name: "root".into(),
                    uid: 0,
                    gid: 0,
                    home: "/root".into()
                },
                Account {
                    name: "agent".into(),
                    uid: 1000,
                    gid: 1001,
                    home: "/home/agent".into()
                },
            ]
        );
    }

    #[test]
    fn users_are_names_or_uids() {
        let w = |v: serde_json::Value| wanted(Some(&v));
        assert_eq!(w(serde_json::json!(0)).unwrap(), Some(Wanted::Uid(0)));
        assert_eq!(w(serde_json::json!("0")).unwrap(), Some(Wanted::Uid(0)));
        assert_eq!(
            w(serde_json::json!("agent")).unwrap(),
            Some(Wanted::Name("agent".into()))
        );
        assert_eq!(wanted(None).unwrap(), None);
        assert_eq!(w(serde_json::Value::Null).unwrap(), None);
        for bad in [
            serde_json::json!(-1),
            serde_json::json!(1.5),
            serde_json::json!(4294967296u64),
            serde_json::json!(""),
            serde_json::json!("a:b"),
            serde_json::json!(["root"]),
        ] {
            let e = w(bad.clone()).unwrap_err().to_string();
            assert!(e.starts_with("user: "), "{bad}: {e}");
        }
    }
}
