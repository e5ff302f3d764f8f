//! Live view: panes fed by keyed episode events, zoom and scrollback,
//! taking a session over.

use super::*;
use crate::tui::views::live::Stopped;

fn live_app() -> App {
    let mut app = App::new(Theme::default(), Keymap::default(), "fixture-ws");
    app.outbox.clear();
    app.view = View::Live;
    app
}

/// Open `n` panes straight on the view (not keyed to an episode, so no
/// elapsed clock: the snapshots stay stable) and feed each some output.
pub(super) fn open_panes(app: &mut App, n: usize) {
    for i in 0..n {
        let p = app
            .live
            .open(format!("task-{i}#0"), "oracle".into(), 10, 40);
        let pane = &mut app.live.panes[p];
        // Split an escape sequence across chunks on purpose.
        pane.feed(b"\x1b[1;32muser@sbx\x1b[0m:~$ ls\r\na.log  b.log\r\n\x1b[");
        pane.feed(format!("31mpane {i}\x1b[0m\r\n$ ").as_bytes());
        pane.turn = 2;
        pane.last_command = "ls".into();
    }
}

#[test]
fn live_panes_feed_and_snapshots() {
    let mut app = live_app();
    snap!("live_empty_80x24", &mut app, 80, 24);
    snap!("live_empty_120x40", &mut app, 120, 40);
    open_panes(&mut app, 4);
    // Newest first: pane 1 is the third from the top of four.
    assert_eq!(app.live.panes[2].title, "task-1#0");
    let text = app.live.panes[2].contents();
    assert!(
        text.contains("a.log  b.log") && text.contains("pane 1"),
        "{text}"
    );
    assert!(
        !text.contains("31m"),
        "escape split across chunks leaked: {text}"
    );
    snap!("live_grid_80x24", &mut app, 80, 24);
    snap!("live_grid_120x40", &mut app, 120, 40);
    app.update(Action::Command(Command::Right));
    app.update(Action::Command(Command::Down));
    assert_eq!(app.live.selected, 3);
    app.update(Action::Command(Command::Select));
    assert!(app.live.zoomed);
    snap!("live_zoom_80x24", &mut app, 80, 24);
    app.update(Action::Command(Command::Back));
    assert!(!app.live.zoomed);
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
                failure: (i == 3).then(|| "wrong_output".to_string()),
            }));
        }
    }
    app
}

#[test]
fn live_panes_follow_episodes_and_scroll_back() {
    let mut app = keyed_live_app();
    assert_eq!(app.live.panes.len(), 9);
    let by = |app: &App, t: &str| app.live.panes.iter().position(|p| p.title == t).unwrap();
    assert_eq!(app.live.panes[by(&app, "task-0#0")].outcome, Some(true));
    assert_eq!(app.live.panes[by(&app, "task-3#0")].outcome, Some(false));
    assert_eq!(app.live.panes[by(&app, "task-4#0")].last_command, "echo 4");
    // Newest running first, then the finished ones, newest first.
    assert_eq!(app.live.running(), 6);
    assert_eq!(app.live.panes[0].title, "task-8#0");
    assert_eq!(app.live.panes[6].title, "task-6#0");
    assert_eq!(app.live.panes[8].title, "task-0#0");
    snap!("live_episodes_120x40", &mut app, 120, 40);

    // Scrollback: many lines, page up shows older ones.
    let key = "eval-x/task-8/0".to_string();
    let lines: String = (0..40).map(|n| format!("line {n}\r\n")).collect();
    app.update(Action::Live(LiveEvent::Feed {
        key,
        bytes: lines.into_bytes(),
    }));
    app.update(Action::Command(Command::Top));
    app.update(Action::Command(Command::Select));
    assert!(!app.live.panes[0].contents().contains("line 30"));
    app.update(Action::Command(Command::PageUp));
    assert!(app.live.panes[0].parser.screen().scrollback() > 0);
    snap!("live_zoom_scrolled_80x24", &mut app, 80, 24);
    app.update(Action::Command(Command::PageDown));
    app.update(Action::Command(Command::PageDown));
    assert_eq!(app.live.panes[0].parser.screen().scrollback(), 0);
    app.update(Action::Command(Command::Back));

    // x clears the finished panes.
    app.update(Action::Command(Command::ClearFilters));
    assert_eq!(app.live.panes.len(), 6);
    assert!(app.live.panes.iter().all(|p| p.outcome.is_none()));
    app = keyed_live_app();

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
    assert!(app.live.panes.len() <= crate::tui::views::live::MAX_PANES + 1);
    assert!(app.live.panes.iter().any(|p| p.title == "more-19"));
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
        self.0.push(command.to_string());
        Ok(crate::sandbox::ExecResult {
            output: format!("{command}: ok"),
            exit_code: Some(0),
            timed_out: false,
            truncated: false,
            duration: std::time::Duration::ZERO,
        })
    }
}

/// A zoomed pane of a session the user has taken over (its first output
/// already on screen).
fn taken_app(handle: crate::tui::takeover::TakeoverHandle) -> App {
    let mut app = App::new(Theme::default(), Keymap::default(), "fixture-ws");
    app.view = View::Live;
    app.update(Action::Live(LiveEvent::Open {
        key: "r/upper/0".into(),
        title: "upper#0".into(),
        policy: "script:slow".into(),
        rows: 48,
        cols: 160,
        input: Some(handle),
    }));
    app.update(Action::Live(LiveEvent::Feed {
        key: "r/upper/0".into(),
        bytes: b"hello from the agent\r\n".to_vec(),
    }));
    app.update(Action::Command(Command::TakeOver));
    assert!(app.status.as_ref().unwrap().error, "zoom first");
    app.update(Action::Command(Command::Select));
    app.update(Action::Command(Command::TakeOver));
    app
}

fn ctrl(app: &mut App, c: char) {
    if let Some(a) = app.handle_key(KeyEvent::new(KeyCode::Char(c), KeyModifiers::CONTROL)) {
        app.update(a);
    }
}

#[test]
fn take_over_echoes_what_is_typed_and_runs_each_line() {
    use crate::agent::Terminal as _;
    let (mut term, handle) =
        crate::tui::takeover::TakeoverTerm::new(LogTerm::default(), Default::default());
    let mut app = taken_app(handle.clone());
    assert!(handle.is_taken());
    snap!("live_takeover_80x24", &mut app, 80, 24);
    // Every key edits the line, q included; it is shown as typed.
    typed(&mut app, "ls -l ~/dataq");
    press(&mut app, KeyCode::Backspace);
    assert!(!app.should_quit);
    snap!("live_takeover_typing_80x24", &mut app, 80, 24);
    press(&mut app, KeyCode::Enter);
    // The line ran is echoed in the pane, marked as the user's, and waits
    // for the session (the agent's command would run after it).
    let screen = app.live.panes[0].contents();
    assert!(screen.contains("you$ ls -l ~/data"), "{screen}");
    assert_eq!(handle.queued(), 1);
    assert!(app.status.as_ref().unwrap().text.contains("recorded"));
    typed(&mut app, "cat out.txt");
    snap!("live_takeover_echo_120x40", &mut app, 120, 40);
    snap!("live_takeover_echo_80x24", &mut app, 80, 24);
    press(&mut app, KeyCode::Enter);
    ctrl(&mut app, ']');
    assert!(!handle.is_taken());
    assert!(app.live.taken().is_none());
    term.exec("true", std::time::Duration::from_secs(1))
        .unwrap();
    assert_eq!(term.inner.0, ["ls -l ~/data", "cat out.txt", "true"]);
    let human = term.take_human().unwrap();
    assert_eq!(human.commands.len(), 2);
    assert_eq!(handle.queued(), 0);
    // The finished pane's summary says it was taken over.
    app.update(Action::Live(LiveEvent::Finished {
        key: "r/upper/0".into(),
        passed: true,
        failure: None,
    }));
    app.update(Action::Command(Command::Back));
    let screen = render(&mut app, 80, 24);
    assert!(
        screen.contains("✓ PASSED upper#0 ✋ taken over"),
        "{screen}"
    );
}

/// What a session on the real 48x160 terminal sends for `seq 1 60`: the
/// output, then the exec protocol's end marker.
fn seq_60_bytes() -> Vec<u8> {
    let mut out = Vec::new();
    for n in 1..=60 {
        out.extend_from_slice(format!("{n}\r\n").as_bytes());
    }
    out.extend_from_slice(b"\r\n__ENDLESS_deadbeef_1_0__\r\n");
    out
}

fn follow_app() -> App {
    let mut app = live_app();
    let key = "eval-y/count/0".to_string();
    app.update(Action::Live(LiveEvent::Open {
        key: key.clone(),
        title: "count#0".into(),
        policy: "script:seq".into(),
        rows: 48,
        cols: 160,
        input: None,
    }));
    // Split the marker across chunks on purpose.
    let bytes = seq_60_bytes();
    let (a, b) = bytes.split_at(bytes.len() - 12);
    for chunk in [a, b] {
        app.update(Action::Live(LiveEvent::Feed {
            key: key.clone(),
            bytes: chunk.to_vec(),
        }));
    }
    app.update(Action::Live(LiveEvent::Step {
        key,
        turn: 1,
        command: "seq 1 60".into(),
    }));
    app
}

#[test]
fn a_pane_follows_the_newest_output_and_the_cursor() {
    let mut app = follow_app();
    for (w, h) in [(80, 24), (120, 40)] {
        let screen = render(&mut app, w, h);
        assert!(screen.contains("60"), "{screen}");
        assert!(
            screen.contains("$ seq 1 60"),
            "the command header: {screen}"
        );
        assert!(!screen.contains("ENDLESS"), "a marker leaked: {screen}");
        // The cursor sits on the line after 60.
        let lines: Vec<&str> = screen.lines().collect();
        let at = lines.iter().position(|l| l.contains("┃60 ")).unwrap();
        assert!(lines[at + 1].contains('█'), "{screen}");
    }
    snap!("live_follow_80x24", &mut app, 80, 24);
    snap!("live_follow_120x40", &mut app, 120, 40);
    app.update(Action::Command(Command::Select));
    snap!("live_follow_zoomed_80x24", &mut app, 80, 24);
}

#[test]
fn finished_panes_collapse_to_summary_strips() {
    let mut app = follow_app();
    app.update(Action::Live(LiveEvent::Open {
        key: "eval-y/other/0".into(),
        title: "other#0".into(),
        policy: "script:seq".into(),
        rows: 48,
        cols: 160,
        input: None,
    }));
    app.update(Action::Live(LiveEvent::Finished {
        key: "eval-y/count/0".into(),
        passed: false,
        failure: Some("wrong_output".into()),
    }));
    for p in &mut app.live.panes {
        p.finished_after = p.outcome.map(|_| std::time::Duration::from_secs(75));
    }
    let screen = render(&mut app, 80, 24);
    assert!(screen.contains("✗ FAILED count#0 wrong_output"), "{screen}");
    snap!("live_finished_strip_80x24", &mut app, 80, 24);
    snap!("live_finished_strip_120x40", &mut app, 120, 40);
    app.update(Action::Command(Command::ClearFilters));
    assert_eq!(app.live.panes.len(), 1);
    assert_eq!(app.live.panes[0].title, "other#0");
}

/// An episode of another process that died without a result (killed, or
/// quit mid-episode): its pane stops its clock, collapses to a strip
/// labelled interrupted, and `x` clears it like the finished ones.
#[test]
fn an_episode_whose_process_is_gone_is_interrupted_and_cleared() {
    let mut app = live_app();
    let watched = |ev: LiveEvent| Action::Live(LiveEvent::Watched(Box::new(ev)));
    for (key, title) in [("eval-y/count/0", "count#0"), ("eval-y/other/0", "other#0")] {
        app.update(watched(LiveEvent::Open {
            key: key.into(),
            title: title.into(),
            policy: "eval-y".into(),
            rows: 48,
            cols: 160,
            input: None,
        }));
    }
    app.update(watched(LiveEvent::Feed {
        key: "eval-y/count/0".into(),
        bytes: seq_60_bytes(),
    }));
    app.update(watched(LiveEvent::Step {
        key: "eval-y/count/0".into(),
        turn: 1,
        command: "seq 1 60".into(),
    }));
    app.update(watched(LiveEvent::Interrupted {
        key: "eval-y/count/0".into(),
    }));
    assert_eq!(app.live.running(), 1);
    let p = app
        .live
        .panes
        .iter()
        .find(|p| p.title == "count#0")
        .unwrap();
    assert!(
        p.stopped == Some(Stopped::Interrupted) && p.outcome == Some(false),
        "{p:?}"
    );
    // Its clock stopped.
    let frozen = p.elapsed();
    std::thread::sleep(std::time::Duration::from_millis(20));
    assert_eq!(app.live.panes[1].elapsed(), frozen);
    // A later result or a second interruption changes nothing.
    app.update(watched(LiveEvent::Finished {
        key: "eval-y/count/0".into(),
        passed: true,
        failure: None,
    }));
    assert_eq!(app.live.panes[1].outcome, Some(false));
    for p in &mut app.live.panes {
        p.finished_after = p.outcome.map(|_| std::time::Duration::from_secs(75));
    }
    let screen = render(&mut app, 80, 24);
    assert!(screen.contains("⊘ INTERRUPTED count#0"), "{screen}");
    assert!(!screen.contains("FAILED"), "{screen}");
    snap!("live_interrupted_strip_80x24", &mut app, 80, 24);
    snap!("live_interrupted_strip_120x40", &mut app, 120, 40);
    // Enter opens the result recorded for it (issue 47 item 3: the watcher
    // records an interrupted episode as a result of its own).
    app.update(Action::Command(Command::Bottom));
    app.outbox.clear();
    app.update(Action::Command(Command::Select));
    let open = Request::OpenEpisode {
        run: "eval-y".into(),
        task: "count".into(),
        sample: 0,
    };
    assert!(app.outbox.contains(&open), "{:?}", app.outbox);
    app.update(Action::Command(Command::ClearFilters));
    assert_eq!(app.live.panes.len(), 1);
    assert_eq!(app.live.panes[0].title, "other#0");
}

/// Issue 47 item 5: ten short episodes of another process (an evaluation
/// started in another terminal), each started and finished between two
/// looks of the watcher, all appear as finished strips with their results;
/// one recorded as interrupted shows so; one that finished before the TUI
/// watched does not appear.
#[test]
fn short_episodes_of_another_process_all_appear_finished() {
    use crate::tui::runtime::sessions::SessionScan;
    let dir = tempfile::tempdir().unwrap();
    let runs = dir.path().join("runs");
    let ep = runs.join("eval-fast").join("episodes").join("upper");
    std::fs::create_dir_all(&ep).unwrap();
    let write = |n: u32, result: serde_json::Value| {
        let start = serde_json::json!({"type": "start", "task": "upper", "sample": n});
        let step =
            serde_json::json!({"type": "step", "step": {"turn": 1, "command": "tr a-z A-Z"}});
        std::fs::write(ep.join(format!("{n}.jsonl")), format!("{start}\n{step}\n")).unwrap();
        std::fs::write(ep.join(format!("{n}.json")), result.to_string()).unwrap();
    };
    let passed = serde_json::json!({"passed": true, "end_reason": "done"});
    write(99, passed.clone());
    let old = std::time::SystemTime::now() - std::time::Duration::from_secs(120);
    std::fs::File::options()
        .write(true)
        .open(ep.join("99.json"))
        .unwrap()
        .set_modified(old)
        .unwrap();
    let mut app = live_app();
    let mut scan = SessionScan::default();
    let mut look = |app: &mut App| {
        // Two seconds of the TUI's polls.
        for _ in 0..8 {
            for ev in scan.poll(&runs) {
                app.update(Action::Live(LiveEvent::Watched(Box::new(ev))));
            }
        }
    };
    look(&mut app);
    assert!(app.live.panes.is_empty(), "finished before the TUI watched");
    std::thread::sleep(std::time::Duration::from_millis(50));
    for n in 0..10 {
        let result = match n {
            3 => serde_json::json!({"passed": false, "end_reason": "done",
                "failure_mode": "premature_done"}),
            7 => serde_json::json!({"passed": false, "end_reason": "interrupted",
                "failure_mode": "error"}),
            _ => passed.clone(),
        };
        write(n, result);
    }
    look(&mut app);
    let mut titles: Vec<&str> = app.live.panes.iter().map(|p| p.title.as_str()).collect();
    titles.sort();
    let want: Vec<String> = (0..10).map(|n| format!("upper#{n}")).collect();
    assert_eq!(titles, want, "every short episode appears");
    assert_eq!(app.live.running(), 0);
    let pane = |t: &str| app.live.panes.iter().find(|p| p.title == t).unwrap();
    assert_eq!(pane("upper#0").outcome, Some(true));
    assert_eq!(pane("upper#3").failure.as_deref(), Some("premature_done"));
    assert_eq!(pane("upper#7").stopped, Some(Stopped::Interrupted));
    assert_eq!(pane("upper#0").last_command, "tr a-z A-Z");
    let screen = render(&mut app, 120, 40);
    for line in [
        "✓ PASSED upper#9",
        "✗ FAILED upper#3",
        "⊘ INTERRUPTED upper#7",
    ] {
        assert!(screen.contains(line), "{line}: {screen}");
    }
    // They stay: later looks neither drop nor repeat them.
    look(&mut app);
    assert_eq!(app.live.panes.len(), 10);
}

/// An episode its cancelled job cut short: shown cancelled (a re-run
/// retries it), never failed, and cleared like the finished ones.
#[test]
fn an_episode_cut_by_a_cancel_is_shown_cancelled_not_failed() {
    let mut app = live_app();
    app.update(Action::Live(LiveEvent::Open {
        key: "eval-c/upper/0".into(),
        title: "upper#0".into(),
        policy: "script:slow.txt".into(),
        rows: 48,
        cols: 160,
        input: None,
    }));
    app.update(Action::Live(LiveEvent::Step {
        key: "eval-c/upper/0".into(),
        turn: 2,
        command: "sleep 1".into(),
    }));
    app.update(Action::Live(LiveEvent::Cancelled {
        key: "eval-c/upper/0".into(),
    }));
    let p = &app.live.panes[0];
    assert_eq!(
        (p.stopped, p.outcome),
        (Some(Stopped::Cancelled), Some(false))
    );
    app.live.panes[0].finished_after = Some(std::time::Duration::from_secs(3));
    let screen = render(&mut app, 80, 24);
    assert!(screen.contains("⊘ CANCELLED upper#0"), "{screen}");
    assert!(!screen.contains("FAILED"), "{screen}");
    snap!("live_cancelled_strip_80x24", &mut app, 80, 24);
    snap!("live_cancelled_strip_120x40", &mut app, 120, 40);
    app.update(Action::Command(Command::ClearFilters));
    assert!(app.live.panes.is_empty());
}

#[test]
fn a_job_takes_over_the_pane_its_files_opened_and_watched_events_never_double_feed() {
    let mut app = live_app();
    let key = "eval-z/upper/0".to_string();
    let open = |policy: &str| LiveEvent::Open {
        key: key.clone(),
        title: "upper#0".into(),
        policy: policy.into(),
        rows: 6,
        cols: 30,
        input: None,
    };
    // Found through the run files first (the watcher names the run).
    app.update(Action::Live(LiveEvent::Watched(Box::new(open("eval-z")))));
    app.update(Action::Live(LiveEvent::Watched(Box::new(
        LiveEvent::Feed {
            key: key.clone(),
            bytes: b"from the file\r\n".to_vec(),
        },
    ))));
    assert!(app.live.panes[0].watched);
    // The job of this TUI opens it too: one pane, now the job's.
    app.update(Action::Live(open("oracle")));
    assert_eq!(app.live.panes.len(), 1);
    assert!(!app.live.panes[0].watched);
    assert_eq!(app.live.panes[0].policy, "oracle");
    // From now on only the job feeds it.
    app.update(Action::Live(LiveEvent::Watched(Box::new(
        LiveEvent::Feed {
            key: key.clone(),
            bytes: b"twice\r\n".to_vec(),
        },
    ))));
    app.update(Action::Live(LiveEvent::Feed {
        key: key.clone(),
        bytes: b"from the job\r\n".to_vec(),
    }));
    let text = app.live.panes[0].contents();
    assert!(
        text.contains("from the file") && text.contains("from the job"),
        "{text}"
    );
    assert!(!text.contains("twice"), "{text}");
    // A watched-only episode ignores the job's events, and vice versa.
    app.update(Action::Live(LiveEvent::Watched(Box::new(
        LiveEvent::Finished {
            key: key.clone(),
            passed: true,
            failure: None,
        },
    ))));
    assert_eq!(app.live.panes[0].outcome, None);
    app.update(Action::Live(LiveEvent::Finished {
        key,
        passed: true,
        failure: None,
    }));
    assert_eq!(app.live.panes[0].outcome, Some(true));
}
