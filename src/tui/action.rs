//! The messages of the TUI: [`Action`] (everything that changes the app's
//! state: commands, input, results of background work), [`LiveEvent`] (what
//! a running episode tells its live pane), [`Request`] (work the app asks of
//! the store worker and the job launcher) and [`Msg`] (what the event loop
//! receives). A leaf of the TUI: views, the app and the runtime threads all
//! speak these, and this file imports none of them but the data they carry.

use std::path::PathBuf;

use crossterm::event::{Event, KeyEvent, MouseEvent};

use super::keymap::Command;
use super::launch::JobSpec;
use super::runtime::episode_io::LoadedEpisode;
use super::takeover::TakeoverHandle;
use crate::jobs::JobEvent;
use crate::store::{EpisodeRow, JobRow, TaskRow, TaskStatus};
use crate::task::Task;

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
    /// The tasks view's selection moved to this task: load its bundle if
    /// the detail pane does not show it yet.
    TaskSelected(String),
    /// One task's bundle and its episodes.
    TaskLoaded(Box<Task>, Vec<EpisodeRow>),
    /// One row changed (after curation).
    TaskRowUpdated(Box<TaskRow>),
    /// All episodes from the store.
    EpisodesLoaded(Vec<EpisodeRow>),
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
        input: Option<TakeoverHandle>,
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

/// What the event loop receives.
#[derive(Debug)]
pub enum Msg {
    /// A terminal event.
    Input(Event),
    /// A result from background work.
    Action(Action),
    /// The input thread failed to read the terminal.
    InputError(String),
}
