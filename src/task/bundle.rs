//! The native bundle format: read a task directory, write one.
//!
//! ```text
//! task.toml  instruction.md  truth.md  environment/  tests/  solution/
//! ```

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use super::safe_read::{BundleDir, ReadLimits};
use super::text::parse_toml;
use super::{is_valid_id, BundleError, FileTree, Task, TaskMeta};
use crate::fsutil::AtomicDir;

/// Read a native bundle from `dir` (see [`read_native_in`]).
pub fn read_native(dir: &Path, limits: &ReadLimits) -> Result<Task, BundleError> {
    read_native_in(&BundleDir::open(dir)?, limits)
}

/// Read a native bundle from the opened directory `dir`: every file
/// through its descriptor, never leaving it (see [`BundleDir`]).
pub fn read_native_in(dir: &BundleDir, limits: &ReadLimits) -> Result<Task, BundleError> {
    let toml_path = dir.shown("task.toml");
    let meta: TaskMeta = parse_toml(&toml_path, &dir.read_text("task.toml", limits)?)?;
    if !is_valid_id(&meta.task.id) {
        return Err(BundleError::invalid(
            &toml_path,
            Some("task.id"),
            format!(
                "{:?} is not a valid id (letters, digits, '-', '_', '.'; not starting with '.')",
                meta.task.id
            ),
        ));
    }
    let instruction = dir.read_text("instruction.md", limits)?;
    let truth = dir.read_text_opt("truth.md", limits)?.unwrap_or_default();
    let mut total = instruction.len() as u64 + truth.len() as u64;
    let environment = dir.read_tree("environment", limits, &mut total)?;
    let tests = dir.read_tree("tests", limits, &mut total)?;
    let solution = dir.read_tree("solution", limits, &mut total)?;
    Ok(Task {
        meta,
        instruction,
        truth,
        environment,
        tests,
        solution,
    })
}

/// Write `task` as a native bundle into the existing, empty directory `dir`.
pub fn write_native(task: &Task, dir: &Path) -> Result<(), BundleError> {
    let meta = toml::to_string(&task.meta)
        .map_err(|e| BundleError::invalid(dir.join("task.toml"), None, e.to_string()))?;
    write_file(&dir.join("task.toml"), meta.as_bytes(), false)?;
    write_file(
        &dir.join("instruction.md"),
        task.instruction.as_bytes(),
        false,
    )?;
    if !task.truth.is_empty() {
        write_file(&dir.join("truth.md"), task.truth.as_bytes(), false)?;
    }
    write_tree(&dir.join("environment"), &task.environment)?;
    write_tree(&dir.join("tests"), &task.tests)?;
    write_tree(&dir.join("solution"), &task.solution)?;
    Ok(())
}

/// Write `task` as a native bundle at `target` atomically: the directory
/// appears complete or not at all. Fails if `target` exists.
pub fn save_native_atomic(task: &Task, target: &Path) -> Result<(), BundleError> {
    let staging = AtomicDir::new(target).map_err(BundleError::io(target))?;
    write_native(task, staging.path())?;
    staging.commit().map_err(BundleError::io(target))?;
    Ok(())
}

/// Rewrite the `task.toml` of the native bundle in `dir` with `meta`,
/// atomically (readers see the old file or the new one, never a mix).
pub fn write_meta_atomic(dir: &Path, meta: &TaskMeta) -> Result<(), BundleError> {
    let path = dir.join("task.toml");
    let text =
        toml::to_string(meta).map_err(|e| BundleError::invalid(&path, None, e.to_string()))?;
    crate::fsutil::write_atomic(&path, text.as_bytes()).map_err(BundleError::io(&path))?;
    // trusted: writing a bundle into a directory of ours
    fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).map_err(BundleError::io(&path))
}

/// Write every file of `tree` below `dir`, refusing paths that would escape it.
pub fn write_tree(dir: &Path, tree: &FileTree) -> Result<(), BundleError> {
    for (rel, entry) in tree.iter() {
        let safe = !rel.is_empty()
            && Path::new(rel)
                .components()
                .all(|c| matches!(c, std::path::Component::Normal(_)));
        if !safe {
            return Err(BundleError::invalid(
                dir.join(rel),
                None,
                "file path must be relative and stay inside its directory",
            ));
        }
        write_file(&dir.join(rel), &entry.bytes, entry.executable)?;
    }
    Ok(())
}

fn write_file(path: &Path, bytes: &[u8], executable: bool) -> Result<(), BundleError> {
    if let Some(parent) = path.parent() {
        // trusted: writing a bundle into a directory of ours
        fs::create_dir_all(parent).map_err(BundleError::io(parent))?;
    }
    // trusted: writing a bundle into a directory of ours
    fs::write(path, bytes).map_err(BundleError::io(path))?;
    let mode = if executable { 0o755 } else { 0o644 };
    // trusted: writing a bundle into a directory of ours
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).map_err(BundleError::io(path))
}
