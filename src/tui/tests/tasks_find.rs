//! Finding tasks (issue 33, also): tags are searchable and filterable,
//! the table sorts by name, and the focused pane shows by more than
//! colour, the footer following it.

use super::*;

#[test]
fn tags_are_searchable_and_filterable() {
    let dir = tempfile::tempdir().unwrap();
    let ws = fixture(dir.path());
    ws.set_tags("count-words", &["easy".into(), "wordy".into()])
        .unwrap();
    let mut app = app_on(&ws);
    // `/wordy` finds the task tagged so (its id, name and instruction do
    // not say it).
    app.tasks.set_search("WORDY".into());
    assert_eq!(app.tasks.counts().1, 1);
    assert_eq!(app.tasks.selected_id().as_deref(), Some("count-words"));
    app.tasks.set_search(String::new());
    // `#` picks a tag from a fuzzy list of the workspace's tags.
    cmd(&mut app, &ws, Command::FilterTag);
    let screen = render(&mut app, 80, 24);
    assert!(screen.contains("any tag"), "{screen}");
    typed(&mut app, "easy");
    key(&mut app, &ws, KeyCode::Enter);
    assert_eq!(app.tasks.filter.tag.as_deref(), Some("easy"));
    assert_eq!(app.tasks.counts().1, 2);
    let screen = render(&mut app, 120, 40);
    assert!(screen.contains("tag easy"), "{screen}");
    snap!("tasks_tag_filter_80x24", &mut app, 80, 24);
    snap!("tasks_tag_filter_120x40", &mut app, 120, 40);
    cmd(&mut app, &ws, Command::ClearFilters);
    assert_eq!(app.tasks.counts().1, 3);
}

#[test]
fn tasks_sort_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let ws = fixture(dir.path());
    let mut t = task("zz-first-by-name", "misc", 1, false);
    t.meta.task.name = "aaa comes first".into();
    ws.add_task(&t, TaskStatus::Candidate).unwrap();
    let mut app = app_on(&ws);
    cmd(&mut app, &ws, Command::SortNext);
    assert_eq!(app.tasks.sort, crate::tui::views::tasks::SortKey::Name);
    cmd(&mut app, &ws, Command::Top);
    assert_eq!(app.tasks.selected_id().as_deref(), Some("zz-first-by-name"));
    let screen = render(&mut app, 120, 40);
    assert!(screen.contains("sort name↑"), "{screen}");
}

#[test]
fn focus_shows_without_colour_and_the_footer_follows_it() {
    let dir = tempfile::tempdir().unwrap();
    let ws = fixture(dir.path());
    let mut app = app_on(&ws);
    let table = render(&mut app, 120, 40);
    assert!(table.contains("a accept"), "{table}");
    assert!(
        !table.contains("┏"),
        "the unfocused pane has a plain border"
    );
    cmd(&mut app, &ws, Command::Select);
    let detail = render(&mut app, 120, 40);
    // A thick border and a marked title: visible in monochrome.
    assert!(detail.contains("┏▶ archive-logs"), "{detail}");
    // The footer now lists the pane's keys first.
    let footer = detail.lines().last().unwrap();
    assert!(footer.contains("] next tab"), "{footer}");
    assert!(footer.contains("esc table"), "{footer}");
    assert!(!footer.contains("open episode"), "{footer}");
    snap!("tasks_detail_focused_80x24", &mut app, 80, 24);
}

#[test]
fn the_tui_and_the_cli_find_the_same_tasks() {
    let dir = tempfile::tempdir().unwrap();
    let ws = fixture(dir.path());
    ws.set_tags("count-words", &["Wordy".into()]).unwrap();
    let mut app = app_on(&ws);
    for needle in ["wordy", "TAR", "perms", "archive", "", "nowhere"] {
        app.tasks.set_search(needle.into());
        let cli = crate::workbench::task_search::find_tasks(
            &ws,
            &crate::store::TaskFilter::default(),
            needle,
        )
        .unwrap();
        assert_eq!(app.tasks.counts().1, cli.len(), "{needle:?}: {cli:?}");
    }
}
