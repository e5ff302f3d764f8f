//! Logs go to a daily file in the state directory (stdout belongs to the
//! TUI and to `--json`); `RUST_LOG` sets the level (default `info`).

use std::path::Path;

use tracing_appender::non_blocking::WorkerGuard;
use tracing_subscriber::EnvFilter;

/// Start file logging under `dir`; keep the guard alive until exit. Logging
/// is best-effort: if the directory cannot be created, nothing is logged.
pub fn init(dir: &Path) -> Option<WorkerGuard> {
    std::fs::create_dir_all(dir).ok()?;
    let appender = tracing_appender::rolling::daily(dir, "endless.log");
    let (writer, guard) = tracing_appender::non_blocking(appender);
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer)
        .with_ansi(false)
        .try_init()
        .ok()?;
    Some(guard)
}

/// An error and its causes on one line, `: `-separated, leaving out a cause
/// whose text the line already holds: errors that print their source and
/// also return it would otherwise say it twice ("Permission denied (os
/// error 13): Permission denied (os error 13)"). A cause that says more
/// than the part before it, starting with it ("permission denied", then
/// "Permission denied (os error 13)"), takes that part's place. Case is
/// ignored in both.
pub fn error_text(e: &anyhow::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    for cause in e.chain() {
        let text = cause.to_string();
        let lower = text.to_lowercase();
        if text.is_empty() || parts.iter().any(|p| p.to_lowercase().contains(&lower)) {
            continue;
        }
        match parts.last_mut() {
            Some(last) if lower.starts_with(&last.to_lowercase()) => *last = text,
            _ => parts.push(text),
        }
    }
    parts.join(": ")
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_error_never_repeats_its_cause() {
        #[derive(Debug, thiserror::Error)]
        #[error("cannot write {path}: {source}")]
        struct Write {
            path: String,
            source: std::io::Error,
        }
        let io = std::io::Error::from_raw_os_error(13);
        let e = anyhow::Error::new(Write {
            path: "/x".into(),
            source: io,
        })
        .context("saving the result");
        let text = super::error_text(&e);
        assert_eq!(text.matches("os error 13").count(), 1, "{text}");
        assert!(
            text.starts_with("saving the result: cannot write /x: "),
            "{text}"
        );
    }

    #[test]
    fn a_cause_that_says_more_replaces_the_part_it_repeats() {
        let io = std::io::Error::from_raw_os_error(13);
        let full = io.to_string();
        let e = anyhow::Error::new(io)
            .context("permission denied")
            .context("cannot write /x");
        assert_eq!(super::error_text(&e), format!("cannot write /x: {full}"));
        // Case differs, same text: said once.
        let e = anyhow::anyhow!("Connection refused").context("connection refused");
        assert_eq!(super::error_text(&e), "connection refused");
    }
}
