//! Terminal-Bench 1: `task.yaml` (instruction and metadata), `Dockerfile`
//! (plus `docker-compose.yaml` and other build files), `run-tests.sh`,
//! `solution.sh` and `tests/`. The truth travels as `tests/truth.md` and
//! native-only metadata under the `endless` key of task.yaml. The network
//! is on, as docker-compose's default network gives it, unless
//! `docker-compose.yaml` says `network_mode: none` (see [`super::network`]).

use std::path::Path;

use serde_json::{Map, Value};

use super::convert::{
    dockerfile_for, drop_generated, foreign_defaults, json_to_toml, meta_from_value, meta_to_table,
    toml_to_json,
};
use super::network;
use super::test_script::{adopt_runner, harbor_test_sh, take_truth, TRUTH};
use crate::task::text::parse_yaml;
use crate::task::{write_tree, EnvKind, FileTree, TaskMeta};
use crate::task::{BundleDir, ReadLimits};
use crate::task::{BundleError, Task};

const RUN_TESTS: &str = "run-tests.sh";
const SOLUTION: &str = "solution.sh";

/// Read a Terminal-Bench 1 task directory.
pub fn read(root: &BundleDir, limits: &ReadLimits) -> Result<Task, BundleError> {
    let dir = root.path();
    let yaml_path = root.shown("task.yaml");
    let mut doc: Map<String, Value> =
        parse_yaml(&yaml_path, &root.read_text("task.yaml", limits)?)?;
    let instruction = match doc.remove("instruction") {
        Some(Value::String(s)) => s,
        Some(_) => {
            return Err(BundleError::invalid(
                &yaml_path,
                Some("instruction"),
                "expected a string",
            ))
        }
        None => legacy_description(&mut doc)
            .ok_or_else(|| BundleError::invalid(&yaml_path, Some("instruction"), "is missing"))?,
    };
    let native = doc.remove("endless");
    let has_native = native.is_some();
    let mut meta = match native {
        Some(v) => meta_from_value(
            "task.yaml",
            json_to_toml(v).unwrap_or(toml::Value::Table(Default::default())),
        )?,
        None => TaskMeta::default(),
    };
    let mut total = instruction.len() as u64;
    let all = root.read_tree("", limits, &mut total)?;
    let mut environment = FileTree::default();
    let mut tests = FileTree::default();
    let mut solution = FileTree::default();
    let mut run_tests = None;
    for (path, entry) in all.0 {
        if path == "task.yaml" {
            continue;
        } else if path == RUN_TESTS {
            run_tests = Some(entry);
        } else if path == SOLUTION {
            solution.0.insert("solve.sh".into(), entry);
        } else if let Some(rest) = path.strip_prefix("tests/") {
            tests.0.insert(rest.to_string(), entry);
        } else if let Some(rest) = path.strip_prefix("solution/") {
            solution.0.insert(rest.to_string(), entry);
        } else {
            environment.0.insert(path, entry);
        }
    }
    drop_generated(&mut environment);
    if !has_native {
        foreign_defaults(&mut meta, dir, &environment, "tb1");
    }
    // docker-compose's default network, unless the compose file turns it
    // off; an endless export's own flag when there is no compose file.
    match network::tb1_compose(dir, &environment)? {
        Some(on) => meta.environment.network = on,
        None if !has_native => meta.environment.network = true,
        None => {}
    }
    if let Some(Value::String(c)) = doc.remove("category") {
        meta.task.category = c;
    }
    if let Some(Value::String(d)) = doc.remove("difficulty") {
        meta.task.difficulty = d;
    }
    if let Some(Value::Array(tags)) = doc.remove("tags") {
        meta.task.tags = tags
            .into_iter()
            .filter_map(|t| t.as_str().map(str::to_owned))
            .collect();
    }
    if let Some(t) = doc.remove("max_agent_timeout_sec").and_then(|v| v.as_f64()) {
        meta.agent.timeout_sec = t;
    }
    if let Some(t) = doc.remove("max_test_timeout_sec").and_then(|v| v.as_f64()) {
        meta.verifier.timeout_sec = t;
    }
    if !doc.is_empty() {
        if let Some(toml::Value::Table(rest)) = json_to_toml(Value::Object(doc)) {
            meta.extra.insert("tb1".into(), toml::Value::Table(rest));
        }
    }
    let truth = take_truth(&mut tests, dir)?;
    if let Some(entry) = run_tests {
        tests.0.insert(RUN_TESTS.into(), entry);
        adopt_runner(
            &mut meta,
            &mut tests,
            RUN_TESTS,
            &root.shown(RUN_TESTS),
            has_native,
        )?;
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

fn legacy_description(doc: &mut Map<String, Value>) -> Option<String> {
    let Some(Value::Array(items)) = doc.get("descriptions") else {
        return None;
    };
    let text = items.iter().find_map(|d| {
        d.get("description")
            .and_then(Value::as_str)
            .map(str::to_owned)
    })?;
    doc.remove("descriptions");
    Some(text)
}

/// Write `task` as a Terminal-Bench 1 task into the empty directory `dir`.
pub fn write(task: &Task, dir: &Path) -> Result<(), BundleError> {
    let meta = &task.meta;
    let mut doc = Map::new();
    doc.insert(
        "instruction".into(),
        Value::String(task.instruction.clone()),
    );
    if let Some(toml::Value::Table(extra)) = meta.extra.get("tb1") {
        for (k, v) in extra {
            doc.insert(k.clone(), toml_to_json(v));
        }
    }
    doc.insert("category".into(), Value::String(meta.task.category.clone()));
    doc.insert(
        "difficulty".into(),
        Value::String(meta.task.difficulty.clone()),
    );
    doc.insert(
        "tags".into(),
        meta.task.tags.iter().cloned().map(Value::String).collect(),
    );
    doc.insert(
        "max_agent_timeout_sec".into(),
        meta.agent.timeout_sec.into(),
    );
    doc.insert(
        "max_test_timeout_sec".into(),
        meta.verifier.timeout_sec.into(),
    );
    let mut stripped = meta.clone();
    stripped.extra.remove("tb1");
    let mut endless = meta_to_table(&stripped)?;
    if !stripped.extra.is_empty() {
        endless.insert("extra".into(), toml::Value::Table(stripped.extra));
    }
    doc.insert("endless".into(), toml_to_json(&toml::Value::Table(endless)));
    let yaml = serde_yaml::to_string(&Value::Object(doc))
        .map_err(|e| BundleError::invalid(dir.join("task.yaml"), None, e.to_string()))?;

    let mut files = task.environment.clone();
    if let Some(dockerfile) = dockerfile_for(task)? {
        files.insert_text(EnvKind::Dockerfile.file_name(), dockerfile);
    }
    let mut tests = task.tests.clone();
    match &meta.verifier.script {
        Some(script) => {
            if let Some(entry) = tests.remove(script) {
                files.0.insert(RUN_TESTS.into(), entry);
            }
        }
        None => files.insert(
            RUN_TESTS,
            harbor_test_sh(&meta.verifier.final_tests, "$TEST_DIR").into_bytes(),
            true,
        ),
    }
    if !task.truth.is_empty() {
        tests.insert_text(TRUTH, task.truth.clone());
    }
    for (path, entry) in tests.iter() {
        files.0.insert(format!("tests/{path}"), entry.clone());
    }
    for (path, entry) in task.solution.iter() {
        let name = if path == "solve.sh" {
            SOLUTION.to_string()
        } else {
            format!("solution/{path}")
        };
        files.0.insert(name, entry.clone());
    }
    files.insert_text("task.yaml", yaml);
    write_tree(dir, &files)
}
