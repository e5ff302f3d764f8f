//! Terminal panes for people: [`MarkerFilter`] (the sandbox's own) takes
//! the exec protocol's internal end markers out of a session's byte stream,
//! and [`Following`] shows the part of a `vt100` screen that holds the
//! newest output and the cursor when the pane is shorter than the session's
//! terminal.

use tui_term::widget::Screen;

pub use crate::sandbox::MarkerFilter;

/// A `vt100` screen seen through a window of `height` rows that follows
/// the newest output: the last written row and the cursor are always
/// inside. While the user scrolls back, the screen's own view is shown from
/// its top.
pub struct Following<'a> {
    screen: &'a vt100::Screen,
    top: u16,
}

impl<'a> Following<'a> {
    /// The window of `height` rows over `screen`.
    pub fn new(screen: &'a vt100::Screen, height: u16) -> Self {
        let top = if screen.scrollback() > 0 {
            0
        } else {
            let (rows, cols) = screen.size();
            let cursor = screen.cursor_position().0;
            let last = (0..rows)
                .rev()
                .find(|r| (0..cols).any(|c| screen.cell(*r, c).is_some_and(|x| x.has_contents())))
                .unwrap_or(0);
            let bottom = cursor.max(last);
            (bottom + 1).saturating_sub(height.max(1))
        };
        Following { screen, top }
    }

    /// The first screen row shown.
    pub fn top(&self) -> u16 {
        self.top
    }
}

impl Screen for Following<'_> {
    type C = vt100::Cell;

    fn cell(&self, row: u16, col: u16) -> Option<&Self::C> {
        self.screen.cell(row.checked_add(self.top)?, col)
    }

    fn hide_cursor(&self) -> bool {
        self.screen.hide_cursor()
    }

    fn cursor_position(&self) -> (u16, u16) {
        let (row, col) = <vt100::Screen as Screen>::cursor_position(self.screen);
        // Above the window: put it out of sight.
        (row.checked_sub(self.top).unwrap_or(u16::MAX), col)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn following_shows_the_newest_rows_and_the_cursor() {
        let mut p = vt100::Parser::new(48, 40, 100);
        for i in 1..=60 {
            p.process(format!("{i}\r\n").as_bytes());
        }
        let f = Following::new(p.screen(), 10);
        assert_eq!(f.top(), 38);
        assert_eq!(
            f.cell(8, 0).map(|c| c.contents()),
            Some("6"),
            "row 8 holds 60"
        );
        assert_eq!(Screen::cursor_position(&f), (9, 0));
    }
}
