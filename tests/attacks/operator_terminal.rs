//! Keystrokes into the operator's terminal: a hostile build step, and a
//! tool a non-root agent leaves for the final tests to run, open `/dev/tty`
//! and push a command into its input queue with `TIOCSTI`. The operator
//! runs `endless tasks validate` and `endless run` from an interactive bash
//! on a real PTY; whatever was injected would run as the operator once
//! `endless` exits. Nothing may arrive.

use std::io::{Read, Write};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use portable_pty::{native_pty_system, CommandBuilder, PtySize};

use endless::store::{TaskStatus, Workspace};

use super::*;

/// Python that types `touch CANARY` into the controlling terminal, through
/// `/dev/tty` and through every inherited descriptor that is a terminal;
/// prints what each attempt gave.
fn inject(canary: &Path) -> String {
    format!(
        r#"python3 - <<'EOF'
import fcntl, os, termios
line = b"touch {canary}\n"
def push(fd, how):
    try:
        for c in line:
            fcntl.ioctl(fd, termios.TIOCSTI, bytes([c]))
        print("injected through", how, flush=True)
    except OSError as e:
        print("refused", how, e, flush=True)
try:
    push(os.open("/dev/tty", os.O_RDWR), "/dev/tty")
except OSError as e:
    print("no /dev/tty:", e, flush=True)
for fd in range(3):
    if os.isatty(fd):
        push(fd, "fd %d" % fd)
EOF
"#,
        canary = canary.display()
    )
}

/// A task whose build step injects, and whose final test runs the tool the
/// oracle leaves in the agent's home (which injects too).
fn hostile_task(id: &str, user: &str, canary: &Path) -> Task {
    let mut t = task(id, user, &format!("{}true\n", inject(canary)));
    t.solution.insert_text(
        "solve.sh",
        format!(
            "echo HELLO > ~/out.txt\ncat > ~/tool.sh <<'TOOL'\n{}TOOL\n",
            inject(canary)
        ),
    );
    t.tests.insert_text(
        "test_final_state.py",
        "import os, subprocess\n\
         def test_done():\n\
         \x20   tool = os.path.expanduser('~/tool.sh')\n\
         \x20   if os.path.exists(tool):\n\
         \x20       subprocess.run(['bash', tool])\n\
         \x20   with open(os.path.expanduser('~/out.txt')) as f:\n\
         \x20       assert f.read().strip() == 'HELLO'\n",
    );
    t.tests.insert_text(
        "test_initial_state.py",
        "def test_start():\n    assert True\n",
    );
    t.meta.verifier.initial_tests = vec!["test_initial_state.py".into()];
    t
}

/// An interactive bash on a PTY of its own (its controlling terminal),
/// as an operator's shell is.
struct OperatorShell {
    writer: Box<dyn Write + Send>,
    screen: Arc<Mutex<String>>,
    child: Box<dyn portable_pty::Child + Send + Sync>,
}

impl OperatorShell {
    fn start(home: &Path) -> Self {
        let pair = native_pty_system()
            .openpty(PtySize {
                rows: 50,
                cols: 200,
                pixel_width: 0,
                pixel_height: 0,
            })
            .unwrap();
        let mut cmd = CommandBuilder::new("bash");
        cmd.args(["--noprofile", "--norc", "--noediting", "-i"]);
        cmd.env_clear();
        cmd.env("PATH", "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin");
        cmd.env("HOME", home);
        cmd.env("TERM", "dumb");
        cmd.env("PS1", "$ ");
        cmd.cwd(home);
        let child = pair.slave.spawn_command(cmd).unwrap();
        drop(pair.slave);
        let mut reader = pair.master.try_clone_reader().unwrap();
        let screen = Arc::new(Mutex::new(String::new()));
        let sink = Arc::clone(&screen);
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = reader.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        let writer = pair.master.take_writer().unwrap();
        // The master must outlive the shell: leak it into the reader's life.
        std::mem::forget(pair.master);
        OperatorShell {
            writer,
            screen,
            child,
        }
    }

    /// Type `line` and wait until the output holds `done` (typed lines are
    /// echoed, so `done` is built by the shell, never typed literally).
    fn type_and_wait(&mut self, line: &str, done: &str, limit: Duration) -> String {
        self.writer.write_all(line.as_bytes()).unwrap();
        self.writer.write_all(b"\n").unwrap();
        self.writer.flush().unwrap();
        let start = Instant::now();
        loop {
            let screen = self.screen.lock().unwrap().clone();
            if screen.contains(done) {
                return screen;
            }
            assert!(
                start.elapsed() < limit,
                "{done:?} never came; the terminal shows:\n{screen}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for OperatorShell {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn nothing_the_sandbox_does_types_into_the_operators_terminal() {
    both(
        "operator_terminal::nothing_the_sandbox_does_types_into_the_operators_terminal",
        |_| {
            let dir = tempfile::tempdir().unwrap();
            let ws_dir = dir.path().join("ws");
            let canary = dir.path().join("PWNED");
            let ws = Workspace::open(&ws_dir).unwrap();
            for (id, user) in [("atk-tty-root", "root"), ("atk-tty-user", "user")] {
                ws.add_task(&hostile_task(id, user, &canary), TaskStatus::Candidate)
                    .unwrap();
            }
            let mut shell = OperatorShell::start(dir.path());
            let bin = env!("CARGO_BIN_EXE_endless");
            let env = format!(
                "XDG_CACHE_HOME={d}/cache XDG_STATE_HOME={d}/state XDG_CONFIG_HOME={d}/config",
                d = dir.path().display()
            );
            let ws_arg = ws_dir.display();
            // Each command ends by printing a marker the shell assembles
            // (`EXIT-` and the code), then a second line is typed: anything
            // injected meanwhile sits in the input queue before it and
            // would run first.
            let validate = shell.type_and_wait(
                &format!(
                    "{env} {bin} --workspace {ws_arg} tasks validate atk-tty-root atk-tty-user; echo VALIDATE-EXIT''-$?"
                ),
                "VALIDATE-EXIT-",
                Duration::from_secs(300),
            );
            shell.type_and_wait("echo FIRST-D''ONE", "FIRST-DONE", Duration::from_secs(30));
            let run = shell.type_and_wait(
                &format!(
                    "{env} {bin} --workspace {ws_arg} run atk-tty-user --policy oracle; echo RUN-EXIT''-$?"
                ),
                "RUN-EXIT-",
                Duration::from_secs(300),
            );
            let screen =
                shell.type_and_wait("echo SECOND-D''ONE", "SECOND-DONE", Duration::from_secs(30));
            assert!(
                validate.contains("VALIDATE-EXIT-0"),
                "both tasks validate (the attacks ran): {validate}"
            );
            assert!(run.contains("RUN-EXIT-0"), "the oracle passes: {run}");
            assert!(
                !canary.exists(),
                "the sandbox typed a command into the operator's terminal:\n{screen}"
            );
        },
    );
}
