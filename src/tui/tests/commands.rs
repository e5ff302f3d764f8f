//! Commands on prompt lines of their own, as a terminal shows them: the
//! agent's (`agent$ `, bold cyan) as its session echoes them and a human's
//! (`you$ `, bold yellow), in a live pane and in the replay.

use ratatui::style::{Color, Modifier};

use super::*;
use crate::sandbox::Prompt;

/// What the session ran, in order: who, the command, its output.
const SESSION: [(Prompt, &str, &str); 5] = [
    (Prompt::Agent, "ls ~/logs", "a.log  b.log  c.log\r\n"),
    (
        Prompt::Agent,
        "tar -czf ~/backup/logs.tar.gz ~/logs",
        "tar: /home/user/backup: Cannot open: No such file or directory\r\n",
    ),
    (Prompt::Human, "mkdir -p ~/backup", ""),
    (
        Prompt::Agent,
        "cat <<EOF > ~/backup/README\nlogs of the week\nEOF",
        "",
    ),
    (
        Prompt::Agent,
        "tar -czf ~/backup/logs.tar.gz -C ~/logs . && echo archived",
        "archived\r\n",
    ),
];

/// A Live view with one running episode of a policy whose long name leaves
/// the pane's title no room for the command, fed what its session sent.
fn live_app() -> App {
    let mut app = App::new(Theme::default(), Keymap::default(), "fixture-ws");
    app.outbox.clear();
    app.view = View::Live;
    let key = "eval-c/archive-logs/0".to_string();
    app.update(Action::Live(LiveEvent::Open {
        key: key.clone(),
        title: "archive-logs#0".into(),
        policy: "script:/home/someone/policies/archive-the-logs-then-say-done.txt".into(),
        rows: 48,
        cols: 160,
        input: None,
    }));
    for (turn, (who, command, output)) in SESSION.into_iter().enumerate() {
        if who == Prompt::Human {
            // The pane the human typed in echoes their line itself.
            app.live.panes[0].echo(command);
        } else {
            app.update(Action::Live(LiveEvent::Step {
                key: key.clone(),
                turn: turn as u32 + 1,
                command: command.into(),
            }));
            app.update(Action::Live(LiveEvent::Feed {
                key: key.clone(),
                bytes: who.echo(command).into_bytes(),
            }));
        }
        app.update(Action::Live(LiveEvent::Feed {
            key: key.clone(),
            bytes: output.as_bytes().to_vec(),
        }));
    }
    // A clock that does not move, for the snapshots.
    app.live.panes[0].finished_after = Some(std::time::Duration::from_secs(75));
    app
}

/// The agent's prompt colour (ANSI cyan, as the session's terminal sets it).
const CYAN: Color = Color::Indexed(6);

/// A human's (ANSI yellow).
const YELLOW: Color = Color::Indexed(3);

/// Whether the cell where `needle` starts on the 120x40 screen is bold and
/// coloured `fg`.
fn bold(app: &mut App, needle: &str, fg: Color) -> bool {
    let (w, h) = (120, 40);
    let mut t = Terminal::new(TestBackend::new(w, h)).unwrap();
    t.draw(|f| app.draw(f)).unwrap();
    let buf = t.backend().buffer();
    for y in 0..h {
        let line: String = (0..w).map(|x| buf[(x, y)].symbol()).collect();
        if let Some(at) = line.find(needle) {
            let cell = &buf[(line[..at].chars().count() as u16, y)];
            return cell.fg == fg && cell.modifier.contains(Modifier::BOLD);
        }
    }
    panic!("{needle:?} is not on the screen");
}

#[test]
fn a_pane_shows_each_command_on_its_prompt_line() {
    let mut app = live_app();
    for (w, h) in [(80, 24), (120, 40)] {
        let screen = render(&mut app, w, h);
        let lines: Vec<&str> = screen.lines().collect();
        let below = |needle: &str| {
            let at = lines.iter().position(|l| l.contains(needle));
            at.and_then(|at| lines.get(at + 1).copied())
                .unwrap_or_else(|| panic!("{needle:?} is not in the pane: {screen}"))
        };
        assert!(below("┃agent$ ls ~/logs ").contains("┃a.log  b.log  c.log "));
        assert!(below("┃you$ mkdir -p ~/backup ").contains("┃agent$ cat <<EOF"));
        // A multi-line command goes on after bash's continuation prompt.
        assert!(below("┃agent$ cat <<EOF > ~/backup/README ").contains("┃> logs of the week "));
        assert!(below("┃> logs of the week ").contains("┃> EOF "));
        assert!(below("┃agent$ tar -czf ~/backup/logs.tar.gz -C").contains("┃archived "));
    }
    // Styled apart from the output: the agent's bold cyan, a human's bold
    // yellow.
    assert!(bold(&mut app, "agent$ ls", CYAN));
    assert!(bold(&mut app, "you$ mkdir", YELLOW));
    assert!(!bold(&mut app, "a.log  b.log", CYAN));
    snap!("live_agent_commands_80x24", &mut app, 80, 24);
    snap!("live_agent_commands_120x40", &mut app, 120, 40);
}

/// The recording of [`SESSION`] as a session writes it (with fixed times):
/// each command as input and as its echo, then its output.
fn recording() -> String {
    let mut out = String::from("{\"version\":2,\"width\":160,\"height\":48}\n");
    let mut t = 0.0;
    let mut event = |kind: &str, data: &str| {
        t += 0.5;
        out.push_str(&format!("{}\n", serde_json::json!([t, kind, data])));
    };
    for (who, command, output) in SESSION {
        event("i", &format!("{}\r", command.replace('\n', "\r")));
        event("o", &who.echo(command));
        if !output.is_empty() {
            event("o", output);
        }
    }
    out
}

#[test]
fn the_replay_shows_each_command_on_its_prompt_line() {
    let dir = tempfile::tempdir().unwrap();
    let ws = fixture(dir.path());
    super::episodes::write_episode_files(&ws);
    let cast = ws.root().join("runs/eval-1/episodes/archive-logs/1.cast");
    std::fs::write(cast, recording()).unwrap();
    let mut app = app_on(&ws);
    cmd(&mut app, &ws, Command::ViewEpisodes);
    cmd(&mut app, &ws, Command::Down);
    cmd(&mut app, &ws, Command::Select);
    cmd(&mut app, &ws, Command::NextTab);
    cmd(&mut app, &ws, Command::NextTab);
    let screen = render(&mut app, 120, 40);
    for line in [
        "│agent$ ls ~/logs ",
        "│a.log  b.log  c.log ",
        "│you$ mkdir -p ~/backup ",
        "│> logs of the week ",
        "│archived ",
    ] {
        assert!(screen.contains(line), "{line:?} missing: {screen}");
    }
    assert!(bold(&mut app, "agent$ ls ~/logs", CYAN));
    snap!("inspector_replay_commands_80x24", &mut app, 80, 24);
    snap!("inspector_replay_commands_120x40", &mut app, 120, 40);
    // Stepping back takes the last command's echo and output away.
    cmd(&mut app, &ws, Command::Left);
    cmd(&mut app, &ws, Command::Left);
    let screen = render(&mut app, 120, 40);
    assert!(!screen.contains("archived"), "{screen}");
    assert!(screen.contains("│> EOF "), "{screen}");
}
