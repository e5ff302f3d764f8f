//! Reading what `harbor run` writes: a job directory (`config.json` with
//! the job's name, `result.json`, one directory per trial) or a single
//! trial directory (`config.json`, `result.json` holding the
//! `TrialResult`, `agent/` with the agent's logs and its ATIF
//! `trajectory.json`, `verifier/` with `reward.txt` or `reward.json`,
//! `test-stdout.txt` and `ctrf.json`; Terminus-2 adds an asciinema
//! `agent/recording.cast`), as Harbor 0.26's pydantic models
//! and `TrialPaths` lay them out. Only what endless uses is read;
//! unknown fields are ignored, missing or mistyped ones refused by name.
//!
//! A job directory may be another user's, or written by an agent whose
//! `/logs/agent` was bound to its trial directory: it is opened once and
//! every file is read beneath its descriptor ([`BundleDir`]), regular
//! files only, each within a size limit; a link that leads out of the job
//! directory, a FIFO or a device is refused with an error naming it, and
//! a `step_name` that is not one plain file name is refused by field.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::Deserialize;

use crate::agent::atif::{parse_atif, Trajectory};
use crate::task::{BundleDir, ReadLimits, SafeReadError};

/// The largest JSON or text file of a trial read, in bytes.
const MAX_FILE_BYTES: u64 = 16 * 1024 * 1024;

/// The largest trajectory or terminal recording read, in bytes.
const MAX_LOG_BYTES: u64 = 256 * 1024 * 1024;

/// Why a directory could not be read as Harbor output.
#[derive(Debug, thiserror::Error)]
pub enum HarborError {
    /// A file could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A file lacks a field, has one of the wrong type, or is not JSON.
    #[error("{path}: field `{field}`: {why}")]
    Field {
        /// The file.
        path: PathBuf,
        /// The field (a JSON path), or `.` for the whole document.
        field: String,
        /// What is wrong.
        why: String,
    },
    /// The directory is neither a job nor a trial directory.
    #[error("{path}: not a Harbor job or trial directory: {why}")]
    NotHarbor {
        /// The directory.
        path: PathBuf,
        /// What was missing.
        why: String,
    },
    /// A trial has no reward and no error saying why.
    #[error("{path}: missing reward: {why}")]
    NoReward {
        /// The trial's `result.json`.
        path: PathBuf,
        /// Where it was looked for.
        why: String,
    },
    /// The trial's ATIF trajectory is malformed.
    #[error(transparent)]
    Atif(#[from] crate::agent::atif::AtifError),
    /// A symbolic link in the job directory leads out of it.
    #[error("{path}: symbolic link points outside the Harbor job directory ({target}); refusing to read it")]
    EscapingLink {
        /// The path read through the link.
        path: PathBuf,
        /// Where the link points.
        target: PathBuf,
    },
    /// A file of the job directory is not a regular file, is over its
    /// size limit, or changed while it was read.
    #[error(transparent)]
    Read(SafeReadError),
}

impl From<SafeReadError> for HarborError {
    fn from(e: SafeReadError) -> Self {
        match e {
            SafeReadError::EscapingLink { path, target } => Self::EscapingLink { path, target },
            other => Self::Read(other),
        }
    }
}

/// `TrialResult.agent_info`.
#[derive(Debug, Clone, Deserialize)]
pub struct AgentInfo {
    /// The agent (`oracle`, `nop`, `terminus-2`, ...).
    pub name: String,
    /// Its version.
    pub version: String,
    /// The model it used.
    #[serde(default)]
    pub model_info: Option<ModelInfo>,
}

/// `AgentInfo.model_info`.
#[derive(Debug, Clone, Deserialize)]
pub struct ModelInfo {
    /// The model's name.
    pub name: String,
    /// Its provider.
    #[serde(default)]
    pub provider: Option<String>,
}

/// `TrialResult.agent_result` (`AgentContext`).
#[derive(Debug, Clone, Default, Deserialize)]
pub struct AgentContext {
    /// Input tokens, cache included.
    #[serde(default)]
    pub n_input_tokens: Option<u64>,
    /// Output tokens.
    #[serde(default)]
    pub n_output_tokens: Option<u64>,
}

/// `TrialResult.verifier_result`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct VerifierResult {
    /// Rewards by name (`reward` for `reward.txt`).
    #[serde(default)]
    pub rewards: Option<BTreeMap<String, f64>>,
}

/// `TrialResult.exception_info`.
#[derive(Debug, Clone, Deserialize)]
pub struct ExceptionInfo {
    /// The exception's class (`AgentTimeoutError`, ...).
    pub exception_type: String,
    /// Its message.
    pub exception_message: String,
}

/// A phase's `TimingInfo`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct TimingInfo {
    /// ISO 8601.
    #[serde(default)]
    pub started_at: Option<String>,
    /// ISO 8601.
    #[serde(default)]
    pub finished_at: Option<String>,
}

impl TimingInfo {
    /// Seconds from start to finish, when both are known.
    pub fn secs(&self) -> Option<f64> {
        span(self.started_at.as_deref()?, self.finished_at.as_deref()?)
    }
}

/// Seconds between two ISO 8601 times (with or without an offset).
pub fn span(start: &str, end: &str) -> Option<f64> {
    let parse = |s: &str| {
        chrono::DateTime::parse_from_rfc3339(s)
            .map(|t| t.naive_utc())
            .or_else(|_| s.parse::<chrono::NaiveDateTime>())
            .ok()
    };
    let d = parse(end)? - parse(start)?;
    Some(d.num_milliseconds() as f64 / 1000.0)
}

/// One step of a multi-step trial (`StepResult`).
#[derive(Debug, Clone, Deserialize)]
pub struct StepResult {
    /// The step's name (its directory under `steps/`: one plain file
    /// name, checked when the trial is read).
    pub step_name: String,
    /// Its verifier's rewards.
    #[serde(default)]
    pub verifier_result: Option<VerifierResult>,
}

/// A trial's `result.json` (`TrialResult`), the fields endless uses.
#[derive(Debug, Clone, Deserialize)]
pub struct TrialResult {
    /// The task's name.
    pub task_name: String,
    /// The trial's name (its directory).
    pub trial_name: String,
    /// The dataset the task came from.
    #[serde(default)]
    pub source: Option<String>,
    /// The agent.
    pub agent_info: AgentInfo,
    /// Its token counts.
    #[serde(default)]
    pub agent_result: Option<AgentContext>,
    /// The rewards.
    #[serde(default)]
    pub verifier_result: Option<VerifierResult>,
    /// What failed, if something did.
    #[serde(default)]
    pub exception_info: Option<ExceptionInfo>,
    /// When the trial started.
    #[serde(default)]
    pub started_at: Option<String>,
    /// When it finished.
    #[serde(default)]
    pub finished_at: Option<String>,
    /// Starting the environment.
    #[serde(default)]
    pub environment_setup: Option<TimingInfo>,
    /// The agent's run.
    #[serde(default)]
    pub agent_execution: Option<TimingInfo>,
    /// The verifier's run.
    #[serde(default)]
    pub verifier: Option<TimingInfo>,
    /// The steps of a multi-step trial.
    #[serde(default)]
    pub step_results: Option<Vec<StepResult>>,
}

/// One test of the verifier's CTRF report (`verifier/ctrf.json`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CtrfTest {
    /// The test's name.
    pub name: String,
    /// `passed`, `failed`, `skipped`, ...
    pub status: String,
    /// The failure message.
    pub message: Option<String>,
}

/// One trial as read from its directory.
#[derive(Debug, Clone)]
pub struct Trial {
    /// The trial directory.
    pub dir: PathBuf,
    /// Its `result.json`.
    pub result: TrialResult,
    /// Its rewards: `result.json`'s, else `verifier/reward.json`'s or
    /// `reward.txt`'s; `None` when the verifier did not run.
    pub rewards: Option<BTreeMap<String, f64>>,
    /// The agent's ATIF trajectory (`agent/trajectory.json`), when it
    /// wrote one (its bytes: [`Job::trajectory_bytes`]).
    pub trajectory: Option<Trajectory>,
    /// What the oracle's solution printed (`agent/oracle.txt`).
    pub oracle_log: Option<String>,
    /// The verifier's output (`verifier/test-stdout.txt`).
    pub test_stdout: Option<String>,
    /// The verifier's per-test report (`verifier/ctrf.json`).
    pub tests: Vec<CtrfTest>,
    /// Its agent log directory, relative to the job directory.
    agent: String,
}

/// A job (or a lone trial) as read from its directory.
#[derive(Debug)]
pub struct Job {
    /// The job's name (`config.json`'s `job_name`, else the directory's).
    pub name: String,
    /// The directory imported.
    pub dir: PathBuf,
    /// Its trials, by trial name.
    pub trials: Vec<Trial>,
    /// Trial directories left out because their trial did not finish (no
    /// `result.json`; only when asked, see [`read_job`]).
    pub unfinished: Vec<String>,
    /// The job directory, open: the large files are read from it when
    /// they are copied.
    root: BundleDir,
}

impl Job {
    /// The bytes of `trial`'s ATIF trajectory (`None` when it has none),
    /// read beneath the job directory.
    pub fn trajectory_bytes(&self, trial: &Trial) -> Result<Option<Vec<u8>>, HarborError> {
        if trial.trajectory.is_none() {
            return Ok(None);
        }
        read_bytes(
            &self.root,
            &join(&trial.agent, "trajectory.json"),
            MAX_LOG_BYTES,
        )
    }

    /// The agent's terminal recording of `trial` (`agent/recording.cast`,
    /// asciicast v2: Terminus-2 records its tmux pane with asciinema),
    /// read beneath the job directory; `None` when it made none.
    pub fn recording(&self, trial: &Trial) -> Result<Option<Vec<u8>>, HarborError> {
        read_bytes(
            &self.root,
            &join(&trial.agent, "recording.cast"),
            MAX_LOG_BYTES,
        )
    }
}

/// `a/b`, or `b` when `a` is the job directory itself (`""`).
fn join(a: &str, b: &str) -> String {
    if a.is_empty() {
        b.to_string()
    } else {
        format!("{a}/{b}")
    }
}

/// The regular file `rel` beneath `root`, within `limit` bytes; `None`
/// when there is none.
fn read_bytes(root: &BundleDir, rel: &str, limit: u64) -> Result<Option<Vec<u8>>, HarborError> {
    let limits = ReadLimits {
        max_file_bytes: limit,
        ..ReadLimits::default()
    };
    Ok(root.read_file(rel, &limits)?.map(|e| e.bytes))
}

/// The UTF-8 file `rel` beneath `root` (`None` when there is none).
fn optional_text(root: &BundleDir, rel: &str) -> Result<Option<String>, HarborError> {
    let Some(bytes) = read_bytes(root, rel, MAX_FILE_BYTES)? else {
        return Ok(None);
    };
    String::from_utf8(bytes)
        .map(Some)
        .map_err(|_| HarborError::Io {
            path: root.shown(rel),
            source: std::io::Error::new(std::io::ErrorKind::InvalidData, "not UTF-8 text"),
        })
}

/// Whether `rel` beneath `root` is a real directory (no link on the way).
fn is_dir(root: &BundleDir, rel: &str) -> bool {
    root.open_subdir(Path::new(rel)).is_ok()
}

/// Whether `name` is one plain file name (no `/`, not `.` or `..`).
fn plain_name(name: &str) -> bool {
    !name.is_empty() && name != "." && name != ".." && !name.contains(['/', '\0'])
}

/// Parse JSON `text` of `path` as `T`, naming the offending field.
fn parse<T: DeserializeOwned>(path: &Path, text: &str) -> Result<T, HarborError> {
    let de = &mut serde_json::Deserializer::from_str(text);
    serde_path_to_error::deserialize(de).map_err(|e| HarborError::Field {
        path: path.to_path_buf(),
        field: e.path().to_string(),
        why: e.inner().to_string(),
    })
}

/// Whether `rel/result.json` beneath `root` is a trial's (it names a `trial_name`).
fn is_trial(root: &BundleDir, rel: &str) -> bool {
    optional_text(root, &join(rel, "result.json"))
        .ok()
        .flatten()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .is_some_and(|v| v.get("trial_name").is_some())
}

/// Read a job directory, or a single trial directory, and every trial in
/// it, beneath its descriptor (see the module docs). A trial directory
/// without `result.json` (a trial that did not finish) is an error, or,
/// with `skip_unfinished`, left out and named in [`Job::unfinished`].
pub fn read_job(dir: &Path, skip_unfinished: bool) -> Result<Job, HarborError> {
    let not_harbor = |why: &str| HarborError::NotHarbor {
        path: dir.to_path_buf(),
        why: why.into(),
    };
    if !dir.is_dir() {
        return Err(not_harbor("no such directory"));
    }
    let root = BundleDir::open(dir)?;
    let dir_name = dir
        .canonicalize()
        .ok()
        .and_then(|d| d.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "job".into());
    if is_trial(&root, "") {
        let trial = read_trial(&root, "")?;
        return Ok(Job {
            name: trial.result.trial_name.clone(),
            dir: dir.to_path_buf(),
            trials: vec![trial],
            unfinished: Vec::new(),
            root,
        });
    }
    let trial_dirs: Vec<String> = root
        .subdirs()?
        .into_iter()
        .map(|n| n.to_string_lossy().into_owned())
        .filter(|n| !n.starts_with('.'))
        .collect();
    if trial_dirs.is_empty() {
        return Err(not_harbor(
            "no result.json naming a trial_name, and no trial directories",
        ));
    }
    if !root.is_file("config.json") && !root.is_file("result.json") {
        return Err(not_harbor("no job config.json or result.json"));
    }
    let name = match optional_text(&root, "config.json")? {
        Some(text) => {
            #[derive(Deserialize)]
            struct JobConfig {
                job_name: Option<String>,
            }
            parse::<JobConfig>(&root.shown("config.json"), &text)?.job_name
        }
        None => None,
    }
    .unwrap_or(dir_name);
    let mut trials = Vec::new();
    let mut unfinished = Vec::new();
    for d in trial_dirs {
        if !root.is_file(&join(&d, "result.json")) {
            if skip_unfinished {
                unfinished.push(d);
                continue;
            }
            return Err(HarborError::NotHarbor {
                path: root.shown(&d),
                why: "a trial directory without result.json (the trial did not finish; \
                      --skip-unfinished imports the others)"
                    .into(),
            });
        }
        trials.push(read_trial(&root, &d)?);
    }
    if trials.is_empty() {
        return Err(not_harbor("no finished trial"));
    }
    trials.sort_by(|a, b| a.result.trial_name.cmp(&b.result.trial_name));
    unfinished.sort();
    Ok(Job {
        name,
        dir: dir.to_path_buf(),
        trials,
        unfinished,
        root,
    })
}

/// Read the trial directory `rel` beneath the job directory `root` (`""`:
/// the job directory is the trial).
fn read_trial(root: &BundleDir, rel: &str) -> Result<Trial, HarborError> {
    let result_rel = join(rel, "result.json");
    let result_path = root.shown(&result_rel);
    let text = optional_text(root, &result_rel)?.ok_or_else(|| HarborError::Io {
        path: result_path.clone(),
        source: std::io::ErrorKind::NotFound.into(),
    })?;
    let result: TrialResult = parse(&result_path, &text)?;
    for (i, step) in result.step_results.iter().flatten().enumerate() {
        if !plain_name(&step.step_name) {
            return Err(HarborError::Field {
                path: result_path,
                field: format!("step_results[{i}].step_name"),
                why: format!("{:?} is not one plain file name", step.step_name),
            });
        }
    }
    // A multi-step trial keeps each step's logs under `steps/<name>/`;
    // the last step's are the final state.
    let last_step = result
        .step_results
        .as_ref()
        .and_then(|s| s.last())
        .map(|s| join(rel, &format!("steps/{}", s.step_name)));
    let logs = |sub: &str| {
        let own = join(rel, sub);
        match &last_step {
            Some(step) if !is_dir(root, &own) => join(step, sub),
            _ => own,
        }
    };
    let verifier = logs("verifier");
    let mut rewards = result
        .verifier_result
        .as_ref()
        .and_then(|v| v.rewards.clone())
        .or_else(|| {
            let steps = result.step_results.as_deref().unwrap_or_default();
            steps
                .iter()
                .rev()
                .find_map(|s| s.verifier_result.as_ref()?.rewards.clone())
        });
    if rewards.is_none() {
        let json = join(&verifier, "reward.json");
        if let Some(text) = optional_text(root, &json)? {
            rewards = Some(parse(&root.shown(&json), &text)?);
        }
    }
    if rewards.is_none() {
        let txt = join(&verifier, "reward.txt");
        if let Some(text) = optional_text(root, &txt)? {
            let value: f64 = text.trim().parse().map_err(|_| HarborError::Field {
                path: root.shown(&txt),
                field: ".".into(),
                why: format!("{:?} is not a number", text.trim()),
            })?;
            rewards = Some(BTreeMap::from([("reward".to_string(), value)]));
        }
    }
    if rewards.is_none() && result.exception_info.is_none() {
        return Err(HarborError::NoReward {
            path: result_path,
            why: format!(
                "no verifier_result.rewards, no {} or reward.json, and no exception_info saying why",
                root.shown(&join(&verifier, "reward.txt")).display()
            ),
        });
    }
    let agent = logs("agent");
    let traj = join(&agent, "trajectory.json");
    let trajectory = match read_bytes(root, &traj, MAX_LOG_BYTES)? {
        Some(bytes) => {
            let text = String::from_utf8_lossy(&bytes);
            Some(parse_atif(&root.shown(&traj), &text)?)
        }
        None => None,
    };
    let ctrf = join(&verifier, "ctrf.json");
    let tests = match optional_text(root, &ctrf)? {
        Some(text) => read_ctrf(&root.shown(&ctrf), &text)?,
        None => Vec::new(),
    };
    Ok(Trial {
        dir: root.shown(rel),
        rewards,
        trajectory,
        oracle_log: optional_text(root, &join(&agent, "oracle.txt"))?,
        test_stdout: optional_text(root, &join(&verifier, "test-stdout.txt"))?,
        tests,
        result,
        agent,
    })
}

/// The tests of a CTRF report (`{"results": {"tests": [{"name", "status", "message"}]}}`).
fn read_ctrf(path: &Path, text: &str) -> Result<Vec<CtrfTest>, HarborError> {
    #[derive(Deserialize)]
    struct Report {
        results: Results,
    }
    #[derive(Deserialize)]
    struct Results {
        tests: Vec<Test>,
    }
    #[derive(Deserialize)]
    struct Test {
        name: String,
        status: String,
        #[serde(default)]
        message: Option<String>,
    }
    let report: Report = parse(path, text)?;
    Ok(report
        .results
        .tests
        .into_iter()
        .map(|t| CtrfTest {
            name: t.name,
            status: t.status,
            message: t.message,
        })
        .collect())
}
