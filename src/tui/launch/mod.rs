//! What the Jobs view can launch: a [`JobSpec`] per launch form (with the
//! forms' [`JobDefaults`]), and the TUI's side of the evaluation ([`eval`]:
//! live panes, takeover) and training ([`train`]: the form as a request,
//! events as job progress) jobs. Each job is a `crate::workbench` use case;
//! `runtime::launcher` runs it on a job thread.

pub mod audit;
pub mod eval;
pub mod train;

pub use train::TrainSpec;

/// What to launch, with the values of its form.
#[derive(Debug, Clone, PartialEq)]
pub enum JobSpec {
    /// Episodes of `policy` on the selected tasks (see [`eval`]).
    Eval {
        /// The policy spec.
        policy: String,
        /// Comma-separated ids or `*` globs; empty: all but rejected/archived.
        tasks: String,
        /// Samples per task.
        samples: u32,
        /// Turn limit (`None`: each task's own).
        max_turns: Option<u32>,
        /// Episodes in flight at once.
        concurrency: usize,
    },
    /// Audit tasks (`endless tasks audit`; see [`audit`]).
    Audit {
        /// Comma-separated ids or `*` globs; empty or `all`: every task.
        tasks: String,
        /// Comma-separated check names; empty or `all`: every check.
        checks: String,
        /// Tasks audited at once.
        concurrency: usize,
    },
    /// Repair tasks through the generator (`endless tasks repair`; see
    /// [`crate::workbench::repair`]).
    Repair {
        /// The task ids.
        tasks: Vec<String>,
        /// The generator's OpenAI-compatible server.
        url: String,
        /// The generator (and solver) model.
        model: String,
        /// Solver attempts per revision.
        solutions: u32,
    },
    /// Validate tasks.
    Validate {
        /// The task ids (empty: every task).
        tasks: Vec<String>,
    },
    /// The LLM generation pipeline (`endless generate --llm`).
    Generate {
        /// The generator's OpenAI-compatible server.
        url: String,
        /// The generator (and solver) model.
        model: String,
        /// Candidates to sample.
        count: usize,
        /// Solver attempts per candidate.
        solutions: u32,
    },
    /// Offline (procedural) generation (`endless generate --offline`).
    Offline {
        /// Tasks to generate.
        count: usize,
        /// The seed.
        seed: u64,
        /// Draw from the train or the held-out dev split (`None`: both).
        split: Option<crate::procgen::Split>,
        /// Just these families (empty: every usable one).
        families: Vec<String>,
    },
    /// A training run (`endless train`; see [`train`]).
    Train(TrainSpec),
    /// Fork a recorded episode: re-run its commands before `at_step` in a
    /// fresh sandbox (watched live, can be taken over), then `policy`.
    Fork {
        /// The parent: `RUN/TASK/SAMPLE`.
        parent: String,
        /// Its task.
        task: String,
        /// The step (0-based) the policy takes over at.
        at_step: usize,
        /// The policy that goes on.
        policy: String,
    },
}

impl JobSpec {
    /// The job kind journalled in the workspace.
    pub fn kind(&self) -> &'static str {
        match self {
            JobSpec::Eval { .. } => "eval",
            JobSpec::Audit { .. } => "audit",
            JobSpec::Repair { .. } => "repair",
            JobSpec::Validate { .. } => "validate",
            JobSpec::Generate { .. } => "generate",
            JobSpec::Offline { .. } => "generate-offline",
            JobSpec::Train(_) => "train",
            JobSpec::Fork { .. } => "fork",
        }
    }

    /// The form's values, journalled with the job.
    pub fn params(&self) -> serde_json::Value {
        match self {
            JobSpec::Eval {
                policy,
                tasks,
                samples,
                max_turns,
                concurrency,
            } => serde_json::json!({
                "policy": policy, "tasks": tasks, "samples": samples,
                "max_turns": max_turns, "concurrency": concurrency,
            }),
            JobSpec::Audit {
                tasks,
                checks,
                concurrency,
            } => serde_json::json!({
                "tasks": tasks, "checks": checks, "concurrency": concurrency,
            }),
            JobSpec::Repair {
                tasks,
                url,
                model,
                solutions,
            } => serde_json::json!({
                "tasks": tasks, "url": url, "model": model, "solutions": solutions,
            }),
            JobSpec::Validate { tasks } => serde_json::json!({ "tasks": tasks }),
            JobSpec::Generate {
                url,
                model,
                count,
                solutions,
            } => serde_json::json!({
                "url": url, "model": model, "count": count, "solutions": solutions,
            }),
            JobSpec::Offline {
                count,
                seed,
                split,
                families,
            } => serde_json::json!({
                "count": count, "seed": seed, "split": split.map(split_name),
                "families": families,
            }),
            JobSpec::Train(spec) => spec.params(),
            JobSpec::Fork {
                parent,
                task,
                at_step,
                policy,
            } => serde_json::json!({
                "parent": parent, "task": task, "at_step": at_step, "policy": policy,
            }),
        }
    }
}

impl JobSpec {
    /// The job a journalled job of `kind` with `params` (as [`JobSpec::params`]
    /// wrote them) runs again: an evaluation re-run is the same run, so it
    /// resumes (episodes already recorded are kept), and so does a training
    /// run in the same run directory (from its newest checkpoint). Why not, for a job
    /// that cannot be run again this way.
    pub fn from_params(kind: &str, params: &serde_json::Value) -> Result<JobSpec, String> {
        let text = |k: &str| -> Result<String, String> {
            params
                .get(k)
                .and_then(|v| v.as_str())
                .map(String::from)
                .ok_or_else(|| format!("the journal's {kind} job has no {k:?} parameter"))
        };
        let num = |k: &str| -> Result<u64, String> {
            params.get(k).and_then(|v| v.as_u64()).ok_or_else(|| {
                format!("the journal's {kind} job has no whole-number {k:?} parameter")
            })
        };
        // A list of strings (none when absent).
        let strings = |k: &str| -> Vec<String> {
            params
                .get(k)
                .and_then(|v| v.as_array())
                .map(|a| {
                    a.iter()
                        .filter_map(|t| t.as_str().map(String::from))
                        .collect()
                })
                .unwrap_or_default()
        };
        let small = |k: &str| -> Result<u32, String> {
            u32::try_from(num(k)?).map_err(|_| format!("{kind} job: {k:?} is out of range"))
        };
        Ok(match kind {
            "eval" => JobSpec::Eval {
                policy: text("policy")?,
                tasks: text("tasks")?,
                samples: small("samples")?,
                max_turns: match params.get("max_turns") {
                    None | Some(serde_json::Value::Null) => None,
                    Some(_) => Some(small("max_turns")?),
                },
                concurrency: num("concurrency")? as usize,
            },
            "audit" => JobSpec::Audit {
                tasks: text("tasks")?,
                checks: text("checks")?,
                concurrency: num("concurrency")? as usize,
            },
            "validate" => JobSpec::Validate {
                tasks: strings("tasks"),
            },
            "repair" => JobSpec::Repair {
                tasks: strings("tasks"),
                url: text("url")?,
                model: text("model")?,
                solutions: small("solutions")?,
            },
            "generate" => JobSpec::Generate {
                url: text("url")?,
                model: text("model")?,
                count: num("count")? as usize,
                solutions: small("solutions")?,
            },
            "generate-offline" => JobSpec::Offline {
                count: num("count")? as usize,
                seed: num("seed")?,
                split: match params.get("split").and_then(|v| v.as_str()) {
                    None => None,
                    Some(s) => Some(parse_split(s)?),
                },
                families: params
                    .get("families")
                    .and_then(|v| v.as_array())
                    .map(|a| {
                        a.iter()
                            .filter_map(|t| t.as_str().map(String::from))
                            .collect()
                    })
                    .unwrap_or_default(),
            },
            "fork" => JobSpec::Fork {
                parent: text("parent")?,
                task: text("task")?,
                at_step: num("at_step")? as usize,
                policy: text("policy")?,
            },
            "train" => JobSpec::Train(TrainSpec::from_params(params)?),
            other => return Err(format!("a {other} job cannot be run again from here")),
        })
    }
}

/// The name of a procedural split, as the offline form and the journal
/// write it.
pub fn split_name(split: crate::procgen::Split) -> &'static str {
    match split {
        crate::procgen::Split::Train => "train",
        crate::procgen::Split::Dev => "dev",
    }
}

/// A split by name (`train`, `dev`).
pub fn parse_split(name: &str) -> Result<crate::procgen::Split, String> {
    match name.trim().to_ascii_lowercase().as_str() {
        "train" => Ok(crate::procgen::Split::Train),
        "dev" => Ok(crate::procgen::Split::Dev),
        other => Err(format!(
            "expected train or dev (empty: both), got {other:?}"
        )),
    }
}

/// Defaults of the launch forms, from the configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct JobDefaults {
    /// The evaluation form's policy.
    pub policy: String,
    /// Samples per task.
    pub samples: u32,
    /// Episodes in flight at once.
    pub concurrency: usize,
    /// The LLM generation form's server (`[llm] url`).
    pub llm_url: String,
    /// Its generator model (`[llm] model`).
    pub llm_model: String,
    /// Solver attempts per candidate (`[generate] solutions`).
    pub solutions: u32,
    /// Tasks (or candidates) to generate.
    pub count: usize,
    /// The offline form's seed: the first whose batch is new to the
    /// workspace, once known.
    pub offline_seed: u64,
}

impl Default for JobDefaults {
    fn default() -> Self {
        JobDefaults {
            policy: "oracle".into(),
            samples: 1,
            concurrency: 2,
            llm_url: "http://localhost:8000/v1".into(),
            llm_model: String::new(),
            solutions: 16,
            count: 10,
            offline_seed: 1,
        }
    }
}

impl JobDefaults {
    /// Defaults from the `[llm]` and `[generate]` sections.
    pub fn from_config(config: &crate::config::Config) -> JobDefaults {
        JobDefaults {
            llm_url: config.llm.url.clone(),
            llm_model: config.llm.model.clone(),
            solutions: config.generate.solutions,
            ..JobDefaults::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{JobSpec, TrainSpec};

    #[test]
    fn a_journalled_job_runs_again_with_its_own_parameters() {
        let specs = [
            JobSpec::Eval {
                policy: "oracle".into(),
                tasks: "up*".into(),
                samples: 2,
                max_turns: Some(5),
                concurrency: 3,
            },
            JobSpec::Eval {
                policy: "oracle".into(),
                tasks: String::new(),
                samples: 1,
                max_turns: None,
                concurrency: 1,
            },
            JobSpec::Validate {
                tasks: vec!["a".into()],
            },
            JobSpec::Audit {
                tasks: "up*".into(),
                checks: "flaky,weak-tests".into(),
                concurrency: 2,
            },
            JobSpec::Offline {
                count: 4,
                seed: 9,
                split: None,
                families: Vec::new(),
            },
            JobSpec::Offline {
                count: 4,
                seed: 9,
                split: Some(crate::procgen::Split::Dev),
                families: vec!["log-archive".into()],
            },
            JobSpec::Fork {
                parent: "eval-1/t/0".into(),
                task: "t".into(),
                at_step: 1,
                policy: "oracle".into(),
            },
            JobSpec::Repair {
                tasks: vec!["a".into(), "b".into()],
                url: "http://localhost:8000/v1".into(),
                model: "m".into(),
                solutions: 2,
            },
        ];
        for spec in specs {
            let mut params = spec.params();
            // The run id the job was shown by is journalled beside them.
            params["run"] = "eval-abc".into();
            assert_eq!(JobSpec::from_params(spec.kind(), &params), Ok(spec));
        }
        let err =
            JobSpec::from_params("eval", &serde_json::json!({"policy": "oracle"})).unwrap_err();
        assert!(err.contains("\"tasks\""), "{err}");
        // A training job's values, an older journal's missing ones taken
        // from the form's defaults.
        let train = TrainSpec {
            tasks: "a-*".into(),
            minutes: Some(1.5),
            lora: Some(4),
            kl_coef: Some(0.1),
            out: "checkpoints/job-7".into(),
            ..TrainSpec::default()
        };
        let spec = JobSpec::Train(train.clone());
        assert_eq!(JobSpec::from_params("train", &spec.params()), Ok(spec));
        assert_eq!(
            JobSpec::from_params("train", &serde_json::json!({"steps": 3})),
            Ok(JobSpec::Train(TrainSpec {
                steps: 3,
                ..TrainSpec::default()
            }))
        );
        let err = JobSpec::from_params("train", &serde_json::json!({"steps": "x"})).unwrap_err();
        assert!(err.contains("\"steps\""), "{err}");
    }
}
