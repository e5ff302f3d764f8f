//! A task's row in the index as every path writes it: its curation status
//! and the upsert that indexes a bundle (used by the workspace, imports and
//! merges alike).

use rusqlite::params;
use serde::{Deserialize, Serialize};

use super::{now, StoreError};
use crate::task::Task;

/// Curation status of a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum TaskStatus {
    /// Not yet reviewed; imported and procgen tasks start here.
    Candidate,
    /// Kept; tasks that pass the LLM pipeline's filters start here.
    Accepted,
    /// Reviewed and turned down; left out when runs select all tasks.
    Rejected,
    /// Set aside; left out when runs select all tasks.
    Archived,
}

impl TaskStatus {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            TaskStatus::Candidate => "candidate",
            TaskStatus::Accepted => "accepted",
            TaskStatus::Rejected => "rejected",
            TaskStatus::Archived => "archived",
        }
    }

    /// The status stored as `s` (unknown names read as candidate).
    pub(super) fn parse(s: &str) -> TaskStatus {
        match s {
            "accepted" => TaskStatus::Accepted,
            "rejected" => TaskStatus::Rejected,
            "archived" => TaskStatus::Archived,
            _ => TaskStatus::Candidate,
        }
    }
}

/// Index `task` through any connection or transaction. A row without pass@k
/// takes it from the bundle's stage-4 record (`[provenance.solvability]`).
pub(crate) fn index_task_in(
    conn: &rusqlite::Connection,
    task: &Task,
    status: TaskStatus,
) -> Result<(), StoreError> {
    let t = &task.meta.task;
    let ts = now();
    let recorded = task
        .meta
        .provenance
        .solvability
        .as_ref()
        .map(|s| &s.pass_at_k)
        .filter(|p| !p.is_empty())
        .and_then(|p| serde_json::to_string(p).ok())
        .unwrap_or_else(|| "{}".into());
    conn.execute(
        "INSERT INTO tasks (id, name, category, complexity, scenario, tags, status, source_format, instruction, created_at, updated_at, pass_at_k)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?10, ?11)
         ON CONFLICT (id) DO UPDATE SET name = excluded.name, category = excluded.category,
             complexity = excluded.complexity, scenario = excluded.scenario,
             source_format = excluded.source_format, instruction = excluded.instruction,
             pass_at_k = CASE WHEN tasks.pass_at_k = '{}' THEN excluded.pass_at_k ELSE tasks.pass_at_k END,
             updated_at = excluded.updated_at",
        params![
            t.id,
            t.name,
            t.category,
            t.complexity.map(i64::from),
            t.scenario,
            serde_json::to_string(&t.tags).unwrap_or_else(|_| "[]".into()),
            status.as_str(),
            t.source_format,
            task.instruction,
            ts,
            recorded
        ],
    )?;
    Ok(())
}
