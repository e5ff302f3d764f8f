//! Sharded runs on a cluster engine, as a viewer sees them: a Slurm job
//! array (`endless slurm submit`, recorded in `slurm/NAME/job.json`) or a
//! Ray `run_sharded` call (recorded in `ray/NAME/run.json`), each shard
//! queued, running, done or failed, with its log.
//!
//! [`sharded_runs`] is the one reader: `endless slurm status` and the
//! TUI's Jobs view both go through it (a Slurm submission through
//! [`crate::workbench::slurm::status`], which asks `squeue`/`sacct` when
//! they are there and falls back on the shards' `shard.json`).
//!
//! A Ray run's manifest is written by the Python driver
//! (`endless_env.ray.run_sharded`) when it starts, and each shard's Ray
//! task writes `logs/shard-I.state.json` when its process starts and when
//! it exits (one writer per file, each write atomic):
//!
//! ```json
//! {"engine": "ray", "name": "v1", "kind": "validate", "command": ["tasks", "validate", "--all"],
//!  "shards": 4, "created_at": "2026-12-05T08:00:00Z", "merged": null}
//! {"state": "running", "node": "host-1", "started_at": "..."}
//! {"state": "exited", "node": "host-1", "returncode": 1, "error": null}
//! ```

use std::fmt;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};
use serde::{Deserialize, Serialize};

use super::shards::shard_dir;
use super::slurm::{JobStatus, ShardStatus};
use crate::store::read_shard_record;

/// The directory of a workspace holding Ray `run_sharded` runs.
pub const RAY_DIR: &str = "ray";

/// The manifest of a Ray run, in its directory.
pub const RAY_MANIFEST: &str = "run.json";

/// Where a shard is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ShardState {
    /// Waiting for the scheduler (or not submitted yet).
    Queued,
    /// Its process runs.
    Running,
    /// It recorded its work done (`shard.json`).
    Done,
    /// It ended, or the scheduler gave up on it, without finishing.
    Failed,
}

impl fmt::Display for ShardState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ShardState::Queued => "queued",
            ShardState::Running => "running",
            ShardState::Done => "done",
            ShardState::Failed => "failed",
        })
    }
}

/// The engine that runs a sharded run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Engine {
    /// A Slurm job array.
    Slurm,
    /// Ray tasks.
    Ray,
}

impl fmt::Display for Engine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Engine::Slurm => "slurm",
            Engine::Ray => "ray",
        })
    }
}

/// One shard of a sharded run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ShardView {
    /// Its index, `0..N`.
    pub index: u32,
    /// Where it is.
    pub state: ShardState,
    /// What the engine says (a Slurm state, an exit status, a node).
    pub detail: String,
    /// Items (tasks) in the shard, once started.
    pub items: Option<usize>,
    /// Its log.
    pub log: PathBuf,
}

/// A sharded run: what it runs, and each shard.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ShardedRun {
    /// Slurm or Ray.
    pub engine: Engine,
    /// Its name (the directory under `slurm/` or `ray/`).
    pub name: String,
    /// `generate`, `validate` or `eval`.
    pub kind: String,
    /// The sharded command, without `endless`, `--workspace` and `--shard`.
    pub command: Vec<String>,
    /// Its directory (shard workspaces, logs, scripts).
    pub dir: PathBuf,
    /// When it was started (RFC 3339).
    pub created_at: String,
    /// Each shard.
    pub shards: Vec<ShardView>,
    /// Where the merge is (a Slurm state, `merged`, `not merged`).
    pub merge: String,
    /// How to run one shard again alone (`{i}` stands for its index).
    pub rerun: String,
    /// Why the engine could not be asked, if it could not.
    pub note: Option<String>,
}

impl ShardedRun {
    /// Its id: `slurm/NAME` or `ray/NAME`.
    pub fn id(&self) -> String {
        format!("{}/{}", self.engine, self.name)
    }

    /// Shards in state `state`.
    pub fn count(&self, state: ShardState) -> usize {
        self.shards.iter().filter(|s| s.state == state).count()
    }

    /// The command that re-runs shard `i` alone.
    pub fn rerun_shard(&self, i: u32) -> String {
        self.rerun.replace("{i}", &i.to_string())
    }
}

/// The state of a Slurm array task: done when its `shard.json` says so,
/// failed when Slurm says it ended without that (or forgot a shard that
/// never finished), running or queued as Slurm says.
pub fn slurm_shard_state(s: &ShardStatus, failed: bool) -> ShardState {
    if s.done {
        ShardState::Done
    } else if failed {
        ShardState::Failed
    } else if matches!(
        s.state.as_str(),
        "RUNNING" | "COMPLETING" | "CONFIGURING" | "SUSPENDED"
    ) {
        ShardState::Running
    } else {
        ShardState::Queued
    }
}

/// A Slurm submission's status as a sharded run.
pub fn from_slurm(status: &JobStatus) -> ShardedRun {
    let failed: Vec<u32> = status.failed().iter().map(|s| s.shard).collect();
    let job = &status.job;
    ShardedRun {
        engine: Engine::Slurm,
        name: job.name.clone(),
        kind: job.kind.clone(),
        command: job.command.clone(),
        dir: job.dir.clone(),
        created_at: job.created_at.clone(),
        shards: status
            .shards
            .iter()
            .map(|s| ShardView {
                index: s.shard,
                state: slurm_shard_state(s, failed.contains(&s.shard)),
                detail: s.state.clone(),
                items: s.items,
                log: s.log.clone(),
            })
            .collect(),
        merge: status.merge.clone(),
        rerun: format!(
            "sbatch --array={{i}} {}",
            crate::workbench::slurm_options::sh_quote(&job.array_script().to_string_lossy())
        ),
        note: status.sacct_note.clone(),
    }
}

/// A Ray run's manifest (`ray/NAME/run.json`).
#[derive(Debug, Clone, Deserialize)]
struct RayManifest {
    name: String,
    #[serde(default)]
    kind: String,
    command: Vec<String>,
    shards: u32,
    #[serde(default)]
    created_at: String,
    #[serde(default)]
    merged: Option<String>,
}

/// A Ray shard's process, as its task recorded it.
#[derive(Debug, Clone, Deserialize)]
struct RayShardState {
    /// `running`, `exited` or `lost`.
    state: String,
    #[serde(default)]
    node: Option<String>,
    /// The process of the shard's Ray task (on `node`).
    #[serde(default)]
    pid: Option<i32>,
    #[serde(default)]
    returncode: Option<i64>,
    #[serde(default)]
    error: Option<String>,
}

fn read_json<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<Option<T>> {
    match std::fs::read_to_string(path) {
        Ok(text) => serde_json::from_str(&text)
            .map(Some)
            .with_context(|| format!("{}: not a valid record", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

/// Whether a shard recorded as running ran on this machine in a process
/// that no longer exists (its Ray worker was killed with its driver, so it
/// could not write its end). Other nodes' processes cannot be checked.
fn gone_here(p: &RayShardState) -> bool {
    let (Some(node), Some(pid)) = (&p.node, p.pid) else {
        return false;
    };
    if pid <= 0 || Some(node.as_str()) != this_host().as_deref() {
        return false;
    }
    // SAFETY: kill(2) with signal 0 only checks that the process exists.
    let rc = unsafe { libc::kill(pid, 0) };
    rc < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
}

/// This machine's host name (what Python's `socket.gethostname()` says).
fn this_host() -> Option<String> {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most `buf.len()` bytes into `buf`.
    if unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } != 0 {
        return None;
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8(buf[..end].to_vec()).ok()
}

/// The Ray run in `dir` (holding [`RAY_MANIFEST`]).
pub fn ray_run(dir: &Path) -> Result<ShardedRun> {
    let path = dir.join(RAY_MANIFEST);
    let m: RayManifest =
        read_json(&path)?.with_context(|| format!("{}: no such file", path.display()))?;
    if m.shards == 0 || m.shards > crate::store::MAX_SHARDS {
        anyhow::bail!(
            "{}: field shards: {} is not 1 to {}",
            path.display(),
            m.shards,
            crate::store::MAX_SHARDS
        );
    }
    let mut shards = Vec::new();
    for i in 0..m.shards {
        let record = read_shard_record(&shard_dir(dir, i)).ok().flatten();
        let done = record.as_ref().is_some_and(|r| r.done);
        let proc_path = dir.join("logs").join(format!("shard-{i}.state.json"));
        let process: Option<RayShardState> = read_json(&proc_path)?;
        let node = |p: &RayShardState| {
            p.node
                .as_deref()
                .map_or(String::new(), |n| format!(" on {n}"))
        };
        let (state, detail) = match (&process, done) {
            (Some(p), true) => (ShardState::Done, format!("finished{}", node(p))),
            (None, true) => (ShardState::Done, "finished".to_string()),
            (None, false) => (ShardState::Queued, "waiting for Ray".to_string()),
            (Some(p), false) => match p.state.as_str() {
                "running" if gone_here(p) => (
                    ShardState::Failed,
                    format!(
                        "its process ({}) is gone without a word: the Ray task or its driver died{}",
                        p.pid.unwrap_or_default(),
                        node(p)
                    ),
                ),
                "running" => (ShardState::Running, format!("running{}", node(p))),
                "exited" | "lost" => {
                    let why = match (&p.error, p.returncode) {
                        (Some(e), _) => e.clone(),
                        (None, Some(0)) => "exit status 0, but shard.json is not done".into(),
                        (None, Some(rc)) => format!("exit status {rc}"),
                        (None, None) => "ended".into(),
                    };
                    (ShardState::Failed, format!("{why}{}", node(p)))
                }
                other => anyhow::bail!(
                    "{}: field state: {other:?} is not running, exited or lost",
                    proc_path.display()
                ),
            },
        };
        shards.push(ShardView {
            index: i,
            state,
            detail,
            items: record.map(|r| r.items),
            log: dir.join("logs").join(format!("shard-{i}.log")),
        });
    }
    Ok(ShardedRun {
        engine: Engine::Ray,
        name: m.name,
        kind: m.kind,
        command: m.command,
        dir: dir.to_path_buf(),
        created_at: m.created_at,
        shards,
        merge: match m.merged {
            Some(into) => format!("merged into {into}"),
            None => "not merged".into(),
        },
        rerun: "the same run_sharded call (it runs only the shards not done)".into(),
        note: None,
    })
}

/// The row of a Ray run whose records cannot be read: listed with the
/// error as its note (naming the file and field), so that one bad record
/// does not hide every other run.
fn unreadable_ray_run(dir: &Path, error: &anyhow::Error) -> ShardedRun {
    let modified = std::fs::metadata(dir.join(RAY_MANIFEST))
        .and_then(|m| m.modified())
        .map(|t| chrono::DateTime::<chrono::Utc>::from(t).to_rfc3339())
        .unwrap_or_default();
    ShardedRun {
        engine: Engine::Ray,
        name: dir
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned()),
        kind: String::new(),
        command: Vec::new(),
        dir: dir.to_path_buf(),
        created_at: modified,
        shards: Vec::new(),
        merge: "unknown".into(),
        rerun: String::new(),
        note: Some(format!("{error:#}")),
    }
}

/// The bytes of a log read from its end at most: a shard's log can be
/// large, and only its tail is shown.
const TAIL_BYTES: u64 = 256 * 1024;

/// The last `max` lines of the log at `path` (none when there is no log
/// yet: a queued shard); invalid UTF-8 is replaced.
pub fn log_tail(path: &Path, max: usize) -> std::io::Result<Vec<String>> {
    use std::io::{Read, Seek, SeekFrom};
    let mut file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let len = file.metadata()?.len();
    let start = len.saturating_sub(TAIL_BYTES);
    file.seek(SeekFrom::Start(start))?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)?;
    let text = String::from_utf8_lossy(&bytes);
    let mut lines: Vec<&str> = text.lines().collect();
    // A cut first line is not shown.
    if start > 0 && !lines.is_empty() {
        lines.remove(0);
    }
    let from = lines.len().saturating_sub(max);
    Ok(lines[from..].iter().map(|l| l.to_string()).collect())
}

/// The Slurm submissions of the workspace at `root` (all, or the one
/// named `name`), with their state.
pub fn slurm_runs(root: &Path, name: Option<&str>) -> Result<Vec<(JobStatus, ShardedRun)>> {
    let ctx = crate::workbench::Context::new(Some(root.to_path_buf()))?;
    let mut out = Vec::new();
    for job in crate::workbench::slurm::jobs(&ctx, name)? {
        let status = crate::workbench::slurm::status(&job)?;
        let run = from_slurm(&status);
        out.push((status, run));
    }
    Ok(out)
}

/// Every sharded run of the workspace at `root`, Slurm and Ray, newest
/// first. A Ray run directory without a manifest (one started before
/// manifests) is left out.
pub fn sharded_runs(root: &Path) -> Result<Vec<ShardedRun>> {
    let mut runs: Vec<ShardedRun> = if root.join(crate::workbench::slurm::SLURM_DIR).is_dir() {
        slurm_runs(root, None)?
            .into_iter()
            .map(|(_, r)| r)
            .collect()
    } else {
        Vec::new()
    };
    if let Ok(dirs) = std::fs::read_dir(root.join(RAY_DIR)) {
        let mut dirs: Vec<PathBuf> = dirs
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.join(RAY_MANIFEST).is_file())
            .collect();
        dirs.sort();
        for dir in dirs {
            runs.push(ray_run(&dir).unwrap_or_else(|e| unreadable_ray_run(&dir, &e)));
        }
    }
    runs.sort_by(|a, b| b.created_at.cmp(&a.created_at).then(b.name.cmp(&a.name)));
    Ok(runs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(path: &Path, text: &str) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    fn record(dir: &Path, i: u32, done: bool) {
        write(
            &shard_dir(dir, i).join("shard.json"),
            &format!(
                r#"{{"shard": {i}, "of": 4, "kind": "validate", "key": "k", "items": 3, "done": {done}}}"#
            ),
        );
    }

    #[test]
    fn a_ray_run_reads_each_shard_from_its_files() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join(RAY_DIR).join("v1");
        write(
            &dir.join(RAY_MANIFEST),
            r#"{"engine": "ray", "name": "v1", "kind": "validate", "command": ["tasks", "validate", "--all"], "shards": 4, "created_at": "2026-12-05T08:00:00Z", "merged": null}"#,
        );
        // 0: done; 1: running; 2: failed with its exit status; 3: queued.
        record(&dir, 0, true);
        write(
            &dir.join("logs/shard-0.state.json"),
            r#"{"state": "exited", "node": "n1", "returncode": 0}"#,
        );
        record(&dir, 1, false);
        write(
            &dir.join("logs/shard-1.state.json"),
            r#"{"state": "running", "node": "n2"}"#,
        );
        record(&dir, 2, false);
        write(
            &dir.join("logs/shard-2.state.json"),
            r#"{"state": "exited", "node": "n1", "returncode": 3}"#,
        );
        let runs = sharded_runs(root.path()).unwrap();
        assert_eq!(runs.len(), 1);
        let run = &runs[0];
        assert_eq!(run.id(), "ray/v1");
        let states: Vec<ShardState> = run.shards.iter().map(|s| s.state).collect();
        assert_eq!(
            states,
            [
                ShardState::Done,
                ShardState::Running,
                ShardState::Failed,
                ShardState::Queued
            ]
        );
        assert_eq!(run.shards[2].detail, "exit status 3 on n1");
        assert_eq!(run.shards[2].log, dir.join("logs/shard-2.log"));
        assert_eq!(run.shards[1].items, Some(3));
        assert_eq!(run.merge, "not merged");
        assert_eq!(run.count(ShardState::Failed), 1);
    }

    #[test]
    fn a_ray_shard_whose_process_is_gone_from_this_machine_is_failed() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join(RAY_DIR).join("v2");
        write(
            &dir.join(RAY_MANIFEST),
            r#"{"name": "v2", "command": ["eval"], "shards": 3}"#,
        );
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let host = this_host().unwrap();
        let state = |pid: u32, node: &str| {
            format!(r#"{{"state": "running", "node": "{node}", "pid": {pid}}}"#)
        };
        // 0: its process is gone here; 1: alive here; 2: on another node.
        write(&dir.join("logs/shard-0.state.json"), &state(dead, &host));
        write(
            &dir.join("logs/shard-1.state.json"),
            &state(std::process::id(), &host),
        );
        write(
            &dir.join("logs/shard-2.state.json"),
            &state(dead, "elsewhere-node"),
        );
        let run = ray_run(&dir).unwrap();
        let states: Vec<ShardState> = run.shards.iter().map(|s| s.state).collect();
        assert_eq!(
            states,
            [ShardState::Failed, ShardState::Running, ShardState::Running]
        );
        assert!(
            run.shards[0].detail.contains(&format!("({dead}) is gone")),
            "{}",
            run.shards[0].detail
        );
    }

    #[test]
    fn a_bad_ray_record_names_its_file_and_field_and_hides_no_other_run() {
        let root = tempfile::tempdir().unwrap();
        let good = root.path().join(RAY_DIR).join("good");
        write(
            &good.join(RAY_MANIFEST),
            r#"{"name": "good", "command": ["eval"], "shards": 1}"#,
        );
        let dir = root.path().join(RAY_DIR).join("bad");
        write(
            &dir.join(RAY_MANIFEST),
            r#"{"name": "bad", "command": ["eval"], "shards": 2}"#,
        );
        write(&dir.join("logs/shard-1.state.json"), r#"{"state": "odd"}"#);
        let err = format!("{:#}", ray_run(&dir).unwrap_err());
        assert!(
            err.contains("shard-1.state.json") && err.contains("state"),
            "{err}"
        );
        write(&dir.join(RAY_MANIFEST), r#"{"name": "bad", "shards": 2}"#);
        let err = format!("{:#}", ray_run(&dir).unwrap_err());
        assert!(err.contains("run.json") && err.contains("command"), "{err}");

        let runs = sharded_runs(root.path()).unwrap();
        let names: Vec<&str> = runs.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names.len(), 2, "{names:?}");
        let bad = runs.iter().find(|r| r.name == "bad").unwrap();
        let note = bad.note.as_deref().unwrap();
        assert!(
            note.contains("run.json") && note.contains("command"),
            "{note}"
        );
        assert!(bad.shards.is_empty());
        let good = runs.iter().find(|r| r.name == "good").unwrap();
        assert!(good.note.is_none() && good.shards.len() == 1);
    }

    #[test]
    fn a_log_tail_is_its_last_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("shard-0.out");
        assert!(log_tail(&path, 3).unwrap().is_empty(), "no log yet");
        let text: String = (0..100_000).map(|i| format!("line {i}\n")).collect();
        std::fs::write(&path, text).unwrap();
        assert_eq!(log_tail(&path, 2).unwrap(), ["line 99998", "line 99999"]);
        assert!(
            log_tail(&path, 100_000).unwrap().len() < 100_000,
            "only the tail is read"
        );
    }

    #[test]
    fn slurm_states_map_to_four() {
        let shard = |state: &str, done: bool| ShardStatus {
            shard: 0,
            state: state.into(),
            done,
            items: None,
            log: PathBuf::new(),
        };
        assert_eq!(
            slurm_shard_state(&shard("COMPLETED", true), false),
            ShardState::Done
        );
        assert_eq!(
            slurm_shard_state(&shard("PENDING", false), false),
            ShardState::Queued
        );
        assert_eq!(
            slurm_shard_state(&shard("NOT SUBMITTED", false), false),
            ShardState::Queued
        );
        assert_eq!(
            slurm_shard_state(&shard("RUNNING", false), false),
            ShardState::Running
        );
        assert_eq!(
            slurm_shard_state(&shard("FAILED", false), true),
            ShardState::Failed
        );
    }
}
