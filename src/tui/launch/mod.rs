//! What the Jobs view can launch: a [`JobSpec`] per launch form (with the
//! forms' [`JobDefaults`]), and the TUI's side of the evaluation ([`eval`]:
//! live panes, takeover) and training ([`train`]: the form as a request,
//! events as job progress) jobs. Each job is a `crate::workbench` use case;
//! `runtime::launcher` runs it on a job thread.

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
            JobSpec::Validate { tasks } => serde_json::json!({ "tasks": tasks }),
            JobSpec::Generate {
                url,
                model,
                count,
                solutions,
            } => serde_json::json!({
                "url": url, "model": model, "count": count, "solutions": solutions,
            }),
            JobSpec::Offline { count, seed } => serde_json::json!({ "count": count, "seed": seed }),
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
