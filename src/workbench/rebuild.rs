//! Rebuilding the workspace index from its files: `endless workspace
//! rebuild`, and what the TUI and the CLI do when `endless.db` is missing
//! or corrupt ([`open_rebuilding`], which also records the episodes of a
//! killed process as interrupted). The files are the source of truth:
//! task bundles with their `curation.json`, and under `runs/` every
//! finished episode's result with its `.review`. Nothing the user curated
//! is lost; the jobs journal is not rebuilt (it is a log, not curation).

use std::path::Path;

use anyhow::{Context as _, Result};
use serde::Serialize;

use super::cancel::CANCELLED;
use super::interrupted::run_kind;
use crate::agent::{index_episode, load_run};
use crate::plural::count;
use crate::store::{Recovered, Workspace};

/// What a rebuild found and indexed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RebuildReport {
    /// Task bundles indexed.
    pub tasks: usize,
    /// Of those, tasks with curation (status, rating, notes, tags, pass@k).
    pub curated_tasks: usize,
    /// Runs with finished episodes.
    pub runs: usize,
    /// Finished episodes indexed.
    pub episodes: usize,
    /// Of those, episodes with a review (rating, label, notes).
    pub reviewed_episodes: usize,
    /// Of those, episodes whose process died without a result, recorded
    /// now as `interrupted`.
    pub interrupted: usize,
    /// Files that could not be used, each with why (the rest is rebuilt).
    pub problems: Vec<String>,
}

impl RebuildReport {
    /// One line for people.
    pub fn summary(&self) -> String {
        let mut s = format!(
            "{} ({} curated), {} in {} ({} reviewed)",
            count(self.tasks, "task"),
            self.curated_tasks,
            count(self.episodes, "episode"),
            count(self.runs, "run"),
            self.reviewed_episodes
        );
        if self.interrupted > 0 {
            s.push_str(&format!(
                "; {} interrupted episodes recorded",
                self.interrupted
            ));
        }
        if !self.problems.is_empty() {
            s.push_str(&format!("; {} skipped", count(self.problems.len(), "file")));
        }
        s
    }
}

/// Rebuild the index of `ws` from its files: every bundle with its
/// curation, every finished episode (but those a cancel cut short, which
/// never count) with its review. Curation only in the index (written before
/// the files existed) is written out to files, so it is kept too.
pub fn rebuild_index(ws: &Workspace) -> Result<RebuildReport> {
    let mut report = RebuildReport::default();
    ws.reconcile().context("indexing the task bundles")?;
    for id in ws.task_ids()? {
        report.tasks += 1;
        match ws.sync_task_curation(&id) {
            Ok(true) => report.curated_tasks += 1,
            Ok(false) => {}
            Err(e) => report.problems.push(e.to_string()),
        }
    }
    report.problems.extend(reindex_audits(ws)?);
    let runs_dir = ws.runs_dir();
    let mut run_ids: Vec<String> = std::fs::read_dir(&runs_dir)
        .with_context(|| format!("reading {}", runs_dir.display()))?
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .filter(|n| !n.starts_with('.'))
        .collect();
    run_ids.sort();
    // Episodes whose process died without a result get one first.
    report.interrupted =
        super::interrupted::record_interrupted_runs(ws, run_ids.iter().map(String::as_str))?.len();
    for run_id in run_ids {
        let episodes: Vec<_> = load_run(&runs_dir.join(&run_id))
            .into_iter()
            .filter(|e| !e.error.as_deref().is_some_and(|m| m.contains(CANCELLED)))
            .collect();
        let Some(first) = episodes.first() else {
            continue;
        };
        ws.upsert_run(
            &run_id,
            run_kind(&run_id),
            &first.policy,
            &serde_json::json!({ "rebuilt": true }),
        )?;
        report.runs += 1;
        for e in &episodes {
            index_episode(ws, &run_id, e)?;
            report.episodes += 1;
            let row = ws.episode_row(&run_id, &e.task, e.sample)?;
            match ws.sync_episode_review(&row) {
                Ok(true) => report.reviewed_episodes += 1,
                Ok(false) => {}
                Err(e) => report.problems.push(e.to_string()),
            }
        }
    }
    Ok(report)
}

/// Open the workspace at `root`; when its `endless.db` was missing (the
/// workspace has files) or corrupt (moved aside), rebuild the index from
/// the files and say so (`Some(message)`).
pub fn open_rebuilding(root: &Path) -> Result<(Workspace, Option<String>)> {
    let (ws, recovered) = Workspace::open_recovering(root)
        .with_context(|| format!("opening workspace {}", root.display()))?;
    let Some(recovered) = recovered else {
        // Episodes of a killed process become interrupted results; a
        // failure here must not keep the workspace from opening.
        if let Err(e) = super::interrupted::record_interrupted_episodes(&ws) {
            tracing::warn!("{}: recording interrupted episodes: {e:#}", root.display());
        }
        return Ok((ws, None));
    };
    let report = rebuild_index(&ws).context("rebuilding the workspace index from its files")?;
    let why = match recovered {
        Recovered::Missing => "endless.db was missing".to_string(),
        Recovered::Corrupt { moved_to } => {
            format!("endless.db was corrupt (kept as {})", moved_to.display())
        }
    };
    let message = format!(
        "{why}: rebuilt the index from the files: {}",
        report.summary()
    );
    tracing::warn!("{}: {message}", root.display());
    Ok((ws, Some(message)))
}

/// Make the audit index agree with the `audit.json` files: index every
/// report, drop rows whose file is gone. Returns the files that could not
/// be used, each with why.
pub fn reindex_audits(ws: &Workspace) -> anyhow::Result<Vec<String>> {
    let mut problems = Vec::new();
    for id in ws.task_ids()? {
        if let Err(e) = ws.index_audit_file(&id) {
            problems.push(format!("{id}: {e}"));
        }
    }
    Ok(problems)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::{EndReason, EpisodeResult, Timings};
    use crate::store::{EpisodeRow, TaskStatus};

    fn result(task: &str, sample: u32, error: Option<&str>) -> EpisodeResult {
        let id = crate::agent::EpisodeId {
            task: task.into(),
            category: "c".into(),
            complexity: None,
            sample,
            policy: "oracle".into(),
        };
        let mut r = EpisodeResult::failed_to_start(id, "x".into(), Timings::default());
        r.error = error.map(String::from);
        r.end_reason = EndReason::Done;
        r
    }

    fn write(ws: &Workspace, run: &str, r: &EpisodeResult) {
        let dir = ws.runs_dir().join(run).join("episodes").join(&r.task);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join(format!("{}.json", r.sample)),
            serde_json::to_vec(r).unwrap(),
        )
        .unwrap();
    }

    fn task(id: &str) -> crate::task::Task {
        crate::task::Task::minimal(id)
    }

    /// Issue 47 item 3: `workspace rebuild` records an episode whose
    /// process died without a result (a run the index never saw) as
    /// interrupted, indexes it, says so, and does it once.
    #[test]
    fn rebuild_records_an_episode_whose_process_died_as_interrupted() {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let owner = crate::agent::EpisodeOwner::of(child.id());
        child.wait().unwrap();
        let Some(owner) = owner.or_else(|| {
            // Gone before it was looked at: any pid of this host that is
            // not running will do.
            let host = crate::agent::EpisodeOwner::current()?.host;
            Some(crate::agent::EpisodeOwner {
                pid: child.id(),
                start: 0,
                host,
            })
        }) else {
            return; // no /proc
        };
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::open(dir.path()).unwrap();
        let ep = ws.runs_dir().join("eval-k").join("episodes").join("t");
        std::fs::create_dir_all(&ep).unwrap();
        let start = serde_json::json!({"type": "start", "task": "t", "sample": 3,
            "policy": "oracle", "owner": owner});
        std::fs::write(ep.join("3.jsonl"), format!("{start}\n")).unwrap();
        let report = rebuild_index(&ws).unwrap();
        assert_eq!((report.episodes, report.interrupted), (1, 1), "{report:?}");
        assert!(
            report.summary().contains("1 interrupted episodes recorded"),
            "{}",
            report.summary()
        );
        let eps = ws.list_episodes(None).unwrap();
        assert_eq!(
            (
                eps[0].run_id.as_str(),
                eps[0].sample,
                eps[0].end_reason.as_str()
            ),
            ("eval-k", 3, "interrupted")
        );
        assert!(ep.join("3.json").exists());
        let again = rebuild_index(&ws).unwrap();
        assert_eq!((again.episodes, again.interrupted), (1, 0));
    }

    #[test]
    fn a_deleted_or_corrupt_database_is_rebuilt_with_nothing_lost() {
        let dir = tempfile::tempdir().unwrap();
        {
            let ws = Workspace::open(dir.path()).unwrap();
            ws.add_task(&task("t"), TaskStatus::Candidate).unwrap();
            ws.set_status("t", TaskStatus::Rejected).unwrap();
            ws.set_notes("t", "wrong tests").unwrap();
            ws.upsert_run("eval-1", "eval", "oracle", &serde_json::json!({}))
                .unwrap();
            let mut taken = result("t", 1, None);
            taken.taken_over = Some(crate::agent::Takeover {
                turn: 1,
                step: 0,
                at: "2026-01-01T00:00:00Z".into(),
                after_secs: 1.0,
                human_steps: 1,
                held_secs: 2.0,
            });
            for r in [result("t", 0, None), taken] {
                write(&ws, "eval-1", &r);
                index_episode(&ws, "eval-1", &r).unwrap();
            }
            // Cut short by a cancel: never indexed, and not by a rebuild.
            write(&ws, "eval-1", &result("t", 2, Some(CANCELLED)));
            ws.rate_episode("eval-1", "t", 1, Some(5), Some("agent_error"), "nice")
                .unwrap();
        }
        let check = |ws: &Workspace| {
            let row = ws.task_row("t").unwrap();
            assert_eq!(
                (row.status, row.notes.as_str()),
                (TaskStatus::Rejected, "wrong tests")
            );
            let eps: Vec<EpisodeRow> = ws.list_episodes(None).unwrap();
            assert_eq!(eps.len(), 2, "{eps:?}");
            assert_eq!(
                (
                    eps[1].rating,
                    eps[1].label.as_deref(),
                    eps[1].notes.as_str()
                ),
                (Some(5), Some("agent_error"), "nice")
            );
            // The take-over mark comes back from the result files.
            assert_eq!((eps[0].taken_over, eps[1].taken_over), (false, true));
            assert_eq!(ws.list_runs().unwrap()[0].kind, "eval");
        };
        // Deleted.
        for f in ["endless.db", "endless.db-wal", "endless.db-shm"] {
            let _ = std::fs::remove_file(dir.path().join(f));
        }
        let (ws, said) = open_rebuilding(dir.path()).unwrap();
        let said = said.unwrap();
        assert!(said.contains("was missing"), "{said}");
        assert!(said.contains("2 episodes in 1 run (1 reviewed)"), "{said}");
        check(&ws);
        drop(ws);
        // Opening again finds nothing to mend.
        assert!(open_rebuilding(dir.path()).unwrap().1.is_none());
        // Corrupt.
        for f in ["endless.db-wal", "endless.db-shm"] {
            let _ = std::fs::remove_file(dir.path().join(f));
        }
        std::fs::write(dir.path().join("endless.db"), vec![b'x'; 8192]).unwrap();
        let (ws, said) = open_rebuilding(dir.path()).unwrap();
        assert!(said.unwrap().contains("was corrupt"));
        check(&ws);
        let kept = std::fs::read_dir(dir.path()).unwrap().flatten().any(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("endless.db.corrupt-")
        });
        assert!(kept, "the broken file is kept");
        // An explicit rebuild of a healthy index changes nothing.
        let report = rebuild_index(&ws).unwrap();
        assert_eq!((report.tasks, report.curated_tasks), (1, 1));
        assert_eq!((report.episodes, report.reviewed_episodes), (2, 1));
        assert!(report.problems.is_empty(), "{:?}", report.problems);
        check(&ws);
        // A brand-new workspace has nothing to rebuild.
        let fresh = tempfile::tempdir().unwrap();
        assert!(open_rebuilding(fresh.path()).unwrap().1.is_none());
        assert_eq!(run_kind("eval-abc"), "eval");
        assert_eq!(run_kind("odd"), "run");
    }
}
