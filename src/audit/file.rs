//! `tasks/<id>/audit.json`: a task's latest audit, beside its
//! `curation.json`, written atomically. Replacing the task's bundle drops
//! it (the audit was of the old task); a report whose digest no longer
//! matches the task is stale (see [`AuditReport::covers`]).

use std::path::Path;

use super::{AuditError, AuditReport};

/// The file in a task bundle that holds its audit.
pub use crate::store::AUDIT_FILE;

/// Write `report` into the bundle directory `task_dir` (atomically).
pub fn write(task_dir: &Path, report: &AuditReport) -> Result<(), AuditError> {
    let path = task_dir.join(AUDIT_FILE);
    let fail = |message: String| AuditError::File {
        path: path.clone(),
        message,
    };
    let mut json = serde_json::to_vec_pretty(report).map_err(|e| fail(e.to_string()))?;
    json.push(b'\n');
    crate::fsutil::write_atomic(&path, &json).map_err(|e| fail(e.to_string()))
}

/// The audit stored in `task_dir`, if any; a bad file is an error naming
/// it and the field at fault.
pub fn read(task_dir: &Path) -> Result<Option<AuditReport>, AuditError> {
    let path = task_dir.join(AUDIT_FILE);
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(AuditError::File {
                path,
                message: e.to_string(),
            })
        }
    };
    let de = &mut serde_json::Deserializer::from_slice(&bytes);
    serde_path_to_error::deserialize(de)
        .map(Some)
        .map_err(|e| AuditError::File {
            message: format!("field {}: {}", e.path(), e.inner()),
            path,
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::{Check, CheckResult, AUDIT_FORMAT};

    #[test]
    fn reports_are_written_and_read_back_and_bad_files_name_the_field() {
        let dir = tempfile::tempdir().unwrap();
        assert!(read(dir.path()).unwrap().is_none());
        let r = AuditReport {
            format: AUDIT_FORMAT,
            task_id: "t".into(),
            digest: "d".into(),
            audited_at: "now".into(),
            seconds: 0.5,
            has_oracle: false,
            checks: vec![CheckResult::skipped(Check::Flaky, "no oracle")],
            mutation: None,
        };
        write(dir.path(), &r).unwrap();
        assert_eq!(read(dir.path()).unwrap(), Some(r));
        std::fs::write(dir.path().join(AUDIT_FILE), r#"{"format": "one"}"#).unwrap();
        let e = read(dir.path()).unwrap_err().to_string();
        assert!(
            e.contains("audit.json") && e.contains("field format"),
            "{e}"
        );
    }
}
