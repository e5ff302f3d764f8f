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
    /// Newest first (when it finished, or was imported).
    #[default]
    Started,
    /// Run, task, sample (as recorded).
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
    /// The policy that played it.
    Policy,
    /// How long it took.
    Duration,
}

impl EpisodeSort {
    /// Every sort key, in cycling order.
    pub const ALL: [EpisodeSort; 9] = [
        EpisodeSort::Started,
        EpisodeSort::Run,
        EpisodeSort::Task,
        EpisodeSort::Result,
        EpisodeSort::Turns,
        EpisodeSort::Failure,
        EpisodeSort::Rating,
        EpisodeSort::Policy,
        EpisodeSort::Duration,
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
            EpisodeSort::Started => "Started",
            EpisodeSort::Policy => "Policy",
            EpisodeSort::Duration => "Time",
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
            EpisodeSort::Failure => labels(a).cmp(&labels(b)),
            EpisodeSort::Rating => a.rating.cmp(&b.rating),
            // Newest first: the default order reads like a log, latest on top.
            EpisodeSort::Started => b.created_at.cmp(&a.created_at),
            EpisodeSort::Policy => a.policy.cmp(&b.policy),
            EpisodeSort::Duration => a.duration_secs.total_cmp(&b.duration_secs),
        };
        first.then(natural)
    }
}

/// A name as the screen and the store both may spell it: lower case, with
/// `_` and `-` read as spaces (`agent_error` is shown `agent error`).
pub fn spoken(name: &str) -> String {
    name.to_lowercase().replace(['_', '-'], " ")
}

/// Whether `row` carries failure label `label` (its primary mode or any
/// other label), however `label` is spelled (see [`spoken`]).
pub fn has_label(row: &EpisodeRow, label: &str) -> bool {
    let want = spoken(label);
    row.failure_mode
        .iter()
        .chain(&row.failure_labels)
        .any(|l| spoken(l) == want)
}

/// The failure labels of `row`, its primary mode first (empty when it
/// passed).
pub fn labels(row: &EpisodeRow) -> Vec<&str> {
    let mut out: Vec<&str> = row.failure_mode.iter().map(String::as_str).collect();
    for l in &row.failure_labels {
        if !out.contains(&l.as_str()) {
            out.push(l);
        }
    }
    out
}

/// Whether `row` passes the failure filter `failure` and the lower-case
/// search text `search` (run, task, end, every failure label, the
/// reviewer's label as stored and as shown, notes, policy; `fork` finds
/// forks, `taken over` the episodes a human took over). Names match
/// however they are spelled:
/// `turn exhaustion` finds `turn_exhaustion`.
pub fn shown(row: &EpisodeRow, failure: Option<&str>, search: &str) -> bool {
    let failure_ok = match failure {
        None => true,
        Some(ANY_FAILURE) => !row.passed,
        Some(NO_FAILURE) => row.failure_mode.is_none(),
        Some(f) => has_label(row, f),
    };
    if !failure_ok {
        return false;
    }
    if search.is_empty() {
        return true;
    }
    let search = spoken(search);
    let labels = labels(row);
    [
        row.run_id.as_str(),
        row.task_id.as_str(),
        row.end_reason.as_str(),
        row.label.as_deref().unwrap_or(""),
        row.notes.as_str(),
        row.policy.as_str(),
        row.forked_from.as_ref().map_or("", |_| "fork"),
        if row.taken_over { "taken over" } else { "" },
        if row.failure_mode.is_none() {
            NO_FAILURE
        } else {
            ""
        },
    ]
    .iter()
    .chain(&labels)
    .any(|f| spoken(f).contains(&search))
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
            failure_labels: mode.map(|m| vec![m.to_string()]).unwrap_or_default(),
            policy: "oracle".into(),
            duration_secs: f64::from(turns),
            forked_from: None,
            created_at: format!("2026-12-04T10:00:{turns:02}Z"),
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
        assert_eq!(EpisodeSort::Duration.next(), EpisodeSort::Started);
        assert_eq!(
            EpisodeSort::default().compare(&ok, &lp),
            Ordering::Greater,
            "newest first: {} after {}",
            ok.created_at,
            lp.created_at
        );
    }

    #[test]
    fn every_label_filters_and_is_found_by_the_name_shown() {
        // A loop that ran out of turns: both labels, the loop primary.
        let mut both = row("b", false, Some("loop"), 64);
        both.failure_labels = vec!["loop".into(), "turn_exhaustion".into()];
        both.label = Some("agent_error".into());
        let only_loop = row("c", false, Some("loop"), 9);
        assert!(
            shown(&both, Some("turn_exhaustion"), ""),
            "a secondary label filters"
        );
        assert!(!shown(&only_loop, Some("turn_exhaustion"), ""));
        for spelling in ["turn_exhaustion", "turn exhaustion", "Turn-Exhaustion"] {
            let s = spelling.to_lowercase();
            assert!(shown(&both, None, &s), "{spelling}");
            assert!(!shown(&only_loop, None, &s), "{spelling}");
        }
        assert!(
            shown(&both, None, "agent error"),
            "the reviewer's label as shown"
        );
        assert!(shown(&both, None, "agent_error"), "and as stored");
        assert_eq!(labels(&both), vec!["loop", "turn_exhaustion"]);
        assert!(has_label(&both, "turn exhaustion"));
        let ok = row("a", true, None, 3);
        assert!(labels(&ok).is_empty());
        assert!(
            shown(&ok, None, "none"),
            "a pass is found as `none`, as filtered"
        );
    }
}
