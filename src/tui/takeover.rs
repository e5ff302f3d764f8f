//! "Take over" a running episode: the user types into the sandbox session
//! of a zoomed live pane, between the agent's turns.
//!
//! No hook in the agent or sandbox is needed: [`TakeoverProvider`] wraps the
//! real [`BackendProvider`] and hands the episode loop a [`TakeoverTerm`],
//! whose `exec` first serves the human. While a pane is taken over, the
//! agent's next command waits; the user's keystrokes go to the session with
//! `Session::write_input` (so the `.cast` recording has them too). Giving
//! the session back clears the half-typed line (ctrl-u) and the agent goes
//! on. A command already running when the takeover starts finishes first.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

use crate::agent::{
    BackendProvider, LiveStream, SandboxProvider, StartOptions, Terminal, TerminalError,
    Verification,
};
use crate::sandbox::{ExecResult, Session};
use crate::task::Task;

struct Control {
    taken: AtomicBool,
    tx: Mutex<mpsc::Sender<Vec<u8>>>,
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

    /// Type bytes into the session (delivered while taken over).
    pub fn send(&self, bytes: Vec<u8>) {
        if let Ok(tx) = self.0.tx.lock() {
            let _ = tx.send(bytes);
        }
    }
}

/// A terminal that a human can type into.
pub trait HumanInput {
    /// Type raw bytes, as a human at the keyboard would.
    fn write_input(&mut self, bytes: &[u8]) -> Result<(), TerminalError>;
}

impl HumanInput for Session {
    fn write_input(&mut self, bytes: &[u8]) -> Result<(), TerminalError> {
        Session::write_input(self, bytes).map_err(TerminalError::from)
    }
}

/// The episode's terminal, serving the human first while taken over.
pub struct TakeoverTerm<T> {
    /// The real terminal.
    pub inner: T,
    rx: mpsc::Receiver<Vec<u8>>,
    control: Arc<Control>,
    stop: Arc<AtomicBool>,
}

impl<T: Terminal + HumanInput> TakeoverTerm<T> {
    /// Wrap `inner`; the handle goes to the UI. `stop` ends a takeover wait
    /// (the job was cancelled).
    pub fn new(inner: T, stop: Arc<AtomicBool>) -> (TakeoverTerm<T>, TakeoverHandle) {
        let (tx, rx) = mpsc::channel();
        let control = Arc::new(Control {
            taken: AtomicBool::new(false),
            tx: Mutex::new(tx),
        });
        (
            TakeoverTerm {
                inner,
                rx,
                control: control.clone(),
                stop,
            },
            TakeoverHandle(control),
        )
    }

    /// Forward the human's keystrokes until the session is given back.
    fn serve_human(&mut self) -> Result<(), TerminalError> {
        let mut was_taken = false;
        loop {
            while let Ok(bytes) = self.rx.try_recv() {
                self.inner.write_input(&bytes)?;
                was_taken = true;
            }
            if !self.control.taken.load(Ordering::SeqCst) || self.stop.load(Ordering::Relaxed) {
                break;
            }
            was_taken = true;
            std::thread::sleep(Duration::from_millis(20));
        }
        if was_taken {
            // Clear whatever the human left on the command line.
            self.inner.write_input(b"\x15")?;
        }
        Ok(())
    }
}

/// The error that ends an episode cut short by cancelling its job (the
/// evaluation leaves such episodes out).
pub use crate::workbench::eval::CANCELLED;

impl<T: Terminal + HumanInput> Terminal for TakeoverTerm<T> {
    fn exec(&mut self, command: &str, timeout: Duration) -> Result<ExecResult, TerminalError> {
        self.serve_human()?;
        // A cancelled job does not wait for its episodes to run out of turns.
        if self.stop.load(Ordering::Relaxed) {
            return Err(TerminalError::infra(CANCELLED));
        }
        self.inner.exec(command, timeout)
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

/// The bytes a terminal sends for a key (None: nothing to send).
pub fn key_bytes(key: &KeyEvent) -> Option<Vec<u8>> {
    let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
    Some(match key.code {
        KeyCode::Char(c) if ctrl && c.is_ascii_alphabetic() => {
            vec![(c.to_ascii_lowercase() as u8) & 0x1f]
        }
        KeyCode::Char(c) => {
            let mut b = [0u8; 4];
            c.encode_utf8(&mut b).as_bytes().to_vec()
        }
        KeyCode::Enter => b"\r".to_vec(),
        KeyCode::Backspace => vec![0x7f],
        KeyCode::Tab => b"\t".to_vec(),
        KeyCode::Esc => vec![0x1b],
        KeyCode::Up => b"\x1b[A".to_vec(),
        KeyCode::Down => b"\x1b[B".to_vec(),
        KeyCode::Right => b"\x1b[C".to_vec(),
        KeyCode::Left => b"\x1b[D".to_vec(),
        KeyCode::Home => b"\x1b[H".to_vec(),
        KeyCode::End => b"\x1b[F".to_vec(),
        KeyCode::Delete => b"\x1b[3~".to_vec(),
        _ => return None,
    })
}

/// The key that gives the session back: ctrl-].
pub fn is_release(key: &KeyEvent) -> bool {
    key.modifiers.contains(KeyModifiers::CONTROL)
        && matches!(key.code, KeyCode::Char(']') | KeyCode::Char('5'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Fake {
        log: Vec<String>,
    }

    impl Terminal for Fake {
        fn exec(&mut self, command: &str, _: Duration) -> Result<ExecResult, TerminalError> {
            self.log.push(format!("exec {command}"));
            Ok(ExecResult {
                output: String::new(),
                exit_code: Some(0),
                timed_out: false,
                truncated: false,
                duration: Duration::ZERO,
            })
        }
    }

    impl HumanInput for Fake {
        fn write_input(&mut self, bytes: &[u8]) -> Result<(), TerminalError> {
            self.log
                .push(format!("human {}", String::from_utf8_lossy(bytes)));
            Ok(())
        }
    }

    #[test]
    fn the_agent_waits_while_the_human_types() {
        let (mut term, handle) = TakeoverTerm::new(Fake::default(), Arc::default());
        handle.set_taken(true);
        handle.send(b"ls\r".to_vec());
        let h = handle.clone();
        let t = std::thread::spawn(move || {
            term.exec("echo agent", Duration::from_secs(1)).unwrap();
            term
        });
        std::thread::sleep(Duration::from_millis(100));
        h.send(b"pwd\r".to_vec());
        std::thread::sleep(Duration::from_millis(100));
        h.set_taken(false);
        let term = t.join().unwrap();
        assert_eq!(
            term.inner.log,
            [
                "human ls\r",
                "human pwd\r",
                "human \u{15}",
                "exec echo agent"
            ]
        );
        let stop = Arc::new(AtomicBool::new(true));
        let (mut term, _) = TakeoverTerm::new(Fake::default(), stop);
        let err = term.exec("ls", Duration::from_secs(1)).unwrap_err();
        assert_eq!(err.message, CANCELLED);
        assert!(term.inner.log.is_empty());
        assert_eq!(
            episode_of(Path::new("/r/episodes/upper/3.cast")),
            Some(("upper".into(), 3))
        );
        let k = |c, m| key_bytes(&KeyEvent::new(c, m)).unwrap();
        assert_eq!(k(KeyCode::Char('c'), KeyModifiers::CONTROL), vec![3]);
        assert_eq!(k(KeyCode::Enter, KeyModifiers::NONE), b"\r".to_vec());
        assert!(is_release(&KeyEvent::new(
            KeyCode::Char(']'),
            KeyModifiers::CONTROL
        )));
    }
}
