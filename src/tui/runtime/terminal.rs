//! The terminal the TUI owns: raw mode, the alternate screen and mouse
//! capture (undone on drop and on panic), and suspending it to run the
//! user's editor.

use std::io::stdout;
use std::path::Path;
use std::process::Command as Process;

use anyhow::Context;
use crossterm::event::{DisableMouseCapture, EnableMouseCapture};
use crossterm::execute;
use ratatui::DefaultTerminal;

use super::input::InputThread;

/// Suspend the TUI, run `$VISUAL`/`$EDITOR` (default `vi`) on `dir/file`
/// (or on `dir` when the file does not exist), then restore.
pub fn edit(
    terminal: &mut TerminalGuard,
    input: &InputThread,
    dir: &Path,
    file: &Path,
) -> anyhow::Result<()> {
    let target = if dir.join(file).exists() {
        dir.join(file)
    } else {
        dir.to_path_buf()
    };
    let editor = std::env::var("VISUAL")
        .or_else(|_| std::env::var("EDITOR"))
        .unwrap_or_else(|_| "vi".into());
    let mut words = editor.split_whitespace();
    let program = words.next().unwrap_or("vi").to_string();
    let args: Vec<String> = words.map(String::from).collect();
    input.pause();
    terminal.suspend();
    let status = Process::new(&program)
        .args(&args)
        .arg(&target)
        .current_dir(dir)
        .status();
    let resumed = terminal.resume();
    input.resume();
    resumed?;
    let status = status.with_context(|| format!("running {program:?}"))?;
    if !status.success() {
        anyhow::bail!("{program} exited with {status}");
    }
    Ok(())
}

/// Owns the terminal: raw mode, alternate screen and mouse capture are
/// undone on drop and on panic.
pub struct TerminalGuard {
    terminal: DefaultTerminal,
}

impl TerminalGuard {
    /// Take the terminal over.
    pub fn enter() -> anyhow::Result<TerminalGuard> {
        // ratatui's hook restores raw mode and the alternate screen; ours
        // runs first and releases the mouse.
        let terminal = ratatui::try_init().context("initialising the terminal")?;
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let _ = execute!(stdout(), DisableMouseCapture);
            previous(info);
        }));
        execute!(stdout(), EnableMouseCapture).context("enabling mouse capture")?;
        Ok(TerminalGuard { terminal })
    }

    /// The ratatui terminal to draw on.
    pub fn get(&mut self) -> &mut DefaultTerminal {
        &mut self.terminal
    }

    /// Give the terminal back (for an external program).
    pub fn suspend(&mut self) {
        let _ = execute!(stdout(), DisableMouseCapture);
        ratatui::restore();
    }

    /// Take it again after [`Self::suspend`].
    pub fn resume(&mut self) -> anyhow::Result<()> {
        crossterm::terminal::enable_raw_mode()?;
        execute!(
            stdout(),
            crossterm::terminal::EnterAlternateScreen,
            EnableMouseCapture
        )?;
        self.terminal.clear()?;
        Ok(())
    }
}

impl Drop for TerminalGuard {
    fn drop(&mut self) {
        let _ = execute!(stdout(), DisableMouseCapture);
        ratatui::restore();
    }
}
