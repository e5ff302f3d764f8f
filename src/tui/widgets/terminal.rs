//! Terminal panes for people: [`MarkerFilter`] (the sandbox's own) takes
//! the exec protocol's internal end markers out of a session's byte stream,
//! [`Following`] shows the part of a `vt100` screen that holds the
//! newest output and the cursor when the pane is shorter than the session's
//! terminal, and [`paint_defaults`] gives the cells in the terminal's
//! default colours the theme's.

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::Color;
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

/// Paint the cells of `area` drawn in the terminal's default colours (a
/// `vt100` cell that sets none, and what is left blank) with `fg` and
/// `bg`, the theme's: a pane inside a painted theme then matches it, light
/// or dark, whatever the user's terminal's own colours. Colours the
/// session chose are kept; with `NO_COLOR` the terminal backend writes
/// none of them.
pub fn paint_defaults(buf: &mut Buffer, area: Rect, fg: Color, bg: Color) {
    let area = area.intersection(buf.area);
    for y in area.top()..area.bottom() {
        for x in area.left()..area.right() {
            let cell = &mut buf[(x, y)];
            if cell.fg == Color::Reset {
                cell.fg = fg;
            }
            if cell.bg == Color::Reset {
                cell.bg = bg;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ratatui::widgets::Widget;
    use tui_term::widget::PseudoTerminal;

    #[test]
    fn default_coloured_cells_take_the_themes_colours_and_chosen_ones_stay() {
        let mut p = vt100::Parser::new(3, 20, 0);
        // Plain text, then red on blue, then reverse video.
        p.process(b"plain \x1b[31;44mred\x1b[0m \x1b[7minv\x1b[0m");
        let area = Rect::new(0, 0, 20, 3);
        let mut buf = Buffer::empty(area);
        PseudoTerminal::new(p.screen()).render(area, &mut buf);
        // What tui-term leaves: the terminal's own default colours.
        assert_eq!(
            (buf[(0, 0)].fg, buf[(0, 0)].bg),
            (Color::Reset, Color::Reset)
        );
        let (fg, bg) = (Color::Rgb(1, 2, 3), Color::Rgb(250, 250, 250));
        paint_defaults(&mut buf, Rect::new(0, 0, 30, 3), fg, bg);
        assert_eq!((buf[(0, 0)].fg, buf[(0, 0)].bg), (fg, bg), "plain text");
        assert_eq!((buf[(19, 2)].fg, buf[(19, 2)].bg), (fg, bg), "blank cells");
        assert_eq!(
            (buf[(6, 0)].fg, buf[(6, 0)].bg),
            (Color::Indexed(1), Color::Indexed(4)),
            "the session's own colours"
        );
        // Reverse video swaps the theme's colours, as a terminal would.
        let inv = &buf[(10, 0)];
        assert_eq!(inv.symbol(), "i");
        assert_eq!((inv.fg, inv.bg), (fg, bg));
        assert!(inv.modifier.contains(ratatui::style::Modifier::REVERSED));
    }

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
