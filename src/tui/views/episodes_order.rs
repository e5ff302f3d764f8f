//! Which episodes the Episodes view shows and in what order: the failure
//! filter (any, any failure, one mode, none), the `/` search and the sort.

use std::cmp::Ordering;

use crate::store::EpisodeRow;

/// Filter value for episodes without a failure mode (passed).
pub const NO_FAILURE: &str = "none";

/// Filter value for every episode that did not pass.
pub const ANY_FAILURE: &str = "any failure";

/// The column the Episodes view sorts by.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum EpisodeSort {
    /// Run, task, sample (as recorded).
    #[default]
    Run,
    /// Task, then run and sample.
    Task,
    /// Pass, then reward.
    Result,
    /// Turns taken.
    Turns,
    /// Failure mode.
    Failure,
    /// Reviewer's rating.
    Rating,
}

impl EpisodeSort {
    /// Every sort key, in cycling order.
    pub const ALL: [EpisodeSort; 6] = [
        EpisodeSort::Run,
        EpisodeSort::Task,
        EpisodeSort::Result,
        EpisodeSort::Turns,
        EpisodeSort::Failure,
        EpisodeSort::Rating,
    ];

    /// The column header it sorts.
    pub fn column(self) -> &'static str {
        match self {
            EpisodeSort::Run => "Run",
            EpisodeSort::Task => "Task",
            EpisodeSort::Result => "Res",
            EpisodeSort::Turns => "Turns",
            EpisodeSort::Failure => "Failure",
            EpisodeSort::Rating => "Rating",
        }
    }

    /// The next key (wrapping).
    pub fn next(self) -> EpisodeSort {
        let i = Self::ALL.iter().position(|s| *s == self).unwrap_or(0);
        Self::ALL[(i + 1) % Self::ALL.len()]
    }

    /// Compare two rows by this key (ties by run, task, sample).
    pub fn compare(self, a: &EpisodeRow, b: &EpisodeRow) -> Ordering {
        let natural = (&a.run_id, &a.task_id, a.sample).cmp(&(&b.run_id, &b.task_id, b.sample));
        let first = match self {
            EpisodeSort::Run => Ordering::Equal,
            EpisodeSort::Task => a.task_id.cmp(&b.task_id),
            EpisodeSort::Result => a.passed.cmp(&b.passed).then(a.reward.total_cmp(&b.reward)),
            EpisodeSort::Turns => a.turns.cmp(&b.turns),
            EpisodeSort::Failure => a.failure_mode.cmp(&b.failure_mode),
            EpisodeSort::Rating => a.rating.cmp(&b.rating),
        };
        first.then(natural)
    }
}

/// Whether `row` passes the failure filter `failure` and the lower-case
/// search text `search` (run, task, end, failure mode, label, notes;
/// `taken over` finds the episodes a human took over).
pub fn shown(row: &EpisodeRow, failure: Option<&str>, search: &str) -> bool {
    let mode = row.failure_mode.as_deref().unwrap_or(NO_FAILURE);
    let failure_ok = match failure {
        None => true,
        Some(ANY_FAILURE) => !row.passed,
        Some(f) => mode == f,
    };
    if !failure_ok {
        return false;
    }
    if search.is_empty() {
        return true;
    }
    [
        row.run_id.as_str(),
        row.task_id.as_str(),
        row.end_reason.as_str(),
        mode,
        row.label.as_deref().unwrap_or(""),
        row.notes.as_str(),
        if row.taken_over { "taken over" } else { "" },
    ]
    .iter()
    .any(|f| f.to_lowercase().contains(search))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(task: &str, passed: bool, mode: Option<&str>, turns: u32) -> EpisodeRow {
        EpisodeRow {
            run_id: "r".into(),
            task_id: task.into(),
            sample: 0,
            passed,
            reward: f64::from(u8::from(passed)),
            turns,
            end_reason: "done".into(),
            failure_mode: mode.map(String::from),
            path: String::new(),
            rating: None,
            label: None,
            notes: "Flaky test".into(),
            taken_over: false,
        }
    }

    #[test]
    fn filters_search_and_sorts() {
        let ok = row("a", true, None, 3);
        let lp = row("b", false, Some("loop"), 9);
        assert!(shown(&lp, Some(ANY_FAILURE), ""));
        assert!(!shown(&ok, Some(ANY_FAILURE), ""));
        assert!(shown(&ok, Some(NO_FAILURE), ""));
        assert!(shown(&lp, Some("loop"), "flaky"), "notes are searched");
        assert!(!shown(&lp, None, "nothing"));
        let mut taken = row("c", true, None, 2);
        taken.taken_over = true;
        assert!(shown(&taken, None, "taken over"));
        assert!(!shown(&ok, None, "taken over"));
        assert_eq!(EpisodeSort::Turns.compare(&ok, &lp), Ordering::Less);
        assert_eq!(EpisodeSort::Result.compare(&ok, &lp), Ordering::Greater);
        assert_eq!(EpisodeSort::Rating.next(), EpisodeSort::Run);
    }
}
