//! Running a task's tests inside a session, beside the agent's shell.
//!
//! The tests run through the backend, not through the agent's shell (whose
//! functions, aliases and traps the agent controls), as the task's user with
//! its home and working directory, like the reference does. The `local`
//! backend starts them out of the agent's reach (see
//! `sandbox/verifier/plan.rs`): the interpreter, pytest and their libraries
//! come from a read-only runtime tree outside the episode's overlay, the
//! test files arrive on stdin and live in a tmpfs only the verifier's mount
//! namespace has, and the JUnit XML leaves through a pipe on fd 3. Python is
//! isolated (`-I -S`: no `PYTHON*` variables, no site hooks such as
//! `sitecustomize` or `.pth` files, no script directory on `sys.path`), with
//! no conftest files, no plugin autoloading, no cache, and a fixed rootdir
//! and ini file.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::sandbox::{
    home_of, CommandOutput, SandboxError, Session, VerifierCall, VerifierPath, WarmHints,
    VERIFIER_PROGRAM,
};
use crate::task::formats::VerifierEnvSpec;
use crate::task::{write_tree, Task};

use super::junit::{read_junit, JunitRead};
use super::report::{TestCase, TestReport};

/// The host interpreter the verifier's runtime runs (with its pytest).
pub const PYTHON: &str = "/usr/bin/python3";

/// Where the verifier unpacks the tests (its private tmpfs, see the module docs).
const PRIVATE_DIR: &str = "/run/endless-verifier";

/// Which tests to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum TestSet {
    /// `verifier.initial_tests`: the environment was built as intended.
    Initial,
    /// `verifier.final_tests` (or `verifier.script`): the task was done.
    Final,
}

/// Which interpreter runs a task's pytest files.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum VerifierMode {
    /// Forked from the backend's pre-warmed interpreter where it has one
    /// (else cold, and the report says why).
    #[default]
    Warm,
    /// A fresh interpreter for this verification.
    Cold,
}

/// Run `which` tests of `task` on the session's current state.
pub fn verify(
    session: &mut Session,
    task: &Task,
    which: TestSet,
) -> Result<TestReport, SandboxError> {
    verify_with(session, task, which, VerifierMode::default())
}

/// [`verify`] with the interpreter chosen by `mode` (`bench verify`
/// compares both on the same state).
pub fn verify_with(
    session: &mut Session,
    task: &Task,
    which: TestSet,
    mode: VerifierMode,
) -> Result<TestReport, SandboxError> {
    let start = Instant::now();
    let timeout = Duration::from_secs_f64(task.meta.verifier.timeout_sec.clamp(1.0, 86_400.0));
    if let (TestSet::Final, Some(script)) = (which, &task.meta.verifier.script) {
        return run_script(session, task, script, timeout, start);
    }
    let files = match which {
        TestSet::Initial => &task.meta.verifier.initial_tests,
        TestSet::Final => &task.meta.verifier.final_tests,
    };
    if files.is_empty() {
        return Err(SandboxError::Verify(format!(
            "task.toml: [verifier] lists no {which:?} tests"
        )));
    }
    run_pytest(session, task, files, &[], timeout, mode, start)
}

/// The initial-state and the final tests of `task` on the session's
/// current state (its initial state, when validating), in one pytest run
/// split into one report per set: what validation needs, for the cost of
/// one verification. Both reports carry that run's duration. A task with a
/// verifier script or without initial tests is verified set by set.
pub fn verify_initial_and_final(
    session: &mut Session,
    task: &Task,
    mode: VerifierMode,
) -> Result<(TestReport, TestReport), SandboxError> {
    let v = &task.meta.verifier;
    if v.script.is_some() || v.initial_tests.is_empty() || v.final_tests.is_empty() {
        let initial = verify_with(session, task, TestSet::Initial, mode)?;
        return Ok((initial, verify_with(session, task, TestSet::Final, mode)?));
    }
    let start = Instant::now();
    let timeout = Duration::from_secs_f64(v.timeout_sec.clamp(1.0, 86_400.0));
    let mut files = v.initial_tests.clone();
    files.extend(
        v.final_tests
            .iter()
            .filter(|f| !v.initial_tests.contains(f))
            .cloned(),
    );
    // A file that fails to collect must not keep the other set from running.
    let keep_going = ["--continue-on-collection-errors"];
    let both = run_pytest(session, task, &files, &keep_going, timeout, mode, start)?;
    Ok((
        part_of(&both, &v.initial_tests, &files),
        part_of(&both, &v.final_tests, &files),
    ))
}

/// The module name pytest reports for test file `file` (`a/test_b.py` ->
/// `a.test_b`).
fn module_of(file: &str) -> String {
    file.trim_end_matches(".py").replace('/', ".")
}

/// The test file of `all` a test case named `name` (`module::test`,
/// `module.Class::test`, or `module` for a collection error) belongs to:
/// the longest module it names; `None` when it names none.
fn file_of<'a>(name: &str, all: &'a [String]) -> Option<&'a String> {
    all.iter()
        .filter(|f| {
            let m = module_of(f);
            name == m || name.starts_with(&format!("{m}::")) || name.starts_with(&format!("{m}."))
        })
        .max_by_key(|f| f.len())
}

/// The part of a combined report that belongs to `files` (of `all`, the
/// files that ran). Cases that name no file (a session-wide error) belong
/// to every part. Passed: pytest ran to the end (exit code 0 or 1), and
/// every case of the part ran and passed.
fn part_of(combined: &TestReport, files: &[String], all: &[String]) -> TestReport {
    let tests: Vec<TestCase> = combined
        .tests
        .iter()
        .filter(|t| file_of(&t.name, all).is_none_or(|f| files.contains(f)))
        .cloned()
        .collect();
    let ran_to_the_end = combined.passed || combined.exit_code == Some(1);
    TestReport {
        passed: ran_to_the_end && !tests.is_empty() && tests.iter().all(|t| t.passed),
        tests,
        ..combined.clone()
    }
}

/// Run pytest on `files` of `task` (see the module docs), with
/// `extra_args` after ours.
fn run_pytest(
    session: &mut Session,
    task: &Task,
    files: &[String],
    extra_args: &[&str],
    timeout: Duration,
    mode: VerifierMode,
    start: Instant,
) -> Result<TestReport, SandboxError> {
    for f in files {
        if !task.tests.contains(f) {
            return Err(SandboxError::Verify(format!(
                "tests/{f} is listed in task.toml [verifier] but missing from the bundle"
            )));
        }
    }
    let mut args: Vec<String> = PLUGIN_ARGS
        .iter()
        .chain(&["--noconftest", "--color=no", "-q", "-rA"])
        .map(|s| s.to_string())
        .collect();
    args.push(format!("--rootdir={PRIVATE_DIR}/tests"));
    args.push(format!("-c={PRIVATE_DIR}/pytest.ini"));
    args.extend(extra_args.iter().map(|a| a.to_string()));
    let (call, sealed) = pytest_call(session, task, mode)?;
    // Checked again here: a native task.toml may list them by hand.
    let own = crate::task::formats::safe_pytest_options(&task.meta.verifier.pytest_args)
        .map_err(|why| SandboxError::Verify(format!("task.toml: [verifier] pytest_args: {why}")))?;
    args.extend(pass_through(&own, sealed.as_ref()));
    args.extend(files.iter().map(|f| format!("{PRIVATE_DIR}/tests/{f}")));
    let payload_files: serde_json::Map<String, serde_json::Value> = call
        .files
        .iter()
        .map(|(path, bytes)| (path.clone(), hex::encode(bytes).into()))
        .collect();
    // The image's live site directories, for a sealed environment only
    // (the built-in runtime's Python is not the image's).
    let agent_site = task.meta.verifier.agent_packages && sealed.is_some();
    let payload = serde_json::json!({
        "root": PRIVATE_DIR,
        "files": payload_files,
        "args": args,
        "agent_site": agent_site,
    });
    let run = session.run_verifier(&call, payload.to_string().into_bytes(), timeout);
    let (out, junit, mut path) = match run {
        Err(SandboxError::Tampered(why)) => return Ok(tampered(why, start)),
        other => other?,
    };
    if let (Some(_), VerifierPath::Cold(why)) = (&sealed, &path) {
        let sealed = "the task's sealed verifier environment runs its tests";
        path = VerifierPath::Cold(Some(match why {
            Some(why) => format!("{sealed}; not started ahead: {why}"),
            None => sealed.into(),
        }));
    }
    let junit_xml = String::from_utf8_lossy(&junit).into_owned();
    let (tests, cut) = report_cases(&junit_xml, junit.len())?;
    let mut output = out.output;
    if out.timed_out {
        output.push_str(&format!("\n[verifier timed out after {timeout:?}]"));
    }
    let passed = !cut && out.code == Some(0) && !tests.is_empty() && tests.iter().all(|t| t.passed);
    Ok(TestReport {
        tests,
        passed,
        junit_xml,
        output,
        duration: start.elapsed(),
        verifier: path,
        exit_code: out.code,
    })
}

/// Start the verifier of `task`'s final tests now, with the session,
/// when they run in a sealed verifier environment (see
/// `sandbox/verifier/prestart.rs`): its interpreter then imports pytest while
/// the agent works instead of after. Best effort: when it cannot (another
/// backend, a rootless one, the built-in runtime serves), the tests run as
/// they would have, and the report says why.
pub fn prestart(session: &mut Session, task: &Task) {
    if task.meta.verifier.script.is_some() || task.meta.verifier.final_tests.is_empty() {
        return;
    }
    // Every episode's start passes here: the built-in runtime's tasks
    // (most) return before any call is built.
    match sealed_env(session, task) {
        Ok(Some(_)) => {}
        Ok(None) => return,
        Err(e) => {
            tracing::debug!(task = %task.id(), error = %e, "no verifier to start ahead");
            return;
        }
    }
    match pytest_call(session, task, VerifierMode::Warm) {
        Ok((call, _)) => {
            if let Err(why) = session.prestart_verifier(&call) {
                tracing::debug!(task = %task.id(), %why, "the verifier was not started ahead");
            }
        }
        Err(e) => tracing::debug!(task = %task.id(), error = %e, "no verifier to start ahead"),
    }
}

/// The verifier's call for `task`'s pytest files (their payload aside),
/// and the sealed environment it runs in (`None`: the built-in runtime).
fn pytest_call(
    session: &Session,
    task: &Task,
    mode: VerifierMode,
) -> Result<(VerifierCall, Option<VerifierEnvSpec>), SandboxError> {
    let sealed = sealed_env(session, task)?;
    let mut files: Vec<(String, Vec<u8>)> = task
        .tests
        .iter()
        .map(|(path, file)| (format!("tests/{path}"), file.bytes.clone()))
        .collect();
    files.push(("pytest.ini".into(), b"[pytest]\n".to_vec()));
    let warm = mode == VerifierMode::Warm;
    let argv = match &sealed {
        Some(env) => env_argv(env),
        None => {
            let mut argv = session.verifier_python();
            argv.extend(
                ["-I", "-S", "-B", "-c", VERIFIER_PROGRAM, "cold"]
                    .iter()
                    .map(|s| s.to_string()),
            );
            argv
        }
    };
    let call = VerifierCall {
        argv,
        env: user_env(session),
        cwd: session.info().workdir.clone(),
        warm,
        sealed_env: sealed.is_some(),
        hints: if warm {
            warm_hints(task)
        } else {
            WarmHints::default()
        },
        files,
    };
    Ok((call, sealed))
}

/// The sealed verifier environment `task` asks for (`[verifier] python`,
/// `packages`, `apt`), or `None` when the built-in runtime serves. Only
/// the local backend builds them.
fn sealed_env(session: &Session, task: &Task) -> Result<Option<VerifierEnvSpec>, SandboxError> {
    let spec = VerifierEnvSpec::from_section(&task.meta.verifier, Path::new("task.toml"))
        .map_err(|e| SandboxError::Verify(e.to_string()))?;
    if spec.is_empty() {
        return Ok(None);
    }
    if session.info().backend != "local" {
        return Err(SandboxError::Verify(format!(
            "the task's tests need a sealed verifier environment ([verifier] python/packages/apt), which only the local backend builds, not `{}`",
            session.info().backend
        )));
    }
    Ok(Some(spec))
}

/// The verifier's command in the sealed environment `env` (see
/// `sandbox/local/build/verifier_env.rs`): its interpreter started through its
/// own loader, isolated (`-I -S -B`), with only the environment's site
/// directory added to `sys.path`, and a line on stderr when its Python is
/// not the version the tests asked for.
fn env_argv(env: &VerifierEnvSpec) -> Vec<String> {
    let quote = |s: &str| serde_json::Value::from(s).to_string();
    let asked = env.python.as_deref().unwrap_or("");
    let prelude = format!(
        "import site as _site, sys as _sys\n\
         _site.addsitedir({site})\n\
         if {asked} and '%d.%d' % _sys.version_info[:2] != {asked}:\n\
         \x20   _sys.stderr.write('endless: the tests asked for Python ' + {asked} + '; the verifier environment runs Python %d.%d, the nearest available\\n' % _sys.version_info[:2])\n\
         del _site, _sys\n",
        site = quote(&crate::sandbox::local::env_site(env)),
        asked = quote(asked),
    );
    let mut argv = crate::sandbox::local::env_python(env);
    argv.extend(["-I", "-S", "-B", "-c"].iter().map(|s| s.to_string()));
    argv.push(format!("{prelude}{VERIFIER_PROGRAM}"));
    argv.push("cold".into());
    argv
}

/// The task's own pytest options (`[verifier] pytest_args`, kept at import
/// only when they cannot change the verdict) for a run in `env` (`None`:
/// the built-in runtime). `--ctrf FILE` needs pytest-json-ctrf: with it in
/// the sealed environment its plugin is loaded by name (plugins are not
/// loaded automatically); without it the option is left out.
fn pass_through(options: &[String], env: Option<&VerifierEnvSpec>) -> Vec<String> {
    let ctrf = env.is_some_and(|e| e.packages.iter().any(|p| p.name == "pytest-json-ctrf"));
    let mut out = Vec::new();
    let mut it = options.iter();
    while let Some(o) = it.next() {
        if o == "--ctrf" || o.starts_with("--ctrf=") {
            let value = (o == "--ctrf").then(|| it.next()).flatten();
            if ctrf {
                if !out.iter().any(|a| a == "ctrf.main") {
                    out.extend(["-p".to_string(), "ctrf.main".to_string()]);
                }
                out.push(o.clone());
                out.extend(value.cloned());
            }
            continue;
        }
        out.push(o.clone());
    }
    out
}

/// What validation and audits say of a task whose tests import the
/// agent's packages (`[verifier] agent_packages`).
pub const TRUSTS_AGENT_PACKAGES: &str = "the verdicts trust the agent's packages: the tests import what the agent installed with the image's pip (`[verifier] agent_packages`, as the task's test.sh ran the image's pytest), and such code could forge them, as in Harbor";

/// The most the verifier's result pipe (fd 3) keeps: the sandbox's capture,
/// behind both the fresh and the pre-warmed verifier. A report that reaches
/// it was cut, or may have been. (The verifier bounds the failure text a
/// report carries, see `bounded_report` in `assets/verifier/verifier.py`,
/// so that what a test quotes does not bring it there.)
pub const MAX_REPORT_BYTES: usize = crate::sandbox::CAPTURE_LIMIT;

/// The most placeholder cases a cut report gets for the tests it lost.
const MAX_MISSING: usize = 100_000;

/// The test cases of the JUnit report `xml` (`kept` bytes of the result
/// pipe), and whether it was cut (it reached [`MAX_REPORT_BYTES`], or stops
/// before its end). A cut report is a failed verification, never an error
/// (issue 46: an agent that could cut it at will would leave its failure
/// out of the pass rate): the cases it holds whole keep their results; the
/// one it stops inside, and every other test its suites declare but it
/// lost, fail.
fn report_cases(xml: &str, kept: usize) -> Result<(Vec<TestCase>, bool), SandboxError> {
    if xml.is_empty() {
        return Ok((Vec::new(), false));
    }
    let read = read_junit(xml)?;
    if !read.cut && kept < MAX_REPORT_BYTES {
        return Ok((read.cases, false));
    }
    Ok((cut_report(read, kept), true))
}

/// The cases of a cut report (see [`report_cases`]): at least one fails.
fn cut_report(read: JunitRead, kept: usize) -> Vec<TestCase> {
    let why = format!(
        "the JUnit report was cut before this test's result ({kept} bytes kept; the verifier's result pipe keeps {} MiB): a test without a result counts as failed",
        MAX_REPORT_BYTES >> 20
    );
    let lost = |name: String| TestCase {
        name,
        passed: false,
        message: why.clone(),
    };
    let mut tests = read.cases;
    let cut_inside = read.unfinished.is_some();
    tests.extend(read.unfinished.map(lost));
    let missing = read.declared.saturating_sub(tests.len()).min(MAX_MISSING);
    match missing {
        0 if cut_inside => {}
        0 => tests.push(lost("endless::cut_report".into())),
        n => tests.extend((1..=n).map(|i| lost(format!("endless::cut_report::missing_{i}")))),
    }
    tests
}

/// The plugins every run blocks (no cache directory is written).
const PLUGIN_ARGS: [&str; 2] = ["-p", "no:cacheprovider"];

/// Test modules larger than this are compiled by pytest in each run, not
/// sent to the pre-warmed verifier (its requests are single datagrams).
const MAX_PRECOMPILED: usize = 64 * 1024;

/// What the pre-warmed verifier may prepare once: pytest's configuration
/// for the plugins `args` block, and the task's test modules (UTF-8 Python
/// files within [`MAX_PRECOMPILED`] in all), at the paths pytest sees.
fn warm_hints(task: &Task) -> WarmHints {
    let mut budget = MAX_PRECOMPILED;
    let mut modules = Vec::new();
    for (path, file) in task.tests.iter() {
        let Ok(source) = std::str::from_utf8(&file.bytes) else {
            continue;
        };
        if path.ends_with(".py") && source.len() <= budget {
            budget -= source.len();
            modules.push((format!("{PRIVATE_DIR}/tests/{path}"), source.to_string()));
        }
    }
    WarmHints {
        plugin_args: PLUGIN_ARGS.iter().map(|s| s.to_string()).collect(),
        modules,
    }
}

/// `env -i -C cwd` with a root environment, for verifier scripts.
fn clean_env(cwd: &str) -> Vec<String> {
    let mut argv: Vec<String> = ["/usr/bin/env", "-i", "-C", cwd]
        .iter()
        .map(|s| s.to_string())
        .collect();
    argv.extend(
        [
            "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "HOME=/root",
            "LANG=C.UTF-8",
        ]
        .iter()
        .map(|s| s.to_string()),
    );
    argv
}

/// The environment of the task's user (and nothing the agent set).
fn user_env(session: &Session) -> Vec<(String, String)> {
    let user = session.info().user.clone();
    [
        (
            "PATH",
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".to_string(),
        ),
        ("HOME", home_of(&user)),
        ("USER", user.clone()),
        ("LOGNAME", user),
        ("LANG", "C.UTF-8".to_string()),
        ("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1".to_string()),
        ("PYTEST_ADDOPTS", String::new()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

/// The report of a verification the agent made impossible: a failure.
fn tampered(why: String, start: Instant) -> TestReport {
    TestReport {
        tests: vec![TestCase {
            name: "endless::verifier_environment".into(),
            passed: false,
            message: format!("the agent tampered with the verifier's environment: {why}"),
        }],
        passed: false,
        junit_xml: String::new(),
        output: String::new(),
        duration: start.elapsed(),
        verifier: VerifierPath::Cold(None),
        exit_code: None,
    }
}

/// A Harbor-style verifier script (`tests/test.sh` writing
/// `/logs/verifier/reward.txt`), run as Harbor does: as the sandbox's root
/// (never host root) in the agent's environment, with the tests copied to
/// `/tests`. Such scripts use the agent's own tools, so unlike pytest tests
/// they can be fooled by a root agent; docs/security.md says so.
fn run_script(
    session: &mut Session,
    task: &Task,
    script: &str,
    timeout: Duration,
    start: Instant,
) -> Result<TestReport, SandboxError> {
    if !task.tests.contains(script) {
        return Err(SandboxError::Verify(format!(
            "tests/{script} is named by task.toml [verifier] script but missing from the bundle"
        )));
    }
    if let Some(env) = sealed_env(session, task)? {
        return run_script_sealed(session, task, &env, script, timeout, start);
    }
    let (host, inside) = session
        .exchange_dir()
        .ok_or_else(|| SandboxError::Verify("this session has no exchange directory".into()))?;
    let mut rnd = [0u8; 8];
    rand::Rng::fill(&mut rand::rng(), &mut rnd);
    let run_id = format!("run-{}", hex::encode(rnd));
    let host_run = host.join(&run_id);
    write_tree(&host_run.join("tests"), &task.tests)?;
    let workdir = session.info().workdir.clone();
    let result = run_script_in(
        session,
        script,
        &format!("{inside}/{run_id}"),
        &workdir,
        timeout,
        start,
    );
    let _ = std::fs::remove_dir_all(&host_run);
    result
}

/// How a verifier script `script` (of `/tests`) runs, in a shell whose
/// working directory it makes `workdir`, and how its reward leaves: the
/// shell first holds `/logs/verifier` as its own working directory (the
/// reward files are read there, even if the directory is renamed or
/// replaced meanwhile), runs the script in a child without fd 3 (the
/// result pipe: nothing the script runs may write a reward on it), then
/// kills every process of the sandbox started since it began (what the
/// script left running, which could rewrite the reward before it is read),
/// and writes to fd 3 what [`parse_reward`] reads: `killed:STATUS` when the
/// script's shell was killed by a signal (a status over 128: a program it
/// ran may have killed it after writing a reward), `survived:` when some
/// process outlived it, else the reward file (`reward.txt`, else
/// `reward.json`, a regular file of this shell's user, not a link) with
/// `txt:` or `json:` before it. Sets `st` to the script's exit status.
fn script_and_reward(script: &str, workdir: &str) -> String {
    let q = |s: &str| format!("'{}'", s.replace('\'', r"'\''"));
    format!(
        "cd /logs/verifier || exit 125; \
         _start() {{ local l; read -r l < \"/proc/$1/stat\" || return 1; l=${{l##*) }}; set -- $l; \
         [ \"$1\" != Z ] || return 1; REPLY=${{20}}; }}; \
         since=; ! _start $$ 2>/dev/null || since=$REPLY; \
         ( {{ cd {workdir} 2>/dev/null || cd /; }}; exec bash {script} ) 3>&-; st=$?; \
         left=1; for ((round = 0; round < 50 && left && ${{#since}}; round++)); do left=0; \
         for d in /proc/[0-9]*; do p=${{d#/proc/}}; [ \"$p\" != $$ ] || continue; \
         _start \"$p\" 2>/dev/null || continue; [ \"$REPLY\" -ge \"$since\" ] || continue; \
         kill -9 \"$p\" 2>/dev/null && left=1; done; done; \
         if [ $st -gt 128 ]; then printf 'killed:%s' $st >&3; \
         elif [ $left = 1 ]; then printf 'survived:' >&3; \
         elif [ -f reward.txt ] && [ ! -L reward.txt ] && [ -O reward.txt ]; then \
         printf txt: >&3; head -c 64 reward.txt >&3; \
         elif [ -f reward.json ] && [ ! -L reward.json ] && [ -O reward.json ]; then \
         printf json: >&3; head -c 4096 reward.json >&3; fi; cd /",
        workdir = q(workdir),
        script = q(&format!("/tests/{script}")),
    )
}

/// The reward a verifier script reported on fd 3 (see [`script_and_reward`]):
/// a number in `reward.txt`, or in `reward.json` the number under
/// `"reward"` (or its only number). `Err`: what was wrong with it.
fn parse_reward(fd3: &str) -> Result<f64, String> {
    if let Some(status) = fd3.strip_prefix("killed:") {
        return Err(format!(
            "the verifier script was killed (its shell ended with status {status}): the reward of a script that did not end on its own is not read"
        ));
    }
    if fd3.starts_with("survived:") {
        return Err(
            "processes the verifier script started could not all be killed before its reward was read: it is not read".into(),
        );
    }
    if let Some(text) = fd3.strip_prefix("txt:") {
        return text.trim().parse::<f64>().map_err(|_| {
            format!(
                "/logs/verifier/reward.txt holds `{}`, not a number",
                text.trim()
            )
        });
    }
    let Some(json) = fd3.strip_prefix("json:") else {
        return Err("the verifier script wrote no /logs/verifier/reward.txt or reward.json".into());
    };
    let value: serde_json::Value = serde_json::from_str(json)
        .map_err(|e| format!("/logs/verifier/reward.json is not JSON: {e}"))?;
    if let Some(r) = value.as_f64() {
        return Ok(r);
    }
    let obj = value
        .as_object()
        .ok_or("/logs/verifier/reward.json is neither a number nor an object")?;
    if let Some(r) = obj.get("reward") {
        return r
            .as_f64()
            .ok_or_else(|| "/logs/verifier/reward.json: `reward` is not a number".to_string());
    }
    let numbers: Vec<f64> = obj.values().filter_map(|v| v.as_f64()).collect();
    match numbers[..] {
        [only] => Ok(only),
        _ => {
            Err("/logs/verifier/reward.json has no `reward` key and not exactly one number".into())
        }
    }
}

/// The sealed environment's commands for a test script, as files of the
/// verifier's private directory (`bin/` is made executable there):
/// `python3`, `python` (its interpreter, through its own loader, with its
/// site directory on `sys.path`), `pip` and `pip3` (`python3 -m pip`).
fn script_env_bin(env: &VerifierEnvSpec) -> Vec<(String, Vec<u8>)> {
    let q = |s: &str| format!("'{}'", s.replace('\'', r"'\''"));
    let argv: Vec<String> = crate::sandbox::local::env_python(env)
        .iter()
        .map(|a| q(a))
        .collect();
    let python = format!(
        "#!/bin/sh\n# Written by endless: the sealed verifier environment's Python.\n\
         PYTHONPATH={site}${{PYTHONPATH:+:$PYTHONPATH}} exec {argv} \"$@\"\n",
        site = q(&crate::sandbox::local::env_site(env)),
        argv = argv.join(" "),
    );
    // What the script's install lines ask for was installed when the
    // environment was built (from those very lines); the environment is
    // read-only, so they only say so here.
    let pip = format!(
        "#!/bin/sh\nif [ \"$1\" = install ]; then\n  echo 'endless: the sealed verifier environment was built with the packages of this script; nothing to install' >&2\n  exit 0\nfi\nexec {PRIVATE_DIR}/bin/python3 -m pip \"$@\"\n"
    );
    ["python3", "python"]
        .iter()
        .map(|n| (format!("bin/{n}"), python.clone().into_bytes()))
        .chain(
            ["pip", "pip3"]
                .iter()
                .map(|n| (format!("bin/{n}"), pip.clone().into_bytes())),
        )
        .collect()
}

/// A test script (`tests/test.sh` computing the reward itself) of a task
/// with a sealed verifier environment: run as the verifier runs (its
/// private mount namespace, the tests read-only at `/tests`, a fresh
/// writable `/logs/verifier/`, the task's user without capabilities, the
/// task's WORKDIR as cwd), with the environment's `python3`/`python`/`pip`
/// first on `PATH`. The reward comes from `reward.txt` / `reward.json`.
fn run_script_sealed(
    session: &mut Session,
    task: &Task,
    env: &VerifierEnvSpec,
    script: &str,
    timeout: Duration,
    start: Instant,
) -> Result<TestReport, SandboxError> {
    let mut files: Vec<(String, Vec<u8>)> = task
        .tests
        .iter()
        .map(|(path, file)| (format!("tests/{path}"), file.bytes.clone()))
        .collect();
    files.extend(script_env_bin(env));
    let workdir = session.info().workdir.clone();
    let body = format!("{}; exit $st", script_and_reward(script, &workdir));
    let mut env_vars = user_env(session);
    for (k, v) in env_vars.iter_mut() {
        if k == "PATH" {
            *v = format!("{PRIVATE_DIR}/bin:{v}");
        }
    }
    let call = VerifierCall {
        argv: vec!["/bin/bash".into(), "-c".into(), body],
        env: env_vars,
        cwd: workdir,
        warm: false,
        sealed_env: false,
        hints: WarmHints::default(),
        files,
    };
    let (out, reward, _) = match session.run_verifier(&call, Vec::new(), timeout) {
        Err(SandboxError::Tampered(why)) => return Ok(tampered(why, start)),
        other => other?,
    };
    let mut report = script_report(script, out, &reward, timeout, start);
    report.verifier = VerifierPath::Cold(Some(
        "the verifier script runs with the task's sealed verifier environment".into(),
    ));
    Ok(report)
}

fn run_script_in(
    session: &mut Session,
    script: &str,
    inside_run: &str,
    workdir: &str,
    timeout: Duration,
    start: Instant,
) -> Result<TestReport, SandboxError> {
    let q = |s: &str| format!("'{}'", s.replace('\'', r"'\''"));
    let body = format!(
        "rm -rf /logs/verifier /tests && mkdir -p /logs/verifier && cp -a {run}/tests /tests || exit 125; \
         {}; rm -rf /tests; exit $st",
        script_and_reward(script, workdir),
        run = q(inside_run),
    );
    let mut argv = clean_env(inside_run);
    argv.extend(["/bin/bash".to_string(), "-c".to_string(), body]);
    let (out, reward) = session.run_as_root_fd3(&argv, timeout)?;
    Ok(script_report(script, out, &reward, timeout, start))
}

/// The report of a verifier script that ended with `out`, having written
/// `reward` to fd 3 (see [`script_and_reward`]).
fn script_report(
    script: &str,
    out: CommandOutput,
    reward: &[u8],
    timeout: Duration,
    start: Instant,
) -> TestReport {
    let code = out.code;
    let reward = parse_reward(&String::from_utf8_lossy(reward));
    let passed = reward.as_ref().is_ok_and(|r| *r >= 1.0);
    let junit_xml = String::new();
    let message = match &reward {
        Ok(r) => format!("reward: {r}"),
        Err(why) => why.clone(),
    };
    let mut output = out.output;
    if out.timed_out {
        output.push_str(&format!("\n[verifier timed out after {timeout:?}]"));
    }
    TestReport {
        tests: vec![TestCase {
            name: script.to_string(),
            passed,
            message: if passed { String::new() } else { message },
        }],
        passed,
        junit_xml,
        output,
        duration: start.elapsed(),
        verifier: VerifierPath::Cold(Some(
            "verifier scripts run in the agent's environment".into(),
        )),
        exit_code: code,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn case(name: &str, passed: bool) -> TestCase {
        TestCase {
            name: name.into(),
            passed,
            message: String::new(),
        }
    }

    fn combined(tests: Vec<TestCase>, exit_code: Option<i32>) -> TestReport {
        TestReport {
            passed: exit_code == Some(0),
            tests,
            junit_xml: String::new(),
            output: String::new(),
            duration: Duration::ZERO,
            verifier: VerifierPath::Warm,
            exit_code,
        }
    }

    #[test]
    fn the_tasks_pytest_options_pass_through_ctrf_only_with_its_plugin() {
        let opts: Vec<String> = ["--ctrf", "/logs/verifier/ctrf.json", "-rA", "-k", "x"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(pass_through(&opts, None), ["-rA", "-k", "x"]);
        let v = crate::task::VerifierSection {
            packages: vec!["numpy==2.3.3".into(), "pytest-json-ctrf==0.3.5".into()],
            ..crate::task::VerifierSection::default()
        };
        let env = VerifierEnvSpec::from_section(&v, Path::new("task.toml")).unwrap();
        assert_eq!(
            pass_through(&opts, Some(&env)),
            [
                "-p",
                "ctrf.main",
                "--ctrf",
                "/logs/verifier/ctrf.json",
                "-rA",
                "-k",
                "x"
            ]
        );
    }

    #[test]
    fn script_rewards_come_from_reward_txt_or_reward_json() {
        assert_eq!(parse_reward("txt:1\n"), Ok(1.0));
        assert_eq!(parse_reward("txt: 0.5 "), Ok(0.5));
        assert!(parse_reward("txt:yes")
            .unwrap_err()
            .contains("not a number"));
        assert_eq!(parse_reward("json:{\"reward\": 0.25}"), Ok(0.25));
        assert_eq!(parse_reward("json:1"), Ok(1.0));
        assert_eq!(parse_reward("json:{\"accuracy\": 1}"), Ok(1.0));
        assert!(parse_reward("json:{\"a\": 1, \"b\": 0}").is_err());
        assert!(parse_reward("json:{\"reward\": \"1\"}").is_err());
        assert!(parse_reward("json:{").unwrap_err().contains("not JSON"));
        assert!(parse_reward("").unwrap_err().contains("wrote no"));
        // A script killed by a signal, or that left a process that could
        // not be killed: no reward is read.
        assert!(parse_reward("killed:137")
            .unwrap_err()
            .contains("status 137"));
        assert!(parse_reward("survived:")
            .unwrap_err()
            .contains("could not all be killed"));
    }

    #[test]
    fn the_sealed_environment_runs_isolated_with_only_its_site_added() {
        let v = crate::task::VerifierSection {
            python: Some("3.13".into()),
            packages: vec!["numpy==2.3.3".into(), "pytest==8.4.1".into()],
            ..Default::default()
        };
        let env = VerifierEnvSpec::from_section(&v, Path::new("task.toml")).unwrap();
        let argv = env_argv(&env);
        let program = &argv[argv.len() - 2];
        assert_eq!(argv[argv.len() - 1], "cold");
        assert!(argv.iter().any(|a| a == "-I") && argv.iter().any(|a| a == "-S"));
        let site = crate::sandbox::local::env_site(&env);
        assert!(
            program.contains(&format!("addsitedir(\"{site}\")")),
            "{program}"
        );
        assert!(program.ends_with(VERIFIER_PROGRAM));
        assert!(
            argv[0].starts_with("/run/endless-verifier/envs/"),
            "{argv:?}"
        );
    }

    const REPORT: &str = r#"<testsuites><testsuite name="pytest" tests="3"><testcase classname="test_f" name="test_ok" /><testcase classname="test_f" name="test_quotes"><failure message="AssertionError: XXXX">XXXXXXXX</failure></testcase><testcase classname="test_f" name="test_last" /></testsuite></testsuites>"#;

    #[test]
    fn a_cut_report_is_a_failure_with_every_lost_test_failed() {
        let (whole, cut) = report_cases(REPORT, REPORT.len()).unwrap();
        assert!(!cut && whole.len() == 3);
        for at in 1..REPORT.len() {
            let (tests, cut) = report_cases(&REPORT[..at], at)
                .unwrap_or_else(|e| panic!("cut at {at}: an error: {e}"));
            assert!(cut, "cut at {at}: not seen as cut");
            assert!(tests.iter().any(|t| !t.passed), "cut at {at}: {tests:?}");
            // The lost tests count: never fewer cases than the suite declares.
            let declared = at > REPORT.find("<testcase").unwrap();
            assert!(!declared || tests.len() >= 3, "cut at {at}: {tests:?}");
        }
        // Cut inside the failing test's text: it is named, and failed.
        let at = REPORT.find("XXXXXXXX<").unwrap() + 4;
        let (tests, _) = report_cases(&REPORT[..at], at).unwrap();
        let names: Vec<(&str, bool)> = tests.iter().map(|t| (t.name.as_str(), t.passed)).collect();
        assert_eq!(
            names,
            [
                ("test_f::test_ok", true),
                ("test_f::test_quotes", false),
                ("endless::cut_report::missing_1", false)
            ]
        );
        assert!(tests[1]
            .message
            .contains("without a result counts as failed"));
        // Whole but at the capture limit (more may have been dropped): failed.
        let (tests, cut) = report_cases(REPORT, MAX_REPORT_BYTES).unwrap();
        assert!(cut && tests.len() == 4 && !tests[3].passed, "{tests:?}");
        // Malformed before its end: still an error.
        assert!(report_cases("<testsuite><testcase name='a'></testsuite>", 40).is_err());
    }

    #[test]
    fn cases_go_to_the_file_they_name_the_longest_module_first() {
        let all = vec![
            "test_a.py".to_string(),
            "test_a/b.py".to_string(),
            "sub/test_c.py".to_string(),
        ];
        assert_eq!(file_of("test_a::test_x", &all), Some(&all[0]));
        assert_eq!(file_of("test_a.TestK::test_y", &all), Some(&all[0]));
        assert_eq!(file_of("test_a.b::test_z", &all), Some(&all[1]));
        assert_eq!(
            file_of("sub.test_c", &all),
            Some(&all[2]),
            "a collection error"
        );
        assert_eq!(file_of("test_ab::test_x", &all), None);
    }

    #[test]
    fn a_combined_run_splits_into_its_sets() {
        let all = vec![
            "test_initial_state.py".to_string(),
            "test_final_state.py".to_string(),
        ];
        let (initial, final_) = (&all[..1], &all[1..]);
        let both = combined(
            vec![
                case("test_initial_state::test_ok", true),
                case("test_final_state::test_done", false),
            ],
            Some(1),
        );
        let i = part_of(&both, initial, &all);
        let f = part_of(&both, final_, &all);
        assert!(i.passed && i.tests.len() == 1);
        assert!(!f.passed && f.tests.len() == 1 && f.tests[0].name.ends_with("test_done"));
        // pytest stopped early (usage error, interrupted, killed): nothing passes.
        for code in [Some(2), Some(4), None] {
            let r = combined(vec![case("test_initial_state::test_ok", true)], code);
            assert!(!part_of(&r, initial, &all).passed, "{code:?}");
        }
        // A set with no case of its own did not run.
        let only_initial = combined(vec![case("test_initial_state::test_ok", true)], Some(0));
        assert!(!part_of(&only_initial, final_, &all).passed);
        // A case naming no file (a session-wide error) counts against both.
        let err = combined(
            vec![
                case("test_initial_state::test_ok", true),
                case("pytest", false),
            ],
            Some(1),
        );
        assert!(!part_of(&err, initial, &all).passed && !part_of(&err, final_, &all).passed);
    }
}
