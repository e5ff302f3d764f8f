//! `endless tasks audit` end to end in the real sandbox: each fixture task
//! under `tests/fixtures/audit/` has a planted defect and is flagged with
//! the right label and evidence; the clean one gets no finding; a task
//! without an oracle gets only the checks that need none; a check out of
//! time is reported as such; reports are stored, indexed, resumed and
//! rebuilt from their files.

#![allow(clippy::unwrap_used)] // tests and benches fail loudly

mod support;

use std::path::{Path, PathBuf};

use serde_json::Value;
use support::cli::endless;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/audit")
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

/// A workspace with the fixtures imported (and `extra` bundles).
fn workspace(extra: &[&Path]) -> tempfile::TempDir {
    let ws = tempfile::tempdir().unwrap();
    let mut args: Vec<String> = vec!["tasks".into(), "import".into()];
    for e in std::fs::read_dir(fixtures()).unwrap() {
        args.push(e.unwrap().path().display().to_string());
    }
    args.extend(extra.iter().map(|p| p.display().to_string()));
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = endless(ws.path(), &refs);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    ws
}

/// The outcomes `tasks audit ... --json` printed, by task id, and whether
/// it exited with success.
fn audit(ws: &Path, args: &[&str]) -> (std::collections::BTreeMap<String, Value>, bool) {
    let mut all = vec!["tasks", "audit", "--json"];
    all.extend(args);
    let out = endless(ws, &all);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}\nstdout: {}\nstderr: {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let by_id: std::collections::BTreeMap<String, Value> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|o| (o["id"].as_str().unwrap().to_string(), o.clone()))
        .collect();
    // With --json, each task still says it is done on stderr as it finishes.
    let err = String::from_utf8_lossy(&out.stderr);
    for id in by_id.keys() {
        assert!(err.contains(&format!("{id}: ")), "no line for {id}: {err}");
    }
    (by_id, out.status.success())
}

fn labels(outcome: &Value) -> Vec<String> {
    let mut out: Vec<String> = findings(outcome)
        .iter()
        .map(|f| f["label"].as_str().unwrap().to_string())
        .collect();
    out.sort();
    out.dedup();
    out
}

fn findings(outcome: &Value) -> Vec<Value> {
    outcome["report"]["checks"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|c| c["findings"].as_array().unwrap().clone())
        .collect()
}

/// The finding labelled `label` whose summary contains `needle`.
fn finding(all: &[Value], label: &str, needle: &str) -> Value {
    all.iter()
        .find(|f| f["label"] == label && f["summary"].as_str().unwrap().contains(needle))
        .cloned()
        .unwrap_or_else(|| panic!("no {label} finding with {needle:?} in {all:#?}"))
}

fn check<'a>(outcome: &'a Value, name: &str) -> &'a Value {
    outcome["report"]["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["check"] == name)
        .unwrap_or_else(|| panic!("no {name} check in {outcome:#}"))
}

#[test]
fn every_planted_defect_is_flagged_with_its_evidence_and_the_clean_task_is_not() {
    if !sandbox_here() {
        return;
    }
    let ws = workspace(&[]);
    // Many runs of the flaky check: an unseeded test that fails half the
    // time gives one verdict 16 times running once in 2^15.
    let (out, ok) = audit(ws.path(), &["--all", "--flaky-runs", "8"]);
    assert!(!ok, "findings make a non-zero exit");
    assert_eq!(out.len(), 7);

    let clean = &out["audit-clean"];
    assert_eq!(labels(clean), Vec::<String>::new(), "{clean:#}");
    let report = &clean["report"];
    for c in report["checks"].as_array().unwrap() {
        assert_eq!(c["status"], "ok", "{c:#}");
    }
    let (killed, total) = (&report["mutation"]["killed"], &report["mutation"]["total"]);
    assert!(
        total.as_u64().unwrap() >= 3 && killed == total,
        "{report:#}"
    );

    let empty = &out["audit-empty-file"];
    assert_eq!(labels(empty), vec!["cheap-solution", "weak-tests"]);
    let all = findings(empty);
    let f = finding(&all, "weak-tests", "/home/user/admins.txt: emptied");
    assert!(
        f["evidence"].as_str().unwrap().contains("-ana\n-cyd"),
        "{f:#}"
    );
    let f = finding(&all, "cheap-solution", "empty-files");
    assert!(
        f["evidence"].as_str().unwrap().contains(": > \"$p\""),
        "{f:#}"
    );
    let score = &empty["report"]["mutation"];
    assert!(
        score["killed"].as_u64() < score["total"].as_u64(),
        "{score}"
    );

    let before = &out["audit-passes-before-work"];
    assert!(labels(before).contains(&"passes-without-work".to_string()));
    let f = finding(
        &findings(before),
        "passes-without-work",
        "1 of 1 final tests",
    );
    assert_eq!(f["tests"][0], "test_final_state::test_settings_kept");
    // The weak test misses the line the work adds.
    finding(
        &findings(before),
        "weak-tests",
        "app.conf: last line dropped",
    );

    let random = &out["audit-unseeded-random"];
    assert!(labels(random).contains(&"flaky".to_string()), "{random:#}");
    let f = finding(&findings(random), "flaky", "different verdicts");
    assert_eq!(
        f["tests"][0],
        "test_final_state::test_doubles_a_random_number"
    );
    assert!(
        f["evidence"].as_str().unwrap().contains("oracle run 8"),
        "{f:#}"
    );

    let year = &out["audit-current-year"];
    let f = finding(&findings(year), "time-dependent", "a year later");
    assert_eq!(f["tests"][0], "test_final_state::test_report_header");
    assert!(
        f["evidence"]
            .as_str()
            .unwrap()
            .contains("passes normally, fails under a clock a year later"),
        "{f:#}"
    );
    assert!(!labels(year).contains(&"order-dependent".to_string()));

    let hidden = &out["audit-hidden-name"];
    assert_eq!(labels(hidden), vec!["underspecified"], "{hidden:#}");
    let f = finding(&findings(hidden), "underspecified", "line_count.out");
    assert!(
        f["evidence"]
            .as_str()
            .unwrap()
            .starts_with("tests/test_final_state.py:3:"),
        "{f:#}"
    );

    let net = &out["audit-needs-network"];
    let c = check(net, "needs-network");
    if c["status"] == "skipped" {
        // This sandbox cannot give a session network: it says why.
        assert!(
            c["why"]
                .as_str()
                .unwrap()
                .contains("cannot give a session network"),
            "{c:#}"
        );
        eprintln!("needs-network compared offline only: {}", c["why"]);
    } else {
        let f = finding(&findings(net), "needs-network", "only with network");
        assert!(
            f["evidence"]
                .as_str()
                .unwrap()
                .contains("/dev/udp/1.1.1.1/53"),
            "{f:#}"
        );
    }
    // The oracle fails offline: the checks that vary its end state say why not.
    assert_eq!(check(net, "weak-tests")["status"], "skipped");

    // Stored beside the bundle and indexed.
    let dir = ws.path().join("tasks/audit-empty-file");
    assert!(dir.join("audit.json").is_file());
    let opened = endless::store::Workspace::open(ws.path()).unwrap();
    let row = opened.audit_row("audit-empty-file").unwrap().unwrap();
    assert_eq!(row.labels, vec!["weak-tests", "cheap-solution"]);
    drop(opened);

    // `--exclude-audit` leaves the flagged tasks out of a dataset.
    let data = ws.path().join("dataset");
    let out = endless(
        ws.path(),
        &[
            "tasks",
            "export",
            "--all",
            "--format",
            "jsonl",
            "--out",
            data.to_str().unwrap(),
            "--exclude-audit",
            "weak-tests,flaky",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: usize = ["train.jsonl", "validation.jsonl"]
        .iter()
        .map(|f| {
            std::fs::read_to_string(data.join(f))
                .unwrap_or_default()
                .lines()
                .count()
        })
        .sum();
    assert_eq!(rows, 4, "7 tasks less the 3 flagged weak-tests or flaky");
    let bad = endless(
        ws.path(),
        &["eval", "--policy", "oracle", "--exclude-audit", "weak"],
    );
    assert!(String::from_utf8_lossy(&bad.stderr).contains("unknown audit label \"weak\""));

    // A second audit resumes: every stored report is current.
    let (again, _) = audit(ws.path(), &["--all", "--flaky-runs", "8"]);
    assert!(again.values().all(|o| o["resumed"] == true), "{again:#?}");

    // The index is rebuilt from the files.
    std::fs::remove_file(ws.path().join("endless.db")).unwrap();
    let out = endless(ws.path(), &["workspace", "rebuild"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let opened = endless::store::Workspace::open(ws.path()).unwrap();
    assert_eq!(opened.audit_rows().unwrap().len(), 7);
    assert_eq!(
        opened
            .tasks_with_audit_labels(&["underspecified".into()])
            .unwrap(),
        vec!["audit-hidden-name"]
    );
}

#[test]
fn without_an_oracle_only_the_checks_that_need_none_run_and_out_of_time_is_never_a_pass() {
    if !sandbox_here() {
        return;
    }
    let scratch = tempfile::tempdir().unwrap();
    let bare = scratch.path().join("audit-no-oracle");
    let copy = std::process::Command::new("cp")
        .arg("-r")
        .arg(fixtures().join("audit-clean"))
        .arg(&bare)
        .status()
        .unwrap();
    assert!(copy.success());
    std::fs::remove_dir_all(bare.join("solution")).unwrap();
    let toml = std::fs::read_to_string(bare.join("task.toml")).unwrap();
    std::fs::write(
        bare.join("task.toml"),
        toml.replace("\"audit-clean\"", "\"audit-no-oracle\""),
    )
    .unwrap();
    let ws = workspace(&[&bare]);

    let (out, ok) = audit(ws.path(), &["audit-no-oracle"]);
    assert!(ok, "a clean task without oracle: {out:#?}");
    let o = &out["audit-no-oracle"];
    assert_eq!(o["report"]["has_oracle"], false);
    for name in ["weak-tests", "flaky", "time-order", "needs-network"] {
        let c = check(o, name);
        assert_eq!(c["status"], "skipped", "{c:#}");
        assert!(c["why"].as_str().unwrap().contains("no oracle"), "{c:#}");
    }
    for name in ["passes-without-work", "cheap-solutions", "underspecified"] {
        assert_eq!(check(o, name)["status"], "ok", "{o:#}");
    }

    // A budget spent before the first mutant: out of time, not a pass.
    let (out, ok) = audit(
        ws.path(),
        &[
            "audit-clean",
            "--checks",
            "weak-tests,cheap-solutions",
            "--budget",
            "0.000001",
            "--fresh",
        ],
    );
    assert!(!ok, "out of time is not a success");
    let o = &out["audit-clean"];
    for name in ["weak-tests", "cheap-solutions"] {
        let c = check(o, name);
        assert_eq!(c["status"], "out-of-time", "{c:#}");
        assert!(c["done"].as_str().unwrap().starts_with("0 of "), "{c:#}");
    }
    assert_eq!(
        o["report"]["checks"].as_array().unwrap().len(),
        2,
        "only the checks asked for"
    );

    // Bad input is refused with a clear error.
    let bad = endless(ws.path(), &["tasks", "audit", "--all", "--checks", "weak"]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("unknown check \"weak\""));
}
