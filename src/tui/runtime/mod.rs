//! The TUI's runtime: the event loop ([`run_with_channel`]) and the
//! threads around it — terminal input ([`input`]), the store worker
//! ([`worker`], with the inspector's file reads in [`episode_io`]), the job
//! launcher ([`launcher`]), the training-run watcher ([`watcher`]), the
//! running-episode watcher ([`sessions`]), the index watcher
//! ([`index_watch`]: another TUI's changes), the sharded-run watcher
//! ([`shard_watch`]: Slurm and Ray shards), the remote-session watcher
//! ([`remote`]: other machines' `endless serve`) and the Environment tab's loader
//! ([`task_env`]) — all
//! talking to the app through [`Msg`]s on one channel. The terminal itself
//! (raw mode, alternate screen, the external editor) is [`terminal`]; what
//! a restart keeps is in the workspace: the launch forms' values
//! ([`form_values`]), the open view and the sorts ([`view_state`]).

pub mod episode_io;
pub mod form_values;
pub mod index_watch;
pub mod input;
pub mod launcher;
pub mod remote;
pub mod sessions;
pub mod shard_watch;
pub mod task_env;
pub mod terminal;
pub mod view_state;
pub mod watcher;
pub mod worker;

use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::Context;
use crossterm::event::{Event, KeyEventKind};

use super::action::{Action, Msg, Request};
use super::app::{App, StatusMsg};
use super::keymap::Keymap;
use super::launch::JobDefaults;
use super::theme::Theme;
use input::InputThread;
use terminal::{edit, TerminalGuard};

/// [`crate::tui::run`] with a channel made by the caller, who keeps clones
/// of `tx` to feed the running UI from other threads (`Msg::Action(..)`:
/// `Action::Live(LiveEvent::Open {..})` and its `Feed`, `Step`, `Finished`,
/// `Action::Info(..)`). Sends never block; the UI drains them between
/// frames.
pub fn run_with_channel(
    workspace_root: &Path,
    theme: &str,
    keys: &toml::Table,
    tx: mpsc::Sender<Msg>,
    rx: mpsc::Receiver<Msg>,
) -> anyhow::Result<()> {
    let keymap = Keymap::from_config(keys)?;
    let theme = Theme::load(theme, Theme::user_dir().as_deref())?;
    // Open once here so that a broken workspace fails before the screen
    // switches, and a deleted or corrupt index is rebuilt from the files
    // before anything reads it.
    let (ws, rebuilt) = crate::workbench::open_rebuilding(workspace_root)?;
    let (checkpoints, runs) = (ws.checkpoints_dir(), ws.runs_dir());
    drop(ws);
    let mut app = App::new(theme, keymap, workspace_root.display().to_string());
    // The view and sorts of the last session on this workspace.
    let restored = view_state::load(workspace_root)
        .and_then(|state| state.map_or(Ok(()), |s| app.restore_view_state(&s)));
    if let Err(warning) = restored {
        app.update(Action::Error(format!("warning: {warning}")));
    }
    let mut saved_state = app.view_state();
    if let Some(message) = rebuilt {
        app.update(Action::Info(message));
    }
    let paths = crate::config::Paths::detect();
    let mut remote_nodes = Vec::new();
    if let Ok(config) = crate::config::Config::load(&paths.config_file, Some(workspace_root)) {
        app.defaults = JobDefaults::from_config(&config);
        // `[[tui.remote]]`: a wrong entry is said before the screen switches.
        let vars = std::env::vars().collect();
        remote_nodes = remote::remotes(&config.tui.remote, &vars)?;
    }
    let launcher =
        launcher::Launcher::new(workspace_root, tx.clone()).context("starting the job manager")?;

    let mut terminal = TerminalGuard::enter()?;
    let (req_tx, req_rx) = mpsc::channel::<Request>();
    let worker = worker::spawn(workspace_root.to_path_buf(), req_rx, tx.clone());
    // Training runs: re-read off the UI thread, about once a second.
    let _training = watcher::Watcher::spawn(checkpoints, tx.clone(), Duration::from_secs(1));
    // Running episodes of every process on this workspace, a few times a second.
    let _sessions = sessions::SessionWatcher::spawn(runs, tx.clone(), Duration::from_millis(250));
    // Changes another TUI or the CLI makes to the index, about once a second.
    let _index = index_watch::IndexWatcher::spawn(
        workspace_root.to_path_buf(),
        tx.clone(),
        Duration::from_secs(1),
    );
    // Sessions of other machines' `endless serve` ([[tui.remote]]).
    let _remote = (!remote_nodes.is_empty())
        .then(|| remote::RemoteWatcher::spawn(remote_nodes, tx.clone(), Duration::from_secs(2)));
    // Sharded runs (Slurm arrays, Ray): squeue/sacct and the shards' files.
    let _shards = shard_watch::ShardWatcher::spawn(
        workspace_root.to_path_buf(),
        tx.clone(),
        Duration::from_secs(2),
    );
    let env_tx = tx.clone();
    let input = InputThread::spawn(tx);
    let mut last_tick = Instant::now();

    loop {
        for req in std::mem::take(&mut app.outbox) {
            match req {
                Request::OpenEditor { id, file } => {
                    let dir = workspace_root.join("tasks").join(&id);
                    let msg = edit(&mut terminal, &input, &dir, &file);
                    if let Err(e) = msg {
                        app.status = Some(StatusMsg {
                            text: format!("editor: {}", crate::logging::error_text(&e)),
                            error: true,
                        });
                    } else {
                        app.tasks.detail.invalidate();
                        let _ = req_tx.send(Request::OpenEditor { id, file });
                    }
                }
                Request::Launch(spec) => match launcher.launch(spec.clone()) {
                    // The Jobs view names it (by its run, once known); a
                    // message of the app's own (resuming…) stays.
                    Ok(_) => {
                        let said = app
                            .status
                            .as_ref()
                            .is_some_and(|m| !m.error && !m.text.starts_with("starting "));
                        if !said {
                            app.update(Action::Info(format!("started the {} job", spec.kind())));
                        }
                    }
                    Err(e) => match e.downcast::<crate::tui::launch::train::TrainRefusal>() {
                        Ok(refusal) => app.update(Action::TrainRefused(refusal)),
                        Err(e) => app.update(Action::Error(format!(
                            "cannot start the job: {}",
                            crate::logging::error_text(&e)
                        ))),
                    },
                },
                Request::LoadTaskEnv(id) => task_env::load(workspace_root, id, env_tx.clone()),
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
        // Kept as it changes (the next session opens like this one).
        let state = app.view_state();
        if state != saved_state {
            if let Err(e) = view_state::save(workspace_root, &state) {
                app.update(Action::Error(e));
            }
            saved_state = state;
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
