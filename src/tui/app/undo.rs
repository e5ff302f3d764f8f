//! Undo (`u`) for curation: every change of a task's status, rating, tags
//! or note, and of an episode's rating, label or note, goes out through
//! [`App::curate_task`] / [`App::curate_episode`], which remember the
//! request that puts things back as they were (from the row as shown, with
//! the change applied to it at once, so that quick changes in a row undo
//! one by one). [`App::undo`] sends the newest one and says what it undid.

use super::App;
use crate::store::{EpisodeRow, TaskRow};
use crate::tui::action::Request;
use crate::tui::views::inspector::LABELS;

/// Changes kept for undo.
pub const MAX_UNDO: usize = 100;

/// One curation change that can be undone.
#[derive(Debug, Clone, PartialEq)]
pub struct UndoEntry {
    /// The change, for the status line (`count-words: accepted`).
    pub what: String,
    /// What undoing returns to (`candidate`).
    pub back: String,
    /// The request that restores the earlier state.
    pub revert: Request,
}

fn rating_text(r: Option<u8>) -> String {
    r.map_or_else(|| "unrated".into(), |r| format!("rated {r}"))
}

fn tags_text(tags: &[String]) -> String {
    if tags.is_empty() {
        "no tags".into()
    } else {
        format!("tags {}", tags.join(", "))
    }
}

fn note_text(note: &str) -> String {
    if note.is_empty() {
        "no note".into()
    } else {
        let short: String = note.chars().take(30).collect();
        let more = if short.len() < note.len() { "…" } else { "" };
        format!("note \"{short}{more}\"")
    }
}

fn label_text(label: Option<&str>) -> String {
    match label {
        None => "no label".into(),
        Some(l) => {
            let shown = LABELS.iter().find(|(k, _)| *k == l).map_or(l, |(_, h)| *h);
            format!("label {shown}")
        }
    }
}

/// For a task curation request and the row before it: the undo entry and
/// the row after it (`None` for other requests).
fn task_change(req: &Request, before: &TaskRow) -> Option<(UndoEntry, TaskRow)> {
    let mut after = before.clone();
    let id = before.id.clone();
    let (what, back, revert) = match req {
        Request::SetStatus(_, s) => {
            after.status = *s;
            (
                s.as_str().to_string(),
                before.status.as_str().to_string(),
                Request::SetStatus(id.clone(), before.status),
            )
        }
        Request::SetRating(_, r) => {
            after.rating = *r;
            (
                rating_text(*r),
                rating_text(before.rating),
                Request::SetRating(id.clone(), before.rating),
            )
        }
        Request::SetTags(_, tags) => {
            after.tags = tags.clone();
            (
                tags_text(tags),
                tags_text(&before.tags),
                Request::SetTags(id.clone(), before.tags.clone()),
            )
        }
        Request::SetNotes(_, notes) => {
            after.notes = notes.clone();
            (
                note_text(notes),
                note_text(&before.notes),
                Request::SetNotes(id.clone(), before.notes.clone()),
            )
        }
        _ => return None,
    };
    let entry = UndoEntry {
        what: format!("{id}: {what}"),
        back,
        revert,
    };
    Some((entry, after))
}

/// The rating request that sets an episode back to `row`'s values.
fn rate_request(row: &EpisodeRow) -> Request {
    Request::RateEpisode {
        run: row.run_id.clone(),
        task: row.task_id.clone(),
        sample: row.sample,
        rating: row.rating,
        label: row.label.clone(),
        notes: row.notes.clone(),
    }
}

/// What changed between two states of an episode's review, as text.
fn review_text(row: &EpisodeRow, other: &EpisodeRow) -> String {
    let mut parts = Vec::new();
    if row.rating != other.rating {
        parts.push(rating_text(row.rating));
    }
    if row.label != other.label {
        parts.push(label_text(row.label.as_deref()));
    }
    if row.notes != other.notes {
        parts.push(note_text(&row.notes));
    }
    if parts.is_empty() {
        "unchanged".into()
    } else {
        parts.join(", ")
    }
}

impl App {
    fn remember(&mut self, entry: UndoEntry) {
        self.undo.push(entry);
        if self.undo.len() > MAX_UNDO {
            self.undo.remove(0);
        }
    }

    /// Send a task curation request (status, rating, tags, note),
    /// remembering how to undo it; the row shows the change at once.
    pub(super) fn curate_task(&mut self, req: Request) {
        let id = match &req {
            Request::SetStatus(id, _)
            | Request::SetRating(id, _)
            | Request::SetTags(id, _)
            | Request::SetNotes(id, _) => id.clone(),
            _ => String::new(),
        };
        let change = self
            .tasks
            .row(&id)
            .and_then(|before| task_change(&req, before));
        if let Some((entry, after)) = change {
            self.remember(entry);
            self.tasks.update_row(after);
        }
        self.outbox.push(req);
    }

    /// Send an episode's new review (`after`: rating, label, notes),
    /// remembering `before` to undo it.
    pub(super) fn curate_episode(&mut self, before: &EpisodeRow, after: &EpisodeRow) {
        self.remember(UndoEntry {
            what: format!(
                "{}#{} ({}): {}",
                after.task_id,
                after.sample,
                after.run_id,
                review_text(after, before)
            ),
            back: review_text(before, after),
            revert: rate_request(before),
        });
        self.outbox.push(rate_request(after));
    }

    /// Undo the newest curation change, saying what was undone.
    pub(super) fn undo(&mut self) {
        let Some(entry) = self.undo.pop() else {
            self.info("nothing to undo".into());
            return;
        };
        match &entry.revert {
            Request::RateEpisode {
                run,
                task,
                sample,
                rating,
                label,
                notes,
            } => {
                // The open inspector shows the review it had.
                if let Some(insp) = self.inspector.as_mut() {
                    let row = &mut insp.episode.row;
                    if (&row.run_id, &row.task_id, row.sample) == (run, task, *sample) {
                        row.rating = *rating;
                        row.label = label.clone();
                        row.notes = notes.clone();
                    }
                }
            }
            revert => {
                let id = match revert {
                    Request::SetStatus(id, _)
                    | Request::SetRating(id, _)
                    | Request::SetTags(id, _)
                    | Request::SetNotes(id, _) => id.clone(),
                    _ => String::new(),
                };
                let after = self
                    .tasks
                    .row(&id)
                    .and_then(|row| task_change(revert, row))
                    .map(|(_, after)| after);
                if let Some(after) = after {
                    self.tasks.update_row(after);
                }
            }
        }
        let text = format!("undone: {} (back to {})", entry.what, entry.back);
        self.info(text.clone());
        self.outbox.push(Request::Undo {
            what: text,
            revert: Box::new(entry.revert),
        });
    }
}
