//! How a task's status and rating and an episode's verdict are shown,
//! wherever tasks and episodes are listed or detailed.

use ratatui::style::Style;
use ratatui::text::{Line, Span};
use ratatui::widgets::Cell;

use crate::store::{EpisodeRow, TaskStatus};
use crate::tui::theme::Theme;

/// Style of a status cell.
pub fn status_style(s: TaskStatus, theme: &Theme) -> Style {
    match s {
        TaskStatus::Candidate => theme.warning(),
        TaskStatus::Accepted => theme.success(),
        TaskStatus::Rejected => theme.failure(),
        TaskStatus::Archived => theme.muted(),
    }
}

/// `★★★··` for a 1-5 rating.
pub fn stars(r: Option<u8>) -> String {
    match r {
        Some(n) => (1..=5).map(|i| if i <= n { '★' } else { '·' }).collect(),
        None => "-".into(),
    }
}

/// An episode's verdict: PASS, FAIL, or INT for one interrupted (its
/// process died: unscored, neither a pass nor a failure), with a hand when
/// a human took the session over and a ⑂ when it is a fork of another
/// episode.
pub fn result_cell(e: &EpisodeRow, theme: &Theme) -> Cell<'static> {
    let (text, style) = if e.passed {
        ("PASS", theme.success())
    } else if e.end_reason == crate::agent::EndReason::Interrupted.as_str() {
        ("INT", theme.warning())
    } else {
        ("FAIL", theme.failure())
    };
    let mut spans = vec![Span::styled(text, style)];
    if e.taken_over {
        spans.push(Span::styled(" ✋", theme.warning()));
    }
    if e.forked_from.is_some() {
        spans.push(Span::styled(" ⑂", theme.accent()));
    }
    Cell::from(Line::from(spans))
}
