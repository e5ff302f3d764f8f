//! Slurm job arrays: `endless slurm submit -- COMMAND` and `endless slurm
//! status`. Slurm does the scheduling; this writes what it runs.
//!
//! A submission named NAME lives in `slurm/NAME/` of the workspace:
//!
//! - `shard-0` ... `shard-(N-1)`: one workspace per shard, the main
//!   workspace's task bundles hard-linked in (and its `endless.toml`);
//! - `array.sbatch`: the job array's script; array task I runs
//!   `endless --workspace slurm/NAME/shard-I COMMAND --shard I/N`. Slurm's
//!   log of the task is `logs/shard-I.out` (appended to, never cut); each
//!   attempt (the first, a requeue, a re-run) writes its own
//!   `logs/shard-I.K.out` (K = 0, 1, ...) and its Slurm id to
//!   `logs/shard-I.job`. Submitted with `sbatch --array=0-(N-1)`; kept, so
//!   shards can be re-run (`endless slurm rerun NAME`, or `sbatch
//!   --array=I array.sbatch`). Told to stop before its time limit (USR1,
//!   `--requeue-before`), it stops its command, which resumes where it was,
//!   and requeues itself;
//! - `merge.sbatch`: `endless --workspace MAIN slurm merge NAME`,
//!   submitted with `--dependency=afterok:<array job>`; a merge (by the
//!   job or by hand) is recorded in `merged.json`;
//! - `prepare.sbatch`, for a submission that waits for another (a later
//!   stage of a chain, or `--after`): makes the shard workspaces once the
//!   other's merge brought its work into the main workspace;
//! - `job.json`: what was submitted ([`SlurmJob`]).
//!
//! A chain (`-- generate --offline ... --then tasks validate --all --then
//! eval ...`) is one submission per stage, `NAME-1-generate`,
//! `NAME-2-validate`..., each waiting (afterok) for the merge of the one
//! before.
//!
//! [`status`] asks `squeue` (and `sacct`, where accounting is on) about the
//! jobs, each shard's latest attempt included, and reads each shard's
//! `shard.json`.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context as _, Result};
use serde::{Deserialize, Serialize};

use super::shards::{make_shard_workspaces, shard_dir};
use super::slurm_options::{no_control, sbatch_quote, sh_quote, SbatchOptions};
use super::Context;
use crate::store::read_shard_record;

/// The directory of the workspace holding Slurm submissions.
pub const SLURM_DIR: &str = "slurm";

/// The word between the stages of a chained command.
pub const THEN: &str = "--then";

/// `endless slurm submit`'s flags.
#[derive(Debug, Clone, Default)]
pub struct SubmitRequest {
    /// Array tasks (of each stage).
    pub shards: u32,
    /// The sbatch options.
    pub sbatch: SbatchOptions,
    /// The submission's name (default: the kind and the time).
    pub name: Option<String>,
    /// An earlier submission of this workspace whose merge the (first)
    /// stage waits for.
    pub after: Option<String>,
    /// Submit (or only write the scripts and workspaces).
    pub submit: bool,
    /// The endless command to shard, without `endless`; stages of a chain
    /// separated by [`THEN`].
    pub command: Vec<String>,
}

/// A re-run of some shards of a submission (`endless slurm rerun`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Rerun {
    /// The shards re-run.
    pub shards: Vec<u32>,
    /// The job array that re-runs them.
    pub array_job: String,
    /// The merge job after it.
    pub merge_job: String,
    /// When (RFC 3339).
    pub at: String,
}

/// A merge of a submission's shards into the main workspace, as
/// `slurm/<name>/merged.json` records it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MergeRecord {
    /// When (RFC 3339).
    pub at: String,
    /// The Slurm job that merged (`None`: by hand).
    pub job: Option<String>,
    /// Shards left out (a partial merge).
    #[serde(default)]
    pub missing: Vec<u32>,
}

/// A submission, as `slurm/<name>/job.json` holds it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SlurmJob {
    /// Its name.
    pub name: String,
    /// `generate`, `validate`, `audit` or `eval`.
    pub kind: String,
    /// Array tasks.
    pub shards: u32,
    /// The sharded command (without `endless`, `--workspace`, `--shard`).
    pub command: Vec<String>,
    /// `slurm/<name>` (absolute).
    pub dir: PathBuf,
    /// The job array's id, once submitted.
    pub array_job: Option<String>,
    /// The merge job's id, once submitted.
    pub merge_job: Option<String>,
    /// When it was written (RFC 3339).
    pub created_at: String,
    /// The submission whose merge this one waits for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
    /// The job making the shard workspaces, when they wait for `after`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prepare_job: Option<String>,
    /// Array tasks running at once (`%N`), for re-runs too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_parallel: Option<u32>,
    /// Re-runs of failed shards, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reruns: Vec<Rerun>,
}

impl SlurmJob {
    /// The batch script of the array.
    pub fn array_script(&self) -> PathBuf {
        self.dir.join("array.sbatch")
    }

    /// The batch script of the merge.
    pub fn merge_script(&self) -> PathBuf {
        self.dir.join("merge.sbatch")
    }

    /// The batch script making the shard workspaces of a waiting job.
    pub fn prepare_script(&self) -> PathBuf {
        self.dir.join("prepare.sbatch")
    }

    /// The main workspace: `dir` is `MAIN/slurm/<name>`.
    pub fn main_workspace(&self) -> PathBuf {
        self.dir
            .parent()
            .and_then(Path::parent)
            .map_or_else(|| self.dir.clone(), Path::to_path_buf)
    }

    /// Slurm's log of array task `i` (every attempt appends a line).
    pub fn shard_log(&self, i: u32) -> PathBuf {
        self.dir.join("logs").join(format!("shard-{i}.out"))
    }

    /// The log of attempt `k` of array task `i`.
    pub fn attempt_log(&self, i: u32, k: u32) -> PathBuf {
        self.dir.join("logs").join(format!("shard-{i}.{k}.out"))
    }

    /// The log of the latest attempt of array task `i` (Slurm's log of it
    /// before any attempt started).
    pub fn latest_log(&self, i: u32) -> PathBuf {
        let mut k = 0;
        while self.attempt_log(i, k).is_file() {
            k += 1;
        }
        match k.checked_sub(1) {
            Some(last) => self.attempt_log(i, last),
            None => self.shard_log(i),
        }
    }

    /// Where array task `i`'s latest attempt wrote its Slurm id.
    pub fn attempt_id_file(&self, i: u32) -> PathBuf {
        self.dir.join("logs").join(format!("shard-{i}.job"))
    }

    /// The merge job's log.
    pub fn merge_log(&self) -> PathBuf {
        self.dir.join("logs").join("merge.out")
    }

    /// The record of its merge.
    pub fn merge_record_path(&self) -> PathBuf {
        self.dir.join("merged.json")
    }

    /// The latest merge job (of the last re-run, else the first).
    pub fn latest_merge_job(&self) -> Option<&str> {
        self.reruns
            .last()
            .map(|r| r.merge_job.as_str())
            .or(self.merge_job.as_deref())
    }
}

/// What kind of sharded command `command` is, or why it cannot be sharded.
pub fn command_kind(command: &[String]) -> Result<&'static str> {
    let words: Vec<&str> = command.iter().map(String::as_str).collect();
    let kind = match words.as_slice() {
        ["tasks", "validate", ..] => "validate",
        ["tasks", "audit", ..] => "audit",
        ["eval", ..] => "eval",
        ["generate", rest @ ..] if rest.contains(&"--offline") => "generate",
        ["generate", ..] => bail!("only offline generation can be sharded: add --offline"),
        [] => bail!("name the command to run after `--`, e.g. `-- tasks validate --all`"),
        _ => bail!(
            "{:?} cannot be sharded: use `tasks validate ...`, `tasks audit ...`, `eval ...` or `generate --offline ...`",
            words.join(" ")
        ),
    };
    for w in &words {
        let flag = w.split('=').next().unwrap_or(w);
        if matches!(flag, "--shard" | "--workspace" | "--create") {
            bail!(
                "leave {flag} out of the command: each array task gets its own shard and workspace"
            );
        }
    }
    Ok(kind)
}

/// The stages of a chained command: its words split at [`THEN`].
pub fn stages(command: &[String]) -> Result<Vec<Vec<String>>> {
    let stages: Vec<Vec<String>> = command
        .split(|w| *w == THEN)
        .map(<[String]>::to_vec)
        .collect();
    for stage in &stages {
        command_kind(stage)?;
    }
    Ok(stages)
}

/// Check every value of `req` that goes into the batch scripts, naming
/// the option of one that does not fit.
fn check_request(req: &SubmitRequest) -> Result<()> {
    req.sbatch.check()?;
    for word in &req.command {
        no_control("the command's word", word)?;
    }
    Ok(())
}

/// A job name usable as a directory and Slurm job name.
fn check_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 100
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'));
    if !ok {
        bail!("--name {name:?}: use letters, digits, '-', '_' and '.' (not first), at most 100");
    }
    Ok(())
}

/// The words the array task runs: the command, and `--concurrency C` of
/// the CPUs asked for when the command runs things in parallel and does
/// not say how many itself.
fn shard_command(job: &SlurmJob, opts: &SbatchOptions) -> Vec<String> {
    let mut words = job.command.clone();
    let sets_its_own = words
        .iter()
        .any(|w| w == "--concurrency" || w.starts_with("--concurrency="));
    if let (Some(c), false, true) = (
        opts.cpus,
        sets_its_own,
        matches!(job.kind.as_str(), "validate" | "audit" | "eval"),
    ) {
        words.extend(["--concurrency".to_string(), c.to_string()]);
    }
    words
}

/// The job array's batch script.
fn array_script(job: &SlurmJob, opts: &SbatchOptions, exe: &Path) -> String {
    let n = job.shards;
    let command: Vec<String> = shard_command(job, opts)
        .iter()
        .map(|w| sh_quote(w))
        .collect();
    let logs = job.dir.join("logs");
    format!(
        "#!/bin/bash\n\
         # Written by `endless slurm submit`. Submit with\n\
         #   sbatch {array} {script}\n\
         # or re-run failed shards with `endless --workspace {main} slurm rerun {name}`.\n\
         #SBATCH --job-name={name}\n\
         #SBATCH --output={slurm_log}\n\
         #SBATCH --open-mode=append\n\
         {resources}\
         set -uo pipefail\n\
         I=\"${{SLURM_ARRAY_TASK_ID:?submit this script as a job array: sbatch --array=0-{last} {script}}}\"\n\
         LOGS={logs}\n\
         # Each attempt (the first, a requeue, a re-run) has its own log.\n\
         K=0\n\
         while [ -e \"$LOGS/shard-$I.$K.out\" ]; do K=$((K + 1)); done\n\
         ID=\"${{SLURM_ARRAY_JOB_ID:-${{SLURM_JOB_ID:-}}}}_$I\"\n\
         echo \"endless: shard $I/{n}, attempt $K (job $ID, restart ${{SLURM_RESTART_COUNT:-0}}): log $LOGS/shard-$I.$K.out\"\n\
         echo \"$ID\" >\"$LOGS/.shard-$I.job.$$\" && mv -f \"$LOGS/.shard-$I.job.$$\" \"$LOGS/shard-$I.job\"\n\
         exec >\"$LOGS/shard-$I.$K.out\" 2>&1\n\
         # Told to stop before the time limit (--signal=B:USR1@S): stop the\n\
         # command (a shard run again resumes where it was) and requeue.\n\
         requeue() {{\n\
         \x20 echo \"endless: shard $I/{n} told to stop (USR1): stopping it, then requeueing $ID\"\n\
         \x20 kill -TERM \"$child\" 2>/dev/null\n\
         \x20 wait \"$child\"\n\
         \x20 scontrol requeue \"$ID\"\n\
         \x20 exit 0\n\
         }}\n\
         trap requeue USR1\n\
         {exe} --workspace {dir}/shard-\"$I\" {command} --shard \"$I/{n}\" &\n\
         child=$!\n\
         wait \"$child\"\n\
         status=$?\n\
         # A shard that recorded its work done succeeded, even when the\n\
         # command reports what it found with its exit status (invalid tasks).\n\
         if [ \"$status\" -ne 0 ] && grep -q '\"done\": true' {dir}/shard-\"$I\"/shard.json 2>/dev/null; then\n\
         \x20 echo \"endless: shard $I/{n} is done (exit status $status: see above)\" >&2\n\
         \x20 status=0\n\
         fi\n\
         exit \"$status\"\n",
        last = n.saturating_sub(1),
        array = opts.array_arg(&format!("0-{}", n.saturating_sub(1))),
        script = sh_quote(&job.array_script().to_string_lossy()),
        main = sh_quote(&job.main_workspace().to_string_lossy()),
        name = job.name,
        // `%` is the log name's pattern character: a literal one is `%%`.
        slurm_log = sbatch_quote(&format!(
            "{}/shard-%a.out",
            logs.to_string_lossy().replace('%', "%%")
        )),
        resources = opts.array_lines(),
        logs = sh_quote(&logs.to_string_lossy()),
        exe = sh_quote(&exe.to_string_lossy()),
        dir = sh_quote(&job.dir.to_string_lossy()),
        command = command.join(" "),
    )
}

/// The merge job's batch script.
fn merge_script(job: &SlurmJob, opts: &SbatchOptions, exe: &Path) -> String {
    format!(
        "#!/bin/bash\n\
         # Written by `endless slurm submit`: merges the shards of job {name}\n\
         # into the main workspace once every array task succeeded.\n\
         #SBATCH --job-name={name}-merge\n\
         #SBATCH --output={log}\n\
         #SBATCH --open-mode=append\n\
         {resources}\
         set -euo pipefail\n\
         exec {exe} --workspace {main} slurm merge {name}\n",
        name = job.name,
        log = sbatch_quote(&job.merge_log().to_string_lossy().replace('%', "%%")),
        resources = opts.site_lines(),
        exe = sh_quote(&exe.to_string_lossy()),
        main = sh_quote(&job.main_workspace().to_string_lossy()),
    )
}

/// The batch script making the shard workspaces of a job that waits for
/// another's merge.
fn prepare_script(job: &SlurmJob, opts: &SbatchOptions, exe: &Path) -> String {
    format!(
        "#!/bin/bash\n\
         # Written by `endless slurm submit`: makes the shard workspaces of job\n\
         # {name} from the main workspace once job {after} merged into it.\n\
         #SBATCH --job-name={name}-prepare\n\
         #SBATCH --output={log}\n\
         #SBATCH --open-mode=append\n\
         {resources}\
         set -euo pipefail\n\
         exec {exe} --workspace {main} workspace shards {dir} --count {n}\n",
        name = job.name,
        after = job.after.as_deref().unwrap_or("-"),
        log = sbatch_quote(
            &job.dir
                .join("logs")
                .join("prepare.out")
                .to_string_lossy()
                .replace('%', "%%")
        ),
        resources = opts.site_lines(),
        exe = sh_quote(&exe.to_string_lossy()),
        main = sh_quote(&job.main_workspace().to_string_lossy()),
        dir = sh_quote(&job.dir.to_string_lossy()),
        n = job.shards,
    )
}

/// Run `sbatch --parsable ARGS SCRIPT`; returns the job id.
pub(crate) fn sbatch(args: &[String], script: &Path) -> Result<String> {
    let out = Command::new("sbatch")
        .arg("--parsable")
        .args(args)
        .arg(script)
        .output()
        .context("running sbatch (is Slurm installed, and this a submit host?)")?;
    if !out.status.success() {
        bail!(
            "sbatch {} {} failed ({}): {}",
            args.join(" "),
            script.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let text = String::from_utf8_lossy(&out.stdout);
    // `--parsable` prints `id` or `id;cluster`.
    let id = text.trim().split(';').next().unwrap_or("").to_string();
    if id.is_empty() || !id.bytes().all(|c| c.is_ascii_digit()) {
        bail!("sbatch printed no job id: {:?}", text.trim());
    }
    Ok(id)
}

/// The `--dependency` arguments of a job waiting for job `id`: a failed
/// one cancels it (re-run, then merge: `slurm status` says how).
fn after_ok(id: &str) -> [String; 2] {
    [
        format!("--dependency=afterok:{id}"),
        "--kill-on-invalid-dep=yes".into(),
    ]
}

/// The job a stage waits for: `None` when there is none or it merged
/// already, else its latest merge job.
fn waits_for(ctx: &Context, written: &[SlurmJob], after: &str) -> Result<Option<String>> {
    let job = match written.iter().find(|j| j.name == after) {
        Some(j) => j.clone(),
        None => jobs(ctx, Some(after))?
            .into_iter()
            .next()
            .with_context(|| format!("--after {after}: no such submission"))?,
    };
    if read_merge_record(&job)?.is_some() {
        return Ok(None);
    }
    match job.latest_merge_job() {
        Some(m) => Ok(Some(m.to_string())),
        None => {
            bail!("--after {after}: that submission was not submitted (no merge job to wait for)")
        }
    }
}

/// Write the shard workspaces and batch scripts of `req` into
/// `slurm/<name>/` (one submission per stage of a chain), and submit them
/// (unless `req.submit` is off). Returns each stage's job.
pub fn submit(ctx: &Context, req: &SubmitRequest) -> Result<Vec<SlurmJob>> {
    let stages = stages(&req.command)?;
    check_request(req)?;
    if req.shards == 0 || req.shards > crate::store::MAX_SHARDS {
        bail!("--shards must be 1 to {}", crate::store::MAX_SHARDS);
    }
    let main = ctx.workspace()?;
    let root =
        std::fs::canonicalize(main.root()).with_context(|| format!("{}", main.root().display()))?;
    let stamp = chrono::Utc::now().format("%Y%m%d-%H%M%S");
    let base = match &req.name {
        Some(n) => n.clone(),
        None if stages.len() == 1 => format!("{}-{stamp}", command_kind(&stages[0])?),
        None => format!("chain-{stamp}"),
    };
    check_name(&base)?;
    if let Some(a) = &req.after {
        check_name(a)?;
    }
    let exe = std::env::current_exe().context("finding the endless binary")?;
    no_control("the endless binary's path", &exe.to_string_lossy())?;
    let mut written: Vec<SlurmJob> = Vec::new();
    for (k, command) in stages.iter().enumerate() {
        let kind = command_kind(command)?;
        let name = if stages.len() == 1 {
            base.clone()
        } else {
            format!("{base}-{}-{kind}", k + 1)
        };
        check_name(&name)?;
        let after = match k {
            0 => req.after.clone(),
            _ => written.last().map(|j| j.name.clone()),
        };
        let dir = root.join(SLURM_DIR).join(&name);
        no_control("the workspace path", &dir.to_string_lossy())?;
        // A job written with --no-submit is submitted by the same command
        // without it; one submitted already is not submitted twice.
        if let Some(old) = jobs(ctx, Some(&name))
            .ok()
            .and_then(|j| j.into_iter().next())
        {
            if let Some(array) = old.array_job {
                bail!(
                    "{}: job {name} was submitted already (array {array}); pick another --name (`endless slurm status {name}` shows it)",
                    dir.display()
                );
            }
            if old.command != *command || old.shards != req.shards {
                bail!(
                    "{}: job {name} was written for another command or shard count; pick another --name",
                    dir.display()
                );
            }
        }
        // A stage waiting for another's merge gets its shard workspaces
        // from a job that runs after it; the others get them now.
        let wait = match (&after, req.submit) {
            (Some(a), true) => waits_for(ctx, &written, a)?,
            _ => None,
        };
        std::fs::create_dir_all(dir.join("logs"))
            .with_context(|| format!("creating {}", dir.display()))?;
        let prepare_later = wait.is_some() || (after.is_some() && !req.submit);
        if !prepare_later {
            make_shard_workspaces(&main, &dir, req.shards)?;
        }
        let mut job = SlurmJob {
            name,
            kind: kind.to_string(),
            shards: req.shards,
            command: command.clone(),
            dir,
            array_job: None,
            merge_job: None,
            created_at: crate::store::now(),
            after,
            prepare_job: None,
            max_parallel: req.sbatch.max_parallel,
            reruns: Vec::new(),
        };
        let mut scripts = vec![
            (job.array_script(), array_script(&job, &req.sbatch, &exe)),
            (job.merge_script(), merge_script(&job, &req.sbatch, &exe)),
        ];
        if job.after.is_some() {
            scripts.push((
                job.prepare_script(),
                prepare_script(&job, &req.sbatch, &exe),
            ));
        }
        for (path, text) in scripts {
            crate::fsutil::write_atomic(&path, text.as_bytes())
                .with_context(|| format!("writing {}", path.display()))?;
        }
        if req.submit {
            let mut array_args = vec![req.sbatch.array_arg(&format!("0-{}", req.shards - 1))];
            if let Some(w) = &wait {
                let prepare = sbatch(&after_ok(w), &job.prepare_script())?;
                array_args.extend(after_ok(&prepare));
                job.prepare_job = Some(prepare);
            }
            let array = sbatch(&array_args, &job.array_script())?;
            job.array_job = Some(array.clone());
            write_job(&job)?;
            job.merge_job = Some(sbatch(&after_ok(&array), &job.merge_script())?);
        }
        write_job(&job)?;
        written.push(job);
    }
    Ok(written)
}

/// Write `job.json` of `job`.
pub(crate) fn write_job(job: &SlurmJob) -> Result<()> {
    let path = job.dir.join("job.json");
    let mut json = serde_json::to_vec_pretty(job)?;
    json.push(b'\n');
    crate::fsutil::write_atomic(&path, &json).with_context(|| format!("writing {}", path.display()))
}

/// The record of `job`'s merge, if it was merged.
pub fn read_merge_record(job: &SlurmJob) -> Result<Option<MergeRecord>> {
    let path = job.merge_record_path();
    match std::fs::read_to_string(&path) {
        Ok(text) => serde_json::from_str(&text)
            .map(Some)
            .with_context(|| format!("{}: not a merge record", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

/// One array task's state.
#[derive(Debug, Clone, Serialize)]
pub struct ShardStatus {
    /// Its index.
    pub shard: u32,
    /// Slurm's state (`PENDING`, `RUNNING`, `COMPLETED`, `FAILED`, ...),
    /// or, when Slurm no longer knows it, what its `shard.json` says
    /// (`COMPLETED` when done, `FAILED` when started and not done,
    /// `UNKNOWN` when it never started).
    pub state: String,
    /// Whether the shard recorded its work done.
    pub done: bool,
    /// Items (tasks) in the shard, once started.
    pub items: Option<usize>,
    /// Its log.
    pub log: PathBuf,
}

/// A submission's state.
#[derive(Debug, Clone, Serialize)]
pub struct JobStatus {
    /// What was submitted.
    pub job: SlurmJob,
    /// Each array task.
    pub shards: Vec<ShardStatus>,
    /// The merge job's state.
    pub merge: String,
    /// Why `sacct` could not be asked, if it could not.
    pub sacct_note: Option<String>,
}

impl JobStatus {
    /// Shards not done whose Slurm state says they will not be.
    pub fn failed(&self) -> Vec<&ShardStatus> {
        self.shards
            .iter()
            .filter(|s| !s.done && !LIVE.contains(&s.state.as_str()))
            .collect()
    }
}

/// `squeue`'s states of jobs `ids` (`id` or `id_index` -> state), and the
/// array tasks still pending as a range (`123_[2-3]`) expanded.
fn squeue_states(ids: &[&str]) -> Result<Vec<(String, String)>> {
    let out = Command::new("squeue")
        .args([
            "--noheader",
            "--array",
            "--states=all",
            "--format=%i|%T",
            "--jobs",
        ])
        .arg(ids.join(","))
        .output()
        .context("running squeue")?;
    // A job Slurm has forgotten makes squeue fail ("Invalid job id").
    if !out.status.success() {
        return Ok(Vec::new());
    }
    Ok(parse_states(&String::from_utf8_lossy(&out.stdout)))
}

/// `sacct`'s states of jobs `ids`; `Err` with sacct's reason when
/// accounting is off.
fn sacct_states(ids: &[&str]) -> Result<Vec<(String, String)>, String> {
    let out = Command::new("sacct")
        .args([
            "--noheader",
            "--parsable2",
            "--format=JobID,State",
            "--jobs",
        ])
        .arg(ids.join(","))
        .output()
        .map_err(|e| format!("cannot run sacct: {e}"))?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).trim().to_string());
    }
    Ok(parse_states(&String::from_utf8_lossy(&out.stdout)))
}

/// `ID|STATE` lines; `123_[0-2]` expanded to `123_0`, `123_1`, `123_2`;
/// `CANCELLED by 0` cut to `CANCELLED`.
pub fn parse_states(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for line in text.lines() {
        let Some((id, state)) = line.trim().split_once('|') else {
            continue;
        };
        let state = state.split_whitespace().next().unwrap_or("").to_string();
        match id.split_once("_[") {
            Some((job, range)) => {
                let range = range.trim_end_matches(']');
                let range = range.split('%').next().unwrap_or(range);
                for part in range.split(',') {
                    let (a, b) = part.split_once('-').unwrap_or((part, part));
                    if let (Ok(a), Ok(b)) = (a.parse::<u32>(), b.parse::<u32>()) {
                        for i in a..=b.min(a.saturating_add(100_000)) {
                            out.push((format!("{job}_{i}"), state.clone()));
                        }
                    }
                }
            }
            None => out.push((id.to_string(), state)),
        }
    }
    out
}

/// The submissions of this workspace (all, or the one named `name`).
pub fn jobs(ctx: &Context, name: Option<&str>) -> Result<Vec<SlurmJob>> {
    let dir = ctx.workspace_root.join(SLURM_DIR);
    let names: Vec<String> = match name {
        Some(n) => {
            check_name(n)?;
            vec![n.to_string()]
        }
        None => {
            let mut v: Vec<String> = std::fs::read_dir(&dir)
                .map(|d| {
                    d.flatten()
                        .filter_map(|e| e.file_name().to_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default();
            v.sort();
            v
        }
    };
    let mut out = Vec::new();
    for n in names {
        let path = dir.join(&n).join("job.json");
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && name.is_none() => continue,
            Err(e) => {
                return Err(e)
                    .with_context(|| format!("no Slurm job {n} here ({})", path.display()))
            }
        };
        out.push(serde_json::from_str(&text).with_context(|| format!("{}", path.display()))?);
    }
    Ok(out)
}

/// The Slurm id (`ARRAY_INDEX`) of array task `i`'s latest attempt: of
/// the first submission, a re-run that covers it, or the attempt that
/// wrote `logs/shard-I.job` (a requeue, an `sbatch --array=I` by hand),
/// whichever job is newest.
pub fn latest_attempt(job: &SlurmJob, i: u32) -> Option<String> {
    let mut ids: Vec<String> = job
        .array_job
        .iter()
        .map(|a| format!("{a}_{i}"))
        .chain(
            job.reruns
                .iter()
                .filter(|r| r.shards.contains(&i))
                .map(|r| format!("{}_{i}", r.array_job)),
        )
        .collect();
    if let Ok(text) = std::fs::read_to_string(job.attempt_id_file(i)) {
        let id = text.trim();
        let ok = id
            .split_once('_')
            .is_some_and(|(a, b)| is_number(a) && b == i.to_string());
        if ok {
            ids.push(id.to_string());
        }
    }
    ids.into_iter()
        .max_by_key(|id| id.split('_').next().and_then(|a| a.parse::<u64>().ok()))
}

fn is_number(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|c| c.is_ascii_digit())
}

/// The Slurm states of a job that will still run (or be run).
const LIVE: [&str; 7] = [
    "PENDING",
    "RUNNING",
    "CONFIGURING",
    "COMPLETING",
    "REQUEUED",
    "SUSPENDED",
    "NOT SUBMITTED",
];

/// The state of submission `job`: Slurm's view of its jobs (each shard's
/// latest attempt) and each shard's record.
pub fn status(job: &SlurmJob) -> Result<JobStatus> {
    let mut ids: Vec<String> = [&job.array_job, &job.merge_job, &job.prepare_job]
        .into_iter()
        .flatten()
        .cloned()
        .collect();
    for r in &job.reruns {
        ids.extend([r.array_job.clone(), r.merge_job.clone()]);
    }
    ids.extend((0..job.shards).filter_map(|i| latest_attempt(job, i)));
    ids.sort();
    ids.dedup();
    let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
    let mut states = Vec::new();
    let mut sacct_note = None;
    if !ids.is_empty() {
        match sacct_states(&ids) {
            Ok(s) => states = s,
            Err(why) => sacct_note = Some(why),
        }
        // squeue knows best about what is still queued or running.
        // Without squeue (the TUI off a submit host), the shards' records say.
        states.extend(squeue_states(&ids).unwrap_or_default());
    }
    Ok(status_from(job, &states, sacct_note))
}

/// [`status`] from the states Slurm gave (`id` -> state, later ones win).
fn status_from(
    job: &SlurmJob,
    states: &[(String, String)],
    sacct_note: Option<String>,
) -> JobStatus {
    let state_of = |id: &str| {
        states
            .iter()
            .rev()
            .find(|(j, _)| j == id)
            .map(|(_, s)| s.clone())
    };
    let mut shards = Vec::new();
    for i in 0..job.shards {
        let record = read_shard_record(&shard_dir(&job.dir, i)).ok().flatten();
        let done = record.as_ref().is_some_and(|r| r.done);
        let slurm = latest_attempt(job, i).and_then(|id| state_of(&id));
        let state = match slurm {
            Some(s) => s,
            None if done => "COMPLETED".into(),
            None if record.is_some() => "FAILED".into(),
            None if job.array_job.is_none() => "NOT SUBMITTED".into(),
            None => "UNKNOWN".into(),
        };
        shards.push(ShardStatus {
            shard: i,
            state,
            done,
            items: record.map(|r| r.items),
            log: job.latest_log(i),
        });
    }
    let latest = job.latest_merge_job();
    let slurm_merge = latest.and_then(state_of);
    let merged = read_merge_record(job).ok().flatten();
    let merge = match (merged, latest) {
        // Merged by the latest merge job: Slurm's word for it.
        (Some(r), Some(m)) if r.job.as_deref() == Some(m) => {
            slurm_merge.unwrap_or_else(|| "COMPLETED".into())
        }
        (Some(_), Some(_)) if slurm_merge.as_deref().is_some_and(|s| LIVE.contains(&s)) => {
            slurm_merge.unwrap_or_default()
        }
        (Some(r), _) => {
            let by = r
                .job
                .map_or("by hand".to_string(), |j| format!("by job {j}"));
            let partial = if r.missing.is_empty() {
                String::new()
            } else {
                format!(
                    ", without shards {}",
                    r.missing
                        .iter()
                        .map(u32::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            };
            format!("MERGED {by} at {}{partial}", r.at)
        }
        (None, None) => "NOT SUBMITTED".into(),
        (None, Some(_)) => slurm_merge.unwrap_or_else(|| {
            // Forgotten by Slurm: its log says whether it ran.
            if job.merge_log().is_file() {
                "ENDED (see its log)".into()
            } else {
                "UNKNOWN".into()
            }
        }),
    };
    JobStatus {
        job: job.clone(),
        shards,
        merge,
        sacct_note,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_string).collect()
    }

    fn job(dir: &str, kind: &str, command: &str, shards: u32) -> SlurmJob {
        SlurmJob {
            name: "v1".into(),
            kind: kind.into(),
            shards,
            command: words(command),
            dir: dir.into(),
            array_job: None,
            merge_job: None,
            created_at: String::new(),
            after: None,
            prepare_job: None,
            max_parallel: None,
            reruns: Vec::new(),
        }
    }

    #[test]
    fn only_shardable_commands_without_their_own_shard_are_taken() {
        for (command, kind) in [
            ("tasks validate --all", "validate"),
            ("tasks audit --all", "audit"),
            ("eval --policy oracle", "eval"),
            ("generate --offline --count 8", "generate"),
        ] {
            assert_eq!(command_kind(&words(command)).unwrap(), kind);
        }
        for (bad, why) in [
            ("generate --count 3", "add --offline"),
            ("train --steps 3", "cannot be sharded"),
            ("eval --policy oracle --shard 0/2", "leave --shard out"),
            (
                "eval --policy oracle --workspace=/x",
                "leave --workspace out",
            ),
            ("", "name the command"),
        ] {
            let err = command_kind(&words(bad)).unwrap_err().to_string();
            assert!(err.contains(why), "{bad}: {err}");
        }
    }

    #[test]
    fn a_chain_is_split_into_its_stages_each_checked() {
        let chain = words(
            "generate --offline --count 8 --then tasks validate --all --then tasks audit --all --then eval --policy oracle",
        );
        let s = stages(&chain).unwrap();
        assert_eq!(
            s,
            [
                words("generate --offline --count 8"),
                words("tasks validate --all"),
                words("tasks audit --all"),
                words("eval --policy oracle"),
            ]
        );
        let e = stages(&words("tasks validate --all --then train"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("cannot be sharded"), "{e}");
        let e = stages(&words("tasks validate --all --then"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("name the command"), "{e}");
    }

    #[test]
    fn states_expand_array_ranges() {
        let s = parse_states("12_[2-4%2]|PENDING\n12_0|RUNNING\n13|PENDING\n12_1|CANCELLED by 0\n");
        let ids: Vec<&str> = s.iter().map(|(i, _)| i.as_str()).collect();
        assert_eq!(ids, ["12_2", "12_3", "12_4", "12_0", "13", "12_1"]);
        assert_eq!(s[5].1, "CANCELLED");
    }

    #[test]
    fn scripts_run_each_shard_in_its_workspace_and_merge_after() {
        let job = job("/ws/slurm/v1", "validate", "tasks validate --all", 4);
        let opts = SbatchOptions {
            partition: Some("debug".into()),
            account: Some("proj".into()),
            time: Some("0:10:00".into()),
            cpus: Some(2),
            mem: Some("1G".into()),
            max_parallel: Some(2),
            ..Default::default()
        };
        let array = array_script(&job, &opts, Path::new("/bin/endless"));
        assert!(
            array.contains(
                "#SBATCH --output=\"/ws/slurm/v1/logs/shard-%a.out\"\n#SBATCH --open-mode=append\n"
            ),
            "{array}"
        );
        assert!(array.contains("#SBATCH --partition=debug\n#SBATCH --account=proj\n#SBATCH --time=0:10:00\n#SBATCH --cpus-per-task=2\n#SBATCH --mem=1G\n"), "{array}");
        assert!(array.contains("#   sbatch --array=0-3%2 "), "{array}");
        // --cpus is the shard's concurrency too.
        assert!(
            array.contains("\n'/bin/endless' --workspace '/ws/slurm/v1'/shard-\"$I\" 'tasks' 'validate' '--all' '--concurrency' '2' --shard \"$I/4\" &\n"),
            "{array}"
        );
        assert!(
            array.contains("exec >\"$LOGS/shard-$I.$K.out\" 2>&1\n"),
            "{array}"
        );
        assert!(array.contains("trap requeue USR1\n"), "{array}");
        let merge = merge_script(&job, &opts, Path::new("/bin/endless"));
        assert!(
            merge.contains("exec '/bin/endless' --workspace '/ws' slurm merge v1\n"),
            "{merge}"
        );
        assert!(merge.contains("#SBATCH --account=proj\n"), "{merge}");
        assert!(!merge.contains("--time"), "{merge}");
        // A command that says its own concurrency keeps it; generation has none.
        let own = SlurmJob {
            command: words("eval --policy oracle --concurrency 6"),
            kind: "eval".into(),
            ..job.clone()
        };
        assert_eq!(shard_command(&own, &opts), own.command);
        let gen = SlurmJob {
            command: words("generate --offline --count 4"),
            kind: "generate".into(),
            ..job.clone()
        };
        assert_eq!(shard_command(&gen, &opts), gen.command);
        let prepare = prepare_script(
            &SlurmJob {
                after: Some("gen".into()),
                ..job
            },
            &opts,
            Path::new("/bin/endless"),
        );
        assert!(
            prepare.contains(
                "exec '/bin/endless' --workspace '/ws' workspace shards '/ws/slurm/v1' --count 4\n"
            ),
            "{prepare}"
        );
    }

    /// Issue 46: a value with a newline became a line of the script.
    #[test]
    fn command_words_that_would_break_the_script_are_refused() {
        let nl = "1\n#SBATCH --uid=0\ntouch /tmp/pwned";
        let req = SubmitRequest {
            command: vec!["eval".into(), format!("--policy={nl}")],
            ..Default::default()
        };
        let e = check_request(&req).unwrap_err().to_string();
        assert!(e.starts_with("the command's word"), "{e}");
        let req = SubmitRequest {
            sbatch: SbatchOptions {
                partition: Some(nl.into()),
                ..Default::default()
            },
            command: words("tasks validate --all"),
            ..Default::default()
        };
        let e = check_request(&req).unwrap_err().to_string();
        assert!(e.starts_with("--partition"), "{e}");
    }

    /// Paths with spaces, quotes, `#` and `%` stay one argument of their
    /// `#SBATCH` line (sbatch's quoting) and one word of the shell's.
    #[test]
    fn odd_workspace_paths_are_quoted_for_sbatch_and_the_shell() {
        let dir = "/ws/my \"runs\" #2 100%/slurm/v1";
        let job = job(dir, "eval", "eval --policy oracle", 2);
        let opts = SbatchOptions::default();
        let array = array_script(&job, &opts, Path::new("/opt/my endless/endless"));
        assert!(
            array.contains(
                "#SBATCH --output=\"/ws/my \\\"runs\\\" #2 100%%/slurm/v1/logs/shard-%a.out\"\n"
            ),
            "{array}"
        );
        assert!(
            array.contains("'/opt/my endless/endless' --workspace '/ws/my \"runs\" #2 100%/slurm/v1'/shard-\"$I\""),
            "{array}"
        );
        let merge = merge_script(&job, &opts, Path::new("/bin/endless"));
        assert!(
            merge.contains(
                "#SBATCH --output=\"/ws/my \\\"runs\\\" #2 100%%/slurm/v1/logs/merge.out\"\n"
            ),
            "{merge}"
        );
        assert!(
            merge.contains("--workspace '/ws/my \"runs\" #2 100%' slurm merge v1"),
            "{merge}"
        );
        // Each script is the lines it was written with, and bash reads it.
        for script in [&array, &merge] {
            let sbatch_lines = script.lines().filter(|l| l.starts_with("#SBATCH")).count();
            assert_eq!(sbatch_lines, 3, "{script}");
            let out = Command::new("bash")
                .args(["-n", "-c", script])
                .output()
                .unwrap();
            assert!(out.status.success(), "{script}: {out:?}");
        }
    }

    /// Issue 48: while a failed shard ran again, `slurm status` said
    /// "failed" (it asked only about the first array), then "done
    /// (CANCELLED)" (the first merge job's state) after a merge by hand.
    #[test]
    fn status_follows_each_shards_latest_attempt_and_merges_by_hand() {
        let tmp = tempfile::tempdir().unwrap();
        let mut job = job(
            &tmp.path().join("slurm/v1").to_string_lossy(),
            "validate",
            "tasks validate --all",
            3,
        );
        std::fs::create_dir_all(job.dir.join("logs")).unwrap();
        job.array_job = Some("10".into());
        job.merge_job = Some("11".into());
        let first = parse_states("10_0|COMPLETED\n10_1|FAILED\n10_2|FAILED\n11|CANCELLED\n");
        let s = status_from(&job, &first, None);
        let failed: Vec<u32> = s.failed().iter().map(|x| x.shard).collect();
        assert_eq!(failed, [0, 1, 2], "none recorded done: {s:?}");
        // `slurm rerun` re-ran shard 1; shard 2 was re-run by hand with
        // `sbatch --array=2`, whose attempt wrote its id.
        job.reruns.push(Rerun {
            shards: vec![1],
            array_job: "20".into(),
            merge_job: "21".into(),
            at: String::new(),
        });
        std::fs::write(job.attempt_id_file(2), "30_2\n").unwrap();
        std::fs::write(job.attempt_id_file(0), "10_0\n").unwrap();
        assert_eq!(latest_attempt(&job, 2).as_deref(), Some("30_2"));
        assert_eq!(latest_attempt(&job, 1).as_deref(), Some("20_1"));
        let mut states = first.clone();
        states.extend(parse_states("20_1|RUNNING\n21|PENDING\n30_2|PENDING\n"));
        let s = status_from(&job, &states, None);
        let seen: Vec<&str> = s.shards.iter().map(|x| x.state.as_str()).collect();
        assert_eq!(seen, ["COMPLETED", "RUNNING", "PENDING"]);
        assert_eq!(s.merge, "PENDING");
        // The re-run's merge was cancelled too; merged by hand.
        states.extend(parse_states("21|CANCELLED\n"));
        std::fs::write(
            job.merge_record_path(),
            r#"{"at": "2026-12-07T10:00:00Z", "job": null, "missing": [2]}"#,
        )
        .unwrap();
        let s = status_from(&job, &states, None);
        assert_eq!(
            s.merge,
            "MERGED by hand at 2026-12-07T10:00:00Z, without shards 2"
        );
        // Each attempt's log: the latest one is shown.
        std::fs::write(job.attempt_log(1, 0), "first").unwrap();
        std::fs::write(job.attempt_log(1, 1), "second").unwrap();
        assert_eq!(s.job.latest_log(1), job.attempt_log(1, 1));
        assert_eq!(s.job.latest_log(0), job.shard_log(0));
    }
}
