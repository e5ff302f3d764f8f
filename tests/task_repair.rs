//! `endless tasks repair` end to end, on the real sandbox, with the fixture
//! OpenAI-compatible server as generator and solver: a task the audit
//! flags weak-tests is repaired (the finding gone in its new version, the
//! old version restorable); a revision that breaks the task is refused at
//! the stage it breaks, the task unchanged; an offline task is refused
//! with the reason, or regenerated with another seed when asked.

#![allow(clippy::unwrap_used)] // tests and benches fail loudly

mod support;

use std::path::Path;

use serde_json::Value;
use support::cli::{endless, json};
use support::fixture_llm::{FixtureLlm, Reply, Request};

const ID: &str = "audit-empty-file";

const INSTRUCTION: &str = "The file ~/data/users.csv lists users as name,role. Write the names of the users whose role is admin, one per line, to ~/admins.txt.";
const SETUP: &str = "#!/bin/bash\nset -euo pipefail\nmkdir -p /home/user/data\nprintf 'name,role\\nana,admin\\nbob,viewer\\ncyd,admin\\n' > /home/user/data/users.csv\nchown -R user:user /home/user\n";
const INITIAL: &str =
    "import os\n\ndef test_users_present():\n    assert os.path.isfile('/home/user/data/users.csv')\n";
const SOLVE: &str =
    "#!/bin/bash\nawk -F, '$2 == \"admin\" {print $1}' ~/data/users.csv > ~/admins.txt\n";
/// Completion tests that check the content: the weak test fixed.
const STRONG_FINAL: &str = "def test_admins_written():\n    with open('/home/user/admins.txt') as f:\n        assert f.read().strip() == 'ana\\ncyd', 'admins.txt must list ana and cyd'\n";
/// Completion tests that pass before any work: the revision breaks the task.
const VACUOUS_FINAL: &str = "def test_nothing():\n    assert 1 + 1 == 2\n";

fn bundle(final_tests: &str) -> String {
    format!(
        "Here is the revised task.\n<task>\n{INSTRUCTION}\n</task>\n<truth>\n/home/user/data/users.csv has ana,admin bob,viewer cyd,admin. Expected: /home/user/admins.txt with ana and cyd.\n</truth>\n<setup>\n{SETUP}</setup>\n<test_initial_state>\n{INITIAL}</test_initial_state>\n<test_final_state>\n{final_tests}</test_final_state>\n<solution>\n{SOLVE}</solution>\n"
    )
}

/// Generator (by the repair prompt) and solver (everything else).
fn scripted(final_tests: &'static str) -> impl Fn(&Request) -> Reply + Send + Sync + 'static {
    move |req: &Request| {
        let first = req
            .messages()
            .first()
            .map(|m| m.1.clone())
            .unwrap_or_default();
        if first.contains("You repair a terminal task") {
            Reply::text(bundle(final_tests))
        } else if req.turn() == 0 {
            Reply::command("awk -F, '$2 == \"admin\" {print $1}' ~/data/users.csv > ~/admins.txt")
        } else {
            Reply::done()
        }
    }
}

/// Whether the local sandbox runs here (else the test says SKIP).
fn sandbox_here() -> bool {
    if !Path::new(endless::verify::PYTHON).exists() {
        eprintln!("SKIP: {} is missing", endless::verify::PYTHON);
        return false;
    }
    let cache = tempfile::tempdir().unwrap();
    match endless::sandbox::local::LocalBackend::new(cache.path()) {
        Ok(_) => true,
        Err(e) => {
            eprintln!("SKIP: local backend unavailable here: {e}");
            false
        }
    }
}

/// A workspace with the weak-tests fixture imported and audited.
fn flagged_workspace() -> tempfile::TempDir {
    let ws = tempfile::tempdir().unwrap();
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/audit")
        .join(ID);
    json(&endless(
        ws.path(),
        &["tasks", "import", fixture.to_str().unwrap(), "--json"],
    ));
    let out = endless(
        ws.path(),
        &["tasks", "audit", ID, "--checks", "weak-tests", "--json"],
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        v.to_string().contains("weak-tests"),
        "the fixture is flagged: {v:#}"
    );
    let set = endless(
        ws.path(),
        &[
            "tasks",
            "set",
            ID,
            "--rating",
            "2",
            "--notes",
            "an empty file passes",
        ],
    );
    assert!(set.status.success());
    ws
}

fn repair(ws: &Path, server: &FixtureLlm) -> std::process::Output {
    endless(
        ws,
        &[
            "tasks",
            "repair",
            ID,
            "--llm",
            &server.url(),
            "--model",
            "fixture-gen",
            "--solutions",
            "1",
            "--json",
        ],
    )
}

fn audit_labels(ws: &Path) -> Value {
    let report: Value = serde_json::from_slice(
        &std::fs::read(ws.join("tasks").join(ID).join("audit.json")).unwrap(),
    )
    .unwrap();
    let labels: Vec<Value> = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|c| c["findings"].as_array().cloned().unwrap_or_default())
        .map(|f| f["label"].clone())
        .collect();
    Value::Array(labels)
}

#[test]
fn a_weak_test_is_repaired_as_a_new_version_and_the_old_one_is_restorable() {
    if !sandbox_here() {
        return;
    }
    let ws = flagged_workspace();
    let before = std::fs::read_to_string(
        ws.path()
            .join("tasks")
            .join(ID)
            .join("tests/test_final_state.py"),
    )
    .unwrap();
    let server = FixtureLlm::start(scripted(STRONG_FINAL));
    let out = json(&repair(ws.path(), &server));
    assert_eq!(out[0]["outcome"], "repaired", "{out:#}");
    assert_eq!(
        (out[0]["parent"].as_u64(), out[0]["version"].as_u64()),
        (Some(1), Some(2))
    );
    // The prompt carried the reasons: the finding with its evidence, the curator's note.
    let prompt = server
        .requests()
        .into_iter()
        .map(|r| r.messages()[0].1.clone())
        .find(|m| m.contains("You repair a terminal task"))
        .unwrap();
    assert!(
        prompt.contains("[weak-tests]") && prompt.contains("emptied"),
        "{prompt}"
    );
    assert!(
        prompt.contains("rated it 2/5: an empty file passes"),
        "{prompt}"
    );
    assert!(
        prompt.contains("Planted defect: any file passes"),
        "the old tests: {prompt}"
    );
    // The new version: strong tests, provenance, the finding gone.
    let final_tests = std::fs::read_to_string(
        ws.path()
            .join("tasks")
            .join(ID)
            .join("tests/test_final_state.py"),
    )
    .unwrap();
    assert!(final_tests.contains("ana\\ncyd"), "{final_tests}");
    assert_eq!(audit_labels(ws.path()), Value::Array(vec![]));
    let row = json(&endless(ws.path(), &["tasks", "list", "--json"]));
    assert_eq!(row[0]["notes"], "an empty file passes", "curation stays");
    let versions = json(&endless(ws.path(), &["tasks", "versions", ID, "--json"]));
    assert_eq!(versions.as_array().unwrap().len(), 2, "{versions:#}");
    assert_eq!(versions[1]["parent"], 1);
    assert_eq!(versions[1]["current"], true);
    assert_eq!(versions[1]["model"], "fixture-gen");
    assert!(
        versions[1]["reasons"].to_string().contains("[weak-tests]"),
        "{versions:#}"
    );
    // The old version is kept, and restorable with its audit.
    let restore = endless(ws.path(), &["tasks", "restore", ID, "--version", "1"]);
    assert!(
        restore.status.success(),
        "{}",
        String::from_utf8_lossy(&restore.stderr)
    );
    let back = std::fs::read_to_string(
        ws.path()
            .join("tasks")
            .join(ID)
            .join("tests/test_final_state.py"),
    )
    .unwrap();
    assert_eq!(back, before);
    assert!(audit_labels(ws.path()).to_string().contains("weak-tests"));
}

#[test]
fn a_revision_that_breaks_the_task_is_refused_at_its_stage_and_the_task_is_unchanged() {
    if !sandbox_here() {
        return;
    }
    let ws = flagged_workspace();
    let dir = ws.path().join("tasks").join(ID);
    let read = |p: &str| std::fs::read(dir.join(p)).unwrap();
    let before: Vec<Vec<u8>> = ["task.toml", "tests/test_final_state.py", "audit.json"]
        .iter()
        .map(|p| read(p))
        .collect();
    let server = FixtureLlm::start(scripted(VACUOUS_FINAL));
    let out = repair(ws.path(), &server);
    assert!(!out.status.success());
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v[0]["outcome"], "failed", "{v:#}");
    assert_eq!(v[0]["stage"], "completion_tests", "{v:#}");
    assert_eq!(v[0]["reason"], "final tests pass on the initial state");
    let after: Vec<Vec<u8>> = ["task.toml", "tests/test_final_state.py", "audit.json"]
        .iter()
        .map(|p| read(p))
        .collect();
    assert!(before == after, "the task is unchanged");
    assert!(!ws.path().join("versions").join(ID).exists());
    // The refused revision is kept for inspection.
    assert!(ws
        .path()
        .join("rejected")
        .join(format!("repair-{ID}-v2"))
        .join("log.jsonl")
        .is_file());
}

#[test]
fn an_offline_task_is_refused_with_the_reason_or_regenerated_with_another_seed() {
    let ws = tempfile::tempdir().unwrap();
    let gen = endless(
        ws.path(),
        &["generate", "--offline", "--count", "1", "--seed", "3"],
    );
    assert!(
        gen.status.success(),
        "{}",
        String::from_utf8_lossy(&gen.stderr)
    );
    let id = json(&endless(ws.path(), &["tasks", "list", "--json"]))[0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let out = endless(ws.path(), &["tasks", "repair", &id, "--json"]);
    assert!(!out.status.success());
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v[0]["stage"], "offline", "{v:#}");
    let reason = v[0]["reason"].as_str().unwrap();
    assert!(
        reason.contains("LLM") && reason.contains("--reseed"),
        "{reason}"
    );
    let before =
        std::fs::read_to_string(ws.path().join("tasks").join(&id).join("instruction.md")).unwrap();
    let out = json(&endless(
        ws.path(),
        &["tasks", "repair", &id, "--reseed", "11", "--json"],
    ));
    assert_eq!(out[0]["outcome"], "repaired", "{out:#}");
    assert_eq!(out[0]["version"], 2);
    let task =
        std::fs::read_to_string(ws.path().join("tasks").join(&id).join("task.toml")).unwrap();
    assert!(
        task.contains("seed = 11") && task.contains("parent_version = 1"),
        "{task}"
    );
    let after =
        std::fs::read_to_string(ws.path().join("tasks").join(&id).join("instruction.md")).unwrap();
    assert_ne!(before, after);
}
