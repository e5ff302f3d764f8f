//! The launch forms' last values, per workspace: `<workspace>/tui-forms.json`
//! (JSON: form, then field label, then value), written atomically after
//! each job a form starts, read when the TUI opens.

use std::path::{Path, PathBuf};

use crate::tui::action::FormValues;

/// The file, in the workspace's root.
pub const FILE: &str = "tui-forms.json";

fn path(root: &Path) -> PathBuf {
    root.join(FILE)
}

/// The saved values (none saved yet: empty); a file that does not parse is
/// an error naming it (and is left alone).
pub fn load(root: &Path) -> Result<FormValues, String> {
    let p = path(root);
    let bytes = match std::fs::read(&p) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(FormValues::new()),
        Err(e) => return Err(format!("{}: {e}", p.display())),
    };
    serde_json::from_slice(&bytes)
        .map_err(|e| format!("{}: {e} (the forms keep their defaults)", p.display()))
}

/// Save `values` atomically.
pub fn save(root: &Path, values: &FormValues) -> Result<(), String> {
    let p = path(root);
    let json = serde_json::to_vec_pretty(values).map_err(|e| format!("{}: {e}", p.display()))?;
    crate::fsutil::write_atomic(&p, &json).map_err(|e| format!("{}: {e}", p.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_round_trip_and_a_broken_file_is_named() {
        let dir = tempfile::tempdir().unwrap();
        assert!(load(dir.path()).unwrap().is_empty());
        let mut v = FormValues::new();
        v.entry("eval".into())
            .or_default()
            .insert("policy".into(), "script:/a.txt".into());
        save(dir.path(), &v).unwrap();
        assert_eq!(load(dir.path()).unwrap(), v);
        std::fs::write(dir.path().join(FILE), "{not json").unwrap();
        let err = load(dir.path()).unwrap_err();
        assert!(err.contains("tui-forms.json"), "{err}");
    }
}
