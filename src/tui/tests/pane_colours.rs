//! Terminal panes inside a painted theme: the cells a session leaves in
//! the terminal's default colours take the theme's, in the dark and the
//! light theme alike, so that no pane shows the user's own terminal
//! background; colours the session chose stay.

use ratatui::style::Color;

use super::live::open_panes;
use super::*;

/// Where `needle` first starts on the screen of `app` at 80x24, and the
/// screen's buffer.
fn find(app: &mut App, needle: &str) -> (ratatui::buffer::Buffer, u16, u16) {
    let mut t = Terminal::new(TestBackend::new(80, 24)).unwrap();
    t.draw(|f| app.draw(f)).unwrap();
    let buf = t.backend().buffer().clone();
    for y in 0..24 {
        let line: String = (0..80).map(|x| buf[(x, y)].symbol().to_string()).collect();
        if let Some(at) = line.find(needle) {
            let x = line[..at].chars().count() as u16;
            return (buf, x, y);
        }
    }
    panic!("{needle:?} is not on the screen");
}

#[test]
fn live_panes_use_the_themes_colours_where_the_session_sets_none() {
    for name in ["dark", "light"] {
        let theme = Theme::load(name, None).unwrap();
        let mut app = App::new(theme.clone(), Keymap::default(), "fixture-ws");
        app.outbox.clear();
        app.view = View::Live;
        open_panes(&mut app, 1);
        app.update(Action::Command(Command::Select));
        let (buf, x, y) = find(&mut app, "a.log  b.log");
        // `a.log` is printed without colours: the theme's.
        assert_eq!(
            (buf[(x, y)].fg, buf[(x, y)].bg),
            (theme.foreground, theme.background),
            "{name}: plain output"
        );
        // The blank rest of the row, and the rows below the output.
        assert_eq!(buf[(x + 30, y)].bg, theme.background, "{name}: blank cell");
        assert_eq!(buf[(x, y + 4)].bg, theme.background, "{name}: empty row");
        // `pane 0` is printed in red (ANSI 31): kept.
        let (buf, x, y) = find(&mut app, "pane 0");
        assert_eq!(buf[(x, y)].fg, Color::Indexed(1), "{name}: red stays red");
        assert_eq!(buf[(x, y)].bg, theme.background, "{name}: on the theme");
        // Nowhere on the screen is the terminal's own background left.
        let reset = (0..24)
            .flat_map(|y| (0..80).map(move |x| (x, y)))
            .filter(|&(x, y)| buf[(x, y)].bg == Color::Reset)
            .count();
        assert_eq!(
            reset, 0,
            "{name}: cells in the terminal's default background"
        );
    }
}

#[test]
fn the_inspectors_replay_uses_the_themes_colours_too() {
    for name in ["dark", "light"] {
        let dir = tempfile::tempdir().unwrap();
        let ws = fixture(dir.path());
        super::episodes::write_episode_files(&ws);
        let theme = Theme::load(name, None).unwrap();
        let mut app = App::new(theme.clone(), Keymap::default(), "fixture-ws");
        pump(&mut app, &ws);
        cmd(&mut app, &ws, Command::ViewEpisodes);
        cmd(&mut app, &ws, Command::Down);
        cmd(&mut app, &ws, Command::Select);
        // Trajectory, tests, then the replay tab.
        cmd(&mut app, &ws, Command::NextTab);
        cmd(&mut app, &ws, Command::NextTab);
        let (buf, x, y) = find(&mut app, "cat: No such file");
        assert_eq!(
            (buf[(x, y)].fg, buf[(x, y)].bg),
            (theme.foreground, theme.background),
            "{name}: replayed output"
        );
        // The blank cell after the recording's last column (40 wide).
        assert_eq!(buf[(x + 30, y)].bg, theme.background, "{name}: blank cell");
    }
}
