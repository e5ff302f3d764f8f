//! The audit index: each task's latest audit summarised in one row
//! (labels, findings, mutation score, check statuses), for filters and
//! columns (`--exclude-audit`, the TUI's Tasks view). The report itself is
//! `tasks/<id>/audit.json` (see [`crate::audit::file`]); rows are rebuilt
//! from those files.

use std::collections::BTreeMap;

use rusqlite::{params, OptionalExtension, Row};
use serde::Serialize;

use crate::store::{StoreError, Workspace};

/// One task's audit in the index.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AuditRow {
    /// The task.
    pub task_id: String,
    /// The distinct labels of its findings.
    pub labels: Vec<String>,
    /// How many findings.
    pub findings: u32,
    /// Mutants killed and run, when the weak-tests check ran.
    pub mutation: Option<(u32, u32)>,
    /// Whether every check ran to the end.
    pub complete: bool,
    /// Each check's status word (`ok`, `finding`, `skipped`, `out-of-time`, `error`).
    pub checks: BTreeMap<String, String>,
    /// When (RFC 3339).
    pub audited_at: String,
}

impl AuditRow {
    /// The index row of `report`.
    pub fn of(report: &super::AuditReport) -> AuditRow {
        AuditRow {
            task_id: report.task_id.clone(),
            labels: report.labels(),
            findings: report.findings().count() as u32,
            mutation: report.mutation.map(|m| (m.killed, m.total)),
            complete: report.complete(),
            checks: report
                .checks
                .iter()
                .map(|c| (c.check.name().to_string(), c.status.word().to_string()))
                .collect(),
            audited_at: report.audited_at.clone(),
        }
    }
}

fn row_of(r: &Row<'_>) -> rusqlite::Result<AuditRow> {
    let labels: String = r.get(1)?;
    let checks: String = r.get(6)?;
    let killed: Option<i64> = r.get(3)?;
    let total: Option<i64> = r.get(4)?;
    Ok(AuditRow {
        task_id: r.get(0)?,
        labels: serde_json::from_str(&labels).unwrap_or_default(),
        findings: r.get::<_, i64>(2)?.max(0) as u32,
        mutation: killed
            .zip(total)
            .map(|(k, t)| (k.max(0) as u32, t.max(0) as u32)),
        complete: r.get::<_, i64>(5)? != 0,
        checks: serde_json::from_str(&checks).unwrap_or_default(),
        audited_at: r.get(7)?,
    })
}

const COLUMNS: &str =
    "task_id, labels, findings, mutation_killed, mutation_total, complete, checks, audited_at";

impl Workspace {
    /// Index a task's audit (replacing the one before); the task must be
    /// indexed.
    pub fn index_audit(&self, row: &AuditRow) -> Result<(), StoreError> {
        if !self.has_task(&row.task_id) {
            return Err(StoreError::NoSuchTask(row.task_id.clone()));
        }
        self.conn.execute(
            &format!(
                "INSERT OR REPLACE INTO task_audits ({COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)"
            ),
            params![
                row.task_id,
                serde_json::to_string(&row.labels).unwrap_or_else(|_| "[]".into()),
                i64::from(row.findings),
                row.mutation.map(|m| i64::from(m.0)),
                row.mutation.map(|m| i64::from(m.1)),
                i64::from(row.complete),
                serde_json::to_string(&row.checks).unwrap_or_else(|_| "{}".into()),
                row.audited_at,
            ],
        )?;
        Ok(())
    }

    /// Drop a task's audit from the index.
    pub fn unindex_audit(&self, id: &str) -> Result<(), StoreError> {
        self.conn
            .execute("DELETE FROM task_audits WHERE task_id = ?1", [id])?;
        Ok(())
    }

    /// A task's indexed audit, if it has one.
    pub fn audit_row(&self, id: &str) -> Result<Option<AuditRow>, StoreError> {
        Ok(self
            .conn
            .query_row(
                &format!("SELECT {COLUMNS} FROM task_audits WHERE task_id = ?1"),
                [id],
                row_of,
            )
            .optional()?)
    }

    /// Every indexed audit, by task id.
    pub fn audit_rows(&self) -> Result<Vec<AuditRow>, StoreError> {
        let mut stmt = self.conn.prepare(&format!(
            "SELECT {COLUMNS} FROM task_audits ORDER BY task_id"
        ))?;
        let rows = stmt.query_map([], row_of)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Index task `id`'s `audit.json` (drop its row when it has none; a
    /// bad file is an error naming it).
    pub fn index_audit_file(&self, id: &str) -> Result<(), StoreError> {
        match crate::audit::file::read(&self.task_dir(id)) {
            Ok(Some(report)) => self.index_audit(&AuditRow::of(&report)),
            Ok(None) => self.unindex_audit(id),
            Err(e) => Err(StoreError::Invalid(e.to_string())),
        }
    }

    /// The ids of the tasks whose audit has any of `labels`.
    pub fn tasks_with_audit_labels(&self, labels: &[String]) -> Result<Vec<String>, StoreError> {
        Ok(self
            .audit_rows()?
            .into_iter()
            .filter(|r| r.labels.iter().any(|l| labels.contains(l)))
            .map(|r| r.task_id)
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::TaskStatus;
    use crate::task::Task;

    #[test]
    fn audits_are_indexed_filtered_and_dropped_with_their_task() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::open(dir.path()).unwrap();
        for id in ["a", "b"] {
            ws.add_task(&Task::minimal(id), TaskStatus::Candidate)
                .unwrap();
        }
        let row = AuditRow {
            task_id: "a".into(),
            labels: vec!["weak-tests".into(), "flaky".into()],
            findings: 3,
            mutation: Some((5, 7)),
            complete: false,
            checks: [("flaky".to_string(), "finding".to_string())].into(),
            audited_at: "2026-12-05T00:00:00Z".into(),
        };
        ws.index_audit(&row).unwrap();
        ws.index_audit(&AuditRow {
            task_id: "b".into(),
            labels: vec![],
            findings: 0,
            mutation: None,
            complete: true,
            checks: BTreeMap::new(),
            audited_at: "x".into(),
        })
        .unwrap();
        assert_eq!(ws.audit_row("a").unwrap(), Some(row));
        assert_eq!(
            ws.tasks_with_audit_labels(&["flaky".into()]).unwrap(),
            vec!["a"]
        );
        assert!(ws
            .tasks_with_audit_labels(&["needs-network".into()])
            .unwrap()
            .is_empty());
        assert!(matches!(
            ws.index_audit(&AuditRow {
                task_id: "zz".into(),
                ..ws.audit_row("b").unwrap().unwrap()
            }),
            Err(StoreError::NoSuchTask(_))
        ));
        ws.remove_task("a").unwrap();
        assert_eq!(ws.audit_row("a").unwrap(), None);
        assert_eq!(ws.audit_rows().unwrap().len(), 1);
        ws.unindex_audit("b").unwrap();
        assert!(ws.audit_rows().unwrap().is_empty());
    }

    #[test]
    fn a_shards_newer_audit_is_merged_and_indexed() {
        use crate::audit::{file, AuditReport, Check, CheckResult, Finding, AUDIT_FORMAT};
        let report = |at: &str, label: &str| AuditReport {
            format: AUDIT_FORMAT,
            task_id: "t".into(),
            digest: "d".into(),
            audited_at: at.into(),
            seconds: 1.0,
            has_oracle: true,
            checks: vec![CheckResult::done(
                Check::Flaky,
                vec![Finding {
                    check: Check::Flaky,
                    label: label.into(),
                    summary: String::new(),
                    tests: vec![],
                    evidence: String::new(),
                }],
                vec![],
            )],
            mutation: None,
        };
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let ours = Workspace::open(a.path()).unwrap();
        let theirs = Workspace::open(b.path()).unwrap();
        for ws in [&ours, &theirs] {
            ws.add_task(&Task::minimal("t"), TaskStatus::Candidate)
                .unwrap();
        }
        file::write(
            &ours.task_dir("t"),
            &report("2026-01-01T00:00:00Z", "flaky"),
        )
        .unwrap();
        file::write(
            &theirs.task_dir("t"),
            &report("2026-02-01T00:00:00Z", "weak-tests"),
        )
        .unwrap();
        let merged = ours.merge_tasks_from(b.path()).unwrap();
        assert!(merged.conflicts.is_empty(), "{merged:?}");
        ours.index_audit_file("t").unwrap();
        assert_eq!(
            ours.audit_row("t").unwrap().unwrap().labels,
            vec!["weak-tests"]
        );
        // An older one is not taken.
        file::write(
            &theirs.task_dir("t"),
            &report("2025-01-01T00:00:00Z", "flaky"),
        )
        .unwrap();
        ours.merge_tasks_from(b.path()).unwrap();
        ours.index_audit_file("t").unwrap();
        assert_eq!(
            ours.audit_row("t").unwrap().unwrap().labels,
            vec!["weak-tests"]
        );
    }
}
