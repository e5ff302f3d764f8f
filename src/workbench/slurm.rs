//! Slurm job arrays: `endless slurm submit -- COMMAND` and `endless slurm
//! status`. Slurm does the scheduling; this writes what it runs.
//!
//! A submission named NAME lives in `slurm/NAME/` of the workspace:
//!
//! - `shard-0` ... `shard-(N-1)`: one workspace per shard, the main
//!   workspace's task bundles hard-linked in (and its `endless.toml`);
//! - `array.sbatch`: the job array's script; array task I runs
//!   `endless --workspace slurm/NAME/shard-I COMMAND --shard I/N`, its log
//!   in `logs/shard-I.out`. Submitted with `sbatch --array=0-(N-1)`; kept,
//!   so one shard can be re-run alone with `sbatch --array=I array.sbatch`;
//! - `merge.sbatch`: `endless --workspace MAIN workspace merge slurm/NAME`,
//!   submitted with `--dependency=afterok:<array job>`;
//! - `job.json`: what was submitted ([`SlurmJob`]).
//!
//! [`status`] asks `squeue` (and `sacct`, where accounting is on) about the
//! array and the merge job, and reads each shard's `shard.json`.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context as _, Result};
use serde::{Deserialize, Serialize};

use super::shards::{make_shard_workspaces, shard_dir};
use super::Context;
use crate::store::read_shard_record;

/// The directory of the workspace holding Slurm submissions.
pub const SLURM_DIR: &str = "slurm";

/// `endless slurm submit`'s flags.
#[derive(Debug, Clone, Default)]
pub struct SubmitRequest {
    /// Array tasks.
    pub shards: u32,
    /// `sbatch --partition`.
    pub partition: Option<String>,
    /// `sbatch --time` of each array task.
    pub time: Option<String>,
    /// `sbatch --cpus-per-task`.
    pub cpus: Option<u32>,
    /// `sbatch --mem`.
    pub mem: Option<String>,
    /// The submission's name (default: the kind and the time).
    pub name: Option<String>,
    /// Submit (or only write the scripts and workspaces).
    pub submit: bool,
    /// The endless command to shard, without `endless`.
    pub command: Vec<String>,
}

/// A submission, as `slurm/<name>/job.json` holds it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SlurmJob {
    /// Its name.
    pub name: String,
    /// `generate`, `validate` or `eval`.
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

    /// The log of array task `i`.
    pub fn shard_log(&self, i: u32) -> PathBuf {
        self.dir.join("logs").join(format!("shard-{i}.out"))
    }

    /// The merge job's log.
    pub fn merge_log(&self) -> PathBuf {
        self.dir.join("logs").join("merge.out")
    }
}

/// What kind of sharded command `command` is, or why it cannot be sharded.
pub fn command_kind(command: &[String]) -> Result<&'static str> {
    let words: Vec<&str> = command.iter().map(String::as_str).collect();
    let kind = match words.as_slice() {
        ["tasks", "validate", ..] => "validate",
        ["eval", ..] => "eval",
        ["generate", rest @ ..] if rest.contains(&"--offline") => "generate",
        ["generate", ..] => bail!("only offline generation can be sharded: add --offline"),
        [] => bail!("name the command to run after `--`, e.g. `-- tasks validate --all`"),
        _ => bail!(
            "{:?} cannot be sharded: use `tasks validate ...`, `eval ...` or `generate --offline ...`",
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

/// `'s'`, quoted for a POSIX shell.
pub fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// `s` as one argument of an `#SBATCH` line: in double quotes, with `"`
/// and `\` escaped (sbatch's rules; an unquoted `#` or space would end it).
fn sbatch_quote(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', r"\\").replace('"', r#"\""#))
}

/// Refuse `value` (of `what`) when it holds a control character: a
/// newline would start a line of the batch script of its own.
fn no_control(what: &str, value: &str) -> Result<()> {
    if let Some(c) = value.chars().find(|c| c.is_control()) {
        bail!("{what} {value:?}: holds the control character {c:?}, which would break the batch script");
    }
    Ok(())
}

/// Check every value of `req` that goes into the batch scripts, naming
/// the option of one that does not fit.
fn check_request(req: &SubmitRequest) -> Result<()> {
    if let Some(p) = &req.partition {
        let ok = !p.is_empty()
            && p.bytes()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.' | b','));
        if !ok {
            bail!("--partition {p:?}: use letters, digits, '-', '_' and '.' (a list: separated by ',')");
        }
    }
    if let Some(t) = &req.time {
        let unlimited = ["unlimited", "infinite"]
            .iter()
            .any(|u| t.eq_ignore_ascii_case(u));
        let clock = t.starts_with(|c: char| c.is_ascii_digit())
            && t.bytes()
                .all(|c| c.is_ascii_digit() || matches!(c, b':' | b'-'));
        if !unlimited && !clock {
            bail!(
                "--time {t:?}: use Slurm's forms (`MINUTES`, `H:MM:SS`, `D-HH:MM:SS`, `UNLIMITED`)"
            );
        }
    }
    if let Some(m) = &req.mem {
        let digits = m
            .strip_suffix(['K', 'M', 'G', 'T', 'k', 'm', 'g', 't'])
            .unwrap_or(m);
        if digits.is_empty() || !digits.bytes().all(|c| c.is_ascii_digit()) {
            bail!(
                "--mem {m:?}: use a number of megabytes, or one with a unit (`512M`, `8G`, `1T`)"
            );
        }
    }
    if req.cpus == Some(0) {
        bail!("--cpus 0: ask for at least one CPU");
    }
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

/// The `#SBATCH` lines for the resources asked for.
fn resource_lines(req: &SubmitRequest, with_limits: bool) -> String {
    let mut out = String::new();
    if let Some(p) = &req.partition {
        out.push_str(&format!("#SBATCH --partition={p}\n"));
    }
    if with_limits {
        if let Some(t) = &req.time {
            out.push_str(&format!("#SBATCH --time={t}\n"));
        }
        if let Some(c) = req.cpus {
            out.push_str(&format!("#SBATCH --cpus-per-task={c}\n"));
        }
        if let Some(m) = &req.mem {
            out.push_str(&format!("#SBATCH --mem={m}\n"));
        }
    }
    out
}

/// The job array's batch script.
fn array_script(job: &SlurmJob, req: &SubmitRequest, exe: &Path) -> String {
    let n = job.shards;
    let command: Vec<String> = job.command.iter().map(|w| sh_quote(w)).collect();
    format!(
        "#!/bin/bash\n\
         # Written by `endless slurm submit`. Submit with\n\
         #   sbatch --array=0-{last} {script}\n\
         # or re-run shard I alone with `sbatch --array=I {script}`.\n\
         #SBATCH --job-name={name}\n\
         #SBATCH --output={logs}\n\
         {resources}\
         set -uo pipefail\n\
         I=\"${{SLURM_ARRAY_TASK_ID:?submit this script as a job array: sbatch --array=0-{last} {script}}}\"\n\
         {exe} --workspace {dir}/shard-\"$I\" {command} --shard \"$I/{n}\"\n\
         status=$?\n\
         # A shard that recorded its work done succeeded, even when the\n\
         # command reports what it found with its exit status (invalid tasks).\n\
         if [ \"$status\" -ne 0 ] && grep -q '\"done\": true' {dir}/shard-\"$I\"/shard.json 2>/dev/null; then\n\
         \x20 echo \"endless: shard $I/{n} is done (exit status $status: see above)\" >&2\n\
         \x20 status=0\n\
         fi\n\
         exit \"$status\"\n",
        last = n.saturating_sub(1),
        script = sh_quote(&job.array_script().to_string_lossy()),
        name = job.name,
        // `%` is the log name's pattern character: a literal one is `%%`.
        logs = sbatch_quote(&format!(
            "{}/shard-%a.out",
            job.dir.join("logs").to_string_lossy().replace('%', "%%")
        )),
        resources = resource_lines(req, true),
        exe = sh_quote(&exe.to_string_lossy()),
        dir = sh_quote(&job.dir.to_string_lossy()),
        command = command.join(" "),
    )
}

/// The merge job's batch script.
fn merge_script(job: &SlurmJob, req: &SubmitRequest, exe: &Path, main: &Path) -> String {
    format!(
        "#!/bin/bash\n\
         # Written by `endless slurm submit`: merges the shards of job {name}\n\
         # into the main workspace once every array task succeeded.\n\
         #SBATCH --job-name={name}-merge\n\
         #SBATCH --output={log}\n\
         {resources}\
         set -euo pipefail\n\
         exec {exe} --workspace {main} workspace merge {dir}\n",
        name = job.name,
        log = sbatch_quote(&job.merge_log().to_string_lossy().replace('%', "%%")),
        resources = resource_lines(req, false),
        exe = sh_quote(&exe.to_string_lossy()),
        main = sh_quote(&main.to_string_lossy()),
        dir = sh_quote(&job.dir.to_string_lossy()),
    )
}

/// Run `sbatch --parsable ARGS SCRIPT`; returns the job id.
fn sbatch(args: &[String], script: &Path) -> Result<String> {
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

/// Write the shard workspaces and both batch scripts of `req` into
/// `slurm/<name>/`, and submit them (unless `req.submit` is off).
pub fn submit(ctx: &Context, req: &SubmitRequest) -> Result<SlurmJob> {
    let kind = command_kind(&req.command)?;
    check_request(req)?;
    if req.shards == 0 || req.shards > crate::store::MAX_SHARDS {
        bail!("--shards must be 1 to {}", crate::store::MAX_SHARDS);
    }
    let main = ctx.workspace()?;
    let root =
        std::fs::canonicalize(main.root()).with_context(|| format!("{}", main.root().display()))?;
    let name = match &req.name {
        Some(n) => n.clone(),
        None => format!("{kind}-{}", chrono::Utc::now().format("%Y%m%d-%H%M%S")),
    };
    check_name(&name)?;
    let dir = root.join(SLURM_DIR).join(&name);
    no_control("the workspace path", &dir.to_string_lossy())?;
    let exe = std::env::current_exe().context("finding the endless binary")?;
    no_control("the endless binary's path", &exe.to_string_lossy())?;
    // A job written with --no-submit is submitted by the same command
    // without it; one submitted already is not submitted twice.
    if let Some(old) = jobs(ctx, Some(&name))
        .ok()
        .and_then(|j| j.into_iter().next())
    {
        if old.array_job.is_some() {
            bail!(
                "{}: job {name} was submitted already (array {}); pick another --name (`endless slurm status {name}` shows it)",
                dir.display(),
                old.array_job.unwrap_or_default()
            );
        }
        if old.command != req.command || old.shards != req.shards {
            bail!(
                "{}: job {name} was written for another command or shard count; pick another --name",
                dir.display()
            );
        }
    }
    std::fs::create_dir_all(dir.join("logs"))
        .with_context(|| format!("creating {}", dir.display()))?;
    make_shard_workspaces(&main, &dir, req.shards)?;
    let mut job = SlurmJob {
        name,
        kind: kind.to_string(),
        shards: req.shards,
        command: req.command.clone(),
        dir,
        array_job: None,
        merge_job: None,
        created_at: crate::store::now(),
    };
    for (path, text) in [
        (job.array_script(), array_script(&job, req, &exe)),
        (job.merge_script(), merge_script(&job, req, &exe, &root)),
    ] {
        crate::fsutil::write_atomic(&path, text.as_bytes())
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if req.submit {
        let array = sbatch(
            &[format!("--array=0-{}", req.shards - 1)],
            &job.array_script(),
        )?;
        job.array_job = Some(array.clone());
        write_job(&job)?;
        let merge = sbatch(
            &[
                format!("--dependency=afterok:{array}"),
                // A failed shard cancels the merge: re-run the shard,
                // then merge (`slurm status` says how).
                "--kill-on-invalid-dep=yes".into(),
            ],
            &job.merge_script(),
        )?;
        job.merge_job = Some(merge);
    }
    write_job(&job)?;
    Ok(job)
}

fn write_job(job: &SlurmJob) -> Result<()> {
    let path = job.dir.join("job.json");
    let mut json = serde_json::to_vec_pretty(job)?;
    json.push(b'\n');
    crate::fsutil::write_atomic(&path, &json).with_context(|| format!("writing {}", path.display()))
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
        const LIVE: [&str; 7] = [
            "PENDING",
            "RUNNING",
            "CONFIGURING",
            "COMPLETING",
            "REQUEUED",
            "SUSPENDED",
            "NOT SUBMITTED",
        ];
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

/// The state of submission `job`: Slurm's view of its array and merge job,
/// and each shard's record.
pub fn status(job: &SlurmJob) -> Result<JobStatus> {
    let ids: Vec<&str> = [&job.array_job, &job.merge_job]
        .into_iter()
        .flatten()
        .map(String::as_str)
        .collect();
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
        let slurm = job
            .array_job
            .as_ref()
            .and_then(|a| state_of(&format!("{a}_{i}")));
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
            log: job.shard_log(i),
        });
    }
    let merge = match &job.merge_job {
        None => "NOT SUBMITTED".into(),
        Some(m) => state_of(m).unwrap_or_else(|| {
            // Forgotten by Slurm: its log says whether it ran.
            if job.merge_log().is_file() {
                "ENDED (see its log)".into()
            } else {
                "UNKNOWN".into()
            }
        }),
    };
    Ok(JobStatus {
        job: job.clone(),
        shards,
        merge,
        sacct_note,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn only_shardable_commands_without_their_own_shard_are_taken() {
        assert_eq!(
            command_kind(&words("tasks validate --all")).unwrap(),
            "validate"
        );
        assert_eq!(
            command_kind(&words("eval --policy oracle")).unwrap(),
            "eval"
        );
        assert_eq!(
            command_kind(&words("generate --offline --count 8")).unwrap(),
            "generate"
        );
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
    fn states_expand_array_ranges() {
        let s = parse_states("12_[2-4%2]|PENDING\n12_0|RUNNING\n13|PENDING\n12_1|CANCELLED by 0\n");
        let ids: Vec<&str> = s.iter().map(|(i, _)| i.as_str()).collect();
        assert_eq!(ids, ["12_2", "12_3", "12_4", "12_0", "13", "12_1"]);
        assert_eq!(s[5].1, "CANCELLED");
        assert_eq!(sh_quote("it's"), r"'it'\''s'");
    }

    #[test]
    fn scripts_run_each_shard_in_its_workspace_and_merge_after() {
        let job = SlurmJob {
            name: "v1".into(),
            kind: "validate".into(),
            shards: 4,
            command: words("tasks validate --all"),
            dir: "/ws/slurm/v1".into(),
            array_job: None,
            merge_job: None,
            created_at: String::new(),
        };
        let req = SubmitRequest {
            partition: Some("debug".into()),
            time: Some("0:10:00".into()),
            cpus: Some(2),
            mem: Some("1G".into()),
            ..Default::default()
        };
        let array = array_script(&job, &req, Path::new("/bin/endless"));
        assert!(
            array.contains("#SBATCH --output=\"/ws/slurm/v1/logs/shard-%a.out\"\n"),
            "{array}"
        );
        assert!(array.contains("#SBATCH --partition=debug\n#SBATCH --time=0:10:00\n#SBATCH --cpus-per-task=2\n#SBATCH --mem=1G\n"), "{array}");
        assert!(
            array.contains("\n'/bin/endless' --workspace '/ws/slurm/v1'/shard-\"$I\" 'tasks' 'validate' '--all' --shard \"$I/4\"\n"),
            "{array}"
        );
        let merge = merge_script(&job, &req, Path::new("/bin/endless"), Path::new("/ws"));
        assert!(
            merge.contains("exec '/bin/endless' --workspace '/ws' workspace merge '/ws/slurm/v1'"),
            "{merge}"
        );
        assert!(!merge.contains("--time"), "{merge}");
    }

    /// Issue 46: a value with a newline became a line of the script (an
    /// `#SBATCH` directive of the caller's choosing, or a shell command).
    #[test]
    fn option_values_that_would_break_the_script_are_refused_by_option() {
        let ok = SubmitRequest {
            partition: Some("gpu,debug".into()),
            time: Some("1-02:00:00".into()),
            cpus: Some(4),
            mem: Some("8G".into()),
            command: words("tasks validate --all"),
            ..Default::default()
        };
        check_request(&ok).unwrap();
        for time in ["30", "0:10:00", "UNLIMITED"] {
            let r = SubmitRequest {
                time: Some(time.into()),
                ..ok.clone()
            };
            check_request(&r).unwrap();
        }
        let nl = "1\n#SBATCH --uid=0\ntouch /tmp/pwned";
        let bad = [
            (
                SubmitRequest {
                    partition: Some(nl.into()),
                    ..ok.clone()
                },
                "--partition",
            ),
            (
                SubmitRequest {
                    partition: Some("a b".into()),
                    ..ok.clone()
                },
                "--partition",
            ),
            (
                SubmitRequest {
                    time: Some(nl.into()),
                    ..ok.clone()
                },
                "--time",
            ),
            (
                SubmitRequest {
                    time: Some("1:00 #".into()),
                    ..ok.clone()
                },
                "--time",
            ),
            (
                SubmitRequest {
                    mem: Some(nl.into()),
                    ..ok.clone()
                },
                "--mem",
            ),
            (
                SubmitRequest {
                    mem: Some("8GB\r".into()),
                    ..ok.clone()
                },
                "--mem",
            ),
            (
                SubmitRequest {
                    cpus: Some(0),
                    ..ok.clone()
                },
                "--cpus",
            ),
            (
                SubmitRequest {
                    command: vec!["eval".into(), format!("--policy={nl}")],
                    ..ok.clone()
                },
                "the command's word",
            ),
        ];
        for (req, option) in bad {
            let e = check_request(&req).unwrap_err().to_string();
            assert!(e.starts_with(option), "{req:?}: {e}");
        }
        assert!(no_control("the workspace path", "/ws/a\nb").is_err());
        no_control("the workspace path", "/ws/with space/#1").unwrap();
    }

    /// Paths with spaces, quotes, `#` and `%` stay one argument of their
    /// `#SBATCH` line (sbatch's quoting) and one word of the shell's.
    #[test]
    fn odd_workspace_paths_are_quoted_for_sbatch_and_the_shell() {
        let dir = "/ws/my \"runs\" #2 100%/slurm/v1";
        let job = SlurmJob {
            name: "v1".into(),
            kind: "eval".into(),
            shards: 2,
            command: words("eval --policy oracle"),
            dir: dir.into(),
            array_job: None,
            merge_job: None,
            created_at: String::new(),
        };
        let req = SubmitRequest::default();
        let array = array_script(&job, &req, Path::new("/opt/my endless/endless"));
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
        let merge = merge_script(
            &job,
            &req,
            Path::new("/bin/endless"),
            Path::new("/ws/my ws"),
        );
        assert!(
            merge.contains(
                "#SBATCH --output=\"/ws/my \\\"runs\\\" #2 100%%/slurm/v1/logs/merge.out\"\n"
            ),
            "{merge}"
        );
        assert!(
            merge.contains("--workspace '/ws/my ws' workspace merge"),
            "{merge}"
        );
        // Each script is the lines it was written with, and bash reads it.
        for script in [&array, &merge] {
            let sbatch_lines = script.lines().filter(|l| l.starts_with("#SBATCH")).count();
            assert_eq!(sbatch_lines, 2, "{script}");
            let out = Command::new("bash")
                .args(["-n", "-c", script])
                .output()
                .unwrap();
            assert!(out.status.success(), "{script}: {out:?}");
        }
    }
}
