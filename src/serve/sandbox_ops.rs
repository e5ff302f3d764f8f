//! What the sandbox API does inside one sandbox: run a command, unpack an
//! archive, pack a path. Each runs beside the sandbox's shell exactly as
//! the verifier does (see [`Session::run_verifier`]): in the sandbox's
//! namespaces and cgroups, as the task's user without capabilities, under
//! the sandbox's seccomp filter, never as anyone on the host. Separate
//! standard output and error come back through two pipes only the server
//! holds (the command's stdout, and file descriptor 3 for its stderr or
//! for an archive).

use std::time::{Duration, Instant};

use crate::sandbox::{SandboxError, Session, VerifierCall, WarmHints, CAPTURE_LIMIT};

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

/// What a command did.
#[derive(Debug, Clone)]
pub struct ExecOutcome {
    /// Its standard output (lossy UTF-8, capped at [`CAPTURE_LIMIT`]).
    pub stdout: String,
    /// Its standard error (lossy UTF-8, capped at [`CAPTURE_LIMIT`]).
    pub stderr: String,
    /// Exit status (`None`: killed, or timed out).
    pub exit_code: Option<i32>,
    /// It ran past its timeout and was killed.
    pub timed_out: bool,
    /// Wall-clock time.
    pub duration: Duration,
}

/// The script every exec runs: the image's environment (`ENV` lines),
/// the caller's variables over it, stderr onto fd 3, the working
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

/// Run `req` in `session`.
pub fn exec(
    session: &mut Session,
    identity: &Identity,
    req: &ExecRequest,
) -> Result<ExecOutcome, OpError> {
    // No cwd: the sandbox's workdir, else home (as its shell does).
    let cwd = req.cwd.clone().unwrap_or_default();
    let vars: Vec<String> = req.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let mut args = vec![
        cwd.as_str(),
        identity.workdir.as_str(),
        req.command.as_str(),
    ];
    args.extend(vars.iter().map(String::as_str));
    let c = call(identity, EXEC_SCRIPT, &args, &[]);
    let start = Instant::now();
    let (out, err, _) = session.run_verifier(&c, Vec::new(), req.timeout)?;
    Ok(ExecOutcome {
        stdout: out.output,
        stderr: String::from_utf8_lossy(&err).into_owned(),
        exit_code: out.code,
        timed_out: out.timed_out,
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
