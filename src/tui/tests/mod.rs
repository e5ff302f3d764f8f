//! Tests of the TUI, one file per thing covered (a view, the launch forms
//! and jobs, the whole screen), on ratatui's `TestBackend` (80x24 and
//! 120x40) over fixture workspaces built in a temp dir via the store API.
//! Snapshots live in `snapshots/`, named after the test module
//! (`endless__tui__tests__<module>__<name>.snap`).

use std::path::{Path, PathBuf};

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers, MouseButton, MouseEvent, MouseEventKind};
use ratatui::backend::TestBackend;
use ratatui::Terminal;

use super::action::{Action, LiveEvent, Request};
use super::app::{App, View};
use super::keymap::{Command, Keymap};
use super::launch::{JobSpec, TrainSpec};
use super::runtime::watcher::RunCache;
use super::runtime::worker::serve;
use super::theme::Theme;
use super::views::training::ChartKind;
use crate::agent::{EndReason, EpisodeResult, FailureMode, Step, StepKind, TestOutcome};
use crate::jobs::{JobEvent, JobId, JobManager, JobOutcome};
use crate::rl::run_files::{self, EvalRecord, RunInfo, RunStatus, SftMetrics};
use crate::rl::StepMetrics;
use crate::store::{EpisodeRow, TaskStatus, Workspace};
use crate::task::{FileTree, Task, TaskMeta};

/// Assert the screen of `$app` at `$w` x `$h` against snapshot `$name`.
macro_rules! snap {
    ($name:expr, $app:expr, $w:expr, $h:expr) => {
        insta::assert_snapshot!($name, render($app, $w, $h));
    };
}

mod audit;
mod chrome;
mod commands;
mod episodes;
mod images;
mod imported_runs;
mod jobs;
mod jobs_over_time;
mod jobs_shards;
mod keys;
mod links;
mod live;
mod long_text;
mod narrow;
mod pane_colours;
mod repair;
mod screen;
mod tasks;
mod tasks_find;
mod training;
mod undo;
mod view_state;

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

fn task(id: &str, category: &str, complexity: u8, with_solution: bool) -> Task {
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
fn fixture(dir: &std::path::Path) -> Workspace {
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
        taken_over: false,
        // A loop that ran out of turns carries both labels, as the
        // classifier gives them.
        failure_labels: mode
            .map(|m| {
                let mut labels = vec![m.to_string()];
                if end == "max_turns" && m != "turn_exhaustion" {
                    labels.push("turn_exhaustion".into());
                }
                labels
            })
            .unwrap_or_default(),
        policy: "script:fixture".into(),
        duration_secs: if passed { 4.2 } else { 61.0 },
        forked_from: None,
        // Newest first is the recorded order: archive-logs#0 on top.
        created_at: format!(
            "2026-12-04T10:0{}:00Z",
            match (task, sample) {
                ("archive-logs", 0) => 9,
                ("archive-logs", _) => 8,
                _ => 7,
            }
        ),
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
fn pump(app: &mut App, ws: &Workspace) {
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

fn app_on(ws: &Workspace) -> App {
    let mut app = App::new(Theme::default(), Keymap::default(), "fixture-ws");
    pump(&mut app, ws);
    app
}

fn render(app: &mut App, w: u16, h: u16) -> String {
    let mut t = Terminal::new(TestBackend::new(w, h)).unwrap();
    t.draw(|f| app.draw(f)).unwrap();
    format!("{}", t.backend())
}

fn cmd(app: &mut App, ws: &Workspace, c: Command) {
    app.update(Action::Command(c));
    pump(app, ws);
}

fn key(app: &mut App, ws: &Workspace, code: KeyCode) {
    if let Some(a) = app.handle_key(KeyEvent::new(code, KeyModifiers::NONE)) {
        app.update(a);
    }
    pump(app, ws);
}

fn typed(app: &mut App, s: &str) {
    for c in s.chars() {
        press(app, KeyCode::Char(c));
    }
}

fn press(app: &mut App, code: KeyCode) {
    if let Some(a) = app.handle_key(KeyEvent::new(code, KeyModifiers::NONE)) {
        app.update(a);
    }
}
