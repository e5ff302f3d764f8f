//! The reference implementation's layout: `task.json` (`description`,
//! `truth`, `name`), `container.def`, `test_initial_state.py`,
//! `test_final_state.py` and an optional `solutions/` directory, all at the
//! top of the task folder (where the reference's `generate_tasks.py` writes
//! them). Files the definition copies sit beside it. Native-only metadata
//! travels under the `endless` key of task.json.
//!
//! `solutions/` holds the stage-4 summaries (`o3_summary.json`), not an
//! oracle: it becomes the bundle's `solution/` unchanged (so export writes it
//! back byte for byte), and `o3_summary.json` is read into
//! `[provenance.solvability]`. A `Bootstrap: localimage` definition is kept
//! as written; how its image is read is noted in `[provenance] import_notes`.

use std::path::Path;

use serde_json::{Map, Value};

use super::convert::{
    apptainer_for, drop_generated, id_from_dir, json_to_toml, meta_from_value, meta_to_table,
    toml_to_json,
};
use super::solver_summary::{self, O3_SUMMARY};
use crate::task::envdef;
use crate::task::text::parse_json;
use crate::task::{write_tree, EnvKind, FileTree, TaskMeta};
use crate::task::{BundleDir, ReadLimits};
use crate::task::{BundleError, Task};

const SOLUTIONS: &str = "solutions";

fn is_test_file(name: &str) -> bool {
    !name.contains('/')
        && ((name.starts_with("test_") && name.ends_with(".py")) || name == "conftest.py")
}

/// Read a reference-layout task directory.
pub fn read(root: &BundleDir, limits: &ReadLimits) -> Result<Task, BundleError> {
    let dir = root.path();
    let json_path = root.shown("task.json");
    let mut doc: Map<String, Value> =
        parse_json(&json_path, &root.read_text("task.json", limits)?)?;
    let take_string =
        |doc: &mut Map<String, Value>, key: &str| -> Result<Option<String>, BundleError> {
            match doc.remove(key) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) => Ok(Some(s)),
                Some(other) => Err(BundleError::invalid(
                    &json_path,
                    Some(key),
                    format!("expected a string, found {}", kind_of(&other)),
                )),
            }
        };
    let instruction = take_string(&mut doc, "description")?
        .ok_or_else(|| BundleError::invalid(&json_path, Some("description"), "is missing"))?;
    let truth = take_string(&mut doc, "truth")?.unwrap_or_default();
    let name = take_string(&mut doc, "name")?;
    let native = doc.contains_key("endless");
    let mut meta = match doc.remove("endless") {
        Some(v) => meta_from_value(
            "task.json",
            json_to_toml(v).unwrap_or(toml::Value::Table(Default::default())),
        )?,
        None => {
            let mut meta = TaskMeta::default();
            meta.task.id = name
                .as_deref()
                .map(crate::task::slugify)
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| id_from_dir(dir));
            meta.task.source_format = "reference".into();
            meta
        }
    };
    if let Some(name) = name {
        meta.task.name = name;
    }
    if !doc.is_empty() {
        if let Some(toml::Value::Table(rest)) = json_to_toml(Value::Object(doc)) {
            meta.extra
                .insert("reference".into(), toml::Value::Table(rest));
        }
    }

    let mut total = instruction.len() as u64 + truth.len() as u64;
    let all = root.read_tree("", limits, &mut total)?;
    let mut environment = FileTree::default();
    let mut tests = FileTree::default();
    let mut solution = FileTree::default();
    for (path, entry) in all.0 {
        if path == "task.json" {
            continue;
        } else if let Some(rest) = path.strip_prefix(&format!("{SOLUTIONS}/")) {
            solution.0.insert(rest.to_string(), entry);
        } else if is_test_file(&path) {
            tests.0.insert(path, entry);
        } else if let Some(name) = path.strip_prefix("tests/").filter(|n| is_test_file(n)) {
            // Some copies of the reference's data keep the tests in tests/;
            // export writes them back beside task.json, where the reference does.
            tests.0.insert(name.to_string(), entry);
        } else {
            environment.0.insert(path, entry);
        }
    }
    drop_generated(&mut environment);
    if !native {
        from_reference_run(dir, &mut meta, &environment, &solution)?;
    }
    Ok(Task {
        meta,
        instruction,
        truth,
        environment,
        tests,
        solution,
    })
}

/// What a task folder written by the reference (not by endless) says beyond
/// the files: the o3 summary's record, and notes on its definition's image.
fn from_reference_run(
    dir: &Path,
    meta: &mut TaskMeta,
    environment: &FileTree,
    solution: &FileTree,
) -> Result<(), BundleError> {
    if let Some(entry) = solution.0.get(O3_SUMMARY) {
        meta.provenance.solvability = Some(solver_summary::read(
            &dir.join(SOLUTIONS).join(O3_SUMMARY),
            &entry.bytes,
            "o3",
            &format!("solution/{O3_SUMMARY}"),
        )?);
    }
    let def = EnvKind::ApptainerDef.file_name();
    if let Some(note) = environment
        .text(def)
        .and_then(|text| envdef::localimage_note(text, def))
    {
        meta.provenance.extra.insert(
            "import_notes".into(),
            toml::Value::Array(vec![toml::Value::String(note)]),
        );
    }
    Ok(())
}

/// Write `task` in the reference layout into the empty directory `dir`.
pub fn write(task: &Task, dir: &Path) -> Result<(), BundleError> {
    if let Some(bad) = task.tests.iter().map(|(p, _)| p).find(|p| !is_test_file(p)) {
        return Err(BundleError::invalid(
            format!("tests/{bad}"),
            None,
            "the reference layout only holds top-level test_*.py and conftest.py test files",
        ));
    }
    let mut doc = Map::new();
    doc.insert("name".into(), Value::String(task.meta.task.name.clone()));
    doc.insert(
        "description".into(),
        Value::String(task.instruction.clone()),
    );
    doc.insert("truth".into(), Value::String(task.truth.clone()));
    if let Some(toml::Value::Table(extra)) = task.meta.extra.get("reference") {
        for (k, v) in extra {
            doc.entry(k.clone()).or_insert_with(|| toml_to_json(v));
        }
    }
    let mut meta = task.meta.clone();
    meta.extra.remove("reference");
    let mut endless = meta_to_table(&meta)?;
    if !meta.extra.is_empty() {
        endless.insert("extra".into(), toml::Value::Table(meta.extra.clone()));
    }
    doc.insert("endless".into(), toml_to_json(&toml::Value::Table(endless)));
    let json = serde_json::to_string_pretty(&Value::Object(doc))
        .map_err(|e| BundleError::invalid(dir.join("task.json"), None, e.to_string()))?;

    let mut files = task.environment.clone();
    if let Some(def) = apptainer_for(task)? {
        files.insert_text(EnvKind::ApptainerDef.file_name(), def);
    }
    for (path, entry) in task.tests.iter() {
        files.0.insert(path.clone(), entry.clone());
    }
    for (path, entry) in task.solution.iter() {
        files.0.insert(format!("{SOLUTIONS}/{path}"), entry.clone());
    }
    files.insert_text("task.json", json);
    write_tree(dir, &files)
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}
