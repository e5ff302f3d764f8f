//! Asciicast v2 recording of a session's raw output stream.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::time::Instant;

use super::SandboxError;

/// Writes an asciicast v2 file: a JSON header line, then one
/// `[seconds, "o"|"i"|"r", data]` line per event.
pub struct Recorder {
    out: BufWriter<File>,
    start: Instant,
    /// Bytes of an incomplete UTF-8 sequence carried to the next chunk.
    carry: Vec<u8>,
}

impl Recorder {
    /// Create the file and write the header.
    pub fn create(path: &Path, cols: u16, rows: u16) -> Result<Self, SandboxError> {
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
        writeln!(out, "{header}").map_err(SandboxError::io("write recording", path))?;
        Ok(Self {
            out,
            start: Instant::now(),
            carry: Vec::new(),
        })
    }

    /// Record output bytes (split UTF-8 sequences are joined across chunks).
    pub fn output(&mut self, bytes: &[u8]) {
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

    /// Record a terminal resize.
    pub fn resize(&mut self, cols: u16, rows: u16) {
        self.event("r", &format!("{cols}x{rows}"));
    }

    fn event(&mut self, kind: &str, data: &str) {
        let t = self.start.elapsed().as_secs_f64();
        let line = serde_json::json!([(t * 1e6).round() / 1e6, kind, data]);
        // Recording is best effort: a full disk must not break the episode.
        let _ = writeln!(self.out, "{line}");
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
            let mut r = Recorder::create(&path, 80, 24).unwrap();
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
}
