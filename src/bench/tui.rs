//! `endless bench tui`: the frame-time benchmark: render frames of the
//! Tasks view over many rows and of the Live view with streaming panes on a
//! `TestBackend`, and report percentiles.
//!
//! The live panes get what a session sends, through the same events and
//! the same path as a job's panes (marker filter, `vt100` parser, the view
//! that follows the newest output): each emulates the sessions' 48x160
//! terminal, every agent command is a step event and its echo after the
//! `agent$ ` prompt, its output a few lines in chunks that split lines,
//! escape sequences and the exec protocol's end markers (sessions take
//! them out now; recordings made before may hold them). After the last
//! frame each pane must show its newest line and no marker (`following`).

use std::time::{Duration, Instant};

use ratatui::backend::TestBackend;
use ratatui::Terminal;
use serde::Serialize;

use crate::sandbox::Prompt;
use crate::tui::action::{Action, LiveEvent};
use crate::tui::app::{App, View};
use crate::tui::keymap::{Command, Keymap};
use crate::tui::synthetic::synthetic_rows;
use crate::tui::theme::Theme;

/// Frames rendered per view.
pub const FRAMES_PER_VIEW: usize = 100;

/// Live panes `endless bench tui` streams to.
pub const LIVE_PANES: usize = 8;

/// Frame-time percentiles.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Percentiles {
    /// Median.
    pub p50: Duration,
    /// 95th percentile.
    pub p95: Duration,
    /// Slowest frame.
    pub max: Duration,
}

/// Result of [`bench_frames`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FrameBench {
    /// Task rows in the Tasks view.
    pub tasks: usize,
    /// Live panes streaming output.
    pub panes: usize,
    /// Frames rendered in all.
    pub frames: usize,
    /// Median over all frames.
    pub p50: Duration,
    /// 95th percentile over all frames.
    pub p95: Duration,
    /// Tasks view frames (selection moving through the rows).
    pub tasks_view: Percentiles,
    /// Live view frames (every pane fed a chunk of bytes before each frame).
    pub live_view: Percentiles,
    /// Every pane showed its newest output line, and no end marker, at the
    /// end.
    pub following: bool,
}

fn percentiles(mut v: Vec<Duration>) -> Percentiles {
    v.sort();
    let at = |q: f64| {
        v.get(((v.len() as f64 - 1.0) * q).round() as usize)
            .copied()
            .unwrap_or_default()
    };
    Percentiles {
        p50: at(0.5),
        p95: at(0.95),
        max: v.last().copied().unwrap_or_default(),
    }
}

/// What pane `p` is sent before frame `frame`: at each frame's start a
/// new agent command (every 4th frame; a step event and the command's
/// echo), and output lines `out <frame>-<p> …`, coloured, in chunks that
/// split the lines and the end marker that follows a command's output.
fn feed_for(frame: usize, p: usize) -> (Option<String>, Vec<Vec<u8>>) {
    let command = frame
        .is_multiple_of(4)
        .then(|| format!("ls -la /home/user/work/{frame}"));
    let mut bytes = command
        .as_deref()
        .map(|c| Prompt::Agent.echo(c).into_bytes())
        .unwrap_or_default();
    bytes.extend_from_slice(
        format!(
            "out {frame}-{p} \x1b[32m-rw-r--r--\x1b[0m 1 user user {} Jan  1 00:00 file-{p}.txt\r\n",
            frame * 37 + p
        )
        .as_bytes(),
    );
    if frame % 4 == 3 {
        // The command ends: its end marker follows (never shown).
        bytes.extend_from_slice(format!("\r\n__ENDLESS_bench{p}_{frame}_0__\r\n").as_bytes());
    }
    // Split in three at odd places (inside escapes and markers too).
    let a = bytes.len() / 3 + p % 5;
    let b = (2 * bytes.len() / 3 + frame % 7).min(bytes.len());
    let chunks = vec![
        bytes[..a].to_vec(),
        bytes[a..b].to_vec(),
        bytes[b..].to_vec(),
    ];
    (command, chunks)
}

/// Render [`FRAMES_PER_VIEW`] frames of each of the Tasks view (with
/// `tasks` rows) and the Live view (with `panes` panes streaming shell
/// output) on a 160x48 `TestBackend`.
pub fn bench_frames(tasks: usize, panes: usize) -> FrameBench {
    let mut app = App::new(Theme::default(), Keymap::default(), "bench");
    app.outbox.clear();
    app.update(Action::TasksLoaded(synthetic_rows(tasks)));
    for p in 0..panes {
        app.update(Action::Live(LiveEvent::Open {
            key: format!("bench/{p}"),
            title: format!("task-{p:06}#0"),
            policy: "oracle".into(),
            // The sessions' own terminal size: taller than any pane.
            rows: 48,
            cols: 160,
            input: None,
        }));
    }
    let mut terminal = match Terminal::new(TestBackend::new(160, 48)) {
        Ok(t) => t,
        Err(never) => match never {},
    };
    let mut time_frame = |app: &mut App| {
        let t0 = Instant::now();
        let _ = terminal.draw(|f| app.draw(f));
        t0.elapsed()
    };
    app.view = View::Tasks;
    let mut task_times = Vec::with_capacity(FRAMES_PER_VIEW);
    for _ in 0..FRAMES_PER_VIEW {
        app.update(Action::Command(Command::PageDown));
        task_times.push(time_frame(&mut app));
    }
    app.view = View::Live;
    let mut live_times = Vec::with_capacity(FRAMES_PER_VIEW);
    for frame in 0..FRAMES_PER_VIEW {
        let t0 = Instant::now();
        for p in 0..panes {
            let key = format!("bench/{p}");
            let (command, chunks) = feed_for(frame, p);
            if let Some(command) = command {
                app.update(Action::Live(LiveEvent::Step {
                    key: key.clone(),
                    turn: (frame / 4 + 1) as u32,
                    command,
                }));
            }
            for bytes in chunks {
                app.update(Action::Live(LiveEvent::Feed {
                    key: key.clone(),
                    bytes,
                }));
            }
        }
        let feed = t0.elapsed();
        live_times.push(feed + time_frame(&mut app));
    }
    // Each pane shows its newest line, and no marker.
    let screen = format!("{}", terminal.backend());
    let last = FRAMES_PER_VIEW - 1;
    let following = !screen.contains("__ENDLESS")
        && (0..panes).all(|p| screen.contains(&format!("out {last}-{p} ")));
    let all: Vec<Duration> = task_times.iter().chain(&live_times).copied().collect();
    let overall = percentiles(all);
    FrameBench {
        tasks,
        panes,
        frames: 2 * FRAMES_PER_VIEW,
        p50: overall.p50,
        p95: overall.p95,
        tasks_view: percentiles(task_times),
        live_view: percentiles(live_times),
        following,
    }
}

/// `endless bench tui`: [`bench_frames`] over `n` task rows (default 10,000)
/// and 8 streaming panes, printed as one line of text or, with `json`, as a
/// JSON report with the process's peak memory and the targets.
pub fn run_cli(n: Option<usize>, json: bool) -> anyhow::Result<std::process::ExitCode> {
    let frames = bench_frames(n.unwrap_or(10_000), LIVE_PANES);
    let report = serde_json::json!({
        "frames": frames,
        "peak_rss_mb": peak_rss_mb(),
        "targets": { "p95_ms": 16.0, "memory_mb": 200.0 },
    });
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        let line = format!(
            "{} frames with {} tasks and {} live panes streaming ({}): p50 {:.2} ms, p95 {:.2} ms (tasks view p95 {:.2} ms, live view p95 {:.2} ms); peak memory {:.0} MB",
            frames.frames, frames.tasks, frames.panes,
            if frames.following { "each following its output" } else { "NOT all following their output" },
            ms(frames.p50), ms(frames.p95), ms(frames.tasks_view.p95), ms(frames.live_view.p95),
            peak_rss_mb().unwrap_or(f64::NAN)
        );
        println!("{}", crate::task::terminal_safe(&line));
    }
    // Panes that lose their newest output are a bug, whatever the times.
    Ok(if frames.following {
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::FAILURE
    })
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Peak resident memory of this process (VmHWM), in MB.
fn peak_rss_mb() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bench_runs_on_many_rows() {
        let b = bench_frames(2_000, LIVE_PANES);
        assert_eq!(b.frames, 2 * FRAMES_PER_VIEW);
        assert!(b.p95 >= b.p50);
        assert!(b.tasks_view.max >= b.tasks_view.p50);
        assert!(
            b.following,
            "every pane shows its newest output and no marker"
        );
    }

    /// Full-size frame benchmark (dev profile unless run with --release):
    /// `cargo test --lib bench::tui::tests::bench_full_size -- --ignored --nocapture`.
    #[test]
    #[ignore = "benchmark; prints frame times"]
    fn bench_full_size() {
        let b = bench_frames(10_000, 8);
        println!("{b:#?}");
    }
}
