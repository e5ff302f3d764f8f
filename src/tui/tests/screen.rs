//! The whole screen: the Jobs, Training and help snapshots of a fixture
//! workspace, tiny and resized terminals, theme colours (the frame benchmark is
//! `crate::bench::tui`).

use super::*;

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
    // Every command is listed (after the view's groups).
    let text = render(&mut app, 120, 200);
    for c in Command::ALL {
        assert!(text.contains(c.name()), "help lacks {}", c.name());
    }
    key(&mut app, &ws, KeyCode::Char('x'));
    assert!(!app.help.visible);
    // Over another view, that view's keys come first.
    cmd(&mut app, &ws, Command::ViewLive);
    key(&mut app, &ws, KeyCode::Char('?'));
    let text = render(&mut app, 80, 24);
    assert!(text.contains("Keys: Live first"), "{text}");
    assert!(text.contains("▌ Live: panes"), "{text}");
    snap!("help_live_80x24", &mut app, 80, 24);
    snap!("help_live_120x40", &mut app, 120, 40);
}

#[test]
fn tiny_and_resized_terminals_do_not_panic() {
    let dir = tempfile::tempdir().unwrap();
    let ws = fixture(dir.path());
    let mut app = app_on(&ws);
    super::live::open_panes(&mut app, 3);
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
