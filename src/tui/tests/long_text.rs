//! Long text made readable (issue 33 item 7): code in the detail pane
//! scrolls sideways or wraps, with the position shown; the detail pane
//! and the inspector body maximise; a step's hidden output lines expand.

use super::*;

/// The end of the long assertion in [`long_task`]'s final tests.
const LINE_END: &str = "END-OF-LONG-LINE";

/// A task whose final tests hold one line far wider than 120 columns.
fn long_task() -> Task {
    let mut t = task("long-lines", "archives", 2, true);
    let long = format!(
        "def test_long():\n    assert sorted(os.listdir('/home/user/logs')) == {:?}  # {LINE_END}\n",
        (0..30).map(|i| format!("file-{i:02}.log")).collect::<Vec<_>>()
    );
    t.tests.insert_text("test_final_state.py", &long);
    t
}

fn long_app(dir: &Path) -> (App, Workspace) {
    let ws = Workspace::open(dir).unwrap();
    ws.add_task(&long_task(), TaskStatus::Candidate).unwrap();
    let mut app = app_on(&ws);
    // Instruction → Truth → Environment → Initial tests → Final tests.
    for _ in 0..4 {
        cmd(&mut app, &ws, Command::NextTab);
    }
    cmd(&mut app, &ws, Command::Select);
    (app, ws)
}

#[test]
fn code_scrolls_sideways_to_the_end_of_a_long_line() {
    let dir = tempfile::tempdir().unwrap();
    let (mut app, ws) = long_app(dir.path());
    let screen = render(&mut app, 120, 40);
    assert!(!screen.contains(LINE_END), "{screen}");
    assert!(screen.contains("line 1/4 · col 1"), "{screen}");
    for _ in 0..60 {
        cmd(&mut app, &ws, Command::Right);
    }
    let screen = render(&mut app, 120, 40);
    assert!(screen.contains(LINE_END), "{screen}");
    // Clamped: the line's end is at the pane's right edge, not beyond.
    let col = app.tasks.detail.sideways();
    assert!(col > 300 && col < 600, "{col}");
    assert!(screen.contains(&format!("col {}", col + 1)), "{screen}");
    snap!("detail_sideways_120x40", &mut app, 120, 40);
    snap!("detail_sideways_80x24", &mut app, 80, 24);
    cmd(&mut app, &ws, Command::Left);
    assert_eq!(app.tasks.detail.sideways(), col - 8);
}

#[test]
fn wrapping_shows_the_whole_long_line() {
    let dir = tempfile::tempdir().unwrap();
    let (mut app, ws) = long_app(dir.path());
    cmd(&mut app, &ws, Command::Right);
    cmd(&mut app, &ws, Command::Wrap);
    assert!(app.tasks.detail.wraps());
    assert_eq!(app.tasks.detail.sideways(), 0);
    let screen = render(&mut app, 120, 40);
    assert!(screen.contains(LINE_END), "{screen}");
    assert!(screen.contains("line 1/4 · wrap"), "{screen}");
    // Sideways scrolling does nothing while wrapping.
    cmd(&mut app, &ws, Command::Right);
    assert_eq!(app.tasks.detail.sideways(), 0);
    snap!("detail_wrapped_120x40", &mut app, 120, 40);
    snap!("detail_wrapped_80x24", &mut app, 80, 24);
    cmd(&mut app, &ws, Command::Wrap);
    assert!(!render(&mut app, 120, 40).contains(LINE_END));
}

#[test]
fn the_detail_pane_maximises_and_esc_restores() {
    let dir = tempfile::tempdir().unwrap();
    let (mut app, ws) = long_app(dir.path());
    let before = render(&mut app, 80, 24);
    assert!(before.contains("Candidate") || before.contains("candidate"));
    cmd(&mut app, &ws, Command::Maximise);
    assert!(app.tasks.detail.maximised);
    let screen = render(&mut app, 80, 24);
    // The table is gone: the pane's border starts right under the tab bar.
    assert!(
        screen
            .lines()
            .nth(1)
            .unwrap()
            .starts_with("\"┏▶ long-lines"),
        "{screen}"
    );
    snap!("detail_maximised_80x24", &mut app, 80, 24);
    snap!("detail_maximised_120x40", &mut app, 120, 40);
    cmd(&mut app, &ws, Command::Back);
    assert!(!app.tasks.detail.maximised);
    assert_eq!(render(&mut app, 80, 24), before);
}

/// Sample 0 of archive-logs gets a first step with 40 output lines.
fn long_output(ws: &Workspace) {
    super::episodes::write_episode_files(ws);
    let path = ws.root().join("runs/eval-1/episodes/archive-logs/0.json");
    let mut r: EpisodeResult = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    r.steps[0].output = (1..=40)
        .map(|i| format!("output line {i:02}"))
        .collect::<Vec<_>>()
        .join("\n");
    std::fs::write(&path, serde_json::to_vec(&r).unwrap()).unwrap();
}

#[test]
fn a_steps_hidden_output_lines_expand() {
    let dir = tempfile::tempdir().unwrap();
    let ws = fixture(dir.path());
    long_output(&ws);
    let mut app = app_on(&ws);
    cmd(&mut app, &ws, Command::ViewEpisodes);
    assert_eq!(app.episodes.selected_row().unwrap().sample, 0);
    cmd(&mut app, &ws, Command::Select);
    let screen = render(&mut app, 120, 40);
    assert!(screen.contains("output line 12"), "{screen}");
    assert!(!screen.contains("output line 13"), "{screen}");
    assert!(
        screen.contains("… 28 more lines (enter shows all)"),
        "{screen}"
    );
    cmd(&mut app, &ws, Command::Select);
    assert!(app.inspector.as_ref().unwrap().expanded);
    let screen = render(&mut app, 120, 40);
    assert!(screen.contains("output line 13"), "{screen}");
    assert!(!screen.contains("more lines"), "{screen}");
    assert!(screen.contains("· expanded"), "{screen}");
    snap!("inspector_expanded_120x40", &mut app, 120, 40);
    snap!("inspector_expanded_80x24", &mut app, 80, 24);
    // Paging stops at the last page; line by line goes on to the last
    // line, and the border shows the position at the end.
    for _ in 0..10 {
        cmd(&mut app, &ws, Command::PageDown);
    }
    let paged = render(&mut app, 120, 40);
    assert!(!paged.contains("line 1/"), "{paged}");
    for _ in 0..200 {
        cmd(&mut app, &ws, Command::Down);
    }
    let screen = render(&mut app, 120, 40);
    let total = screen
        .split("line ")
        .filter_map(|s| s.split_once('/'))
        .find_map(|(at, rest)| {
            let n: usize = rest
                .split(|c: char| !c.is_ascii_digit())
                .next()?
                .parse()
                .ok()?;
            Some((at.parse::<usize>().ok()?, n))
        });
    let (at, n) = total.expect("a position in the border");
    assert_eq!(at, n, "{screen}");
    cmd(&mut app, &ws, Command::Select);
    assert!(!app.inspector.as_ref().unwrap().expanded);
}

#[test]
fn the_inspector_body_maximises_and_esc_restores() {
    let dir = tempfile::tempdir().unwrap();
    let ws = fixture(dir.path());
    long_output(&ws);
    let mut app = app_on(&ws);
    cmd(&mut app, &ws, Command::ViewEpisodes);
    cmd(&mut app, &ws, Command::Select);
    cmd(&mut app, &ws, Command::Maximise);
    let screen = render(&mut app, 80, 24);
    assert!(!screen.contains("[Trajectory]"), "{screen}");
    assert!(screen.contains("output line 01"), "{screen}");
    snap!("inspector_maximised_80x24", &mut app, 80, 24);
    snap!("inspector_maximised_120x40", &mut app, 120, 40);
    cmd(&mut app, &ws, Command::Back);
    assert!(app.inspector.is_some());
    assert!(render(&mut app, 80, 24).contains("[Trajectory]"));
    cmd(&mut app, &ws, Command::Back);
    assert!(app.inspector.is_none());
}

#[test]
fn a_long_status_message_wraps_onto_more_rows() {
    let dir = tempfile::tempdir().unwrap();
    let ws = fixture(dir.path());
    let mut app = app_on(&ws);
    let msg = format!("{} THE-END", "a long error that goes on ".repeat(5));
    app.update(Action::Error(msg));
    let screen = render(&mut app, 80, 24);
    assert!(screen.contains("THE-END"), "{screen}");
    snap!("status_wrapped_80x24", &mut app, 80, 24);
    snap!("status_wrapped_120x40", &mut app, 120, 40);
}

#[test]
fn a_long_episode_note_wraps_in_the_inspector_header() {
    let dir = tempfile::tempdir().unwrap();
    let ws = fixture(dir.path());
    long_output(&ws);
    let mut app = app_on(&ws);
    cmd(&mut app, &ws, Command::ViewEpisodes);
    cmd(&mut app, &ws, Command::Select);
    cmd(&mut app, &ws, Command::Note);
    typed(
        &mut app,
        &format!(
            "{}NOTE-END",
            "the agent never checks the archive; ".repeat(4)
        ),
    );
    key(&mut app, &ws, KeyCode::Enter);
    let screen = render(&mut app, 80, 24);
    assert!(screen.contains("NOTE-END"), "{screen}");
    assert!(screen.contains("[Trajectory]"), "{screen}");
    snap!("inspector_long_note_80x24", &mut app, 80, 24);
    snap!("inspector_long_note_120x40", &mut app, 120, 40);
}
