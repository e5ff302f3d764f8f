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
use crate::agent::StepKind;
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
    /// A key while a picker (category, failure mode, label) is open.
    PickerKey(KeyEvent),
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
    /// One task's image and build-cache state.
    TaskEnvLoaded(Box<crate::workbench::TaskEnv>),
    /// One row changed (after curation).
    TaskRowUpdated(Box<TaskRow>),
    /// Every task's indexed audit (sent with the task rows).
    AuditsLoaded(Vec<crate::audit::AuditRow>),
    /// One task's stored audit report (`None`: not audited), for the
    /// detail pane's Audit tab.
    AuditLoaded(String, Option<Box<crate::audit::AuditReport>>),
    /// All episodes from the store.
    EpisodesLoaded(Vec<EpisodeRow>),
    /// A keyed event of a running episode (from an evaluation job).
    Live(LiveEvent),
    /// A job event from the job manager.
    Job(JobEvent),
    /// The jobs journal.
    JobsLoaded(Vec<JobRow>),
    /// Another connection (another TUI, the CLI) changed these tables of
    /// the index: reload them.
    IndexChanged(IndexChange),
    /// The last lines of a job's kept log (`jobs/<id>.log`), by job id.
    JobLogLoaded(String, Vec<String>),
    /// The workspace's sharded runs (Slurm, Ray), newest first.
    ShardRunsLoaded(Vec<crate::workbench::sharded_runs::ShardedRun>),
    /// The training runs under `<workspace>/checkpoints/`, newest first.
    TrainingLoaded(Vec<crate::rl::run_files::RunView>),
    /// An episode read from disk for the inspector (`compare`: the side-by-side one).
    EpisodeLoaded {
        /// The episode's files.
        episode: Box<LoadedEpisode>,
        /// Open beside the inspected one rather than instead of it.
        compare: bool,
    },
    /// A key while a launch form is open.
    FormKey(KeyEvent),
    /// A key while the user has taken over a live session.
    TakeoverKey(KeyEvent),
    /// Time passed (seconds): replay playback, elapsed clocks.
    Tick(f64),
    /// The first seed whose offline batch is new to the workspace (the
    /// offline form proposes it).
    OfflineSeed(u64),
    /// The launch forms' last values in this workspace.
    FormValuesLoaded(FormValues),
    /// A task's repair, for the repair review.
    RepairLoaded(Box<crate::workbench::repair_review::RepairReview>),
    /// The training form's values were refused before launch.
    TrainRefused(crate::tui::launch::train::TrainRefusal),
    /// An informational message for the status line.
    Info(String),
    /// An error for the status line.
    Error(String),
}

/// Which tables of the index another connection changed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IndexChange {
    /// Task rows (curation, new or removed tasks).
    pub tasks: bool,
    /// Episode rows (new episodes, ratings, labels, notes).
    pub episodes: bool,
    /// The jobs journal.
    pub jobs: bool,
}

impl IndexChange {
    /// Whether anything changed.
    pub fn any(self) -> bool {
        self.tasks || self.episodes || self.jobs
    }
}

/// What a running episode reports to its live pane, keyed by
/// `run/task/sample` (so panes can come and go).
#[derive(Debug, Clone, PartialEq)]
pub enum LiveEvent {
    /// The episode's sandbox is up: open a pane emulating `rows` x `cols`.
    Open {
        /// `run/task/sample`.
        key: String,
        /// The pane's title (`task#sample`).
        title: String,
        /// The policy playing the episode.
        policy: String,
        /// Terminal rows to emulate.
        rows: u16,
        /// Terminal columns to emulate.
        cols: u16,
        /// Lets the user type into the session ("take over").
        input: Option<TakeoverHandle>,
    },
    /// Raw bytes from the session.
    Feed {
        /// `run/task/sample`.
        key: String,
        /// The bytes, escape sequences and all.
        bytes: Vec<u8>,
    },
    /// A turn finished (`command` is empty for a `done` turn).
    Step {
        /// `run/task/sample`.
        key: String,
        /// The turn's number.
        turn: u32,
        /// The command the agent ran.
        command: String,
    },
    /// The episode finished and was verified.
    Finished {
        /// `run/task/sample`.
        key: String,
        /// Whether the final tests passed.
        passed: bool,
        /// The failure mode of a failed episode (`wrong_output`, ...).
        failure: Option<String>,
    },
    /// The process running the episode is gone without writing a result
    /// (killed, or quit mid-episode): it will never finish.
    Interrupted {
        /// `run/task/sample`.
        key: String,
    },
    /// The episode was cut short by cancelling its job: not a result, not
    /// counted, retried when the evaluation is run again.
    Cancelled {
        /// `run/task/sample`.
        key: String,
    },
    /// The stream of a remote node's session broke before its end.
    Lost {
        /// `NODE:session`.
        key: String,
    },
    /// An event of an episode found through the workspace's run files (run
    /// by another process, or by a job here): it opens a read-only pane,
    /// and feeds only panes it opened.
    Watched(Box<LiveEvent>),
}

/// The command a pane's title shows for a step (`LiveEvent::Step`): a
/// human's marked as theirs; empty for a step that ran none.
pub fn pane_command(kind: StepKind, command: Option<&str>) -> String {
    match (kind, command) {
        (_, None) => String::new(),
        (StepKind::Human, Some(c)) => format!("(you) {c}"),
        (_, Some(c)) => c.to_string(),
    }
}

/// The launch forms' last values: by form (`eval`, `train`, ...), then by
/// field label.
pub type FormValues =
    std::collections::BTreeMap<String, std::collections::BTreeMap<String, String>>;

/// Work for the event loop / store worker.
#[derive(Debug, Clone, PartialEq)]
pub enum Request {
    /// Every task row (after reconciling the index with the bundles).
    LoadTasks,
    /// Every task row as the index has it (no reconcile: another process
    /// changed the index, not the bundles).
    RefreshTasks,
    /// One task's bundle and its episodes.
    LoadTask(String),
    /// One task's image and build-cache state (the Environment tab).
    LoadTaskEnv(String),
    /// Every episode row.
    LoadEpisodes,
    /// Set a task's curation status.
    SetStatus(String, TaskStatus),
    /// Set (or clear) a task's 1-5 rating.
    SetRating(String, Option<u8>),
    /// Replace a task's tags.
    SetTags(String, Vec<String>),
    /// Replace a task's notes.
    SetNotes(String, String),
    /// Open `tasks/<id>/<file>` in `$EDITOR`, then reload the task.
    OpenEditor {
        /// The task.
        id: String,
        /// The file inside its bundle.
        file: PathBuf,
    },
    /// The jobs journal.
    LoadJobs,
    /// The last lines of a job's kept log, by job id.
    LoadJobLog(String),
    /// The last lines of a shard's log file, for the Jobs view row `id`.
    LoadFileLog(String, PathBuf),
    /// Read an episode's result and recording for the inspector.
    LoadEpisode {
        /// The episode's index row.
        row: EpisodeRow,
        /// Open it beside the inspected one.
        compare: bool,
    },
    /// Find an episode in the index by its key and read it for the
    /// inspector (a finished Live strip opens its episode this way).
    OpenEpisode {
        /// The episode's run.
        run: String,
        /// Its task.
        task: String,
        /// Its sample number.
        sample: u32,
    },
    /// Rate / label / annotate an episode.
    RateEpisode {
        /// The episode's run.
        run: String,
        /// Its task.
        task: String,
        /// Its sample number.
        sample: u32,
        /// A 1-5 rating, or none.
        rating: Option<u8>,
        /// A failure label (see `views::inspector::LABELS`), or none.
        label: Option<String>,
        /// Free-form notes.
        notes: String,
    },
    /// Write every rated / labelled / annotated episode to `<workspace>/ratings.jsonl`.
    ExportRatings,
    /// Undo a curation change: serve `revert` (a curation request) and say
    /// `what` instead of its own message.
    Undo {
        /// The status line's text (`undone: …`).
        what: String,
        /// The request that restores the earlier state.
        revert: Box<Request>,
    },
    /// Start a background job (the event loop's launcher serves it).
    Launch(JobSpec),
    /// Cancel a job (the event loop's launcher serves it).
    CancelJob(String),
    /// Find the first seed whose batch of this many offline tasks is new.
    NextFreeSeed(usize),
    /// Read the launch forms' last values (`<workspace>/tui-forms.json`).
    LoadFormValues,
    /// Write the launch forms' last values, by form, then by field.
    SaveFormValues(FormValues),
    /// A task's repair against the version it was made from (the review).
    LoadRepair(String),
    /// Accept a task's repair (the task is accepted) or discard it (the
    /// version it was made from is current again).
    ResolveRepair {
        /// The task.
        id: String,
        /// Accept (else discard).
        accept: bool,
    },
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
