//! The terminal UI: browse and curate tasks, watch live sessions, inspect
//! episodes, launch and follow jobs, watch training runs. `endless` with no
//! subcommand calls [`run`].
//!
//! Structure (after ratatui's component template and gitui):
//!
//! - [`action`]: the messages — [`Action`] (what changes the state),
//!   [`Request`] (work for the store worker and the job launcher), [`Msg`]
//!   (what the event loop receives).
//! - [`component`]: the [`component::Component`] trait every view
//!   implements: handle a command or a mouse event (returning an action for
//!   the app), apply an action, draw.
//! - [`app`]: the [`App`], a router over the components: it owns the
//!   views, routes keys, mouse events and actions to them, and draws the
//!   tabs, the focused view and the status line.
//! - [`views`] (one component per view) and [`widgets`] (shared drawing
//!   and styling helpers).
//! - [`launch`]: what the Jobs view launches; each job is a
//!   `crate::workbench` use case.
//! - [`runtime`]: the event loop and its threads (input, store worker, job
//!   launcher, training-run watcher); the app itself never does I/O.

pub mod action;
pub mod app;
pub mod component;
pub mod keymap;
pub mod launch;
pub mod replay;
pub mod runtime;
pub mod synthetic;
pub mod takeover;
pub mod theme;
pub mod views;
pub mod widgets;

#[cfg(test)]
mod tests;

use std::path::Path;
use std::sync::mpsc;

pub use action::{Action, LiveEvent, Msg, Request};
pub use app::{App, View};
pub use keymap::{Command, Keymap, KeymapError};
pub use runtime::run_with_channel;
pub use theme::{Theme, ThemeError};

/// Open the TUI on the workspace at `workspace_root` with theme `theme`
/// (a built-in or `<config dir>/themes/<name>.toml`) and `[tui.keys]`
/// overrides. Returns when the user quits; the terminal is restored on
/// return, on error and on panic.
pub fn run(workspace_root: &Path, theme: &str, keys: &toml::Table) -> anyhow::Result<()> {
    let (tx, rx) = mpsc::channel::<Msg>();
    run_with_channel(workspace_root, theme, keys, tx, rx)
}
