//! The store worker: a thread with its own `Workspace` that serves
//! [`Request`]s and answers with [`Action`]s, so the UI never blocks on
//! SQLite or the file system.

use std::path::PathBuf;
use std::sync::mpsc::{Receiver, Sender};
use std::thread;

use crate::store::{StoreError, Workspace};
use crate::tui::action::{Action, Msg, Request};

/// Start the worker on `root`. It stops when `rx` closes.
pub fn spawn(root: PathBuf, rx: Receiver<Request>, tx: Sender<Msg>) -> thread::JoinHandle<()> {
    thread::spawn(move || {
        let ws = match Workspace::open(&root) {
            Ok(ws) => ws,
            Err(e) => {
                let _ = tx.send(Msg::Action(Action::Error(format!(
                    "cannot open workspace {}: {e}",
                    root.display()
                ))));
                return;
            }
        };
        while let Ok(first) = rx.recv() {
            // Coalesce: of several queued LoadTask requests only the last matters.
            let mut batch = vec![first];
            batch.extend(rx.try_iter());
            let last_load = batch
                .iter()
                .rposition(|r| matches!(r, Request::LoadTask(_)));
            for (i, req) in batch.into_iter().enumerate() {
                if matches!(req, Request::LoadTask(_)) && Some(i) != last_load {
                    continue;
                }
                for action in serve(&ws, req) {
                    if tx.send(Msg::Action(action)).is_err() {
                        return;
                    }
                }
            }
        }
    })
}

fn err(e: StoreError) -> Action {
    Action::Error(e.to_string())
}

/// Serve one request.
pub fn serve(ws: &Workspace, req: Request) -> Vec<Action> {
    let row_update = |id: &str, r: Result<(), StoreError>| match r.and_then(|_| ws.task_row(id)) {
        Ok(row) => vec![Action::TaskRowUpdated(Box::new(row))],
        Err(e) => vec![err(e)],
    };
    match req {
        // Reconcile first so bundles written by other processes show up.
        Request::LoadTasks => match ws
            .reconcile()
            .and_then(|_| ws.list_tasks(&Default::default()))
        {
            Ok(rows) => vec![Action::TasksLoaded(rows), audits(ws)],
            Err(e) => vec![err(e)],
        },
        Request::RefreshTasks => match ws.list_tasks(&Default::default()) {
            Ok(rows) => vec![Action::TasksLoaded(rows), audits(ws)],
            Err(e) => vec![err(e)],
        },
        Request::NextFreeSeed(count) => crate::workbench::generate::next_free_seed(ws, count)
            .map(Action::OfflineSeed)
            .into_iter()
            .collect(),
        Request::LoadEpisodes => match ws.list_episodes(None) {
            Ok(rows) => vec![Action::EpisodesLoaded(rows)],
            Err(e) => vec![err(e)],
        },
        Request::LoadTask(id) => load_task(ws, &id),
        Request::SetStatus(id, s) => {
            let mut out = row_update(&id, ws.set_status(&id, s));
            out.push(Action::Info(format!("{id}: {}", s.as_str())));
            out
        }
        Request::SetRating(id, r) => row_update(&id, ws.set_rating(&id, r)),
        Request::SetTags(id, tags) => row_update(&id, ws.set_tags(&id, &tags)),
        Request::SetNotes(id, notes) => row_update(&id, ws.set_notes(&id, &notes)),
        // The event loop handles the editor itself; afterwards it asks for
        // a reload, which re-indexes the edited bundle.
        Request::OpenEditor { id, .. } => reload_task(ws, &id),
        Request::LoadJobs => match ws.list_jobs() {
            Ok(rows) => vec![Action::JobsLoaded(rows)],
            Err(e) => vec![err(e)],
        },
        Request::LoadJobLog(id) => match ws.job_log_tail(&id, 500) {
            Ok(lines) => vec![Action::JobLogLoaded(id, lines)],
            Err(e) => vec![err(e)],
        },
        Request::LoadFileLog(id, path) => {
            match crate::workbench::sharded_runs::log_tail(&path, 500) {
                Ok(lines) => vec![Action::JobLogLoaded(id, lines)],
                Err(e) => vec![Action::Error(format!("reading {}: {e}", path.display()))],
            }
        }
        Request::LoadEpisode { row, compare } => vec![Action::EpisodeLoaded {
            episode: Box::new(super::episode_io::load_episode(ws, row)),
            compare,
        }],
        Request::OpenEpisode { run, task, sample } => match ws.episode_row(&run, &task, sample) {
            Ok(row) => vec![Action::EpisodeLoaded {
                episode: Box::new(super::episode_io::load_episode(ws, row)),
                compare: false,
            }],
            Err(e) => vec![Action::Error(format!(
                "cannot open {task}#{sample} of run {run}: {e} (not indexed yet? ctrl-r reloads)"
            ))],
        },
        Request::RateEpisode {
            run,
            task,
            sample,
            rating,
            label,
            notes,
        } => match ws.rate_episode(&run, &task, sample, rating, label.as_deref(), &notes) {
            Ok(()) => match ws.list_episodes(None) {
                Ok(rows) => vec![
                    Action::EpisodesLoaded(rows),
                    Action::Info(format!("{task}#{sample}: saved")),
                ],
                Err(e) => vec![err(e)],
            },
            Err(e) => vec![err(e)],
        },
        Request::LoadFormValues => match super::form_values::load(ws.root()) {
            Ok(values) => vec![Action::FormValuesLoaded(values)],
            Err(e) => vec![Action::Error(e)],
        },
        Request::SaveFormValues(values) => match super::form_values::save(ws.root(), &values) {
            Ok(()) => Vec::new(),
            Err(e) => vec![Action::Error(e)],
        },
        Request::Undo { what, revert } => {
            let mut out: Vec<Action> = serve(ws, *revert)
                .into_iter()
                .filter(|a| !matches!(a, Action::Info(_)))
                .collect();
            if !out.iter().any(|a| matches!(a, Action::Error(_))) {
                out.push(Action::Info(what));
            }
            out
        }
        Request::ExportRatings => match super::episode_io::export_ratings(ws) {
            Ok((n, path)) => vec![Action::Info(format!(
                "exported {n} rated episodes to {}",
                path.display()
            ))],
            Err(e) => vec![Action::Error(format!("export: {e}"))],
        },
        Request::LoadRepair(id) => match crate::workbench::repair_review::repair_review(ws, &id) {
            Ok(review) => vec![Action::RepairLoaded(Box::new(review))],
            Err(e) => vec![Action::Error(format!("{e:#}"))],
        },
        Request::ResolveRepair { id, accept } => resolve_repair(ws, &id, accept),
        // The event loop serves these (the launcher; a thread of their own).
        Request::Launch(_) | Request::CancelJob(_) | Request::LoadTaskEnv(_) => Vec::new(),
    }
}

/// Accept or discard task `id`'s repair; the tasks and the task are read
/// again.
fn resolve_repair(ws: &Workspace, id: &str, accept: bool) -> Vec<Action> {
    use crate::workbench::repair_review::{accept_repair, discard_repair};
    let said = if accept {
        accept_repair(ws, id).map(|v| format!("{id}: the repair (version {v}) is accepted"))
    } else {
        discard_repair(ws, id).map(|v| {
            format!("{id}: the repair is discarded, version {v} is current again (the repair is kept: `endless tasks versions {id}`)")
        })
    };
    match said {
        Ok(message) => {
            let mut out = serve(ws, Request::LoadTasks);
            out.extend(load_task(ws, id));
            out.push(Action::Info(message));
            out
        }
        Err(e) => vec![Action::Error(format!("{e:#}"))],
    }
}

fn load_task(ws: &Workspace, id: &str) -> Vec<Action> {
    let task = match ws.load_task(id) {
        Ok(t) => t,
        Err(e) => return vec![err(e)],
    };
    let eps = match ws.task_episodes(id) {
        Ok(eps) => eps,
        Err(e) => return vec![err(e)],
    };
    let audit = match crate::workbench::audit::load_audit(ws, id) {
        Ok(report) => Action::AuditLoaded(id.to_string(), report.map(Box::new)),
        Err(e) => Action::Error(format!("{id}: {e:#}")),
    };
    vec![Action::TaskLoaded(Box::new(task), eps), audit]
}

/// The audit index, for the Tasks view's Audit column and filter.
fn audits(ws: &Workspace) -> Action {
    match ws.audit_rows() {
        Ok(rows) => Action::AuditsLoaded(rows),
        Err(e) => err(e),
    }
}

/// Re-read an edited bundle and refresh its index row (curation data kept).
fn reload_task(ws: &Workspace, id: &str) -> Vec<Action> {
    let status = match ws.task_row(id) {
        Ok(r) => r.status,
        Err(e) => return vec![err(e)],
    };
    match ws.load_task(id) {
        Ok(task) => {
            if let Err(e) = ws.index_task(&task, status) {
                return vec![err(e)];
            }
        }
        Err(e) => return vec![Action::Error(format!("after editing: {e}"))],
    }
    let mut out = load_task(ws, id);
    if let Ok(row) = ws.task_row(id) {
        out.insert(0, Action::TaskRowUpdated(Box::new(row)));
    }
    out.push(Action::Info(format!("{id}: reloaded after editing")));
    out
}
