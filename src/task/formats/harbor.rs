//! Harbor / Terminal-Bench 2.0: `instruction.md`, `task.toml` (`[metadata]`,
//! `[verifier]`, `[agent]`, `[environment]`), `environment/Dockerfile` and
//! its build context, `tests/test.sh` + `tests/test_outputs.py`,
//! `solution/solve.sh`. Unknown keys are kept. The privileged truth, which
//! Harbor has no field for, travels as `tests/truth.md` (the agent never
//! sees tests/), and native-only metadata as an `[endless]` table.
//! Harbor's network rules (`[environment] network_mode`, `allow_internet`)
//! map to `[environment] network`, on by default as in Harbor (see
//! [`super::network`]).

use std::path::Path;

use super::convert::{
    dockerfile_for, drop_generated, foreign_defaults, meta_from_value, meta_to_table,
};
use super::network;
use super::test_script::{adopt_runner, harbor_test_sh, take_truth, TRUTH};
use crate::task::text::parse_toml;
use crate::task::{write_tree, EnvKind, FileTree, TaskMeta};
use crate::task::{BundleDir, ReadLimits};
use crate::task::{BundleError, Task};

const TEST_SH: &str = "test.sh";
/// Lists the top-level keys the export added only because Harbor needs them.
const ADDED_KEYS: &str = "added_keys";

/// Read a Harbor task directory.
pub fn read(root: &BundleDir, limits: &ReadLimits) -> Result<Task, BundleError> {
    let dir = root.path();
    let toml_path = root.shown("task.toml");
    let mut table: toml::Table = parse_toml(&toml_path, &root.read_text("task.toml", limits)?)?;
    let instruction = root.read_text("instruction.md", limits)?;
    let mut total = instruction.len() as u64;
    let mut environment = root.read_tree("environment", limits, &mut total)?;
    let mut tests = root.read_tree("tests", limits, &mut total)?;
    let solution = root.read_tree("solution", limits, &mut total)?;
    drop_generated(&mut environment);

    let mut native = table.remove("endless");
    if let Some(toml::Value::Table(t)) = native.as_mut() {
        // Keys Harbor requires that the task itself never had.
        if let Some(toml::Value::Array(added)) = t.remove(ADDED_KEYS) {
            for key in added.iter().filter_map(|k| k.as_str()) {
                table.remove(key);
            }
        }
    }
    let has_native = native.is_some();
    let mut meta = match native {
        Some(value) => meta_from_value("task.toml", value)?,
        None => TaskMeta::default(),
    };
    if !has_native {
        foreign_defaults(&mut meta, dir, &environment, "harbor");
    }
    let section = |table: &mut toml::Table, name: &str| -> toml::Table {
        match table.remove(name) {
            Some(toml::Value::Table(t)) => t,
            Some(other) => {
                let mut t = toml::Table::new();
                t.insert("value".into(), other);
                t
            }
            None => toml::Table::new(),
        }
    };
    let mut metadata = section(&mut table, "metadata");
    if let Some(toml::Value::String(c)) = metadata.remove("category") {
        meta.task.category = c;
    }
    if let Some(toml::Value::String(d)) = metadata.remove("difficulty") {
        meta.task.difficulty = d;
    }
    if let Some(toml::Value::Array(tags)) = metadata.remove("tags") {
        meta.task.tags = tags
            .into_iter()
            .filter_map(|t| t.as_str().map(str::to_owned))
            .collect();
    }
    let mut verifier = section(&mut table, "verifier");
    if let Some(t) = verifier.remove("timeout_sec").and_then(|v| as_f64(&v)) {
        meta.verifier.timeout_sec = t;
    }
    meta.verifier.extra = verifier;
    let mut agent = section(&mut table, "agent");
    if let Some(t) = agent.remove("timeout_sec").and_then(|v| as_f64(&v)) {
        meta.agent.timeout_sec = t;
    }
    let mut environment_keys = section(&mut table, "environment");
    // Harbor's network rules; without any, Harbor's default (public), or
    // what an endless export recorded.
    match network::take_harbor(&toml_path, &mut environment_keys, &mut agent)? {
        Some(on) => meta.environment.network = on,
        None if !has_native => meta.environment.network = true,
        None => {}
    }
    meta.agent.extra = agent;
    meta.environment.extra = environment_keys;
    if !metadata.is_empty() {
        table.insert("metadata".into(), toml::Value::Table(metadata));
    }
    meta.extra = table;

    let truth = take_truth(&mut tests, dir)?;
    if tests.0.contains_key(TEST_SH) {
        let shown = root.shown("tests/test.sh");
        adopt_runner(&mut meta, &mut tests, TEST_SH, &shown, has_native)?;
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

/// Write `task` as a Harbor task into the empty directory `dir`.
pub fn write(task: &Task, dir: &Path) -> Result<(), BundleError> {
    let meta = &task.meta;
    let mut table = meta.extra.clone();
    let mut added = Vec::new();
    if !table.contains_key("version") {
        table.insert("version".into(), "1.0".into());
        added.push(toml::Value::from("version"));
    }
    let mut metadata = match table.remove("metadata") {
        Some(toml::Value::Table(t)) => t,
        _ => toml::Table::new(),
    };
    if !meta.task.category.is_empty() {
        metadata.insert("category".into(), meta.task.category.clone().into());
    }
    if !meta.task.difficulty.is_empty() {
        metadata.insert("difficulty".into(), meta.task.difficulty.clone().into());
    }
    if !meta.task.tags.is_empty() {
        metadata.insert("tags".into(), meta.task.tags.clone().into());
    }
    table.insert("metadata".into(), metadata.into());
    let mut verifier = meta.verifier.extra.clone();
    verifier.insert("timeout_sec".into(), meta.verifier.timeout_sec.into());
    table.insert("verifier".into(), verifier.into());
    let mut agent = meta.agent.extra.clone();
    agent.insert("timeout_sec".into(), meta.agent.timeout_sec.into());
    table.insert("agent".into(), agent.into());
    let mut environment = meta.environment.extra.clone();
    network::put_harbor(&mut environment, meta.environment.network);
    table.insert("environment".into(), environment.into());
    let mut endless = meta_to_table(meta)?;
    if !added.is_empty() {
        endless.insert(ADDED_KEYS.into(), toml::Value::Array(added));
    }
    table.insert("endless".into(), endless.into());
    let text = toml::to_string(&table)
        .map_err(|e| BundleError::invalid(dir.join("task.toml"), None, e.to_string()))?;

    let mut files = FileTree::default();
    files.insert_text("task.toml", text);
    files.insert_text("instruction.md", task.instruction.clone());
    write_tree(dir, &files)?;

    let mut environment = task.environment.clone();
    if let Some(dockerfile) = dockerfile_for(task)? {
        environment.insert_text(EnvKind::Dockerfile.file_name(), dockerfile);
    }
    write_tree(&dir.join("environment"), &environment)?;

    let mut tests = task.tests.clone();
    if meta.verifier.script.is_none() {
        tests.insert(
            TEST_SH,
            harbor_test_sh(&meta.verifier.final_tests, "/tests").into_bytes(),
            true,
        );
    }
    if !task.truth.is_empty() {
        tests.insert_text(TRUTH, task.truth.clone());
    }
    write_tree(&dir.join("tests"), &tests)?;
    write_tree(&dir.join("solution"), &task.solution)
}

fn as_f64(v: &toml::Value) -> Option<f64> {
    v.as_float().or_else(|| v.as_integer().map(|i| i as f64))
}
