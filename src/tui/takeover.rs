//! "Take over" a running episode: the user runs commands in the sandbox
//! session of a zoomed live pane, between the agent's turns.
//!
//! No hook in the agent or sandbox is needed: [`TakeoverProvider`] wraps the
//! real [`BackendProvider`] and hands the episode loop a [`TakeoverTerm`],
//! whose `exec` first serves the human. While a pane is taken over, the
//! agent's next command waits; each line the user types (echoed in the pane
//! as they type it) runs in the session like an agent's command, and is
//! reported to the episode loop ([`Terminal::take_human`]), which records it
//! as a step of kind `human` with its output and marks the episode as taken
//! over. Giving the session back lets the agent go on. A command already
//! running when the takeover starts finishes first.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

use crate::agent::{
    BackendProvider, HumanCommand, HumanTurn, LiveStream, SandboxProvider, StartOptions, Terminal,
    TerminalError, Verification,
};
use crate::sandbox::{ExecResult, Session};
use crate::task::Task;

/// The shortest limit a human's command gets (the agent's command limit,
/// when longer, applies).
pub const HUMAN_COMMAND_TIMEOUT: Duration = Duration::from_secs(60);

struct Control {
    taken: AtomicBool,
    /// Commands sent and not yet run.
    queued: AtomicUsize,
    tx: Mutex<mpsc::Sender<String>>,
}

/// The UI's handle on one episode's session.
#[derive(Clone)]
pub struct TakeoverHandle(Arc<Control>);

impl std::fmt::Debug for TakeoverHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TakeoverHandle(taken: {})", self.is_taken())
    }
}

impl PartialEq for TakeoverHandle {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl TakeoverHandle {
    /// Take the session over (`true`) or give it back.
    pub fn set_taken(&self, on: bool) {
        self.0.taken.store(on, Ordering::SeqCst);
    }

    /// Whether the user holds the session.
    pub fn is_taken(&self) -> bool {
        self.0.taken.load(Ordering::SeqCst)
    }

    /// Run `command` in the session (it runs while the session is taken
    /// over, once the agent's running command, if any, has finished).
    pub fn submit(&self, command: String) {
        if let Ok(tx) = self.0.tx.lock() {
            if tx.send(command).is_ok() {
                self.0.queued.fetch_add(1, Ordering::SeqCst);
            }
        }
    }

    /// Commands submitted that have not finished running yet.
    pub fn queued(&self) -> usize {
        self.0.queued.load(Ordering::SeqCst)
    }
}

/// The episode's terminal, serving the human first while taken over.
pub struct TakeoverTerm<T> {
    /// The real terminal.
    pub inner: T,
    rx: mpsc::Receiver<String>,
    control: Arc<Control>,
    stop: Arc<AtomicBool>,
    /// What the human did during the last `exec`, until the loop takes it.
    human: Option<HumanTurn>,
}

impl<T: Terminal> TakeoverTerm<T> {
    /// Wrap `inner`; the handle goes to the UI. `stop` ends a takeover wait
    /// (the job was cancelled).
    pub fn new(inner: T, stop: Arc<AtomicBool>) -> (TakeoverTerm<T>, TakeoverHandle) {
        let (tx, rx) = mpsc::channel();
        let control = Arc::new(Control {
            taken: AtomicBool::new(false),
            queued: AtomicUsize::new(0),
            tx: Mutex::new(tx),
        });
        (
            TakeoverTerm {
                inner,
                rx,
                control: control.clone(),
                stop,
                human: None,
            },
            TakeoverHandle(control),
        )
    }

    /// Run the human's commands until the session is given back; what they
    /// did is kept for [`Terminal::take_human`]. A shell failure during a
    /// human's command ends the wait with that error.
    fn serve_human(&mut self, timeout: Duration) -> Result<(), TerminalError> {
        let timeout = timeout.max(HUMAN_COMMAND_TIMEOUT);
        let mut turn: Option<HumanTurn> = None;
        let mut failed = None;
        loop {
            // Read the flag before the queue: a command sent just before
            // the session was given back still runs.
            let taken = self.control.taken.load(Ordering::SeqCst);
            if taken && turn.is_none() {
                turn = Some(new_turn());
            }
            while let Ok(command) = self.rx.try_recv() {
                let t = turn.get_or_insert_with(new_turn);
                let ran = Instant::now();
                // The recording shows what the human typed.
                self.inner.human_line(&command);
                let result = self.inner.exec(&command, timeout);
                self.control.queued.fetch_sub(1, Ordering::SeqCst);
                failed = result.as_ref().err().cloned();
                t.commands.push(HumanCommand {
                    command,
                    result,
                    secs: ran.elapsed().as_secs_f64(),
                });
                if failed.is_some() {
                    break;
                }
            }
            if failed.is_some() || !taken || self.stop.load(Ordering::Relaxed) {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        if let Some(mut t) = turn {
            t.held_secs = t.taken.elapsed().as_secs_f64();
            self.human = Some(t);
        }
        failed.map_or(Ok(()), Err)
    }
}

/// A take-over starting now.
fn new_turn() -> HumanTurn {
    HumanTurn {
        taken_at: chrono::Utc::now(),
        taken: Instant::now(),
        held_secs: 0.0,
        commands: Vec::new(),
    }
}

/// The error that ends an episode cut short by cancelling its job (the
/// evaluation leaves such episodes out).
pub use crate::workbench::CANCELLED;

impl<T: Terminal> Terminal for TakeoverTerm<T> {
    fn exec(&mut self, command: &str, timeout: Duration) -> Result<ExecResult, TerminalError> {
        self.serve_human(timeout)?;
        // A cancelled job does not wait for its episodes to run out of turns.
        if self.stop.load(Ordering::Relaxed) {
            return Err(TerminalError::infra(CANCELLED));
        }
        self.inner.exec(command, timeout)
    }

    fn take_human(&mut self) -> Option<HumanTurn> {
        self.human.take()
    }
}

/// The real sandbox provider, with a takeover handle per episode.
pub struct TakeoverProvider {
    inner: BackendProvider,
    stop: Arc<AtomicBool>,
    handles: Mutex<HashMap<(String, u32), TakeoverHandle>>,
}

impl TakeoverProvider {
    /// Wrap `inner`; `stop` (the run's cancel flag) ends takeover waits.
    pub fn new(inner: BackendProvider, stop: Arc<AtomicBool>) -> TakeoverProvider {
        TakeoverProvider {
            inner,
            stop,
            handles: Mutex::new(HashMap::new()),
        }
    }

    /// The handle of sample `sample` of `task` (once; it was started with a recording).
    pub fn handle(&self, task: &str, sample: u32) -> Option<TakeoverHandle> {
        self.handles
            .lock()
            .ok()?
            .remove(&(task.to_string(), sample))
    }
}

/// `(task, sample)` from an episode's recording path `.../<task>/<sample>.cast`.
fn episode_of(record: &Path) -> Option<(String, u32)> {
    let sample = record.file_stem()?.to_str()?.parse().ok()?;
    let task = record.parent()?.file_name()?.to_str()?.to_string();
    Some((task, sample))
}

impl SandboxProvider for TakeoverProvider {
    type Term = TakeoverTerm<Session>;

    fn prepare(&self, task: &Task) -> Result<(), TerminalError> {
        self.inner.prepare(task)
    }

    fn start(&self, task: &Task, options: &StartOptions) -> Result<Self::Term, TerminalError> {
        let session = self.inner.start(task, options)?;
        let (term, handle) = TakeoverTerm::new(session, self.stop.clone());
        if let Some(key) = options.record.as_deref().and_then(episode_of) {
            if let Ok(mut h) = self.handles.lock() {
                h.insert(key, handle);
            }
        }
        Ok(term)
    }

    fn verify(&self, term: &mut Self::Term, task: &Task) -> Result<Verification, TerminalError> {
        term.control.taken.store(false, Ordering::SeqCst);
        self.inner.verify(&mut term.inner, task)
    }

    fn stream(&self, term: &Self::Term) -> Option<LiveStream> {
        self.inner.stream(&term.inner)
    }
}

/// The key that gives the session back: ctrl-].
pub fn is_release(key: &KeyEvent) -> bool {
    key.modifiers.contains(KeyModifiers::CONTROL)
        && matches!(key.code, KeyCode::Char(']') | KeyCode::Char('5'))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs commands by name (`fail` exits 1, `die` kills the shell) and
    /// logs them.
    #[derive(Default)]
    struct Fake {
        log: Vec<String>,
        /// What was noted as typed by a human.
        typed: Vec<String>,
    }

    impl Terminal for Fake {
        fn human_line(&mut self, command: &str) {
            self.typed.push(command.to_string());
        }

        fn exec(&mut self, command: &str, _: Duration) -> Result<ExecResult, TerminalError> {
            self.log.push(command.to_string());
            if command == "die" {
                return Err(TerminalError::shell_died("the PTY closed"));
            }
            Ok(ExecResult {
                output: format!("out of {command}"),
                exit_code: Some(if command == "fail" { 1 } else { 0 }),
                timed_out: false,
                truncated: false,
                duration: Duration::ZERO,
            })
        }
    }

    #[test]
    fn the_agent_waits_while_the_human_runs_commands() {
        let (mut term, handle) = TakeoverTerm::new(Fake::default(), Arc::default());
        handle.set_taken(true);
        handle.submit("ls".into());
        assert_eq!(handle.queued(), 1);
        let h = handle.clone();
        let t = std::thread::spawn(move || {
            term.exec("echo agent", Duration::from_secs(1)).unwrap();
            term
        });
        std::thread::sleep(Duration::from_millis(100));
        h.submit("fail".into());
        // Sent just before giving the session back: it still runs first.
        h.submit("pwd".into());
        h.set_taken(false);
        let mut term = t.join().unwrap();
        assert_eq!(term.inner.log, ["ls", "fail", "pwd", "echo agent"]);
        // The human's lines (not the agent's) are noted for the recording.
        assert_eq!(term.inner.typed, ["ls", "fail", "pwd"]);
        assert_eq!(handle.queued(), 0);
        let human = term.take_human().unwrap();
        let ran: Vec<(&str, Option<i32>)> = human
            .commands
            .iter()
            .map(|c| {
                let r = c.result.as_ref().unwrap();
                (c.command.as_str(), r.exit_code)
            })
            .collect();
        assert_eq!(ran, [("ls", Some(0)), ("fail", Some(1)), ("pwd", Some(0))]);
        assert!(human.held_secs >= 0.1, "{}", human.held_secs);
        assert!(term.take_human().is_none(), "taken once");
        // Nobody took it over: nothing to report.
        term.exec("true", Duration::from_secs(1)).unwrap();
        assert!(term.take_human().is_none());
    }

    #[test]
    fn a_human_taking_the_session_without_commands_is_still_a_takeover() {
        let (mut term, handle) = TakeoverTerm::new(Fake::default(), Arc::default());
        handle.set_taken(true);
        let h = handle.clone();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            h.set_taken(false);
        });
        term.exec("ls", Duration::from_secs(1)).unwrap();
        t.join().unwrap();
        let human = term.take_human().unwrap();
        assert!(human.commands.is_empty());
    }

    #[test]
    fn a_shell_dying_under_the_human_ends_the_wait_with_the_error() {
        let (mut term, handle) = TakeoverTerm::new(Fake::default(), Arc::default());
        handle.set_taken(true);
        handle.submit("die".into());
        handle.submit("ls".into());
        let err = term.exec("echo agent", Duration::from_secs(1)).unwrap_err();
        assert_eq!(err.message, "the PTY closed");
        assert_eq!(term.inner.log, ["die"]);
        let human = term.take_human().unwrap();
        assert!(human.commands[0].result.is_err());
    }

    #[test]
    fn cancelling_ends_the_wait_and_keys_and_paths_parse() {
        let stop = Arc::new(AtomicBool::new(true));
        let (mut term, handle) = TakeoverTerm::new(Fake::default(), stop);
        handle.set_taken(true);
        let err = term.exec("ls", Duration::from_secs(1)).unwrap_err();
        assert_eq!(err.message, CANCELLED);
        assert!(term.inner.log.is_empty());
        assert_eq!(
            episode_of(Path::new("/r/episodes/upper/3.cast")),
            Some(("upper".into(), 3))
        );
        assert!(is_release(&KeyEvent::new(
            KeyCode::Char(']'),
            KeyModifiers::CONTROL
        )));
        assert!(!is_release(&KeyEvent::new(
            KeyCode::Char(']'),
            KeyModifiers::NONE
        )));
    }
}
