//! What people see of a session, made in one place: the shell's output
//! with the exec protocol's markers taken out ([`MarkerFilter`]), and each
//! command line echoed after its prompt as a terminal would have shown it.
//! It goes to the asciicast recording and to live viewers, each within its
//! byte budget.

use std::sync::Arc;

use tokio::sync::broadcast;

use super::asciicast::{stop_marker, Prompt, Recorder};
use super::marker_filter::MarkerFilter;

/// A chunk of raw PTY output, shared with every subscriber.
pub type Chunk = Arc<[u8]>;

/// The live broadcast, cut off with a notice after `max_bytes`.
pub(super) struct LiveSender {
    live: broadcast::Sender<Chunk>,
    left: u64,
    max_bytes: u64,
}

impl LiveSender {
    /// Send to `live` at most `max_bytes`.
    pub(super) fn new(live: broadcast::Sender<Chunk>, max_bytes: u64) -> Self {
        Self {
            live,
            left: max_bytes,
            max_bytes,
        }
    }

    /// Send `chunk` to viewers while the budget lasts; the chunk that
    /// exhausts it is replaced by the notice, later ones are dropped.
    fn send(&mut self, chunk: &[u8]) {
        if self.left == 0 || chunk.is_empty() {
            return;
        }
        match self.left.checked_sub(chunk.len() as u64) {
            Some(left) => {
                self.left = left;
                let _ = self.live.send(Arc::from(chunk));
            }
            None => {
                self.left = 0;
                let notice = stop_marker("live output", self.max_bytes);
                let _ = self.live.send(Arc::from(notice.as_bytes()));
            }
        }
    }
}

/// A session's recording and live stream, fed by its PTY reader (output)
/// and by the session itself (command lines, input, resizes).
pub(super) struct Audience {
    filter: MarkerFilter,
    recorder: Option<Recorder>,
    live: LiveSender,
    /// A human's line, echoed when they sent it: the command that runs it
    /// is not echoed again.
    human_line: Option<String>,
}

impl Audience {
    /// Record to `recorder` (if any) and stream to `live`.
    pub(super) fn new(recorder: Option<Recorder>, live: LiveSender) -> Self {
        Audience {
            filter: MarkerFilter::default(),
            recorder,
            live,
            human_line: None,
        }
    }

    /// Raw bytes the shell printed (any chunking).
    pub(super) fn output(&mut self, raw: &[u8]) {
        let shown = self.filter.push_bytes(raw);
        self.show(&shown);
    }

    /// The shell's output ended: what was held back was no marker.
    pub(super) fn finish(&mut self) {
        let held = self.filter.finish();
        self.show(&held);
        self.flush();
    }

    /// `command` is about to run: echoed after the agent's prompt, in the
    /// recording and to live viewers, unless it is the line a human just
    /// sent (echoed then, see [`Audience::human_line`]).
    pub(super) fn command(&mut self, command: &str) {
        if self.human_line.take().as_deref() == Some(command) {
            return;
        }
        self.echo(Prompt::Agent, command);
        self.live.send(Prompt::Agent.echo(command).as_bytes());
    }

    /// A human sent `line` from a live pane (it runs next): echoed after
    /// their prompt in the recording. The pane they typed it in echoes it
    /// itself, when they send it, so live viewers get no second echo.
    pub(super) fn human_line(&mut self, line: &str) {
        self.echo(Prompt::Human, line);
        self.human_line = Some(line.to_string());
    }

    /// Raw input typed into the terminal.
    pub(super) fn input(&mut self, bytes: &[u8]) {
        if let Some(r) = self.recorder.as_mut() {
            r.input(bytes);
        }
    }

    /// The terminal was resized.
    pub(super) fn resize(&mut self, cols: u16, rows: u16) {
        if let Some(r) = self.recorder.as_mut() {
            r.resize(cols, rows);
        }
    }

    /// Write buffered recording events to disk.
    pub(super) fn flush(&mut self) {
        if let Some(r) = self.recorder.as_mut() {
            r.flush();
        }
    }

    /// Put `line` in the recording after `prompt`, on a line of its own.
    fn echo(&mut self, prompt: Prompt, line: &str) {
        let before = self.filter.before_line();
        self.show(&before);
        if let Some(r) = self.recorder.as_mut() {
            r.command_line(prompt, line);
        }
    }

    /// Bytes people see: recorded and streamed.
    fn show(&mut self, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        if let Some(r) = self.recorder.as_mut() {
            r.output(bytes);
        }
        self.live.send(bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An audience recording to a temp file: (audience, live receiver, path).
    fn audience(
        dir: &tempfile::TempDir,
    ) -> (Audience, broadcast::Receiver<Chunk>, std::path::PathBuf) {
        let path = dir.path().join("s.cast");
        let rec = Recorder::create(&path, 80, 24, 1 << 20).unwrap();
        let (tx, rx) = broadcast::channel(64);
        (
            Audience::new(Some(rec), LiveSender::new(tx, 1 << 20)),
            rx,
            path,
        )
    }

    fn events(path: &std::path::Path) -> Vec<(String, String)> {
        std::fs::read_to_string(path)
            .unwrap()
            .lines()
            .skip(1)
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                (v[1].as_str().unwrap().into(), v[2].as_str().unwrap().into())
            })
            .collect()
    }

    #[test]
    fn recordings_and_live_viewers_get_clean_output_and_every_command() {
        let dir = tempfile::tempdir().unwrap();
        let (mut a, mut rx, path) = audience(&dir);
        a.output(b"\r\n__ENDLESS_tok_ready_0__\r\n");
        a.command("echo hi; printf x");
        a.output(b"hi\r\nx");
        a.output(b"\r\n__ENDLESS_tok_1_0__\r\n");
        a.human_line("ls");
        a.command("ls");
        a.output(b"a.txt\r\n\r\n__ENDL");
        a.output(b"ESS_tok_2_0__\r\n");
        a.finish();
        let agent = Prompt::Agent.echo("echo hi; printf x");
        let human = Prompt::Human.echo("ls");
        let shown: String = events(&path)
            .into_iter()
            .filter(|(k, _)| k == "o")
            .map(|(_, d)| d)
            .collect();
        assert_eq!(shown, format!("{agent}hi\r\nx\r\n{human}a.txt\r\n"));
        let typed: Vec<String> = events(&path)
            .into_iter()
            .filter(|(k, _)| k == "i")
            .map(|(_, d)| d)
            .collect();
        assert_eq!(typed, ["echo hi; printf x\r", "ls\r"]);
        // Live viewers see the same, but for the human's echo (their pane
        // showed it as they sent it).
        let mut live = Vec::new();
        while let Ok(chunk) = rx.try_recv() {
            live.extend_from_slice(&chunk);
        }
        assert_eq!(
            String::from_utf8(live).unwrap(),
            format!("{agent}hi\r\nx\r\na.txt\r\n")
        );
    }

    #[test]
    fn echoes_count_against_the_live_budget() {
        let (tx, mut rx) = broadcast::channel(64);
        let mut a = Audience::new(None, LiveSender::new(tx, 16));
        a.output(b"01234567\r\n");
        a.command("a command longer than what is left");
        a.command("ls");
        let chunks: Vec<Chunk> = std::iter::from_fn(|| rx.try_recv().ok()).collect();
        assert_eq!(chunks.len(), 2, "{chunks:?}");
        assert_eq!(&*chunks[1], stop_marker("live output", 16).as_bytes());
    }
}
