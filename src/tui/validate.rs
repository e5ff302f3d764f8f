//! "Validate now": build the environment, check that the initial tests
//! pass, that the final tests fail on the initial state and that the oracle
//! passes, with the configured sandbox backend.

use crate::config::{Config, Paths};
use crate::store::Workspace;

/// Validate task `id`: `Ok(summary)` or `Err(reason)`. Runs on the store
/// worker thread, never on the UI thread.
pub fn validate_task(ws: &Workspace, id: &str) -> Result<String, String> {
    let task = ws.load_task(id).map_err(|e| e.to_string())?;
    let paths = Paths::detect();
    let config = Config::load(&paths.config_file, Some(ws.root())).map_err(|e| e.to_string())?;
    let backend =
        crate::sandbox::backend_by_name(&config.sandbox.backend, &paths.cache_dir.join("sandbox"))
            .map_err(|e| e.to_string())?;
    let v = crate::verify::validate_task(backend.as_ref(), &task).map_err(|e| e.to_string())?;
    if v.ok() {
        let oracle = match v.oracle_passes {
            Some(true) => ", oracle passes",
            _ => "",
        };
        Ok(format!(
            "valid: initial tests pass, final tests fail on the initial state{oracle} ({:.1}s)",
            v.duration.as_secs_f64()
        ))
    } else {
        Err(v.problems.join("; "))
    }
}
