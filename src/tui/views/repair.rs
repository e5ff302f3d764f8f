//! The repair review, open over the Tasks view: a task's repaired version
//! against the version it was made from, as a diff per file (instruction,
//! environment, tests, solution) on the left and the reasons it was
//! repaired for on the right. The app routes its keys: `a` accepts the
//! repair, `r` discards it (the parent version is current again), esc
//! closes it, the movement keys scroll the diff.

use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Clear, Paragraph, Wrap};
use ratatui::Frame;

use crate::tui::keymap::{Command, Keymap};
use crate::tui::theme::Theme;
use crate::workbench::repair_review::RepairReview;

/// The open review and how far its diff is scrolled.
#[derive(Debug, Clone, PartialEq)]
pub struct RepairView {
    /// What is reviewed.
    pub review: RepairReview,
    /// Diff lines scrolled past.
    pub scroll: usize,
    /// Diff rows shown at the last draw (a page).
    page: usize,
}

impl RepairView {
    /// Open `review` at its top.
    pub fn new(review: RepairReview) -> RepairView {
        RepairView {
            review,
            scroll: 0,
            page: 10,
        }
    }

    /// Scroll for a movement command; whether it was one.
    pub fn scroll_by(&mut self, cmd: Command) -> bool {
        let last = self.diff_lines(&Theme::default()).len().saturating_sub(1);
        self.scroll = match cmd {
            Command::Up => self.scroll.saturating_sub(1),
            Command::Down => self.scroll + 1,
            Command::PageUp => self.scroll.saturating_sub(self.page),
            Command::PageDown => self.scroll + self.page,
            Command::Top => 0,
            Command::Bottom => last,
            _ => return false,
        }
        .min(last);
        true
    }

    /// The diff pane's lines: each changed file's header, then its diff.
    pub fn diff_lines(&self, theme: &Theme) -> Vec<Line<'static>> {
        let r = &self.review;
        let mut out = Vec::new();
        if r.files.is_empty() {
            out.push(Line::from(Span::styled("No file changed.", theme.muted())));
        }
        for (n, f) in r.files.iter().enumerate() {
            if n > 0 {
                out.push(Line::from(""));
            }
            out.push(Line::from(Span::styled(
                format!("── {} ──", f.path),
                theme.accent().add_modifier(Modifier::BOLD),
            )));
            for l in &f.lines {
                let style = if l.starts_with("@@") || l.starts_with('(') || l.starts_with('…') {
                    theme.muted()
                } else if l.starts_with('+') {
                    theme.success()
                } else if l.starts_with('-') {
                    theme.failure()
                } else {
                    Style::new().fg(theme.foreground)
                };
                out.push(Line::from(Span::styled(l.replace('\t', "    "), style)));
            }
        }
        if r.unchanged > 0 {
            out.push(Line::from(""));
            out.push(Line::from(Span::styled(
                format!("{} file(s) unchanged", r.unchanged),
                theme.muted(),
            )));
        }
        out
    }

    /// The reasons pane's lines.
    fn reason_lines(&self, theme: &Theme) -> Vec<Line<'static>> {
        let r = &self.review;
        let mut out = Vec::new();
        if r.reasons.is_empty() {
            out.push(Line::from(Span::styled(
                "No reasons recorded.",
                theme.muted(),
            )));
        }
        for (n, reason) in r.reasons.iter().enumerate() {
            if n > 0 {
                out.push(Line::from(""));
            }
            out.push(Line::from(vec![
                Span::styled(
                    format!("({}) ", reason.source),
                    theme.warning().add_modifier(Modifier::BOLD),
                ),
                Span::styled(reason.summary.clone(), Style::new().fg(theme.foreground)),
            ]));
            for l in reason.evidence.lines().take(8) {
                out.push(Line::from(Span::styled(format!("  {l}"), theme.muted())));
            }
        }
        out
    }

    /// Draw over `area` (the body of the Tasks view).
    pub fn draw(&mut self, frame: &mut Frame<'_>, area: Rect, theme: &Theme, keymap: &Keymap) {
        let r = &self.review;
        frame.render_widget(Clear, area);
        let by = if r.model.is_empty() {
            String::new()
        } else {
            format!(" by {}", r.model)
        };
        let title = format!(
            " Repair of {}: version {} (from {}){by} ",
            r.id, r.version, r.parent
        );
        let keys = format!(
            " {} accept · {} discard (version {} again) · {} close ",
            keymap.hint(Command::Accept),
            keymap.hint(Command::Reject),
            r.parent,
            keymap.hint(Command::Back)
        );
        let block = Block::default()
            .borders(Borders::ALL)
            .border_style(theme.accent())
            .title(Span::styled(title, theme.accent()))
            .title_bottom(Span::styled(keys, theme.muted()))
            .style(theme.base());
        let inner = block.inner(area);
        frame.render_widget(block, area);
        let [left, right] =
            Layout::horizontal([Constraint::Percentage(62), Constraint::Percentage(38)])
                .areas(inner);
        self.page = left.height.saturating_sub(1).max(1) as usize;
        let diff = self.diff_lines(theme);
        let count = diff.len();
        self.scroll = self.scroll.min(count.saturating_sub(1));
        let shown: Vec<Line<'static>> = diff.into_iter().skip(self.scroll).collect();
        frame.render_widget(
            Paragraph::new(shown).block(
                Block::default()
                    .borders(Borders::RIGHT)
                    .border_style(theme.muted())
                    .title(Span::styled(
                        format!(
                            "diff: {} file(s) changed  {}/{}",
                            r.files.len(),
                            (self.scroll + 1).min(count),
                            count
                        ),
                        theme.muted(),
                    )),
            ),
            left,
        );
        frame.render_widget(
            Paragraph::new(self.reason_lines(theme))
                .block(Block::default().title(Span::styled(
                    format!(" reasons ({})", r.reasons.len()),
                    theme.muted(),
                )))
                .wrap(Wrap { trim: false }),
            right,
        );
    }
}
