//! Snapshot tests of every view on ratatui's `TestBackend` (80x24 and
//! 120x40), over fixture workspaces built in a temp dir via the store API,
//! plus behaviour tests of curation, prompts, mouse and live panes.

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers, MouseButton, MouseEvent, MouseEventKind};
use ratatui::backend::TestBackend;
use ratatui::Terminal;

use super::app::{Action, App, Request, View};
use super::keymap::{Command, Keymap};
use super::theme::Theme;
use super::worker::serve;
use crate::store::{EpisodeRow, TaskStatus, Workspace};
use crate::task::{FileTree, Task, TaskMeta};

const PY_INITIAL: &str = r#"import os


def test_logs_exist():
    # the initial state has three log files
    assert len(os.listdir("/home/user/logs")) == 3
"#;

const PY_FINAL: &str = r#"import os
import tarfile

ARCHIVE = "/home/user/backup/logs.tar.gz"


def test_archive_has_logs():
    assert os.path.isfile(ARCHIVE), f"{ARCHIVE} is missing"
    with tarfile.open(ARCHIVE) as t:
        names = sorted(t.getnames())
    assert names == ["a.log", "b.log", "c.log"]  # exact contents
"#;

pub(super) fn task(id: &str, category: &str, complexity: u8, with_solution: bool) -> Task {
    let mut meta = TaskMeta::default();
    meta.task.id = id.into();
    meta.task.name = id.replace('-', " ");
    meta.task.category = category.into();
    meta.task.complexity = Some(complexity);
    meta.task.scenario = "ops".into();
    meta.task.source_format = "native".into();
    meta.provenance.generator = "procgen".into();
    meta.provenance.seed = Some(7);
    meta.provenance.created = "2026-01-01T00:00:00Z".into();
    meta.provenance.attempts.insert("environment".into(), 1);
    let mut environment = FileTree::default();
    environment.insert_text(
        "setup.sh",
        "#!/bin/sh\nset -e\nmkdir -p /home/user/logs\nfor f in a b c; do echo \"$f\" > /home/user/logs/$f.log; done\n",
    );
    environment.insert_text("files/readme.txt", "hello\n");
    let mut tests = FileTree::default();
    tests.insert_text("test_initial_state.py", PY_INITIAL);
    tests.insert_text("test_final_state.py", PY_FINAL);
    let mut solution = FileTree::default();
    if with_solution {
        solution.insert_text(
            "solve.sh",
            "#!/bin/sh\nmkdir -p ~/backup && tar -czf ~/backup/logs.tar.gz -C ~/logs . # oracle\n",
        );
    }
    Task {
        meta,
        instruction: format!(
            "Please archive every log file in /home/user/logs into\n/home/user/backup/logs.tar.gz ({id})."
        ),
        truth: "The archive must contain exactly a.log, b.log and c.log at its root.\nThe agent must not delete the originals.".into(),
        environment,
        tests,
        solution,
    }
}

/// Three tasks with curation data and three episodes.
pub(super) fn fixture(dir: &std::path::Path) -> Workspace {
    let ws = Workspace::open(dir).unwrap();
    ws.add_task(
        &task("archive-logs", "archives", 2, true),
        TaskStatus::Candidate,
    )
    .unwrap();
    ws.add_task(
        &task("count-words", "text-processing", 1, true),
        TaskStatus::Candidate,
    )
    .unwrap();
    ws.add_task(
        &task("fix-perms", "permissions", 3, false),
        TaskStatus::Candidate,
    )
    .unwrap();
    ws.set_status("count-words", TaskStatus::Accepted).unwrap();
    ws.set_status("fix-perms", TaskStatus::Rejected).unwrap();
    ws.set_rating("count-words", Some(4)).unwrap();
    ws.set_tags("archive-logs", &["tar".into(), "easy".into()])
        .unwrap();
    ws.set_notes("archive-logs", "check the truth wording")
        .unwrap();
    let mut p = std::collections::BTreeMap::new();
    p.insert("1".to_string(), 0.5);
    p.insert("16".to_string(), 1.0);
    ws.set_pass_at_k("archive-logs", &p).unwrap();
    ws.upsert_run("eval-1", "eval", "oracle", &serde_json::json!({}))
        .unwrap();
    let ep = |task: &str, sample: u32, passed: bool, mode: Option<&str>, end: &str| EpisodeRow {
        run_id: "eval-1".into(),
        task_id: task.into(),
        sample,
        passed,
        reward: if passed { 1.0 } else { 0.0 },
        turns: if passed { 3 } else { 64 },
        end_reason: end.into(),
        failure_mode: mode.map(String::from),
        path: format!("runs/eval-1/episodes/{task}/{sample}.jsonl"),
        rating: None,
        label: None,
        notes: String::new(),
    };
    ws.index_episode(&ep("archive-logs", 0, true, None, "done"))
        .unwrap();
    ws.index_episode(&ep("archive-logs", 1, false, Some("loop"), "max_turns"))
        .unwrap();
    ws.index_episode(&ep(
        "count-words",
        0,
        false,
        Some("turn_exhaustion"),
        "max_turns",
    ))
    .unwrap();
    ws
}

/// Serve queued requests synchronously, as the worker would.
pub(super) fn pump(app: &mut App, ws: &Workspace) {
    while !app.outbox.is_empty() {
        for req in std::mem::take(&mut app.outbox) {
            if matches!(req, Request::OpenEditor { .. }) {
                continue;
            }
            for a in serve(ws, req) {
                app.update(a);
            }
        }
    }
}

pub(super) fn app_on(ws: &Workspace) -> App {
    let mut app = App::new(Theme::default(), Keymap::default(), "fixture-ws");
    pump(&mut app, ws);
    app
}

pub(super) fn render(app: &mut App, w: u16, h: u16) -> String {
    let mut t = Terminal::new(TestBackend::new(w, h)).unwrap();
    t.draw(|f| app.draw(f)).unwrap();
    format!("{}", t.backend())
}

pub(super) fn cmd(app: &mut App, ws: &Workspace, c: Command) {
    app.update(Action::Command(c));
    pump(app, ws);
}

pub(super) fn key(app: &mut App, ws: &Workspace, code: KeyCode) {
    if let Some(a) = app.handle_key(KeyEvent::new(code, KeyModifiers::NONE)) {
        app.update(a);
    }
    pump(app, ws);
}

macro_rules! snap {
    ($name:expr, $app:expr, $w:expr, $h:expr) => {
        insta::assert_snapshot!($name, render($app, $w, $h));
    };
}

#[test]
fn tasks_view_snapshots() {
    let dir = tempfile::tempdir().unwrap();
    let ws = fixture(dir.path());
    let mut app = app_on(&ws);
    snap!("tasks_80x24", &mut app, 80, 24);
    snap!("tasks_120x40", &mut app, 120, 40);
}

#[test]
fn empty_workspace_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let ws = Workspace::open(dir.path()).unwrap();
    let mut app = app_on(&ws);
    snap!("tasks_empty_80x24", &mut app, 80, 24);
    snap!("tasks_empty_120x40", &mut app, 120, 40);
    app.view = View::Episodes;
    snap!("episodes_empty_80x24", &mut app, 80, 24);
    snap!("episodes_empty_120x40", &mut app, 120, 40);
}

#[test]
fn detail_tab_snapshots() {
    let dir = tempfile::tempdir().unwrap();
    let ws = fixture(dir.path());
    let mut app = app_on(&ws);
    let names = [
        "instruction",
        "truth",
        "environment",
        "initial_tests",
        "final_tests",
        "solution",
        "provenance",
        "episodes",
    ];
    for name in names {
        snap!(format!("detail_{name}_120x40"), &mut app, 120, 40);
        cmd(&mut app, &ws, Command::NextTab);
    }
    // The truth is marked PRIVILEGED at any size.
    cmd(&mut app, &ws, Command::NextTab);
    let small = render(&mut app, 80, 24);
    assert!(small.contains("PRIVILEGED"), "{small}");
    snap!("detail_truth_80x24", &mut app, 80, 24);
}

#[test]
fn search_filter_and_sort() {
    let dir = tempfile::tempdir().unwrap();
    let ws = fixture(dir.path());
    let mut app = app_on(&ws);
    key(&mut app, &ws, KeyCode::Char('/'));
    for c in "count".chars() {
        key(&mut app, &ws, KeyCode::Char(c));
    }
    assert_eq!(app.tasks.counts(), (3, 1));
    snap!("tasks_search_prompt_80x24", &mut app, 80, 24);
    key(&mut app, &ws, KeyCode::Enter);
    assert!(app.prompt.is_none());
    key(&mut app, &ws, KeyCode::Esc);
    assert_eq!(app.tasks.counts(), (3, 3));

    // Status filter cycles candidate -> accepted.
    cmd(&mut app, &ws, Command::FilterStatus);
    assert_eq!(app.tasks.selected_id().as_deref(), Some("archive-logs"));
    cmd(&mut app, &ws, Command::FilterStatus);
    assert_eq!(app.tasks.selected_id().as_deref(), Some("count-words"));
    cmd(&mut app, &ws, Command::FilterCategory);
    assert_eq!(app.tasks.counts(), (3, 0));
    snap!("tasks_no_match_80x24", &mut app, 80, 24);
    cmd(&mut app, &ws, Command::ClearFilters);

    // Sort by rating (descending): count-words (4) first.
    for _ in 0..5 {
        cmd(&mut app, &ws, Command::SortNext);
    }
    cmd(&mut app, &ws, Command::SortReverse);
    cmd(&mut app, &ws, Command::Top);
    assert_eq!(app.tasks.selected_id().as_deref(), Some("count-words"));
    snap!("tasks_sorted_rating_120x40", &mut app, 120, 40);
}

#[test]
fn curation_writes_to_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let ws = fixture(dir.path());
    let mut app = app_on(&ws);
    assert_eq!(app.tasks.selected_id().as_deref(), Some("archive-logs"));
    key(&mut app, &ws, KeyCode::Char('a'));
    key(&mut app, &ws, KeyCode::Char('5'));
    key(&mut app, &ws, KeyCode::Char('n'));
    key(&mut app, &ws, KeyCode::Char('!'));
    key(&mut app, &ws, KeyCode::Enter);
    key(&mut app, &ws, KeyCode::Char('t'));
    for c in ", nightly".chars() {
        key(&mut app, &ws, KeyCode::Char(c));
    }
    key(&mut app, &ws, KeyCode::Enter);
    let row = ws.task_row("archive-logs").unwrap();
    assert_eq!(row.status, TaskStatus::Accepted);
    assert_eq!(row.rating, Some(5));
    assert_eq!(row.notes, "check the truth wording!");
    assert_eq!(row.tags, vec!["tar", "easy", "nightly"]);
    assert_eq!(app.tasks.selected_row().unwrap().rating, Some(5));

    key(&mut app, &ws, KeyCode::Char('j'));
    key(&mut app, &ws, KeyCode::Char('A'));
    assert_eq!(
        ws.task_row("count-words").unwrap().status,
        TaskStatus::Archived
    );
    key(&mut app, &ws, KeyCode::Char('r'));
    assert_eq!(
        ws.task_row("count-words").unwrap().status,
        TaskStatus::Rejected
    );
    key(&mut app, &ws, KeyCode::Char('0'));
    assert_eq!(ws.task_row("count-words").unwrap().rating, None);
}

#[test]
fn validate_is_honest_and_edit_names_the_tab_file() {
    let dir = tempfile::tempdir().unwrap();
    let ws = fixture(dir.path());
    let mut app = app_on(&ws);
    // Validation runs as a background job, never on the store worker.
    app.update(Action::Command(Command::Validate));
    assert_eq!(
        app.outbox,
        vec![Request::Launch(super::launcher::JobSpec::Validate {
            tasks: vec!["archive-logs".into()]
        })]
    );
    assert!(app
        .status
        .clone()
        .unwrap()
        .text
        .contains("validating archive-logs"));
    pump(&mut app, &ws);

    for _ in 0..4 {
        cmd(&mut app, &ws, Command::NextTab);
    }
    app.update(Action::Command(Command::Edit));
    assert_eq!(
        app.outbox,
        vec![Request::OpenEditor {
            id: "archive-logs".into(),
            file: "tests/test_final_state.py".into()
        }]
    );
}

#[test]
fn mouse_selects_rows_and_tabs() {
    let dir = tempfile::tempdir().unwrap();
    let ws = fixture(dir.path());
    let mut app = app_on(&ws);
    render(&mut app, 80, 24);
    let click = |col, row| {
        Action::Mouse(MouseEvent {
            kind: MouseEventKind::Down(MouseButton::Left),
            column: col,
            row,
            modifiers: KeyModifiers::NONE,
        })
    };
    // Row 0 tabs, row 1 filter bar, row 2 header, row 3.. rows.
    app.update(click(5, 5));
    pump(&mut app, &ws);
    assert_eq!(app.tasks.selected_id().as_deref(), Some("fix-perms"));
    app.update(Action::Mouse(MouseEvent {
        kind: MouseEventKind::ScrollUp,
        column: 5,
        row: 4,
        modifiers: KeyModifiers::NONE,
    }));
    assert_eq!(app.tasks.selected_id().as_deref(), Some("archive-logs"));
    // Click the "Episodes" tab title.
    app.update(click(18, 0));
    assert_eq!(app.view, View::Episodes);
}

#[test]
fn episodes_view_snapshots() {
    let dir = tempfile::tempdir().unwrap();
    let ws = fixture(dir.path());
    let mut app = app_on(&ws);
    cmd(&mut app, &ws, Command::ViewEpisodes);
    snap!("episodes_80x24", &mut app, 80, 24);
    snap!("episodes_120x40", &mut app, 120, 40);
    cmd(&mut app, &ws, Command::FilterFailure);
    assert_eq!(app.episodes.failure.as_deref(), Some("loop"));
    snap!("episodes_loop_80x24", &mut app, 80, 24);
    // T jumps to the episode's task, on its Episodes tab (Enter inspects).
    cmd(&mut app, &ws, Command::GotoTask);
    assert_eq!(app.view, View::Tasks);
    assert_eq!(app.tasks.selected_id().as_deref(), Some("archive-logs"));
    let screen = render(&mut app, 120, 40);
    assert!(screen.contains("max_turns"), "{screen}");
}

#[test]
fn jobs_training_and_help_snapshots() {
    let dir = tempfile::tempdir().unwrap();
    let ws = fixture(dir.path());
    let mut app = app_on(&ws);
    cmd(&mut app, &ws, Command::ViewJobs);
    snap!("jobs_80x24", &mut app, 80, 24);
    snap!("jobs_120x40", &mut app, 120, 40);
    cmd(&mut app, &ws, Command::NextView);
    assert_eq!(app.view, View::Training);
    snap!("training_80x24", &mut app, 80, 24);
    snap!("training_120x40", &mut app, 120, 40);
    cmd(&mut app, &ws, Command::ViewTasks);
    key(&mut app, &ws, KeyCode::Char('?'));
    assert!(app.help.visible);
    snap!("help_80x24", &mut app, 80, 24);
    snap!("help_120x40", &mut app, 120, 40);
    // Every command is listed.
    let text = render(&mut app, 120, 60);
    for c in Command::ALL {
        assert!(text.contains(c.name()), "help lacks {}", c.name());
    }
    key(&mut app, &ws, KeyCode::Char('x'));
    assert!(!app.help.visible);
}

fn live_app() -> App {
    let mut app = App::new(Theme::default(), Keymap::default(), "fixture-ws");
    app.outbox.clear();
    app.view = View::Live;
    app
}

fn open_panes(app: &mut App, n: usize) {
    for i in 0..n {
        app.update(Action::LiveOpen {
            title: format!("task-{i}#0"),
            policy: "oracle".into(),
            rows: 10,
            cols: 40,
        });
        // Split an escape sequence across chunks on purpose.
        app.update(Action::LiveFeed {
            pane: i,
            bytes: b"\x1b[1;32muser@sbx\x1b[0m:~$ ls\r\na.log  b.log\r\n\x1b[".to_vec(),
        });
        app.update(Action::LiveFeed {
            pane: i,
            bytes: format!("31mpane {i}\x1b[0m\r\n$ ").into_bytes(),
        });
        app.update(Action::LiveTurn {
            pane: i,
            turn: 2,
            command: "ls".into(),
        });
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

#[test]
fn tiny_and_resized_terminals_do_not_panic() {
    let dir = tempfile::tempdir().unwrap();
    let ws = fixture(dir.path());
    let mut app = app_on(&ws);
    open_panes(&mut app, 3);
    for view in View::ALL {
        app.view = view;
        for (w, h) in [(1, 1), (10, 3), (20, 5), (200, 60)] {
            render(&mut app, w, h);
        }
    }
    app.help.visible = true;
    render(&mut app, 5, 2);
}

#[test]
fn bench_runs_on_many_rows() {
    let b = super::bench_frames(2_000, 3);
    assert_eq!(b.frames, 2 * super::bench::FRAMES_PER_VIEW);
    assert!(b.p95 >= b.p50);
    assert!(b.tasks_view.max >= b.tasks_view.p50);
}

/// Full-size frame benchmark (dev profile unless run with --release):
/// `cargo test --lib tui::tests::bench_full_size -- --ignored --nocapture`.
#[test]
#[ignore = "benchmark; prints frame times"]
fn bench_full_size() {
    let b = super::bench_frames(10_000, 8);
    println!("{b:#?}");
}

#[test]
fn colours_come_from_the_theme() {
    let dir = tempfile::tempdir().unwrap();
    let ws = fixture(dir.path());
    for name in ["dark", "light"] {
        let theme = Theme::load(name, None).unwrap();
        let mut app = App::new(theme.clone(), Keymap::default(), "fixture-ws");
        pump(&mut app, &ws);
        let mut t = Terminal::new(TestBackend::new(80, 24)).unwrap();
        t.draw(|f| app.draw(f)).unwrap();
        let buf = t.backend().buffer().clone();
        // Row 4 is count-words (accepted): find its status cell.
        let row: String = (0..80).map(|x| buf[(x, 4)].symbol().to_string()).collect();
        let x = row.find("accepted").unwrap() as u16;
        assert_eq!(buf[(x, 4)].fg, theme.success, "{name}");
        assert_eq!(buf[(79, 23)].bg, theme.background, "{name}");
        // The truth tab's border uses the privileged colour.
        cmd(&mut app, &ws, Command::NextTab);
        t.draw(|f| app.draw(f)).unwrap();
        let buf = t.backend().buffer().clone();
        assert_eq!(buf[(0, 11)].symbol(), "┌");
        assert_eq!(buf[(0, 11)].fg, theme.privileged, "{name}");
    }
}
