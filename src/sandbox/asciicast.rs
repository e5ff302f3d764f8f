//! Asciicast v2 recording of what people see of a session: its output
//! (the exec protocol's markers taken out before it gets here) and each
//! command line echoed after its prompt ([`Prompt`]), the agent's and a
//! human's alike, as a terminal would have shown it.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::time::Instant;

use super::SandboxError;

/// Whose command line is echoed, and after which prompt: in recordings, in
/// live panes and in replays alike.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Prompt {
    /// The policy's command: a bold cyan `agent$ ` line.
    Agent,
    /// A person's, typed while holding the session: a bold yellow `you$ `
    /// line.
    Human,
}

/// What ends an echoed command line: the style reset, then a new line.
const ECHO_END: &str = "\x1b[0m\r\n";

/// What starts a continuation line of a multi-line command (bash's `PS2`).
const CONTINUATION: &str = "\r\n> ";

impl Prompt {
    /// The prompt itself: `agent$ ` or `you$ `.
    pub fn text(self) -> &'static str {
        match self {
            Prompt::Agent => "agent$ ",
            Prompt::Human => "you$ ",
        }
    }

    /// The escape sequence that styles the echoed line.
    fn style(self) -> &'static str {
        match self {
            Prompt::Agent => "\x1b[1;36m",
            Prompt::Human => "\x1b[1;33m",
        }
    }

    /// `command` as a terminal shows it typed after this prompt, styled and
    /// ending with a new line: each further line of a multi-line command
    /// after `> `, control characters as `^X` (so that no command can drive
    /// the viewer's terminal).
    pub fn echo(self, command: &str) -> String {
        let mut out = String::with_capacity(command.len() + 24);
        out.push_str(self.style());
        out.push_str(self.text());
        for (i, line) in command_lines(command).enumerate() {
            if i > 0 {
                out.push_str(CONTINUATION);
            }
            push_visible(line, &mut out);
        }
        out.push_str(ECHO_END);
        out
    }
}

/// The lines of `command`, without the newline that usually ends it.
fn command_lines(command: &str) -> impl Iterator<Item = &str> {
    command
        .trim_end_matches(['\n', '\r'])
        .split('\n')
        .map(|l| l.strip_suffix('\r').unwrap_or(l))
}

/// The keys typed to enter `command`: each line and the Enter after it.
fn keystrokes(command: &str) -> String {
    let mut out = String::with_capacity(command.len() + 1);
    for line in command_lines(command) {
        out.push_str(line);
        out.push('\r');
    }
    out
}

/// Append `line` with its control characters made visible: `^X` for C0
/// and DEL (as the tty's `echoctl` shows them), `\u{fffd}` for C1; tabs
/// stay.
fn push_visible(line: &str, out: &mut String) {
    for c in line.chars() {
        match c {
            '\t' => out.push(c),
            '\x00'..='\x1f' => {
                out.push('^');
                out.push(char::from(c as u8 + 0x40));
            }
            '\x7f' => out.push_str("^?"),
            c if c.is_control() => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
}

/// Room kept below the cap for the final marker event.
const MARKER_ROOM: u64 = 128;

/// Writes an asciicast v2 file: a JSON header line, then one
/// `[seconds, "o"|"i"|"r", data]` line per event. The file never grows past
/// its cap: the event that would cross it is replaced by one output event
/// saying the recording stopped, and nothing is written after that. Each
/// event is flushed as it is written, so the file can be tailed live.
pub struct Recorder {
    out: BufWriter<File>,
    start: Instant,
    /// Bytes of an incomplete UTF-8 sequence carried to the next chunk.
    carry: Vec<u8>,
    /// Bytes written so far (header included).
    written: u64,
    /// Most bytes the file may hold.
    max_bytes: u64,
    /// The cap was reached and the marker written.
    stopped: bool,
}

/// The text that ends a stream (`what`: "recording", "live output") cut at
/// `max_bytes`.
pub fn stop_marker(what: &str, max_bytes: u64) -> String {
    format!(
        "\r\n[endless: {what} stopped at {}]\r\n",
        human_bytes(max_bytes)
    )
}

/// `32 MiB`, `1.5 KiB`, `100 B`.
fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut v = n as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 || v.fract() == 0.0 {
        format!("{v:.0} {}", UNITS[unit])
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

impl Recorder {
    /// Create the file and write the header; the file will hold at most
    /// `max_bytes` (at least the header and the stop marker).
    pub fn create(path: &Path, cols: u16, rows: u16, max_bytes: u64) -> Result<Self, SandboxError> {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .map_err(SandboxError::io("create recording directory", parent))?;
        }
        let file = File::create(path).map_err(SandboxError::io("create recording", path))?;
        let mut out = BufWriter::new(file);
        let header = serde_json::json!({
            "version": 2,
            "width": cols,
            "height": rows,
            "timestamp": chrono::Utc::now().timestamp(),
            "env": {"TERM": "xterm-256color", "SHELL": "/bin/bash"},
        });
        let header = format!("{header}\n");
        out.write_all(header.as_bytes())
            .map_err(SandboxError::io("write recording", path))?;
        let written = header.len() as u64;
        Ok(Self {
            out,
            start: Instant::now(),
            carry: Vec::new(),
            written,
            max_bytes: max_bytes.max(written + MARKER_ROOM),
            stopped: false,
        })
    }

    /// Whether the cap was reached (nothing more is recorded).
    pub fn stopped(&self) -> bool {
        self.stopped
    }

    /// Record output bytes (split UTF-8 sequences are joined across chunks).
    pub fn output(&mut self, bytes: &[u8]) {
        if self.stopped {
            return;
        }
        self.carry.extend_from_slice(bytes);
        let valid = match std::str::from_utf8(&self.carry) {
            Ok(_) => self.carry.len(),
            Err(e) if e.error_len().is_none() => e.valid_up_to(),
            Err(_) => self.carry.len(),
        };
        let text = String::from_utf8_lossy(&self.carry[..valid]).into_owned();
        self.carry.drain(..valid);
        if !text.is_empty() {
            self.event("o", &text);
        }
    }

    /// Record input typed by a human.
    pub fn input(&mut self, bytes: &[u8]) {
        self.event("i", &String::from_utf8_lossy(bytes));
    }

    /// Record a command line about to run: as input (`"i"`, each line and
    /// the Enter that sent it) and as the echo a person would have seen
    /// (`"o"`, the line after `prompt`), since the session's terminal does
    /// not echo and the exec protocol sends commands unseen.
    pub fn command_line(&mut self, prompt: Prompt, line: &str) {
        self.flush_carry();
        self.event("i", &keystrokes(line));
        self.event("o", &prompt.echo(line));
    }

    /// Write out an incomplete UTF-8 sequence still carried (nothing will
    /// complete it before the next event).
    fn flush_carry(&mut self) {
        if !self.carry.is_empty() {
            let text = String::from_utf8_lossy(&self.carry).into_owned();
            self.carry.clear();
            self.event("o", &text);
        }
    }

    /// Record a terminal resize.
    pub fn resize(&mut self, cols: u16, rows: u16) {
        self.event("r", &format!("{cols}x{rows}"));
    }

    fn event(&mut self, kind: &str, data: &str) {
        if self.stopped {
            return;
        }
        let t = (self.start.elapsed().as_secs_f64() * 1e6).round() / 1e6;
        let mut line = format!("{}\n", serde_json::json!([t, kind, data]));
        if self.written + line.len() as u64 + MARKER_ROOM > self.max_bytes {
            self.stopped = true;
            self.carry.clear();
            line = format!(
                "{}\n",
                serde_json::json!([t, "o", stop_marker("recording", self.max_bytes)])
            );
        }
        self.written += line.len() as u64;
        // Recording is best effort: a full disk must not break the episode.
        // Flushed per event: watchers (the TUI's Live view in another
        // process) tail the file while the session runs.
        let _ = self.out.write_all(line.as_bytes());
        let _ = self.out.flush();
    }

    /// Flush buffered events to disk.
    pub fn flush(&mut self) {
        let _ = self.out.flush();
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_header_and_events_joining_utf8() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.cast");
        {
            let mut r = Recorder::create(&path, 80, 24, 1 << 20).unwrap();
            let e = "é".as_bytes();
            r.output(&[b'a', e[0]]);
            r.output(&[e[1], b'b']);
            r.resize(100, 30);
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines[0]["version"], 2);
        assert_eq!(lines[0]["width"], 80);
        assert_eq!(lines[1][1], "o");
        assert_eq!(lines[1][2], "a");
        assert_eq!(lines[2][2], "éb");
        assert_eq!(lines[3][1], "r");
        assert_eq!(lines[3][2], "100x30");
    }

    #[test]
    fn a_humans_line_is_recorded_as_input_and_echoed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("h.cast");
        {
            let mut r = Recorder::create(&path, 80, 24, 1 << 20).unwrap();
            r.output(b"agent output\r\n");
            r.command_line(Prompt::Human, "ls -l ~/data");
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(
            (&lines[2][1], &lines[2][2]),
            (&"i".into(), &"ls -l ~/data\r".into())
        );
        assert_eq!(lines[3][1], "o");
        assert_eq!(lines[3][2], "\x1b[1;33myou$ ls -l ~/data\x1b[0m\r\n");
    }

    #[test]
    fn stops_at_the_cap_with_one_marker() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("b.cast");
        let cap = 4096;
        let mut r = Recorder::create(&path, 80, 24, cap).unwrap();
        for _ in 0..1000 {
            r.output(b"y\r\ny\r\n\x1b[2J");
        }
        assert!(r.stopped());
        r.input(b"more");
        r.resize(10, 10);
        drop(r);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.len() as u64 <= cap, "{} bytes", text.len());
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let last = lines.last().unwrap();
        assert_eq!(last[1], "o");
        assert_eq!(last[2], stop_marker("recording", cap));
        assert!(stop_marker("recording", cap).contains("recording stopped at 4 KiB"));
        assert_eq!(
            lines
                .iter()
                .filter(|l| l[2] == stop_marker("recording", cap))
                .count(),
            1
        );
    }

    #[test]
    fn an_agents_command_is_echoed_after_its_own_prompt_as_a_terminal_would() {
        assert_eq!(
            Prompt::Agent.echo("ls -la"),
            "\x1b[1;36magent$ ls -la\x1b[0m\r\n"
        );
        // Multi-line: continuation prompts; the trailing newline is the Enter.
        assert_eq!(
            Prompt::Agent.echo("cat <<EOF\nhi\r\nEOF\n"),
            "\x1b[1;36magent$ cat <<EOF\r\n> hi\r\n> EOF\x1b[0m\r\n"
        );
        assert_eq!(keystrokes("cat <<EOF\nhi\nEOF\n"), "cat <<EOF\rhi\rEOF\r");
        // No command drives the viewer's terminal.
        assert_eq!(
            Prompt::Human.echo("printf '\x1b[2J\x07'\t\u{9b}x\x7f"),
            "\x1b[1;33myou$ printf '^[[2J^G'\t\u{fffd}x^?\x1b[0m\r\n"
        );
        // A split character still waiting is written before the echo.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.cast");
        {
            let mut r = Recorder::create(&path, 80, 24, 1 << 20).unwrap();
            r.output(&"é".as_bytes()[..1]);
            r.command_line(Prompt::Agent, "true");
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let kinds: Vec<String> = text
            .lines()
            .skip(1)
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()[1].to_string())
            .collect();
        assert_eq!(kinds, ["\"o\"", "\"i\"", "\"o\""]);
    }

    #[test]
    fn sizes_read_well() {
        assert_eq!(human_bytes(32 << 20), "32 MiB");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(100), "100 B");
    }
}
