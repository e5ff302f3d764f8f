//! The Live view: a grid of terminal panes (tui-term `PseudoTerminal` over
//! `vt100::Parser`s) fed with the byte stream of running sessions.

use crate::tui::action::Action;
use crate::tui::component::{Component, DrawContext};
use std::time::{Duration, Instant};

use crossterm::event::{KeyEvent, MouseButton, MouseEvent, MouseEventKind};
use ratatui::layout::{Constraint, Layout, Position, Rect};
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, BorderType, Borders, Paragraph};
use ratatui::Frame;
use tui_term::widget::{Cursor, PseudoTerminal};

use crate::sandbox::Prompt;
use crate::tui::action::LiveEvent;
use crate::tui::keymap::Command;
use crate::tui::takeover::TakeoverHandle;
use crate::tui::theme::Theme;
use crate::tui::widgets::columns::{cut_end, cut_middle};
use crate::tui::widgets::empty::draw_empty;
use crate::tui::widgets::shell_line::ShellLine;
use crate::tui::widgets::terminal::{paint_defaults, Following, MarkerFilter};

/// Why an episode ended without a result: neither a pass nor a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stopped {
    /// Its process is gone (killed, or quit mid-episode).
    Interrupted,
    /// Its job was cancelled: cut short, not counted, retried by a re-run.
    Cancelled,
    /// The stream of a remote node's session broke before its end.
    Lost,
}

impl Stopped {
    /// The word its pane and strip show.
    pub fn word(self) -> &'static str {
        match self {
            Stopped::Interrupted => "INTERRUPTED",
            Stopped::Cancelled => "CANCELLED",
            Stopped::Lost => "CONNECTION LOST",
        }
    }
}

/// Scrollback kept per pane.
const SCROLLBACK: usize = 1000;

/// Panes kept before the oldest finished episode panes are dropped.
pub const MAX_PANES: usize = 16;

/// One live session.
pub struct LivePane {
    /// `task#sample`.
    pub title: String,
    /// The terminal emulator the session's bytes are fed into.
    pub parser: vt100::Parser,
    /// The turn the agent is on.
    pub turn: u32,
    /// The last command it ran.
    pub last_command: String,
    /// When the pane opened (for the elapsed clock).
    pub started: Instant,
    /// The policy playing.
    pub policy: String,
    /// The episode this pane shows (`run/task/sample`), for keyed events.
    pub key: Option<String>,
    /// `Some(passed)` once the episode finished.
    pub outcome: Option<bool>,
    /// The failure mode of a failed episode (`wrong_output`, `timeout`, ...).
    pub failure: Option<String>,
    /// Why it ended without a result, if it did (`outcome` is then
    /// `Some(false)`, shown as neither a pass nor a failure).
    pub stopped: Option<Stopped>,
    /// Takes the protocol's end markers out of the stream.
    filter: MarkerFilter,
    /// How long it ran, frozen when it finished.
    pub finished_after: Option<Duration>,
    /// Lets the user type into the session.
    pub input: Option<TakeoverHandle>,
    /// Fed from the workspace's run files (another process), not by a job.
    pub watched: bool,
    /// What the user types while holding the session.
    pub line: ShellLine,
    /// The user took this session over at some point (its episode records
    /// it, and evaluations leave it out).
    pub took_over: bool,
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
            key: None,
            outcome: None,
            failure: None,
            stopped: None,
            filter: MarkerFilter::default(),
            finished_after: None,
            input: None,
            watched: false,
            line: ShellLine::default(),
            took_over: false,
        }
    }

    /// Feed raw PTY bytes (any chunking; escape sequences and end markers
    /// may be split). The exec protocol's end markers are never shown.
    pub fn feed(&mut self, bytes: &[u8]) {
        let shown = self.filter.push_bytes(bytes);
        self.parser.process(&shown);
    }

    /// Whether the user holds this pane's session.
    pub fn is_taken(&self) -> bool {
        self.input.as_ref().is_some_and(|h| h.is_taken())
    }

    /// Show a command the user ran on its own line, marked as theirs (the
    /// session's terminal does not echo; the session echoes the agent's
    /// commands itself), and follow the output again.
    pub fn echo(&mut self, command: &str) {
        let mid_line = self.parser.screen().cursor_position().1 > 0;
        let nl = if mid_line { "\r\n" } else { "" };
        let shown = format!("{nl}{}", Prompt::Human.echo(command));
        self.parser.process(shown.as_bytes());
        self.parser.screen_mut().set_scrollback(0);
    }

    /// Resize the emulated terminal (when the session's PTY is resized).
    pub fn resize(&mut self, rows: u16, cols: u16) {
        self.parser.screen_mut().set_size(rows.max(1), cols.max(1));
    }

    /// Scroll back (`up`) or forward by `rows` through the scrollback.
    pub fn scroll(&mut self, rows: isize) {
        let cur = self.parser.screen().scrollback() as isize;
        let next = (cur + rows).max(0) as usize;
        self.parser.screen_mut().set_scrollback(next);
    }

    /// Seconds since the session started (frozen once finished).
    pub fn elapsed(&self) -> Duration {
        self.finished_after
            .unwrap_or_else(|| self.started.elapsed())
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
        let secs = self.elapsed().as_secs();
        if self.key.is_some() {
            spans.push(Span::styled(
                format!("{}:{:02} ", secs / 60, secs % 60),
                theme.muted(),
            ));
        }
        match self.outcome {
            Some(true) => spans.push(Span::styled("PASSED ", theme.success())),
            Some(false) if self.stopped.is_some() => spans.push(Span::styled(
                format!("{} ", self.stopped.map_or("", Stopped::word)),
                theme.warning(),
            )),
            Some(false) => spans.push(Span::styled("FAILED ", theme.failure())),
            None => {}
        }
        if self.is_taken() {
            spans.push(Span::styled(
                "YOU HAVE THE SESSION (ctrl-] gives it back) ",
                theme.failure(),
            ));
        }
        let back = self.parser.screen().scrollback();
        if back > 0 {
            spans.push(Span::styled(format!("[-{back}] "), theme.warning()));
        }
        if !self.last_command.is_empty() {
            // Multi-line commands (heredocs) read better joined.
            let cmd = one_line(&self.last_command);
            spans.push(Span::styled(
                format!("$ {cmd} "),
                Style::new().fg(theme.foreground),
            ));
        }
        Line::from(spans)
    }

    /// The one-line summary of a finished pane in `width` cells: result,
    /// title, take-over and failure mode keep their place (a long title is
    /// shortened in the middle); turns, time and policy go first, then the
    /// last command, which is cut at the end.
    fn strip(&self, theme: &Theme, selected: bool, width: u16) -> Line<'static> {
        let secs = self.elapsed().as_secs();
        let mark = Span::styled(if selected { "▶ " } else { "  " }, theme.accent());
        let result = match self.outcome {
            Some(true) => Span::styled("✓ PASSED ", theme.success()),
            _ if self.stopped.is_some() => Span::styled(
                format!("⊘ {} ", self.stopped.map_or("", Stopped::word)),
                theme.warning(),
            ),
            _ => Span::styled("✗ FAILED ", theme.failure()),
        };
        let mut tail = Vec::new();
        if self.took_over {
            tail.push(Span::styled("✋ taken over ", theme.warning()));
        }
        if let Some(mode) = &self.failure {
            tail.push(Span::styled(format!("{mode} "), theme.failure()));
        }
        let meta = Span::styled(
            format!(
                "turn {} · {}:{:02} · {} ",
                self.turn,
                secs / 60,
                secs % 60,
                self.policy
            ),
            theme.muted(),
        );
        let width = width as usize;
        let fixed = mark.width() + result.width() + tail.iter().map(Span::width).sum::<usize>();
        // The title gets what the fixed parts leave (with its space).
        let title_room = width.saturating_sub(fixed).saturating_sub(1).max(4);
        let title = Span::styled(
            format!("{} ", cut_middle(&self.title, title_room as u16)),
            theme.accent(),
        );
        let mut spans = vec![mark, result, title];
        spans.extend(tail);
        let used: usize = spans.iter().map(Span::width).sum();
        let mut room = width.saturating_sub(used);
        if meta.width() <= room {
            room -= meta.width();
            spans.push(meta);
        }
        // The command, if a little of it fits.
        if !self.last_command.is_empty() && room >= 8 {
            let cmd = format!("$ {}", one_line(&self.last_command));
            spans.push(Span::styled(cut_end(&cmd, room as u16), theme.muted()));
        }
        Line::from(spans)
    }
}

/// A command on one line (heredocs and multi-line commands joined), at most
/// 80 characters.
fn one_line(cmd: &str) -> String {
    cmd.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("; ")
        .chars()
        .take(80)
        .collect()
}

/// The grid of panes, the selection and the zoom.
#[derive(Debug, Default)]
pub struct LiveView {
    /// Open panes: running ones newest first, then finished ones newest
    /// first (drawn as one-line summary strips below the grid).
    pub panes: Vec<LivePane>,
    /// The selected pane.
    pub selected: usize,
    /// The selected pane fills the view.
    pub zoomed: bool,
    areas: Vec<Rect>,
}

/// The episode an event is about.
fn ev_key(ev: &LiveEvent) -> &str {
    match ev {
        LiveEvent::Open { key, .. }
        | LiveEvent::Feed { key, .. }
        | LiveEvent::Step { key, .. }
        | LiveEvent::Finished { key, .. }
        | LiveEvent::Interrupted { key }
        | LiveEvent::Lost { key }
        | LiveEvent::Cancelled { key } => key,
        LiveEvent::Watched(ev) => ev_key(ev),
    }
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
    /// Add a pane first (newest sessions first); returns its index (0).
    /// The selection stays on the pane it was on.
    pub fn open(&mut self, title: String, policy: String, rows: u16, cols: u16) -> usize {
        if !self.panes.is_empty() {
            self.selected += 1;
        }
        self.panes
            .insert(0, LivePane::new(title, policy, rows, cols));
        0
    }

    /// Number of running (unfinished) panes; they come first.
    pub fn running(&self) -> usize {
        self.panes.iter().filter(|p| p.outcome.is_none()).count()
    }

    /// Move pane `from` to `to`, keeping the selection on its pane.
    fn move_pane(&mut self, from: usize, to: usize) {
        if from == to || from >= self.panes.len() {
            return;
        }
        let pane = self.panes.remove(from);
        let to = to.min(self.panes.len());
        self.panes.insert(to, pane);
        let s = self.selected;
        self.selected = if s == from {
            to
        } else if from < s && s <= to {
            s - 1
        } else if to <= s && s < from {
            s + 1
        } else {
            s
        };
    }

    /// Drop every finished pane (`x`).
    pub fn clear_finished(&mut self) -> usize {
        let before = self.panes.len();
        let selected_key = self.panes.get(self.selected).map(|p| p.title.clone());
        self.panes.retain(|p| p.outcome.is_none());
        self.selected = selected_key
            .and_then(|t| self.panes.iter().position(|p| p.title == t))
            .unwrap_or(0);
        if self.panes.is_empty() {
            self.zoomed = false;
        }
        before - self.panes.len()
    }

    /// Whether a pane for `key` is open.
    pub fn has_key(&self, key: &str) -> bool {
        self.panes.iter().any(|p| p.key.as_deref() == Some(key))
    }

    /// Apply a keyed event from a running episode.
    pub fn live_event(&mut self, ev: LiveEvent) {
        if let LiveEvent::Watched(ev) = ev {
            self.watched_event(*ev);
            return;
        }
        // A job of this TUI takes over a pane its files opened first.
        if let LiveEvent::Open {
            key,
            input,
            policy,
            title,
            ..
        } = &ev
        {
            if let Some(p) = self.by_key(key) {
                if p.watched {
                    p.watched = false;
                    p.input = input.clone();
                    p.policy = policy.clone();
                    p.title = title.clone();
                }
                return;
            }
        }
        if self.by_key(ev_key(&ev)).is_some_and(|p| p.watched) {
            return;
        }
        self.apply(ev);
    }

    /// An event found through the run files: opens a pane unless one is
    /// open for the episode, and feeds only the panes it opened.
    fn watched_event(&mut self, ev: LiveEvent) {
        let key = ev_key(&ev).to_string();
        match self.by_key(&key) {
            Some(p) if !p.watched => {}
            Some(_) => self.apply(ev),
            None if matches!(ev, LiveEvent::Open { .. }) => {
                self.apply(ev);
                if let Some(p) = self.by_key(&key) {
                    p.watched = true;
                }
            }
            None => {}
        }
    }

    fn apply(&mut self, ev: LiveEvent) {
        match ev {
            LiveEvent::Watched(ev) => self.watched_event(*ev),
            LiveEvent::Open {
                key,
                title,
                policy,
                rows,
                cols,
                input,
            } => {
                if self.has_key(&key) {
                    return;
                }
                // Keep the grid readable: drop the oldest finished episode panes.
                while self.panes.len() >= MAX_PANES {
                    match self.panes.iter().rposition(|p| p.outcome.is_some()) {
                        Some(i) => {
                            self.panes.remove(i);
                            if self.selected > i {
                                self.selected -= 1;
                            }
                            self.selected = self.selected.min(self.panes.len().saturating_sub(1));
                        }
                        None => break,
                    }
                }
                let i = self.open(title, policy, rows, cols);
                self.panes[i].key = Some(key);
                self.panes[i].input = input;
            }
            LiveEvent::Feed { key, bytes } => {
                if let Some(p) = self.by_key(&key) {
                    p.feed(&bytes);
                }
            }
            LiveEvent::Step { key, turn, command } => {
                if let Some(p) = self.by_key(&key) {
                    p.turn = turn;
                    // A `done` step has no command: keep the last one.
                    if !command.is_empty() {
                        p.last_command = command;
                    }
                }
            }
            LiveEvent::Finished {
                key,
                passed,
                failure,
            } => self.finish(&key, passed, failure, None),
            LiveEvent::Interrupted { key } => {
                self.finish(&key, false, None, Some(Stopped::Interrupted))
            }
            LiveEvent::Cancelled { key } => {
                self.finish(&key, false, None, Some(Stopped::Cancelled))
            }
            LiveEvent::Lost { key } => self.finish(&key, false, None, Some(Stopped::Lost)),
        }
    }

    /// The episode `key` ended: its pane stops its clock and moves to the
    /// finished strips (`stopped`: why it ended with no result).
    fn finish(
        &mut self,
        key: &str,
        passed: bool,
        failure: Option<String>,
        stopped: Option<Stopped>,
    ) {
        let Some(i) = self
            .panes
            .iter()
            .position(|p| p.key.as_deref() == Some(key))
        else {
            return;
        };
        let p = &mut self.panes[i];
        if p.outcome.is_some() {
            return;
        }
        if let Some(h) = &p.input {
            h.set_taken(false);
        }
        p.outcome = Some(passed);
        p.failure = failure;
        p.stopped = stopped;
        p.finished_after = Some(p.started.elapsed());
        // The newest finished pane heads the summary strips.
        let to = self.running();
        self.move_pane(i, to);
    }

    /// The selected pane's episode if it finished with a result, as
    /// `(run, task, sample)` (an interrupted one has the result recorded
    /// for it); why it cannot be opened if it ended without one; `None`
    /// while it runs (or with no pane).
    pub fn selected_finished(&self) -> Option<Result<(String, String, u32), String>> {
        let p = self.panes.get(self.selected)?;
        p.outcome?;
        if let Some(stopped) = p.stopped.filter(|s| *s != Stopped::Interrupted) {
            return Some(Err(format!(
                "{} was {}: it has no result to open (running the evaluation again retries it)",
                p.title,
                stopped.word().to_lowercase()
            )));
        }
        let parsed = p.key.as_deref().and_then(|k| {
            let (run, rest) = k.split_once('/')?;
            let (task, sample) = rest.rsplit_once('/')?;
            Some((run.to_string(), task.to_string(), sample.parse().ok()?))
        });
        Some(parsed.ok_or_else(|| format!("{} has no recorded episode to open", p.title)))
    }

    /// The pane the user has taken over, if any.
    pub fn taken(&self) -> Option<usize> {
        self.panes
            .iter()
            .position(|p| p.input.as_ref().is_some_and(|h| h.is_taken()))
    }

    /// Take over the zoomed pane's session.
    pub fn take_over(&mut self) -> Result<(), String> {
        if !self.zoomed {
            return Err("zoom a pane first (enter), then take it over".into());
        }
        let Some(p) = self.panes.get(self.selected) else {
            return Err("no live session".into());
        };
        match (&p.input, p.outcome) {
            (_, Some(_)) => Err("this episode has finished".into()),
            (None, _) => {
                Err("this session cannot be taken over (not started by a job here)".into())
            }
            (Some(h), None) => {
                h.set_taken(true);
                if let Some(p) = self.panes.get_mut(self.selected) {
                    p.took_over = true;
                }
                Ok(())
            }
        }
    }

    /// Give the taken-over session back to the agent.
    pub fn release(&mut self) {
        for p in &self.panes {
            if let Some(h) = &p.input {
                h.set_taken(false);
            }
        }
    }

    /// A key for the taken-over session's command line: edits the line
    /// (shown in the pane as it is typed); Enter echoes it in the pane and
    /// runs it in the session. Returns the command run, if any.
    pub fn type_key(&mut self, key: &KeyEvent) -> Option<String> {
        let p = self.panes.iter_mut().find(|p| p.is_taken())?;
        let command = p.line.key(key)?;
        p.echo(&command);
        if let Some(h) = &p.input {
            h.submit(command.clone());
        }
        Some(command)
    }

    /// Scroll the taken-over pane (page up / down while typing).
    pub fn scroll_taken(&mut self, up: bool) {
        if let Some(p) = self.panes.iter_mut().find(|p| p.is_taken()) {
            let page = (p.parser.screen().size().0 / 2).max(1) as isize;
            p.scroll(if up { page } else { -page });
        }
    }

    fn by_key(&mut self, key: &str) -> Option<&mut LivePane> {
        self.panes
            .iter_mut()
            .find(|p| p.key.as_deref() == Some(key))
    }

    /// Apply a command.
    pub fn command(&mut self, cmd: Command) {
        let n = self.panes.len();
        if n == 0 {
            return;
        }
        let page = self
            .panes
            .get(self.selected)
            .map_or(10, |p| (p.parser.screen().size().0 / 2).max(1) as isize);
        let (cols, _) = grid_shape(self.running());
        let cols = cols.max(1);
        match cmd {
            Command::ClearFilters => {
                self.clear_finished();
            }
            Command::Select => self.zoomed = !self.zoomed,
            Command::Back => self.zoomed = false,
            Command::Left => self.selected = self.selected.saturating_sub(1),
            Command::Right => self.selected = (self.selected + 1).min(n - 1),
            Command::Up => self.selected = self.selected.saturating_sub(cols),
            Command::Down if self.selected + cols < n => self.selected += cols,
            Command::Top => self.selected = 0,
            Command::Bottom => self.selected = n - 1,
            Command::PageUp => {
                if let Some(p) = self.panes.get_mut(self.selected) {
                    p.scroll(page);
                }
            }
            Command::PageDown => {
                if let Some(p) = self.panes.get_mut(self.selected) {
                    p.scroll(-page);
                }
            }
            _ => {}
        }
    }

    /// Click selects a pane, a second click zooms.
    pub fn mouse(&mut self, m: MouseEvent) {
        let wheel = match m.kind {
            MouseEventKind::ScrollUp => 3,
            MouseEventKind::ScrollDown => -3,
            _ => 0,
        };
        if wheel != 0 {
            if let Some(p) = self.panes.get_mut(self.selected) {
                p.scroll(wheel);
            }
            return;
        }
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
                    "Episodes of `endless run`, `eval` and `serve` started in other",
                    "terminals on this workspace appear too.",
                    "Start an evaluation from the Jobs view (F4, then E).",
                    "Enter zooms the selected pane; arrows / hjkl move between panes;",
                    "page up / page down scroll back; x clears finished panes.",
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
        let running = self.running();
        let finished = self.panes.len() - running;
        // Finished panes collapse to one summary line each, below the grid.
        let max_strips = if running == 0 {
            area.height as usize
        } else {
            (area.height as usize / 3).max(1)
        };
        let strip_rows = finished.min(max_strips);
        let [grid, strips] =
            Layout::vertical([Constraint::Fill(1), Constraint::Length(strip_rows as u16)])
                .areas(area);
        if running == 0 {
            self.areas.clear();
        } else {
            let (cols, rows) = grid_shape(running);
            let row_areas = Layout::vertical(vec![Constraint::Fill(1); rows]).split(grid);
            for (r, row_area) in row_areas.iter().enumerate() {
                let cells = Layout::horizontal(vec![Constraint::Fill(1); cols]).split(*row_area);
                for (c, cell) in cells.iter().enumerate() {
                    let i = r * cols + c;
                    if i < running {
                        self.areas.push(*cell);
                        draw_pane(frame, *cell, &self.panes[i], theme, i == self.selected);
                    }
                }
            }
        }
        for k in 0..strip_rows {
            let i = running + k;
            let line_area = Rect::new(strips.x, strips.y + k as u16, strips.width, 1);
            self.areas.push(line_area);
            let line = if k + 1 == strip_rows && finished > strip_rows {
                Line::from(Span::styled(
                    format!(
                        "  +{} more finished · x clears finished panes",
                        finished - strip_rows + 1
                    ),
                    theme.muted(),
                ))
            } else {
                self.panes[i].strip(theme, i == self.selected, line_area.width)
            };
            frame.render_widget(line, line_area);
        }
    }
}

fn draw_pane(frame: &mut Frame<'_>, area: Rect, pane: &LivePane, theme: &Theme, selected: bool) {
    let taken = pane.is_taken();
    // The selected pane shows by more than colour: a thick border.
    let block = Block::default()
        .borders(Borders::ALL)
        .border_type(if selected || taken {
            BorderType::Thick
        } else {
            BorderType::Plain
        })
        .border_style(if taken {
            theme.failure()
        } else if selected {
            Style::new().fg(theme.accent)
        } else {
            theme.muted()
        })
        .title(pane.header(theme));
    let inner = block.inner(area);
    frame.render_widget(block, area);
    // A taken-over pane keeps its last row for the user's command line.
    let (screen_area, line_area) = if taken && inner.height >= 2 {
        let [s, l] = Layout::vertical([Constraint::Fill(1), Constraint::Length(1)]).areas(inner);
        (s, Some(l))
    } else {
        (inner, None)
    };
    // Follow the newest output: the session's terminal is usually taller
    // than the pane, so show the rows that end at the cursor / last line.
    let screen = Following::new(pane.parser.screen(), screen_area.height);
    let term = PseudoTerminal::new(&screen)
        .cursor(Cursor::default().visibility(!taken))
        .style(Style::new().fg(theme.foreground).bg(theme.background));
    frame.render_widget(term, screen_area);
    paint_defaults(
        frame.buffer_mut(),
        screen_area,
        theme.foreground,
        theme.background,
    );
    if let Some(line_area) = line_area {
        draw_command_line(frame, line_area, pane, theme);
    }
}

/// The taken-over pane's command line: `you$ ` and what is typed, with the
/// cursor; commands still waiting for the session are counted after it.
fn draw_command_line(frame: &mut Frame<'_>, area: Rect, pane: &LivePane, theme: &Theme) {
    let prompt = Prompt::Human.text();
    let input = &pane.line.input;
    let mut spans = vec![
        Span::styled(prompt, theme.warning()),
        Span::styled(input.value.clone(), Style::new().fg(theme.foreground)),
    ];
    let queued = pane.input.as_ref().map_or(0, |h| h.queued());
    if queued > 0 {
        spans.push(Span::styled(
            format!("   [{queued} running or queued: the agent's command finishes first]"),
            theme.muted(),
        ));
    }
    frame.render_widget(Paragraph::new(Line::from(spans)).style(theme.base()), area);
    let x = area.x + (prompt.len() + input.cursor()) as u16;
    if x < area.right() {
        frame.set_cursor_position(Position::new(x, area.y));
    }
}

impl Component for LiveView {
    fn handle_command(&mut self, cmd: Command) -> Option<Action> {
        self.command(cmd);
        None
    }

    fn handle_mouse(&mut self, event: MouseEvent) -> Option<Action> {
        self.mouse(event);
        None
    }

    fn update(&mut self, action: Action) -> Option<Action> {
        if let Action::Live(ev) = action {
            self.live_event(ev);
        }
        None
    }

    fn draw(&mut self, frame: &mut Frame<'_>, area: Rect, ctx: &DrawContext<'_>) {
        LiveView::draw(self, frame, area, ctx.theme);
    }
}
