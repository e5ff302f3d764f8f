//! Invalid tasks grouped by the class of their first blocker: what
//! `tasks validate` prints after its verdicts, `--stored` prints from the
//! stored verdicts, and the TUI's validation job logs. Apart from both
//! kinds of verdict (fresh in `validate.rs`, stored in `verdicts.rs`), which
//! each say how they are an [`Invalid`].

use crate::verify::{Blocker, FailureClass};

/// An invalid task as [`blockers_by_class`] groups it.
pub struct Invalid<'a> {
    /// The task id.
    pub id: &'a str,
    /// Its first blocker, if the sandbox checks found one.
    pub blocker: Option<Blocker>,
    /// Its problems (the first stands in for a missing blocker).
    pub problems: &'a [String],
}

/// The invalid tasks grouped by the class of their first blocker (`None`:
/// without a class, last), most frequent first, each group in the given
/// order.
pub(super) fn by_first_blocker<'a>(
    invalid: impl IntoIterator<Item = Invalid<'a>>,
) -> Vec<(Option<FailureClass>, Vec<Invalid<'a>>)> {
    let mut groups: Vec<(Option<FailureClass>, Vec<Invalid<'a>>)> = Vec::new();
    for task in invalid {
        let class = task.blocker.as_ref().map(|b| b.class);
        match groups.iter_mut().find(|(c, _)| *c == class) {
            Some((_, tasks)) => tasks.push(task),
            None => groups.push((class, vec![task])),
        }
    }
    groups.sort_by(|a, b| (a.0.is_none(), b.1.len(), a.0).cmp(&(b.0.is_none(), a.1.len(), b.0)));
    groups
}

/// How a group's class is written (`without a class` for none).
pub(super) fn class_key(class: Option<FailureClass>) -> &'static str {
    class.map_or("without a class", FailureClass::key)
}

/// The invalid tasks by the class of their first blocker, as lines (what
/// `tasks validate` prints after its verdicts and the TUI's validation job
/// logs): per class, most frequent first, `class: N tasks`, then one line
/// per task with what its blocker names (`  t: github.com cannot be
/// reached`), or the line of output that shows it, or its first problem.
pub fn blockers_by_class<'a>(invalid: impl IntoIterator<Item = Invalid<'a>>) -> Vec<String> {
    let mut lines = Vec::new();
    for (class, tasks) in by_first_blocker(invalid) {
        lines.push(format!(
            "{}: {}",
            class_key(class),
            crate::plural::count(tasks.len(), "task")
        ));
        for t in tasks {
            let detail = match t.blocker.as_ref().map(Blocker::detail) {
                Some(d) if !d.is_empty() => d,
                _ => t
                    .problems
                    .first()
                    .and_then(|p| p.lines().next())
                    .unwrap_or_default()
                    .to_string(),
            };
            lines.push(format!("  {}: {detail}", t.id));
        }
    }
    lines
}
