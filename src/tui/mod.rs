//! The terminal UI: browse and curate tasks, watch live sessions, inspect
//! episodes. `endless` with no subcommand calls [`run`].
//!
//! Structure (after ratatui's component template and gitui): [`app::App`]
//! holds the state and turns keys into [`app::Action`]s; `update` changes
//! state and queues [`app::Request`]s, which a store worker thread serves
//! (answering with Actions); the input thread forwards terminal events.
//! Drawing is a pure function of the state.

pub mod app;
pub mod bench;
pub mod episode_io;
pub mod eval_job;
pub mod event;
pub mod keymap;
pub mod launcher;
pub mod replay;
pub mod takeover;
pub mod theme;
pub mod train_job;
pub mod training_runs;
pub mod views;
pub mod widgets;
pub mod worker;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests2;
#[cfg(test)]
mod tests_training;

use std::io::stdout;
use std::path::Path;
use std::process::Command as Process;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::Context;
use crossterm::event::{DisableMouseCapture, EnableMouseCapture, Event, KeyEventKind};
use crossterm::execute;
use ratatui::DefaultTerminal;

pub use app::{Action, App, Request, View};
pub use bench::{bench_frames, FrameBench};
pub use keymap::{Command, Keymap, KeymapError};
pub use theme::{Theme, ThemeError};

use event::InputThread;
pub use event::Msg;

/// Open the TUI on the workspace at `workspace_root` with theme `theme`
/// (a built-in or `<config dir>/themes/<name>.toml`) and `[tui.keys]`
/// overrides. Returns when the user quits; the terminal is restored on
/// return, on error and on panic.
pub fn run(workspace_root: &Path, theme: &str, keys: &toml::Table) -> anyhow::Result<()> {
    let (tx, rx) = mpsc::channel::<Msg>();
    run_with_channel(workspace_root, theme, keys, tx, rx)
}

/// [`run`] with a channel made by the caller, who keeps clones of `tx` to
/// feed the running UI from other threads: `Msg::Action(Action::LiveOpen
/// {..})`, `Action::LiveFeed { pane, bytes }`, `Action::LiveTurn {..}`,
/// `Action::Info(..)`. Sends never block; the UI drains them between frames.
pub fn run_with_channel(
    workspace_root: &Path,
    theme: &str,
    keys: &toml::Table,
    tx: mpsc::Sender<Msg>,
    rx: mpsc::Receiver<Msg>,
) -> anyhow::Result<()> {
    let keymap = Keymap::from_config(keys)?;
    let theme = Theme::load(theme, Theme::user_dir().as_deref())?;
    // Open once here so that a broken workspace fails before the screen switches.
    let checkpoints = crate::store::Workspace::open(workspace_root)
        .with_context(|| format!("opening workspace {}", workspace_root.display()))?
        .checkpoints_dir();
    let mut app = App::new(theme, keymap, workspace_root.display().to_string());
    let paths = crate::config::Paths::detect();
    if let Ok(config) = crate::config::Config::load(&paths.config_file, Some(workspace_root)) {
        app.defaults = launcher::JobDefaults::from_config(&config);
    }
    let launcher =
        launcher::Launcher::new(workspace_root, tx.clone()).context("starting the job manager")?;

    let mut terminal = TerminalGuard::enter()?;
    let (req_tx, req_rx) = mpsc::channel::<Request>();
    let worker = worker::spawn(workspace_root.to_path_buf(), req_rx, tx.clone());
    // Training runs: re-read off the UI thread, about once a second.
    let _training = training_runs::Watcher::spawn(checkpoints, tx.clone(), Duration::from_secs(1));
    let input = InputThread::spawn(tx);
    let mut last_tick = Instant::now();

    loop {
        for req in std::mem::take(&mut app.outbox) {
            match req {
                Request::OpenEditor { id, file } => {
                    let dir = workspace_root.join("tasks").join(&id);
                    let msg = edit(&mut terminal, &input, &dir, &file);
                    if let Err(e) = msg {
                        app.status = Some(app::StatusMsg {
                            text: format!("editor: {e:#}"),
                            error: true,
                        });
                    } else {
                        app.tasks.detail.invalidate();
                        let _ = req_tx.send(Request::OpenEditor { id, file });
                    }
                }
                Request::Launch(spec) => match launcher.launch(spec) {
                    Ok(id) => app.update(Action::Info(format!("started {}", id.0))),
                    Err(e) => app.update(Action::Error(format!("cannot start the job: {e:#}"))),
                },
                Request::CancelJob(id) => {
                    if !launcher.cancel(&id) {
                        app.update(Action::Error(format!("{id} is not running here")));
                    }
                }
                other => {
                    if req_tx.send(other).is_err() {
                        anyhow::bail!("the store worker stopped");
                    }
                }
            }
        }
        if app.should_quit {
            // Let the store worker finish queued writes (curation, ratings)
            // before the process exits: quitting must not lose them.
            drop(req_tx);
            let _ = worker.join();
            break;
        }
        terminal.get().draw(|f| app.draw(f))?;
        // Wake up regularly for replay playback and the elapsed clocks.
        let playing = app
            .inspector
            .as_ref()
            .and_then(|i| i.replay.as_ref())
            .is_some_and(|r| r.playing);
        let wait = Duration::from_millis(if playing { 50 } else { 500 });
        let first = match rx.recv_timeout(wait) {
            Ok(m) => m,
            Err(mpsc::RecvTimeoutError::Timeout) => Msg::Action(Action::Tick(0.0)),
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        };
        let now = Instant::now();
        app.update(Action::Tick(now.duration_since(last_tick).as_secs_f64()));
        last_tick = now;
        let mut pending = vec![first];
        pending.extend(rx.try_iter());
        for msg in pending {
            match msg {
                Msg::Input(Event::Key(k)) if k.kind != KeyEventKind::Release => {
                    if let Some(a) = app.handle_key(k) {
                        app.update(a);
                    }
                }
                Msg::Input(Event::Mouse(m)) => app.update(Action::Mouse(m)),
                Msg::Input(Event::Resize(w, h)) => app.update(Action::Resize(w, h)),
                Msg::Input(_) => {}
                Msg::Action(a) => app.update(a),
                Msg::InputError(e) => anyhow::bail!("reading the terminal: {e}"),
            }
        }
    }
    drop(input);
    Ok(())
}

/// Suspend the TUI, run `$VISUAL`/`$EDITOR` (default `vi`) on `dir/file`
/// (or on `dir` when the file does not exist), then restore.
fn edit(
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
struct TerminalGuard {
    terminal: DefaultTerminal,
}

impl TerminalGuard {
    fn enter() -> anyhow::Result<TerminalGuard> {
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

    fn get(&mut self) -> &mut DefaultTerminal {
        &mut self.terminal
    }

    fn suspend(&mut self) {
        let _ = execute!(stdout(), DisableMouseCapture);
        ratatui::restore();
    }

    fn resume(&mut self) -> anyhow::Result<()> {
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
