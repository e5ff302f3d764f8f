//! Tasks view and its detail pane: snapshots, search, sort, curation,
//! validate and edit, mouse.

use super::*;

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
        "audit",
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

/// The task's own Episodes tab marks an episode a human took over, as the
/// Episodes list does.
#[test]
fn detail_episodes_mark_a_taken_over_episode() {
    let dir = tempfile::tempdir().unwrap();
    let ws = fixture(dir.path());
    let mut row = ws.task_episodes("archive-logs").unwrap().remove(0);
    row.sample = 2;
    row.path = "runs/eval-1/episodes/archive-logs/2.jsonl".into();
    row.taken_over = true;
    ws.index_episode(&row).unwrap();
    let mut app = app_on(&ws);
    for _ in 0..7 {
        cmd(&mut app, &ws, Command::NextTab);
    }
    let screen = render(&mut app, 120, 40);
    assert!(screen.contains("PASS ✋"), "{screen}");
    snap!("detail_episodes_taken_over_80x24", &mut app, 80, 24);
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
    // The category filter is a fuzzy picker: typing narrows, Enter picks.
    cmd(&mut app, &ws, Command::FilterCategory);
    typed(&mut app, "arc");
    snap!("tasks_category_picker_80x24", &mut app, 80, 24);
    key(&mut app, &ws, KeyCode::Enter);
    assert!(app.picker.is_none());
    assert_eq!(app.tasks.filter.category.as_deref(), Some("archives"));
    assert_eq!(app.tasks.counts(), (3, 0));
    snap!("tasks_no_match_80x24", &mut app, 80, 24);
    cmd(&mut app, &ws, Command::ClearFilters);

    // Sort by rating (descending): count-words (4) first.
    for _ in 0..6 {
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
        vec![Request::Launch(crate::tui::launch::JobSpec::Validate {
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
    // A double click on a row opens its detail pane.
    assert_eq!(app.tasks.focus, crate::tui::views::tasks::Focus::Table);
    app.update(click(5, 4));
    app.update(click(5, 4));
    pump(&mut app, &ws);
    assert_eq!(app.tasks.selected_id().as_deref(), Some("count-words"));
    assert_eq!(app.tasks.focus, crate::tui::views::tasks::Focus::Detail);
    // Click the "Episodes" tab title.
    app.update(click(18, 0));
    assert_eq!(app.view, View::Episodes);
    // There, a double click on a row inspects it.
    render(&mut app, 80, 24);
    app.update(click(5, 4));
    app.update(click(5, 4));
    pump(&mut app, &ws);
    let insp = app.inspector.as_ref().expect("the inspector opens");
    assert_eq!(insp.episode.row.sample, 1);
}
