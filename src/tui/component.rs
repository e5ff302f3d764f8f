//! The [`Component`] trait every view implements, so that the app is a
//! router over components: it hands the focused view the commands the
//! keymap resolved and the mouse events over it, routes the results of
//! background work to the view they concern, and asks each to draw itself.
//! What a view cannot do alone (load a task, start a job) it returns as an
//! [`Action`] for the app.

use crossterm::event::MouseEvent;
use ratatui::layout::Rect;
use ratatui::Frame;

use super::action::Action;
use super::keymap::{Command, Keymap};
use super::theme::Theme;

/// What every view draws with.
#[derive(Clone, Copy)]
pub struct DrawContext<'a> {
    /// The colours.
    pub theme: &'a Theme,
    /// The key bindings (for key hints).
    pub keymap: &'a Keymap,
}

/// A view of the TUI.
pub trait Component {
    /// A command while this view has the focus: change the view's state;
    /// return what the app should do next, if anything.
    fn handle_command(&mut self, cmd: Command) -> Option<Action>;

    /// A mouse event over this view.
    fn handle_mouse(&mut self, event: MouseEvent) -> Option<Action> {
        let _ = event;
        None
    }

    /// Apply an action the app routed here (results of background work:
    /// rows loaded, job events, live output); may answer with a follow-up.
    fn update(&mut self, action: Action) -> Option<Action> {
        let _ = action;
        None
    }

    /// Draw the view into `area`.
    fn draw(&mut self, frame: &mut Frame<'_>, area: Rect, ctx: &DrawContext<'_>);
}
