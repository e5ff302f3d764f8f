//! The Jobs view. Background jobs (generation, evaluation, training, image
//! builds) are not wired into the TUI yet: this shows an honest empty state.

use ratatui::layout::Rect;
use ratatui::Frame;

use crate::tui::theme::Theme;
use crate::tui::widgets::empty::draw_empty;

/// Draw the Jobs view.
pub fn draw(frame: &mut Frame<'_>, area: Rect, theme: &Theme) {
    draw_empty(
        frame,
        area,
        theme,
        "Jobs: not connected in this build",
        &[
            "Long work runs as background jobs: task generation (the four pipeline",
            "stages), evaluation, training and sandbox image builds. Each job will",
            "appear here with its progress, its latest log lines and its outcome, and",
            "can be cancelled; jobs are journaled, so they survive a restart.",
            "",
            "Until the job manager is connected, run them from the command line:",
            "  endless generate ...   endless eval ...   endless train ...",
        ],
    );
}
