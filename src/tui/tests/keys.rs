//! Issue 47, the keys a daily user found silent or short: the inspector's
//! paging and ends, `m` on its Replay tab, the launch keys in the Tasks
//! view and the help overlay's search.

use super::episodes::write_episode_files;
use super::*;
use crate::tui::views::inspector::InspectorTab;

/// The inspector on the failing sample (27 lines of trajectory).
fn inspecting(ws: &Workspace) -> App {
    write_episode_files(ws);
    let mut app = app_on(ws);
    cmd(&mut app, ws, Command::ViewEpisodes);
    cmd(&mut app, ws, Command::Down);
    cmd(&mut app, ws, Command::Select);
    assert!(app.inspector.is_some());
    app
}

/// The inspector's `line N/M` position.
fn position(screen: &str) -> String {
    let at = screen.rfind(" line ").expect("a position");
    screen[at + 1..]
        .split_whitespace()
        .take(2)
        .collect::<Vec<_>>()
        .join(" ")
}

#[test]
fn the_inspector_pages_by_its_height_and_jumps_to_both_ends() {
    let dir = tempfile::tempdir().unwrap();
    let ws = fixture(dir.path());
    let mut app = inspecting(&ws);
    let screen = render(&mut app, 80, 24);
    assert_eq!(position(&screen), "line 1/27");
    // At 80x24 the body shows 16 rows: PgDn moves those (not 10), and
    // stops at the last page (line 12 of 27), never leaving a half-empty
    // body.
    cmd(&mut app, &ws, Command::PageDown);
    let screen = render(&mut app, 80, 24);
    assert_eq!(position(&screen), "line 12/27", "{screen}");
    cmd(&mut app, &ws, Command::PageDown);
    assert_eq!(position(&render(&mut app, 80, 24)), "line 12/27");
    cmd(&mut app, &ws, Command::PageUp);
    assert_eq!(position(&render(&mut app, 80, 24)), "line 1/27");
    // G / End: the last page, its last line at the bottom.
    for key_code in [KeyCode::Char('G'), KeyCode::End] {
        key(&mut app, &ws, KeyCode::Home);
        render(&mut app, 80, 24);
        key(&mut app, &ws, key_code);
        let screen = render(&mut app, 80, 24);
        assert_eq!(position(&screen), "line 12/27", "{key_code:?}: {screen}");
    }
    snap!("inspector_end_80x24", &mut app, 80, 24);
    // g / Home: back to the first line.
    key(&mut app, &ws, KeyCode::Char('g'));
    assert_eq!(position(&render(&mut app, 80, 24)), "line 1/27");
    key(&mut app, &ws, KeyCode::End);
    render(&mut app, 80, 24);
    key(&mut app, &ws, KeyCode::Home);
    assert_eq!(position(&render(&mut app, 80, 24)), "line 1/27");
}

#[test]
fn m_on_the_replay_tab_says_what_it_did_and_shows_it() {
    let dir = tempfile::tempdir().unwrap();
    let ws = fixture(dir.path());
    let mut app = inspecting(&ws);
    cmd(&mut app, &ws, Command::PrevTab);
    assert_eq!(app.inspector.as_ref().unwrap().tab, InspectorTab::Replay);
    cmd(&mut app, &ws, Command::Compare);
    let insp = app.inspector.as_ref().unwrap();
    assert!(insp.other.is_some());
    assert_eq!(
        insp.tab,
        InspectorTab::Trajectory,
        "the comparison is shown where it can be"
    );
    let status = app.status.clone().unwrap();
    assert!(
        !status.error
            && status
                .text
                .starts_with("side by side with eval-1/archive-logs#0 (PASS)"),
        "{status:?}"
    );
    assert!(
        status.text.contains("Replay plays one recording"),
        "{status:?}"
    );
    snap!("inspector_compare_from_replay_120x40", &mut app, 120, 40);
    // m again closes it, and says so.
    cmd(&mut app, &ws, Command::Compare);
    assert!(app.inspector.as_ref().unwrap().other.is_none());
    let status = app.status.clone().unwrap();
    assert!(status.text.starts_with("side by side closed"), "{status:?}");
}

#[test]
fn the_launch_keys_open_their_forms_in_the_tasks_view() {
    let dir = tempfile::tempdir().unwrap();
    let ws = fixture(dir.path());
    let mut app = app_on(&ws);
    assert_eq!(app.view, View::Tasks);
    let selected = app.tasks.selected_id().unwrap();
    for (key_code, title) in [
        ('E', "Evaluate a policy"),
        ('V', "Validate tasks"),
        ('L', "Generate tasks with an LLM"),
        ('P', "Generate tasks offline"),
        ('M', "Train a policy"),
    ] {
        key(&mut app, &ws, KeyCode::Char(key_code));
        let (_, form) = app
            .form
            .as_ref()
            .unwrap_or_else(|| panic!("{key_code} opens no form"));
        assert!(form.title.starts_with(title), "{key_code}: {}", form.title);
        assert_eq!(app.view, View::Tasks, "the form opens over Tasks");
        press(&mut app, KeyCode::Esc);
        assert!(app.form.is_none());
    }
    // E evaluates the selected task; the job is followed in Jobs.
    key(&mut app, &ws, KeyCode::Char('E'));
    assert_eq!(app.form.as_ref().unwrap().1.value("tasks"), selected);
    snap!("tasks_eval_form_80x24", &mut app, 80, 24);
    press(&mut app, KeyCode::Enter);
    assert!(
        app.outbox.iter().any(|r| matches!(
            r,
            Request::Launch(JobSpec::Eval { tasks, .. }) if *tasks == selected
        )),
        "{:?}",
        app.outbox
    );
    let status = app.status.clone().unwrap();
    assert_eq!(status.text, "starting eval... (see the Jobs view, F4)");
}

#[test]
fn help_can_be_searched() {
    let dir = tempfile::tempdir().unwrap();
    let ws = fixture(dir.path());
    let mut app = app_on(&ws);
    key(&mut app, &ws, KeyCode::Char('?'));
    assert!(app.help.visible);
    key(&mut app, &ws, KeyCode::Char('/'));
    typed(&mut app, "label");
    assert!(app.help.visible, "typing goes to the search");
    let screen = render(&mut app, 120, 40);
    assert!(screen.contains("Keys matching \"label\""), "{screen}");
    assert!(screen.contains("search keys: label"), "{screen}");
    assert!(screen.contains("pick the failure label"), "{screen}");
    assert!(!screen.contains("Accept the selected task"), "{screen}");
    snap!("help_search_120x40", &mut app, 120, 40);
    // Enter keeps the filter and gives the keys back to the overlay.
    press(&mut app, KeyCode::Enter);
    assert!(app.prompt.is_none() && app.help.visible);
    let screen = render(&mut app, 120, 40);
    assert!(screen.contains("Keys matching \"label\""), "{screen}");
    assert!(!screen.contains("search keys:"), "{screen}");
    // Nothing matches: it says so.
    key(&mut app, &ws, KeyCode::Char('/'));
    typed(&mut app, "zzz");
    assert!(render(&mut app, 120, 40).contains("No key matches \"labelzzz\""));
    // Esc clears the search; the overlay stays.
    press(&mut app, KeyCode::Esc);
    assert!(app.help.visible);
    let screen = render(&mut app, 120, 40);
    assert!(screen.contains("Keys: Tasks first"), "{screen}");
    assert!(screen.contains("Accept the selected task"), "{screen}");
    // Reopened, the help is whole.
    key(&mut app, &ws, KeyCode::Char('/'));
    typed(&mut app, "tag");
    press(&mut app, KeyCode::Enter);
    key(&mut app, &ws, KeyCode::Esc);
    assert!(!app.help.visible);
    key(&mut app, &ws, KeyCode::Char('?'));
    let screen = render(&mut app, 120, 40);
    assert!(screen.contains("Keys: Tasks first"), "{screen}");
}
