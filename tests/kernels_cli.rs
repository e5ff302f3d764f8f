//! `ENDLESS_KERNELS` end to end: `endless bench ppo --json` names the kernel
//! level it ran and the kernels with their paths; an unknown level, or one
//! the CPU lacks, is an error naming the variable, before any work.

#![allow(clippy::unwrap_used)] // tests fail loudly

use std::process::{Command, Output};

/// `endless bench ppo` (one step, no warmup) with `ENDLESS_KERNELS=level`.
fn bench_ppo(level: &str) -> Output {
    let ws = tempfile::tempdir().unwrap();
    Command::new(env!("CARGO_BIN_EXE_endless"))
        .arg("--workspace")
        .arg(ws.path())
        .args(["bench", "ppo", "--n", "1", "--warmup", "0", "--json"])
        .env("ENDLESS_KERNELS", level)
        .env("XDG_CACHE_HOME", ws.path().join(".cache"))
        .env("XDG_STATE_HOME", ws.path().join(".state"))
        .env("XDG_CONFIG_HOME", ws.path().join(".config"))
        .output()
        .unwrap()
}

#[test]
fn the_forced_level_is_reported_and_bad_levels_are_refused() {
    let out = bench_ppo("portable");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let kernels = &json["kernels"];
    assert_eq!(kernels["level"], "portable", "{kernels}");
    assert!(kernels["detected"].is_string(), "{kernels}");
    let ran: Vec<&str> = kernels["ran"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["name"].as_str().unwrap())
        .collect();
    assert!(ran.contains(&"causal attention portable"), "{ran:?}");

    let out = bench_ppo("sse9");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("ENDLESS_KERNELS=sse9: unknown kernel level"),
        "{err}"
    );

    // The best level the CPU runs is accepted; one above it is refused.
    let best = kernels["detected"].as_str().unwrap();
    let levels = ["portable", "avx2", "avx512", "avx512-vnni"];
    let i = levels.iter().position(|l| *l == best).unwrap();
    match levels.get(i + 1) {
        Some(missing) => {
            let out = bench_ppo(missing);
            assert!(!out.status.success());
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(err.contains("this CPU lacks"), "{err}");
        }
        None => println!("skipped the refusal: this CPU runs every level"),
    }
}
