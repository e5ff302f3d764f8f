//! The sandbox's public contract, shared by the agent loop, the verifier,
//! the generator and the TUI.

use std::time::Duration;

/// Hard cap on the characters of output kept per command.
pub const MAX_OUTPUT_CHARS: usize = 50_000;

/// What one `exec` produced.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ExecResult {
    /// Output with ANSI escapes stripped, capped at [`MAX_OUTPUT_CHARS`]
    /// (a note says so when cut).
    pub output: String,
    /// Exit status; `None` when the command timed out or the shell died.
    pub exit_code: Option<i32>,
    /// The command ran past its timeout and was interrupted (then killed).
    pub timed_out: bool,
    /// Output was cut at the cap.
    pub truncated: bool,
    /// Wall-clock time of the command.
    pub duration: Duration,
}

/// Default of [`SessionOptions::max_recording_bytes`]: 32 MiB.
pub const DEFAULT_MAX_RECORDING_BYTES: u64 = 32 << 20;

/// Options for starting a session.
#[derive(Debug, Clone)]
pub struct SessionOptions {
    /// Terminal size (columns, rows).
    pub size: (u16, u16),
    /// Record an asciicast v2 file of the raw stream here.
    pub record: Option<std::path::PathBuf>,
    /// Wall-clock limit of the whole session.
    pub wall_clock: Duration,
    /// Cap on the asciicast recording's size, and on the raw output bytes
    /// sent to live viewers: past it, one marker saying so and nothing more
    /// (commands still run and return their own capped output).
    pub max_recording_bytes: u64,
}

impl Default for SessionOptions {
    fn default() -> Self {
        Self {
            size: (160, 48),
            record: None,
            wall_clock: Duration::from_secs(3600),
            max_recording_bytes: DEFAULT_MAX_RECORDING_BYTES,
        }
    }
}
