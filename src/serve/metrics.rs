//! Prometheus metrics of the server, rendered as text for `GET /metrics`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;

/// Bucket upper bounds in seconds, shared by the latency histograms.
const BUCKETS: [f64; 14] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// A latency histogram (cumulative buckets, as Prometheus wants them).
#[derive(Debug, Default)]
pub struct Histogram {
    inner: Mutex<HistogramData>,
}

#[derive(Debug, Default)]
struct HistogramData {
    counts: [u64; BUCKETS.len()],
    count: u64,
    sum: f64,
}

impl Histogram {
    /// Record one observation.
    pub fn observe(&self, d: Duration) {
        let secs = d.as_secs_f64();
        let mut h = self.inner.lock();
        for (i, bound) in BUCKETS.iter().enumerate() {
            if secs <= *bound {
                h.counts[i] += 1;
            }
        }
        h.count += 1;
        h.sum += secs;
    }

    fn render(&self, out: &mut String, name: &str, help: &str) {
        let h = self.inner.lock();
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        for (bound, count) in BUCKETS.iter().zip(h.counts.iter()) {
            let _ = writeln!(out, "{name}_bucket{{le=\"{bound}\"}} {count}");
        }
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {}", h.count);
        let _ = writeln!(out, "{name}_sum {}\n{name}_count {}", h.sum, h.count);
    }
}

/// Everything `GET /metrics` reports.
#[derive(Debug, Default)]
pub struct Metrics {
    /// Sessions started.
    pub sessions_started: AtomicU64,
    /// Episodes finished, by outcome (`passed`, `failed`, `error`).
    episodes: Mutex<BTreeMap<&'static str, u64>>,
    /// Replies applied.
    pub steps: AtomicU64,
    /// Seconds a step took on the server (parse, command, observation).
    pub step_latency: Histogram,
    /// Seconds the final tests took.
    pub verify_latency: Histogram,
    /// Error responses, by status code.
    errors: Mutex<BTreeMap<u16, u64>>,
    /// Sessions ended by the idle reaper.
    pub reaped: AtomicU64,
}

impl Metrics {
    /// Count an error response with `status`.
    pub fn error(&self, status: u16) {
        *self.errors.lock().entry(status).or_default() += 1;
    }

    /// Count a finished episode.
    pub fn episode(&self, outcome: &'static str) {
        *self.episodes.lock().entry(outcome).or_default() += 1;
    }

    /// The Prometheus text exposition, with `open` sessions open now.
    pub fn render(&self, open: usize) -> String {
        let mut out = String::new();
        let mut counter = |name: &str, help: &str, kind: &str, value: u64| {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}"
            );
        };
        counter(
            "endless_serve_open_sessions",
            "Sessions whose episode is running.",
            "gauge",
            open as u64,
        );
        counter(
            "endless_serve_sessions_started_total",
            "Sessions started.",
            "counter",
            self.sessions_started.load(Ordering::Relaxed),
        );
        counter(
            "endless_serve_steps_total",
            "Replies applied.",
            "counter",
            self.steps.load(Ordering::Relaxed),
        );
        counter(
            "endless_serve_reaped_total",
            "Sessions ended by the idle reaper.",
            "counter",
            self.reaped.load(Ordering::Relaxed),
        );
        let _ = writeln!(
            out,
            "# HELP endless_serve_episodes_total Episodes finished, by outcome.\n# TYPE endless_serve_episodes_total counter"
        );
        for (outcome, n) in self.episodes.lock().iter() {
            let _ = writeln!(
                out,
                "endless_serve_episodes_total{{outcome=\"{outcome}\"}} {n}"
            );
        }
        let _ = writeln!(
            out,
            "# HELP endless_serve_errors_total Error responses, by status.\n# TYPE endless_serve_errors_total counter"
        );
        for (status, n) in self.errors.lock().iter() {
            let _ = writeln!(out, "endless_serve_errors_total{{status=\"{status}\"}} {n}");
        }
        self.step_latency.render(
            &mut out,
            "endless_serve_step_seconds",
            "Seconds one step took on the server.",
        );
        self.verify_latency.render(
            &mut out,
            "endless_serve_verify_seconds",
            "Seconds the final tests took.",
        );
        out
    }
}

/// The Prometheus text of the backend's pool of pre-started sandboxes.
pub fn render_pool(p: &crate::sandbox::pool::PoolStats) -> String {
    let mut out = String::new();
    for (name, help, kind, value) in [
        (
            "ready",
            "Pre-started sandboxes ready now.",
            "gauge",
            p.ready as u64,
        ),
        (
            "starting",
            "Pre-started sandboxes starting now.",
            "gauge",
            p.starting as u64,
        ),
        (
            "hits_total",
            "Starts served from the pool.",
            "counter",
            p.hits,
        ),
        (
            "misses_total",
            "Starts the pool had nothing ready for.",
            "counter",
            p.misses,
        ),
        (
            "failed_total",
            "Pool starts that failed.",
            "counter",
            p.failed,
        ),
        (
            "drained_total",
            "Pre-started sandboxes closed unused.",
            "counter",
            p.drained,
        ),
    ] {
        let _ = writeln!(
            out,
            "# HELP endless_sandbox_pool_{name} {help}\n# TYPE endless_sandbox_pool_{name} {kind}\nendless_sandbox_pool_{name} {value}"
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_prometheus_text() {
        let m = Metrics::default();
        m.step_latency.observe(Duration::from_millis(3));
        m.error(404);
        m.episode("passed");
        let text = m.render(2);
        assert!(text.contains("endless_serve_open_sessions 2"));
        assert!(text.contains("endless_serve_step_seconds_bucket{le=\"0.005\"} 1"));
        assert!(text.contains("endless_serve_step_seconds_bucket{le=\"0.0025\"} 0"));
        assert!(text.contains("endless_serve_errors_total{status=\"404\"} 1"));
        assert!(text.contains("endless_serve_episodes_total{outcome=\"passed\"} 1"));
    }

    #[test]
    fn renders_the_pool_of_pre_started_sandboxes() {
        let stats = crate::sandbox::pool::PoolStats {
            ready: 2,
            hits: 7,
            misses: 1,
            ..Default::default()
        };
        let text = render_pool(&stats);
        assert!(text
            .contains("# TYPE endless_sandbox_pool_ready gauge\nendless_sandbox_pool_ready 2\n"));
        assert!(text.contains("endless_sandbox_pool_hits_total 7\n"));
        assert!(text.contains("endless_sandbox_pool_misses_total 1\n"));
    }
}
