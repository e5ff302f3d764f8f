//! The Training view. PPO training is not wired into the TUI yet: this
//! shows an honest empty state.

use ratatui::layout::Rect;
use ratatui::Frame;

use crate::tui::theme::Theme;
use crate::tui::widgets::empty::draw_empty;

/// Draw the Training view.
pub fn draw(frame: &mut Frame<'_>, area: Rect, theme: &Theme) {
    draw_empty(
        frame,
        area,
        theme,
        "Training: not connected in this build",
        &[
            "PPO runs will appear here: per-step reward and pass rate, policy and",
            "value losses, clip fraction and entropy, episode length, and the",
            "checkpoints written under checkpoints/<train-id>/.",
            "",
            "Until then, train from the command line:",
            "  endless train --tasks SEL --init tiny --steps N --out DIR",
        ],
    );
}
