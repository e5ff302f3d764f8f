//! The training job: `endless train` as a background job. The form's values
//! become the same [`TrainRequest`] the CLI builds from its flags (what the
//! form does not ask for keeps the CLI's default), [`options`] resolves it,
//! and [`crate::workbench::train()`] runs it (the job's cancel flag stops
//! the run at its next checkpoint); its events become job progress and log
//! lines.

use std::path::Path;

use crate::jobs::JobContext;
use crate::rl::run_files::{EvalRecord, RunStatus};
use crate::rl::session::{TrainEvent, TrainSummary};
use crate::rl::RecipeFlags;
use crate::tui::widgets::num::num;
use crate::workbench::{train, train_options as options, Context, TrainRequest};

/// The training form's values.
#[derive(Debug, Clone, PartialEq)]
pub struct TrainSpec {
    /// Training tasks: ids or globs (empty: every train-split task).
    pub tasks: String,
    /// Held-out tasks for pass@1 before and after (empty: none).
    pub dev: String,
    /// Initial policy (`tiny`, `smollm2`, a model directory, a `.gguf`).
    pub init: String,
    /// Supervised warm-start first.
    pub sft: bool,
    /// Supervised warm-start steps (with `sft`).
    pub sft_steps: u64,
    /// PPO steps.
    pub steps: u64,
    /// Stop PPO after this many minutes.
    pub minutes: Option<f64>,
    /// Samples per task.
    pub samples: u32,
    /// Turn limit per episode.
    pub max_turns: u32,
    /// Tasks per PPO step.
    pub tasks_per_step: usize,
    /// LoRA rank (`None`: train every weight).
    pub lora: Option<usize>,
    /// Weight of the KL penalty to the policy PPO starts from (`None`: the
    /// configuration's `[train] kl_coef`).
    pub kl_coef: Option<f64>,
    /// The run directory (empty: `<workspace>/checkpoints/<job id>`; a
    /// relative path is under the workspace). A run started again in the
    /// same one resumes from its newest checkpoint.
    pub out: String,
}

impl Default for TrainSpec {
    /// The CLI's defaults, with the SFT warm-start on (a `tiny` policy
    /// trained from scratch solves nothing without it).
    fn default() -> Self {
        TrainSpec {
            tasks: String::new(),
            dev: String::new(),
            init: "tiny".into(),
            sft: true,
            sft_steps: 300,
            steps: 10,
            minutes: None,
            samples: 16,
            max_turns: 16,
            tasks_per_step: 1,
            lora: None,
            kl_coef: None,
            out: String::new(),
        }
    }
}

impl TrainSpec {
    /// The `endless train` arguments (without the program name).
    pub fn argv(&self) -> Vec<String> {
        let mut v: Vec<String> = vec!["train".into()];
        let mut flag = |name: &str, value: String| {
            v.push(format!("--{name}"));
            v.push(value);
        };
        if !self.tasks.is_empty() {
            flag("tasks", self.tasks.clone());
        }
        if !self.dev.is_empty() {
            flag("dev", self.dev.clone());
        }
        flag("init", self.init.clone());
        if self.sft {
            flag("sft-steps", self.sft_steps.to_string());
        }
        flag("steps", self.steps.to_string());
        if let Some(m) = self.minutes {
            flag("minutes", m.to_string());
        }
        flag("samples", self.samples.to_string());
        flag("max-turns", self.max_turns.to_string());
        flag("tasks-per-step", self.tasks_per_step.to_string());
        if let Some(r) = self.lora {
            flag("lora", r.to_string());
        }
        if let Some(k) = self.kl_coef {
            flag("kl-coef", k.to_string());
        }
        if !self.out.is_empty() {
            flag("out", self.out.clone());
        }
        if self.sft {
            v.push("--sft".into());
        }
        v
    }

    /// The equivalent command line, for the log.
    pub fn command_line(&self) -> String {
        let words: Vec<String> = self
            .argv()
            .into_iter()
            .map(|w| {
                if w.is_empty() || w.contains(|c: char| c.is_whitespace() || "*?[]'\"$".contains(c))
                {
                    format!("'{}'", w.replace('\'', r"'\''"))
                } else {
                    w
                }
            })
            .collect();
        format!("endless {}", words.join(" "))
    }

    /// The request [`Self::argv`] makes of `endless train`.
    pub fn request(&self) -> TrainRequest {
        let defaults = TrainRequest::default();
        let set = |s: &String| (!s.is_empty()).then(|| s.clone());
        TrainRequest {
            tasks: set(&self.tasks),
            dev: set(&self.dev),
            init: Some(self.init.clone()),
            sft: self.sft,
            sft_steps: if self.sft {
                self.sft_steps
            } else {
                defaults.sft_steps
            },
            steps: self.steps,
            minutes: self.minutes,
            recipe: RecipeFlags {
                samples: Some(self.samples),
                max_turns: Some(self.max_turns),
                prompts_per_step: Some(self.tasks_per_step),
                kl_coef: self.kl_coef,
                ..defaults.recipe.clone()
            },
            lora: self.lora,
            out: set(&self.out).map(std::path::PathBuf::from),
            ..defaults
        }
    }

    /// For the jobs journal.
    pub fn params(&self) -> serde_json::Value {
        serde_json::json!({
            "tasks": self.tasks, "dev": self.dev, "init": self.init, "sft": self.sft,
            "sft_steps": self.sft_steps, "steps": self.steps, "minutes": self.minutes,
            "samples": self.samples, "max_turns": self.max_turns,
            "tasks_per_step": self.tasks_per_step, "lora": self.lora,
            "kl_coef": self.kl_coef, "out": self.out,
        })
    }

    /// The form's values from the jobs journal ([`Self::params`]), to run
    /// the job again: with the same `out` it resumes. A value missing from
    /// an older journal keeps the form's default.
    pub fn from_params(params: &serde_json::Value) -> Result<TrainSpec, String> {
        let d = TrainSpec::default();
        let get = |k: &str| params.get(k).filter(|v| !v.is_null());
        let bad = |k: &str| format!("the journal's train job has a bad {k:?} parameter");
        let text = |k: &str, or: &str| match get(k) {
            None => Ok(or.to_string()),
            Some(v) => v.as_str().map(String::from).ok_or_else(|| bad(k)),
        };
        let whole = |k: &str, or: u64| match get(k) {
            None => Ok(or),
            Some(v) => v.as_u64().ok_or_else(|| bad(k)),
        };
        let small = |k: &str, or: u32| u32::try_from(whole(k, or.into())?).map_err(|_| bad(k));
        let real = |k: &str| get(k).map(|v| v.as_f64().ok_or_else(|| bad(k))).transpose();
        Ok(TrainSpec {
            tasks: text("tasks", &d.tasks)?,
            dev: text("dev", &d.dev)?,
            init: text("init", &d.init)?,
            sft: match get("sft") {
                None => d.sft,
                Some(v) => v.as_bool().ok_or_else(|| bad("sft"))?,
            },
            sft_steps: whole("sft_steps", d.sft_steps)?,
            steps: whole("steps", d.steps)?,
            minutes: real("minutes")?,
            samples: small("samples", d.samples)?,
            max_turns: small("max_turns", d.max_turns)?,
            tasks_per_step: whole("tasks_per_step", d.tasks_per_step as u64)? as usize,
            lora: get("lora")
                .map(|v| v.as_u64().map(|n| n as usize).ok_or_else(|| bad("lora")))
                .transpose()?,
            kl_coef: real("kl_coef")?,
            out: text("out", &d.out)?,
        })
    }

    /// The run directory under the workspace at `root`: `out`, or
    /// `checkpoints/<job>` when it is empty.
    pub fn run_dir(&self, root: &Path, job: &str) -> std::path::PathBuf {
        match self.out.trim() {
            "" => root.join("checkpoints").join(job),
            out => root.join(out),
        }
    }
}

/// Why the training form's values cannot start a run: the job's own
/// message and the form field at fault.
#[derive(Debug, Clone, PartialEq)]
pub struct TrainRefusal {
    /// The form field at fault.
    pub field: &'static str,
    /// The job's message (it names the CLI flag the field mirrors).
    pub message: String,
    /// The form's output dir (not remembered by the form), to put back.
    pub out: String,
}

impl std::fmt::Display for TrainRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

impl std::error::Error for TrainRefusal {}

/// The checks the job makes before it trains (the tasks, held-out tasks
/// not trained on, the initial policy, the recipe), made before it is
/// launched from the workspace at `root` so that the form can refuse.
pub fn check(root: &Path, spec: &TrainSpec) -> Result<(), TrainRefusal> {
    let refused = |e: anyhow::Error| {
        let message = format!("{e:#}");
        let field = [
            ("--dev", "dev"),
            ("--init", "init"),
            ("--lora", "lora rank"),
            ("--kl-coef", "kl coef"),
            ("--out", "output dir"),
        ]
        .into_iter()
        .find(|(flag, _)| message.contains(flag))
        .map_or("tasks", |(_, field)| field);
        TrainRefusal {
            field,
            message,
            out: spec.out.clone(),
        }
    };
    let cctx = Context::new(Some(root.to_path_buf())).map_err(refused)?;
    options(&cctx, &spec.request()).map(|_| ()).map_err(refused)
}

/// What one [`TrainEvent`] does to the job: progress and/or a log line.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Report {
    /// `(done, total, stage)`.
    pub progress: Option<(u64, u64, String)>,
    /// A line for the job's log.
    pub log: Option<String>,
}

/// Turns events into reports; remembers where the run stands.
#[derive(Debug, Clone, Default)]
pub struct Tracker {
    /// PPO steps asked for.
    pub steps: u64,
    /// PPO steps done so far.
    pub steps_done: u64,
    /// The last progress reported.
    last: (u64, u64),
}

/// `dev pass@1 before: 0.25 (10/40)`.
pub fn eval_line(e: &EvalRecord) -> String {
    format!(
        "dev pass@1 {}: {:.2} ({}/{})",
        e.label, e.pass_at_1, e.passed, e.episodes
    )
}

impl Tracker {
    /// A tracker for a run of `steps` PPO steps.
    pub fn new(steps: u64) -> Tracker {
        Tracker {
            steps,
            ..Tracker::default()
        }
    }

    /// What `ev` reports.
    pub fn report(&mut self, ev: &TrainEvent) -> Report {
        let mut r = Report::default();
        match ev {
            TrainEvent::Phase(p) => {
                r.progress = Some((self.last.0, self.last.1, p.clone()));
                r.log = Some(format!("phase: {p}"));
            }
            TrainEvent::Sft { total, metrics } => {
                self.last = (metrics.step, *total);
                r.progress = Some((
                    metrics.step,
                    *total,
                    format!("sft {}/{total}: loss {}", metrics.step, num(metrics.loss)),
                ));
            }
            TrainEvent::Rollouts { step, done, total } => {
                let steps = self.steps.max(*step);
                self.last = (self.steps_done, steps);
                r.progress = Some((
                    self.steps_done,
                    steps,
                    format!("ppo step {step}/{steps}: episodes {done}/{total}"),
                ));
            }
            TrainEvent::Step { total, metrics } => {
                self.steps = *total;
                self.steps_done = metrics.step;
                self.last = (metrics.step, *total);
                let stage = format!(
                    "ppo step {}/{total}: reward {} pass {}",
                    metrics.step,
                    num(metrics.reward),
                    num(metrics.pass_rate)
                );
                r.progress = Some((metrics.step, *total, stage));
                r.log = Some(format!(
                    "step {}: reward {} pass {} policy loss {} value loss {} kl {} entropy {} {} tok/s",
                    metrics.step,
                    num(metrics.reward),
                    num(metrics.pass_rate),
                    num(metrics.policy_loss),
                    num(metrics.value_loss),
                    num(metrics.approx_kl),
                    num(metrics.entropy),
                    num(metrics.tokens_per_s),
                ));
            }
            TrainEvent::Eval(e) => r.log = Some(eval_line(e)),
            TrainEvent::Checkpoint(p) => r.log = Some(format!("checkpoint {}", p.display())),
            TrainEvent::Log(line) => r.log = Some(line.clone()),
        }
        r
    }
}

/// The job's one-line result.
pub fn summary_line(s: &TrainSummary) -> String {
    let mut out = format!("{}: {} PPO steps", s.status.as_str(), s.steps_done);
    match (&s.before, &s.after) {
        (Some(b), Some(a)) => out.push_str(&format!(
            "; dev pass@1 {:.2} -> {:.2} ({:+.1} pts)",
            b.pass_at_1,
            a.pass_at_1,
            (a.pass_at_1 - b.pass_at_1) * 100.0
        )),
        (Some(b), None) => out.push_str(&format!("; dev pass@1 before {:.2}", b.pass_at_1)),
        _ => {}
    }
    if let Some(m) = s.message.as_deref().filter(|m| !m.is_empty()) {
        out.push_str(&format!(" ({m})"));
    }
    out.push_str(&format!(" in {}", s.out.display()));
    out
}

/// Run the training; returns a one-line summary.
pub fn run(ctx: &JobContext, root: &Path, spec: &TrainSpec) -> anyhow::Result<String> {
    let mut request = spec.request();
    ctx.log(spec.command_line());
    let cctx = Context::new(Some(root.to_path_buf()))?;
    // The run directory is named after the job unless the form names one:
    // one id in the Jobs and the Training views, which selects the run a
    // form started.
    request.out = Some(spec.run_dir(cctx.workspace()?.root(), &ctx.id().0));
    let opts = options(&cctx, &request)?;
    ctx.log(format!(
        "run directory {} ({} training tasks, {} dev tasks)",
        opts.out.display(),
        opts.tasks.len(),
        opts.dev_tasks.len()
    ));
    let mut tracker = Tracker::new(opts.steps);
    let result = train(opts, ctx, |ev: TrainEvent| {
        let r = tracker.report(&ev);
        if let Some((done, total, stage)) = r.progress {
            ctx.progress(done, total, &stage);
        }
        if let Some(line) = r.log {
            ctx.log(line);
        }
    });
    let summary = result?;
    let line = summary_line(&summary);
    ctx.log(line.clone());
    ctx.check()?;
    match summary.status {
        RunStatus::Failed => anyhow::bail!(
            "{}",
            summary
                .message
                .as_deref()
                .unwrap_or("the training run failed")
        ),
        _ => Ok(line),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rl::run_files::SftMetrics;
    use crate::rl::StepMetrics;

    #[test]
    fn the_form_becomes_a_request_with_cli_defaults() {
        let spec = TrainSpec {
            tasks: "awk-*,dedupe-lines-1-c3".into(),
            dev: "sed-*".into(),
            minutes: Some(2.5),
            steps: 20,
            ..TrainSpec::default()
        };
        let args = spec.request();
        assert_eq!(args.tasks.as_deref(), Some("awk-*,dedupe-lines-1-c3"));
        assert_eq!(args.dev.as_deref(), Some("sed-*"));
        assert_eq!(args.init.as_deref(), Some("tiny"));
        assert!(args.sft);
        assert_eq!(
            (
                args.sft_steps,
                args.steps,
                args.recipe.samples,
                args.recipe.max_turns
            ),
            (300, 20, Some(16), Some(16))
        );
        assert_eq!(args.recipe.prompts_per_step, Some(1));
        assert_eq!(args.minutes, Some(2.5));
        // What the form does not ask for keeps the CLI's default.
        assert_eq!(args.concurrency, 16);
        assert_eq!(args.recipe.reward, "binary");
        assert!(args.out.is_none());
        assert_eq!(
            spec.command_line(),
            "endless train --tasks 'awk-*,dedupe-lines-1-c3' --dev 'sed-*' --init tiny \
             --sft-steps 300 --steps 20 --minutes 2.5 --samples 16 --max-turns 16 \
             --tasks-per-step 1 --sft"
        );
        let off = TrainSpec {
            sft: false,
            ..TrainSpec::default()
        };
        let args = off.request();
        assert!(!args.sft && args.tasks.is_none() && args.dev.is_none());
        assert!(args.lora.is_none());
        let lora = TrainSpec {
            init: "smollm2".into(),
            lora: Some(8),
            ..TrainSpec::default()
        };
        assert_eq!(lora.request().lora, Some(8));
        assert!(
            lora.command_line().contains("--init smollm2 ")
                && lora.command_line().contains("--lora 8 ")
        );
        assert_eq!(lora.request().recipe.kl_coef, None);
        let kl = TrainSpec {
            kl_coef: Some(0.3),
            ..TrainSpec::default()
        };
        assert_eq!(kl.request().recipe.kl_coef, Some(0.3));
        assert!(kl.command_line().contains("--kl-coef 0.3 "));
    }

    #[test]
    fn events_become_progress_and_log_lines() {
        let mut t = Tracker::new(10);
        let r = t.report(&TrainEvent::Phase("sft".into()));
        assert_eq!(r.log.as_deref(), Some("phase: sft"));
        let r = t.report(&TrainEvent::Sft {
            total: 300,
            metrics: SftMetrics {
                step: 30,
                loss: 2.5,
                ..Default::default()
            },
        });
        assert_eq!(r.progress, Some((30, 300, "sft 30/300: loss 2.50".into())));
        assert!(r.log.is_none());
        let eval = EvalRecord {
            label: "before".into(),
            pass_at_1: 0.25,
            passed: 10,
            episodes: 40,
            ..Default::default()
        };
        let r = t.report(&TrainEvent::Eval(eval));
        assert_eq!(r.log.as_deref(), Some("dev pass@1 before: 0.25 (10/40)"));
        let r = t.report(&TrainEvent::Rollouts {
            step: 1,
            done: 3,
            total: 16,
        });
        assert_eq!(
            r.progress,
            Some((0, 10, "ppo step 1/10: episodes 3/16".into()))
        );
        let r = t.report(&TrainEvent::Step {
            total: 10,
            metrics: StepMetrics {
                step: 1,
                reward: 0.5,
                pass_rate: 0.25,
                ..Default::default()
            },
        });
        assert_eq!(
            r.progress,
            Some((1, 10, "ppo step 1/10: reward 0.50 pass 0.25".into()))
        );
        assert!(r.log.unwrap().starts_with("step 1: reward 0.50 pass 0.25"));
        // A phase keeps the progress where it was.
        let r = t.report(&TrainEvent::Phase("eval after".into()));
        assert_eq!(r.progress, Some((1, 10, "eval after".into())));
        let r = t.report(&TrainEvent::Log("hello".into()));
        assert_eq!((r.progress, r.log.as_deref()), (None, Some("hello")));
    }

    #[test]
    fn the_summary_names_status_delta_and_directory() {
        let rec = |label: &str, p: f64| EvalRecord {
            label: label.into(),
            pass_at_1: p,
            ..Default::default()
        };
        let s = TrainSummary {
            out: "/ws/checkpoints/train-1".into(),
            status: RunStatus::Stopped,
            message: Some("loss is not finite at step 12".into()),
            steps_done: 11,
            before: Some(rec("before", 0.25)),
            after: Some(rec("after", 0.4)),
            last_checkpoint: None,
        };
        assert_eq!(
            summary_line(&s),
            "stopped: 11 PPO steps; dev pass@1 0.25 -> 0.40 (+15.0 pts) \
             (loss is not finite at step 12) in /ws/checkpoints/train-1"
        );
    }
}
