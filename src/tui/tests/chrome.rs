//! The screen's first and last lines at 80x24, 120x40 and 200x60: the
//! workspace path is whole where it fits and otherwise keeps its last
//! components whole; the footer shows whole hints only, giving up the
//! least important ones first and always keeping `? keys` and `q quit`.

use super::*;
use crate::tui::views::help_groups::footer;

const SIZES: [(u16, u16); 3] = [(80, 24), (120, 40), (200, 60)];

const LONG_PATH: &str = "/home/alice/projects/reinforcement/endless-workspace-2026";

fn lines(app: &mut App, w: u16, h: u16) -> Vec<String> {
    let mut t = Terminal::new(TestBackend::new(w, h)).unwrap();
    t.draw(|f| app.draw(f)).unwrap();
    let buf = t.backend().buffer();
    (0..h)
        .map(|y| {
            (0..w)
                .map(|x| buf[(x, y)].symbol().to_string())
                .collect::<String>()
                .trim_end()
                .to_string()
        })
        .collect()
}

#[test]
fn the_workspace_path_is_whole_where_it_fits_and_shortened_by_components() {
    let dir = tempfile::tempdir().unwrap();
    let ws = fixture(dir.path());
    let mut app = App::new(Theme::default(), Keymap::default(), LONG_PATH);
    pump(&mut app, &ws);
    let mut tops = Vec::new();
    for (w, h) in SIZES {
        let top = lines(&mut app, w, h).remove(0);
        tops.push(format!("{w:>3}: {top}"));
        if w >= 120 {
            assert!(top.contains(LONG_PATH), "{w} columns: {top}");
        } else {
            // Shortened, but the last component is whole and no other
            // component is cut.
            assert!(top.contains("…/endless-workspace-2026"), "{top}");
            let shown = top.split_whitespace().rev().nth(2).unwrap();
            for part in shown.split('/').filter(|p| !p.is_empty() && *p != "…") {
                assert!(
                    LONG_PATH.split('/').any(|whole| whole == part),
                    "{part:?} is cut in {top}"
                );
            }
        }
    }
    insta::assert_snapshot!("workspace_path_80_120_200", tops.join("\n"));
}

#[test]
fn footer_hints_are_whole_at_every_width() {
    let dir = tempfile::tempdir().unwrap();
    let ws = fixture(dir.path());
    let mut app = app_on(&ws);
    let mut shown = Vec::new();
    for view in [
        Command::ViewTasks,
        Command::ViewLive,
        Command::ViewEpisodes,
        Command::ViewJobs,
        Command::ViewTraining,
    ] {
        cmd(&mut app, &ws, view);
        let view = app.view;
        let hints: Vec<String> = footer(&app.keymap, app.help_context())
            .into_iter()
            .map(|(key, what)| format!("{key} {what}"))
            .collect();
        for (w, h) in SIZES {
            let bottom = lines(&mut app, w, h).pop().unwrap();
            // Every hint shown is one of the view's, whole, in order.
            let parts: Vec<&str> = bottom.split("  ").collect();
            let mut rest = hints.iter();
            for part in &parts {
                assert!(
                    rest.any(|h| h == part),
                    "{view:?} at {w} columns: {part:?} is not a whole hint: {bottom:?}"
                );
            }
            assert!(bottom.starts_with("? keys"), "{bottom}");
            assert!(bottom.ends_with("q quit"), "{bottom}");
            shown.push(format!("{view:?} {w:>3}: {bottom}"));
        }
    }
    insta::assert_snapshot!("footer_80_120_200", shown.join("\n"));
}
