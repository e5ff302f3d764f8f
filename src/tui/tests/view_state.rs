//! Issue 47: the open view and the Tasks and Episodes sorts are kept for
//! the next session on the workspace; a name this version does not know
//! is a warning, the rest kept.

use super::*;

#[test]
fn the_view_and_sorts_are_kept_for_the_next_session() {
    let dir = tempfile::tempdir().unwrap();
    let ws = fixture(dir.path());
    let mut app = app_on(&ws);
    cmd(&mut app, &ws, Command::SortNext);
    cmd(&mut app, &ws, Command::SortReverse);
    cmd(&mut app, &ws, Command::ViewEpisodes);
    cmd(&mut app, &ws, Command::SortNext);
    cmd(&mut app, &ws, Command::SortNext);
    let state = app.view_state();
    assert_eq!(
        (
            state.view.as_str(),
            state.tasks_sort.as_str(),
            state.tasks_reverse,
            state.episodes_sort.as_str(),
            state.episodes_reverse
        ),
        ("episodes", "name", true, "task", false)
    );
    let mut next = App::new(Theme::default(), Keymap::default(), "fixture-ws");
    next.restore_view_state(&state).unwrap();
    pump(&mut next, &ws);
    assert_eq!(next.view_state(), state);
    assert_eq!(next.view, View::Episodes);
    let screen = render(&mut next, 120, 40);
    assert!(screen.contains("Task↑"), "{screen}");
    // A name this version does not know is a warning; the rest is kept.
    let odd = crate::tui::runtime::view_state::ViewState {
        view: "nowhere".into(),
        tasks_sort: "colour".into(),
        ..state.clone()
    };
    let mut third = App::new(Theme::default(), Keymap::default(), "fixture-ws");
    let err = third.restore_view_state(&odd).unwrap_err();
    assert!(
        err.starts_with("tui-state.json: unknown view \"nowhere\", tasks_sort \"colour\""),
        "{err}"
    );
    assert_eq!(third.view, View::Tasks);
    assert_eq!(third.episodes.sort, next.episodes.sort);
}
