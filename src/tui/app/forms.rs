//! The launch forms of the Jobs view: which form is open, each form's
//! fields with their defaults, and the job a submitted form asks for.

use super::App;
use crate::tui::action::Request;
use crate::tui::launch::{JobSpec, TrainSpec};
use crate::tui::widgets::form::{Form, FormOutcome};
use crossterm::event::KeyEvent;

/// Which launch form is open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FormKind {
    /// Evaluate a policy.
    Eval,
    /// Validate tasks.
    Validate,
    /// LLM generation.
    Generate,
    /// Offline (procedural) generation.
    Offline,
    /// A training run.
    Train,
}

impl App {
    /// Open the launch form `kind` with its defaults.
    pub(super) fn open_form(&mut self, kind: FormKind) {
        let d = &self.defaults;
        let form = match kind {
            FormKind::Eval => Form::new(
                "Evaluate a policy",
                &[
                    ("policy", d.policy.clone()),
                    ("tasks", String::new()),
                    ("samples", d.samples.to_string()),
                    ("max turns", String::new()),
                    ("concurrency", d.concurrency.to_string()),
                ],
            )
            .with_note("tasks: ids or * globs, comma-separated (empty: all but rejected/archived); max turns empty: each task's own"),
            FormKind::Validate => Form::new(
                "Validate tasks",
                &[(
                    "tasks",
                    self.tasks.selected_id().unwrap_or_else(|| "all".into()),
                )],
            )
            .with_note("task ids, comma-separated, or `all`"),
            FormKind::Generate => Form::new(
                "Generate tasks with an LLM",
                &[
                    ("url", d.llm_url.clone()),
                    ("model", d.llm_model.clone()),
                    ("count", d.count.to_string()),
                    ("solutions", d.solutions.to_string()),
                ],
            )
            .with_note("what `endless generate --llm URL --model M` does, as a job"),
            FormKind::Offline => Form::new(
                "Generate tasks offline (procedural)",
                &[
                    ("count", d.count.to_string()),
                    ("seed", d.offline_seed.to_string()),
                ],
            )
            .with_note("what `endless generate --offline` does, as a job"),
            FormKind::Train => train_form(),
        };
        if kind == FormKind::Offline {
            // Propose the first seed whose batch is new (the worker looks).
            self.outbox.push(Request::NextFreeSeed(d.count));
        }
        self.form = Some((kind, form));
    }

    /// A key while a form is open: edit, cancel, or submit (launch).
    pub(super) fn form_key(&mut self, key: KeyEvent) {
        let Some((kind, form)) = self.form.as_mut() else {
            return;
        };
        match form.handle_key(&key) {
            FormOutcome::Editing => {}
            FormOutcome::Cancel => self.form = None,
            FormOutcome::Submit => {
                let kind = *kind;
                match job_spec(kind, form) {
                    Ok(spec) => {
                        self.form = None;
                        self.info(format!("starting {}...", spec.kind()));
                        self.outbox.push(Request::Launch(spec));
                    }
                    Err(e) => self.error(e),
                }
            }
        }
    }
}

/// The training form, with the CLI's defaults.
fn train_form() -> Form {
    let d = TrainSpec::default();
    Form::new(
        "Train a policy (PPO)",
        &[
            ("tasks", d.tasks),
            ("dev", d.dev),
            ("init", d.init),
            ("sft", if d.sft { "yes" } else { "no" }.into()),
            ("sft steps", d.sft_steps.to_string()),
            ("steps", d.steps.to_string()),
            ("minutes", String::new()),
            ("samples", d.samples.to_string()),
            ("max turns", d.max_turns.to_string()),
            ("tasks per step", d.tasks_per_step.to_string()),
        ],
    )
    .with_note("tasks / dev: ids or * globs (empty tasks: the train split; empty dev: no pass@1 before/after); init: tiny, smollm2, a model dir or .gguf; minutes empty: no time limit. Follow the run in the Training view.")
}

/// The job a submitted form asks for.
fn job_spec(kind: FormKind, form: &Form) -> Result<JobSpec, String> {
    fn num<T: std::str::FromStr>(form: &Form, field: &str) -> Result<T, String> {
        form.value(field).parse().map_err(|_| {
            format!(
                "{field}: expected a whole number, got {:?}",
                form.value(field)
            )
        })
    }
    Ok(match kind {
        FormKind::Eval => {
            let policy = form.value("policy").to_string();
            if policy.is_empty() {
                return Err("policy: expected a spec such as oracle or openai:MODEL@URL".into());
            }
            JobSpec::Eval {
                policy,
                tasks: form.value("tasks").to_string(),
                samples: num(form, "samples")?,
                max_turns: match form.value("max turns") {
                    "" => None,
                    _ => Some(num(form, "max turns")?),
                },
                concurrency: num(form, "concurrency")?,
            }
        }
        FormKind::Validate => {
            let tasks: Vec<String> = form
                .value("tasks")
                .split(',')
                .map(|t| t.trim().to_string())
                .filter(|t| !t.is_empty() && t != "all")
                .collect();
            JobSpec::Validate { tasks }
        }
        FormKind::Generate => {
            let model = form.value("model").to_string();
            if model.is_empty() {
                return Err("model: name the generator model".into());
            }
            JobSpec::Generate {
                url: form.value("url").to_string(),
                model,
                count: num(form, "count")?,
                solutions: num(form, "solutions")?,
            }
        }
        FormKind::Offline => JobSpec::Offline {
            count: num(form, "count")?,
            seed: num(form, "seed")?,
        },
        FormKind::Train => {
            let init = form.value("init").to_string();
            if init.is_empty() {
                return Err("init: expected tiny, smollm2, a model directory or a .gguf".into());
            }
            let sft = match form.value("sft").to_ascii_lowercase().as_str() {
                "yes" | "y" | "on" | "true" | "1" => true,
                "no" | "n" | "off" | "false" | "0" | "" => false,
                other => return Err(format!("sft: expected yes or no, got {other:?}")),
            };
            let minutes = match form.value("minutes") {
                "" => None,
                m => match m.parse::<f64>() {
                    Ok(x) if x > 0.0 && x.is_finite() => Some(x),
                    _ => return Err(format!("minutes: expected a positive number, got {m:?}")),
                },
            };
            JobSpec::Train(TrainSpec {
                tasks: form.value("tasks").to_string(),
                dev: form.value("dev").to_string(),
                init,
                sft,
                sft_steps: num(form, "sft steps")?,
                steps: num(form, "steps")?,
                minutes,
                samples: num(form, "samples")?,
                max_turns: num(form, "max turns")?,
                tasks_per_step: num(form, "tasks per step")?,
            })
        }
    })
}
