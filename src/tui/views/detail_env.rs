//! The image part of the detail pane's Environment tab: the base a task
//! asks for and resolves to (digest, or `host`), what substitutes it, and
//! the build cache's state of each step, from
//! [`crate::workbench::TaskEnv`].

use crate::images::megabytes;
use crate::sandbox::local::{StepCacheState, StepState};
use crate::workbench::TaskEnv;

/// The lines shown above the definition: a heading, then text lines.
pub fn env_lines(env: &TaskEnv) -> (String, Vec<String>) {
    let mut out = Vec::new();
    let written = env
        .written
        .as_deref()
        .unwrap_or("(none: the host's system directories)");
    out.push(format!("asks for: {written}"));
    match &env.build {
        Err(why) => out.push(format!("build: {why}")),
        Ok(state) => {
            out.push(match &state.base {
                Some(b) => format!(
                    "base:     {}  {}  {}",
                    b.reference,
                    short_digest(&b.digest),
                    megabytes(b.bytes)
                ),
                None => "base:     host (the host's system directories)".into(),
            });
            if let Some(note) = &state.note {
                out.push(format!("note:     {note}"));
            }
            let runs = count(&state.steps, |s| s == StepCacheState::Runs);
            let cached = count(&state.steps, |s| matches!(s, StepCacheState::Cached(_)));
            let bytes: u64 = state
                .steps
                .iter()
                .map(|s| match s.cache {
                    StepCacheState::Cached(b) => b,
                    _ => 0,
                })
                .sum();
            out.push(match &state.built {
                Some(hash) => format!(
                    "image:    built ({}); {cached} step layers cached, {}",
                    &hash[..hash.len().min(12)],
                    megabytes(bytes)
                ),
                None => format!(
                    "image:    not built; a build runs {runs} steps, takes {cached} from the cache ({})",
                    megabytes(bytes)
                ),
            });
            for s in &state.steps {
                out.push(step_line(s));
            }
        }
    }
    ("── image and build cache ──".into(), out)
}

fn count(steps: &[StepState], f: impl Fn(StepCacheState) -> bool) -> usize {
    steps.iter().filter(|s| f(s.cache)).count()
}

fn step_line(s: &StepState) -> String {
    let state = match s.cache {
        StepCacheState::Cached(b) => format!("cached {:>8}", size(b)),
        StepCacheState::Runs => "runs           ".into(),
        StepCacheState::Config => "config         ".into(),
    };
    let stage = s.stage.map(|i| format!("stage {i}: ")).unwrap_or_default();
    format!("  {state}  {stage}{}", s.what)
}

/// A layer's size: kilobytes under 0.1 MB (an account, a small file),
/// else megabytes.
fn size(bytes: u64) -> String {
    if bytes < 100_000 {
        format!("{:.1} kB", bytes as f64 / 1e3)
    } else {
        megabytes(bytes)
    }
}

/// `sha256:0123456789ab` (the first 12 hex digits).
fn short_digest(digest: &str) -> String {
    match digest.split_once(':') {
        Some((algo, hex)) => format!("{algo}:{}", &hex[..hex.len().min(12)]),
        None => digest.to_string(),
    }
}
