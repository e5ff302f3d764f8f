//! Episodes have links (issue 33, item 9): an episode opens from its
//! task's Episodes tab and from a finished Live strip, closing it goes back
//! there, and `m` after a fork compares with the fork or says why not.

use super::*;

/// Focus the selected task's detail pane on its Episodes tab.
fn to_episodes_tab(app: &mut App, ws: &Workspace) {
    cmd(app, ws, Command::Select);
    while app.tasks.detail.tab != crate::tui::views::detail::DetailTab::Episodes {
        cmd(app, ws, Command::NextTab);
    }
}

#[test]
fn an_episode_opens_from_its_tasks_episodes_tab() {
    let dir = tempfile::tempdir().unwrap();
    let ws = fixture(dir.path());
    let mut app = app_on(&ws);
    assert_eq!(app.tasks.selected_id().as_deref(), Some("archive-logs"));
    to_episodes_tab(&mut app, &ws);
    // Newest first, the first row marked; the footer follows the focus.
    let screen = render(&mut app, 120, 40);
    assert!(screen.contains("▶ eval-1"), "{screen}");
    assert!(screen.contains("enter open episode"), "{screen}");
    snap!("detail_episodes_selected_80x24", &mut app, 80, 24);
    snap!("detail_episodes_selected_120x40", &mut app, 120, 40);
    // Down selects the second episode (the failed loop, sample 1); Enter
    // inspects it.
    cmd(&mut app, &ws, Command::Down);
    assert_eq!(app.tasks.detail.selected_episode().unwrap().sample, 1);
    cmd(&mut app, &ws, Command::Select);
    assert_eq!(app.view, View::Episodes);
    let insp = app.inspector.as_ref().expect("the inspector opened");
    assert_eq!(
        (insp.episode.row.task_id.as_str(), insp.episode.row.sample),
        ("archive-logs", 1)
    );
    // Esc closes it and goes back to the task, its tab and selection kept.
    cmd(&mut app, &ws, Command::Back);
    assert!(app.inspector.is_none());
    assert_eq!(app.view, View::Tasks);
    assert_eq!(app.tasks.detail.selected_episode().unwrap().sample, 1);
    // T from the Episodes view lands on the same row, focused: Enter opens it.
    cmd(&mut app, &ws, Command::Back);
    cmd(&mut app, &ws, Command::ViewEpisodes);
    cmd(&mut app, &ws, Command::Top);
    let first = app.episodes.selected_row().unwrap().clone();
    cmd(&mut app, &ws, Command::GotoTask);
    assert_eq!(app.view, View::Tasks);
    let row = app.tasks.detail.selected_episode().unwrap();
    assert_eq!((&row.run_id, row.sample), (&first.run_id, first.sample));
    cmd(&mut app, &ws, Command::Select);
    assert_eq!(app.view, View::Episodes);
    assert_eq!(
        app.inspector.as_ref().unwrap().episode.row.sample,
        first.sample
    );
    // An episode of another task: T switches task and selects that row.
    cmd(&mut app, &ws, Command::Back);
    cmd(&mut app, &ws, Command::ViewEpisodes);
    cmd(&mut app, &ws, Command::Bottom);
    assert_eq!(app.episodes.selected_row().unwrap().task_id, "count-words");
    cmd(&mut app, &ws, Command::GotoTask);
    assert_eq!(app.tasks.selected_id().as_deref(), Some("count-words"));
    let row = app.tasks.detail.selected_episode().unwrap();
    assert_eq!((row.task_id.as_str(), row.sample), ("count-words", 0));
}

#[test]
fn a_task_without_episodes_says_so_on_enter() {
    let dir = tempfile::tempdir().unwrap();
    let ws = fixture(dir.path());
    let mut app = app_on(&ws);
    app.tasks.select_id("fix-perms");
    app.update(Action::TaskSelected("fix-perms".into()));
    pump(&mut app, &ws);
    to_episodes_tab(&mut app, &ws);
    cmd(&mut app, &ws, Command::Select);
    assert_eq!(app.view, View::Tasks);
    assert!(app.inspector.is_none());
    let status = app.status.clone().unwrap();
    assert!(
        status.error && status.text.contains("no episodes"),
        "{status:?}"
    );
}

fn finished_strip(app: &mut App, key: &str, title: &str, stopped: bool) {
    app.update(Action::Live(LiveEvent::Open {
        key: key.into(),
        title: title.into(),
        policy: "script:fixture".into(),
        rows: 10,
        cols: 40,
        input: None,
    }));
    app.update(Action::Live(if stopped {
        LiveEvent::Cancelled { key: key.into() }
    } else {
        LiveEvent::Finished {
            key: key.into(),
            passed: false,
            failure: Some("loop".into()),
        }
    }));
}

#[test]
fn a_finished_live_strip_opens_its_episode() {
    let dir = tempfile::tempdir().unwrap();
    let ws = fixture(dir.path());
    let mut app = app_on(&ws);
    finished_strip(&mut app, "eval-1/archive-logs/1", "archive-logs#1", false);
    finished_strip(&mut app, "eval-9/count-words/0", "count-words#0", true);
    cmd(&mut app, &ws, Command::ViewLive);
    // The cancelled strip (newest, selected) has no result: Enter says why.
    cmd(&mut app, &ws, Command::Top);
    cmd(&mut app, &ws, Command::Select);
    assert_eq!(app.view, View::Live);
    let status = app.status.clone().unwrap();
    assert!(
        status.error && status.text.contains("was cancelled: it has no result"),
        "{status:?}"
    );
    assert!(!app.live.zoomed, "a finished strip is not zoomed");
    // The failed one opens in the inspector; esc goes back to Live.
    cmd(&mut app, &ws, Command::Down);
    snap!("live_strip_selected_80x24", &mut app, 80, 24);
    snap!("live_strip_selected_120x40", &mut app, 120, 40);
    cmd(&mut app, &ws, Command::Select);
    assert_eq!(app.view, View::Episodes);
    let row = &app.inspector.as_ref().expect("inspector").episode.row;
    assert_eq!((row.run_id.as_str(), row.sample), ("eval-1", 1));
    cmd(&mut app, &ws, Command::Back);
    assert_eq!(app.view, View::Live);
    // An episode the index does not have (yet) is an error, not a panic.
    finished_strip(&mut app, "eval-2/archive-logs/5", "archive-logs#5", false);
    cmd(&mut app, &ws, Command::Top);
    cmd(&mut app, &ws, Command::Select);
    assert!(app.inspector.is_none());
    assert_eq!(app.view, View::Live, "a failed open stays where it was");
    let status = app.status.clone().unwrap();
    assert!(
        status.error && status.text.contains("no episode"),
        "{status:?}"
    );
}

#[test]
fn compare_after_a_fork_shows_the_fork_or_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let ws = fixture(dir.path());
    let mut app = app_on(&ws);
    // count-words has one episode: nothing to compare with, and why.
    cmd(&mut app, &ws, Command::ViewEpisodes);
    let i = app
        .episodes
        .rows()
        .iter()
        .position(|r| r.task_id == "count-words")
        .unwrap();
    let row = app.episodes.rows()[i].clone();
    app.update(Action::EpisodeLoaded {
        episode: Box::new(crate::tui::runtime::episode_io::load_episode(
            &ws,
            row.clone(),
        )),
        compare: false,
    });
    // A fork job of it runs: m says to wait for it.
    app.update(Action::Job(JobEvent::Started {
        id: JobId("fork-1".into()),
        kind: "fork".into(),
    }));
    cmd(&mut app, &ws, Command::Compare);
    let status = app.status.clone().unwrap();
    assert!(status.text.contains("still running"), "{status:?}");
    // The fork finishes and is indexed: m shows it beside its parent.
    ws.upsert_run("run-f", "run", "oracle", &serde_json::json!({}))
        .unwrap();
    let mut fork = row.clone();
    fork.run_id = "run-f".into();
    fork.passed = true;
    fork.forked_from = Some("eval-1/count-words/0@1".into());
    fork.created_at = "2026-12-04T11:00:00Z".into();
    ws.index_episode(&fork).unwrap();
    app.update(Action::Job(JobEvent::Finished {
        id: JobId("fork-1".into()),
        outcome: JobOutcome::Succeeded("fork passed".into()),
    }));
    pump(&mut app, &ws);
    cmd(&mut app, &ws, Command::Compare);
    let other = app.inspector.as_ref().unwrap().other.as_ref();
    assert_eq!(other.map(|o| o.row.run_id.as_str()), Some("run-f"));
}
