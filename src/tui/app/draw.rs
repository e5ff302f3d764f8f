//! Drawing the screen: the tab bar (remembering where each tab is, for the
//! mouse), the focused component, the help overlay and open forms,
//! pickers and prompts, and the status line.

use ratatui::layout::{Constraint, Layout, Position, Rect};
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Paragraph, Tabs, Wrap};
use ratatui::Frame;

use super::{App, PromptKind, View};
use crate::tui::component::{Component, DrawContext};
use crate::tui::keymap::Command;
use crate::tui::views::help_groups::footer;
use crate::tui::widgets::text::shorten_path;

impl App {
    /// Draw the whole screen from state.
    pub fn draw(&mut self, frame: &mut Frame<'_>) {
        let area = frame.area();
        frame.render_widget(Paragraph::new("").style(self.theme.base()), area);
        let [top, body, bottom] = Layout::vertical([
            Constraint::Length(1),
            Constraint::Fill(1),
            Constraint::Length(self.status_rows(area.width)),
        ])
        .areas(area);
        self.draw_tabs(frame, top);
        let ctx = DrawContext {
            theme: &self.theme,
            keymap: &self.keymap,
        };
        let focused: &mut dyn Component = match self.view {
            View::Tasks => &mut self.tasks,
            View::Live => &mut self.live,
            View::Episodes => match self.inspector.as_mut() {
                Some(insp) => insp,
                None => &mut self.episodes,
            },
            View::Jobs => &mut self.jobs,
            View::Training => &mut self.training,
        };
        focused.draw(frame, body, &ctx);
        if let (View::Tasks, Some(review)) = (self.view, self.review.as_mut()) {
            review.draw(frame, body, &self.theme, &self.keymap);
        }
        self.draw_status(frame, bottom);
        if let Some((_, form)) = &self.form {
            form.draw(frame, body, &self.theme);
        }
        if let Some((_, picker)) = &self.picker {
            picker.draw(frame, body, &self.theme);
        }
        if self.help.visible {
            let ctx = DrawContext {
                theme: &self.theme,
                keymap: &self.keymap,
            };
            Component::draw(&mut self.help, frame, area, &ctx);
        }
    }

    fn draw_tabs(&mut self, frame: &mut Frame<'_>, area: Rect) {
        let t = &self.theme;
        // The active tab is bracketed, not only coloured.
        let titles: Vec<Line<'_>> = View::ALL
            .iter()
            .map(|v| {
                Line::from(if *v == self.view {
                    format!("[{}]", v.title())
                } else {
                    format!(" {} ", v.title())
                })
            })
            .collect();
        // Record each title's cells for mouse clicks: " " + title + " " + "|".
        self.tab_areas.clear();
        let mut x = area.x;
        for v in View::ALL {
            let w = v.title().len() as u16 + 2;
            let r = Rect::new(x, area.y, w.min(area.right().saturating_sub(x)), 1);
            self.tab_areas.push((r, v));
            x = x.saturating_add(w + 1);
        }
        let tabs = Tabs::new(titles)
            .select(self.view.index())
            .style(t.muted())
            .highlight_style(t.accent().bg(t.selection))
            .divider("|")
            .padding("", "");
        // The workspace path takes what the tabs leave.
        let tabs_width = x.saturating_sub(area.x);
        let right_width = area.width.saturating_sub(tabs_width);
        let [left, right] =
            Layout::horizontal([Constraint::Fill(1), Constraint::Length(right_width)]).areas(area);
        frame.render_widget(tabs, left);
        let help = format!("{} help ", self.keymap.hint(Command::Help));
        let room = (right_width as usize).saturating_sub(help.len() + 1);
        let label = shorten_path(&self.workspace_label, room);
        frame.render_widget(
            Paragraph::new(Line::from(vec![
                Span::styled(label, t.muted()),
                Span::raw(" "),
                Span::styled(help, t.accent()),
            ]))
            .right_aligned(),
            right,
        );
    }

    /// Rows the status line takes: a message wider than the screen wraps
    /// onto up to three rows (without a prompt open).
    fn status_rows(&self, width: u16) -> u16 {
        match (&self.status, &self.prompt) {
            (Some(m), None) => status_rows(&m.text, width),
            _ => 1,
        }
    }

    fn draw_status(&self, frame: &mut Frame<'_>, area: Rect) {
        let t = &self.theme;
        if let Some(p) = &self.prompt {
            let label = match p.kind {
                PromptKind::Search => "search: ",
                PromptKind::Tags => "tags (comma-separated): ",
                PromptKind::Note => "note: ",
                PromptKind::EpisodeNote => "episode note: ",
                PromptKind::EpisodeSearch => "search episodes: ",
                PromptKind::HelpSearch => "search keys: ",
            };
            let line = Line::from(vec![
                Span::styled(label, t.accent()),
                Span::styled(p.input.value.clone(), Style::new().fg(t.foreground)),
            ]);
            frame.render_widget(Paragraph::new(line), area);
            let x = area.x + label.len() as u16 + p.input.cursor() as u16;
            if x < area.right() {
                frame.set_cursor_position(Position::new(x, area.y));
            }
            return;
        }
        let line = match &self.status {
            Some(m) => Line::from(Span::styled(
                m.text.clone(),
                if m.error { t.failure() } else { t.success() },
            )),
            None => {
                // Every key of the view (but plain movement), from the
                // same table as the help overlay.
                let hints = footer(&self.keymap, self.help_context());
                let mut spans = Vec::new();
                for (i, (key, what)) in fit_hints(hints, area.width as usize)
                    .into_iter()
                    .enumerate()
                {
                    if i > 0 {
                        spans.push(Span::raw(HINT_GAP));
                    }
                    spans.push(Span::styled(key, t.accent()));
                    spans.push(Span::styled(format!(" {what}"), t.muted()));
                }
                Line::from(spans)
            }
        };
        let para = Paragraph::new(line);
        // A message wraps onto the rows it was given; the footer is cut.
        let para = if self.status.is_some() {
            para.wrap(Wrap { trim: false })
        } else {
            para
        };
        frame.render_widget(para, area);
    }
}

/// What separates two footer hints.
const HINT_GAP: &str = "  ";

/// The footer `hints` (`key`, what it does) that fit in `width` columns,
/// whole: the first (`? keys`) and the last (`q quit`) stay, and the others
/// give way from the end of the list, which holds the least used keys.
pub fn fit_hints<T: AsRef<str>>(mut hints: Vec<(String, T)>, width: usize) -> Vec<(String, T)> {
    let cols = |h: &(String, T)| h.0.chars().count() + 1 + h.1.as_ref().chars().count();
    let total = |hints: &[(String, T)]| {
        hints.iter().map(cols).sum::<usize>() + HINT_GAP.len() * hints.len().saturating_sub(1)
    };
    while total(&hints) > width && !hints.is_empty() {
        // The one before the last; once only the first and the last are
        // left, the last, then the first.
        let drop = if hints.len() > 2 {
            hints.len() - 2
        } else {
            hints.len() - 1
        };
        hints.remove(drop);
    }
    hints
}

/// Rows a status message of `text` needs at `width` columns: one, or as
/// many as it wraps onto, at most three.
pub fn status_rows(text: &str, width: u16) -> u16 {
    let w = width.max(1) as usize;
    let cols = text.chars().count();
    cols.div_ceil(w).clamp(1, 3) as u16
}

#[cfg(test)]
mod tests {
    use super::{fit_hints, status_rows};

    #[test]
    fn footer_hints_give_way_whole_from_the_end_keeping_keys_and_quit() {
        let hints = |v: &[(&str, &'static str)]| -> Vec<(String, &'static str)> {
            v.iter().map(|(k, w)| (k.to_string(), *w)).collect()
        };
        let all = hints(&[
            ("?", "keys"),
            ("a", "accept"),
            ("r", "reject"),
            ("q", "quit"),
        ]);
        // "? keys  a accept  r reject  q quit" is 34 columns.
        assert_eq!(fit_hints(all.clone(), 34), all);
        assert_eq!(
            fit_hints(all.clone(), 33),
            hints(&[("?", "keys"), ("a", "accept"), ("q", "quit")])
        );
        assert_eq!(
            fit_hints(all.clone(), 14),
            hints(&[("?", "keys"), ("q", "quit")])
        );
        assert_eq!(fit_hints(all.clone(), 13), hints(&[("?", "keys")]));
        assert!(fit_hints(all, 5).is_empty());
    }

    #[test]
    fn a_long_status_message_takes_up_to_three_rows() {
        assert_eq!(status_rows("", 80), 1);
        assert_eq!(status_rows(&"x".repeat(80), 80), 1);
        assert_eq!(status_rows(&"x".repeat(81), 80), 2);
        assert_eq!(status_rows(&"x".repeat(1000), 80), 3);
        assert_eq!(status_rows("abc", 0), 3);
    }
}
