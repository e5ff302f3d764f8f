//! The jobs journal: every background job's kind, parameters, status and
//! progress, so that a job outlives the process that ran it (it is marked
//! interrupted, never silently lost); its log lines are kept in
//! `<workspace>/jobs/<id>.log`.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;

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

    /// Name the run job `id` works on (`params.run`): the id the job is
    /// shown by.
    pub fn set_job_run(&self, id: &str, run: &str) -> Result<(), StoreError> {
        let params_json: String = self
            .conn
            .query_row("SELECT params FROM jobs WHERE id = ?1", [id], |r| r.get(0))
            .map_err(|e| match e {
                rusqlite::Error::QueryReturnedNoRows => {
                    StoreError::Invalid(format!("no job {id} in the journal"))
                }
                e => StoreError::Sql(e),
            })?;
        let mut value: serde_json::Value =
            serde_json::from_str(&params_json).unwrap_or_else(|_| serde_json::json!({}));
        if !value.is_object() {
            value = serde_json::json!({ "params": value });
        }
        value["run"] = serde_json::Value::String(run.to_string());
        self.conn.execute(
            "UPDATE jobs SET params = ?1 WHERE id = ?2",
            params![value.to_string(), id],
        )?;
        Ok(())
    }

    /// Where job `id`'s log lines are kept: `<workspace>/jobs/<id>.log`.
    /// An id that is not a plain file name is refused.
    pub fn job_log_path(&self, id: &str) -> Result<PathBuf, StoreError> {
        let plain = !id.is_empty()
            && id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
            && !id.starts_with('.');
        if !plain {
            return Err(StoreError::Invalid(format!(
                "job id {id:?}: expected letters, digits, '-', '_' and '.'"
            )));
        }
        Ok(self.root().join("jobs").join(format!("{id}.log")))
    }

    /// Open job `id`'s log for appending (creating `jobs/` and the file).
    pub fn create_job_log(&self, id: &str) -> Result<std::fs::File, StoreError> {
        let path = self.job_log_path(id)?;
        if let Some(dir) = path.parent() {
            // trusted: this workspace's own job logs
            std::fs::create_dir_all(dir).map_err(StoreError::io(dir))?;
        }
        // trusted: this workspace's own job logs
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(StoreError::io(&path))
    }

    /// The last `max` lines of job `id`'s log (none if it kept no log).
    pub fn job_log_tail(&self, id: &str, max: usize) -> Result<Vec<String>, StoreError> {
        let path = self.job_log_path(id)?;
        // trusted: this workspace's own job logs
        let file = match std::fs::File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(StoreError::io(&path)(e)),
        };
        let mut tail = std::collections::VecDeque::with_capacity(max.min(4096));
        for line in BufReader::new(file).split(b'\n') {
            let line = line.map_err(StoreError::io(&path))?;
            tail.push_back(String::from_utf8_lossy(&line).into_owned());
            if tail.len() > max {
                tail.pop_front();
            }
        }
        Ok(tail.into())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_jobs_log_and_run_outlive_the_process() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::open(dir.path()).unwrap();
        ws.insert_job("eval-1", "eval", &serde_json::json!({"policy": "oracle"}))
            .unwrap();
        ws.set_job_run("eval-1", "eval-abc").unwrap();
        let row = ws.list_jobs().unwrap().remove(0);
        assert_eq!(row.params["run"], "eval-abc");
        assert_eq!(row.params["policy"], "oracle", "the other params stay");
        assert!(ws.set_job_run("nope", "x").is_err());
        {
            use std::io::Write;
            let mut f = ws.create_job_log("eval-1").unwrap();
            for i in 0..5 {
                writeln!(f, "line {i}").unwrap();
            }
        }
        let reopened = Workspace::open(dir.path()).unwrap();
        assert_eq!(
            reopened.job_log_tail("eval-1", 2).unwrap(),
            vec!["line 3".to_string(), "line 4".to_string()]
        );
        assert!(reopened.job_log_tail("other", 2).unwrap().is_empty());
        assert!(reopened.job_log_path("../x").is_err());
    }
}
