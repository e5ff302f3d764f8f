//! Adopting a foreign format's test runner script (Harbor's `test.sh`,
//! Terminal-Bench 1's `run-tests.sh`): the script is read by
//! [`parse_test_sh`]; one that only installs test tools and runs pytest on
//! some files is dropped, those files become the final tests, and what the
//! tests import is kept in `[verifier]` (`python`, `packages`, `apt`) for
//! the sealed verifier environment (with the agent's packages where the
//! script ran the image's own pytest); anything else runs as it is.

use std::path::Path;

use super::verifier_spec::{parse_test_sh, Runner};
use crate::task::{BundleError, FileTree, TaskMeta};

/// Adopt a foreign format's test runner `name` (already in `tests`; shown
/// in errors as `shown`): a script that only runs pytest on some files is
/// dropped and those files become the final tests, with the packages they
/// need recorded in `[verifier]` when the built-in runtime lacks them; any
/// other script (including one that is not UTF-8) is kept and run as-is.
/// A line installing or running test tools in a form the parser cannot
/// read, and a pytest run on files the bundle lacks, are errors naming the
/// script (and the line). Tests that the script ran with the image's own
/// pytest see the agent's packages (`[verifier] agent_packages`), unless
/// the bundle is `native`: an endless export, whose recorded `[verifier]`
/// says how its tests run.
pub fn adopt_runner(
    meta: &mut TaskMeta,
    tests: &mut FileTree,
    name: &str,
    shown: &Path,
    native: bool,
) -> Result<(), BundleError> {
    let names: Vec<String> = tests.iter().map(|(p, _)| p.clone()).collect();
    let spec = match tests.text(name) {
        Some(script) => Some(parse_test_sh(script, &shown.to_string_lossy())?),
        None => None,
    };
    match spec {
        Some(spec) => match spec.runner {
            Runner::Pytest(args) => {
                let files = pytest_files(&args, &names)
                    .map_err(|why| BundleError::invalid(shown, None, why))?;
                let line = format!("line {}", spec.pytest_line);
                let options = super::pytest_args::safe_options(&args)
                    .map_err(|why| BundleError::invalid(shown, Some(&line), why))?;
                // (A task exported by endless keeps its own in `[endless]`.)
                if !options.is_empty() {
                    meta.verifier.pytest_args = options;
                }
                tests.remove(name);
                meta.verifier.final_tests = files;
                meta.verifier.script = None;
                // The image's own pytest sees what the agent installed.
                if !native {
                    meta.verifier.agent_packages = !spec.isolated;
                }
                if spec.env.needs_environment() || meta.verifier.agent_packages {
                    spec.env.store_in(&mut meta.verifier);
                }
            }
            Runner::Script => {
                keep_script(meta, name);
                // The script runs with the environment's Python on PATH.
                if spec.env.needs_environment() {
                    spec.env.store_in(&mut meta.verifier);
                }
            }
        },
        None => keep_script(meta, name),
    }
    Ok(())
}

fn keep_script(meta: &mut TaskMeta, name: &str) {
    meta.verifier.script = Some(name.into());
    meta.verifier.final_tests.clear();
}

/// pytest options that take a value as the next argument.
const VALUED: &[&str] = &[
    "-k",
    "-m",
    "-p",
    "-c",
    "-o",
    "--ctrf",
    "--junitxml",
    "--junit-xml",
    "--rootdir",
    "--tb",
    "--timeout",
    "--json-report-file",
    "--maxfail",
    "--durations",
    "--basetemp",
    "-W",
    "--log-level",
    "--deselect",
    "--ignore",
    "--confcutdir",
];

/// The test files (relative to tests/) a pytest run on `args` covers:
/// the `.py` files it names (`/tests/x.py`, `$TEST_DIR/x.py`, `x.py::test`),
/// or, when it names none or only the tests folder, the `test_*.py` files at
/// the top of `test_files`. A named file the bundle lacks is an error.
fn pytest_files(args: &[String], test_files: &[String]) -> Result<Vec<String>, String> {
    let mut files = Vec::new();
    let mut skip = false;
    for a in args {
        if std::mem::take(&mut skip) {
            continue;
        }
        if a.starts_with('-') {
            skip = VALUED.contains(&a.as_str());
            continue;
        }
        let path = a.split("::").next().unwrap_or(a);
        let mut rel = path;
        for prefix in ["/tests/", "$TEST_DIR/", "${TEST_DIR}/", "./", "tests/"] {
            rel = rel.strip_prefix(prefix).unwrap_or(rel);
        }
        if matches!(
            rel,
            "/tests" | "$TEST_DIR" | "${TEST_DIR}" | "." | "tests" | ""
        ) {
            continue;
        }
        if !test_files.iter().any(|f| f == rel) {
            return Err(format!(
                "pytest runs `{a}`, which is not a file of the tests folder"
            ));
        }
        if !files.contains(&rel.to_string()) {
            files.push(rel.to_string());
        }
    }
    if files.is_empty() {
        files = test_files
            .iter()
            .filter(|f| !f.contains('/') && f.starts_with("test_") && f.ends_with(".py"))
            .cloned()
            .collect();
    }
    if files.is_empty() {
        return Err("pytest runs, but the tests folder has no test_*.py file".into());
    }
    Ok(files)
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

    /// Adopt `script` as tests/test.sh of a bundle holding `files()`.
    fn adopt(script: &str) -> Result<TaskMeta, BundleError> {
        let mut meta = TaskMeta::default();
        let mut tests = FileTree::default();
        for f in files() {
            tests.insert_text(&f, "x");
        }
        tests.insert_text("test.sh", script);
        adopt_runner(
            &mut meta,
            &mut tests,
            "test.sh",
            Path::new("t/tests/test.sh"),
            false,
        )?;
        assert_eq!(tests.contains("test.sh"), meta.verifier.script.is_some());
        Ok(meta)
    }

    fn pytest_on(meta: &TaskMeta) -> Option<Vec<String>> {
        meta.verifier
            .script
            .is_none()
            .then(|| meta.verifier.final_tests.clone())
    }

    #[test]
    fn recognises_uv_boilerplate_and_keeps_what_the_tests_import() {
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
        let meta = adopt(script).unwrap();
        assert_eq!(pytest_on(&meta), Some(vec!["test_outputs.py".into()]));
        // pytest and its report plugin alone: the built-in runtime serves.
        assert!(meta.verifier.packages.is_empty() && meta.verifier.python.is_none());
        let with_numpy = script.replace("-w pytest==8.4.1", "-w pytest==8.4.1 -w numpy==2.3.3");
        let meta = adopt(&with_numpy).unwrap();
        assert_eq!(meta.verifier.python.as_deref(), Some("3.13"));
        assert_eq!(
            meta.verifier.packages,
            ["numpy==2.3.3", "pytest==8.4.1", "pytest-json-ctrf==0.3.5"]
        );
        assert_eq!(meta.verifier.apt, ["curl"]);
    }

    #[test]
    fn recognises_own_output_and_bare_pytest() {
        let ours = harbor_test_sh(&["test_outputs.py".into()], "/tests");
        assert_eq!(
            pytest_on(&adopt(&ours).unwrap()),
            Some(vec!["test_outputs.py".into()])
        );
        let bare = "pip install pytest\ncd $TEST_DIR\npytest -rA\n";
        assert_eq!(
            pytest_on(&adopt(bare).unwrap()),
            Some(vec!["test_outputs.py".into()])
        );
    }

    #[test]
    fn the_images_own_pytest_sees_the_agents_packages_an_isolated_one_does_not() {
        for (script, agent) in [
            ("pip install pytest\npytest /tests/test_outputs.py\n", true),
            ("python3 -m pytest /tests/test_outputs.py\n", true),
            (
                "uvx -p 3.13 -w pytest==8.4.1 pytest /tests/test_outputs.py\n",
                false,
            ),
            (
                "uv run --with pytest==8.4.1 pytest /tests/test_outputs.py\n",
                false,
            ),
            (
                "uv venv .venv\nsource .venv/bin/activate\nuv pip install pytest==8.4.1\n\
                 pytest /tests/test_outputs.py\n",
                false,
            ),
        ] {
            let meta = adopt(script).unwrap();
            assert_eq!(meta.verifier.agent_packages, agent, "{script}");
            // An environment of the image's Python, with the test tools.
            if agent {
                assert!(meta
                    .verifier
                    .packages
                    .iter()
                    .any(|p| p.starts_with("pytest")));
            }
        }
        // An endless export keeps what its own [verifier] says.
        let mut meta = TaskMeta::default();
        let mut tests = FileTree::default();
        tests.insert_text("test_outputs.py", "x");
        tests.insert_text(
            "test.sh",
            harbor_test_sh(&["test_outputs.py".into()], "/tests"),
        );
        adopt_runner(
            &mut meta,
            &mut tests,
            "test.sh",
            Path::new("t/tests/test.sh"),
            true,
        )
        .unwrap();
        assert!(!meta.verifier.agent_packages);
        assert!(meta.verifier.packages.is_empty());
    }

    #[test]
    fn recognises_terminal_bench_1_harness() {
        let tb1 =
            "#!/bin/bash\nsource $TEST_DIR/setup-uv-pytest.sh\nbash $TEST_DIR/run-uv-pytest.sh\n";
        assert_eq!(
            pytest_on(&adopt(tb1).unwrap()),
            Some(vec!["test_outputs.py".into()])
        );
    }

    #[test]
    fn custom_scripts_are_kept_and_bad_runs_are_errors() {
        for custom in [
            "./check.sh && echo ok\n",
            "python3 /tests/verify.py\n",
            "pytest /tests/test_outputs.py\nrm -rf /app/cache\n",
        ] {
            assert_eq!(pytest_on(&adopt(custom).unwrap()), None, "{custom}");
        }
        let err = adopt("pytest /tests/test_other.py\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("t/tests/test.sh") && err.contains("test_other.py"),
            "{err}"
        );
        let err = adopt("echo hi\npip install -r /tests/requirements.txt\npytest\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("t/tests/test.sh") && err.contains("line 2"),
            "{err}"
        );
    }
}
