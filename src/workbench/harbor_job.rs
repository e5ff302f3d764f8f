//! Reading what `harbor run` writes: a job directory (`config.json` with
//! the job's name, `result.json`, one directory per trial) or a single
//! trial directory (`config.json`, `result.json` holding the
//! `TrialResult`, `agent/` with the agent's logs and its ATIF
//! `trajectory.json`, `verifier/` with `reward.txt` or `reward.json`,
//! `test-stdout.txt` and `ctrf.json`; Terminus-2 adds an asciinema
//! `agent/recording.cast`), as Harbor 0.26's pydantic models
//! and `TrialPaths` lay them out. Only what endless uses is read;
//! unknown fields are ignored, missing or mistyped ones refused by name.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::Deserialize;

use crate::agent::atif::{read_atif, Trajectory};

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
    /// The step's name (its directory under `steps/`).
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
    /// The agent's ATIF trajectory (`agent/trajectory.json`), when it wrote one.
    pub trajectory: Option<(PathBuf, Trajectory)>,
    /// What the oracle's solution printed (`agent/oracle.txt`).
    pub oracle_log: Option<String>,
    /// The agent's terminal recording (`agent/recording.cast`, asciicast
    /// v2: Terminus-2 records its tmux pane with asciinema).
    pub recording: Option<PathBuf>,
    /// The verifier's output (`verifier/test-stdout.txt`).
    pub test_stdout: Option<String>,
    /// The verifier's per-test report (`verifier/ctrf.json`).
    pub tests: Vec<CtrfTest>,
}

/// A job (or a lone trial) as read from its directory.
#[derive(Debug, Clone)]
pub struct Job {
    /// The job's name (`config.json`'s `job_name`, else the directory's).
    pub name: String,
    /// The directory imported.
    pub dir: PathBuf,
    /// Its trials, by trial name.
    pub trials: Vec<Trial>,
}

fn read_text(path: &Path) -> Result<String, HarborError> {
    std::fs::read_to_string(path).map_err(|source| HarborError::Io {
        path: path.to_path_buf(),
        source,
    })
}

fn optional_text(path: &Path) -> Result<Option<String>, HarborError> {
    match std::fs::read_to_string(path) {
        Ok(t) => Ok(Some(t)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(HarborError::Io {
            path: path.to_path_buf(),
            source,
        }),
    }
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

/// Whether `dir/result.json` is a trial's (it names a `trial_name`).
fn is_trial(dir: &Path) -> bool {
    std::fs::read_to_string(dir.join("result.json"))
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .is_some_and(|v| v.get("trial_name").is_some())
}

/// Read a job directory, or a single trial directory, and every trial in it.
pub fn read_job(dir: &Path) -> Result<Job, HarborError> {
    let not_harbor = |why: &str| HarborError::NotHarbor {
        path: dir.to_path_buf(),
        why: why.into(),
    };
    if !dir.is_dir() {
        return Err(not_harbor("no such directory"));
    }
    let dir_name = dir
        .canonicalize()
        .ok()
        .and_then(|d| d.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "job".into());
    if is_trial(dir) {
        let trial = read_trial(dir)?;
        return Ok(Job {
            name: trial.result.trial_name.clone(),
            dir: dir.to_path_buf(),
            trials: vec![trial],
        });
    }
    let mut trial_dirs: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|source| HarborError::Io {
            path: dir.to_path_buf(),
            source,
        })?
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .map(|e| e.path())
        .collect();
    trial_dirs.sort();
    if trial_dirs.is_empty() {
        return Err(not_harbor(
            "no result.json naming a trial_name, and no trial directories",
        ));
    }
    let config = dir.join("config.json");
    if !config.is_file() && !dir.join("result.json").is_file() {
        return Err(not_harbor("no job config.json or result.json"));
    }
    let name = match optional_text(&config)? {
        Some(text) => {
            #[derive(Deserialize)]
            struct JobConfig {
                job_name: Option<String>,
            }
            parse::<JobConfig>(&config, &text)?.job_name
        }
        None => None,
    }
    .unwrap_or(dir_name);
    let mut trials = Vec::new();
    for d in trial_dirs {
        if !d.join("result.json").is_file() {
            return Err(HarborError::NotHarbor {
                path: d,
                why: "a trial directory without result.json (the trial did not finish)".into(),
            });
        }
        trials.push(read_trial(&d)?);
    }
    trials.sort_by(|a, b| a.result.trial_name.cmp(&b.result.trial_name));
    Ok(Job {
        name,
        dir: dir.to_path_buf(),
        trials,
    })
}

/// Read one trial directory.
pub fn read_trial(dir: &Path) -> Result<Trial, HarborError> {
    let result_path = dir.join("result.json");
    let result: TrialResult = parse(&result_path, &read_text(&result_path)?)?;
    // A multi-step trial keeps each step's logs under `steps/<name>/`;
    // the last step's are the final state.
    let last_step = result
        .step_results
        .as_ref()
        .and_then(|s| s.last())
        .map(|s| dir.join("steps").join(&s.step_name));
    let logs = |sub: &str| {
        let root = dir.join(sub);
        match &last_step {
            Some(step) if !root.is_dir() => step.join(sub),
            _ => root,
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
        let json = verifier.join("reward.json");
        if let Some(text) = optional_text(&json)? {
            rewards = Some(parse(&json, &text)?);
        }
    }
    if rewards.is_none() {
        let txt = verifier.join("reward.txt");
        if let Some(text) = optional_text(&txt)? {
            let value: f64 = text.trim().parse().map_err(|_| HarborError::Field {
                path: txt.clone(),
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
                verifier.join("reward.txt").display()
            ),
        });
    }
    let agent = logs("agent");
    let traj_path = agent.join("trajectory.json");
    let trajectory = if traj_path.is_file() {
        Some((traj_path.clone(), read_atif(&traj_path)?))
    } else {
        None
    };
    let ctrf = verifier.join("ctrf.json");
    let tests = match optional_text(&ctrf)? {
        Some(text) => read_ctrf(&ctrf, &text)?,
        None => Vec::new(),
    };
    Ok(Trial {
        dir: dir.to_path_buf(),
        rewards,
        trajectory,
        oracle_log: optional_text(&agent.join("oracle.txt"))?,
        recording: Some(agent.join("recording.cast")).filter(|p| p.is_file()),
        test_stdout: optional_text(&verifier.join("test-stdout.txt"))?,
        tests,
        result,
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
