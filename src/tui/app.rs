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
use super::launcher::{JobDefaults, JobSpec};
use super::theme::Theme;
use super::train_job::TrainSpec;
use super::views::episodes::EpisodesView;
use super::views::help::HelpView;
use super::views::inspector::{Inspector, LoadedEpisode};
use super::views::jobs::JobsView;
use super::views::live::LiveView;
use super::views::tasks::TasksView;
use super::views::training::TrainingView;
use super::widgets::form::{Form, FormOutcome};
use super::widgets::input::{InputOutcome, TextInput};
use crate::jobs::JobEvent;
use crate::store::{EpisodeRow, JobRow, TaskRow, TaskStatus};
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
    /// A keyed event of a running episode (from an evaluation job).
    Live(LiveEvent),
    /// A job event from the job manager.
    Job(JobEvent),
    /// The jobs journal.
    JobsLoaded(Vec<JobRow>),
    /// The training runs under `<workspace>/checkpoints/`, newest first.
    TrainingLoaded(Vec<crate::rl::run_files::RunView>),
    /// An episode read from disk for the inspector (`compare`: the side-by-side one).
    EpisodeLoaded {
        episode: Box<LoadedEpisode>,
        compare: bool,
    },
    /// A key while a launch form is open.
    FormKey(KeyEvent),
    /// A key while the user has taken over a live session.
    TakeoverKey(KeyEvent),
    /// Time passed (seconds): replay playback, elapsed clocks.
    Tick(f64),
    /// An informational message for the status line.
    Info(String),
    /// An error for the status line.
    Error(String),
}

/// What a running episode reports to its live pane, keyed by
/// `run/task/sample` (so panes can come and go).
#[derive(Debug, Clone, PartialEq)]
pub enum LiveEvent {
    /// The episode's sandbox is up: open a pane emulating `rows` x `cols`.
    Open {
        key: String,
        title: String,
        policy: String,
        rows: u16,
        cols: u16,
        /// Lets the user type into the session ("take over").
        input: Option<super::takeover::TakeoverHandle>,
    },
    /// Raw bytes from the session.
    Feed { key: String, bytes: Vec<u8> },
    /// A turn finished (`command` is empty for a `done` turn).
    Step {
        key: String,
        turn: u32,
        command: String,
    },
    /// The episode finished and was verified.
    Finished { key: String, passed: bool },
}

/// Which launch form is open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FormKind {
    /// Evaluate a policy.
    Eval,
    /// Validate tasks.
    Validate,
    /// LLM generation.
    Generate,
    /// Offline (procedural) generation.
    Offline,
    /// A training run.
    Train,
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
    /// Open `tasks/<id>/<file>` in `$EDITOR`, then reload the task.
    OpenEditor {
        id: String,
        file: PathBuf,
    },
    /// The jobs journal.
    LoadJobs,
    /// Read an episode's result and recording for the inspector.
    LoadEpisode {
        row: EpisodeRow,
        compare: bool,
    },
    /// Rate / label / annotate an episode.
    RateEpisode {
        run: String,
        task: String,
        sample: u32,
        rating: Option<u8>,
        label: Option<String>,
        notes: String,
    },
    /// Write every rated / labelled / annotated episode to `<workspace>/ratings.jsonl`.
    ExportRatings,
    /// Start a background job (the event loop's launcher serves it).
    Launch(JobSpec),
    /// Cancel a job (the event loop's launcher serves it).
    CancelJob(String),
}

/// What an open prompt edits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PromptKind {
    Search,
    Tags,
    Note,
    EpisodeNote,
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
    pub jobs: JobsView,
    pub training: TrainingView,
    /// The episode inspector, open over the Episodes view.
    pub inspector: Option<Inspector>,
    /// The open launch form.
    pub form: Option<(FormKind, Form)>,
    /// Defaults of the launch forms.
    pub defaults: JobDefaults,
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
            jobs: JobsView::default(),
            training: TrainingView::default(),
            inspector: None,
            form: None,
            defaults: JobDefaults::default(),
            help: HelpView::default(),
            prompt: None,
            status: None,
            workspace_label: workspace_label.into(),
            outbox: vec![Request::LoadTasks, Request::LoadEpisodes, Request::LoadJobs],
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
        if self.form.is_some() && !self.help.visible {
            return Some(Action::FormKey(key));
        }
        if self.view == View::Live && self.live.taken().is_some() {
            return Some(Action::TakeoverKey(key));
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
            Action::Live(ev) => self.live.live_event(ev),
            Action::Job(ev) => {
                if let JobEvent::Finished { id, outcome } = &ev {
                    match outcome {
                        crate::jobs::JobOutcome::Succeeded(m) => {
                            self.info(format!("{}: {m}", id.0))
                        }
                        crate::jobs::JobOutcome::Failed(m) => self.error(format!("{}: {m}", id.0)),
                        crate::jobs::JobOutcome::Cancelled => {
                            self.info(format!("{}: cancelled", id.0))
                        }
                    }
                    self.outbox.extend([
                        Request::LoadEpisodes,
                        Request::LoadTasks,
                        Request::LoadJobs,
                    ]);
                }
                self.jobs.event(ev);
            }
            Action::JobsLoaded(rows) => self.jobs.set_rows(rows),
            Action::TrainingLoaded(runs) => self.training.set_runs(runs),
            Action::EpisodeLoaded { episode, compare } => match (&mut self.inspector, compare) {
                (Some(insp), true) => insp.other = Some(*episode),
                (_, _) => self.inspector = Some(Inspector::new(*episode)),
            },
            Action::FormKey(key) => self.form_key(key),
            Action::TakeoverKey(key) => {
                if super::takeover::is_release(&key) {
                    self.live.release();
                    self.info("session given back to the agent".into());
                } else if let Some(bytes) = super::takeover::key_bytes(&key) {
                    self.live.type_bytes(bytes);
                }
            }
            Action::Tick(dt) => {
                if let Some(r) = self.inspector.as_mut().and_then(|i| i.replay.as_mut()) {
                    r.tick(dt);
                }
            }
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
            Command::ViewTraining => self.view = View::Training,
            Command::Reload => {
                self.outbox.push(Request::LoadTasks);
                self.outbox.push(Request::LoadEpisodes);
                if let Some(id) = self.tasks.selected_id() {
                    self.outbox.push(Request::LoadTask(id));
                }
                self.info("reloading".into());
            }
            Command::ViewJobs => {
                self.view = View::Jobs;
                self.outbox.push(Request::LoadJobs);
            }
            _ => match self.view {
                View::Tasks => self.tasks_command(cmd),
                View::Live if cmd == Command::TakeOver => match self.live.take_over() {
                    Ok(()) => self.info(
                        "you have the session: type; ctrl-] gives it back (the agent waits)".into(),
                    ),
                    Err(e) => self.error(e),
                },
                View::Live => self.live.command(cmd),
                View::Episodes => self.episodes_command(cmd),
                View::Jobs => self.jobs_command(cmd),
                View::Training => self.training_command(cmd),
            },
        }
    }

    fn episodes_command(&mut self, cmd: Command) {
        if self.inspector.is_some() {
            self.inspector_command(cmd);
            return;
        }
        match cmd {
            Command::Select => {
                if let Some(row) = self.episodes.selected_row().cloned() {
                    self.outbox.push(Request::LoadEpisode {
                        row,
                        compare: false,
                    });
                }
                return;
            }
            Command::ExportRatings => {
                self.outbox.push(Request::ExportRatings);
                return;
            }
            Command::GotoTask => {}
            other => {
                self.episodes.command(other);
                return;
            }
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

    fn inspector_command(&mut self, cmd: Command) {
        let Some(insp) = self.inspector.as_mut() else {
            return;
        };
        let row = insp.episode.row.clone();
        let rate =
            |rating: Option<u8>, label: Option<String>, notes: String| Request::RateEpisode {
                run: row.run_id.clone(),
                task: row.task_id.clone(),
                sample: row.sample,
                rating,
                label,
                notes,
            };
        let rating = match cmd {
            Command::Rate1 => Some(Some(1)),
            Command::Rate2 => Some(Some(2)),
            Command::Rate3 => Some(Some(3)),
            Command::Rate4 => Some(Some(4)),
            Command::Rate5 => Some(Some(5)),
            Command::RateClear => Some(None),
            _ => None,
        };
        if let Some(r) = rating {
            insp.episode.row.rating = r;
            self.outbox
                .push(rate(r, row.label.clone(), row.notes.clone()));
            return;
        }
        match cmd {
            Command::Back => self.inspector = None,
            Command::Label => {
                let label = insp.next_label();
                insp.episode.row.label = label.clone();
                self.outbox.push(rate(row.rating, label, row.notes.clone()));
            }
            Command::Note => {
                self.prompt = Some(Prompt {
                    kind: PromptKind::EpisodeNote,
                    input: TextInput::new(row.notes.clone()),
                    task: None,
                });
            }
            Command::ExportRatings => self.outbox.push(Request::ExportRatings),
            Command::Compare => {
                if insp.other.take().is_some() {
                    return;
                }
                let same = |r: &&EpisodeRow| {
                    r.task_id == row.task_id && (r.run_id != row.run_id || r.sample != row.sample)
                };
                match self.episodes.rows().iter().find(same).cloned() {
                    Some(other) => self.outbox.push(Request::LoadEpisode {
                        row: other,
                        compare: true,
                    }),
                    None => self.error(format!(
                        "{} has no other episode to compare with",
                        row.task_id
                    )),
                }
            }
            other => {
                insp.command(other);
            }
        }
    }

    fn jobs_command(&mut self, cmd: Command) {
        let d = &self.defaults;
        let form = match cmd {
            Command::JobEval => Some((
                FormKind::Eval,
                Form::new(
                    "Evaluate a policy",
                    &[
                        ("policy", d.policy.clone()),
                        ("tasks", String::new()),
                        ("samples", d.samples.to_string()),
                        ("max turns", String::new()),
                        ("concurrency", d.concurrency.to_string()),
                    ],
                )
                .with_note("tasks: ids or * globs, comma-separated (empty: all but rejected/archived); max turns empty: each task's own"),
            )),
            Command::JobValidate => Some((
                FormKind::Validate,
                Form::new(
                    "Validate tasks",
                    &[(
                        "tasks",
                        self.tasks.selected_id().unwrap_or_else(|| "all".into()),
                    )],
                )
                .with_note("task ids, comma-separated, or `all`"),
            )),
            Command::JobGenerate => Some((
                FormKind::Generate,
                Form::new(
                    "Generate tasks with an LLM",
                    &[
                        ("url", d.llm_url.clone()),
                        ("model", d.llm_model.clone()),
                        ("count", d.count.to_string()),
                        ("solutions", d.solutions.to_string()),
                    ],
                )
                .with_note("what `endless generate --llm URL --model M` does, as a job"),
            )),
            Command::JobOffline => Some((
                FormKind::Offline,
                Form::new(
                    "Generate tasks offline (procedural)",
                    &[("count", d.count.to_string()), ("seed", "1".into())],
                )
                .with_note("what `endless generate --offline` does, as a job"),
            )),
            Command::JobTrain => Some((FormKind::Train, train_form())),
            Command::JobCancel => {
                match self.jobs.selected_item() {
                    Some(j) if j.status == "running" => {
                        let id = j.id.clone();
                        self.info(format!("cancelling {id}..."));
                        self.outbox.push(Request::CancelJob(id));
                    }
                    Some(j) => self.error(format!("{} is not running", j.id)),
                    None => self.error("no job selected".into()),
                }
                None
            }
            other => {
                self.jobs.command(other);
                None
            }
        };
        if form.is_some() {
            self.form = form;
        }
    }

    fn form_key(&mut self, key: KeyEvent) {
        let Some((kind, form)) = self.form.as_mut() else {
            return;
        };
        match form.handle_key(&key) {
            FormOutcome::Editing => {}
            FormOutcome::Cancel => self.form = None,
            FormOutcome::Submit => {
                let kind = *kind;
                match job_spec(kind, form) {
                    Ok(spec) => {
                        self.form = None;
                        self.info(format!("starting {}...", spec.kind()));
                        self.outbox.push(Request::Launch(spec));
                    }
                    Err(e) => self.error(e),
                }
            }
        }
    }

    fn training_command(&mut self, cmd: Command) {
        match cmd {
            // The training form opens here too (the job shows in the Jobs view).
            Command::JobTrain => self.form = Some((FormKind::Train, train_form())),
            other => {
                self.training.command(other);
            }
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
                // A background job: the store worker stays free while the
                // environment builds.
                self.info(format!("validating {id_s} (a job: see the Jobs view)..."));
                self.outbox
                    .push(Request::Launch(JobSpec::Validate { tasks: vec![id_s] }));
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
            (InputOutcome::Submit, PromptKind::EpisodeNote) => {
                self.prompt = None;
                if let Some(insp) = self.inspector.as_mut() {
                    let row = &mut insp.episode.row;
                    row.notes = value.clone();
                    self.outbox.push(Request::RateEpisode {
                        run: row.run_id.clone(),
                        task: row.task_id.clone(),
                        sample: row.sample,
                        rating: row.rating,
                        label: row.label.clone(),
                        notes: value,
                    });
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
            View::Episodes => match self.inspector.as_mut() {
                Some(insp) => {
                    match m.kind {
                        MouseEventKind::ScrollDown => insp.command(Command::Down),
                        MouseEventKind::ScrollUp => insp.command(Command::Up),
                        _ => false,
                    };
                }
                None => self.episodes.mouse(m),
            },
            View::Jobs => self.jobs.mouse(m),
            View::Training => self.training.mouse(m),
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
            View::Episodes => match self.inspector.as_mut() {
                Some(insp) => insp.draw(frame, body, &theme),
                None => self.episodes.draw(frame, body, &theme),
            },
            View::Jobs => self.jobs.draw(frame, body, &theme, &self.keymap),
            View::Training => self.training.draw(frame, body, &theme, &self.keymap),
        }
        self.draw_status(frame, bottom);
        if let Some((_, form)) = &self.form {
            form.draw(frame, body, &theme);
        }
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
                PromptKind::EpisodeNote => "episode note: ",
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
                        (k(Command::PageUp), "scroll back"),
                        (k(Command::TakeOver), "take over"),
                        (k(Command::Quit), "quit"),
                    ],
                    View::Episodes if self.inspector.is_some() => vec![
                        (k(Command::NextTab), "tab"),
                        (k(Command::Rate1) + "-5", "rate"),
                        (k(Command::Label), "label"),
                        (k(Command::Note), "note"),
                        (k(Command::Compare), "side by side"),
                        (k(Command::PlayPause), "play"),
                        (k(Command::ExportRatings), "export"),
                        (k(Command::Back), "close"),
                    ],
                    View::Episodes => vec![
                        (k(Command::Select), "inspect"),
                        (k(Command::GotoTask), "task"),
                        (k(Command::FilterFailure), "failure mode"),
                        (k(Command::ClearFilters), "clear"),
                        (k(Command::ExportRatings), "export ratings"),
                        (k(Command::Quit), "quit"),
                    ],
                    View::Jobs => vec![
                        (k(Command::JobEval), "evaluate"),
                        (k(Command::JobValidate), "validate"),
                        (k(Command::JobCancel), "cancel"),
                        (k(Command::Quit), "quit"),
                    ],
                    View::Training => vec![
                        (k(Command::Down) + "/" + &k(Command::Up), "run"),
                        (k(Command::PrevTab) + "/" + &k(Command::NextTab), "chart"),
                        (k(Command::JobTrain), "train"),
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

/// The training form, with the CLI's defaults.
fn train_form() -> Form {
    let d = TrainSpec::default();
    Form::new(
        "Train a policy (PPO)",
        &[
            ("tasks", d.tasks),
            ("dev", d.dev),
            ("init", d.init),
            ("sft", if d.sft { "yes" } else { "no" }.into()),
            ("sft steps", d.sft_steps.to_string()),
            ("steps", d.steps.to_string()),
            ("minutes", String::new()),
            ("samples", d.samples.to_string()),
            ("max turns", d.max_turns.to_string()),
            ("tasks per step", d.tasks_per_step.to_string()),
        ],
    )
    .with_note("tasks / dev: ids or * globs (empty tasks: the train split; empty dev: no pass@1 before/after); init: tiny, smollm2, a model dir or .gguf; minutes empty: no time limit. Follow the run in the Training view.")
}

/// The job a submitted form asks for.
fn job_spec(kind: FormKind, form: &Form) -> Result<JobSpec, String> {
    fn num<T: std::str::FromStr>(form: &Form, field: &str) -> Result<T, String> {
        form.value(field).parse().map_err(|_| {
            format!(
                "{field}: expected a whole number, got {:?}",
                form.value(field)
            )
        })
    }
    Ok(match kind {
        FormKind::Eval => {
            let policy = form.value("policy").to_string();
            if policy.is_empty() {
                return Err("policy: expected a spec such as oracle or openai:MODEL@URL".into());
            }
            JobSpec::Eval {
                policy,
                tasks: form.value("tasks").to_string(),
                samples: num(form, "samples")?,
                max_turns: match form.value("max turns") {
                    "" => None,
                    _ => Some(num(form, "max turns")?),
                },
                concurrency: num(form, "concurrency")?,
            }
        }
        FormKind::Validate => {
            let tasks: Vec<String> = form
                .value("tasks")
                .split(',')
                .map(|t| t.trim().to_string())
                .filter(|t| !t.is_empty() && t != "all")
                .collect();
            JobSpec::Validate { tasks }
        }
        FormKind::Generate => {
            let model = form.value("model").to_string();
            if model.is_empty() {
                return Err("model: name the generator model".into());
            }
            JobSpec::Generate {
                url: form.value("url").to_string(),
                model,
                count: num(form, "count")?,
                solutions: num(form, "solutions")?,
            }
        }
        FormKind::Offline => JobSpec::Offline {
            count: num(form, "count")?,
            seed: num(form, "seed")?,
        },
        FormKind::Train => {
            let init = form.value("init").to_string();
            if init.is_empty() {
                return Err("init: expected tiny, smollm2, a model directory or a .gguf".into());
            }
            let sft = match form.value("sft").to_ascii_lowercase().as_str() {
                "yes" | "y" | "on" | "true" | "1" => true,
                "no" | "n" | "off" | "false" | "0" | "" => false,
                other => return Err(format!("sft: expected yes or no, got {other:?}")),
            };
            let minutes = match form.value("minutes") {
                "" => None,
                m => match m.parse::<f64>() {
                    Ok(x) if x > 0.0 && x.is_finite() => Some(x),
                    _ => return Err(format!("minutes: expected a positive number, got {m:?}")),
                },
            };
            JobSpec::Train(TrainSpec {
                tasks: form.value("tasks").to_string(),
                dev: form.value("dev").to_string(),
                init,
                sft,
                sft_steps: num(form, "sft steps")?,
                steps: num(form, "steps")?,
                minutes,
                samples: num(form, "samples")?,
                max_turns: num(form, "max turns")?,
                tasks_per_step: num(form, "tasks per step")?,
            })
        }
    })
}
