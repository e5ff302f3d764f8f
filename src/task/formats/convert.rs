//! Pieces shared by the foreign formats: generated environment definitions
//! and the `[endless]` table that carries native-only metadata through
//! formats that have no place for it.

use super::super::envdef::{self, render_apptainer, render_dockerfile, GENERATED_MARKER};
use super::super::{BundleError, EnvKind, FileTree, Task, TaskMeta};

/// A Dockerfile for `task`: `None` when the task already has one.
pub fn dockerfile_for(task: &Task) -> Result<Option<String>, BundleError> {
    if task.environment.contains(EnvKind::Dockerfile.file_name()) {
        return Ok(None);
    }
    let def = envdef::parse_task(task)?;
    Ok(Some(render_dockerfile(
        &def,
        &task.meta.agent.user,
        &task.meta.environment.workdir,
    )))
}

/// An Apptainer definition for `task`: `None` when the task already has one.
pub fn apptainer_for(task: &Task) -> Result<Option<String>, BundleError> {
    if task.environment.contains(EnvKind::ApptainerDef.file_name()) {
        return Ok(None);
    }
    let def = envdef::parse_task(task)?;
    let files: Vec<&str> = task.environment.iter().map(|(p, _)| p.as_str()).collect();
    Ok(Some(render_apptainer(&def, &task.meta.agent.user, &files)))
}

/// Drop a definition endless generated on export when the tree also holds
/// the task's own definition, so that round trips are lossless.
pub fn drop_generated(tree: &mut FileTree) {
    let generated: Vec<&'static str> = EnvKind::ALL
        .iter()
        .map(|k| k.file_name())
        .filter(|name| {
            tree.text(name)
                .is_some_and(|t| t.starts_with(GENERATED_MARKER))
        })
        .collect();
    let own = EnvKind::ALL
        .iter()
        .filter(|k| !generated.contains(&k.file_name()) && tree.contains(k.file_name()))
        .count();
    if own > 0 {
        for name in generated {
            tree.remove(name);
        }
    }
}

/// The whole native metadata as a TOML table, for the `[endless]` table of
/// Harbor's task.toml and the `endless` key of task.json / task.yaml.
pub fn meta_to_table(meta: &TaskMeta) -> Result<toml::Table, BundleError> {
    let mut stripped = meta.clone();
    // Foreign keys live in the foreign file itself, not twice.
    stripped.extra = toml::Table::new();
    toml::Table::try_from(&stripped)
        .map_err(|e| BundleError::invalid("task.toml", Some("endless"), e.to_string()))
}

/// Read back a table written by [`meta_to_table`].
pub fn meta_from_value(file: &str, value: toml::Value) -> Result<TaskMeta, BundleError> {
    let text = toml::to_string(&value)
        .map_err(|e| BundleError::invalid(file, Some("endless"), e.to_string()))?;
    super::super::text::parse_toml(std::path::Path::new(file), &text).map_err(|e| match e {
        BundleError::Invalid { field, message, .. } => BundleError::Invalid {
            file: file.into(),
            field: Some(format!("endless.{}", field.unwrap_or_default())),
            message,
        },
        other => other,
    })
}

/// Convert JSON (from task.json / task.yaml) to TOML, dropping nulls, which
/// TOML cannot hold.
pub fn json_to_toml(value: serde_json::Value) -> Option<toml::Value> {
    use serde_json::Value as J;
    Some(match value {
        J::Null => return None,
        J::Bool(b) => toml::Value::Boolean(b),
        J::Number(n) => match n.as_i64() {
            Some(i) => toml::Value::Integer(i),
            None => toml::Value::Float(n.as_f64().unwrap_or(0.0)),
        },
        J::String(s) => toml::Value::String(s),
        J::Array(a) => toml::Value::Array(a.into_iter().filter_map(json_to_toml).collect()),
        J::Object(o) => toml::Value::Table(
            o.into_iter()
                .filter_map(|(k, v)| json_to_toml(v).map(|v| (k, v)))
                .collect(),
        ),
    })
}

/// Convert TOML to JSON.
pub fn toml_to_json(value: &toml::Value) -> serde_json::Value {
    serde_json::to_value(value).unwrap_or(serde_json::Value::Null)
}

/// Defaults for a Harbor or Terminal-Bench task that carries no native
/// metadata: id from the directory, the agent as root in the Dockerfile's
/// WORKDIR (`/app` if none), no initial-state tests.
pub fn foreign_defaults(
    meta: &mut TaskMeta,
    dir: &std::path::Path,
    environment: &FileTree,
    format: &str,
) {
    meta.task.id = id_from_dir(dir);
    meta.task.name = meta.task.id.clone();
    meta.task.source_format = format.into();
    meta.agent.user = "root".into();
    meta.environment.workdir = environment
        .text(EnvKind::Dockerfile.file_name())
        .and_then(|t| envdef::parse(EnvKind::Dockerfile, t).ok())
        .and_then(|d| d.workdir().map(str::to_owned))
        .unwrap_or_else(|| "/app".into());
    meta.verifier.initial_tests.clear();
}

/// Id for a task that has none of its own: from the directory name.
pub fn id_from_dir(dir: &std::path::Path) -> String {
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let id = super::super::slugify(&name);
    if id.is_empty() {
        "task".into()
    } else {
        id
    }
}
