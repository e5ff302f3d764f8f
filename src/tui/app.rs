//! Application state, the `Action` enum and the top-level component.
//!
//! `App` never does I/O: keys and mouse events become [`Action`]s, `update`
//! changes state and queues [`Request`]s in `outbox`, which the event loop
//! hands to the store worker (or, for the editor, handles itself). Results
//! come back as Actions.

use std::path::PathBuf;

use crossterm::event::{KeyEvent, MouseButton, MouseEvent, MouseEventKind};
use ratatui::layout::{Constraint, Layout, Position, Rect};
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Paragraph, Tabs};
use ratatui::Frame;

use super::keymap::{Command, Keymap};
use super::theme::Theme;
use super::views::episodes::EpisodesView;
use super::views::help::HelpView;
use super::views::live::LiveView;
use super::views::tasks::TasksView;
use super::views::{jobs, training};
use super::widgets::input::{InputOutcome, TextInput};
use crate::store::{EpisodeRow, TaskRow, TaskStatus};
use crate::task::Task;

/// The top-level views, shown as tabs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum View {
    Tasks,
    Live,
    Episodes,
    Jobs,
    Training,
}

impl View {
    /// All views in tab order.
    pub const ALL: [View; 5] = [
        View::Tasks,
        View::Live,
        View::Episodes,
        View::Jobs,
        View::Training,
    ];

    /// Tab title.
    pub fn title(self) -> &'static str {
        match self {
            View::Tasks => "Tasks",
            View::Live => "Live",
            View::Episodes => "Episodes",
            View::Jobs => "Jobs",
            View::Training => "Training",
        }
    }

    fn index(self) -> usize {
        View::ALL.iter().position(|v| *v == self).unwrap_or(0)
    }
}

/// Everything that changes the state: user commands, input, and results
/// from background work.
#[derive(Debug)]
pub enum Action {
    /// A bound command.
    Command(Command),
    /// A key while a text prompt is open.
    PromptKey(KeyEvent),
    /// A mouse event.
    Mouse(MouseEvent),
    /// The terminal was resized (ratatui re-lays out on the next draw).
    Resize(u16, u16),
    /// All task rows from the store.
    TasksLoaded(Vec<TaskRow>),
    /// One task's bundle and its episodes.
    TaskLoaded(Box<Task>, Vec<EpisodeRow>),
    /// One row changed (after curation).
    TaskRowUpdated(Box<TaskRow>),
    /// All episodes from the store.
    EpisodesLoaded(Vec<EpisodeRow>),
    /// Open a live pane (the lead connects sandbox sessions to these).
    LiveOpen {
        title: String,
        policy: String,
        rows: u16,
        cols: u16,
    },
    /// Bytes from a live session's PTY.
    LiveFeed { pane: usize, bytes: Vec<u8> },
    /// A live session started turn `turn` with `command`.
    LiveTurn {
        pane: usize,
        turn: u32,
        command: String,
    },
    /// Result of "validate now": `Ok(summary)` or `Err(message)`.
    Validated {
        id: String,
        result: Result<String, String>,
    },
    /// An informational message for the status line.
    Info(String),
    /// An error for the status line.
    Error(String),
}

/// Work for the event loop / store worker.
#[derive(Debug, Clone, PartialEq)]
pub enum Request {
    LoadTasks,
    LoadTask(String),
    LoadEpisodes,
    SetStatus(String, TaskStatus),
    SetRating(String, Option<u8>),
    SetTags(String, Vec<String>),
    SetNotes(String, String),
    /// Validate a task (the sandbox validator; see `tui::validate`).
    Validate(String),
    /// Open `tasks/<id>/<file>` in `$EDITOR`, then reload the task.
    OpenEditor {
        id: String,
        file: PathBuf,
    },
}

/// What an open prompt edits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PromptKind {
    Search,
    Tags,
    Note,
}

/// An open one-line prompt.
#[derive(Debug, Clone)]
pub struct Prompt {
    pub kind: PromptKind,
    pub input: TextInput,
    /// Task the prompt edits (tags, note).
    pub task: Option<String>,
}

/// A message in the status line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusMsg {
    pub text: String,
    pub error: bool,
}

/// The whole UI state.
pub struct App {
    pub theme: Theme,
    pub keymap: Keymap,
    pub view: View,
    pub tasks: TasksView,
    pub live: LiveView,
    pub episodes: EpisodesView,
    pub help: HelpView,
    pub prompt: Option<Prompt>,
    pub status: Option<StatusMsg>,
    /// Shown in the top bar (the workspace path).
    pub workspace_label: String,
    /// Requests queued by `update` for the event loop.
    pub outbox: Vec<Request>,
    pub should_quit: bool,
    tab_areas: Vec<(Rect, View)>,
}

impl App {
    /// A fresh app; the caller queues the initial loads.
    pub fn new(theme: Theme, keymap: Keymap, workspace_label: impl Into<String>) -> App {
        App {
            theme,
            keymap,
            view: View::Tasks,
            tasks: TasksView::default(),
            live: LiveView::default(),
            episodes: EpisodesView::default(),
            help: HelpView::default(),
            prompt: None,
            status: None,
            workspace_label: workspace_label.into(),
            outbox: vec![Request::LoadTasks, Request::LoadEpisodes],
            should_quit: false,
            tab_areas: Vec::new(),
        }
    }

    /// Map a key to an action: prompt keys go to the prompt, others
    /// through the keymap.
    pub fn handle_key(&self, key: KeyEvent) -> Option<Action> {
        if self.prompt.is_some() {
            return Some(Action::PromptKey(key));
        }
        self.keymap.lookup(&key).map(Action::Command)
    }

    /// Apply an action.
    pub fn update(&mut self, action: Action) {
        match action {
            Action::Command(cmd) => self.command(cmd),
            Action::PromptKey(key) => self.prompt_key(key),
            Action::Mouse(m) => self.mouse(m),
            Action::Resize(..) => {}
            Action::TasksLoaded(rows) => {
                let sel = self.tasks.set_rows(rows);
                self.load_selected(sel);
            }
            Action::TaskLoaded(task, eps) => self.tasks.detail.set_task(*task, eps),
            Action::TaskRowUpdated(row) => self.tasks.update_row(*row),
            Action::EpisodesLoaded(rows) => self.episodes.set_rows(rows),
            Action::LiveOpen {
                title,
                policy,
                rows,
                cols,
            } => {
                self.live.open(title, policy, rows, cols);
            }
            Action::LiveFeed { pane, bytes } => {
                if let Some(p) = self.live.panes.get_mut(pane) {
                    p.feed(&bytes);
                }
            }
            Action::LiveTurn {
                pane,
                turn,
                command,
            } => {
                if let Some(p) = self.live.panes.get_mut(pane) {
                    p.turn = turn;
                    p.last_command = command;
                }
            }
            Action::Validated { id, result } => match result {
                Ok(s) => self.info(format!("{id}: {s}")),
                Err(e) => self.error(format!("{id}: {e}")),
            },
            Action::Info(s) => self.info(s),
            Action::Error(s) => self.error(s),
        }
    }

    fn info(&mut self, text: String) {
        self.status = Some(StatusMsg { text, error: false });
    }

    fn error(&mut self, text: String) {
        self.status = Some(StatusMsg { text, error: true });
    }

    fn load_selected(&mut self, id: Option<String>) {
        if let Some(id) = id {
            if self.tasks.detail.wants(&id) {
                self.outbox.push(Request::LoadTask(id));
            }
        }
    }

    fn command(&mut self, cmd: Command) {
        if self.help.visible {
            match cmd {
                Command::Up => self.help.scroll = self.help.scroll.saturating_sub(1),
                Command::Down => self.help.scroll = self.help.scroll.saturating_add(1),
                Command::Quit => self.should_quit = true,
                _ => self.help.visible = false,
            }
            return;
        }
        self.status = None;
        match cmd {
            Command::Quit => self.should_quit = true,
            Command::Help => {
                self.help.visible = true;
                self.help.scroll = 0;
            }
            Command::NextView => self.view = View::ALL[(self.view.index() + 1) % View::ALL.len()],
            Command::PrevView => {
                self.view = View::ALL[(self.view.index() + View::ALL.len() - 1) % View::ALL.len()]
            }
            Command::ViewTasks => self.view = View::Tasks,
            Command::ViewLive => self.view = View::Live,
            Command::ViewEpisodes => self.view = View::Episodes,
            Command::ViewJobs => self.view = View::Jobs,
            Command::ViewTraining => self.view = View::Training,
            Command::Reload => {
                self.outbox.push(Request::LoadTasks);
                self.outbox.push(Request::LoadEpisodes);
                if let Some(id) = self.tasks.selected_id() {
                    self.outbox.push(Request::LoadTask(id));
                }
                self.info("reloading".into());
            }
            _ => match self.view {
                View::Tasks => self.tasks_command(cmd),
                View::Live => self.live.command(cmd),
                View::Episodes => self.episodes_command(cmd),
                View::Jobs | View::Training => {}
            },
        }
    }

    fn episodes_command(&mut self, cmd: Command) {
        if cmd != Command::Select {
            self.episodes.command(cmd);
            return;
        }
        // Enter on an episode opens its task's Episodes tab.
        let Some(task) = self.episodes.selected_row().map(|e| e.task_id.clone()) else {
            return;
        };
        let sel = self.tasks.select_id(&task);
        if sel.as_deref() == Some(task.as_str()) {
            self.view = View::Tasks;
            self.tasks.detail.tab = super::views::detail::DetailTab::Episodes;
            self.load_selected(sel);
        } else {
            self.error(format!("task {task} is not in the workspace"));
        }
    }

    fn tasks_command(&mut self, cmd: Command) {
        let id = self.tasks.selected_id();
        let needs_task = matches!(
            cmd,
            Command::Accept
                | Command::Reject
                | Command::Archive
                | Command::Rate1
                | Command::Rate2
                | Command::Rate3
                | Command::Rate4
                | Command::Rate5
                | Command::RateClear
                | Command::Tag
                | Command::Note
                | Command::Edit
                | Command::Validate
        );
        if needs_task && id.is_none() {
            self.error("no task selected".into());
            return;
        }
        let id_s = id.clone().unwrap_or_default();
        match cmd {
            Command::Accept => self
                .outbox
                .push(Request::SetStatus(id_s, TaskStatus::Accepted)),
            Command::Reject => self
                .outbox
                .push(Request::SetStatus(id_s, TaskStatus::Rejected)),
            Command::Archive => self
                .outbox
                .push(Request::SetStatus(id_s, TaskStatus::Archived)),
            Command::Rate1 => self.outbox.push(Request::SetRating(id_s, Some(1))),
            Command::Rate2 => self.outbox.push(Request::SetRating(id_s, Some(2))),
            Command::Rate3 => self.outbox.push(Request::SetRating(id_s, Some(3))),
            Command::Rate4 => self.outbox.push(Request::SetRating(id_s, Some(4))),
            Command::Rate5 => self.outbox.push(Request::SetRating(id_s, Some(5))),
            Command::RateClear => self.outbox.push(Request::SetRating(id_s, None)),
            Command::Tag => {
                let tags = self.tasks.selected_row().map(|r| r.tags.join(", "));
                self.prompt = Some(Prompt {
                    kind: PromptKind::Tags,
                    input: TextInput::new(tags.unwrap_or_default()),
                    task: id,
                });
            }
            Command::Note => {
                let notes = self.tasks.selected_row().map(|r| r.notes.clone());
                self.prompt = Some(Prompt {
                    kind: PromptKind::Note,
                    input: TextInput::new(notes.unwrap_or_default()),
                    task: id,
                });
            }
            Command::Search => {
                self.prompt = Some(Prompt {
                    kind: PromptKind::Search,
                    input: TextInput::new(self.tasks.filter.search.clone()),
                    task: None,
                });
            }
            Command::Edit => {
                let file = self
                    .tasks
                    .detail
                    .tab
                    .bundle_file(self.tasks.detail.task.as_ref());
                self.outbox.push(Request::OpenEditor { id: id_s, file });
            }
            Command::Validate => {
                self.info(format!("validating {id_s}..."));
                self.outbox.push(Request::Validate(id_s));
            }
            other => {
                let sel = self.tasks.command(other);
                self.load_selected(sel);
            }
        }
    }

    fn prompt_key(&mut self, key: KeyEvent) {
        let Some(prompt) = self.prompt.as_mut() else {
            return;
        };
        let outcome = prompt.input.handle_key(&key);
        let kind = prompt.kind;
        let value = prompt.input.value.clone();
        let task = prompt.task.clone();
        match (outcome, kind) {
            (InputOutcome::Editing, PromptKind::Search) => {
                let sel = self.tasks.set_search(value);
                self.load_selected(sel);
            }
            (InputOutcome::Editing, _) => {}
            (InputOutcome::Cancel, PromptKind::Search) => {
                self.prompt = None;
                let sel = self.tasks.set_search(String::new());
                self.load_selected(sel);
            }
            (InputOutcome::Cancel, _) => self.prompt = None,
            (InputOutcome::Submit, PromptKind::Search) => self.prompt = None,
            (InputOutcome::Submit, PromptKind::Tags) => {
                self.prompt = None;
                let tags: Vec<String> = value
                    .split(',')
                    .map(|t| t.trim().to_string())
                    .filter(|t| !t.is_empty())
                    .collect();
                if let Some(id) = task {
                    self.outbox.push(Request::SetTags(id, tags));
                }
            }
            (InputOutcome::Submit, PromptKind::Note) => {
                self.prompt = None;
                if let Some(id) = task {
                    self.outbox.push(Request::SetNotes(id, value));
                }
            }
        }
    }

    fn mouse(&mut self, m: MouseEvent) {
        let pos = Position::new(m.column, m.row);
        if self.help.visible {
            match m.kind {
                MouseEventKind::ScrollDown => self.help.scroll = self.help.scroll.saturating_add(1),
                MouseEventKind::ScrollUp => self.help.scroll = self.help.scroll.saturating_sub(1),
                MouseEventKind::Down(_) => self.help.visible = false,
                _ => {}
            }
            return;
        }
        if let MouseEventKind::Down(MouseButton::Left) = m.kind {
            if let Some((_, v)) = self.tab_areas.iter().find(|(r, _)| r.contains(pos)) {
                self.view = *v;
                return;
            }
        }
        match self.view {
            View::Tasks => {
                let sel = self.tasks.mouse(m);
                self.load_selected(sel);
            }
            View::Live => self.live.mouse(m),
            View::Episodes => self.episodes.mouse(m),
            View::Jobs | View::Training => {}
        }
    }

    /// Draw the whole screen from state.
    pub fn draw(&mut self, frame: &mut Frame<'_>) {
        let area = frame.area();
        frame.render_widget(Paragraph::new("").style(self.theme.base()), area);
        let [top, body, bottom] = Layout::vertical([
            Constraint::Length(1),
            Constraint::Fill(1),
            Constraint::Length(1),
        ])
        .areas(area);
        self.draw_tabs(frame, top);
        let theme = self.theme.clone();
        match self.view {
            View::Tasks => self.tasks.draw(frame, body, &theme),
            View::Live => self.live.draw(frame, body, &theme),
            View::Episodes => self.episodes.draw(frame, body, &theme),
            View::Jobs => jobs::draw(frame, body, &theme),
            View::Training => training::draw(frame, body, &theme),
        }
        self.draw_status(frame, bottom);
        if self.help.visible {
            self.help.draw(frame, area, &theme, &self.keymap);
        }
    }

    fn draw_tabs(&mut self, frame: &mut Frame<'_>, area: Rect) {
        let t = &self.theme;
        let titles: Vec<Line<'_>> = View::ALL
            .iter()
            .map(|v| Line::from(format!(" {} ", v.title())))
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
        let tabs_width = x.saturating_sub(area.x);
        let right_width = area.width.saturating_sub(tabs_width).min(30);
        let [left, right] =
            Layout::horizontal([Constraint::Fill(1), Constraint::Length(right_width)]).areas(area);
        frame.render_widget(tabs, left);
        let help = format!("{} help ", self.keymap.hint(Command::Help));
        let room = (right_width as usize).saturating_sub(help.len() + 1);
        let label = truncate_left(&self.workspace_label, room);
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

    fn draw_status(&self, frame: &mut Frame<'_>, area: Rect) {
        let t = &self.theme;
        if let Some(p) = &self.prompt {
            let label = match p.kind {
                PromptKind::Search => "search: ",
                PromptKind::Tags => "tags (comma-separated): ",
                PromptKind::Note => "note: ",
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
                let k = |c| self.keymap.hint(c);
                let hints: Vec<(String, &str)> = match self.view {
                    View::Tasks => vec![
                        (k(Command::Search), "search"),
                        (k(Command::FilterStatus), "status"),
                        (k(Command::SortNext), "sort"),
                        (k(Command::Accept), "accept"),
                        (k(Command::Reject), "reject"),
                        (k(Command::Rate1) + "-5", "rate"),
                        (k(Command::Note), "note"),
                        (k(Command::Edit), "edit"),
                        (k(Command::Quit), "quit"),
                    ],
                    View::Live => vec![
                        (k(Command::Select), "zoom"),
                        (k(Command::Back), "unzoom"),
                        (k(Command::Quit), "quit"),
                    ],
                    View::Episodes => vec![
                        (k(Command::FilterFailure), "failure mode"),
                        (k(Command::ClearFilters), "clear"),
                        (k(Command::Quit), "quit"),
                    ],
                    View::Jobs | View::Training => vec![
                        (k(Command::NextView), "next view"),
                        (k(Command::Quit), "quit"),
                    ],
                };
                let mut spans = Vec::new();
                for (key, what) in hints {
                    spans.push(Span::styled(key, t.accent()));
                    spans.push(Span::styled(format!(" {what}  "), t.muted()));
                }
                Line::from(spans)
            }
        };
        frame.render_widget(Paragraph::new(line), area);
    }
}

/// Keep the end of `s` (paths are most telling at the end).
fn truncate_left(s: &str, max: usize) -> String {
    let n = s.chars().count();
    if n <= max {
        return s.to_string();
    }
    if max == 0 {
        return String::new();
    }
    let keep: String = s.chars().skip(n + 1 - max).collect();
    format!("…{keep}")
}
