//! End-to-end: start the real `endless` binary in tmux on a fixture
//! workspace, drive it with `tmux send-keys` and check what the screen shows
//! with `tmux capture-pane -p`.
//! Needs tmux (installed by scripts/setup.sh).

#![allow(clippy::unwrap_used)] // tests and benches fail loudly

use std::path::Path;
use std::process::Command;
use std::thread::sleep;
use std::time::{Duration, Instant};

use endless::store::{TaskStatus, Workspace};
use endless::task::{FileTree, Task, TaskMeta};

fn tmux(args: &[&str]) -> String {
    let out = Command::new("tmux").args(args).output().expect("tmux runs");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn have_tmux() -> bool {
    Command::new("tmux")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success())
}

fn add(ws: &Workspace, id: &str, category: &str) {
    let mut meta = TaskMeta::default();
    meta.task.id = id.into();
    meta.task.name = id.replace('-', " ");
    meta.task.category = category.into();
    meta.task.complexity = Some(2);
    let mut tests = FileTree::default();
    tests.insert_text("test_initial_state.py", "def test_ok():\n    assert True\n");
    tests.insert_text(
        "test_final_state.py",
        "def test_done():\n    assert False\n",
    );
    let task = Task {
        meta,
        instruction: format!("Instruction of {id}."),
        truth: format!("Secret truth of {id}."),
        environment: FileTree::default(),
        tests,
        solution: FileTree::default(),
    };
    ws.add_task(&task, TaskStatus::Candidate).unwrap();
}

/// Poll the pane until `needle` shows up (or fail with the screen).
fn wait_for(session: &str, needle: &str) -> String {
    wait_for_up_to(session, needle, Duration::from_secs(15))
}

/// [`wait_for`] with a limit.
fn wait_for_up_to(session: &str, needle: &str, limit: Duration) -> String {
    let start = Instant::now();
    loop {
        let screen = tmux(&["capture-pane", "-p", "-t", session]);
        if screen.contains(needle) {
            return screen;
        }
        if start.elapsed() > limit {
            panic!("{needle:?} never appeared; screen:\n{screen}");
        }
        sleep(Duration::from_millis(100));
    }
}

/// Poll the pane until `needle` shows up and `settled` holds for the same
/// screen (a capture can catch a redraw half done), or until 15 s have
/// passed; the last screen either way, for the caller's assertion.
fn wait_until(session: &str, needle: &str, settled: impl Fn(&str) -> bool) -> String {
    let start = Instant::now();
    loop {
        let screen = wait_for(session, needle);
        if settled(&screen) || start.elapsed() > Duration::from_secs(15) {
            return screen;
        }
        sleep(Duration::from_millis(100));
    }
}

/// A fresh home for the TUI's cache, config and state directories.
fn sandbox_home() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("endless-e2e-")
        .tempdir_in("/var/tmp")
        .unwrap()
}

/// Switch to the (empty) Jobs view and open the form behind `key`.
fn open_form(session: &str, key: &str, title: &str) {
    tmux(&["send-keys", "-t", session, "F4"]);
    wait_for(session, "No jobs yet");
    tmux(&["send-keys", "-t", session, key]);
    wait_for(session, title);
}

struct Session(String);

impl Drop for Session {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["kill-session", "-t", &self.0])
            .status();
    }
}

#[test]
fn browse_search_and_curate_in_tmux() {
    if !have_tmux() {
        eprintln!("skipping: tmux is not installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    {
        let ws = Workspace::open(dir.path()).unwrap();
        add(&ws, "alpha-task", "file-ops");
        add(&ws, "beta-task", "git");
    }
    let session = start_tui(
        format!("endless-e2e-{}", std::process::id()),
        dir.path(),
        None,
        120,
        40,
    );
    let s = &session.0;

    let screen = wait_for(s, "alpha-task");
    assert!(screen.contains("beta-task"), "{screen}");
    assert!(screen.contains("Tasks"), "{screen}");

    // Search narrows the table.
    tmux(&["send-keys", "-t", s, "/", "beta", "Enter"]);
    // The detail pane loads on the worker thread: wait for it, not just the filter.
    let screen = wait_for(s, "Instruction of beta-task");
    assert!(screen.contains("1/2"), "{screen}");

    // The truth tab is marked privileged.
    tmux(&["send-keys", "-t", s, "]"]);
    let screen = wait_for(s, "Secret truth of beta-task");
    assert!(screen.contains("PRIVILEGED"), "{screen}");

    // Accept it; the store sees it.
    tmux(&["send-keys", "-t", s, "a"]);
    wait_for(s, "accepted");

    // Help overlay: the Tasks view's keys first, grouped; then other views.
    tmux(&["send-keys", "-t", s, "?"]);
    wait_for(s, "▌ Tasks: curate");
    // (The overlay can be captured half drawn: wait for its later lines too.)
    wait_for(s, "Undo the last curation change");
    tmux(&["send-keys", "-t", s, "Escape"]);
    // Let the lone Escape be read before the next key's escape sequence
    // (otherwise the two can arrive as one, under load).
    let start = Instant::now();
    while tmux(&["capture-pane", "-p", "-t", s]).contains("▌ Tasks: curate")
        && start.elapsed() < Duration::from_secs(10)
    {
        sleep(Duration::from_millis(100));
    }
    tmux(&["send-keys", "-t", s, "F3"]);
    wait_for(s, "No episodes yet");

    tmux(&["send-keys", "-t", s, "q"]);
    let start = Instant::now();
    while tmux(&["list-sessions"]).contains(s.as_str()) && start.elapsed() < Duration::from_secs(5)
    {
        sleep(Duration::from_millis(100));
    }
    let ws = Workspace::open(dir.path()).unwrap();
    assert_eq!(
        ws.task_row("beta-task").unwrap().status,
        TaskStatus::Accepted
    );
}

/// The binary under test: this build's, or the one `ENDLESS_E2E_BIN` names
/// (to show that a test fails on an older release).
fn endless_bin() -> std::path::PathBuf {
    std::env::var_os("ENDLESS_E2E_BIN")
        .map(Into::into)
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_endless").into())
}

/// Start the real binary on `workspace` in a detached tmux session of the given
/// size; with `home`, its cache, config and state directories live there.
fn start_tui(name: String, workspace: &Path, home: Option<&Path>, cols: u16, rows: u16) -> Session {
    let bin = shell_quote(&endless_bin());
    let env = home.map_or(String::new(), |h| {
        format!(
            "env XDG_CACHE_HOME={} XDG_CONFIG_HOME={} XDG_STATE_HOME={} ",
            shell_quote(&h.join("cache")),
            shell_quote(&h.join("config")),
            shell_quote(&h.join("state"))
        )
    });
    let cmd = format!("{env}{bin} --workspace {}", shell_quote(workspace));
    let session = Session(name);
    let (cols, rows) = (cols.to_string(), rows.to_string());
    tmux(&[
        "new-session",
        "-d",
        "-s",
        &session.0,
        "-x",
        &cols,
        "-y",
        &rows,
        &cmd,
    ]);
    session
}

fn shell_quote(p: &Path) -> String {
    format!("'{}'", p.display().to_string().replace('\'', "'\\''"))
}

/// A workspace with the upper-casing task, a sandbox home and a script
/// policy file `name` holding `script`; `None` (the test skips) without
/// tmux or the verifier's Python.
fn sandboxed_workspace(
    name: &str,
    script: impl AsRef<[u8]>,
) -> Option<(tempfile::TempDir, tempfile::TempDir, std::path::PathBuf)> {
    if !have_tmux() || !Path::new(endless::verify::PYTHON).exists() {
        eprintln!("skipping: tmux or {} is missing", endless::verify::PYTHON);
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let home = sandbox_home();
    add_upper(&Workspace::open(dir.path()).unwrap());
    let path = dir.path().join(name);
    std::fs::write(&path, script).unwrap();
    Some((dir, home, path))
}

/// A native task with an oracle: upper-case a file.
fn add_upper(ws: &Workspace) {
    let mut meta = TaskMeta::default();
    meta.task.id = "upper".into();
    meta.task.name = "upper".into();
    meta.task.category = "text".into();
    meta.task.complexity = Some(1);
    let mut environment = FileTree::default();
    environment.insert_text(
        "setup.sh",
        "mkdir -p /home/user/data\necho hello > /home/user/data/a.txt\n",
    );
    let mut tests = FileTree::default();
    tests.insert_text(
        "test_final_state.py",
        "def test_output_upper():\n    assert open('/home/user/out.txt').read() == 'HELLO\\n'\n",
    );
    let mut solution = FileTree::default();
    solution.insert(
        "solve.sh",
        b"tr a-z A-Z < ~/data/a.txt > ~/out.txt\n".to_vec(),
        true,
    );
    let task = Task {
        meta,
        instruction: "Upper-case ~/data/a.txt into ~/out.txt".into(),
        truth: "out.txt holds HELLO".into(),
        environment,
        tests,
        solution,
    };
    ws.add_task(&task, TaskStatus::Accepted).unwrap();
}

/// Launch an oracle evaluation from the Jobs view, watch it in a live pane,
/// and find the passed episode in the Episodes view. Uses the real sandbox.
#[test]
fn oracle_evaluation_from_the_jobs_view_in_tmux() {
    if !have_tmux() {
        eprintln!("skipping: tmux is not installed");
        return;
    }
    if !Path::new(endless::verify::PYTHON).exists() {
        eprintln!("skipping: {} is missing", endless::verify::PYTHON);
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let home = sandbox_home();
    add_upper(&Workspace::open(dir.path()).unwrap());
    let session = start_tui(
        format!("endless-e2e-eval-{}", std::process::id()),
        dir.path(),
        Some(home.path()),
        160,
        48,
    );
    let s = &session.0;
    wait_for(s, "upper");

    // Jobs view: the evaluation form, oracle by default; Enter starts it.
    open_form(s, "E", "Evaluate a policy");
    tmux(&["send-keys", "-t", s, "Enter"]);
    wait_for(s, "eval-");

    // Live view: the episode's pane with its title and the oracle's command.
    // A pane's title ("┏ upper#0 turn …") is the Live view's own; the Jobs
    // log also names "upper#0", so waiting for that alone would race F2.
    tmux(&["send-keys", "-t", s, "F2"]);
    let screen = wait_for_up_to(s, "┏ upper#0", Duration::from_secs(120));
    assert!(screen.contains("oracle"), "{screen}");
    let screen = wait_for_up_to(s, "PASSED", Duration::from_secs(120));
    assert!(screen.contains("tr a-z A-Z"), "{screen}");

    // The job finishes.
    tmux(&["send-keys", "-t", s, "F4"]);
    let screen = wait_for_up_to(s, "succeeded", Duration::from_secs(60));
    assert!(screen.contains("1/1 episodes passed"), "{screen}");

    // The Episodes view shows it passed; Enter inspects it.
    // "failure mode" heads the Episodes view; the Live view also says PASSED.
    tmux(&["send-keys", "-t", s, "F3"]);
    wait_for(s, "failure mode");
    let screen = wait_for(s, "PASS ");
    assert!(screen.contains("upper"), "{screen}");
    tmux(&["send-keys", "-t", s, "Enter"]);
    wait_for(s, "Trajectory");
    wait_for(s, "tr a-z A-Z < ~/data/a.txt");
    tmux(&["send-keys", "-t", s, "]"]);
    wait_for(s, "PASS test_final_state::test_output_upper");

    tmux(&["send-keys", "-t", s, "q"]);
    let ws = Workspace::open(dir.path()).unwrap();
    let eps = ws.list_episodes(None).unwrap();
    assert_eq!(eps.len(), 1);
    assert!(eps[0].passed);
    let jobs = ws.list_jobs().unwrap();
    assert_eq!(jobs[0].status, "succeeded", "{jobs:?}");
}

/// Take over a running episode: a slow scripted agent waits while the user
/// solves the task by typing into the zoomed session; the episode passes.
#[test]
fn take_over_a_live_session_in_tmux() {
    let Some((dir, home, script)) = sandboxed_workspace("agent.txt", "sleep 3\ntrue\n") else {
        return;
    };
    let session = start_tui(
        format!("endless-e2e-take-{}", std::process::id()),
        dir.path(),
        Some(home.path()),
        160,
        48,
    );
    let s = &session.0;
    wait_for(s, "upper");
    open_form(s, "E", "Evaluate a policy");
    // Replace the policy (oracle) with the slow script.
    for _ in 0.."oracle".len() {
        tmux(&["send-keys", "-t", s, "BSpace"]);
    }
    let policy = format!("script:{}", script.display());
    tmux(&["send-keys", "-t", s, "-l", &policy]);
    tmux(&["send-keys", "-t", s, "Enter"]);
    tmux(&["send-keys", "-t", s, "F2"]);
    wait_for_up_to(s, "┏ upper#0", Duration::from_secs(120));
    tmux(&["send-keys", "-t", s, "Enter"]);
    tmux(&["send-keys", "-t", s, "C-t"]);
    wait_for(s, "YOU HAVE THE SESSION");
    tmux(&[
        "send-keys",
        "-t",
        s,
        "-l",
        "tr a-z A-Z < ~/data/a.txt > ~/out.txt; echo DONE_$((6*7))",
    ]);
    // Echoed as typed, on the pane's own command line (the session's
    // terminal does not echo).
    wait_for(s, "you$ tr a-z A-Z < ~/data/a.txt");
    tmux(&["send-keys", "-t", s, "Enter"]);
    wait_for(s, "recorded as a human step");
    wait_for_up_to(s, "DONE_42", Duration::from_secs(30));
    tmux(&["send-keys", "-t", s, "C-]"]);
    // Not waiting for the "given back" status line: the agent's last turns
    // are quick, and the job's result can replace that line before a poll
    // sees it. The header losing "YOU HAVE THE SESSION" says the same.
    let screen = wait_for_up_to(s, "PASSED", Duration::from_secs(60));
    assert!(!screen.contains("YOU HAVE THE SESSION"), "{screen}");
    // The job says the episode was not the policy's own.
    tmux(&["send-keys", "-t", s, "F4"]);
    wait_for_up_to(
        s,
        "taken over by a human, not counted",
        Duration::from_secs(60),
    );
    // The Episodes list marks it with a hand.
    tmux(&["send-keys", "-t", s, "F3"]);
    wait_for_up_to(s, "PASS ✋", Duration::from_secs(30));
    tmux(&["send-keys", "-t", s, "q"]);
    let ws = Workspace::open(dir.path()).unwrap();
    let eps = ws.list_episodes(None).unwrap();
    assert!(eps.len() == 1 && eps[0].passed, "{eps:?}");
    // The result records the human's command, its output, and the take-over.
    let result_path = dir.path().join(&eps[0].path).with_extension("json");
    let result: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&result_path).unwrap()).unwrap();
    let steps = result["steps"].as_array().unwrap();
    let human: Vec<&serde_json::Value> = steps.iter().filter(|s| s["kind"] == "human").collect();
    assert_eq!(human.len(), 1, "{result:#}");
    assert!(
        human[0]["command"]
            .as_str()
            .unwrap()
            .starts_with("tr a-z A-Z"),
        "{result:#}"
    );
    assert!(
        human[0]["output"].as_str().unwrap().contains("DONE_42"),
        "{result:#}"
    );
    assert_eq!(human[0]["exit_code"], 0);
    assert_eq!(result["taken_over"]["human_steps"], 1, "{result:#}");
    assert!(result["taken_over"]["at"].as_str().is_some(), "{result:#}");
    // The agent's own turns are still three (`sleep 3`, `true`, done).
    assert_eq!(result["turns"], 3, "{result:#}");
    // The recording holds what the human typed: an input event and its echo.
    let cast = std::fs::read_to_string(result_path.with_extension("cast")).unwrap();
    let events: Vec<serde_json::Value> = cast
        .lines()
        .skip(1)
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let typed = "tr a-z A-Z < ~/data/a.txt > ~/out.txt; echo DONE_$((6*7))";
    assert!(
        events
            .iter()
            .any(|e| e[1] == "i" && e[2] == format!("{typed}\r").as_str()),
        "{cast}"
    );
    assert!(
        events.iter().any(|e| e[1] == "o"
            && e[2]
                .as_str()
                .is_some_and(|o| o.contains(&format!("you$ {typed}")))),
        "{cast}"
    );
    // The index marks the episode.
    assert!(eps[0].taken_over, "{eps:?}");
}

/// At 80x24 a live pane is far shorter than the session's 48-row
/// terminal: after `seq 1 60` it shows 60 and, below it, the cursor.
#[test]
fn a_live_pane_follows_seq_1_60_at_80x24_in_tmux() {
    let Some((dir, home, script)) = sandboxed_workspace(
        "agent.txt",
        "seq 1 60\nsleep 4\ntr a-z A-Z < ~/data/a.txt > ~/out.txt\n",
    ) else {
        return;
    };
    let session = start_tui(
        format!("endless-e2e-seq-{}", std::process::id()),
        dir.path(),
        Some(home.path()),
        80,
        24,
    );
    let s = &session.0;
    wait_for(s, "upper");
    open_form(s, "E", "Evaluate a policy");
    for _ in 0.."oracle".len() {
        tmux(&["send-keys", "-t", s, "BSpace"]);
    }
    let policy = format!("script:{}", script.display());
    tmux(&["send-keys", "-t", s, "-l", &policy]);
    tmux(&["send-keys", "-t", s, "Enter"]);
    tmux(&["send-keys", "-t", s, "F2"]);
    wait_for_up_to(s, "┏ upper#0", Duration::from_secs(120));
    wait_for_up_to(s, "┃60 ", Duration::from_secs(60));
    // The pane may be caught between two frames (the output drawn, the
    // cursor not yet moved) on a loaded machine: give it a few frames.
    // The agent's next command, echoed, follows the output at once.
    let settled = |screen: &str| {
        let lines: Vec<&str> = screen.lines().collect();
        let at = lines.iter().position(|l| l.starts_with("┃60 "));
        at.is_some_and(|at| {
            at > 0
                && lines[at - 1].starts_with("┃59 ")
                && lines
                    .get(at + 1)
                    .is_some_and(|l| l.starts_with("┃agent$ sleep 4 "))
                && lines.get(at + 2).is_some_and(|l| l.starts_with("┃█"))
        })
    };
    let start = Instant::now();
    let mut screen = tmux(&["capture-pane", "-p", "-t", s]);
    while !settled(&screen) && start.elapsed() < Duration::from_secs(3) {
        sleep(Duration::from_millis(100));
        screen = tmux(&["capture-pane", "-p", "-t", s]);
    }
    assert!(
        settled(&screen),
        "59, 60, the next command, and the cursor below it: {screen}"
    );
    assert!(!screen.contains("__ENDLESS"), "{screen}");
    wait_for_up_to(s, "✓ PASSED upper#0", Duration::from_secs(120));
    tmux(&["send-keys", "-t", s, "q"]);
}

/// Start an evaluation of the `script:` policy at `script` from the Jobs
/// view and switch to the Live view.
fn evaluate_script(s: &str, script: &Path) {
    open_form(s, "E", "Evaluate a policy");
    for _ in 0.."oracle".len() {
        tmux(&["send-keys", "-t", s, "BSpace"]);
    }
    let policy = format!("script:{}", script.display());
    tmux(&["send-keys", "-t", s, "-l", &policy]);
    tmux(&["send-keys", "-t", s, "Enter"]);
    tmux(&["send-keys", "-t", s, "F2"]);
}

/// The line of `screen` holding `needle` and the one below it.
fn line_and_next<'a>(screen: &'a str, needle: &str) -> Option<(&'a str, &'a str)> {
    let lines: Vec<&str> = screen.lines().collect();
    let at = lines.iter().position(|l| l.contains(needle))?;
    Some((lines[at], lines.get(at + 1).copied().unwrap_or("")))
}

/// The agent's commands show in its live pane and in the replay, each on a
/// prompt line of its own (`agent$ `, styled apart from the output) before
/// its output, as a terminal shows them: the pane's title, where a long
/// `script:` policy leaves no room for the command, is not the only place.
/// Uses the real sandbox.
#[test]
fn the_agents_commands_show_in_the_pane_and_the_replay_in_tmux() {
    let Some((dir, home, script)) = sandboxed_workspace(
        "a-scripted-policy-whose-long-file-name-fills-the-title-of-its-pane.txt",
        "echo first-$((6*7))\nprintf no-newline\nsleep 4\ntr a-z A-Z < ~/data/a.txt > ~/out.txt\n",
    ) else {
        return;
    };
    let session = start_tui(
        format!("endless-e2e-commands-{}", std::process::id()),
        dir.path(),
        Some(home.path()),
        120,
        40,
    );
    let s = &session.0;
    wait_for(s, "upper");
    evaluate_script(s, &script);
    wait_for_up_to(s, "┏ upper#0", Duration::from_secs(120));
    // In the pane's body: each command on its prompt line, its output below.
    let screen = wait_for_up_to(s, "┃agent$ sleep 4", Duration::from_secs(60));
    let (echo, output) = line_and_next(&screen, "┃agent$ echo first-$((6*7))")
        .unwrap_or_else(|| panic!("the first command is not in the pane: {screen}"));
    assert!(output.starts_with("┃first-42 "), "{echo}\n{output}");
    // Output left without a newline ends its line before the next prompt.
    let (_, next) = line_and_next(&screen, "┃agent$ printf no-newline").unwrap();
    assert!(next.starts_with("┃no-newline "), "{screen}");
    assert!(!screen.contains("__ENDLESS"), "{screen}");
    // Styled apart from the output: bold cyan.
    let styled = tmux(&["capture-pane", "-p", "-e", "-t", s]);
    let line = styled
        .lines()
        .find(|l| l.contains("agent$ echo first-"))
        .unwrap();
    let before = &line[..line.find("agent$").unwrap()];
    let cyan = before.contains("38;5;6m") || before.contains("36m");
    assert!(cyan && before.contains("1m"), "not bold cyan: {line:?}");
    wait_for_up_to(s, "✓ PASSED upper#0", Duration::from_secs(120));
    // The replay of the recording shows them the same way.
    tmux(&["send-keys", "-t", s, "F3"]);
    wait_for(s, "failure mode");
    wait_for(s, "PASS ");
    tmux(&["send-keys", "-t", s, "Enter"]);
    wait_for(s, "Trajectory");
    tmux(&["send-keys", "-t", s, "]"]);
    tmux(&["send-keys", "-t", s, "]"]);
    let screen = wait_for(s, "│agent$ tr a-z A-Z < ~/data/a.txt > ~/out.txt ");
    let (_, output) = line_and_next(&screen, "│agent$ echo first-$((6*7))")
        .unwrap_or_else(|| panic!("the first command is not in the replay: {screen}"));
    assert!(output.starts_with("│first-42 "), "{screen}");
    assert!(screen.contains("│agent$ sleep 4 "), "{screen}");
    assert!(!screen.contains("__ENDLESS"), "{screen}");
    tmux(&["send-keys", "-t", s, "q"]);
}

/// A recording is clean asciicast v2 that a stock player shows as the
/// terminal looked: `asciinema play` (the Debian package), run in tmux on
/// the recording of a CLI episode, prints each command on its prompt line
/// and its output, in order, and nothing else: no marker of the exec
/// protocol. Skips without asciinema.
#[test]
fn asciinema_plays_a_recording_with_the_commands_and_no_marker_in_tmux() {
    let have_asciinema = Command::new("asciinema")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !have_asciinema {
        eprintln!("skipping: asciinema is not installed (scripts/setup.sh installs it)");
        return;
    }
    let Some((dir, home, script)) = sandboxed_workspace(
        "agent.txt",
        "echo first-$((6*7))\nprintf no-newline\nbash -c 'printf \"%s\\n\" one two'\ntr a-z A-Z < ~/data/a.txt > ~/out.txt; cat ~/out.txt\n",
    ) else {
        return;
    };
    let run = Command::new(endless_bin())
        .env("XDG_CACHE_HOME", home.path().join("cache"))
        .env("XDG_CONFIG_HOME", home.path().join("config"))
        .env("XDG_STATE_HOME", home.path().join("state"))
        .args(["--workspace", dir.path().to_str().unwrap(), "run", "upper"])
        .arg("--policy")
        .arg(format!("script:{}", script.display()))
        .output()
        .unwrap();
    assert!(run.status.success(), "{run:?}");
    let runs = std::fs::read_dir(dir.path().join("runs")).unwrap();
    let run_dir = runs.map(|e| e.unwrap().path()).next().unwrap();
    let cast = run_dir.join("episodes/upper/0.cast");
    let session = Session(format!("endless-e2e-asciinema-{}", std::process::id()));
    let play = format!(
        "asciinema play -i 0.2 {}; echo PLAYER-EXITED-$?; sleep 60",
        shell_quote(&cast)
    );
    tmux(&[
        "new-session",
        "-d",
        "-s",
        &session.0,
        "-x",
        "160",
        "-y",
        "48",
        &play,
    ]);
    let screen = wait_for_up_to(&session.0, "PLAYER-EXITED-", Duration::from_secs(30));
    assert!(screen.contains("PLAYER-EXITED-0"), "{screen}");
    assert!(
        !screen.contains("__ENDLESS"),
        "the player shows the exec protocol's markers:\n{screen}"
    );
    let shown: Vec<&str> = screen.lines().map(str::trim_end).collect();
    let at = |l: &str| shown.iter().position(|s| *s == l);
    let expected = [
        "agent$ echo first-$((6*7))",
        "first-42",
        "agent$ printf no-newline",
        "no-newline",
        "agent$ bash -c 'printf \"%s\\n\" one two'",
        "one",
        "two",
        "agent$ tr a-z A-Z < ~/data/a.txt > ~/out.txt; cat ~/out.txt",
        "HELLO",
    ];
    let positions: Vec<Option<usize>> = expected.iter().map(|l| at(l)).collect();
    assert!(
        positions.iter().all(Option::is_some) && positions.windows(2).all(|w| w[0] < w[1]),
        "expected these lines in order: {expected:#?}\nthe player showed:\n{screen}"
    );
    // Every line the player showed is one of these, or the end.
    for line in shown.iter().filter(|l| !l.is_empty()) {
        assert!(
            expected.contains(line) || line.starts_with("PLAYER-EXITED-"),
            "an unexpected line {line:?}: {screen}"
        );
    }

    // Asciicast v2: a header, then [time, code, data] events in time order.
    let text = std::fs::read_to_string(&cast).unwrap();
    let mut lines = text.lines();
    let header: serde_json::Value = serde_json::from_str(lines.next().unwrap()).unwrap();
    assert_eq!(header["version"], 2, "{text}");
    assert_eq!(
        (header["width"].as_u64(), header["height"].as_u64()),
        (Some(160), Some(48))
    );
    let mut last = 0.0;
    for line in lines {
        let e: serde_json::Value = serde_json::from_str(line).unwrap();
        let t = e[0].as_f64().unwrap();
        assert!(t >= last, "time goes back: {line}");
        last = t;
        assert!(["o", "i", "r"].contains(&e[1].as_str().unwrap()), "{line}");
        assert!(
            e[2].is_string() && e.as_array().unwrap().len() == 3,
            "{line}"
        );
    }
    assert!(!text.contains("__ENDLESS"), "{text}");
}

/// Offline generation runs `endless generate --offline` as a job: its output
/// becomes the job's log and its verdict the job's outcome.
#[test]
fn offline_generation_job_reports_the_cli_verdict_in_tmux() {
    if !have_tmux() {
        eprintln!("skipping: tmux is not installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    Workspace::open(dir.path()).unwrap();
    let session = start_tui(
        format!("endless-e2e-gen-{}", std::process::id()),
        dir.path(),
        None,
        160,
        48,
    );
    let s = &session.0;
    wait_for(s, "Tasks");
    // The fresh workspace was seeded from seed 1: the form proposes the
    // first seed whose tasks are all new (looked up in the background).
    let seed =
        endless::workbench::generate::next_free_seed(&Workspace::open(dir.path()).unwrap(), 10)
            .unwrap();
    assert!(seed > 1, "the seeded tasks take seed 1");
    open_form(s, "P", "Generate tasks offline");
    let start = Instant::now();
    while !tmux(&["capture-pane", "-p", "-t", s])
        .lines()
        .any(|l| l.contains("seed") && l.contains(&seed.to_string()))
    {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "seed {seed} never proposed"
        );
        sleep(Duration::from_millis(100));
    }
    tmux(&["send-keys", "-t", s, "Enter"]);
    let start = Instant::now();
    let screen = loop {
        let screen = tmux(&["capture-pane", "-p", "-t", s]);
        if screen.contains("succeeded") || screen.contains("failed") {
            break screen;
        }
        assert!(start.elapsed() < Duration::from_secs(120), "{screen}");
        sleep(Duration::from_millis(200));
    };
    assert!(screen.contains("succeeded"), "{screen}");
    assert!(screen.contains("generate-offline"), "{screen}");
    tmux(&["send-keys", "-t", s, "q"]);
}

/// Cancelling an evaluation stops its running episode at the next command;
/// the cut-short episode is not indexed as a result, and the screen says
/// so: Live shows it cancelled (never failed), the job's log says it was
/// cut and not counted (not that it finishes), and the job stops at 0 of
/// 1 episodes done, not at 100%.
#[test]
fn cancel_an_evaluation_in_tmux() {
    let Some((dir, home, script)) = sandboxed_workspace("slow.txt", "sleep 1\n".repeat(60)) else {
        return;
    };
    let session = start_tui(
        format!("endless-e2e-cancel-{}", std::process::id()),
        dir.path(),
        Some(home.path()),
        160,
        48,
    );
    let s = &session.0;
    wait_for(s, "upper");
    open_form(s, "E", "Evaluate a policy");
    for _ in 0.."oracle".len() {
        tmux(&["send-keys", "-t", s, "BSpace"]);
    }
    let policy = format!("script:{}", script.display());
    tmux(&["send-keys", "-t", s, "-l", &policy]);
    tmux(&["send-keys", "-t", s, "Enter"]);
    wait_for_up_to(s, "turn 2", Duration::from_secs(120));
    let started = Instant::now();
    tmux(&["send-keys", "-t", s, "C"]);
    wait_for_up_to(s, "cancelled", Duration::from_secs(30));
    assert!(started.elapsed() < Duration::from_secs(30));
    tmux(&["send-keys", "-t", s, "F2"]);
    let screen = wait_for(s, "⊘ CANCELLED");
    let strip = screen.lines().find(|l| l.contains("⊘ CANCELLED")).unwrap();
    assert!(strip.contains("upper#0"), "{screen}");
    assert!(
        !screen.contains("FAILED"),
        "a cancel is not a failure: {screen}"
    );
    tmux(&["send-keys", "-t", s, "F4"]);
    let screen = wait_for(s, "cancelled at 0/1");
    assert!(!screen.contains("running ones finish"), "{screen}");
    tmux(&["send-keys", "-t", s, "q"]);
    let ws = Workspace::open(dir.path()).unwrap();
    assert!(ws.list_episodes(None).unwrap().is_empty());
    let jobs = ws.list_jobs().unwrap();
    assert_eq!(jobs[0].status, "cancelled", "{jobs:?}");
}

/// Train a tiny policy from the Jobs view's form (warm start, one PPO step,
/// pass@1 before and after on a held-out task), then find the finished run
/// in the Training view. Uses the real sandbox.
#[test]
fn training_job_from_the_jobs_view_in_tmux() {
    if !have_tmux() || !Path::new(endless::verify::PYTHON).exists() {
        eprintln!("skipping: tmux or {} is missing", endless::verify::PYTHON);
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let home = sandbox_home();
    let task_ids = || -> Vec<String> {
        std::fs::read_dir(dir.path().join("tasks"))
            .map(|d| {
                d.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default()
    };
    let generate = |split: &str, count: &str| {
        let out = Command::new(endless_bin())
            .args(["--workspace", dir.path().to_str().unwrap()])
            .args(["generate", "--offline", "--seed", "1", "--split", split])
            .args(["--count", count])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
    };
    generate("train", "2");
    let train = task_ids();
    generate("dev", "1");
    let dev = task_ids().into_iter().find(|t| !train.contains(t)).unwrap();

    let session = start_tui(
        format!("endless-e2e-train-{}", std::process::id()),
        dir.path(),
        Some(home.path()),
        160,
        48,
    );
    let s = &session.0;
    wait_for(s, "Tasks");
    open_form(s, "M", "Train a policy");
    // Fields: tasks, dev, init, sft, sft steps, steps, minutes, samples,
    // max turns, tasks per step. Keep it tiny.
    let field = |erase: usize, value: &str| {
        tmux(&["send-keys", "-t", s, "Tab"]);
        for _ in 0..erase {
            tmux(&["send-keys", "-t", s, "BSpace"]);
        }
        if !value.is_empty() {
            tmux(&["send-keys", "-t", s, "-l", value]);
        }
    };
    field(0, &dev);
    field(0, "");
    field(0, "");
    field("300".len(), "2");
    field("10".len(), "1");
    field(0, "");
    field("16".len(), "2");
    field("16".len(), "2");
    wait_for(s, &format!("dev: {dev}"));
    tmux(&["send-keys", "-t", s, "Enter"]);
    wait_for(s, "train-");
    let start = Instant::now();
    let screen = loop {
        let screen = tmux(&["capture-pane", "-p", "-t", s]);
        if screen.contains("succeeded") || screen.contains("failed") {
            break screen;
        }
        assert!(start.elapsed() < Duration::from_secs(300), "{screen}");
        sleep(Duration::from_millis(250));
    };
    assert!(screen.contains("succeeded"), "{screen}");

    // The Training view lists the finished run with its held-out pass@1.
    tmux(&["send-keys", "-t", s, "F5"]);
    // It reads the run's files once a second: wait for the view (the Jobs
    // view also says "finished"), then for the run's final status.
    wait_for(s, "Training runs (1)");
    let screen = wait_for(s, "finished");
    assert!(
        screen.contains("Training runs (1)") && screen.contains("1/1"),
        "{screen}"
    );
    assert!(screen.contains("before"), "{screen}");
    tmux(&["send-keys", "-t", s, "q"]);

    let runs: Vec<_> = std::fs::read_dir(dir.path().join("checkpoints"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(runs.len(), 1, "{runs:?}");
    let metrics = std::fs::read_to_string(runs[0].join("metrics.jsonl")).unwrap();
    assert_eq!(metrics.lines().count(), 1, "{metrics}");
    let evals = std::fs::read_to_string(runs[0].join("eval.jsonl")).unwrap();
    assert!(
        evals.contains("\"before\"") && evals.contains("\"after\""),
        "{evals}"
    );
}

/// An evaluation started with the CLI in another tmux window appears in the
/// Live view (found through the workspace's run files): its pane follows the
/// newest output, never shows the end markers, and collapses to a summary
/// strip when the episode finishes. Uses the real sandbox.
#[test]
fn cli_evaluation_in_another_window_appears_in_the_live_view_in_tmux() {
    let Some((dir, home, script)) = sandboxed_workspace(
        "agent.txt",
        "seq 101 160\nsleep 3\ntr a-z A-Z < ~/data/a.txt > ~/out.txt\nsleep 3\n",
    ) else {
        return;
    };
    // 40 rows: the session's 48-row terminal is taller than the pane.
    let session = start_tui(
        format!("endless-e2e-cli-{}", std::process::id()),
        dir.path(),
        Some(home.path()),
        120,
        40,
    );
    let s = &session.0;
    wait_for(s, "upper");
    tmux(&["send-keys", "-t", s, "F2"]);
    wait_for(s, "No live sessions");
    let cli = format!(
        "env XDG_CACHE_HOME={} XDG_CONFIG_HOME={} XDG_STATE_HOME={} {} --workspace {} eval --policy script:{} --tasks upper > {} 2>&1",
        shell_quote(&home.path().join("cache")),
        shell_quote(&home.path().join("config")),
        shell_quote(&home.path().join("state")),
        shell_quote(&endless_bin()),
        shell_quote(dir.path()),
        script.display(),
        shell_quote(&dir.path().join("cli.log")),
    );
    tmux(&["new-window", "-d", "-t", s, &cli]);
    let screen = wait_for_up_to(s, "┏ upper#0", Duration::from_secs(120));
    assert!(screen.contains("eval-"), "the run names the pane: {screen}");
    // The pane follows the output: the last line of `seq 101 160` shows.
    let screen = wait_for_up_to(s, "┃160", Duration::from_secs(60));
    assert!(!screen.contains("__ENDLESS"), "{screen}");
    // Finished: a summary strip with the result.
    let screen = wait_for_up_to(s, "✓ PASSED upper#0", Duration::from_secs(120));
    assert!(!screen.contains("__ENDLESS"), "{screen}");
    tmux(&["send-keys", "-t", s, "q"]);
}

/// Issue 47 item 5: a ten-episode oracle evaluation started with the CLI
/// beside an open TUI: its episodes are short (most start and finish
/// between two looks of the Live view's watcher), yet all ten stay in Live
/// as finished strips. Uses the real sandbox.
#[test]
fn every_short_episode_of_a_cli_evaluation_stays_in_the_live_view_in_tmux() {
    let Some((dir, home, _)) = sandboxed_workspace("unused.txt", "true\n") else {
        return;
    };
    let session = start_tui(
        format!("endless-e2e-short-{}", std::process::id()),
        dir.path(),
        Some(home.path()),
        120,
        40,
    );
    let s = &session.0;
    wait_for(s, "upper");
    tmux(&["send-keys", "-t", s, "F2"]);
    wait_for(s, "No live sessions");
    let out = Command::new(endless_bin())
        .env("XDG_CACHE_HOME", home.path().join("cache"))
        .env("XDG_CONFIG_HOME", home.path().join("config"))
        .env("XDG_STATE_HOME", home.path().join("state"))
        .arg("--workspace")
        .arg(dir.path())
        .args([
            "eval",
            "--policy",
            "oracle",
            "--tasks",
            "upper",
            "--samples",
            "10",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let t0 = Instant::now();
    let strips = |screen: &str| screen.matches("✓ PASSED upper#").count();
    let screen = loop {
        let screen = tmux(&["capture-pane", "-p", "-t", s]);
        if strips(&screen) == 10 || t0.elapsed() > Duration::from_secs(10) {
            break screen;
        }
        sleep(Duration::from_millis(200));
    };
    assert_eq!(strips(&screen), 10, "all ten stay visible: {screen}");
    for n in 0..10 {
        assert!(
            screen.contains(&format!("upper#{n} ")),
            "upper#{n}: {screen}"
        );
    }
    tmux(&["send-keys", "-t", s, "q"]);
}

/// An evaluation in another process killed with SIGKILL mid-episode (no
/// result is ever written): within seconds its pane stops running and
/// collapses to a strip labelled interrupted, which `x` clears; the
/// episode is recorded as interrupted all the same (issue 47 item 3):
/// Episodes lists it, `/interrupted` finds it, and so does a restarted TUI.
/// Uses the real sandbox.
#[test]
fn a_killed_cli_evaluation_is_interrupted_in_the_live_view_in_tmux() {
    use std::os::unix::process::CommandExt;
    let Some((dir, home, script)) = sandboxed_workspace("slow.txt", "sleep 1\n".repeat(120)) else {
        return;
    };
    let session = start_tui(
        format!("endless-e2e-killed-{}", std::process::id()),
        dir.path(),
        Some(home.path()),
        120,
        40,
    );
    let s = &session.0;
    wait_for(s, "upper");
    tmux(&["send-keys", "-t", s, "F2"]);
    wait_for(s, "No live sessions");
    let log = std::fs::File::create(dir.path().join("cli.log")).unwrap();
    let mut eval = Command::new(endless_bin())
        .env("XDG_CACHE_HOME", home.path().join("cache"))
        .env("XDG_CONFIG_HOME", home.path().join("config"))
        .env("XDG_STATE_HOME", home.path().join("state"))
        .arg("--workspace")
        .arg(dir.path())
        .args(["eval", "--policy"])
        .arg(format!("script:{}", script.display()))
        .args(["--tasks", "upper"])
        .stdin(std::process::Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        // Its own group, for the cleanup below.
        .process_group(0)
        .spawn()
        .unwrap();
    let group = eval.id();
    wait_for_up_to(s, "┏ upper#0", Duration::from_secs(120));
    wait_for_up_to(s, "turn 2", Duration::from_secs(60));
    // SIGKILL: nothing of it gets to write a result.
    eval.kill().unwrap();
    eval.wait().unwrap();
    let killed = Instant::now();
    let screen = wait_for(s, "⊘ INTERRUPTED upper#0");
    assert!(
        killed.elapsed() < Duration::from_secs(10),
        "within seconds: {screen}"
    );
    assert!(!screen.contains("┏ upper#0"), "not running: {screen}");
    assert!(!screen.contains("FAILED"), "{screen}");
    tmux(&["send-keys", "-t", s, "x"]);
    wait_for(s, "No live sessions");
    // It stays cleared.
    sleep(Duration::from_secs(2));
    let screen = tmux(&["capture-pane", "-p", "-t", s]);
    assert!(screen.contains("No live sessions"), "{screen}");
    // `x` cleared the pane, not the record: Episodes lists it.
    let find_it = |s: &str| {
        tmux(&["send-keys", "-t", s, "F3"]);
        wait_for(s, "1/1 shown");
        tmux(&["send-keys", "-t", s, "/"]);
        tmux(&["send-keys", "-t", s, "-l", "interrupted"]);
        tmux(&["send-keys", "-t", s, "Enter"]);
        let screen = wait_for(s, "1/1 shown");
        assert!(screen.contains("interrupted"), "{screen}");
        assert!(screen.contains("upper"), "{screen}");
        tmux(&["send-keys", "-t", s, "Escape"]);
    };
    find_it(s);
    tmux(&["send-keys", "-t", s, "q"]);
    // A restarted TUI still has it.
    let again = start_tui(
        format!("endless-e2e-killed2-{}", std::process::id()),
        dir.path(),
        Some(home.path()),
        120,
        40,
    );
    wait_for(&again.0, "upper");
    find_it(&again.0);
    tmux(&["send-keys", "-t", &again.0, "q"]);
    // What the killed evaluation left running (its sandbox), if anything.
    let _ = Command::new("kill")
        .args(["-KILL", "--", &format!("-{group}")])
        .stderr(std::process::Stdio::null())
        .status();
}

/// `q` while an evaluation runs asks first; `esc` stays, `q` twice quits.
#[test]
fn quitting_with_a_running_job_asks_first_in_tmux() {
    let Some((dir, home, script)) = sandboxed_workspace("slow.txt", "sleep 1\n".repeat(60)) else {
        return;
    };
    let session = start_tui(
        format!("endless-e2e-quit-{}", std::process::id()),
        dir.path(),
        Some(home.path()),
        120,
        40,
    );
    let s = &session.0;
    wait_for(s, "upper");
    open_form(s, "E", "Evaluate a policy");
    for _ in 0.."oracle".len() {
        tmux(&["send-keys", "-t", s, "BSpace"]);
    }
    let policy = format!("script:{}", script.display());
    tmux(&["send-keys", "-t", s, "-l", &policy]);
    tmux(&["send-keys", "-t", s, "Enter"]);
    wait_for_up_to(s, "turn 1", Duration::from_secs(120));
    tmux(&["send-keys", "-t", s, "q"]);
    wait_for(s, "1 job running: q quits and stops it");
    tmux(&["send-keys", "-t", s, "Escape"]);
    sleep(Duration::from_millis(500));
    assert!(tmux(&["list-sessions"]).contains(s.as_str()), "esc stays");
    tmux(&["send-keys", "-t", s, "q"]);
    wait_for(s, "1 job running");
    tmux(&["send-keys", "-t", s, "q"]);
    let start = Instant::now();
    while tmux(&["list-sessions"]).contains(s.as_str()) {
        assert!(start.elapsed() < Duration::from_secs(30), "q twice quits");
        sleep(Duration::from_millis(100));
    }
}

/// Curate a task and rate an episode in the TUI, delete `endless.db`, open
/// the TUI again: it says it rebuilt the index, and the status, rating,
/// note, the episode and its review are all back (from the files).
#[test]
fn deleting_the_database_loses_no_curation_in_tmux() {
    if !have_tmux() {
        eprintln!("skipping: tmux is not installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    {
        let ws = Workspace::open(dir.path()).unwrap();
        add(&ws, "alpha-task", "file-ops");
        // A finished episode of alpha-task, as an evaluation leaves it.
        ws.upsert_run("eval-e2e", "eval", "oracle", &serde_json::json!({}))
            .unwrap();
        let task = ws.load_task("alpha-task").unwrap();
        let id = endless::agent::EpisodeId::new(&task, 0, "oracle");
        let result = endless::agent::EpisodeResult::failed_to_start(
            id,
            "sandbox failed to start: none here".into(),
            endless::agent::Timings::default(),
        );
        let ep_dir = dir.path().join("runs/eval-e2e/episodes/alpha-task");
        std::fs::create_dir_all(&ep_dir).unwrap();
        std::fs::write(
            ep_dir.join("0.json"),
            serde_json::to_vec_pretty(&result).unwrap(),
        )
        .unwrap();
        endless::agent::index_episode(&ws, "eval-e2e", &result).unwrap();
    }
    let name = format!("endless-e2e-rebuild-{}", std::process::id());
    let session = start_tui(name.clone(), dir.path(), None, 120, 40);
    let s = &session.0;
    wait_for(s, "alpha-task");
    // Accept, rate 4, note.
    tmux(&["send-keys", "-t", s, "a"]);
    wait_for(s, "accepted");
    tmux(&["send-keys", "-t", s, "4"]);
    wait_for(s, "★★★★·");
    tmux(&["send-keys", "-t", s, "n"]);
    wait_for(s, "note:");
    tmux(&["send-keys", "-t", s, "-l", "keep this one"]);
    tmux(&["send-keys", "-t", s, "Enter"]);
    // Rate the episode 2 in the inspector, label it.
    tmux(&["send-keys", "-t", s, "F3"]);
    wait_for(s, "failure mode");
    tmux(&["send-keys", "-t", s, "Enter"]);
    wait_for(s, "Trajectory");
    tmux(&["send-keys", "-t", s, "2"]);
    wait_for(s, "rating ★★···");
    // The label picker: `amb` narrows it to "task ambiguous".
    tmux(&["send-keys", "-t", s, "b"]);
    wait_for(s, "failure label");
    tmux(&["send-keys", "-t", s, "-l", "amb"]);
    wait_for(s, "1/5");
    tmux(&["send-keys", "-t", s, "Enter"]);
    wait_for(s, "label task ambiguous");
    tmux(&["send-keys", "-t", s, "q"]);
    let start = Instant::now();
    while tmux(&["list-sessions"]).contains(s.as_str()) && start.elapsed() < Duration::from_secs(5)
    {
        sleep(Duration::from_millis(100));
    }
    drop(session);

    for f in ["endless.db", "endless.db-wal", "endless.db-shm"] {
        let _ = std::fs::remove_file(dir.path().join(f));
    }
    let session = start_tui(format!("{name}-again"), dir.path(), None, 120, 40);
    let s = &session.0;
    let screen = wait_for(s, "rebuilt the index");
    assert!(screen.contains("endless.db was missing"), "{screen}");
    // The TUI reopens on the view it was left on (Episodes): back to Tasks.
    tmux(&["send-keys", "-t", s, "F1"]);
    let screen = wait_for(s, "★★★★·");
    assert!(screen.contains("accepted"), "{screen}");
    tmux(&["send-keys", "-t", s, "F3"]);
    let screen = wait_for(s, "failure mode");
    assert!(screen.contains("eval-e2e"), "the episode is back: {screen}");
    tmux(&["send-keys", "-t", s, "Enter"]);
    let screen = wait_for(s, "rating ★★···");
    assert!(screen.contains("label task ambiguous"), "{screen}");
    tmux(&["send-keys", "-t", s, "q"]);
    let ws = Workspace::open(dir.path()).unwrap();
    let row = ws.task_row("alpha-task").unwrap();
    assert_eq!(
        (row.status, row.rating, row.notes.as_str()),
        (TaskStatus::Accepted, Some(4), "keep this one")
    );
}

/// A failed scripted episode, forked from the inspector at step 1 and
/// continued by the oracle: the fork runs live, passes, and its result links
/// to its parent. Uses the real sandbox.
#[test]
fn forking_a_failed_episode_from_the_inspector_in_tmux() {
    let Some((dir, home, script)) = sandboxed_workspace("agent.txt", "echo step-zero\nfalse\n")
    else {
        return;
    };
    let session = start_tui(
        format!("endless-e2e-fork-{}", std::process::id()),
        dir.path(),
        Some(home.path()),
        120,
        40,
    );
    let s = &session.0;
    wait_for(s, "upper");
    open_form(s, "E", "Evaluate a policy");
    for _ in 0.."oracle".len() {
        tmux(&["send-keys", "-t", s, "BSpace"]);
    }
    let policy = format!("script:{}", script.display());
    tmux(&["send-keys", "-t", s, "-l", &policy]);
    tmux(&["send-keys", "-t", s, "Enter"]);
    wait_for_up_to(s, "0/1 episodes passed", Duration::from_secs(120));
    // Inspect the failed episode and fork it at step 1 with the oracle.
    tmux(&["send-keys", "-t", s, "F3"]);
    wait_for(s, "failure mode");
    wait_for(s, "FAIL ");
    tmux(&["send-keys", "-t", s, "Enter"]);
    wait_for(s, "Trajectory");
    tmux(&["send-keys", "-t", s, "f"]);
    wait_for(s, "Fork eval-");
    tmux(&["send-keys", "-t", s, "BSpace"]);
    tmux(&["send-keys", "-t", s, "-l", "1"]);
    tmux(&["send-keys", "-t", s, "Enter"]);
    // It runs live, then the job says it passed.
    tmux(&["send-keys", "-t", s, "F2"]);
    wait_for_up_to(s, "upper#0", Duration::from_secs(120));
    tmux(&["send-keys", "-t", s, "F4"]);
    let screen = wait_for_up_to(s, "passed with oracle", Duration::from_secs(120));
    assert!(screen.contains("at step 1"), "{screen}");
    // The Episodes view knows it is a fork at once: `/fork` finds it.
    tmux(&["send-keys", "-t", s, "F3"]);
    wait_for(s, "Trajectory");
    tmux(&["send-keys", "-t", s, "Escape"]);
    wait_for(s, "2/2 shown");
    tmux(&["send-keys", "-t", s, "/"]);
    tmux(&["send-keys", "-t", s, "-l", "fork"]);
    tmux(&["send-keys", "-t", s, "Enter"]);
    let screen = wait_for(s, "1/2 shown");
    assert!(screen.contains("⑂"), "{screen}");
    tmux(&["send-keys", "-t", s, "Escape"]);
    tmux(&["send-keys", "-t", s, "q"]);
    let ws = Workspace::open(dir.path()).unwrap();
    let fork = ws
        .list_episodes(None)
        .unwrap()
        .into_iter()
        .find(|e| e.run_id.starts_with("run-"))
        .expect("the fork is indexed");
    assert!(fork.passed, "{fork:?}");
    assert!(
        fork.forked_from
            .as_deref()
            .is_some_and(|f| f.starts_with("eval-") && f.ends_with("/upper/0@1")),
        "the index links the fork to its parent: {fork:?}"
    );
    let result: serde_json::Value = serde_json::from_slice(
        &std::fs::read(dir.path().join(&fork.path).with_extension("json")).unwrap(),
    )
    .unwrap();
    let link = &result["forked_from"];
    assert!(
        link["run"].as_str().unwrap().starts_with("eval-"),
        "{result:#}"
    );
    assert_eq!(
        (&link["at_step"], &link["replayed"]),
        (&serde_json::json!(1), &serde_json::json!(1))
    );
    assert_eq!(link["policy"], policy.as_str());
    assert!(
        result["steps"][0]["command"]
            .as_str()
            .unwrap()
            .contains("step-zero"),
        "{result:#}"
    );
}

/// Every failure label is shown first, searchable and filterable, by the
/// name the screen shows or the one the store keeps: of three failed
/// episodes (a loop that ran out of turns, a plain turn exhaustion, a
/// premature `done`), `/turn_exhaustion` and `/turn exhaustion` find both
/// that ran out of turns whatever their primary label, so does the `f`
/// filter, the inspector's first line is the verdict and every label, and a
/// premature `done` gets its banner. Uses the real sandbox.
#[test]
fn failure_labels_are_first_searchable_and_filterable_in_tmux() {
    let Some((dir, home, looping)) = sandboxed_workspace("loop.txt", "ls\nls\nls\nls\n") else {
        return;
    };
    let counting = dir.path().join("count.txt");
    std::fs::write(&counting, "echo 1\necho 2\necho 3\necho 4\n").unwrap();
    let early = dir.path().join("early.txt");
    std::fs::write(&early, "echo hi\n").unwrap();
    for script in [&looping, &counting, &early] {
        let out = Command::new(endless_bin())
            .env("XDG_CACHE_HOME", home.path().join("cache"))
            .env("XDG_CONFIG_HOME", home.path().join("config"))
            .env("XDG_STATE_HOME", home.path().join("state"))
            .arg("--workspace")
            .arg(dir.path())
            .args(["eval", "--tasks", "upper", "--max-turns", "4", "--policy"])
            .arg(format!("script:{}", script.display()))
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{}: {err}", script.display());
    }
    let mut labels: Vec<Vec<String>> = Workspace::open(dir.path())
        .unwrap()
        .list_episodes(None)
        .unwrap()
        .into_iter()
        .map(|e| e.failure_labels)
        .collect();
    labels.sort();
    assert_eq!(
        labels,
        [
            vec!["loop", "turn_exhaustion"],
            vec!["premature_done"],
            vec!["turn_exhaustion"]
        ],
        "the index keeps every label"
    );
    let session = start_tui(
        format!("endless-e2e-labels-{}", std::process::id()),
        dir.path(),
        Some(home.path()),
        120,
        40,
    );
    let s = &session.0;
    wait_for(s, "upper");
    tmux(&["send-keys", "-t", s, "F3"]);
    // Wait for the rows themselves: the header can be painted first.
    let screen = wait_for(s, "loop +1");
    assert!(
        screen.contains("3/3 shown, 0 passed"),
        "the second label is counted among all episodes: {screen}"
    );
    for query in ["turn_exhaustion", "turn exhaustion"] {
        tmux(&["send-keys", "-t", s, "/"]);
        tmux(&["send-keys", "-t", s, "-l", query]);
        tmux(&["send-keys", "-t", s, "Enter"]);
        let screen = wait_for(s, "2/3 shown");
        assert!(!screen.contains("premature_done"), "{query}: {screen}");
        tmux(&["send-keys", "-t", s, "Escape"]);
        wait_for(s, "3/3 shown");
    }
    // The filter picker lists every label and takes the shown spelling.
    tmux(&["send-keys", "-t", s, "f"]);
    wait_for(s, "failure mode");
    tmux(&["send-keys", "-t", s, "-l", "turn exhaustion"]);
    tmux(&["send-keys", "-t", s, "Enter"]);
    let screen = wait_for(s, "2/3 shown");
    assert!(screen.contains("loop +1"), "{screen}");
    // The inspector of the loop: the verdict and both labels first.
    tmux(&["send-keys", "-t", s, "Escape"]);
    wait_for(s, "3/3 shown");
    tmux(&["send-keys", "-t", s, "/"]);
    tmux(&["send-keys", "-t", s, "-l", "loop"]);
    tmux(&["send-keys", "-t", s, "Enter"]);
    wait_for(s, "1/3 shown");
    tmux(&["send-keys", "-t", s, "Enter"]);
    let screen = wait_for(s, "Trajectory");
    let first = screen
        .lines()
        .find(|l| l.contains("FAIL"))
        .unwrap_or_else(|| panic!("{screen}"));
    assert!(
        first.contains("FAIL · loop · turn_exhaustion"),
        "verdict and labels first: {first:?}"
    );
    // A premature done has a banner.
    tmux(&["send-keys", "-t", s, "Escape"]);
    wait_for(s, "1/3 shown");
    tmux(&["send-keys", "-t", s, "Escape"]);
    wait_for(s, "3/3 shown");
    tmux(&["send-keys", "-t", s, "/"]);
    tmux(&["send-keys", "-t", s, "-l", "premature done"]);
    tmux(&["send-keys", "-t", s, "Enter"]);
    wait_for(s, "1/3 shown");
    tmux(&["send-keys", "-t", s, "Enter"]);
    wait_for(
        s,
        "⚑ the agent said done too early: 1 of 1 final tests fail",
    );
    tmux(&["send-keys", "-t", s, "q"]);
}

/// Issue 33 item 7: a test-code line wider than a 120x40 terminal is cut
/// at first; scrolling sideways (`l`) brings its end into view with the
/// position in the border, and so does wrapping (`w`).
#[test]
fn a_long_code_line_scrolls_sideways_and_wraps_in_tmux() {
    if !have_tmux() {
        eprintln!("skipping: tmux is not installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let home = sandbox_home();
    let ws = Workspace::open(dir.path()).unwrap();
    let mut meta = TaskMeta::default();
    meta.task.id = "long-lines".into();
    meta.task.name = "long lines".into();
    meta.task.category = "text".into();
    let names: Vec<String> = (0..30).map(|i| format!("'file-{i:02}.log'")).collect();
    let mut tests = FileTree::default();
    tests.insert_text("test_initial_state.py", "def test_ok():\n    assert True\n");
    tests.insert_text(
        "test_final_state.py",
        format!(
            "def test_long():\n    assert names() == [{}]  # END-OF-LONG-LINE\n",
            names.join(", ")
        ),
    );
    let task = Task {
        meta,
        instruction: "Make the logs.".into(),
        truth: "Thirty logs.".into(),
        environment: FileTree::default(),
        tests,
        solution: FileTree::default(),
    };
    ws.add_task(&task, TaskStatus::Candidate).unwrap();
    let session = start_tui(
        format!("endless-e2e-long-line-{}", std::process::id()),
        dir.path(),
        Some(home.path()),
        120,
        40,
    );
    let s = &session.0;
    wait_for(s, "long-lines");
    // The Final tests tab, focused.
    for _ in 0..4 {
        tmux(&["send-keys", "-t", s, "]"]);
    }
    wait_for(s, "[Final tests]");
    tmux(&["send-keys", "-t", s, "Enter"]);
    let screen = wait_for(s, "def test_long");
    assert!(!screen.contains("END-OF-LONG-LINE"), "{screen}");
    for _ in 0..60 {
        tmux(&["send-keys", "-t", s, "l"]);
    }
    let screen = wait_for(s, "END-OF-LONG-LINE");
    assert!(screen.contains("line 1/"), "{screen}");
    assert!(!screen.contains("col 1 "), "{screen}");
    // Back to the left, then wrap: the whole line shows.
    for _ in 0..60 {
        tmux(&["send-keys", "-t", s, "h"]);
    }
    wait_for(s, "col 1 ");
    tmux(&["send-keys", "-t", s, "w"]);
    let screen = wait_for(s, "· wrap");
    assert!(screen.contains("END-OF-LONG-LINE"), "{screen}");
    assert!(screen.contains("'file-00.log'"), "{screen}");
    tmux(&["send-keys", "-t", s, "q"]);
}

/// Issue 33 item 7: a step whose output is longer than the inspector shows
/// ends in `… N more lines`; Enter shows them all, with the position in
/// the border. Uses the real sandbox.
#[test]
fn a_steps_hidden_output_expands_in_the_inspector_in_tmux() {
    let Some((dir, home, script)) = sandboxed_workspace("agent.txt", "seq -f 'out-%02g' 1 40\n")
    else {
        return;
    };
    let session = start_tui(
        format!("endless-e2e-expand-{}", std::process::id()),
        dir.path(),
        Some(home.path()),
        120,
        40,
    );
    let s = &session.0;
    wait_for(s, "upper");
    open_form(s, "E", "Evaluate a policy");
    for _ in 0.."oracle".len() {
        tmux(&["send-keys", "-t", s, "BSpace"]);
    }
    let policy = format!("script:{}", script.display());
    tmux(&["send-keys", "-t", s, "-l", &policy]);
    tmux(&["send-keys", "-t", s, "Enter"]);
    wait_for_up_to(s, "0/1 episodes passed", Duration::from_secs(120));
    tmux(&["send-keys", "-t", s, "F3"]);
    wait_for(s, "FAIL ");
    tmux(&["send-keys", "-t", s, "Enter"]);
    let screen = wait_for(s, "more lines");
    assert!(screen.contains("out-12"), "{screen}");
    assert!(!screen.contains("out-13"), "{screen}");
    tmux(&["send-keys", "-t", s, "Enter"]);
    let screen = wait_for(s, "· expanded");
    assert!(screen.contains("out-13"), "{screen}");
    assert!(!screen.contains("more lines"), "{screen}");
    for _ in 0..3 {
        tmux(&["send-keys", "-t", s, "PageDown"]);
    }
    // Paging stops at the last page: the last output line and the end of
    // the trajectory are on screen, not the trajectory's last line alone.
    let screen = wait_for(s, "out-40");
    assert!(screen.contains("Scripted commands finished"), "{screen}");
    tmux(&["send-keys", "-t", s, "q"]);
}

/// Issue 33 item 10: a training run started from the Training view's form
/// shows there, selected (▶), under the job's id; Enter opens that job in
/// the Jobs view.
#[test]
fn the_training_view_follows_the_run_it_starts_in_tmux() {
    if !have_tmux() || !Path::new(endless::verify::PYTHON).exists() {
        eprintln!("skipping: tmux or {} is missing", endless::verify::PYTHON);
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let home = sandbox_home();
    let out = Command::new(endless_bin())
        .args(["--workspace", dir.path().to_str().unwrap()])
        .args(["generate", "--offline", "--seed", "1", "--split", "train"])
        .args(["--count", "1"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let session = start_tui(
        format!("endless-e2e-train-follow-{}", std::process::id()),
        dir.path(),
        Some(home.path()),
        160,
        48,
    );
    let s = &session.0;
    wait_for(s, "Tasks");
    tmux(&["send-keys", "-t", s, "F5"]);
    wait_for(s, "[Training]");
    tmux(&["send-keys", "-t", s, "M"]);
    wait_for(s, "Train a policy");
    // Fields: tasks, dev, init, sft, sft steps, steps, ... Keep it tiny.
    let field = |erase: usize, value: &str| {
        tmux(&["send-keys", "-t", s, "Tab"]);
        for _ in 0..erase {
            tmux(&["send-keys", "-t", s, "BSpace"]);
        }
        if !value.is_empty() {
            tmux(&["send-keys", "-t", s, "-l", value]);
        }
    };
    field(0, "");
    field(0, "");
    field(0, "");
    field("300".len(), "2");
    field("10".len(), "1");
    field(0, "");
    field("16".len(), "2");
    field("16".len(), "2");
    tmux(&["send-keys", "-t", s, "Enter"]);
    let screen = wait_for_up_to(s, "▶ train-", Duration::from_secs(120));
    let id: String = screen
        .split("▶ ")
        .nth(1)
        .unwrap()
        .chars()
        .take_while(|c| !c.is_whitespace())
        .collect();
    assert!(screen.contains("Training runs (1)"), "{screen}");
    // The run directory is named after the job: Enter shows the job.
    tmux(&["send-keys", "-t", s, "Enter"]);
    let screen = wait_for(s, "[Jobs]");
    assert!(screen.contains(&id), "{id}: {screen}");
    assert!(
        dir.path().join("checkpoints").join(&id).is_dir(),
        "no run directory {id}"
    );
}

/// Issue 34: the audit job, its findings in Tasks, and a CLI audit seen live.
#[path = "tui_e2e/audit.rs"]
mod audit;
/// Issue 33, items 8 and 9, and two TUIs on one workspace.
#[path = "tui_e2e/jobs_and_links.rs"]
mod jobs_and_links;
#[path = "tui_e2e/remote.rs"]
mod remote;
/// Issue 53: a repair's review (a diff per file) and its discard.
#[path = "tui_e2e/repair.rs"]
mod repair;
#[path = "tui_e2e/shards.rs"]
mod shards;
#[path = "tui_e2e/view_state.rs"]
mod view_state;
