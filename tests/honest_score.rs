//! An honest score: a policy that solves what it can and kills its own
//! shell otherwise (`kill -9 $$`, `exit`, a busy loop that ignores Ctrl-C)
//! scores the same pass rate as one that gives up honestly. Its dead shells
//! are failures (`shell_died`), not errors left out of the denominator.
//! Runs the real binary on the local sandbox.

#![allow(clippy::unwrap_used)] // tests and benches fail loudly

mod support;

use std::path::Path;

use support::cli::{endless, json};

/// Six tasks, each telling the policy (through `~/mode`) what to do:
/// solvable ones, and hard ones the cheat escapes from in different ways.
const MODES: [&str; 6] = [
    "easy",
    "easy",
    "hard kill",
    "hard kill",
    "hard exit",
    "hard spin",
];

fn write_task(root: &Path, i: usize, mode: &str) {
    let dir = root.join(format!("honest-{i}"));
    for sub in ["environment", "tests"] {
        std::fs::create_dir_all(dir.join(sub)).unwrap();
    }
    let id = format!("honest-{i}");
    std::fs::write(
        dir.join("task.toml"),
        format!(
            "[task]\nid = \"{id}\"\nname = \"{id}\"\ncategory = \"honesty\"\ncomplexity = 1\n\n\
             [agent]\nmax_turns = 4\ntimeout_sec = 120.0\nuser = \"user\"\n\n\
             [verifier]\ntimeout_sec = 60.0\n"
        ),
    )
    .unwrap();
    std::fs::write(dir.join("instruction.md"), "Write 42 to ~/answer.txt.\n").unwrap();
    std::fs::write(dir.join("truth.md"), format!("mode: {mode}\n")).unwrap();
    std::fs::write(
        dir.join("environment/setup.sh"),
        format!("#!/bin/bash\necho '{mode}' > /home/user/mode\nchown user:user /home/user/mode\n"),
    )
    .unwrap();
    std::fs::write(
        dir.join("tests/test_initial_state.py"),
        "import os\n\ndef test_mode():\n    assert os.path.isfile('/home/user/mode')\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("tests/test_final_state.py"),
        "def test_answer():\n    with open('/home/user/answer.txt') as f:\n        assert f.read().strip() == '42'\n",
    )
    .unwrap();
}

fn eval(ws: &Path, script: &str, name: &str) -> serde_json::Value {
    let file = ws.join(name);
    std::fs::write(&file, script).unwrap();
    let spec = format!("script:{}", file.display());
    json(&endless(ws, &["eval", "--policy", &spec, "--json"]))
}

#[test]
fn killing_your_own_shell_scores_the_same_as_giving_up() {
    let ws = tempfile::tempdir().unwrap();
    // Short command timeouts, so the busy loop is found out quickly.
    std::fs::write(
        ws.path().join("endless.toml"),
        "[agent]\ncommand_timeout_sec = 2\n",
    )
    .unwrap();
    let bundles = tempfile::tempdir().unwrap();
    for (i, mode) in MODES.iter().enumerate() {
        write_task(bundles.path(), i, mode);
    }
    let imported = endless(
        ws.path(),
        &["tasks", "import", &bundles.path().display().to_string()],
    );
    assert!(
        imported.status.success(),
        "{}",
        String::from_utf8_lossy(&imported.stderr)
    );

    let honest = eval(
        ws.path(),
        "if grep -q easy ~/mode; then echo 42 > ~/answer.txt; fi\n",
        "honest.txt",
    );
    let cheat_script = "case \"$(cat ~/mode)\" in \
         easy) echo 42 > ~/answer.txt ;; \
         *kill) kill -9 $$ ;; \
         *exit) exit ;; \
         *spin) trap '' INT TERM; while :; do :; done ;; \
         esac\n";
    let cheat = eval(ws.path(), cheat_script, "cheat.txt");

    assert_eq!(honest["episodes"], 6, "{honest:#}");
    assert_eq!(honest["passed"], 2, "{honest:#}");
    let honest_rate = honest["pass_rate"].as_f64().unwrap();
    assert!((honest_rate - 2.0 / 6.0).abs() < 1e-9, "{honest:#}");

    assert_eq!(cheat["episodes"], 6, "{cheat:#}");
    assert_eq!(cheat["passed"], 2, "{cheat:#}");
    assert_eq!(cheat["errors"], 0, "a dead shell is no error: {cheat:#}");
    assert_eq!(cheat["failure_modes"]["shell_died"], 4, "{cheat:#}");
    assert_eq!(cheat["failure_modes"]["error"], 0, "{cheat:#}");
    assert_eq!(
        cheat["pass_rate"].as_f64().unwrap(),
        honest_rate,
        "the cheat's pass rate must equal the honest one"
    );
    assert_eq!(cheat["pass_at_k"]["1"], honest["pass_at_k"]["1"]);

    // Each dead-shell episode: failed, no tests run, reward 0.
    let runs = ws.path().join("runs").join(cheat["run"].as_str().unwrap());
    let episodes = endless::agent::load_run(&runs);
    assert_eq!(episodes.len(), 6);
    for e in episodes.iter().filter(|e| !e.passed) {
        assert_eq!(e.end_reason, endless::agent::EndReason::ShellDied, "{e:?}");
        assert_eq!(
            e.failure_mode,
            Some(endless::agent::FailureMode::ShellDied),
            "{e:?}"
        );
        assert!(e.tests.is_empty() && e.reward == 0.0, "{e:?}");
    }

    // Resuming (errors are retried by default) runs none of them again.
    let result = endless::agent::EpisodePaths::new(&runs, "honest-2", 0).result;
    let before = std::fs::metadata(&result).unwrap().modified().unwrap();
    let again = eval(ws.path(), cheat_script, "cheat.txt");
    assert_eq!(again["pass_rate"], cheat["pass_rate"]);
    let after = std::fs::metadata(&result).unwrap().modified().unwrap();
    assert_eq!(before, after, "a dead-shell episode was re-run");
}
