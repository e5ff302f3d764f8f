//! The baseline of a task: which of its final tests already pass on the
//! untouched initial state. The partial reward pays only for progress over
//! it, so an agent that does nothing earns 0.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::Task;

/// `[provenance.baseline]`: the final tests' verdicts on the untouched
/// initial state, recorded when the task is validated (or measured once
/// lazily where the partial reward needs it and no record exists).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Baseline {
    /// Final tests (names as the verifier reports them, e.g.
    /// `test_final_state::test_output`) that pass on the initial state.
    #[serde(default)]
    pub passing: Vec<String>,
    /// Final tests that fail on the initial state: the progress to be made.
    #[serde(default)]
    pub failing: Vec<String>,
    /// [`baseline_digest`] of the task the verdicts were measured on; a
    /// record whose digest no longer matches (tests or environment edited)
    /// is ignored.
    #[serde(default)]
    pub digest: String,
}

impl Baseline {
    /// The baseline of `task` from its final tests' verdicts `(name,
    /// passed)` on the untouched initial state.
    pub fn from_verdicts<'a>(
        task: &Task,
        verdicts: impl IntoIterator<Item = (&'a str, bool)>,
    ) -> Self {
        let mut b = Baseline {
            digest: baseline_digest(task),
            ..Baseline::default()
        };
        for (name, passed) in verdicts {
            if passed {
                b.passing.push(name.to_string());
            } else {
                b.failing.push(name.to_string());
            }
        }
        b
    }

    /// Whether this record was measured on `task` as it is now.
    pub fn matches(&self, task: &Task) -> bool {
        self.digest == baseline_digest(task)
    }
}

impl Task {
    /// The recorded baseline, if there is one and it was measured on the
    /// task's current tests and environment.
    pub fn baseline(&self) -> Option<&Baseline> {
        self.meta
            .provenance
            .baseline
            .as_ref()
            .filter(|b| b.matches(self))
    }
}

/// A content hash of what decides the final tests' verdicts on the initial
/// state: every file under `environment/` and `tests/`, the final test
/// files or verifier script, the agent account and the workdir.
pub fn baseline_digest(task: &Task) -> String {
    let mut h = Sha256::new();
    h.update(b"endless-baseline-v1\0");
    let v = &task.meta.verifier;
    for name in &v.final_tests {
        h.update((name.len() as u64).to_le_bytes());
        h.update(name.as_bytes());
    }
    h.update(b"\0");
    h.update(v.script.as_deref().unwrap_or("").as_bytes());
    h.update(b"\0");
    h.update(task.meta.agent.user.as_bytes());
    h.update(b"\0");
    h.update(task.meta.environment.workdir.as_bytes());
    for (tree, tag) in [(&task.environment, b"E"), (&task.tests, b"T")] {
        h.update(tag);
        for (path, entry) in tree.iter() {
            h.update((path.len() as u64).to_le_bytes());
            h.update(path.as_bytes());
            h.update([entry.executable as u8]);
            h.update((entry.bytes.len() as u64).to_le_bytes());
            h.update(&entry.bytes);
        }
    }
    hex::encode(h.finalize())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task::TaskMeta;

    fn task() -> Task {
        let mut t = Task::minimal("t");
        t.tests
            .insert_text("test_final_state.py", "def test_a(): pass\n");
        t
    }

    #[test]
    fn the_record_round_trips_and_goes_stale_when_the_tests_change() {
        let mut t = task();
        assert!(t.baseline().is_none(), "bundles without the record load");
        let b = Baseline::from_verdicts(
            &t,
            [
                ("test_final_state::test_a", true),
                ("test_final_state::test_b", false),
            ],
        );
        assert_eq!((b.passing.len(), b.failing.len()), (1, 1));
        t.meta.provenance.baseline = Some(b.clone());
        let text = toml::to_string(&t.meta).unwrap();
        assert!(text.contains("[provenance.baseline]"), "{text}");
        let back: TaskMeta = toml::from_str(&text).unwrap();
        assert_eq!(back.provenance.baseline.as_ref(), Some(&b));
        assert_eq!(t.baseline(), Some(&b));
        t.tests
            .insert_text("test_final_state.py", "def test_a(): assert False\n");
        assert!(t.baseline().is_none(), "a stale record is ignored");
    }
}
