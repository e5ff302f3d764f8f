//! Validation verdicts kept in the workspace: `tasks validate` writes each
//! task's latest verdict to `tasks/<id>/validation.json` (atomically, beside
//! the bundle, as its curation is), so that shards' validations can be
//! merged into one workspace (the newer verdict wins) and `tasks validate
//! --stored` can report them without running anything. Replacing a
//! task's bundle drops its verdict with it.

use std::path::Path;

use anyhow::{Context as _, Result};
use serde::{Deserialize, Serialize};

use crate::store::{Workspace, VALIDATION_FILE};

/// A task's stored verdict.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredVerdict {
    /// The task id.
    pub id: String,
    /// Whether the task was valid.
    pub ok: bool,
    /// What was wrong (empty when `ok`).
    #[serde(default)]
    pub problems: Vec<String>,
    /// What the user should know though the task is valid.
    #[serde(default)]
    pub notes: Vec<String>,
    /// When it was validated (RFC 3339, milliseconds, UTC).
    pub validated_at: String,
    /// How long the sandbox checks took, in seconds (0 when they did not run).
    #[serde(default)]
    pub seconds: f64,
    /// The sandbox checks' details, when they ran.
    #[serde(default)]
    pub validation: Option<serde_json::Value>,
}

impl StoredVerdict {
    /// The first blocker its validation recorded (see
    /// [`crate::verify::Blocker`]); a record from before blockers were
    /// recorded gives its first failure class alone.
    pub fn blocker(&self) -> Option<crate::verify::Blocker> {
        let validation = self.validation.as_ref()?;
        if let Some(b) = validation.get("blocker") {
            return serde_json::from_value(b.clone()).ok();
        }
        let class = validation.get("failure_classes")?.get(0)?;
        Some(crate::verify::Blocker {
            class: serde_json::from_value(class.clone()).ok()?,
            host: None,
            stand_in: None,
            difference: None,
            line: None,
        })
    }

    /// It as [`super::blockers::blockers_by_class`] groups it.
    pub fn invalid(&self) -> super::blockers::Invalid<'_> {
        super::blockers::Invalid {
            id: &self.id,
            blocker: self.blocker(),
            problems: &self.problems,
        }
    }
}

/// Store verdict `v` of a task whose bundle is in `tasks_dir` (nothing is
/// written for a task that has no bundle there).
pub fn store_verdict(tasks_dir: &Path, v: &StoredVerdict) -> Result<()> {
    let dir = tasks_dir.join(&v.id);
    if !crate::task::is_valid_id(&v.id) || !dir.join("task.toml").is_file() {
        return Ok(());
    }
    let path = dir.join(VALIDATION_FILE);
    let mut json = serde_json::to_vec_pretty(v)?;
    json.push(b'\n');
    crate::fsutil::write_atomic(&path, &json).with_context(|| format!("writing {}", path.display()))
}

/// The stored verdict of task `id`, if it has one; a bad file is an error
/// naming it and the field at fault.
pub fn stored_verdict(ws: &Workspace, id: &str) -> Result<Option<StoredVerdict>> {
    let path = ws.validation_path(id);
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    let de = &mut serde_json::Deserializer::from_slice(&bytes);
    let v: StoredVerdict = serde_path_to_error::deserialize(de)
        .map_err(|e| anyhow::anyhow!("{} (field {}): {}", path.display(), e.path(), e.inner()))?;
    Ok(Some(v))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts_are_stored_beside_their_bundle_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::open(dir.path()).unwrap();
        let task = &crate::procgen::generate_batch(1, 2, None)[0];
        ws.add_task(task, crate::store::TaskStatus::Candidate)
            .unwrap();
        let v = StoredVerdict {
            id: task.id().to_string(),
            ok: false,
            problems: vec!["no sandbox".into()],
            notes: vec![],
            validated_at: "2026-01-01T00:00:00.000Z".into(),
            seconds: 0.0,
            validation: None,
        };
        assert!(stored_verdict(&ws, task.id()).unwrap().is_none());
        store_verdict(&ws.tasks_dir(), &v).unwrap();
        let back = stored_verdict(&ws, task.id()).unwrap().unwrap();
        assert_eq!(
            (back.ok, back.problems.clone()),
            (false, v.problems.clone())
        );
        assert_eq!(back.blocker(), None);
        // The first blocker reads back from the stored validation; an
        // older record gives its first class.
        let blocked = StoredVerdict {
            validation: Some(serde_json::json!({
                "failure_classes": ["build-network", "oracle-fails"],
                "blocker": {"class": "build-network", "host": "github.com"},
            })),
            ..v.clone()
        };
        let b = blocked.blocker().unwrap();
        assert_eq!(b.detail(), "github.com cannot be reached");
        let older = StoredVerdict {
            validation: Some(serde_json::json!({"failure_classes": ["oracle-fails"]})),
            ..v.clone()
        };
        assert_eq!(
            older.blocker().map(|b| b.class),
            Some(crate::verify::FailureClass::OracleFails)
        );
        // No bundle, nothing written.
        let ghost = StoredVerdict {
            id: "no-such-task".into(),
            ..v
        };
        store_verdict(&ws.tasks_dir(), &ghost).unwrap();
        assert!(!ws.tasks_dir().join("no-such-task").exists());
        std::fs::write(ws.validation_path(task.id()), r#"{"id": 3}"#).unwrap();
        let err = stored_verdict(&ws, task.id()).unwrap_err().to_string();
        assert!(err.contains("validation.json"), "{err}");
    }
}
