//! The task index: one row per accepted bundle under `tasks/`, plus
//! curation data (status, rating, notes, tags, pass@k).

use std::collections::BTreeMap;

use rusqlite::{params, OptionalExtension, Row};
use serde::Serialize;

use super::task_index::{index_task_in, TaskStatus};
use super::{now, StoreError, Workspace};
use crate::task::Task;

/// One indexed task.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TaskRow {
    /// The task id (`[task] id`).
    pub id: String,
    /// `[task] name`.
    pub name: String,
    /// `[task] category`.
    pub category: String,
    /// `[task] complexity` (1-6), if set.
    pub complexity: Option<u8>,
    /// `[task] scenario`.
    pub scenario: String,
    /// Tags: the bundle's when first indexed, then as edited in the index (re-indexing keeps them).
    pub tags: Vec<String>,
    /// Curation status.
    pub status: TaskStatus,
    /// `[task] source_format`: the format the task was imported from.
    pub source_format: String,
    /// pass@k keyed by k, from the latest evaluation or solvability filter.
    pub pass_at_k: BTreeMap<String, f64>,
    /// Curator's rating, 1-5, if given.
    pub rating: Option<u8>,
    /// Curator's free-text notes.
    pub notes: String,
    /// The instruction text, kept for search; not serialized.
    #[serde(skip)]
    pub instruction: String,
    /// When the row was first indexed (RFC 3339).
    pub created_at: String,
    /// When the row last changed (RFC 3339).
    pub updated_at: String,
}

/// Which tasks to list.
#[derive(Debug, Clone, Default)]
pub struct TaskFilter {
    /// Only tasks with this status.
    pub status: Option<TaskStatus>,
    /// Only tasks in this category (exact match).
    pub category: Option<String>,
}

const COLUMNS: &str = "id, name, category, complexity, scenario, tags, status, source_format, pass_at_k, rating, notes, instruction, created_at, updated_at";

fn from_row(r: &Row<'_>) -> rusqlite::Result<TaskRow> {
    let tags: String = r.get(5)?;
    let status: String = r.get(6)?;
    let pass: String = r.get(8)?;
    Ok(TaskRow {
        id: r.get(0)?,
        name: r.get(1)?,
        category: r.get(2)?,
        complexity: r.get::<_, Option<i64>>(3)?.map(|c| c.clamp(0, 255) as u8),
        scenario: r.get(4)?,
        tags: serde_json::from_str(&tags).unwrap_or_default(),
        status: TaskStatus::parse(&status),
        source_format: r.get(7)?,
        pass_at_k: serde_json::from_str(&pass).unwrap_or_default(),
        rating: r.get::<_, Option<i64>>(9)?.map(|c| c.clamp(0, 5) as u8),
        notes: r.get(10)?,
        instruction: r.get(11)?,
        created_at: r.get(12)?,
        updated_at: r.get(13)?,
    })
}

impl Workspace {
    /// Insert or refresh the index row of `task` (curation data is kept).
    pub fn index_task(&self, task: &Task, status: TaskStatus) -> Result<(), StoreError> {
        index_task_in(&self.conn, task, status)
    }

    /// One task's row.
    pub fn task_row(&self, id: &str) -> Result<TaskRow, StoreError> {
        self.conn
            .query_row(
                &format!("SELECT {COLUMNS} FROM tasks WHERE id = ?1"),
                [id],
                from_row,
            )
            .optional()?
            .ok_or_else(|| StoreError::NoSuchTask(id.into()))
    }

    /// Rows matching `filter`, ordered by id.
    pub fn list_tasks(&self, filter: &TaskFilter) -> Result<Vec<TaskRow>, StoreError> {
        let mut sql = format!("SELECT {COLUMNS} FROM tasks WHERE 1 = 1");
        let mut args: Vec<String> = Vec::new();
        if let Some(s) = filter.status {
            args.push(s.as_str().into());
            sql.push_str(&format!(" AND status = ?{}", args.len()));
        }
        if let Some(c) = &filter.category {
            args.push(c.clone());
            sql.push_str(&format!(" AND category = ?{}", args.len()));
        }
        sql.push_str(" ORDER BY id");
        let mut stmt = self.conn.prepare(&sql)?;
        let rows = stmt.query_map(rusqlite::params_from_iter(args.iter()), from_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Set the curation status.
    pub fn set_status(&self, id: &str, status: TaskStatus) -> Result<(), StoreError> {
        self.update(id, "status", &status.as_str())
    }

    /// Set (or clear) the 1-5 rating.
    pub fn set_rating(&self, id: &str, rating: Option<u8>) -> Result<(), StoreError> {
        if let Some(r) = rating {
            if !(1..=5).contains(&r) {
                return Err(StoreError::Invalid(format!("rating {r} is outside 1..=5")));
            }
        }
        self.update(id, "rating", &rating.map(i64::from))
    }

    /// Replace the notes.
    pub fn set_notes(&self, id: &str, notes: &str) -> Result<(), StoreError> {
        self.update(id, "notes", &notes)
    }

    /// Replace the tags in the index (the bundle's own tags are not touched).
    pub fn set_tags(&self, id: &str, tags: &[String]) -> Result<(), StoreError> {
        let json = serde_json::to_string(tags).unwrap_or_else(|_| "[]".into());
        self.update(id, "tags", &json)
    }

    /// Record pass@k (keyed by k) for a task.
    pub fn set_pass_at_k(
        &self,
        id: &str,
        pass_at_k: &BTreeMap<String, f64>,
    ) -> Result<(), StoreError> {
        let json = serde_json::to_string(pass_at_k).unwrap_or_else(|_| "{}".into());
        self.update(id, "pass_at_k", &json)
    }

    fn update(
        &self,
        id: &str,
        column: &str,
        value: &dyn rusqlite::ToSql,
    ) -> Result<(), StoreError> {
        let n = self.conn.execute(
            &format!("UPDATE tasks SET {column} = ?1, updated_at = ?2 WHERE id = ?3"),
            params![value, now(), id],
        )?;
        if n == 0 {
            return Err(StoreError::NoSuchTask(id.into()));
        }
        self.save_task_curation(id)
    }

    /// Ids of all indexed tasks.
    pub fn task_ids(&self) -> Result<Vec<String>, StoreError> {
        let mut stmt = self.conn.prepare("SELECT id FROM tasks ORDER BY id")?;
        let ids = stmt.query_map([], |r| r.get(0))?;
        Ok(ids.collect::<Result<_, _>>()?)
    }

    /// Remove a task's index row (not its files).
    pub(crate) fn unindex_task(&self, id: &str) -> Result<(), StoreError> {
        self.conn.execute("DELETE FROM tasks WHERE id = ?1", [id])?;
        Ok(())
    }
}
