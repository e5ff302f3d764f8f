//! Live view: panes fed by keyed episode events, zoom and scrollback,
//! taking a session over.

use super::*;

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
    let text = app.live.panes[1].contents();
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

impl crate::tui::takeover::HumanInput for LogTerm {
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
        crate::tui::takeover::TakeoverTerm::new(LogTerm::default(), Default::default());
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
