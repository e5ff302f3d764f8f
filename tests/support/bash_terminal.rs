//! A test-only terminal: each command is a real `bash -c` in a temp dir
//! (state persists through files and the working directory, not shell
//! variables), and a matching [`SandboxProvider`] whose "final tests" are the
//! task's `tests/*.sh` scripts run in that directory.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use endless::agent::{
    SandboxProvider, StartOptions, Terminal, TerminalError, TestOutcome, Verification,
};
use endless::sandbox::ExecResult;
use endless::task::Task;

/// `bash -c` in a directory.
pub struct BashTerminal {
    dir: tempfile::TempDir,
}

impl BashTerminal {
    /// A terminal in a fresh temp dir.
    pub fn new() -> Self {
        Self {
            dir: tempfile::tempdir().expect("tempdir"),
        }
    }
    /// The working directory.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

/// Run `command` with bash in `dir`, killing its process group at `timeout`.
pub fn run_bash(dir: &Path, command: &str, timeout: Duration) -> Result<ExecResult, TerminalError> {
    let out_path: PathBuf = dir.join(".endless-out");
    let out = std::fs::File::create(&out_path).map_err(|e| TerminalError::infra(e.to_string()))?;
    let err = out
        .try_clone()
        .map_err(|e| TerminalError::infra(e.to_string()))?;
    let started = Instant::now();
    let mut child = Command::new("bash")
        .arg("-c")
        .arg(command)
        .current_dir(dir)
        .env("HOME", dir)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .process_group(0)
        .spawn()
        .map_err(|e| TerminalError::infra(format!("cannot start bash: {e}")))?;
    let mut timed_out = false;
    let status = loop {
        if let Some(s) = child
            .try_wait()
            .map_err(|e| TerminalError::infra(e.to_string()))?
        {
            break Some(s);
        }
        if started.elapsed() >= timeout {
            timed_out = true;
            unsafe {
                libc::kill(-(child.id() as i32), libc::SIGKILL);
            }
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let output =
        String::from_utf8_lossy(&std::fs::read(&out_path).unwrap_or_default()).into_owned();
    let _ = std::fs::remove_file(&out_path);
    Ok(ExecResult {
        output,
        exit_code: if timed_out {
            None
        } else {
            status.and_then(|s| s.code())
        },
        timed_out,
        truncated: false,
        duration: started.elapsed(),
    })
}

impl Terminal for BashTerminal {
    fn exec(&mut self, command: &str, timeout: Duration) -> Result<ExecResult, TerminalError> {
        run_bash(self.dir.path(), command, timeout)
    }
}

/// Starts a [`BashTerminal`] per episode, running the task's
/// `environment/setup.sh` in it first; verifies with `tests/*.sh`.
#[derive(Default)]
pub struct BashProvider {
    /// Fail every start with this message (to test sandbox errors).
    pub fail_start: Option<String>,
}

impl SandboxProvider for BashProvider {
    type Term = BashTerminal;

    fn start(&self, task: &Task, options: &StartOptions) -> Result<BashTerminal, TerminalError> {
        if let Some(m) = &self.fail_start {
            return Err(TerminalError::infra(m.clone()));
        }
        let term = BashTerminal::new();
        if let Some(setup) = task.environment.text("setup.sh") {
            let r = run_bash(term.path(), setup, Duration::from_secs(30))?;
            if r.exit_code != Some(0) {
                return Err(TerminalError::infra(format!("setup failed: {}", r.output)));
            }
        }
        if let Some(cast) = &options.record {
            let _ = std::fs::write(cast, "{\"version\": 2, \"width\": 80, \"height\": 24}\n");
        }
        Ok(term)
    }

    fn verify(&self, term: &mut BashTerminal, task: &Task) -> Result<Verification, TerminalError> {
        let mut tests = Vec::new();
        for (name, entry) in task.tests.iter().filter(|(n, _)| n.ends_with(".sh")) {
            let script = String::from_utf8_lossy(&entry.bytes);
            let r = run_bash(term.path(), &script, Duration::from_secs(30))?;
            let passed = r.exit_code == Some(0);
            tests.push(TestOutcome {
                name: name.clone(),
                passed,
                message: (!passed).then(|| r.output.clone()),
            });
        }
        let xml = format!(
            "<testsuite tests=\"{}\">{}</testsuite>",
            tests.len(),
            tests
                .iter()
                .map(|t| format!("<testcase name=\"{}\"/>", t.name))
                .collect::<String>()
        );
        Ok(Verification {
            limits: None,
            tests,
            junit_xml: Some(xml),
            output: String::new(),
            verifier: None,
        })
    }
}

/// A small task: create `hello.txt` containing `hello`.
pub fn hello_task(id: &str, category: &str, complexity: u8) -> Task {
    let mut meta = endless::task::TaskMeta::default();
    meta.task.id = id.to_string();
    meta.task.name = id.to_string();
    meta.task.category = category.to_string();
    meta.task.complexity = Some(complexity);
    meta.agent.max_turns = 8;
    meta.agent.timeout_sec = 60.0;
    let mut tests = endless::task::FileTree::default();
    tests.insert_text("check_hello.sh", "grep -qx hello hello.txt\n");
    let mut solution = endless::task::FileTree::default();
    solution.insert_text("solve.sh", "echo hello > hello.txt\necho solved\n");
    Task {
        meta,
        instruction: "Create hello.txt containing the single line `hello`.".into(),
        truth: "hello.txt contains hello".into(),
        environment: endless::task::FileTree::default(),
        tests,
        solution,
    }
}
