//! Asciicast v2 recording of a session's raw output stream, and of the
//! command lines a human typed into it.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::time::Instant;

use super::SandboxError;

/// What a human's command line is echoed after (bold yellow `you$ `), in
/// recordings and in live panes alike.
pub const HUMAN_ECHO_START: &str = "\x1b[1;33myou$ ";

/// What ends a human's echoed command line.
pub const HUMAN_ECHO_END: &str = "\x1b[0m\r\n";

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

    /// Record a command line a human typed while holding the session: as
    /// input (`"i"`, the line and the Enter that sent it) and as the echo a
    /// person would have seen (`"o"`, `you$ line`), since the session's
    /// terminal does not echo and the exec protocol sends it unseen.
    pub fn human_line(&mut self, line: &str) {
        self.event("i", &format!("{line}\r"));
        self.event("o", &format!("{HUMAN_ECHO_START}{line}{HUMAN_ECHO_END}"));
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
            r.human_line("ls -l ~/data");
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
    fn sizes_read_well() {
        assert_eq!(human_bytes(32 << 20), "32 MiB");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(100), "100 B");
    }
}
