//! Reviewing a repair (the TUI's repair view): the current version of a
//! task against the version it was repaired from, as a diff per file
//! (instruction, environment, tests, solution) with the reasons the repair
//! was made for; the curator accepts it (the task is marked accepted) or
//! discards it (the parent version is current again; the discarded one
//! stays kept under `versions/<id>/`, restorable).

use anyhow::{bail, Context as _, Result};

use crate::generate::repair::Reason;
use crate::store::{parent_version, task_version, TaskStatus, Workspace};
use crate::task::{FileTree, Task};

/// Lines of context around each change.
const CONTEXT: usize = 2;
/// Diff lines kept per file; the rest is summed up in one line.
const MAX_DIFF_LINES: usize = 200;

/// One file of a repair that changed.
#[derive(Debug, Clone, PartialEq)]
pub struct FileDiff {
    /// The file, as the bundle names it (`instruction.md`,
    /// `environment/Dockerfile`, `tests/test_final_state.py`, ...).
    pub path: String,
    /// Unified-style lines: ` ` context, `-` removed, `+` added, `@@` a hunk.
    pub lines: Vec<String>,
}

/// A repaired version beside the one it was made from.
#[derive(Debug, Clone, PartialEq)]
pub struct RepairReview {
    /// The task.
    pub id: String,
    /// The version it was repaired from.
    pub parent: u32,
    /// The current (repaired) version.
    pub version: u32,
    /// The repair's model (empty for an offline regeneration).
    pub model: String,
    /// The reasons it was repaired for.
    pub reasons: Vec<Reason>,
    /// The files that changed, instruction first.
    pub files: Vec<FileDiff>,
    /// How many files are unchanged.
    pub unchanged: usize,
}

/// The review of task `id`'s current version, or why there is none (it is
/// not a repair).
pub fn repair_review(ws: &Workspace, id: &str) -> Result<RepairReview> {
    let task = ws.load_task(id)?;
    let file = ws.task_dir(id).join("task.toml");
    let version = task_version(&task, &file)?;
    let Some(parent) = parent_version(&task, &file)? else {
        bail!("{id}: version {version} is not a repair: nothing to review (repair it with F, or `endless tasks repair {id}`)");
    };
    let old = ws
        .load_version(id, parent)
        .with_context(|| format!("{id}: reading version {parent}, the one it was repaired from"))?;
    let repair = task.meta.provenance.extra.get("repair");
    let model = repair
        .and_then(|r| r.get("model"))
        .and_then(|m| m.as_str())
        .unwrap_or("")
        .to_string();
    let reasons = match repair.and_then(|r| r.get("reasons")) {
        Some(v) => v.clone().try_into::<Vec<Reason>>().with_context(|| {
            format!(
                "{}: field provenance.repair.reasons is not a list of reasons",
                file.display()
            )
        })?,
        None => Vec::new(),
    };
    let (files, unchanged) = bundle_diff(&old, &task);
    Ok(RepairReview {
        id: id.to_string(),
        parent,
        version,
        model,
        reasons,
        files,
        unchanged,
    })
}

/// Accept the repair of task `id`: the task is marked accepted.
pub fn accept_repair(ws: &Workspace, id: &str) -> Result<u32> {
    let review = repair_review(ws, id)?;
    ws.set_status(id, TaskStatus::Accepted)?;
    Ok(review.version)
}

/// Discard the repair of task `id`: the version it was made from is
/// current again (the repaired one is kept). Returns that version.
pub fn discard_repair(ws: &Workspace, id: &str) -> Result<u32> {
    let review = repair_review(ws, id)?;
    ws.restore_version(id, review.parent)?;
    ws.index_audit_file(id)?;
    Ok(review.parent)
}

/// The changed files of `new` against `old` (instruction first, then
/// environment, tests, solution, each by path), and how many are the same.
pub fn bundle_diff(old: &Task, new: &Task) -> (Vec<FileDiff>, usize) {
    let mut files = Vec::new();
    let mut unchanged = 0;
    let mut one = |path: String, a: Option<String>, b: Option<String>| {
        if a == b {
            unchanged += 1;
            return;
        }
        let lines = match (&a, &b) {
            (None, Some(_)) => vec!["(new file)".to_string()],
            (Some(_), None) => vec!["(removed)".to_string()],
            _ => Vec::new(),
        };
        let mut lines = lines;
        lines.extend(line_diff(
            a.as_deref().unwrap_or(""),
            b.as_deref().unwrap_or(""),
        ));
        files.push(FileDiff { path, lines });
    };
    one(
        "instruction.md".into(),
        Some(old.instruction.clone()),
        Some(new.instruction.clone()),
    );
    let trees = |t: &Task| -> [(&'static str, FileTree); 3] {
        [
            ("environment", t.environment.clone()),
            ("tests", t.tests.clone()),
            ("solution", t.solution.clone()),
        ]
    };
    for ((dir, a), (_, b)) in trees(old).into_iter().zip(trees(new)) {
        let mut paths: Vec<&String> = a.0.keys().chain(b.0.keys()).collect();
        paths.sort();
        paths.dedup();
        for p in paths {
            let text = |t: &FileTree| {
                t.0.get(p.as_str())
                    .map(|f| String::from_utf8_lossy(&f.bytes).into_owned())
            };
            one(format!("{dir}/{p}"), text(&a), text(&b));
        }
    }
    (files, unchanged)
}

/// A line diff of `old` against `new` (longest common subsequence), as
/// hunks with [`CONTEXT`] lines around each change, at most
/// [`MAX_DIFF_LINES`] lines.
pub fn line_diff(old: &str, new: &str) -> Vec<String> {
    let a: Vec<&str> = old.lines().collect();
    let b: Vec<&str> = new.lines().collect();
    // lcs[i][j]: the common subsequence's length of a[i..] and b[j..].
    let mut lcs = vec![vec![0u32; b.len() + 1]; a.len() + 1];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            lcs[i][j] = if a[i] == b[j] {
                lcs[i + 1][j + 1] + 1
            } else {
                lcs[i + 1][j].max(lcs[i][j + 1])
            };
        }
    }
    // Every line tagged: ' ' both, '-' old only, '+' new only; with its
    // line number in the new file.
    let mut ops: Vec<(char, &str, usize)> = Vec::new();
    let (mut i, mut j) = (0, 0);
    while i < a.len() || j < b.len() {
        if i < a.len() && j < b.len() && a[i] == b[j] {
            ops.push((' ', a[i], j + 1));
            i += 1;
            j += 1;
        } else if i < a.len() && (j == b.len() || lcs[i + 1][j] >= lcs[i][j + 1]) {
            // Removed lines before added ones.
            ops.push(('-', a[i], j + 1));
            i += 1;
        } else {
            ops.push(('+', b[j], j + 1));
            j += 1;
        }
    }
    let near_change = |k: usize| {
        let lo = k.saturating_sub(CONTEXT);
        let hi = (k + CONTEXT + 1).min(ops.len());
        ops[lo..hi].iter().any(|(op, _, _)| *op != ' ')
    };
    let mut out = Vec::new();
    let mut in_hunk = false;
    for (k, (op, text, line)) in ops.iter().enumerate() {
        if !near_change(k) {
            in_hunk = false;
            continue;
        }
        if !in_hunk {
            out.push(format!("@@ line {line} @@"));
            in_hunk = true;
        }
        out.push(format!("{op}{text}"));
    }
    if out.is_empty() && old != new {
        out.push("(only the final newline changed)".into());
    }
    if out.len() > MAX_DIFF_LINES {
        let more = out.len() - MAX_DIFF_LINES;
        out.truncate(MAX_DIFF_LINES);
        out.push(format!("… {more} more diff lines"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::set_version;

    #[test]
    fn a_line_diff_shows_each_change_with_its_context() {
        let old = "a\nb\nc\nd\ne\nf\ng\nh\n";
        let new = "a\nb\nC\nd\ne\nf\ng\nh\ni\n";
        let d = line_diff(old, new);
        assert_eq!(
            d,
            vec![
                "@@ line 1 @@",
                " a",
                " b",
                "-c",
                "+C",
                " d",
                " e",
                "@@ line 7 @@",
                " g",
                " h",
                "+i",
            ]
        );
        assert!(line_diff("x", "x").is_empty());
        assert_eq!(
            line_diff("x", "x\n"),
            vec!["(only the final newline changed)"]
        );
        let long: String = (0..500).map(|i| format!("{i}\n")).collect();
        let d = line_diff("", &long);
        assert_eq!(d.len(), MAX_DIFF_LINES + 1);
        assert!(d[MAX_DIFF_LINES].contains("more diff lines"), "{d:?}");
    }

    #[test]
    fn a_repair_is_reviewed_file_by_file_then_accepted_or_discarded() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::open(dir.path()).unwrap();
        let task = crate::procgen::generate_batch(1, 3, None).remove(0);
        let id = task.id().to_string();
        ws.add_task(&task, TaskStatus::Candidate).unwrap();
        let e = repair_review(&ws, &id).unwrap_err().to_string();
        assert!(e.contains("not a repair"), "{e}");
        let mut v2 = task.clone();
        v2.tests.insert_text(
            "test_final_state.py",
            "def test_strong():\n    assert False\n",
        );
        set_version(&mut v2, 2, Some(1));
        let reason = Reason {
            source: "audit".into(),
            summary: "[weak-tests] a mutant survives".into(),
            evidence: "-42".into(),
        };
        v2.meta.provenance.extra.insert(
            "repair".into(),
            toml::Value::try_from(serde_json::json!({
                "model": "m", "reasons": [reason.clone()],
            }))
            .unwrap(),
        );
        ws.commit_version(&v2, &[]).unwrap();
        let r = repair_review(&ws, &id).unwrap();
        assert_eq!((r.parent, r.version, r.model.as_str()), (1, 2, "m"));
        assert_eq!(r.reasons, vec![reason]);
        let paths: Vec<&str> = r.files.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(paths, vec!["tests/test_final_state.py"]);
        assert!(r.files[0].lines.contains(&"+    assert False".to_string()));
        assert!(r.unchanged >= 3, "{r:?}");
        assert_eq!(accept_repair(&ws, &id).unwrap(), 2);
        assert_eq!(ws.task_row(&id).unwrap().status, TaskStatus::Accepted);
        assert_eq!(discard_repair(&ws, &id).unwrap(), 1);
        assert_eq!(ws.current_version(&id).unwrap(), 1);
        assert_eq!(ws.load_task(&id).unwrap().tests, task.tests);
        // The discarded version is kept, restorable.
        assert_eq!(ws.load_version(&id, 2).unwrap().tests, v2.tests);
    }
}
