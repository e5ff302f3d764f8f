//! The empty state of a view: a title and a few lines of explanation.

use ratatui::layout::{Alignment, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Paragraph, Wrap};
use ratatui::Frame;

use crate::tui::theme::Theme;

/// Draw a bordered box with `title` and explanatory `lines`.
pub fn draw_empty(frame: &mut Frame<'_>, area: Rect, theme: &Theme, title: &str, lines: &[&str]) {
    let mut text = vec![
        Line::from(Span::styled(title.to_string(), theme.accent())),
        Line::from(""),
    ];
    text.extend(lines.iter().map(|l| Line::from(l.to_string())));
    let p = Paragraph::new(text)
        .block(
            Block::default()
                .borders(Borders::ALL)
                .border_style(theme.muted()),
        )
        .style(theme.base())
        .alignment(Alignment::Left)
        .wrap(Wrap { trim: false });
    frame.render_widget(p, area);
}
