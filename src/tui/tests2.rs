//! Tests of the second slice: launch forms and the jobs list, keyed live
//! panes with scrollback, and the episode inspector (trajectory, tests,
//! replay, rating, export, side by side) over fixture files in a temp dir.

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

use super::app::{Action, App, LiveEvent, Request, View};
use super::keymap::{Command, Keymap};
use super::launcher::JobSpec;
use super::tests::{app_on, cmd, fixture, key, pump, render};
use super::theme::Theme;
use super::worker::serve;
use crate::agent::FailureMode;
use crate::agent::{EndReason, EpisodeResult, Step, StepKind, TestOutcome};
use crate::jobs::{JobEvent, JobId, JobManager, JobOutcome};
use crate::store::Workspace;

macro_rules! snap {
    ($name:expr, $app:expr, $w:expr, $h:expr) => {
        insta::assert_snapshot!($name, render($app, $w, $h));
    };
}

fn typed(app: &mut App, s: &str) {
    for c in s.chars() {
        if let Some(a) = app.handle_key(KeyEvent::new(KeyCode::Char(c), KeyModifiers::NONE)) {
            app.update(a);
        }
    }
}

fn press(app: &mut App, code: KeyCode) {
    if let Some(a) = app.handle_key(KeyEvent::new(code, KeyModifiers::NONE)) {
        app.update(a);
    }
}

#[test]
fn launch_forms_build_jobs() {
    let dir = tempfile::tempdir().unwrap();
    let ws = fixture(dir.path());
    let mut app = app_on(&ws);
    cmd(&mut app, &ws, Command::ViewJobs);
    snap!("jobs_empty_80x24", &mut app, 80, 24);

    // The evaluation form, with defaults; keys go to the form, not the keymap.
    cmd(&mut app, &ws, Command::JobEval);
    assert!(app.form.is_some());
    snap!("jobs_eval_form_80x24", &mut app, 80, 24);
    press(&mut app, KeyCode::Tab);
    typed(&mut app, "archive-*");
    press(&mut app, KeyCode::Tab);
    press(&mut app, KeyCode::Backspace);
    typed(&mut app, "q");
    press(&mut app, KeyCode::Enter);
    assert!(app.form.is_some(), "a bad number keeps the form open");
    assert!(app.status.as_ref().unwrap().text.contains("samples"));
    press(&mut app, KeyCode::Backspace);
    typed(&mut app, "2");
    press(&mut app, KeyCode::Enter);
    assert!(app.form.is_none());
    assert!(app.outbox.contains(&Request::Launch(JobSpec::Eval {
        policy: "oracle".into(),
        tasks: "archive-*".into(),
        samples: 2,
        max_turns: None,
        concurrency: 2,
    })));
    pump(&mut app, &ws);

    // Validation defaults to the selected task.
    cmd(&mut app, &ws, Command::JobValidate);
    press(&mut app, KeyCode::Enter);
    assert!(app.outbox.contains(&Request::Launch(JobSpec::Validate {
        tasks: vec!["archive-logs".into()]
    })));
    pump(&mut app, &ws);

    // Offline generation gets its place; LLM generation needs a model.
    cmd(&mut app, &ws, Command::JobOffline);
    press(&mut app, KeyCode::Enter);
    assert!(app
        .outbox
        .contains(&Request::Launch(JobSpec::Offline { count: 10, seed: 1 })));
    pump(&mut app, &ws);
    cmd(&mut app, &ws, Command::JobGenerate);
    press(&mut app, KeyCode::Enter);
    assert!(app.form.is_some());
    assert!(app.status.as_ref().unwrap().text.contains("model"));
    press(&mut app, KeyCode::Esc);
    assert!(app.form.is_none());
}

#[test]
fn jobs_list_progress_logs_cancel_and_journal() {
    let dir = tempfile::tempdir().unwrap();
    let ws = fixture(dir.path());
    let mut app = app_on(&ws);
    app.view = View::Jobs;
    let id = |s: &str| JobId(s.into());
    for ev in [
        JobEvent::Started {
            id: id("validate-1"),
            kind: "validate".into(),
        },
        JobEvent::Progress {
            id: id("validate-1"),
            done: 3,
            total: 3,
            stage: "done".into(),
        },
        JobEvent::Finished {
            id: id("validate-1"),
            outcome: JobOutcome::Succeeded("3/3 valid".into()),
        },
        JobEvent::Started {
            id: id("eval-2"),
            kind: "eval".into(),
        },
        JobEvent::Progress {
            id: id("eval-2"),
            done: 1,
            total: 4,
            stage: "episodes".into(),
        },
        JobEvent::Log {
            id: id("eval-2"),
            line: "archive-logs#0 turn 1: tar -czf logs.tar.gz".into(),
        },
        JobEvent::Log {
            id: id("eval-2"),
            line: "archive-logs#0: passed after 2 turns".into(),
        },
    ] {
        app.update(Action::Job(ev));
    }
    app.outbox.clear();
    assert_eq!(app.jobs.items[0].id, "eval-2");
    snap!("jobs_running_120x40", &mut app, 120, 40);
    snap!("jobs_running_80x24", &mut app, 80, 24);

    app.update(Action::Command(Command::JobCancel));
    assert_eq!(app.outbox, vec![Request::CancelJob("eval-2".into())]);
    app.outbox.clear();
    app.update(Action::Command(Command::Down));
    app.update(Action::Command(Command::JobCancel));
    assert!(app.outbox.is_empty());
    assert!(app.status.as_ref().unwrap().text.contains("not running"));

    // Finishing reloads episodes, tasks and the journal.
    app.update(Action::Job(JobEvent::Finished {
        id: id("eval-2"),
        outcome: JobOutcome::Cancelled,
    }));
    assert!(app.outbox.contains(&Request::LoadEpisodes));
    assert!(app.outbox.contains(&Request::LoadJobs));
    app.outbox.clear();

    // Past jobs come from the journal.
    let jobs = JobManager::new(Some(dir.path())).unwrap();
    let past = jobs
        .spawn("generate", serde_json::json!({}), |ctx| {
            ctx.progress(1, 2, "half");
            anyhow::bail!("no model")
        })
        .unwrap();
    jobs.wait(&past);
    for a in serve(&ws, Request::LoadJobs) {
        app.update(a);
    }
    let item = app.jobs.items.iter().find(|i| i.id == past.0).unwrap();
    assert_eq!(item.status, "failed");
    assert!(item.message.contains("no model"));
}

fn keyed_live_app() -> App {
    let mut app = App::new(Theme::default(), Keymap::default(), "fixture-ws");
    app.outbox.clear();
    app.view = View::Live;
    for i in 0..9 {
        let key = format!("eval-x/task-{i}/0");
        app.update(Action::Live(LiveEvent::Open {
            key: key.clone(),
            title: format!("task-{i}#0"),
            policy: "oracle".into(),
            rows: 6,
            cols: 30,
            input: None,
        }));
        app.update(Action::Live(LiveEvent::Feed {
            key: key.clone(),
            bytes: format!("$ echo {i}\r\n{i}\r\n$ ").into_bytes(),
        }));
        app.update(Action::Live(LiveEvent::Step {
            key: key.clone(),
            turn: 1,
            command: format!("echo {i}"),
        }));
        if i % 3 == 0 {
            app.update(Action::Live(LiveEvent::Finished {
                key,
                passed: i != 3,
            }));
        }
    }
    app
}

#[test]
fn live_panes_follow_episodes_and_scroll_back() {
    let mut app = keyed_live_app();
    assert_eq!(app.live.panes.len(), 9);
    assert_eq!(app.live.panes[0].outcome, Some(true));
    assert_eq!(app.live.panes[3].outcome, Some(false));
    assert_eq!(app.live.panes[4].last_command, "echo 4");
    snap!("live_episodes_120x40", &mut app, 120, 40);

    // Scrollback: many lines, page up shows older ones.
    let key = "eval-x/task-8/0".to_string();
    let lines: String = (0..40).map(|n| format!("line {n}\r\n")).collect();
    app.update(Action::Live(LiveEvent::Feed {
        key,
        bytes: lines.into_bytes(),
    }));
    app.update(Action::Command(Command::Bottom));
    app.update(Action::Command(Command::Select));
    assert!(!app.live.panes[8].contents().contains("line 30"));
    app.update(Action::Command(Command::PageUp));
    assert!(app.live.panes[8].parser.screen().scrollback() > 0);
    snap!("live_zoom_scrolled_80x24", &mut app, 80, 24);
    app.update(Action::Command(Command::PageDown));
    app.update(Action::Command(Command::PageDown));
    assert_eq!(app.live.panes[8].parser.screen().scrollback(), 0);

    // More than MAX_PANES: finished panes make room.
    for i in 9..20 {
        app.update(Action::Live(LiveEvent::Open {
            key: format!("eval-x/more-{i}/0"),
            title: format!("more-{i}"),
            policy: "oracle".into(),
            rows: 6,
            cols: 30,
            input: None,
        }));
    }
    assert!(app.live.panes.len() <= super::views::live::MAX_PANES + 1);
    assert!(app.live.panes.iter().any(|p| p.title == "more-19"));
}

fn step(turn: u32, command: &str, exit: i32, output: &str) -> Step {
    Step {
        command: Some(command.into()),
        think: Some(format!("try {command}")),
        exit_code: Some(exit),
        output: output.into(),
        ..Step::new(turn, StepKind::Command)
    }
}

fn result(sample: u32, passed: bool) -> EpisodeResult {
    let mut steps = vec![
        step(1, "ls ~/logs", 0, "a.log\nb.log\nc.log"),
        step(
            2,
            "tar -czf ~/backup/logs.tar.gz ~/logs",
            2,
            "tar: /home/user/backup: Cannot open: No such file or directory",
        ),
    ];
    if !passed {
        for t in 3..7 {
            steps.push(step(t, "cat ~/notes.txt", 1, "cat: No such file"));
        }
    }
    EpisodeResult {
        task: "archive-logs".into(),
        category: "archives".into(),
        complexity: Some(2),
        sample,
        policy: "script:fixture".into(),
        passed,
        reward: if passed { 1.0 } else { 0.0 },
        turns: steps.len() as u32,
        end_reason: if passed {
            EndReason::Done
        } else {
            EndReason::MaxTurns
        },
        failure_mode: (!passed).then_some(FailureMode::Loop),
        failure_labels: Vec::new(),
        earliest_failing_step: (!passed).then_some(1),
        error: None,
        tests: vec![TestOutcome {
            name: "test_final_state::test_archive_has_logs".into(),
            passed,
            message: (!passed).then(|| {
                "AssertionError: /home/user/backup/logs.tar.gz is missing\nassert False".into()
            }),
        }],
        steps,
        tokens: Default::default(),
        timings: Default::default(),
    }
}

/// Result JSON and a small recording next to the fixture's episode rows.
fn write_episode_files(ws: &Workspace) {
    let dir = ws.root().join("runs/eval-1/episodes/archive-logs");
    std::fs::create_dir_all(&dir).unwrap();
    for (sample, passed) in [(0, true), (1, false)] {
        std::fs::write(
            dir.join(format!("{sample}.json")),
            serde_json::to_vec(&result(sample, passed)).unwrap(),
        )
        .unwrap();
    }
    let cast = concat!(
        "{\"version\":2,\"width\":40,\"height\":6}\n",
        "[0.1,\"o\",\"$ ls ~/logs\\r\\n\"]\n",
        "[0.3,\"o\",\"a.log  b.log  c.log\\r\\n$ \"]\n",
        "[1.5,\"o\",\"cat ~/notes.txt\\r\\ncat: No such file\\r\\n$ \"]\n",
    );
    std::fs::write(dir.join("1.cast"), cast).unwrap();
}

#[test]
fn inspector_shows_trajectory_tests_replay_and_rates() {
    let dir = tempfile::tempdir().unwrap();
    let ws = fixture(dir.path());
    write_episode_files(&ws);
    let mut app = app_on(&ws);
    cmd(&mut app, &ws, Command::ViewEpisodes);
    cmd(&mut app, &ws, Command::Down);
    assert_eq!(app.episodes.selected_row().unwrap().sample, 1);
    cmd(&mut app, &ws, Command::Select);
    let insp = app.inspector.as_ref().expect("inspector open");
    assert!(insp.episode.result.is_ok(), "{:?}", insp.episode.result);
    let screen = render(&mut app, 120, 40);
    assert!(screen.contains("earliest failing step"), "{screen}");
    assert!(screen.contains("↻ loop"), "{screen}");
    snap!("inspector_trajectory_120x40", &mut app, 120, 40);
    snap!("inspector_trajectory_80x24", &mut app, 80, 24);

    cmd(&mut app, &ws, Command::NextTab);
    let screen = render(&mut app, 120, 40);
    assert!(screen.contains("logs.tar.gz is missing"), "{screen}");
    snap!("inspector_tests_120x40", &mut app, 120, 40);

    // Replay: starts at the end; step back, play, speed.
    cmd(&mut app, &ws, Command::NextTab);
    assert!(render(&mut app, 80, 24).contains("cat: No such file"));
    snap!("inspector_replay_80x24", &mut app, 80, 24);
    cmd(&mut app, &ws, Command::Left);
    assert!(!render(&mut app, 80, 24).contains("cat: No such file"));
    cmd(&mut app, &ws, Command::Faster);
    cmd(&mut app, &ws, Command::PlayPause);
    app.update(Action::Tick(1.0));
    let r = app.inspector.as_ref().unwrap().replay.as_ref().unwrap();
    assert_eq!((r.position, r.speed, r.playing), (3, 2.0, false));

    // Rating, label, note go to the store.
    cmd(&mut app, &ws, Command::Rate2);
    cmd(&mut app, &ws, Command::Label);
    cmd(&mut app, &ws, Command::Label);
    key(&mut app, &ws, KeyCode::Char('n'));
    typed(&mut app, "loops on a missing file");
    key(&mut app, &ws, KeyCode::Enter);
    let row = ws
        .list_episodes(None)
        .unwrap()
        .into_iter()
        .find(|r| r.task_id == "archive-logs" && r.sample == 1)
        .unwrap();
    assert_eq!(row.rating, Some(2));
    assert_eq!(row.label.as_deref(), Some("test_wrong"));
    assert_eq!(row.notes, "loops on a missing file");

    // Export writes ratings.jsonl.
    cmd(&mut app, &ws, Command::ExportRatings);
    let text = std::fs::read_to_string(dir.path().join("ratings.jsonl")).unwrap();
    assert_eq!(text.lines().count(), 1, "{text}");
    let v: serde_json::Value = serde_json::from_str(text.trim()).unwrap();
    assert_eq!(v["label"], "test_wrong");
    assert_eq!(v["rating"], 2);

    // Side by side with the passing sample.
    cmd(&mut app, &ws, Command::PrevTab);
    cmd(&mut app, &ws, Command::PrevTab);
    cmd(&mut app, &ws, Command::Compare);
    assert!(app.inspector.as_ref().unwrap().other.is_some());
    snap!("inspector_side_by_side_120x40", &mut app, 120, 40);
    cmd(&mut app, &ws, Command::Back);
    assert!(app.inspector.is_none());
}

#[test]
fn inspector_without_files_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let ws = fixture(dir.path());
    let mut app = app_on(&ws);
    cmd(&mut app, &ws, Command::ViewEpisodes);
    cmd(&mut app, &ws, Command::Select);
    let screen = render(&mut app, 80, 24);
    assert!(
        screen.contains("cannot read the episode result"),
        "{screen}"
    );
    cmd(&mut app, &ws, Command::NextTab);
    cmd(&mut app, &ws, Command::NextTab);
    assert!(render(&mut app, 80, 24).contains("No replay"));
}

#[test]
fn launcher_runs_a_validation_job_and_forwards_its_events() {
    let dir = tempfile::tempdir().unwrap();
    let _ws = fixture(dir.path());
    let (tx, rx) = std::sync::mpsc::channel();
    let launcher = super::launcher::Launcher::new(dir.path(), tx).unwrap();
    let id = launcher
        .launch(JobSpec::Validate {
            tasks: vec!["fix-perms".into()],
        })
        .unwrap();
    let mut app = App::new(Theme::default(), Keymap::default(), "fixture-ws");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    let outcome = loop {
        let msg = rx
            .recv_timeout(deadline.saturating_duration_since(std::time::Instant::now()))
            .expect("the job finishes");
        if let super::event::Msg::Action(a) = msg {
            if let Action::Job(JobEvent::Finished { outcome, .. }) = &a {
                let o = outcome.clone();
                app.update(a);
                break o;
            }
            app.update(a);
        }
    };
    // Valid where the sandbox runs, invalid (with the reason) where it does not.
    match &outcome {
        JobOutcome::Succeeded(m) => assert!(m.starts_with("fix-perms: "), "{m}"),
        other => panic!("{other:?}"),
    }
    let log = app.jobs.logs.get(&id.0).expect("log lines arrived");
    assert!(log.iter().any(|l| l.starts_with("fix-perms: ")), "{log:?}");
    assert_eq!(app.jobs.items[0].status, "succeeded");
    // Cancelling a finished job is refused.
    assert!(!launcher.cancel("no-such-job"));
}

#[test]
fn forms_fit_tiny_terminals() {
    let mut app = App::new(Theme::default(), Keymap::default(), "fixture-ws");
    app.view = View::Jobs;
    for c in [Command::JobEval, Command::JobTrain] {
        app.update(Action::Command(c));
        for (w, h) in [(1, 1), (12, 4), (30, 8)] {
            render(&mut app, w, h);
        }
        press(&mut app, KeyCode::Esc);
    }
}

/// A shell stand-in that logs what it is asked to do.
#[derive(Default)]
struct LogTerm(Vec<String>);

impl crate::agent::Terminal for LogTerm {
    fn exec(
        &mut self,
        command: &str,
        _: std::time::Duration,
    ) -> Result<crate::sandbox::ExecResult, crate::agent::TerminalError> {
        self.0.push(format!("exec {command}"));
        Ok(crate::sandbox::ExecResult {
            output: String::new(),
            exit_code: Some(0),
            timed_out: false,
            truncated: false,
            duration: std::time::Duration::ZERO,
        })
    }
}

impl super::takeover::HumanInput for LogTerm {
    fn write_input(&mut self, bytes: &[u8]) -> Result<(), crate::agent::TerminalError> {
        self.0
            .push(format!("human {}", String::from_utf8_lossy(bytes)));
        Ok(())
    }
}

#[test]
fn take_over_routes_keys_to_the_session_until_given_back() {
    use crate::agent::Terminal as _;
    let (mut term, handle) =
        super::takeover::TakeoverTerm::new(LogTerm::default(), Default::default());
    let mut app = App::new(Theme::default(), Keymap::default(), "fixture-ws");
    app.view = View::Live;
    app.update(Action::Live(LiveEvent::Open {
        key: "r/upper/0".into(),
        title: "upper#0".into(),
        policy: "script:slow".into(),
        rows: 6,
        cols: 40,
        input: Some(handle.clone()),
    }));
    app.update(Action::Command(Command::TakeOver));
    assert!(app.status.as_ref().unwrap().error, "zoom first");
    app.update(Action::Command(Command::Select));
    app.update(Action::Command(Command::TakeOver));
    assert!(handle.is_taken());
    snap!("live_takeover_80x24", &mut app, 80, 24);
    // Every key goes to the session, q included.
    for c in "ls".chars() {
        press(&mut app, KeyCode::Char(c));
    }
    press(&mut app, KeyCode::Enter);
    press(&mut app, KeyCode::Char('q'));
    assert!(!app.should_quit);
    if let Some(a) = app.handle_key(KeyEvent::new(KeyCode::Char(']'), KeyModifiers::CONTROL)) {
        app.update(a);
    }
    assert!(!handle.is_taken());
    assert!(app.live.taken().is_none());
    term.exec("true", std::time::Duration::from_secs(1))
        .unwrap();
    assert_eq!(
        term.inner.0,
        [
            "human l",
            "human s",
            "human \r",
            "human q",
            "human \u{15}",
            "exec true"
        ]
    );
}
