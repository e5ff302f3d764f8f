//! Validation: the structural checks of a task bundle, then the sandbox
//! checks (the environment builds, the initial tests pass, the final tests
//! fail on the initial state, the oracle passes) with the configured
//! backend. `endless tasks validate` and the TUI's validation job both run
//! [`validate_tasks`].

use std::path::Path;

use rayon::prelude::*;
use serde::Serialize;

use super::blockers::{by_first_blocker, class_key, Invalid};
use super::Context;
use crate::jobs::JobContext;
use crate::verify::{Blocker, Validation};

/// One task's verdict (`tasks validate --json` prints a list of them).
#[derive(Debug, Clone, Serialize)]
pub struct Verdict {
    /// The task id.
    pub id: String,
    /// Whether the task is valid.
    pub ok: bool,
    /// What is wrong (empty when `ok`).
    pub problems: Vec<String>,
    /// The sandbox checks' details, when they ran.
    pub validation: Option<Validation>,
}

impl Verdict {
    fn invalid(id: &str, problems: Vec<String>) -> Verdict {
        Verdict {
            id: id.to_string(),
            ok: false,
            problems,
            validation: None,
        }
    }

    /// The classes of its problems (see [`crate::verify::FailureClass`]):
    /// those of the sandbox checks; none for a bundle refused before them.
    pub fn classes(&self) -> &[crate::verify::FailureClass] {
        self.validation
            .as_ref()
            .map_or(&[], |v| v.failure_classes.as_slice())
    }

    /// The first problem that stopped it, with its class and what it names
    /// (none for a bundle refused before the sandbox checks).
    pub fn blocker(&self) -> Option<&Blocker> {
        self.validation.as_ref().and_then(|v| v.blocker.as_ref())
    }

    /// The classes as one bracketed word list (`[build-network]`), or
    /// nothing when there are none.
    pub fn classes_label(&self) -> String {
        let keys: Vec<&str> = self.classes().iter().map(|c| c.key()).collect();
        if keys.is_empty() {
            String::new()
        } else {
            format!(" [{}]", keys.join(", "))
        }
    }

    /// What the user should know even when the task is valid (a base
    /// image substituted for the one it asks for).
    pub fn notes(&self) -> &[String] {
        self.validation.as_ref().map_or(&[], |v| v.notes.as_slice())
    }

    /// One line: what passed and how long it took, or the problems; and
    /// any notes.
    pub fn summary(&self) -> String {
        let mut line = self.verdict_line();
        for note in self.notes() {
            line.push_str("; note: ");
            line.push_str(note);
        }
        line
    }

    /// The form `tasks validate` stores (see [`super::verdicts`]), validated now.
    pub fn stored(&self) -> anyhow::Result<super::verdicts::StoredVerdict> {
        Ok(super::verdicts::StoredVerdict {
            id: self.id.clone(),
            ok: self.ok,
            problems: self.problems.clone(),
            notes: self.notes().to_vec(),
            validated_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            seconds: self
                .validation
                .as_ref()
                .map_or(0.0, |x| x.duration.as_secs_f64()),
            validation: self
                .validation
                .as_ref()
                .map(serde_json::to_value)
                .transpose()?,
        })
    }

    fn verdict_line(&self) -> String {
        match (&self.validation, self.ok) {
            (Some(v), true) => {
                let oracle = match v.oracle_passes {
                    Some(true) => ", oracle passes",
                    _ => "",
                };
                format!(
                    "valid: initial tests pass, final tests fail on the initial state{oracle} ({:.1}s)",
                    v.duration.as_secs_f64()
                )
            }
            (None, true) => "valid".into(),
            (_, false) => self.problems.join("; "),
        }
    }
}

/// What a validation of `verdicts` comes to, in one line (the TUI's job
/// summary): one task, its verdict with its failure classes
/// (`t: INVALID [oracle-fails]: ...`); several, how many are valid and
/// the invalid ones by the class of their first blocker, most frequent
/// first (`3/5 valid; invalid: 1 oracle-fails, 1 build-network`). A task
/// refused before the sandbox checks (or whose backend did not start) has
/// no class.
pub fn verdicts_summary(verdicts: &[Verdict]) -> String {
    match verdicts {
        [v] if v.ok => format!("{}: {}", v.id, v.summary()),
        [v] => format!("{}: INVALID{}: {}", v.id, v.classes_label(), v.summary()),
        _ => {
            let valid = verdicts.iter().filter(|v| v.ok).count();
            let mut line = format!("{valid}/{} valid", verdicts.len());
            let groups = by_first_blocker(verdicts.iter().filter(|v| !v.ok).map(Invalid::of));
            let parts: Vec<String> = groups
                .iter()
                .map(|(class, tasks)| format!("{} {}", tasks.len(), class_key(*class)))
                .collect();
            if !parts.is_empty() {
                line.push_str("; invalid: ");
                line.push_str(&parts.join(", "));
            }
            line
        }
    }
}

impl<'a> Invalid<'a> {
    /// The invalid task `v`.
    pub fn of(v: &'a Verdict) -> Invalid<'a> {
        Invalid {
            id: &v.id,
            blocker: v.blocker().cloned().or_else(|| {
                v.classes().first().map(|c| Blocker {
                    class: *c,
                    host: None,
                    stand_in: None,
                    difference: None,
                    line: None,
                })
            }),
            problems: &v.problems,
        }
    }
}

/// The sandbox backend validation runs with, or why it did not start (then
/// every task that passes the structural checks is invalid, with that
/// reason).
pub type BackendOrError = Result<Box<dyn crate::sandbox::Backend>, String>;

/// Validate task `id` of the workspace whose bundles are in `tasks_dir`:
/// structural checks first, the sandbox checks only when they pass.
pub fn validate_task(tasks_dir: &Path, backend: &BackendOrError, id: &str) -> Verdict {
    validate_one(tasks_dir, backend, id, &crate::images::no_progress)
}

/// [`validate_task`], reporting the image's pull and build to `progress`.
fn validate_one(
    tasks_dir: &Path,
    backend: &BackendOrError,
    id: &str,
    progress: crate::images::ProgressFn<'_>,
) -> Verdict {
    let task = match crate::task::read_native(&tasks_dir.join(id), &Default::default()) {
        Ok(task) => task,
        Err(e) => return Verdict::invalid(id, vec![e.to_string()]),
    };
    let structural: Vec<String> = crate::task::validate(&task)
        .iter()
        .map(ToString::to_string)
        .collect();
    if !structural.is_empty() {
        return Verdict::invalid(id, structural);
    }
    let backend = match backend {
        Ok(b) => b.as_ref(),
        Err(e) => return Verdict::invalid(id, vec![e.clone()]),
    };
    match crate::verify::validate_task_reporting(backend, &task, progress) {
        Ok(mut v) => {
            record_baseline(&tasks_dir.join(id), &task, &mut v);
            Verdict {
                id: id.to_string(),
                ok: v.ok(),
                problems: v.problems.clone(),
                validation: Some(v),
            }
        }
        Err(e) => Verdict::invalid(id, vec![e.to_string()]),
    }
}

/// Store the final tests' verdicts on the initial state that validation
/// measured in the bundle's `[provenance.baseline]` (when they differ from
/// what is there), so the partial reward needs no extra verification per
/// episode. A failure to write is a note, not a problem of the task.
fn record_baseline(dir: &Path, task: &crate::task::Task, v: &mut Validation) {
    let Some(baseline) = &v.baseline else {
        return;
    };
    if task.meta.provenance.baseline.as_ref() == Some(baseline) {
        return;
    }
    let mut meta = task.meta.clone();
    meta.provenance.baseline = Some(baseline.clone());
    if let Err(e) = crate::task::write_meta_atomic(dir, &meta) {
        v.notes.push(format!("the baseline was not recorded: {e}"));
    }
}

/// Validate the tasks `ids` of the workspace, several at a time, with
/// `backend` (usually `ctx.backend()`). Reports progress (with each image's
/// pull and build steps as the stage) and one log line per task through
/// `job`, and calls `on_verdict` as each task finishes (in no set order);
/// returns the verdicts in the order of `ids`. Each verdict is also stored
/// in the task's bundle directory (`validation.json`). Once the job is cancelled no
/// new task starts, and the result is `Err(Cancelled)`.
pub fn validate_tasks(
    ctx: &Context,
    backend: BackendOrError,
    ids: &[String],
    job: &JobContext,
    on_verdict: impl Fn(&Verdict) + Sync,
) -> anyhow::Result<Vec<Verdict>> {
    validate_tasks_with(ctx, backend, ids, None, job, on_verdict)
}

/// [`validate_tasks`], `concurrency` tasks at once (`None`: the CPUs, at
/// least 2).
pub fn validate_tasks_with(
    ctx: &Context,
    backend: BackendOrError,
    ids: &[String],
    concurrency: Option<usize>,
    job: &JobContext,
    on_verdict: impl Fn(&Verdict) + Sync,
) -> anyhow::Result<Vec<Verdict>> {
    let tasks_dir = ctx.workspace()?.tasks_dir();
    let total = ids.len() as u64;
    let done = std::sync::atomic::AtomicU64::new(0);
    job.progress(0, total, "validating");
    let threads = concurrency.unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map_or(2, |n| n.get())
            .max(2)
    });
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads.max(1))
        .build();
    let run = || {
        ids.par_iter()
            .map(|id| {
                job.check()?;
                // The task's pull and build show as the job's stage.
                let building = |p: &crate::images::Progress| {
                    let n = done.load(std::sync::atomic::Ordering::Relaxed);
                    job.progress(n, total, &format!("{id}: {}", p.line()));
                };
                let mut verdict = validate_one(&tasks_dir, &backend, id, &building);
                // Kept in the workspace, so shards' verdicts can be merged
                // and reported later (`tasks validate --stored`).
                let stored = verdict.stored();
                let stored = stored.and_then(|s| super::verdicts::store_verdict(&tasks_dir, &s));
                if let Err(e) = stored {
                    if let Some(v) = verdict.validation.as_mut() {
                        v.notes.push(format!("the verdict was not stored: {e:#}"));
                    } else {
                        verdict
                            .problems
                            .push(format!("the verdict was not stored: {e:#}"));
                        verdict.ok = false;
                    }
                }
                on_verdict(&verdict);
                job.log(if verdict.ok {
                    format!("{id}: {}", verdict.summary())
                } else {
                    format!(
                        "{id}: INVALID{}: {}",
                        verdict.classes_label(),
                        verdict.summary()
                    )
                });
                let n = done.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
                job.progress(n, total, id);
                Ok(verdict)
            })
            .collect::<Result<Vec<_>, crate::jobs::Cancelled>>()
    };
    let verdicts = match pool {
        Ok(pool) => pool.install(run),
        Err(_) => run(),
    }?;
    job.progress(total, total, "done");
    Ok(verdicts)
}

#[cfg(test)]
/// A verdict with these failure classes (valid when there are none).
pub(crate) fn test_verdict(id: &str, classes: &[crate::verify::FailureClass]) -> Verdict {
    let problems: Vec<String> = classes
        .iter()
        .map(|c| format!("{} here", c.key()))
        .collect();
    Verdict {
        id: id.into(),
        ok: classes.is_empty(),
        problems: problems.clone(),
        validation: Some(Validation {
            task_id: id.into(),
            image: None,
            initial_passes: true,
            final_fails_initially: true,
            oracle_passes: Some(classes.is_empty()),
            problems,
            notes: Vec::new(),
            failure_classes: classes.to_vec(),
            blocker: classes.first().map(|c| crate::verify::Blocker {
                class: *c,
                host: None,
                stand_in: None,
                difference: None,
                line: Some(format!("{} here", c.key())),
            }),
            initial: None,
            final_on_initial: None,
            baseline: None,
            oracle: None,
            oracle_output: None,
            duration: std::time::Duration::from_secs(2),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Workspace;
    use crate::workbench::blockers::blockers_by_class;
    use crate::workbench::generate::{offline_into, OfflineRequest};

    #[test]
    fn a_backend_that_did_not_start_makes_sound_tasks_invalid_with_why() {
        let dir = tempfile::tempdir().unwrap();
        let mut ws = Workspace::open(dir.path()).unwrap();
        let (job, _rx) = JobContext::standalone("validate");
        let req = OfflineRequest {
            count: 1,
            seed: 1,
            ..OfflineRequest::default()
        };
        offline_into(&mut ws, &req, &job).unwrap();
        let id = ws.task_ids().unwrap().remove(0);
        let v = validate_task(&ws.tasks_dir(), &Err("no sandbox here".into()), &id);
        assert!(!v.ok);
        assert_eq!(v.problems, vec!["no sandbox here".to_string()]);
        assert_eq!(v.summary(), "no sandbox here");
        let missing = validate_task(&ws.tasks_dir(), &Err("unused".into()), "no-such-task");
        assert!(
            !missing.ok && missing.problems[0] != "unused",
            "{missing:?}"
        );
    }

    #[test]
    fn the_summary_counts_the_invalid_tasks_by_class() {
        use crate::verify::FailureClass::{BuildNetwork, OracleFails};
        let many = [
            test_verdict("a", &[]),
            test_verdict("b", &[OracleFails]),
            test_verdict("c", &[BuildNetwork]),
            test_verdict("d", &[OracleFails]),
            Verdict::invalid("e", vec!["task.toml: bad".into()]),
        ];
        assert_eq!(
            verdicts_summary(&many),
            "1/5 valid; invalid: 2 oracle-fails, 1 build-network, 1 without a class"
        );
        assert_eq!(verdicts_summary(&many[..1]).split(':').next(), Some("a"));
        assert_eq!(
            verdicts_summary(&many[1..2]),
            "b: INVALID [oracle-fails]: oracle-fails here"
        );
        assert_eq!(verdicts_summary(&many[..0]), "0/0 valid");
    }

    #[test]
    fn invalid_tasks_are_grouped_by_first_blocker_with_what_it_names() {
        use crate::verify::FailureClass::{BuildNetwork, OracleFails, StandInDifference};
        let mut net = test_verdict("net", &[BuildNetwork, OracleFails]);
        net.validation.as_mut().unwrap().blocker = Some(Blocker {
            class: BuildNetwork,
            host: Some("github.com".into()),
            stand_in: None,
            difference: None,
            line: Some("curl: (6) Could not resolve host: github.com".into()),
        });
        let mut pin = test_verdict("pin", &[StandInDifference]);
        pin.validation.as_mut().unwrap().blocker = Some(Blocker {
            class: StandInDifference,
            host: None,
            stand_in: Some("localhost/stand-in/debian:trixie".into()),
            difference: Some("version r-base-core=4.3.3-2build2 is not in its archive".into()),
            line: None,
        });
        let many = [
            test_verdict("ok", &[]),
            net,
            test_verdict("oracle", &[OracleFails]),
            pin,
            test_verdict("oracle-2", &[OracleFails]),
            Verdict::invalid("refused", vec!["task.toml: bad\nmore".into()]),
        ];
        let lines = blockers_by_class(many.iter().filter(|v| !v.ok).map(Invalid::of));
        assert_eq!(
            lines,
            [
                "oracle-fails: 2 tasks",
                "  oracle: oracle-fails here",
                "  oracle-2: oracle-fails here",
                "build-network: 1 task",
                "  net: github.com cannot be reached",
                "stand-in-difference: 1 task",
                "  pin: stand-in localhost/stand-in/debian:trixie: version r-base-core=4.3.3-2build2 is not in its archive",
                "without a class: 1 task",
                "  refused: task.toml: bad",
            ]
        );
        // The count is by first blocker: `net` is counted once.
        assert_eq!(
            verdicts_summary(&many),
            "1/6 valid; invalid: 2 oracle-fails, 1 build-network, 1 stand-in-difference, 1 without a class"
        );
        assert!(blockers_by_class(many[..1].iter().filter(|v| !v.ok).map(Invalid::of)).is_empty());
    }
}
