//! The TUI's view state, per workspace: `<workspace>/tui-state.json` (the
//! open view and the Tasks and Episodes tables' sort), written atomically
//! whenever it changes and read when the TUI opens, so that they survive a
//! restart. A file that does not parse, or names a view or column this
//! version does not know, is ignored with a warning: the defaults stay.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The file, in the workspace's root.
pub const FILE: &str = "tui-state.json";

/// What is kept. Names, not numbers: a view or column added later does not
/// shift the others.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ViewState {
    /// The open view (`tasks`, `live`, `episodes`, `jobs`, `training`).
    pub view: String,
    /// The Tasks table's sort column (`id`, `name`, ... as its header
    /// line says).
    pub tasks_sort: String,
    /// The Tasks table sorts descending.
    pub tasks_reverse: bool,
    /// The Episodes table's sort column (its header, lowercased).
    pub episodes_sort: String,
    /// The Episodes table sorts descending.
    pub episodes_reverse: bool,
}

fn path(root: &Path) -> PathBuf {
    root.join(FILE)
}

/// The saved state (`None`: none saved yet); a file that cannot be read
/// or parsed is a warning naming it.
pub fn load(root: &Path) -> Result<Option<ViewState>, String> {
    let p = path(root);
    // trusted: the workspace's own TUI state, in its root
    let bytes = match std::fs::read(&p) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(format!(
                "{}: {e} (ignored: the views keep their defaults)",
                p.display()
            ))
        }
    };
    serde_json::from_slice(&bytes).map(Some).map_err(|e| {
        format!(
            "{}: {e} (ignored: the views keep their defaults)",
            p.display()
        )
    })
}

/// Save `state` atomically.
pub fn save(root: &Path, state: &ViewState) -> Result<(), String> {
    let p = path(root);
    let json = serde_json::to_vec_pretty(state).map_err(|e| format!("{}: {e}", p.display()))?;
    crate::fsutil::write_atomic(&p, &json).map_err(|e| format!("{}: {e}", p.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_state_round_trips_and_a_broken_file_is_a_warning() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(load(dir.path()).unwrap(), None);
        let state = ViewState {
            view: "episodes".into(),
            tasks_sort: "name".into(),
            tasks_reverse: true,
            episodes_sort: "turns".into(),
            episodes_reverse: false,
        };
        save(dir.path(), &state).unwrap();
        assert_eq!(load(dir.path()).unwrap(), Some(state));
        std::fs::write(dir.path().join(FILE), "{\"view\": 3").unwrap();
        let err = load(dir.path()).unwrap_err();
        assert!(
            err.contains("tui-state.json") && err.contains("ignored"),
            "{err}"
        );
    }
}
