//! `endless bench tui --baseline OTHER`: this binary's frame benchmark side
//! by side with another `endless` binary's (an older release), in one run.
//!
//! Both sides run the same `bench tui --json` as child processes through
//! the A/B harness ([`super::baseline`]), in alternating rounds; each
//! side's figure is its median over the rounds. Peak memory is each child's
//! own (VmHWM as it reports it), so neither side pays for the other. On top
//! of the harness, this bench gives a verdict: both ratios within
//! [`ALLOWED_RATIO`].

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::baseline::{alternate, median};

/// The largest ratio (this binary over the baseline) the issue allows for
/// p95 frame time and peak memory.
pub const ALLOWED_RATIO: f64 = 1.2;

/// What one `bench tui --json` child reported.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Sample {
    /// 95th percentile frame time, ms.
    pub p95_ms: f64,
    /// Median frame time, ms.
    pub p50_ms: f64,
    /// Peak resident memory, MB.
    pub peak_rss_mb: f64,
}

/// One side of the comparison.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Side {
    /// The binary measured.
    pub binary: PathBuf,
    /// Every round's figures, in order.
    pub rounds: Vec<Sample>,
    /// Medians over the rounds.
    pub median: Sample,
}

/// The comparison `bench tui --baseline` prints.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comparison {
    /// Frames per child run.
    pub frames: usize,
    /// This binary.
    pub current: Side,
    /// The other binary.
    pub baseline: Side,
    /// current / baseline, median p95 frame time.
    pub p95_ratio: f64,
    /// current / baseline, median peak memory.
    pub memory_ratio: f64,
    /// Both ratios at most [`ALLOWED_RATIO`].
    pub within_target: bool,
}

#[derive(Deserialize)]
struct WireDuration {
    secs: u64,
    nanos: u32,
}

impl WireDuration {
    fn ms(&self) -> f64 {
        self.secs as f64 * 1000.0 + self.nanos as f64 / 1e6
    }
}

#[derive(Deserialize)]
struct WireFrames {
    p50: WireDuration,
    p95: WireDuration,
}

#[derive(Deserialize)]
struct WireReport {
    frames: WireFrames,
    peak_rss_mb: Option<f64>,
}

/// Read the report `endless bench tui --json` printed; `binary` names the
/// source in errors.
fn parse_report(binary: &Path, report: &Value) -> anyhow::Result<Sample> {
    let r = WireReport::deserialize(report).with_context(|| {
        format!(
            "{}: `bench tui --json` printed no report this version reads (fields frames.p50, frames.p95, peak_rss_mb)",
            binary.display()
        )
    })?;
    let Some(peak_rss_mb) = r.peak_rss_mb else {
        bail!("{}: the report has no peak_rss_mb", binary.display());
    };
    Ok(Sample {
        p95_ms: r.frames.p95.ms(),
        p50_ms: r.frames.p50.ms(),
        peak_rss_mb,
    })
}

fn side(binary: PathBuf, rounds: Vec<Sample>) -> Side {
    let pick = |f: fn(&Sample) -> f64| median(&rounds.iter().map(f).collect::<Vec<_>>());
    let median = Sample {
        p95_ms: pick(|s| s.p95_ms),
        p50_ms: pick(|s| s.p50_ms),
        peak_rss_mb: pick(|s| s.peak_rss_mb),
    };
    Side {
        binary,
        rounds,
        median,
    }
}

/// Compare the two sides' rounds.
fn compare(frames: usize, current: Side, baseline: Side) -> Comparison {
    let p95_ratio = current.median.p95_ms / baseline.median.p95_ms;
    let memory_ratio = current.median.peak_rss_mb / baseline.median.peak_rss_mb;
    Comparison {
        frames,
        within_target: p95_ratio <= ALLOWED_RATIO && memory_ratio <= ALLOWED_RATIO,
        current,
        baseline,
        p95_ratio,
        memory_ratio,
    }
}

/// Measure this binary and `baseline` in `rounds` alternating rounds of
/// `frames` frames each.
pub fn run(baseline: &Path, frames: usize, rounds: usize) -> anyhow::Result<Comparison> {
    let me = std::env::current_exe().context("finding this binary")?;
    let args: Vec<OsString> = ["bench", "tui", "--json", "--n", &frames.to_string()]
        .map(OsString::from)
        .into();
    let (mine, theirs) = alternate(&me, baseline, "tui", &args, rounds)?;
    let read = |binary: &Path, reports: &[Value]| -> anyhow::Result<Vec<Sample>> {
        reports.iter().map(|r| parse_report(binary, r)).collect()
    };
    let (mine, theirs) = (read(&me, &mine)?, read(baseline, &theirs)?);
    Ok(compare(
        frames,
        side(me, mine),
        side(baseline.to_path_buf(), theirs),
    ))
}

impl std::fmt::Display for Comparison {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let row = |f: &mut std::fmt::Formatter<'_>, name: &str, s: &Side| {
            writeln!(
                f,
                "{name:<9} p50 {:>7.2} ms  p95 {:>7.2} ms  peak {:>6.1} MB  ({})",
                s.median.p50_ms,
                s.median.p95_ms,
                s.median.peak_rss_mb,
                s.binary.display()
            )
        };
        writeln!(
            f,
            "bench tui, {} frames per run, median of {} alternating rounds per side:",
            self.frames,
            self.current.rounds.len()
        )?;
        row(f, "current", &self.current)?;
        row(f, "baseline", &self.baseline)?;
        write!(
            f,
            "ratio     p95 {:.2}x  memory {:.2}x  (target <= {ALLOWED_RATIO}x: {})",
            self.p95_ratio,
            self.memory_ratio,
            if self.within_target { "met" } else { "NOT met" }
        )
    }
}

/// `endless bench tui --baseline BINARY [--rounds N]`.
pub fn run_cli(
    baseline: &Path,
    n: Option<usize>,
    rounds: usize,
    json: bool,
) -> anyhow::Result<std::process::ExitCode> {
    let c = run(baseline, n.unwrap_or(10_000), rounds)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&c)?);
    } else {
        println!("{}", crate::task::terminal_safe(&c.to_string()));
    }
    Ok(std::process::ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(p95: f64, mb: f64) -> Sample {
        Sample {
            p95_ms: p95,
            p50_ms: p95 / 2.0,
            peak_rss_mb: mb,
        }
    }

    #[test]
    fn reads_the_report_bench_tui_prints() {
        let json: Value = serde_json::from_str(
            r#"{"frames":{"tasks":10000,"panes":8,"frames":200,
            "p50":{"secs":0,"nanos":1500000},"p95":{"secs":0,"nanos":4250000},
            "tasks_view":{},"live_view":{},"following":true},
            "peak_rss_mb":41.5,"targets":{"p95_ms":16.0}}"#,
        )
        .unwrap();
        let s = parse_report(Path::new("old"), &json).unwrap();
        assert_eq!((s.p50_ms, s.p95_ms, s.peak_rss_mb), (1.5, 4.25, 41.5));
    }

    #[test]
    fn a_report_without_the_fields_is_an_error_naming_the_binary() {
        let e = parse_report(
            Path::new("/opt/old/endless"),
            &serde_json::json!({"frames": {}}),
        )
        .unwrap_err();
        assert!(format!("{e:#}").contains("/opt/old/endless"), "{e:#}");
    }

    #[test]
    fn medians_and_ratios_decide_the_verdict() {
        let cur = side(
            "a".into(),
            vec![sample(2.0, 50.0), sample(9.0, 52.0), sample(2.2, 51.0)],
        );
        let base = side(
            "b".into(),
            vec![sample(2.0, 50.0), sample(2.0, 50.0), sample(1.0, 50.0)],
        );
        let c = compare(100, cur, base);
        assert!((c.p95_ratio - 1.1).abs() < 1e-9, "{}", c.p95_ratio);
        assert!((c.memory_ratio - 51.0 / 50.0).abs() < 1e-9);
        assert!(c.within_target);
        let slow = side("a".into(), vec![sample(3.0, 50.0)]);
        let base = side("b".into(), vec![sample(2.0, 50.0)]);
        assert!(!compare(100, slow, base).within_target);
    }
}
