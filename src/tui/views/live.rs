//! The Live view: a grid of terminal panes (tui-term `PseudoTerminal` over
//! `vt100::Parser`s) fed with the byte stream of running sessions.

use std::time::Instant;

use crossterm::event::{MouseButton, MouseEvent, MouseEventKind};
use ratatui::layout::{Constraint, Layout, Position, Rect};
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders};
use ratatui::Frame;
use tui_term::widget::PseudoTerminal;

use crate::tui::keymap::Command;
use crate::tui::theme::Theme;
use crate::tui::widgets::empty::draw_empty;

/// Scrollback kept per pane.
const SCROLLBACK: usize = 1000;

/// One live session.
pub struct LivePane {
    pub title: String,
    /// The terminal emulator the session's bytes are fed into.
    pub parser: vt100::Parser,
    pub turn: u32,
    pub last_command: String,
    pub started: Instant,
    pub policy: String,
}

impl std::fmt::Debug for LivePane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LivePane")
            .field("title", &self.title)
            .field("turn", &self.turn)
            .field("last_command", &self.last_command)
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}

impl LivePane {
    /// A pane emulating a `rows` x `cols` terminal (the session's PTY size).
    pub fn new(title: impl Into<String>, policy: impl Into<String>, rows: u16, cols: u16) -> Self {
        LivePane {
            title: title.into(),
            parser: vt100::Parser::new(rows.max(1), cols.max(1), SCROLLBACK),
            turn: 0,
            last_command: String::new(),
            started: Instant::now(),
            policy: policy.into(),
        }
    }

    /// Feed raw PTY bytes (any chunking; escape sequences may be split).
    pub fn feed(&mut self, bytes: &[u8]) {
        self.parser.process(bytes);
    }

    /// Resize the emulated terminal (when the session's PTY is resized).
    pub fn resize(&mut self, rows: u16, cols: u16) {
        self.parser.screen_mut().set_size(rows.max(1), cols.max(1));
    }

    /// The visible screen as text (for tests and logs).
    pub fn contents(&self) -> String {
        self.parser.screen().contents()
    }

    fn header(&self, theme: &Theme) -> Line<'static> {
        let mut spans = vec![
            Span::styled(format!(" {} ", self.title), theme.accent()),
            Span::styled(format!("turn {} ", self.turn), theme.muted()),
            Span::styled(format!("{} ", self.policy), Style::new().fg(theme.warning)),
        ];
        if !self.last_command.is_empty() {
            let cmd: String = self
                .last_command
                .lines()
                .next()
                .unwrap_or("")
                .chars()
                .take(60)
                .collect();
            spans.push(Span::styled(
                format!("$ {cmd} "),
                Style::new().fg(theme.foreground),
            ));
        }
        Line::from(spans)
    }
}

/// The grid of panes, the selection and the zoom.
#[derive(Debug, Default)]
pub struct LiveView {
    pub panes: Vec<LivePane>,
    pub selected: usize,
    pub zoomed: bool,
    areas: Vec<Rect>,
}

/// `(columns, rows)` of a grid for `n` panes.
pub fn grid_shape(n: usize) -> (usize, usize) {
    if n == 0 {
        return (0, 0);
    }
    let cols = (n as f64).sqrt().ceil() as usize;
    let rows = n.div_ceil(cols);
    (cols, rows)
}

impl LiveView {
    /// Add a pane; returns its index.
    pub fn open(&mut self, title: String, policy: String, rows: u16, cols: u16) -> usize {
        self.panes.push(LivePane::new(title, policy, rows, cols));
        self.panes.len() - 1
    }

    /// Apply a command.
    pub fn command(&mut self, cmd: Command) {
        let n = self.panes.len();
        if n == 0 {
            return;
        }
        let (cols, _) = grid_shape(n);
        match cmd {
            Command::Select => self.zoomed = !self.zoomed,
            Command::Back => self.zoomed = false,
            Command::Left => self.selected = self.selected.saturating_sub(1),
            Command::Right => self.selected = (self.selected + 1).min(n - 1),
            Command::Up => self.selected = self.selected.saturating_sub(cols),
            Command::Down if self.selected + cols < n => self.selected += cols,
            Command::Top => self.selected = 0,
            Command::Bottom => self.selected = n - 1,
            _ => {}
        }
    }

    /// Click selects a pane, a second click zooms.
    pub fn mouse(&mut self, m: MouseEvent) {
        if let MouseEventKind::Down(MouseButton::Left) = m.kind {
            let pos = Position::new(m.column, m.row);
            if let Some(i) = self.areas.iter().position(|r| r.contains(pos)) {
                if self.zoomed {
                    return;
                }
                if i == self.selected {
                    self.zoomed = true;
                }
                self.selected = i;
            }
        }
    }

    /// Draw the grid (or the zoomed pane).
    pub fn draw(&mut self, frame: &mut Frame<'_>, area: Rect, theme: &Theme) {
        self.areas.clear();
        if self.panes.is_empty() {
            draw_empty(
                frame,
                area,
                theme,
                "No live sessions",
                &[
                    "While evaluation, generation or a single run is in progress, each",
                    "episode's terminal appears here as a pane: what the agent typed and",
                    "what the shell printed, live, with the turn and the last command.",
                    "",
                    "Start one with `endless eval --policy oracle` or `endless run TASK`.",
                    "Enter zooms the selected pane; arrows / hjkl move between panes.",
                ],
            );
            return;
        }
        self.selected = self.selected.min(self.panes.len() - 1);
        if self.zoomed {
            self.areas.push(area);
            draw_pane(frame, area, &self.panes[self.selected], theme, true);
            return;
        }
        let (cols, rows) = grid_shape(self.panes.len());
        let row_areas = Layout::vertical(vec![Constraint::Fill(1); rows]).split(area);
        for (r, row_area) in row_areas.iter().enumerate() {
            let cells = Layout::horizontal(vec![Constraint::Fill(1); cols]).split(*row_area);
            for (c, cell) in cells.iter().enumerate() {
                let i = r * cols + c;
                if let Some(p) = self.panes.get(i) {
                    self.areas.push(*cell);
                    draw_pane(frame, *cell, p, theme, i == self.selected);
                }
            }
        }
    }
}

fn draw_pane(frame: &mut Frame<'_>, area: Rect, pane: &LivePane, theme: &Theme, selected: bool) {
    let block = Block::default()
        .borders(Borders::ALL)
        .border_style(if selected {
            Style::new().fg(theme.accent)
        } else {
            theme.muted()
        })
        .title(pane.header(theme));
    let term = PseudoTerminal::new(pane.parser.screen())
        .block(block)
        .style(Style::new().fg(theme.foreground).bg(theme.background));
    frame.render_widget(term, area);
}
