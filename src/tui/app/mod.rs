//! The app: the state of the whole UI and a router over its components.
//!
//! `App` never does I/O: keys and mouse events become [`Action`]s, `update`
//! changes state (its own, or a component's) and queues [`Request`]s in
//! `outbox`, which the event loop hands to the store worker or the job
//! launcher. Results come back as Actions. The pieces, one job each:
//! [`commands`] (the command routers), [`input`] (prompt and form keys,
//! mouse hit-testing), [`forms`] (the launch forms), [`pickers`] (the
//! fuzzy category, failure-mode and label pickers), [`draw`] (tabs, the
//! focused view, the status line), [`undo`] (curation changes and their
//! undo), [`saved_view`] (the view and sorts a restart keeps).

mod commands;
mod draw;
mod forms;
mod input;
mod pickers;
mod saved_view;
mod undo;

use crossterm::event::KeyEvent;
use ratatui::layout::Rect;

pub use forms::{ForkTarget, FormKind};
pub use pickers::PickerKind;
pub use undo::{UndoEntry, MAX_UNDO};

use super::action::{Action, Request};
use super::component::Component;
use super::keymap::Keymap;
use super::launch::JobDefaults;
use super::theme::Theme;
use super::views::episodes::EpisodesView;
use super::views::help::HelpView;
use super::views::help_groups::HelpContext;
use super::views::inspector::Inspector;
use super::views::jobs::JobsView;
use super::views::live::LiveView;
use super::views::tasks::TasksView;
use super::views::training::TrainingView;
use super::widgets::form::Form;
use super::widgets::input::TextInput;
use super::widgets::picker::Picker;
use crate::jobs::{JobEvent, JobOutcome};

/// The top-level views, shown as tabs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum View {
    /// The task browser and its detail pane.
    Tasks,
    /// Live sessions of running episodes.
    Live,
    /// Recorded episodes (and the inspector over them).
    Episodes,
    /// Background jobs and their launch forms.
    Jobs,
    /// Training runs and their dashboards.
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

/// What an open prompt edits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PromptKind {
    /// The tasks view's search.
    Search,
    /// The selected task's tags.
    Tags,
    /// The selected task's note.
    Note,
    /// The inspected episode's note.
    EpisodeNote,
    /// The Episodes view's search.
    EpisodeSearch,
    /// The help overlay's search.
    HelpSearch,
}

/// An open one-line prompt.
#[derive(Debug, Clone)]
pub struct Prompt {
    /// What it edits.
    pub kind: PromptKind,
    /// The text being typed.
    pub input: TextInput,
    /// Task the prompt edits (tags, note).
    pub task: Option<String>,
}

/// A message in the status line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusMsg {
    /// The message.
    pub text: String,
    /// Drawn as an error.
    pub error: bool,
}

/// The whole UI state.
pub struct App {
    /// The colours.
    pub theme: Theme,
    /// The key bindings.
    pub keymap: Keymap,
    /// The focused tab.
    pub view: View,
    /// The Tasks view.
    pub tasks: TasksView,
    /// The Live view.
    pub live: LiveView,
    /// The Episodes view.
    pub episodes: EpisodesView,
    /// The Jobs view.
    pub jobs: JobsView,
    /// The Training view.
    pub training: TrainingView,
    /// The episode inspector, open over the Episodes view.
    pub inspector: Option<Inspector>,
    /// The open launch form.
    pub form: Option<(FormKind, Form)>,
    /// Defaults of the launch forms.
    pub defaults: JobDefaults,
    /// The help overlay.
    pub help: HelpView,
    /// The open one-line prompt.
    pub prompt: Option<Prompt>,
    /// The open picker and what it picks.
    pub picker: Option<(PickerKind, Picker)>,
    /// The status line's message.
    pub status: Option<StatusMsg>,
    /// Shown in the top bar (the workspace path).
    pub workspace_label: String,
    /// Requests queued by `update` for the event loop.
    pub outbox: Vec<Request>,
    /// The user asked to quit.
    pub should_quit: bool,
    /// Quitting was asked for while jobs run: the next `q` quits.
    pub quit_asked: bool,
    /// Curation changes that `u` can undo, newest last.
    pub undo: Vec<UndoEntry>,
    /// The launch forms' last values in this workspace (`None` until read,
    /// and when the file could not be read: then nothing overwrites it).
    pub form_values: Option<super::action::FormValues>,
    /// The episode the fork form forks (set when it opens).
    pub fork_target: Option<ForkTarget>,
    /// The view an episode was opened from (a task's Episodes tab, a
    /// finished Live strip): closing the inspector goes back there.
    pub inspector_from: Option<View>,
    /// An episode asked for from this view is on its way: the inspector
    /// opens over Episodes when it arrives (an error leaves the view as is).
    pub opening: Option<View>,
    /// The repair review, open over the Tasks view.
    pub review: Option<super::views::repair::RepairView>,
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
            picker: None,
            status: None,
            workspace_label: workspace_label.into(),
            outbox: vec![
                Request::LoadTasks,
                Request::LoadEpisodes,
                Request::LoadJobs,
                Request::LoadFormValues,
            ],
            should_quit: false,
            quit_asked: false,
            undo: Vec::new(),
            form_values: None,
            fork_target: None,
            inspector_from: None,
            opening: None,
            review: None,
            tab_areas: Vec::new(),
        }
    }

    /// Map a key to an action: picker and prompt keys go to them, others
    /// through the keymap.
    pub fn handle_key(&self, key: KeyEvent) -> Option<Action> {
        if self.picker.is_some() {
            return Some(Action::PickerKey(key));
        }
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

    /// Apply an action: the app's own (commands, keys, status messages,
    /// finished jobs), or route it to the component it concerns.
    pub fn update(&mut self, action: Action) {
        match action {
            Action::Command(cmd) => self.command(cmd),
            Action::PromptKey(key) => self.prompt_key(key),
            Action::PickerKey(key) => self.picker_key(key),
            Action::FormKey(key) => self.form_key(key),
            Action::Mouse(m) => self.mouse(m),
            Action::Resize(..) => {}
            Action::TaskSelected(id) => self.load_selected(Some(id)),
            Action::TaskEnvLoaded(env) => self.tasks.detail.set_env(*env),
            Action::TasksLoaded(_)
            | Action::TaskLoaded(..)
            | Action::TaskRowUpdated(_)
            | Action::AuditsLoaded(_)
            | Action::AuditLoaded(..) => {
                let next = self.tasks.update(action);
                self.follow(next);
            }
            Action::EpisodesLoaded(_) => self.follow_up(View::Episodes, action),
            Action::Live(_) => self.follow_up(View::Live, action),
            Action::Job(ev) => {
                // A training run this TUI starts is selected in Training.
                if let JobEvent::Started { id, kind } = &ev {
                    if kind == "train" {
                        self.training.follow_job(&id.0);
                    }
                }
                if let JobEvent::Finished { id, outcome } = &ev {
                    // Named by its run, as the Jobs view shows it.
                    let name = self.jobs.shown_id_of(&id.0);
                    match outcome {
                        JobOutcome::Succeeded(m) => self.info(format!("{name}: {m}")),
                        JobOutcome::Failed(m) => self.error(format!(
                            "{name}: {}",
                            crate::tui::widgets::text::once_per_url(m)
                        )),
                        JobOutcome::Cancelled => self.info(format!("{name}: cancelled")),
                        JobOutcome::Empty(m) => self.info(format!("{name}: {m}")),
                    }
                    self.outbox.extend([
                        Request::LoadEpisodes,
                        Request::LoadTasks,
                        Request::LoadJobs,
                    ]);
                    // The shown task's Episodes tab gets the new episodes.
                    self.tasks.detail.invalidate();
                    self.load_selected(self.tasks.selected_id());
                }
                self.follow_up(View::Jobs, Action::Job(ev));
            }
            Action::IndexChanged(change) => {
                if change.tasks {
                    self.outbox.push(Request::RefreshTasks);
                }
                if change.episodes {
                    self.outbox.push(Request::LoadEpisodes);
                }
                if change.tasks || change.episodes {
                    // The shown task's bundle and episodes, read again.
                    self.tasks.detail.invalidate();
                    self.load_selected(self.tasks.selected_id());
                }
                if change.jobs {
                    self.outbox.push(Request::LoadJobs);
                }
            }
            Action::JobsLoaded(_) | Action::JobLogLoaded(..) | Action::ShardRunsLoaded(_) => {
                self.follow_up(View::Jobs, action)
            }
            Action::TrainingLoaded(_) => self.follow_up(View::Training, action),
            Action::EpisodeLoaded { episode, compare } => match (&mut self.inspector, compare) {
                (Some(insp), true) => {
                    // Said, and shown: the Replay tab plays one recording,
                    // so the comparison opens on the trajectories.
                    let r = &episode.row;
                    let mut text = format!(
                        "side by side with {}/{}#{} ({}); {} closes it",
                        r.run_id,
                        r.task_id,
                        r.sample,
                        if r.passed { "PASS" } else { "FAIL" },
                        self.keymap.hint(super::keymap::Command::Compare)
                    );
                    if insp.tab == super::views::inspector::InspectorTab::Replay {
                        insp.tab = super::views::inspector::InspectorTab::Trajectory;
                        text.push_str(" · on Trajectory: Replay plays one recording");
                    }
                    insp.other = Some(*episode);
                    self.info(text);
                }
                (_, _) => {
                    self.inspector = Some(Inspector::new(*episode));
                    // Opened from another view: shown over Episodes, and
                    // closing it goes back there.
                    if let Some(from) = self.opening.take() {
                        self.inspector_from = Some(from);
                        self.view = View::Episodes;
                    }
                }
            },
            Action::TakeoverKey(key) => {
                use crossterm::event::KeyCode;
                if super::takeover::is_release(&key) {
                    self.live.release();
                    self.info("session given back to the agent".into());
                } else if matches!(key.code, KeyCode::PageUp | KeyCode::PageDown) {
                    self.live.scroll_taken(key.code == KeyCode::PageUp);
                } else if let Some(command) = self.live.type_key(&key) {
                    let shown: String = command.chars().take(60).collect();
                    self.info(format!("you ran `{shown}` (recorded as a human step)"));
                }
            }
            Action::Tick(dt) => {
                if let Some(insp) = self.inspector.as_mut() {
                    let next = insp.update(Action::Tick(dt));
                    self.follow(next);
                }
            }
            Action::OfflineSeed(seed) => {
                let old = self.defaults.offline_seed.to_string();
                self.defaults.offline_seed = seed;
                // An open offline form whose seed was not edited takes it.
                if let Some((FormKind::Offline, form)) = self.form.as_mut() {
                    if let Some(f) = form.fields.iter_mut().find(|f| f.label == "seed") {
                        if f.input.value == old {
                            f.input = crate::tui::widgets::input::TextInput::new(seed.to_string());
                        }
                    }
                }
            }
            Action::FormValuesLoaded(values) => self.form_values = Some(values),
            Action::RepairLoaded(review) => {
                self.view = View::Tasks;
                self.review = Some(super::views::repair::RepairView::new(*review));
            }
            Action::TrainRefused(refusal) => self.train_refused(refusal),
            Action::Info(s) => self.info(s),
            Action::Error(s) => {
                self.opening = None;
                self.error(s)
            }
        }
        self.load_env();
    }

    /// The component behind tab `view` (the inspector, when open, stands
    /// for the Episodes view).
    fn component(&mut self, view: View) -> &mut dyn Component {
        match view {
            View::Tasks => &mut self.tasks,
            View::Live => &mut self.live,
            View::Episodes => match self.inspector.as_mut() {
                Some(insp) => insp,
                None => &mut self.episodes,
            },
            View::Jobs => &mut self.jobs,
            View::Training => &mut self.training,
        }
    }

    /// Hand `action` to the component of `view` (the list itself for the
    /// Episodes view, even under the inspector) and apply what it answers.
    fn follow_up(&mut self, view: View, action: Action) {
        let next = match view {
            View::Episodes => self.episodes.update(action),
            other => self.component(other).update(action),
        };
        self.follow(next);
    }

    /// Apply a component's answer, if any.
    fn follow(&mut self, next: Option<Action>) {
        if let Some(a) = next {
            self.update(a);
        }
    }

    /// Where the user is, for the help overlay and the footer.
    pub fn help_context(&self) -> HelpContext {
        match self.view {
            View::Tasks if self.tasks.focus == super::views::tasks::Focus::Detail => {
                if self.tasks.detail.tab == super::views::detail::DetailTab::Episodes {
                    HelpContext::TaskEpisodes
                } else {
                    HelpContext::TaskDetail
                }
            }
            View::Tasks => HelpContext::Tasks,
            View::Live if self.live.taken().is_some() => HelpContext::Takeover,
            View::Live => HelpContext::Live,
            View::Episodes if self.inspector.is_some() => HelpContext::Inspector,
            View::Episodes => HelpContext::Episodes,
            View::Jobs => HelpContext::Jobs,
            View::Training => HelpContext::Training,
        }
    }

    fn info(&mut self, text: String) {
        self.status = Some(StatusMsg { text, error: false });
    }

    fn error(&mut self, text: String) {
        self.status = Some(StatusMsg { text, error: true });
    }

    /// Ask for the shown task's image and build-cache state while the
    /// Environment tab is open, and for the selected job's kept log while
    /// the Jobs view shows a job this process did not run.
    fn load_env(&mut self) {
        if self.view == View::Tasks {
            if let Some(id) = self.tasks.detail.wants_env() {
                self.outbox.push(Request::LoadTaskEnv(id));
            }
        }
        if self.view == View::Jobs {
            if let Some((id, path)) = self.jobs.wants_file_log() {
                self.outbox.push(Request::LoadFileLog(id, path));
            } else if let Some(id) = self.jobs.wants_log() {
                self.outbox.push(Request::LoadJobLog(id));
            }
        }
    }

    fn load_selected(&mut self, id: Option<String>) {
        if let Some(id) = id {
            if self.tasks.detail.wants(&id) {
                self.outbox.push(Request::LoadTask(id));
            }
        }
    }
}
