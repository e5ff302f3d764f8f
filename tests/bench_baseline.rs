//! `endless bench WHAT --baseline OTHER` end to end: both sides run the
//! same bench (here this binary against itself) in alternating rounds, and
//! the report holds each side's rounds, medians and the ratios; `--dump`
//! and `--rounds` without `--baseline` are refused.

#![allow(clippy::unwrap_used)] // tests fail loudly

use std::process::{Command, Output};

/// `endless --workspace WS bench ARGS` with a private cache, state and config.
fn bench(ws: &std::path::Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_endless"))
        .arg("--workspace")
        .arg(ws)
        .arg("bench")
        .args(args)
        .env("XDG_CACHE_HOME", ws.join(".cache"))
        .env("XDG_STATE_HOME", ws.join(".state"))
        .env("XDG_CONFIG_HOME", ws.join(".config"))
        .output()
        .unwrap()
}

#[test]
fn import_against_a_baseline_reports_medians_and_ratios() {
    let ws = tempfile::tempdir().unwrap();
    let me = env!("CARGO_BIN_EXE_endless");
    let out = bench(
        ws.path(),
        &[
            "import",
            "--n",
            "8",
            "--baseline",
            me,
            "--rounds",
            "2",
            "--json",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["bench"], "import");
    for side in ["current", "baseline"] {
        assert_eq!(json[side]["rounds"].as_array().unwrap().len(), 2, "{json}");
        assert_eq!(json[side]["median"]["tasks"], 8.0, "{json}");
    }
    assert_eq!(json["ratio"]["tasks"], 1.0, "{json}");
    assert!(json["ratio"]["parallel_tasks_per_sec"].as_f64().unwrap() > 0.0);

    let text = bench(
        ws.path(),
        &["import", "--n", "8", "--baseline", me, "--rounds", "1"],
    );
    let text = String::from_utf8_lossy(&text.stdout).to_string();
    assert!(text.contains("median of 1 alternating rounds"), "{text}");
    assert!(text.contains("sequential_tasks_per_sec"), "{text}");
}

#[test]
fn a_dump_or_rounds_without_a_baseline_are_refused() {
    let ws = tempfile::tempdir().unwrap();
    let me = env!("CARGO_BIN_EXE_endless");
    let dump = ws.path().join("dump");
    let out = bench(
        ws.path(),
        &["ppo", "--dump", dump.to_str().unwrap(), "--baseline", me],
    );
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--dump"));
    assert!(!dump.exists(), "nothing ran");
    let out = bench(ws.path(), &["import", "--rounds", "2"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--baseline"));
}
