//! Task bundles, foreign formats, the workspace store and the `tasks` CLI.

#![allow(clippy::unwrap_used)] // tests and benches fail loudly

mod support;

use std::fs;
use std::path::{Path, PathBuf};

use endless::store::{import_paths, ImportOutcome, OnConflict, TaskFilter, TaskStatus, Workspace};
use endless::task::formats::Format;
use endless::task::ReadLimits;
use endless::task::{read_native, write_native, FileTree, Task, TaskMeta};
use proptest::prelude::*;
use support::cli::endless;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/mixed")
}

fn read(format: Format, dir: &Path) -> Task {
    format
        .read(dir, &ReadLimits::default())
        .unwrap_or_else(|e| panic!("{e}"))
}

fn round_trip(task: &Task, via: Format) -> Task {
    let dir = tempfile::tempdir().unwrap();
    via.write(task, dir.path())
        .unwrap_or_else(|e| panic!("write {via:?}: {e}"));
    assert_eq!(Format::detect(dir.path()), Some(via));
    read(via, dir.path())
}

#[test]
fn native_round_trips_through_every_format() {
    let native = read(Format::Native, &fixtures().join("native-error-count"));
    assert_eq!(native.meta.task.complexity, Some(2));
    assert!(native.truth.contains("3 ERROR lines"));
    for via in [
        Format::Reference,
        Format::Harbor,
        Format::Tb1,
        Format::Native,
    ] {
        let back = round_trip(&native, via);
        assert_eq!(back, native, "native -> {via:?} -> native changed the task");
        // The network flag survives every format, either way.
        let mut networked = native.clone();
        networked.meta.environment.network = !native.meta.environment.network;
        assert_eq!(
            round_trip(&networked, via),
            networked,
            "network via {via:?}"
        );
    }
}

#[test]
fn harbor_import_keeps_unknown_keys_and_maps_boilerplate() {
    let task = read(Format::Harbor, &fixtures().join("harbor-word-count"));
    assert_eq!(task.meta.task.source_format, "harbor");
    assert_eq!(task.meta.task.category, "text-processing");
    assert_eq!(task.meta.task.tags, vec!["wc", "files"]);
    assert_eq!(task.meta.agent.user, "root");
    assert_eq!(task.meta.environment.workdir, "/app");
    assert!(
        task.meta.environment.network,
        "Harbor's default network_mode is public"
    );
    assert_eq!(task.meta.verifier.final_tests, vec!["test_outputs.py"]);
    assert_eq!(
        task.meta.verifier.script, None,
        "the uv/pytest boilerplate is mapped to pytest"
    );
    assert!(!task.tests.contains("test.sh"));
    assert_eq!(
        task.meta.environment.extra["memory_mb"].as_integer(),
        Some(1024)
    );
    let metadata = task.meta.extra["metadata"].as_table().unwrap();
    assert_eq!(metadata["custom_rank"].as_integer(), Some(7));
    assert_eq!(metadata["author_name"].as_str(), Some("Endless Fixtures"));
    assert!(task.environment.contains("data/poem.txt"));
    assert!(task.solve_script().unwrap().contains("wc -w"));

    // Export writes a working test.sh that writes the reward file, and keeps the keys.
    let dir = tempfile::tempdir().unwrap();
    Format::Harbor.write(&task, dir.path()).unwrap();
    let test_sh = fs::read_to_string(dir.path().join("tests/test.sh")).unwrap();
    assert!(test_sh.contains("python3 -m pytest") && test_sh.contains("/tests/test_outputs.py"));
    assert!(test_sh.contains("/logs/verifier/reward.txt"));
    let toml_text = fs::read_to_string(dir.path().join("task.toml")).unwrap();
    assert!(toml_text.contains("custom_rank = 7") && toml_text.contains("build_timeout_sec = 300"));
    assert!(
        toml_text.contains("network_mode = \"public\""),
        "{toml_text}"
    );
    assert_eq!(read(Format::Harbor, dir.path()), task);
}

#[test]
fn custom_harbor_verifier_is_kept_as_is() {
    let task = read(Format::Harbor, &fixtures().join("harbor-custom-verifier"));
    assert_eq!(task.meta.verifier.script.as_deref(), Some("test.sh"));
    assert!(task.tests.text("test.sh").unwrap().contains("stat -c %a"));
    assert_eq!(task.meta.environment.workdir, "/srv");
    assert!(
        !task.meta.environment.network,
        "allow_internet = false is honoured"
    );
    assert!(!task.meta.environment.extra.contains_key("allow_internet"));
    assert_eq!(round_trip(&task, Format::Harbor), task);
    assert_eq!(round_trip(&task, Format::Native), task);
}

/// A task folder in the shape the reference's pipeline writes.
const REFERENCE_TASK: &str = "task_000042_3f9c2a1b";

#[test]
fn reference_and_tb1_import() {
    let r = read(Format::Reference, &fixtures().join(REFERENCE_TASK));
    assert_eq!(r.meta.task.id, REFERENCE_TASK);
    assert_eq!(r.meta.task.source_format, "reference");
    assert!(r.truth.contains("reports.tar.gz"));
    assert!(r.environment.contains("container.def"));
    assert!(r.tests.contains("test_initial_state.py") && r.tests.contains("test_final_state.py"));
    assert!(
        r.solve_script().is_none(),
        "solutions/ holds summaries, not an oracle"
    );
    assert!(r.solution.contains("o3_summary.json") && r.solution.contains("summary.json"));
    let s = r
        .meta
        .provenance
        .solvability
        .as_ref()
        .expect("the o3 record");
    assert_eq!(s.solver, "o3");
    assert_eq!((s.samples, s.successes), (Some(16), Some(7)));
    assert_eq!(s.pass_at_k["1"], 0.4375);
    assert_eq!(s.pass_at_k["16"], 1.0);
    assert_eq!(s.source, "solution/o3_summary.json");
    let notes = r.meta.provenance.extra["import_notes"].as_array().unwrap();
    assert!(
        notes[0].as_str().unwrap().contains("ubuntu:22.04"),
        "{notes:?}"
    );
    assert_eq!(round_trip(&r, Format::Reference), r);
    assert_eq!(round_trip(&r, Format::Harbor), r);
    assert_eq!(round_trip(&r, Format::Native), r);

    let t = read(Format::Tb1, &fixtures().join("tb1-env-file"));
    assert!(t.instruction.contains("PORT to 8080"));
    assert_eq!(t.meta.agent.timeout_sec, 360.0);
    assert_eq!(t.meta.verifier.final_tests, vec!["test_outputs.py"]);
    assert!(t.environment.contains("docker-compose.yaml"));
    assert!(
        t.meta.environment.network,
        "docker-compose's default network is on"
    );
    assert_eq!(t.meta.extra["tb1"]["parser_name"].as_str(), Some("pytest"));
    assert!(t.solve_script().unwrap().contains("DEBUG=false"));
    assert_eq!(round_trip(&t, Format::Tb1), t);
    assert_eq!(round_trip(&t, Format::Harbor), t);
}

#[test]
fn reference_export_gives_back_the_o3_summary_unchanged() {
    let src = fixtures().join(REFERENCE_TASK);
    let task = read(Format::Reference, &src);
    let out = tempfile::tempdir().unwrap();
    Format::Reference.write(&task, out.path()).unwrap();
    let json = |dir: &Path| -> serde_json::Value {
        serde_json::from_slice(&fs::read(dir.join("solutions/o3_summary.json")).unwrap()).unwrap()
    };
    assert_eq!(json(out.path()), json(&src));
    assert_eq!(
        fs::read(out.path().join("solutions/o3_summary.json")).unwrap(),
        fs::read(src.join("solutions/o3_summary.json")).unwrap()
    );
    for file in [
        "container.def",
        "test_initial_state.py",
        "test_final_state.py",
    ] {
        assert_eq!(
            fs::read(out.path().join(file)).unwrap(),
            fs::read(src.join(file)).unwrap(),
            "{file}"
        );
    }
    let exported: serde_json::Value =
        serde_json::from_slice(&fs::read(out.path().join("task.json")).unwrap()).unwrap();
    let original: serde_json::Value =
        serde_json::from_slice(&fs::read(src.join("task.json")).unwrap()).unwrap();
    for key in ["description", "truth", "name"] {
        assert_eq!(exported[key], original[key], "{key}");
    }

    // Tests kept in a tests/ folder are read too.
    let moved = tempfile::tempdir().unwrap();
    copy_dir(&src, moved.path());
    fs::create_dir(moved.path().join("tests")).unwrap();
    for file in ["test_initial_state.py", "test_final_state.py"] {
        fs::rename(
            moved.path().join(file),
            moved.path().join("tests").join(file),
        )
        .unwrap();
    }
    assert_eq!(read(Format::Reference, moved.path()), task);
}

#[test]
fn bad_o3_summaries_are_errors_naming_file_and_field() {
    let dir = tempfile::tempdir().unwrap();
    copy_dir(&fixtures().join(REFERENCE_TASK), dir.path());
    let summary = dir.path().join("solutions/o3_summary.json");
    fs::write(&summary, r#"{"num_runs": 16, "pass_at_k": {"16": "all"}}"#).unwrap();
    let e = error_of(dir.path());
    assert!(
        e.contains("solutions/o3_summary.json") && e.contains("pass_at_k.16"),
        "{e}"
    );
    fs::write(&summary, r#"{"results": [{"success": 1}]}"#).unwrap();
    let e = error_of(dir.path());
    assert!(e.contains("results[0].success"), "{e}");
    // Unknown keys and missing fields are fine.
    fs::write(
        &summary,
        r#"{"model": "o3", "results": [{"success": true}]}"#,
    )
    .unwrap();
    let t = read(Format::Reference, dir.path());
    let s = t.meta.provenance.solvability.unwrap();
    assert_eq!((s.samples, s.successes), (Some(1), Some(1)));
}

#[test]
fn cli_shows_the_imported_pass_at_16() {
    let ws = tempfile::tempdir().unwrap();
    let src = fixtures().join(REFERENCE_TASK);
    let out = endless(ws.path(), &["tasks", "import", src.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let show = endless(ws.path(), &["tasks", "show", REFERENCE_TASK, "--json"]);
    let obj: serde_json::Value = serde_json::from_slice(&show.stdout).unwrap();
    let record = &obj["provenance"]["solvability"];
    assert_eq!(record["solver"], "o3");
    assert_eq!(record["samples"], 16);
    assert_eq!(record["successes"], 7);
    assert_eq!(record["pass_at_k"]["16"], 1.0);
    assert_eq!(
        obj["pass_at_k"]["16"], 1.0,
        "the index takes the record's pass@k"
    );
    assert_eq!(obj["pass_at_k"]["1"], 0.4375);

    let exported = tempfile::tempdir().unwrap();
    let out = endless(
        ws.path(),
        &[
            "tasks",
            "export",
            REFERENCE_TASK,
            "--format",
            "reference",
            "--out",
            exported.path().to_str().unwrap(),
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let summary = |dir: &Path| -> serde_json::Value {
        serde_json::from_slice(&fs::read(dir.join("solutions/o3_summary.json")).unwrap()).unwrap()
    };
    assert_eq!(
        summary(&exported.path().join(REFERENCE_TASK)),
        summary(&src)
    );
}

/// `endless tasks list | head`: a reader that has gone ends the listing as
/// it ends Unix tools (status 141, nothing on stderr), never with a panic.
#[test]
fn a_listing_whose_reader_has_gone_ends_quietly() {
    let ws = tempfile::tempdir().unwrap();
    let src = fixtures().join(REFERENCE_TASK);
    let out = endless(ws.path(), &["tasks", "import", src.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut child = support::cli::command(ws.path(), &["tasks", "list"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The reader goes before the first line is written.
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(out.status.code(), Some(141), "{stderr}");
}

#[test]
fn cli_set_says_what_changed_and_search_finds_tags() {
    let ws = tempfile::tempdir().unwrap();
    let src = fixtures().join(REFERENCE_TASK);
    let out = endless(ws.path(), &["tasks", "import", src.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = endless(
        ws.path(),
        &[
            "tasks",
            "set",
            REFERENCE_TASK,
            "--status",
            "accepted",
            "--tags",
            "zebra-tag",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains(&format!("{REFERENCE_TASK}: status candidate -> accepted")),
        "{said}"
    );
    assert!(said.contains("-> zebra-tag"), "{said}");
    // Only the tag says "zebra": `/zebra` in the TUI finds it, and so does the CLI.
    let list = endless(ws.path(), &["tasks", "list", "--search", "ZEBRA", "--json"]);
    let rows: serde_json::Value = serde_json::from_slice(&list.stdout).unwrap();
    assert_eq!(rows.as_array().map(Vec::len), Some(1), "{rows}");
    assert_eq!(rows[0]["id"], REFERENCE_TASK);
}

fn copy_dir(from: &Path, to: &Path) {
    for entry in walkdir::WalkDir::new(from) {
        let entry = entry.unwrap();
        let rel = entry.path().strip_prefix(from).unwrap();
        let dest = to.join(rel);
        if entry.file_type().is_dir() {
            fs::create_dir_all(&dest).unwrap();
        } else {
            fs::copy(entry.path(), &dest).unwrap();
        }
    }
}

fn error_of(dir: &Path) -> String {
    let format = Format::detect(dir).expect("detected");
    format
        .read(dir, &ReadLimits::default())
        .unwrap_err()
        .to_string()
}

#[test]
fn bad_bundles_get_errors_naming_file_and_field() {
    let base = fixtures().join("native-error-count");
    let tmp = tempfile::tempdir().unwrap();
    let case = |name: &str| {
        let d = tmp.path().join(name);
        copy_dir(&base, &d);
        d
    };

    let d = case("no-instruction");
    fs::remove_file(d.join("instruction.md")).unwrap();
    let e = error_of(&d);
    assert!(e.contains("instruction.md") && e.contains("missing"), "{e}");

    let d = case("wrong-type");
    let t = fs::read_to_string(d.join("task.toml"))
        .unwrap()
        .replace("complexity = 2", "complexity = \"high\"");
    fs::write(d.join("task.toml"), t).unwrap();
    let e = error_of(&d);
    assert!(
        e.contains("task.toml") && e.contains("task.complexity"),
        "{e}"
    );

    let d = case("bad-utf8");
    fs::write(d.join("instruction.md"), b"count \xff\xfe lines").unwrap();
    let e = error_of(&d);
    assert!(
        e.contains("instruction.md") && e.contains("UTF-8") && e.contains("offset 6"),
        "{e}"
    );

    let d = case("escaping-link");
    let secret = tmp.path().join("secret.txt");
    fs::write(&secret, "host secret").unwrap();
    std::os::unix::fs::symlink(&secret, d.join("environment/files/leak.txt")).unwrap();
    let e = error_of(&d);
    assert!(
        e.contains("leak.txt") && e.contains("outside the task directory"),
        "{e}"
    );

    let d = case("too-big");
    let limits = ReadLimits {
        max_file_bytes: 64,
        ..Default::default()
    };
    let e = read_native(&d, &limits).unwrap_err().to_string();
    assert!(e.contains("over the limit"), "{e}");

    let d = case("bad-id");
    let t = fs::read_to_string(d.join("task.toml"))
        .unwrap()
        .replace("id = \"native-error-count\"", "id = \"../evil\"");
    fs::write(d.join("task.toml"), t).unwrap();
    let e = error_of(&d);
    assert!(e.contains("task.id"), "{e}");

    let d = tmp.path().join("harbor-bad-json");
    fs::create_dir_all(&d).unwrap();
    fs::write(d.join("task.json"), "{\"description\": 3}").unwrap();
    let e = error_of(&d);
    assert!(e.contains("task.json") && e.contains("description"), "{e}");
}

#[test]
fn import_reports_failures_and_never_overwrites_silently() {
    let ws_dir = tempfile::tempdir().unwrap();
    let mut ws = Workspace::open(ws_dir.path()).unwrap();
    let src = tempfile::tempdir().unwrap();
    copy_dir(&fixtures(), src.path());
    fs::create_dir_all(src.path().join("not-a-task")).unwrap();
    fs::write(src.path().join("not-a-task/readme.txt"), "hi").unwrap();
    fs::remove_file(src.path().join("tb1-env-file/task.yaml")).unwrap();
    fs::write(
        src.path().join("tb1-env-file/task.yaml"),
        "instruction: [unclosed",
    )
    .unwrap();

    let report =
        import_paths(&mut ws, &[src.path().to_path_buf()], None, OnConflict::Fail).unwrap();
    assert_eq!(report.imported(), 4, "{report:#?}");
    assert_eq!(report.failed(), 1, "{report:#?}");
    assert!(report
        .outcomes
        .iter()
        .any(|o| matches!(o, ImportOutcome::Failed { error, .. } if error.contains("task.yaml"))));

    // Same content again: unchanged. Changed content with the same id: refused, then renamed.
    let again = import_paths(
        &mut ws,
        &[src.path().join("native-error-count")],
        None,
        OnConflict::Fail,
    )
    .unwrap();
    assert!(matches!(again.outcomes[0], ImportOutcome::Unchanged { .. }));
    fs::write(
        src.path().join("native-error-count/instruction.md"),
        "A different instruction.",
    )
    .unwrap();
    let clash = import_paths(
        &mut ws,
        &[src.path().join("native-error-count")],
        None,
        OnConflict::Fail,
    )
    .unwrap();
    assert!(
        matches!(&clash.outcomes[0], ImportOutcome::Failed { error, .. } if error.contains("already exists"))
    );
    assert!(ws
        .load_task("native-error-count")
        .unwrap()
        .instruction
        .contains("incident"));
    let renamed = import_paths(
        &mut ws,
        &[src.path().join("native-error-count")],
        None,
        OnConflict::Rename,
    )
    .unwrap();
    assert!(
        matches!(&renamed.outcomes[0], ImportOutcome::Imported { id, .. } if id == "native-error-count-2")
    );
    assert_eq!(ws.list_tasks(&TaskFilter::default()).unwrap().len(), 5);
}

#[test]
fn interrupted_writes_are_never_visible_and_curation_persists() {
    let ws_dir = tempfile::tempdir().unwrap();
    {
        let ws = Workspace::open(ws_dir.path()).unwrap();
        let task = read(Format::Native, &fixtures().join("native-error-count"));
        ws.add_task(&task, TaskStatus::Candidate).unwrap();
        ws.set_status(task.id(), TaskStatus::Accepted).unwrap();
        ws.set_rating(task.id(), Some(4)).unwrap();
        assert!(ws.set_rating(task.id(), Some(9)).is_err());
    }
    // A half-written bundle left by a killed import, and a bundle written but not indexed.
    let half = ws_dir.path().join("tasks/.tmp-abc123");
    fs::create_dir_all(half.join("environment")).unwrap();
    fs::write(half.join("task.toml"), "[task]\nid = \"half\"\n").unwrap();
    let day_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(86_400);
    fs::File::open(&half)
        .unwrap()
        .set_modified(day_ago)
        .unwrap();
    // A staging directory being written right now by another thread stays.
    let live = ws_dir.path().join("tasks/.tmp-live");
    fs::create_dir_all(&live).unwrap();
    let orphan = ws_dir.path().join("tasks/orphan-task");
    let mut t = read(Format::Native, &fixtures().join("native-error-count"));
    t.meta.task.id = "orphan-task".into();
    fs::create_dir_all(&orphan).unwrap();
    write_native(&t, &orphan).unwrap();

    let ws = Workspace::open(ws_dir.path()).unwrap();
    let ids = ws.task_ids().unwrap();
    assert_eq!(ids, vec!["native-error-count", "orphan-task"]);
    assert!(!half.exists());
    assert!(live.exists());
    let row = ws.task_row("native-error-count").unwrap();
    assert_eq!((row.status, row.rating), (TaskStatus::Accepted, Some(4)));
    let found =
        endless::workbench::task_search::find_tasks(&ws, &TaskFilter::default(), "INCIDENT")
            .unwrap();
    assert_eq!(found.len(), 2);
}

#[test]
fn older_workspace_schema_is_migrated() {
    let dir = tempfile::tempdir().unwrap();
    {
        // A workspace written by version 1 of the schema, with a job in it.
        let conn = rusqlite::Connection::open(dir.path().join("endless.db")).unwrap();
        conn.execute_batch(
            "CREATE TABLE tasks (id TEXT PRIMARY KEY, name TEXT NOT NULL DEFAULT '', category TEXT NOT NULL DEFAULT '', complexity INTEGER, scenario TEXT NOT NULL DEFAULT '', tags TEXT NOT NULL DEFAULT '[]', status TEXT NOT NULL DEFAULT 'candidate', source_format TEXT NOT NULL DEFAULT 'native', instruction TEXT NOT NULL DEFAULT '', pass_at_k TEXT NOT NULL DEFAULT '{}', rating INTEGER, notes TEXT NOT NULL DEFAULT '', created_at TEXT NOT NULL, updated_at TEXT NOT NULL);
             CREATE INDEX tasks_category ON tasks (category);
             CREATE INDEX tasks_status ON tasks (status);
             CREATE TABLE runs (id TEXT PRIMARY KEY, kind TEXT NOT NULL, policy TEXT NOT NULL DEFAULT '', config TEXT NOT NULL DEFAULT '{}', summary TEXT NOT NULL DEFAULT '{}', created_at TEXT NOT NULL, finished_at TEXT);
             CREATE TABLE episodes (run_id TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE, task_id TEXT NOT NULL, sample INTEGER NOT NULL, passed INTEGER NOT NULL, reward REAL NOT NULL DEFAULT 0, turns INTEGER NOT NULL DEFAULT 0, end_reason TEXT NOT NULL DEFAULT '', failure_mode TEXT, path TEXT NOT NULL DEFAULT '', rating INTEGER, label TEXT, notes TEXT NOT NULL DEFAULT '', created_at TEXT NOT NULL, PRIMARY KEY (run_id, task_id, sample));
             CREATE INDEX episodes_task ON episodes (task_id);
             CREATE TABLE jobs (id TEXT PRIMARY KEY, kind TEXT NOT NULL, params TEXT NOT NULL DEFAULT '{}', status TEXT NOT NULL, progress REAL NOT NULL DEFAULT 0, message TEXT NOT NULL DEFAULT '', created_at TEXT NOT NULL, updated_at TEXT NOT NULL);
             INSERT INTO jobs (id, kind, status, created_at, updated_at) VALUES ('eval-old', 'eval', 'running', 'x', 'x');
             PRAGMA user_version = 1;",
        )
        .unwrap();
    }
    let ws = Workspace::open(dir.path()).unwrap();
    assert!(ws.task_ids().unwrap().is_empty());
    assert_eq!(ws.list_jobs().unwrap()[0].id, "eval-old");
    let jobs = endless::jobs::JobManager::new(Some(dir.path())).unwrap();
    let id = jobs
        .spawn("noop", serde_json::json!({}), |_| Ok("done".into()))
        .unwrap();
    jobs.wait(&id);
    assert_eq!(ws.list_jobs().unwrap().len(), 2);
    let conn = rusqlite::Connection::open(dir.path().join("endless.db")).unwrap();
    let v: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(v as usize, endless::store::SCHEMA_VERSION);
}

#[test]
fn cli_import_export_harbor_reimport_is_identical() {
    let a = tempfile::tempdir().unwrap();
    let out = endless(a.path(), &["tasks", "import", fixtures().to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let list = endless(a.path(), &["tasks", "list", "--json"]);
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&list.stdout).unwrap();
    assert_eq!(rows.len(), 5);
    for key in [
        "id",
        "name",
        "category",
        "complexity",
        "status",
        "pass_at_k",
    ] {
        assert!(rows[0].get(key).is_some(), "tasks list --json lacks {key}");
    }
    let show = endless(a.path(), &["tasks", "show", "native-error-count", "--json"]);
    let obj: serde_json::Value = serde_json::from_slice(&show.stdout).unwrap();
    for key in [
        "id",
        "name",
        "instruction",
        "truth",
        "category",
        "complexity",
        "status",
        "source_format",
        "provenance",
    ] {
        assert!(obj.get(key).is_some(), "tasks show --json lacks {key}");
    }

    let exported = tempfile::tempdir().unwrap();
    let out = endless(
        a.path(),
        &[
            "tasks",
            "export",
            "--all",
            "--format",
            "harbor",
            "--out",
            exported.path().to_str().unwrap(),
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let b = tempfile::tempdir().unwrap();
    let out = endless(
        b.path(),
        &[
            "tasks",
            "import",
            "--format",
            "harbor",
            exported.path().to_str().unwrap(),
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let wa = Workspace::open(a.path()).unwrap();
    let wb = Workspace::open(b.path()).unwrap();
    let ids = wa.task_ids().unwrap();
    assert_eq!(ids, wb.task_ids().unwrap());
    for id in ids {
        assert_eq!(
            wa.load_task(&id).unwrap(),
            wb.load_task(&id).unwrap(),
            "{id} changed through Harbor"
        );
    }

    let bad = endless(a.path(), &["tasks", "show", "nope"]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("nope"));
}

fn arb_text() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-zA-Z0-9 ,.!?\\n]{0,60}",
        any::<String>().prop_map(|s| s.chars().filter(|c| *c != '\r' && *c != '\0').collect()),
    ]
}

prop_compose! {
    fn arb_task()(
        id in "[a-z][a-z0-9-]{0,20}",
        name in arb_text(),
        category in "[a-z ]{0,16}",
        complexity in proptest::option::of(1u8..=6),
        tags in proptest::collection::vec("[a-z]{1,8}", 0..4),
        instruction in arb_text().prop_filter("non-empty", |s| !s.trim().is_empty()),
        truth in arb_text(),
        setup in arb_text(),
        data in proptest::collection::vec(any::<u8>(), 0..64),
        max_turns in 1u32..200,
        seed in proptest::option::of(any::<u32>()),
    ) -> Task {
        let mut meta = TaskMeta::default();
        meta.task.id = id;
        meta.task.name = name;
        meta.task.category = category;
        meta.task.complexity = complexity;
        meta.task.tags = tags;
        meta.agent.max_turns = max_turns;
        meta.provenance.seed = seed.map(u64::from);
        let mut environment = FileTree::default();
        environment.insert("setup.sh", setup.into_bytes(), true);
        environment.insert("files/blob.bin", data, false);
        let mut tests = FileTree::default();
        tests.insert_text("test_initial_state.py", "def test_a():\n    pass\n");
        tests.insert_text("test_final_state.py", "def test_b():\n    assert False\n");
        let mut solution = FileTree::default();
        solution.insert("solve.sh", b"true\n".to_vec(), true);
        Task { meta, instruction, truth, environment, tests, solution }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    #[test]
    fn serialisers_round_trip(task in arb_task()) {
        for via in [Format::Native, Format::Reference, Format::Harbor, Format::Tb1] {
            let back = round_trip(&task, via);
            prop_assert_eq!(&back, &task, "via {:?}", via);
        }
    }
}

#[test]
fn cli_validates_every_imported_format_in_the_sandbox() {
    let ws = tempfile::tempdir().unwrap();
    let out = endless(
        ws.path(),
        &["tasks", "import", fixtures().to_str().unwrap()],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = endless(ws.path(), &["tasks", "validate", "--all", "--json"]);
    let verdicts: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(verdicts.len(), 5);
    for v in &verdicts {
        assert_eq!(v["ok"], true, "{v:#}");
    }
    assert!(out.status.success());
    // The Harbor task's oracle ran as root in /app; the reference task has none
    // (its solutions/ holds the o3 summary).
    let oracle_ran = verdicts
        .iter()
        .filter(|v| v["validation"]["oracle_passes"] == true)
        .count();
    assert_eq!(oracle_ran, 3);
}
