//! The jobs journal: every background job's kind, parameters, status and
//! progress, so that a job outlives the process that ran it (it is marked
//! interrupted, never silently lost).

use rusqlite::{params, Row};
use serde::Serialize;

use super::{now, StoreError, Workspace};

/// One journalled job.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JobRow {
    /// `<kind>-<UTC timestamp>-<n>`, assigned by the job manager.
    pub id: String,
    /// What the job does (`eval`, `validate`, `generate`, `generate-offline`, `train`), as the launcher names it.
    pub kind: String,
    /// The job's parameters as given by the launcher, as JSON.
    pub params: serde_json::Value,
    /// queued | running | succeeded | empty | failed | cancelled |
    /// interrupted
    pub status: String,
    /// 0.0 ..= 1.0
    pub progress: f64,
    /// The last stage, result or error.
    pub message: String,
    /// When the job was started (RFC 3339).
    pub created_at: String,
    /// When status, progress or message last changed (RFC 3339).
    pub updated_at: String,
}

fn job_from_row(r: &Row<'_>) -> rusqlite::Result<JobRow> {
    let params: String = r.get(2)?;
    Ok(JobRow {
        id: r.get(0)?,
        kind: r.get(1)?,
        params: serde_json::from_str(&params).unwrap_or_default(),
        status: r.get(3)?,
        progress: r.get(4)?,
        message: r.get(5)?,
        created_at: r.get(6)?,
        updated_at: r.get(7)?,
    })
}

impl Workspace {
    /// Journal a new job.
    pub fn insert_job(
        &self,
        id: &str,
        kind: &str,
        params: &serde_json::Value,
    ) -> Result<(), StoreError> {
        let ts = now();
        self.conn.execute(
            "INSERT INTO jobs (id, kind, params, status, created_at, updated_at, owner_pid) VALUES (?1, ?2, ?3, 'running', ?4, ?4, ?5)",
            params![id, kind, params.to_string(), ts, std::process::id()],
        )?;
        Ok(())
    }

    /// Update a job's status, progress and message.
    pub fn update_job(
        &self,
        id: &str,
        status: &str,
        progress: f64,
        message: &str,
    ) -> Result<(), StoreError> {
        self.conn.execute(
            "UPDATE jobs SET status = ?1, progress = ?2, message = ?3, updated_at = ?4 WHERE id = ?5",
            params![status, progress, message, now(), id],
        )?;
        Ok(())
    }

    /// All jobs, newest first.
    pub fn list_jobs(&self) -> Result<Vec<JobRow>, StoreError> {
        let mut stmt = self.conn.prepare(
            "SELECT id, kind, params, status, progress, message, created_at, updated_at FROM jobs ORDER BY created_at DESC, id DESC",
        )?;
        let rows = stmt.query_map([], job_from_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Mark jobs journalled as running by a process that is gone as
    /// interrupted (jobs of live processes, e.g. another TUI, are left
    /// alone); returns how many.
    pub fn mark_interrupted_jobs(&self) -> Result<usize, StoreError> {
        let mut stmt = self
            .conn
            .prepare("SELECT id, owner_pid FROM jobs WHERE status IN ('queued', 'running')")?;
        let open: Vec<(String, Option<i64>)> = stmt
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<Result<_, _>>()?;
        let mut n = 0;
        for (id, pid) in open {
            let alive = pid.is_some_and(|p| {
                p as u32 != std::process::id()
                    && std::path::Path::new(&format!("/proc/{p}")).exists()
            });
            if !alive {
                n += self.conn.execute(
                    "UPDATE jobs SET status = 'interrupted', updated_at = ?1 WHERE id = ?2",
                    params![now(), id],
                )?;
            }
        }
        Ok(n)
    }
}
