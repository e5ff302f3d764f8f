//! Recognising the usual Harbor / Terminal-Bench test runner boilerplate
//! (install pytest from the internet, run it, write a reward file) so that
//! the same test files can run with the sandbox's own `python3 -m pytest`.

use std::path::Path;

use crate::task::{BundleError, FileTree, TaskMeta};

/// Adopt a foreign format's test runner `name` (already in `tests`): a
/// script that only runs pytest on some files is dropped and those files
/// become the final tests; anything else (including a script that is not
/// UTF-8) is kept and run as-is.
pub fn adopt_runner(meta: &mut TaskMeta, tests: &mut FileTree, name: &str) {
    let names: Vec<String> = tests.iter().map(|(p, _)| p.clone()).collect();
    let verdict = match tests.text(name) {
        Some(script) => classify(script, &names),
        None => TestScript::Custom,
    };
    match verdict {
        TestScript::Pytest(files) => {
            tests.remove(name);
            meta.verifier.final_tests = files;
            meta.verifier.script = None;
        }
        TestScript::Custom => {
            meta.verifier.script = Some(name.into());
            meta.verifier.final_tests.clear();
        }
    }
}

/// Take the privileged truth out of a foreign task's `tests/truth.md`
/// (where export puts it), or nothing.
pub fn take_truth(tests: &mut FileTree, dir: &Path) -> Result<String, BundleError> {
    match tests.remove(TRUTH) {
        Some(entry) => crate::task::text::into_utf8(&dir.join("tests").join(TRUTH), entry.bytes),
        None => Ok(String::new()),
    }
}

/// Where foreign formats keep the truth, under tests/.
pub const TRUTH: &str = "truth.md";

/// The verdict on a `test.sh` / `run-tests.sh`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TestScript {
    /// Only boilerplate around pytest on these files (relative to tests/).
    Pytest(Vec<String>),
    /// Something else: keep it and run it as-is.
    Custom,
}

/// Classify a test runner script. `test_files` are the files under tests/,
/// used when the pytest line names none.
pub fn classify(script: &str, test_files: &[String]) -> TestScript {
    let mut files = Vec::new();
    let mut saw_pytest = false;
    let joined = script.replace("\\\n", " ");
    for raw in joined.lines() {
        let line = raw.trim().trim_start_matches(['(', '{', ' ']);
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if line.contains("setup-uv-pytest.sh") {
            continue;
        }
        // Terminal-Bench 1's harness script runs pytest on $TEST_DIR's tests.
        if line.contains("run-uv-pytest.sh") {
            saw_pytest = true;
            continue;
        }
        if line.contains("pytest") && !is_install(line) {
            saw_pytest = true;
            for tok in line.split_whitespace() {
                let tok = tok.trim_matches(|c| c == '"' || c == '\'');
                if tok.ends_with(".py") {
                    let name = tok.rsplit('/').next().unwrap_or(tok);
                    files.push(name.to_string());
                }
            }
            continue;
        }
        if !is_boilerplate(line) {
            return TestScript::Custom;
        }
    }
    if !saw_pytest {
        return TestScript::Custom;
    }
    if files.is_empty() {
        files = test_files
            .iter()
            .filter(|f| !f.contains('/') && f.starts_with("test_") && f.ends_with(".py"))
            .cloned()
            .collect();
    }
    if files.is_empty() || files.iter().any(|f| !test_files.contains(f)) {
        return TestScript::Custom;
    }
    TestScript::Pytest(files)
}

fn is_install(line: &str) -> bool {
    let first = line.split_whitespace().next().unwrap_or("");
    matches!(first, "pip" | "pip3" | "uv" | "apt-get" | "apt")
        || line.contains("pip install")
        || line.contains("uv pip install")
        || line.contains("uv add")
}

fn is_boilerplate(line: &str) -> bool {
    let first = line.split_whitespace().next().unwrap_or("");
    const WORDS: &[&str] = &[
        "apt-get",
        "apt",
        "curl",
        "wget",
        "pip",
        "pip3",
        "uv",
        "uvx",
        "source",
        ".",
        "export",
        "if",
        "then",
        "else",
        "elif",
        "fi",
        "cd",
        "mkdir",
        "set",
        "exit",
        "echo",
        "[",
        "[[",
        "true",
        "fi;",
        "else;",
        "}",
        "{",
        "PATH=",
        "DEBIAN_FRONTEND=noninteractive",
    ];
    if WORDS.contains(&first) || first.starts_with("export") {
        // `echo` is boilerplate only when it reports or writes the reward.
        if first == "echo" {
            return line.contains("reward") || !line.contains('>');
        }
        return true;
    }
    // `VAR=value` assignments and `... | sh` installers.
    (first.contains('=') && !first.starts_with('='))
        || line.ends_with("| sh")
        || line.ends_with("| bash")
}

/// The `test.sh` that endless writes for Harbor: run the final tests with the
/// environment's pytest (installing it only if missing) and write the reward.
pub fn harbor_test_sh(files: &[String], tests_dir: &str) -> String {
    let targets: Vec<String> = files.iter().map(|f| format!("{tests_dir}/{f}")).collect();
    format!(
        "#!/bin/bash\n\
         # Written by endless: runs the final-state tests and writes the reward file.\n\
         mkdir -p /logs/verifier\n\
         if ! python3 -m pytest --version >/dev/null 2>&1; then\n\
         \x20 (apt-get update && apt-get install -y python3-pytest) >/dev/null 2>&1 || pip install pytest >/dev/null 2>&1\n\
         fi\n\
         python3 -m pytest -p no:cacheprovider -rA {}\n\
         if [ $? -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi\n",
        targets.join(" ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files() -> Vec<String> {
        vec!["test_outputs.py".into(), "helper.json".into()]
    }

    #[test]
    fn recognises_uv_boilerplate() {
        let script = r#"#!/bin/bash
apt-get update
apt-get install -y curl
curl -LsSf https://astral.sh/uv/0.7.13/install.sh | sh
source $HOME/.local/bin/env
if [ "$PWD" = "/" ]; then
    echo "Error: No working directory set."
    exit 1
fi
uvx -p 3.13 -w pytest==8.4.1 -w pytest-json-ctrf==0.3.5 pytest --ctrf /logs/verifier/ctrf.json /tests/test_outputs.py -rA
if [ $? -eq 0 ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
"#;
        assert_eq!(
            classify(script, &files()),
            TestScript::Pytest(vec!["test_outputs.py".into()])
        );
    }

    #[test]
    fn recognises_own_output_and_bare_pytest() {
        let ours = harbor_test_sh(&["test_outputs.py".into()], "/tests");
        assert_eq!(
            classify(&ours, &files()),
            TestScript::Pytest(vec!["test_outputs.py".into()])
        );
        let bare = "pip install pytest\ncd $TEST_DIR\npytest -rA\n";
        assert_eq!(
            classify(bare, &files()),
            TestScript::Pytest(vec!["test_outputs.py".into()])
        );
    }

    #[test]
    fn recognises_terminal_bench_1_harness() {
        let tb1 =
            "#!/bin/bash\nsource $TEST_DIR/setup-uv-pytest.sh\nbash $TEST_DIR/run-uv-pytest.sh\n";
        assert_eq!(
            classify(tb1, &files()),
            TestScript::Pytest(vec!["test_outputs.py".into()])
        );
    }

    #[test]
    fn custom_scripts_are_kept() {
        assert_eq!(
            classify("./check.sh && echo ok\n", &files()),
            TestScript::Custom
        );
        assert_eq!(
            classify("python3 /tests/verify.py\n", &files()),
            TestScript::Custom
        );
        let extra = "pytest /tests/test_outputs.py\nrm -rf /app/cache\n";
        assert_eq!(classify(extra, &files()), TestScript::Custom);
        let missing = "pytest /tests/test_other.py\n";
        assert_eq!(classify(missing, &files()), TestScript::Custom);
    }
}
