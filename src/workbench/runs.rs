//! Which tasks a run covers, run ids, and recording a run's episodes and
//! pass@k in the workspace.

use std::collections::BTreeMap;

use anyhow::{bail, Result};
use sha2::{Digest, Sha256};

use crate::agent::EpisodeResult;
use crate::eval::EvalReport;
use crate::store::{TaskStatus, Workspace};
use crate::task::Task;

/// A run id stable for the same inputs, so a re-run resumes: `<kind>-<hash>`.
pub fn run_id(kind: &str, parts: &[&str]) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update(p.as_bytes());
        h.update([0]);
    }
    format!("{kind}-{}", &hex::encode(h.finalize())[..10])
}

/// Tasks by comma-separated ids or `*` globs; default: all but rejected and archived.
pub fn select_tasks(ws: &Workspace, selection: Option<&str>) -> Result<Vec<Task>> {
    let rows = ws.list_tasks(&Default::default())?;
    let chosen: Vec<String> = match selection {
        None => rows
            .iter()
            .filter(|r| !matches!(r.status, TaskStatus::Rejected | TaskStatus::Archived))
            .map(|r| r.id.clone())
            .collect(),
        Some(sel) => {
            let patterns: Vec<&str> = sel
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .collect();
            let mut out = Vec::new();
            for p in &patterns {
                let matched: Vec<String> = rows
                    .iter()
                    .filter(|r| glob_match(p, &r.id))
                    .map(|r| r.id.clone())
                    .collect();
                if matched.is_empty() {
                    bail!("--tasks: {p:?} matches no task");
                }
                out.extend(matched);
            }
            out.sort();
            out.dedup();
            out
        }
    };
    chosen.iter().map(|id| Ok(ws.load_task(id)?)).collect()
}

/// `*` matches any run of characters; everything else literally.
pub(crate) fn glob_match(pattern: &str, text: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == text;
    }
    let mut rest = text;
    for (i, part) in parts.iter().enumerate() {
        if i == 0 {
            match rest.strip_prefix(part) {
                Some(r) => rest = r,
                None => return false,
            }
        } else if i == parts.len() - 1 {
            return rest.ends_with(part);
        } else {
            match rest.find(part) {
                Some(at) => rest = &rest[at + part.len()..],
                None => return false,
            }
        }
    }
    true
}

/// Index every episode of run `run_id` in the workspace.
pub fn index_episodes(ws: &Workspace, run_id: &str, episodes: &[EpisodeResult]) -> Result<()> {
    for e in episodes {
        crate::agent::index_episode(ws, run_id, e)?;
    }
    Ok(())
}

/// Store each task's pass@k from this evaluation in the index.
pub fn record_pass_at_k(ws: &Workspace, report: &EvalReport) -> Result<()> {
    for t in &report.tasks {
        // `samples` already leaves out infrastructure errors.
        let n = t.samples;
        if n == 0 {
            continue;
        }
        let table: BTreeMap<String, f64> = crate::eval::pass_at_k_table(&[(n, t.passed)])
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
        ws.set_pass_at_k(&t.task, &table)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_and_run_ids() {
        assert!(glob_match("csv-*", "csv-sum-3-c2"));
        assert!(glob_match("*-c2", "csv-sum-3-c2"));
        assert!(glob_match("a*b*c", "axxbyyc"));
        assert!(!glob_match("a*b", "ac"));
        assert!(glob_match("exact", "exact") && !glob_match("exact", "exactly"));
        assert_eq!(
            run_id("eval", &["oracle", "a,b"]),
            run_id("eval", &["oracle", "a,b"])
        );
        assert_ne!(
            run_id("eval", &["oracle", "a,b"]),
            run_id("eval", &["oracle", "ab"])
        );
    }
}
