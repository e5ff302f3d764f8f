//! The launch forms of the Jobs view: which form is open, each form's
//! fields with their defaults, and the job a submitted form asks for.

use super::App;
use crate::tui::action::Request;
use crate::tui::launch::train::TrainRefusal;
use crate::tui::launch::{JobSpec, TrainSpec};
use crate::tui::widgets::form::{Form, FormOutcome};
use crate::workbench::{check_policy_spec, unmatched_patterns};
use crossterm::event::KeyEvent;

/// Which launch form is open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FormKind {
    /// Evaluate a policy.
    Eval,
    /// Validate tasks.
    Validate,
    /// Audit tasks.
    Audit,
    /// Repair tasks through the generator.
    Repair,
    /// LLM generation.
    Generate,
    /// Offline (procedural) generation.
    Offline,
    /// A training run.
    Train,
    /// A fork of the inspected episode.
    Fork,
}

/// The episode the fork form forks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForkTarget {
    /// `RUN/TASK/SAMPLE`.
    pub parent: String,
    /// Its task.
    pub task: String,
    /// Its number of steps.
    pub steps: usize,
}

impl FormKind {
    /// The form's key in the saved values.
    pub fn name(self) -> &'static str {
        match self {
            FormKind::Eval => "eval",
            FormKind::Validate => "validate",
            FormKind::Audit => "audit",
            FormKind::Repair => "repair",
            FormKind::Generate => "generate",
            FormKind::Offline => "offline",
            FormKind::Train => "train",
            FormKind::Fork => "fork",
        }
    }

    /// Whether field `label` takes its last value when the form opens
    /// (not the selection-based ones, nor the offline seed: the next free
    /// one is proposed; nor a training output dir: the same one resumes).
    fn remembers(self, label: &str) -> bool {
        !matches!(
            (self, label),
            (FormKind::Validate, _)
                | (FormKind::Audit, "tasks")
                | (FormKind::Repair, "tasks")
                | (FormKind::Train, "output dir")
                | (FormKind::Offline, "seed")
                | (FormKind::Fork, "at step")
        )
    }
}

impl App {
    /// Remember a submitted form's values (saved in the workspace).
    pub(super) fn remember_form(&mut self, kind: FormKind, form: Form) {
        let Some(values) = self.form_values.as_mut() else {
            return;
        };
        let saved = values.entry(kind.name().to_string()).or_default();
        for f in &form.fields {
            if kind.remembers(f.label) {
                saved.insert(f.label.to_string(), f.input.value.clone());
            }
        }
        self.outbox.push(Request::SaveFormValues(values.clone()));
    }

    /// Put the last values of form `kind` into `form`.
    fn recall_form(&self, kind: FormKind, form: &mut Form) {
        let Some(saved) = self.form_values.as_ref().and_then(|v| v.get(kind.name())) else {
            return;
        };
        for f in form.fields.iter_mut() {
            if let Some(v) = saved.get(f.label).filter(|_| kind.remembers(f.label)) {
                f.input = crate::tui::widgets::input::TextInput::new(v.clone());
            }
        }
    }

    /// Open the launch form `kind` with its last values (or its defaults).
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
            .with_note("task ids or * globs, comma-separated, or `all`"),
            FormKind::Audit => Form::new(
                "Audit tasks",
                &[
                    (
                        "tasks",
                        self.tasks.selected_id().unwrap_or_else(|| "all".into()),
                    ),
                    ("checks", "all".into()),
                    ("concurrency", d.concurrency.to_string()),
                ],
            )
            .with_note("what `endless tasks audit` does, as a job; tasks: ids or * globs, comma-separated, or all; checks: passes-without-work, weak-tests, cheap-solutions, flaky, time-order, underspecified, needs-network, comma-separated, or all; findings show in Tasks (Audit column, f filters, the Audit tab)"),
            FormKind::Repair => Form::new(
                "Repair tasks through the generator",
                &[
                    ("tasks", self.tasks.selected_id().unwrap_or_default()),
                    ("url", d.llm_url.clone()),
                    ("model", d.llm_model.clone()),
                    ("solutions", d.solutions.to_string()),
                ],
            )
            .with_note("what `endless tasks repair IDS --llm URL --model M` does, as a job; tasks: ids or * globs, comma-separated; each goes back to the model with its reasons (note, rating, audit findings, validation, failed episodes); D reviews a repair"),
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
                    ("split", String::new()),
                    ("families", String::new()),
                ],
            )
            .with_note("what `endless generate --offline` does, as a job; split: train or dev (empty: both); families: names or * globs, comma-separated (empty: every usable one)"),
            FormKind::Train => train_form(),
            FormKind::Fork => {
                let (title, at) = match &self.fork_target {
                    Some(t) => (format!("Fork {}", t.parent), self.fork_step(t)),
                    None => ("Fork an episode".into(), 0),
                };
                Form::new(
                    title,
                    &[("at step", at.to_string()), ("policy", d.policy.clone())],
                )
                .with_note("a fresh sandbox re-runs the episode's commands before the step, then the policy goes on (watch it in Live; ctrl-t takes it over); the fork is an episode of its own, linked to this one")
            }
        };
        let mut form = form;
        self.recall_form(kind, &mut form);
        if kind == FormKind::Offline {
            // Propose the first seed whose batch is new (the worker looks).
            let count = form.value("count").parse().unwrap_or(d.count);
            self.outbox.push(Request::NextFreeSeed(count));
        }
        self.form = Some((kind, form));
    }

    /// The training job refused the form's values before it started (a
    /// held-out task also trained on, a missing model...): the form opens
    /// again with them, the field at fault named.
    pub(super) fn train_refused(&mut self, refusal: TrainRefusal) {
        self.open_form(FormKind::Train);
        if let Some((_, form)) = self.form.as_mut() {
            if let Some(f) = form.fields.iter_mut().find(|f| f.label == "output dir") {
                f.input = crate::tui::widgets::input::TextInput::new(refusal.out);
            }
            form.set_error(refusal.field, refusal.message);
        }
    }

    /// The step the fork form proposes: the earliest failing one, else the
    /// last.
    fn fork_step(&self, t: &ForkTarget) -> usize {
        self.inspector
            .as_ref()
            .and_then(|i| i.episode.result.as_ref().ok())
            .and_then(|r| r.earliest_failing_step)
            .map_or(t.steps.saturating_sub(1), |s| s as usize)
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
                let ids: Vec<&str> = self.tasks.rows().iter().map(|r| r.id.as_str()).collect();
                let spec = match (kind, &self.fork_target) {
                    (FormKind::Fork, Some(target)) => fork_spec(form, target),
                    (FormKind::Fork, None) => Err(("policy", "no episode to fork".into())),
                    _ => job_spec(kind, form, &ids),
                };
                match spec {
                    Ok(spec) => {
                        let submitted = form.clone();
                        self.form = None;
                        self.remember_form(kind, submitted);
                        // Started from Tasks, the job is followed in Jobs.
                        let follow = match self.view {
                            super::View::Tasks => format!(
                                " (see the Jobs view, {})",
                                self.keymap.hint(crate::tui::keymap::Command::ViewJobs)
                            ),
                            _ => String::new(),
                        };
                        self.info(format!("starting {}...{follow}", spec.kind()));
                        self.outbox.push(Request::Launch(spec));
                    }
                    // Shown in the form, on the field at fault; it stays open.
                    Err((field, message)) => form.set_error(field, message),
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
            ("lora rank", String::new()),
            ("kl coef", String::new()),
            ("output dir", d.out),
        ],
    )
    .with_note("tasks / dev: ids or * globs (empty tasks: the train split; empty dev: no pass@1 before/after); init: tiny, smollm2, a model dir or .gguf; minutes empty: no limit; lora rank empty: every weight; kl coef empty: [train] kl_coef; output dir empty: checkpoints/<job>.")
}

/// Why a form's values cannot start its job: the field and the reason.
type FieldError = (&'static str, String);

/// The fork job of a submitted fork form.
fn fork_spec(form: &Form, target: &ForkTarget) -> Result<JobSpec, FieldError> {
    let at_step: usize = form.value("at step").parse().map_err(|_| {
        (
            "at step",
            format!("expected a step number, got {:?}", form.value("at step")),
        )
    })?;
    if at_step > target.steps {
        return Err((
            "at step",
            format!(
                "the episode has steps 0 to {}",
                target.steps.saturating_sub(1)
            ),
        ));
    }
    let policy = form.value("policy").to_string();
    check_policy_spec(&policy).map_err(|e| ("policy", e))?;
    if policy == "human" {
        return Err((
            "policy",
            "fork with a policy, then take the session over in Live (ctrl-t)".into(),
        ));
    }
    Ok(JobSpec::Fork {
        parent: target.parent.clone(),
        task: target.task.clone(),
        at_step,
        policy,
    })
}

/// Every pattern of a selection field matches a task (an empty field is
/// fine: it means the default set).
/// The names of `names` that a comma-separated list of ids or `*` globs
/// picks, in `names`' order.
fn selected(selection: &str, names: &[&str]) -> Vec<String> {
    let patterns: Vec<&str> = selection
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .collect();
    names
        .iter()
        .filter(|n| {
            patterns
                .iter()
                .any(|p| unmatched_patterns(p, &[**n]).is_empty())
        })
        .map(|n| n.to_string())
        .collect()
}

fn check_selection(form: &Form, field: &'static str, ids: &[&str]) -> Result<(), FieldError> {
    let bad = unmatched_patterns(form.value(field), ids);
    if bad.is_empty() {
        return Ok(());
    }
    let s = if bad.len() == 1 { "es" } else { "" };
    Err((
        field,
        format!(
            "{} match{s} no task (ids or * globs, comma-separated)",
            bad.join(", ")
        ),
    ))
}

/// The job a submitted form asks for, its values checked first (policy
/// spec, files it names, task selections against `ids`).
fn job_spec(kind: FormKind, form: &Form, ids: &[&str]) -> Result<JobSpec, FieldError> {
    fn num<T: std::str::FromStr>(form: &Form, field: &'static str) -> Result<T, FieldError> {
        form.value(field).parse().map_err(|_| {
            (
                field,
                format!("expected a whole number, got {:?}", form.value(field)),
            )
        })
    }
    Ok(match kind {
        FormKind::Eval => {
            let policy = form.value("policy").to_string();
            check_policy_spec(&policy).map_err(|e| ("policy", e))?;
            if policy == "human" {
                return Err((
                    "policy",
                    "the human policy needs a terminal of its own: `endless run TASK --policy human` (or take a session over in the Live view)".into(),
                ));
            }
            check_selection(form, "tasks", ids)?;
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
            // Ids or `*` globs, as in every task field; `all` (or empty):
            // every task.
            let patterns: Vec<&str> = form
                .value("tasks")
                .split(',')
                .map(str::trim)
                .filter(|t| !t.is_empty() && *t != "all")
                .collect();
            let bad: Vec<&str> = patterns
                .iter()
                .copied()
                .filter(|p| !unmatched_patterns(p, ids).is_empty())
                .collect();
            if !bad.is_empty() {
                let s = if bad.len() == 1 { "es" } else { "" };
                return Err((
                    "tasks",
                    format!(
                        "{} match{s} no task (ids or * globs, comma-separated, or all)",
                        bad.join(", ")
                    ),
                ));
            }
            let tasks = ids
                .iter()
                .filter(|id| {
                    patterns
                        .iter()
                        .any(|p| unmatched_patterns(p, &[**id]).is_empty())
                })
                .map(|id| id.to_string())
                .collect();
            JobSpec::Validate { tasks }
        }
        FormKind::Audit => {
            let tasks = match form.value("tasks").trim() {
                "all" => String::new(),
                t => {
                    check_selection(form, "tasks", ids)?;
                    t.to_string()
                }
            };
            crate::tui::launch::audit::parse_checks(form.value("checks"))
                .map_err(|e| ("checks", e))?;
            let concurrency: usize = num(form, "concurrency")?;
            if concurrency == 0 {
                return Err(("concurrency", "at least 1".into()));
            }
            JobSpec::Audit {
                tasks,
                checks: form.value("checks").trim().to_string(),
                concurrency,
            }
        }
        FormKind::Repair => {
            let model = form.value("model").trim().to_string();
            if model.is_empty() {
                return Err(("model", "name the generator model".into()));
            }
            if form.value("tasks").split(',').all(|t| t.trim().is_empty()) {
                return Err(("tasks", "name the tasks to repair (ids or * globs)".into()));
            }
            check_selection(form, "tasks", ids)?;
            let tasks = selected(form.value("tasks"), ids);
            JobSpec::Repair {
                tasks,
                url: form.value("url").trim().to_string(),
                model,
                solutions: num(form, "solutions")?,
            }
        }
        FormKind::Generate => {
            let model = form.value("model").to_string();
            if model.is_empty() {
                return Err(("model", "name the generator model".into()));
            }
            JobSpec::Generate {
                url: form.value("url").to_string(),
                model,
                count: num(form, "count")?,
                solutions: num(form, "solutions")?,
            }
        }
        FormKind::Offline => {
            let split = match form.value("split").trim() {
                "" => None,
                s => Some(crate::tui::launch::parse_split(s).map_err(|e| ("split", e))?),
            };
            let names: Vec<&str> = crate::procgen::families()
                .iter()
                .map(|f| f.name())
                .collect();
            let bad = unmatched_patterns(form.value("families"), &names);
            if !bad.is_empty() {
                return Err((
                    "families",
                    format!(
                        "no family {} (known: {}, …)",
                        bad.join(", "),
                        names.iter().take(6).copied().collect::<Vec<_>>().join(", ")
                    ),
                ));
            }
            let families = selected(form.value("families"), &names);
            JobSpec::Offline {
                count: num(form, "count")?,
                seed: num(form, "seed")?,
                split,
                families,
            }
        }
        FormKind::Fork => return Err(("policy", "no episode to fork".into())),
        FormKind::Train => {
            let init = form.value("init").to_string();
            match init.as_str() {
                "" => {
                    return Err((
                        "init",
                        "expected tiny, smollm2, a model directory or a .gguf".into(),
                    ))
                }
                "tiny" | "smollm2" => {}
                path => {
                    check_policy_spec(&format!("local:{path}")).map_err(|e| ("init", e))?;
                }
            }
            check_selection(form, "tasks", ids)?;
            check_selection(form, "dev", ids)?;
            let sft = match form.value("sft").to_ascii_lowercase().as_str() {
                "yes" | "y" | "on" | "true" | "1" => true,
                "no" | "n" | "off" | "false" | "0" | "" => false,
                other => return Err(("sft", format!("expected yes or no, got {other:?}"))),
            };
            let minutes = match form.value("minutes") {
                "" => None,
                m => match m.parse::<f64>() {
                    Ok(x) if x > 0.0 && x.is_finite() => Some(x),
                    _ => return Err(("minutes", format!("expected a positive number, got {m:?}"))),
                },
            };
            let lora = match form.value("lora rank") {
                "" => None,
                _ if init == "tiny" => {
                    return Err((
                        "lora rank",
                        "LoRA needs a pretrained init (smollm2, a model dir or .gguf), not tiny"
                            .into(),
                    ))
                }
                r => match r.parse::<usize>() {
                    Ok(n) if n > 0 => Some(n),
                    _ => return Err(("lora rank", format!("expected a positive rank, got {r:?}"))),
                },
            };
            let kl_coef = match form.value("kl coef") {
                "" => None,
                k => match k.parse::<f64>() {
                    Ok(x) if x >= 0.0 && x.is_finite() => Some(x),
                    _ => {
                        return Err((
                            "kl coef",
                            format!("expected a number of at least 0, got {k:?}"),
                        ))
                    }
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
                lora,
                kl_coef,
                out: form.value("output dir").trim().to_string(),
            })
        }
    })
}
