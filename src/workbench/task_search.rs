//! Finding tasks by text, one way for both front ends: the CLI's
//! `tasks list --search` and the TUI's `/` look in the same fields (id,
//! name, instruction, tags and audit labels) with the same matcher.

use anyhow::Result;

use crate::audit::{short_label, AuditRow};
use crate::store::{TaskFilter, TaskRow, Workspace};

/// What a search looks in: id, name, instruction, tags and audit labels
/// (as stored and as shown), lowercased. Build it once per row and test
/// each [`Search`] against it.
pub fn haystack(row: &TaskRow, audit: Option<&AuditRow>) -> String {
    let labels: Vec<String> = audit
        .map(|a| {
            a.labels
                .iter()
                .map(|l| format!("{l}\n{}", short_label(l)))
                .collect()
        })
        .unwrap_or_default();
    format!(
        "{}\n{}\n{}\n{}\n{}",
        row.id,
        row.name,
        row.instruction,
        row.tags.join("\n"),
        labels.join("\n")
    )
    .to_lowercase()
}

/// A search text: matched case-insensitively as a substring of a row's
/// [`haystack`]; an empty one matches every row.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Search(String);

impl Search {
    /// The search for `text`.
    pub fn new(text: &str) -> Search {
        Search(text.to_lowercase())
    }

    /// Whether the row whose [`haystack`] is `haystack` matches.
    pub fn matches(&self, haystack: &str) -> bool {
        self.0.is_empty() || haystack.contains(&self.0)
    }
}

/// The rows `filter` selects (by status and category, in id order) that
/// `search` matches, audit labels included.
pub fn find_tasks(ws: &Workspace, filter: &TaskFilter, search: &str) -> Result<Vec<TaskRow>> {
    let rows = ws.list_tasks(filter)?;
    let search = Search::new(search);
    if search == Search::default() {
        return Ok(rows);
    }
    let audits = ws.audit_rows()?;
    Ok(rows
        .into_iter()
        .filter(|r| search.matches(&haystack(r, audits.iter().find(|a| a.task_id == r.id))))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::TaskStatus;
    use crate::task::Task;

    #[test]
    fn a_tag_only_match_is_found() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::open(dir.path()).unwrap();
        for id in ["count-words", "fix-perms"] {
            ws.add_task(&Task::minimal(id), TaskStatus::Candidate)
                .unwrap();
        }
        ws.set_tags("count-words", &["Wordy".into()]).unwrap();
        let ids = |q: &str| -> Vec<String> {
            find_tasks(&ws, &TaskFilter::default(), q)
                .unwrap()
                .into_iter()
                .map(|r| r.id)
                .collect()
        };
        // Neither the id, nor the name, nor the instruction says it.
        assert_eq!(ids("wORDY"), ["count-words"]);
        assert_eq!(ids("perms"), ["fix-perms"]);
        assert_eq!(ids("").len(), 2);
        assert!(ids("nothing-like-it").is_empty());
        // The status filter still applies.
        let accepted = TaskFilter {
            status: Some(TaskStatus::Accepted),
            ..Default::default()
        };
        assert!(find_tasks(&ws, &accepted, "wordy").unwrap().is_empty());
    }
}
