//! The help overlay: every command and its keys, generated from the keymap.

use crate::tui::action::Action;
use crate::tui::component::{Component, DrawContext};
use crossterm::event::{MouseEvent, MouseEventKind};
use ratatui::layout::{Constraint, Rect};
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Clear, Paragraph};
use ratatui::Frame;

use crate::tui::keymap::{Command, Keymap};
use crate::tui::theme::Theme;

/// Whether the overlay is open and how far it is scrolled.
#[derive(Debug, Default)]
pub struct HelpView {
    /// Shown over the screen.
    pub visible: bool,
    /// Lines scrolled past.
    pub scroll: u16,
}

impl HelpView {
    /// Draw the overlay centred over `area`.
    pub fn draw(&mut self, frame: &mut Frame<'_>, area: Rect, theme: &Theme, keymap: &Keymap) {
        let rows = keymap.help_rows();
        let key_w = rows
            .iter()
            .map(|r| r.0.chars().count())
            .max()
            .unwrap_or(4)
            .min(20);
        let name_w = rows.iter().map(|r| r.1.len()).max().unwrap_or(4);
        let lines: Vec<Line<'static>> = rows
            .into_iter()
            .map(|(keys, name, desc)| {
                Line::from(vec![
                    Span::styled(format!("{keys:>key_w$}  "), theme.accent()),
                    Span::styled(format!("{name:<name_w$}  "), theme.muted()),
                    Span::styled(desc.to_string(), Style::new().fg(theme.foreground)),
                ])
            })
            .collect();
        let width = area.width.saturating_sub(4).min(100);
        let height = area.height.saturating_sub(2).min(lines.len() as u16 + 2);
        let popup = area.centered(Constraint::Length(width), Constraint::Length(height));
        let max = (lines.len() as u16).saturating_sub(height.saturating_sub(2));
        self.scroll = self.scroll.min(max);
        frame.render_widget(Clear, popup);
        let hint = format!(
            " {}/{} scroll · any other key closes ",
            keymap.hint(Command::Down),
            keymap.hint(Command::Up)
        );
        let block = Block::default()
            .borders(Borders::ALL)
            .border_style(Style::new().fg(theme.accent))
            .title(Span::styled(
                " Keys ([tui.keys] in config.toml) ",
                theme.accent(),
            ))
            .title_bottom(Line::from(Span::styled(hint, theme.muted())).right_aligned())
            .style(theme.base());
        frame.render_widget(
            Paragraph::new(lines).block(block).scroll((self.scroll, 0)),
            popup,
        );
    }
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
