//! The help overlay, generated from the keymap: the current view's keys
//! first, grouped ([`super::help_groups`]), then the keys that work
//! everywhere, then every command with its `[tui.keys]` name; `/` filters
//! it to the rows whose keys, name or description contain the text.

use crate::tui::action::Action;
use crate::tui::component::{Component, DrawContext};
use crossterm::event::{MouseEvent, MouseEventKind};
use ratatui::layout::{Constraint, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Clear, Paragraph};
use ratatui::Frame;

use super::help_groups::{groups, key_text, Group, HelpContext, EVERYWHERE};
use crate::tui::keymap::{Command, Keymap};
use crate::tui::theme::Theme;

/// Whether the overlay is open and how far it is scrolled.
#[derive(Debug, Default)]
pub struct HelpView {
    /// Shown over the screen.
    pub visible: bool,
    /// Lines scrolled past.
    pub scroll: u16,
    /// The view it was opened over (its keys come first).
    pub context: HelpContext,
    /// Only rows whose keys, name or description contain this
    /// (case-insensitive; empty: every row).
    pub filter: String,
}

/// Whether a row of `parts` matches `needle` (lowercased; empty: all).
fn matches(needle: &str, parts: &[&str]) -> bool {
    needle.is_empty() || parts.iter().any(|p| p.to_lowercase().contains(needle))
}

impl HelpView {
    /// Draw the overlay centred over `area`.
    pub fn draw(&mut self, frame: &mut Frame<'_>, area: Rect, theme: &Theme, keymap: &Keymap) {
        let needle = self.filter.to_lowercase();
        let mut lines = self.grouped_lines(theme, keymap, &needle);
        lines.extend(every_command_lines(theme, keymap, &needle));
        if lines.is_empty() {
            lines.push(Line::from(Span::styled(
                format!(
                    "No key matches {:?} ({} edits the search, esc clears it)",
                    self.filter,
                    keymap.hint(Command::Search)
                ),
                theme.muted(),
            )));
        }
        let width = area.width.saturating_sub(4).min(100);
        let height = area.height.saturating_sub(2).min(lines.len() as u16 + 2);
        let popup = area.centered(Constraint::Length(width), Constraint::Length(height));
        let max = (lines.len() as u16).saturating_sub(height.saturating_sub(2));
        self.scroll = self.scroll.min(max);
        frame.render_widget(Clear, popup);
        let hint = format!(
            " {}/{} scroll · {} search · any other key closes ",
            keymap.hint(Command::Down),
            keymap.hint(Command::Up),
            keymap.hint(Command::Search)
        );
        let title = if self.filter.is_empty() {
            format!(
                " Keys: {} first ([tui.keys] in config.toml) ",
                self.context.title()
            )
        } else {
            format!(" Keys matching {:?} ", self.filter)
        };
        let block = Block::default()
            .borders(Borders::ALL)
            .border_style(Style::new().fg(theme.accent))
            .title(Span::styled(title, theme.accent()))
            .title_bottom(Line::from(Span::styled(hint, theme.muted())).right_aligned())
            .style(theme.base());
        frame.render_widget(
            Paragraph::new(lines).block(block).scroll((self.scroll, 0)),
            popup,
        );
    }

    /// The current view's groups, then the keys that work everywhere (the
    /// rows matching `needle`, and the titles of groups with any).
    fn grouped_lines(&self, theme: &Theme, keymap: &Keymap, needle: &str) -> Vec<Line<'static>> {
        let view = self.context.title();
        let mut sections: Vec<(String, &Group)> = groups(self.context)
            .iter()
            .map(|g| (format!("{view}: {}", g.title), g))
            .collect();
        sections.push(("Everywhere".to_string(), &EVERYWHERE));
        let key_w = sections
            .iter()
            .flat_map(|(_, g)| g.entries.iter())
            .map(|e| key_text(keymap, e.key, true).chars().count())
            .max()
            .unwrap_or(4)
            .min(20);
        let mut lines = Vec::new();
        for (title, g) in sections {
            let rows: Vec<_> = g
                .entries
                .iter()
                .map(|e| (key_text(keymap, e.key, true), e))
                .filter(|(keys, e)| matches(needle, &[keys.as_str(), e.long, e.short]))
                .collect();
            if rows.is_empty() {
                continue;
            }
            lines.push(Line::from(Span::styled(
                format!("▌ {title}"),
                theme.accent().add_modifier(Modifier::BOLD),
            )));
            for (keys, e) in rows {
                lines.push(Line::from(vec![
                    Span::styled(format!("  {keys:>key_w$}  "), theme.accent()),
                    Span::styled(e.long.to_string(), Style::new().fg(theme.foreground)),
                ]));
            }
            lines.push(Line::from(""));
        }
        lines
    }
}

/// Every command with its keys and `[tui.keys]` name (those matching
/// `needle`).
fn every_command_lines(theme: &Theme, keymap: &Keymap, needle: &str) -> Vec<Line<'static>> {
    let rows: Vec<_> = keymap
        .help_rows()
        .into_iter()
        .filter(|(keys, name, desc)| matches(needle, &[keys.as_str(), name, desc]))
        .collect();
    if rows.is_empty() {
        return Vec::new();
    }
    let key_w = rows
        .iter()
        .map(|r| r.0.chars().count())
        .max()
        .unwrap_or(4)
        .min(20);
    let name_w = rows.iter().map(|r| r.1.len()).max().unwrap_or(4);
    let mut lines = vec![Line::from(Span::styled(
        "▌ Every command (its [tui.keys] name)",
        theme.accent().add_modifier(Modifier::BOLD),
    ))];
    lines.extend(rows.into_iter().map(|(keys, name, desc)| {
        Line::from(vec![
            Span::styled(format!("  {keys:>key_w$}  "), theme.accent()),
            Span::styled(format!("{name:<name_w$}  "), theme.muted()),
            Span::styled(desc.to_string(), Style::new().fg(theme.foreground)),
        ])
    }));
    lines
}

impl Component for HelpView {
    /// Up and down scroll; any other command closes the overlay.
    fn handle_command(&mut self, cmd: Command) -> Option<Action> {
        match cmd {
            Command::Up => self.scroll = self.scroll.saturating_sub(1),
            Command::Down => self.scroll = self.scroll.saturating_add(1),
            _ => self.visible = false,
        }
        None
    }

    /// The wheel scrolls; a click closes the overlay.
    fn handle_mouse(&mut self, event: MouseEvent) -> Option<Action> {
        match event.kind {
            MouseEventKind::ScrollDown => self.scroll = self.scroll.saturating_add(1),
            MouseEventKind::ScrollUp => self.scroll = self.scroll.saturating_sub(1),
            MouseEventKind::Down(_) => self.visible = false,
            _ => {}
        }
        None
    }

    fn draw(&mut self, frame: &mut Frame<'_>, area: Rect, ctx: &DrawContext<'_>) {
        HelpView::draw(self, frame, area, ctx.theme, ctx.keymap);
    }
}
