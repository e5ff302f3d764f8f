//! `endless tasks list|show|import|export|validate|set` (`repair`,
//! `versions` and `restore` are in `repair_cmd`): the workspace's
//! task index and bundles (validation is [`crate::workbench::validate_tasks`]).

use std::path::Path;
use std::process::ExitCode;

use anyhow::{bail, Result};
use rayon::prelude::*;

use super::json::print_json;
use super::progress::{BarStyle, JobBar};
use crate::cli::{ExportFormat, TasksCommand};
use crate::fsutil::AtomicDir;
use crate::jobs::JobContext;
use crate::store::{import_paths, ImportOutcome, TaskFilter, TaskRow, Workspace};
use crate::task::formats::Format;
use crate::task::Task;
use crate::workbench::export::{self, DatasetFormat, Selection};
use crate::workbench::task_search::find_tasks;
use crate::workbench::validate::validate_tasks_with;
use crate::workbench::verdicts::stored_verdict;
use crate::workbench::{shard_run, Context};

/// Run one `endless tasks` subcommand.
pub fn run(ctx: &Context, cmd: TasksCommand) -> Result<ExitCode> {
    let mut ws = ctx.workspace()?;
    match cmd {
        TasksCommand::List {
            status,
            category,
            search,
            json,
        } => {
            let filter = TaskFilter { status, category };
            let rows = find_tasks(&ws, &filter, search.as_deref().unwrap_or_default())?;
            if json {
                print_json(&rows)?;
            } else {
                print_table(&rows);
            }
        }
        TasksCommand::Show { id, json } => {
            let row = ws.task_row(&id)?;
            let task = ws.load_task(&id)?;
            if json {
                print_json(&show_json(&row, &task))?;
            } else {
                print_show(&row, &task);
            }
        }
        TasksCommand::Import {
            paths,
            format,
            on_conflict,
            json,
        } => {
            let report = import_paths(&mut ws, &paths, format.forced(), on_conflict)?;
            if json {
                print_json(&report)?;
            } else {
                for o in &report.outcomes {
                    match o {
                        ImportOutcome::Imported { id, format, .. } => {
                            say!("imported  {id} ({})", format.name())
                        }
                        ImportOutcome::Unchanged { id, .. } => say!("unchanged {id}"),
                        ImportOutcome::Skipped { id, reason, .. } => {
                            say!("skipped   {id}: {reason}")
                        }
                        ImportOutcome::Failed { error, .. } => say_err!("failed    {error}"),
                    }
                }
                say_err!(
                    "{} imported, {} failed, {} found",
                    report.imported(),
                    report.failed(),
                    report.outcomes.len()
                );
            }
            if report.failed() > 0 {
                return Ok(ExitCode::FAILURE);
            }
        }
        TasksCommand::Export {
            ids,
            all,
            status,
            format,
            out,
            dev_count,
            seed,
            json,
            exclude_audit,
        } => {
            let excluded = |ids: Vec<String>| -> Result<Vec<String>> {
                let Some(labels) = exclude_audit.as_deref() else {
                    return Ok(ids);
                };
                let labels = crate::audit::parse_labels(labels)?;
                let (kept, out) = crate::workbench::audit::exclude_audited(&ws, ids, &labels)?;
                say_err!(
                    "--exclude-audit: {} left out",
                    crate::plural::count(out.len(), "task")
                );
                Ok(kept)
            };
            let Some(format) = format.task_format() else {
                let selection = match (all, status) {
                    (true, _) => Selection::All,
                    (false, Some(status)) => Selection::Status(status),
                    (false, None) => Selection::Ids(ids),
                };
                let ids = excluded(export::select(&ws, &selection)?)?;
                let kind = if format == ExportFormat::Jsonl {
                    DatasetFormat::Jsonl
                } else {
                    DatasetFormat::Parquet
                };
                let done = export::export_dataset(
                    &ws,
                    &ctx.protocol(None)?,
                    &ids,
                    kind,
                    &out,
                    dev_count,
                    seed,
                )?;
                if json {
                    print_json(&done)?;
                }
                say_err!(
                    "{} train and {} validation rows written to {}",
                    done.train,
                    done.validation,
                    out.display()
                );
                return Ok(ExitCode::SUCCESS);
            };
            if dev_count.is_some() || seed != 0 {
                bail!("--dev-count and --seed are for datasets (--format skyrl or jsonl)");
            }
            let ids = excluded(match status {
                Some(status) => export::select(&ws, &Selection::Status(status))?,
                None => select(&ws, ids, all)?,
            })?;
            let failed = export(&ws, &ids, format, &out);
            for (id, e) in &failed {
                say_err!("failed {id}: {e}");
            }
            say_err!(
                "{} exported as {} to {}, {} failed",
                ids.len() - failed.len(),
                format.name(),
                out.display(),
                failed.len()
            );
            if !failed.is_empty() {
                return Ok(ExitCode::FAILURE);
            }
        }
        TasksCommand::Validate {
            ids,
            all,
            shard,
            stored,
            concurrency,
            json,
            offline,
        } => {
            let ids = select(&ws, ids, all)?;
            if stored {
                return report_stored(&ws, &ids, json);
            }
            return validate(ctx, ids, shard, concurrency, json, offline);
        }
        TasksCommand::Audit(args) => return super::audit_cmd::run(ctx, args),
        TasksCommand::Repair {
            ids,
            llm,
            model,
            solver_llm,
            solver_model,
            solutions,
            max_env_attempts,
            reseed,
            json,
        } => {
            let req = crate::workbench::repair::RepairRequest {
                ids,
                url: llm,
                model,
                solver_url: solver_llm,
                solver_model,
                solutions,
                max_env_attempts,
                reseed,
            };
            return super::repair_cmd::repair(ctx, &req, json);
        }
        TasksCommand::Versions { id, json } => return super::repair_cmd::versions(ctx, &id, json),
        TasksCommand::Restore { id, version } => {
            return super::repair_cmd::restore(ctx, &id, version)
        }
        TasksCommand::Set {
            ids,
            status,
            rating,
            notes,
            tags,
        } => {
            let fields = SetFields {
                status,
                rating,
                notes: notes.as_deref(),
                tags: tags.as_deref(),
            };
            if fields.is_empty() {
                bail!("nothing to set: give --status, --rating, --notes or --tags");
            }
            for id in &ids {
                for line in set_task(&ws, id, &fields)? {
                    say!("{line}");
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// What `tasks set` changes on each task it names.
struct SetFields<'a> {
    status: Option<crate::store::TaskStatus>,
    /// 1-5; 0 clears it.
    rating: Option<u8>,
    notes: Option<&'a str>,
    tags: Option<&'a [String]>,
}

impl SetFields<'_> {
    fn is_empty(&self) -> bool {
        self.status.is_none()
            && self.rating.is_none()
            && self.notes.is_none()
            && self.tags.is_none()
    }
}

/// Set `fields` on task `id` and say what changed, one line a field:
/// `id: field old -> new`, or `id: field value (unchanged)`.
fn set_task(ws: &Workspace, id: &str, fields: &SetFields<'_>) -> Result<Vec<String>> {
    let before = ws.task_row(id)?;
    if let Some(s) = fields.status {
        ws.set_status(id, s)?;
    }
    if let Some(r) = fields.rating {
        ws.set_rating(id, (r != 0).then_some(r))?;
    }
    if let Some(n) = fields.notes {
        ws.set_notes(id, n)?;
    }
    if let Some(t) = fields.tags {
        ws.set_tags(id, t)?;
    }
    let after = ws.task_row(id)?;
    let rating = |r: Option<u8>| r.map_or("none".to_string(), |r| r.to_string());
    let tags = |t: &[String]| {
        if t.is_empty() {
            "none".to_string()
        } else {
            t.join(",")
        }
    };
    let mut changes = Vec::new();
    if fields.status.is_some() {
        changes.push((
            "status",
            before.status.as_str().to_string(),
            after.status.as_str().to_string(),
        ));
    }
    if fields.rating.is_some() {
        changes.push(("rating", rating(before.rating), rating(after.rating)));
    }
    if fields.notes.is_some() {
        changes.push((
            "notes",
            format!("{:?}", before.notes),
            format!("{:?}", after.notes),
        ));
    }
    if fields.tags.is_some() {
        changes.push(("tags", tags(&before.tags), tags(&after.tags)));
    }
    Ok(changes
        .into_iter()
        .map(|(field, old, new)| {
            if old == new {
                format!("{id}: {field} {new} (unchanged)")
            } else {
                format!("{id}: {field} {old} -> {new}")
            }
        })
        .collect())
}

/// `endless tasks validate IDS [--shard I/N]`: validate (shard `shard` of)
/// the tasks, one line each as they finish; each verdict is stored.
fn validate(
    ctx: &Context,
    ids: Vec<String>,
    shard: Option<crate::store::Shard>,
    concurrency: Option<usize>,
    json: bool,
    offline: bool,
) -> Result<ExitCode> {
    let ws = ctx.workspace()?;
    let (ids, running) = match shard {
        Some(shard) => {
            let key = shard_run::selection_key(
                "validate",
                &ids.iter().map(String::as_str).collect::<Vec<_>>(),
            );
            let total = ids.len();
            let mine = shard.select(ids.clone(), |id| id.as_str());
            let run = shard_run::ShardRun::begin(
                ws.root(),
                shard,
                shard_run::ShardJob {
                    kind: "validate",
                    key,
                    request: serde_json::json!({ "ids": ids }),
                    items: mine.len(),
                    total,
                },
            )?;
            say_err!("shard {shard}: {} of {total} tasks", mine.len());
            // Resumed: tasks validated since the shard first started are
            // not validated again.
            let mine = match run.resumed_since() {
                Some(since) => {
                    let (done, todo): (Vec<String>, Vec<String>) = mine
                        .into_iter()
                        .partition(|id| validated_since(&ws, id, since));
                    if !done.is_empty() {
                        say_err!(
                            "shard {shard}: resuming; {} validated before {} kept (`tasks validate --stored` shows them)",
                            crate::plural::count(done.len(), "task"),
                            if done.len() == 1 { "is" } else { "are" }
                        );
                    }
                    todo
                }
                None => mine,
            };
            (mine, Some(run))
        }
        None => (ids, None),
    };
    let (job, events) = JobContext::standalone("validate");
    // Tasks done, and what is being pulled or built, on a bar
    // (drawn only on a terminal).
    let bar = JobBar::start(
        events,
        BarStyle {
            template: "{spinner} {pos}/{len} tasks {wide_msg}",
            stage_as_message: true,
            print_logs: false,
        },
    );
    let above = bar.bar().clone();
    // One line per task as it finishes, unless `--json`.
    let backend = crate::sandbox::offline::offline_if(ctx.backend()?, offline);
    if offline {
        say_err!("--offline: sessions run without network, also for tasks that ask for it");
    }
    let results = validate_tasks_with(ctx, Ok(backend), &ids, concurrency, &job, |v| {
        if !json {
            above.suspend(|| {
                match v.ok {
                    true => say!("ok      {}", v.id),
                    false => say!(
                        "invalid {}{}: {}",
                        v.id,
                        v.classes_label(),
                        v.problems.join("; ")
                    ),
                }
                if let Some(b) = v.blocker() {
                    say!("        {}: first blocker: {}", v.id, b.label());
                }
                for note in v.notes() {
                    say!("        {}: note: {note}", v.id);
                }
            });
        }
    });
    bar.finish_and_clear();
    let results = results?;
    if let Some(run) = running {
        run.finish()?;
    }
    let bad = results.iter().filter(|r| !r.ok).count();
    if json {
        print_json(&results)?;
    } else {
        print_blockers(
            results
                .iter()
                .filter(|r| !r.ok)
                .map(crate::workbench::blockers::Invalid::of),
        );
    }
    say_err!(
        "{} of {} valid",
        ids.len() - bad,
        crate::plural::count(ids.len(), "task")
    );
    Ok(if bad > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// After the verdicts, the invalid tasks by the class of their first
/// blocker, each with what it names (nothing when all are valid).
fn print_blockers<'a>(invalid: impl IntoIterator<Item = crate::workbench::blockers::Invalid<'a>>) {
    let lines = crate::workbench::blockers::blockers_by_class(invalid);
    if !lines.is_empty() {
        say!();
        say!("invalid tasks by first blocker:");
        for line in lines {
            say!("  {line}");
        }
    }
}

/// Whether task `id` has a verdict stored at or after `since`.
fn validated_since(ws: &Workspace, id: &str, since: chrono::DateTime<chrono::Utc>) -> bool {
    stored_verdict(ws, id).ok().flatten().is_some_and(|v| {
        chrono::DateTime::parse_from_rfc3339(&v.validated_at).is_ok_and(|at| at >= since)
    })
}

/// The failure classes a stored verdict's validation recorded, as
/// ` [a, b]`, or nothing.
fn stored_classes(v: &crate::workbench::verdicts::StoredVerdict) -> String {
    let keys: Vec<&str> = v
        .validation
        .as_ref()
        .and_then(|x| x.get("failure_classes"))
        .and_then(|c| c.as_array())
        .map(|a| a.iter().filter_map(|k| k.as_str()).collect())
        .unwrap_or_default();
    if keys.is_empty() {
        String::new()
    } else {
        format!(" [{}]", keys.join(", "))
    }
}

/// `endless tasks validate IDS --stored`: the verdicts earlier validations
/// stored, validating nothing. A task never validated counts as not valid.
fn report_stored(ws: &Workspace, ids: &[String], json: bool) -> Result<ExitCode> {
    let mut out = Vec::new();
    let mut invalid = Vec::new();
    let (mut bad, mut never) = (0, 0);
    for id in ids {
        match stored_verdict(ws, id)? {
            Some(v) => {
                if !v.ok {
                    bad += 1;
                }
                if !json {
                    match v.ok {
                        true => say!("ok      {id}  ({})", v.validated_at),
                        false => say!(
                            "invalid {id}{}: {}  ({})",
                            stored_classes(&v),
                            v.problems.join("; "),
                            v.validated_at
                        ),
                    }
                    if let Some(b) = v.blocker().filter(|_| !v.ok) {
                        say!("        {id}: first blocker: {}", b.label());
                    }
                }
                out.push(serde_json::to_value(&v)?);
                if !v.ok {
                    invalid.push(v);
                }
            }
            None => {
                never += 1;
                if !json {
                    say!("never   {id}: not validated yet");
                }
                out.push(serde_json::json!({ "id": id, "ok": null }));
            }
        }
    }
    if json {
        print_json(&out)?;
    } else {
        print_blockers(invalid.iter().map(|v| v.invalid()));
    }
    say_err!(
        "{} of {} valid, {bad} invalid, {never} not validated yet",
        ids.len() - bad - never,
        crate::plural::count(ids.len(), "task")
    );
    Ok(if bad + never > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// The ids named, or all of them with `--all`; unknown ids are an error.
fn select(ws: &Workspace, ids: Vec<String>, all: bool) -> Result<Vec<String>> {
    if all {
        return Ok(ws.task_ids()?);
    }
    if ids.is_empty() {
        bail!("name task ids or pass --all");
    }
    for id in &ids {
        if !ws.has_task(id) {
            bail!("no task with id {id:?} in {}", ws.root().display());
        }
    }
    Ok(ids)
}

/// Export each task to `out/<id>` atomically; returns the failures.
pub fn export(ws: &Workspace, ids: &[String], format: Format, out: &Path) -> Vec<(String, String)> {
    if let Err(e) = std::fs::create_dir_all(out) {
        return ids
            .iter()
            .map(|id| (id.clone(), format!("{}: {e}", out.display())))
            .collect();
    }
    let tasks_dir = ws.tasks_dir();
    ids.par_iter()
        .filter_map(|id| {
            let result = crate::task::read_native(&tasks_dir.join(id), &Default::default())
                .map_err(|e| e.to_string())
                .and_then(|task| {
                    let staging = AtomicDir::new(&out.join(id)).map_err(|e| e.to_string())?;
                    format
                        .write(&task, staging.path())
                        .map_err(|e| e.to_string())?;
                    staging.commit().map(|_| ()).map_err(|e| e.to_string())
                });
            result.err().map(|e| (id.clone(), e))
        })
        .collect()
}

fn pass1(row: &TaskRow) -> String {
    row.pass_at_k
        .get("1")
        .map(|p| format!("{p:.2}"))
        .unwrap_or_else(|| "-".into())
}

fn print_table(rows: &[TaskRow]) {
    let w = rows
        .iter()
        .map(|r| r.id.len())
        .max()
        .unwrap_or(2)
        .clamp(2, 48);
    let c = rows
        .iter()
        .map(|r| r.category.len())
        .max()
        .unwrap_or(8)
        .clamp(8, 32);
    say!(
        "{:<w$}  {:<c$}  {:>3}  {:<9}  {:>6}",
        "ID",
        "CATEGORY",
        "CX",
        "STATUS",
        "PASS@1"
    );
    for r in rows {
        let cx = r
            .complexity
            .map(|x| x.to_string())
            .unwrap_or_else(|| "-".into());
        say!(
            "{:<w$}  {:<c$}  {:>3}  {:<9}  {:>6}",
            r.id,
            r.category,
            cx,
            r.status.as_str(),
            pass1(r)
        );
    }
}

fn show_json(row: &TaskRow, task: &Task) -> serde_json::Value {
    let files = |t: &crate::task::FileTree| t.iter().map(|(p, _)| p.clone()).collect::<Vec<_>>();
    serde_json::json!({
        "id": row.id,
        "name": row.name,
        "instruction": task.instruction,
        "truth": task.truth,
        "category": row.category,
        "complexity": row.complexity,
        "scenario": row.scenario,
        "difficulty": task.meta.task.difficulty,
        "tags": row.tags,
        "status": row.status,
        "source_format": row.source_format,
        "pass_at_k": row.pass_at_k,
        "rating": row.rating,
        "notes": row.notes,
        "provenance": task.meta.provenance,
        "agent": task.meta.agent,
        "verifier": task.meta.verifier,
        "environment": { "settings": task.meta.environment, "definition": task.environment_definition().map(|(k, _)| k), "files": files(&task.environment) },
        "tests": files(&task.tests),
        "solution": files(&task.solution),
    })
}

fn print_show(row: &TaskRow, task: &Task) {
    say!("{}  ({})", row.id, row.name);
    say!(
        "category: {}  complexity: {}  status: {}  format: {}",
        row.category,
        row.complexity
            .map(|c| c.to_string())
            .unwrap_or_else(|| "-".into()),
        row.status.as_str(),
        row.source_format
    );
    if !row.tags.is_empty() {
        say!("tags: {}", row.tags.join(", "));
    }
    say!(
        "agent: user {} in {}, {} turns max",
        task.meta.agent.user,
        task.meta.environment.workdir,
        task.meta.agent.max_turns
    );
    say!("\n## Instruction\n{}", task.instruction.trim_end());
    say!(
        "\n## Truth (privileged: never shown to the agent)\n{}",
        task.truth.trim_end()
    );
    let files = |t: &crate::task::FileTree| {
        t.iter()
            .map(|(p, _)| p.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    say!(
        "\nenvironment: {}\ntests: {}\nsolution: {}",
        files(&task.environment),
        files(&task.tests),
        files(&task.solution)
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::TaskStatus;

    #[test]
    fn set_says_what_changed_on_each_field() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::open(dir.path()).unwrap();
        ws.add_task(&Task::minimal("count-words"), TaskStatus::Candidate)
            .unwrap();
        let tags = vec!["easy".to_string(), "text".to_string()];
        let all = SetFields {
            status: Some(TaskStatus::Accepted),
            rating: Some(4),
            notes: Some("check it"),
            tags: Some(&tags),
        };
        assert_eq!(
            set_task(&ws, "count-words", &all).unwrap(),
            [
                "count-words: status candidate -> accepted",
                "count-words: rating none -> 4",
                "count-words: notes \"\" -> \"check it\"",
                "count-words: tags none -> easy,text",
            ]
        );
        let again = SetFields {
            status: Some(TaskStatus::Accepted),
            rating: Some(0),
            notes: None,
            tags: None,
        };
        assert_eq!(
            set_task(&ws, "count-words", &again).unwrap(),
            [
                "count-words: status accepted (unchanged)",
                "count-words: rating 4 -> none",
            ]
        );
        let e = set_task(&ws, "nope", &again).unwrap_err().to_string();
        assert!(e.contains("nope"), "{e}");
    }
}
