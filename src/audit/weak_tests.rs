//! `weak-tests`: mutation testing of the final tests. The oracle runs in a
//! fresh sandbox; what it changed (against the manifest taken before it
//! ran, see [`super::snapshot`]) gives the [`super::mutants`]. Each mutant
//! is applied inside the oracle's finished sandbox, the final tests run,
//! and the path is put back as it was (from a copy taken before). A mutant
//! the tests still accept is a finding with its diff; the mutation score
//! is killed / total.

use super::lab::{root_sh, Deadline, Lab};
use super::mutants::{self, Action, Mutant};
use super::snapshot::{shell_quote, Change, ChangeKind, Manifest};
use super::{Check, CheckResult, CheckStatus, Finding, MutationScore};
use crate::sandbox::{SandboxError, Session};

/// The label of its findings.
pub const LABEL: &str = "weak-tests";

/// Makes the scratch directory and prints its path.
const SCRATCH: &str = "umask 077; if mkdir -p /run/endless-audit 2>/dev/null; then echo /run/endless-audit; else mkdir -p /tmp/.endless-audit && echo /tmp/.endless-audit; fi";

/// The oracle's finished sandbox, with the manifests around its episode.
pub(crate) struct EndState<'s> {
    /// The session the oracle ran in.
    pub session: &'s mut Session,
    /// The files before the oracle.
    pub before: &'s Manifest,
    /// The files after it.
    pub after: &'s Manifest,
}

/// Run the check on the oracle's passing end state; at most `max` mutants.
pub(crate) fn run(
    lab: &Lab<'_>,
    end: EndState<'_>,
    max: usize,
    deadline: Deadline,
) -> (CheckResult, MutationScore) {
    let check = Check::WeakTests;
    let mut score = MutationScore {
        killed: 0,
        total: 0,
    };
    let all_changes = super::snapshot::diff(end.before, end.after);
    let changes: Vec<Change> = all_changes
        .iter()
        .filter(|c| !mutants::is_bookkeeping(&c.path))
        .cloned()
        .collect();
    // Where the paths mutated are copied to, inside the sandbox (root's
    // only, out of the manifest's trees).
    let scratch = match root_sh(end.session, SCRATCH) {
        Ok(out) => out.trim().to_string(),
        Err(e) => return (CheckResult::error(check, e.to_string()), score),
    };
    let mut per_file = Vec::new();
    let mut notes = Vec::new();
    let originals = match originals(lab, &changes) {
        Ok(o) => o,
        Err(e) => {
            return (
                CheckResult::error(check, format!("reading the initial state: {e}")),
                score,
            )
        }
    };
    for change in &changes {
        let content = match read_content(end.session, change) {
            Ok(c) => c,
            Err(e) => return (CheckResult::error(check, e.to_string()), score),
        };
        let original = originals.get(&change.path).map(Vec::as_slice);
        per_file.push(mutants::of_change(change, content.as_deref(), original));
    }
    let planned: usize = per_file.iter().map(Vec::len).sum();
    let mutants = mutants::interleave(per_file, max);
    if planned > mutants.len() {
        notes.push(format!(
            "{} of {planned} mutants run (at most {max})",
            mutants.len()
        ));
    }
    if all_changes.len() > changes.len() {
        notes.push(format!(
            "{} changed paths are tools' own state (.git, caches, histories) and were not mutated",
            all_changes.len() - changes.len()
        ));
    }
    if changes.is_empty() {
        notes.push("the oracle changed no file outside the system trees: nothing to mutate".into());
    }
    let mut findings = Vec::new();
    for (i, m) in mutants.iter().enumerate() {
        if deadline.passed() {
            let mut r = CheckResult::new(
                check,
                CheckStatus::OutOfTime {
                    done: format!("{i} of {} mutants run", mutants.len()),
                },
            );
            r.findings = findings;
            r.notes = notes;
            return (r, score);
        }
        let report = match try_mutant(lab, end.session, m, &scratch, end.before) {
            Ok(r) => r,
            Err(e) => {
                return (
                    CheckResult::error(check, format!("mutant {} of {}: {e}", m.kind, m.path)),
                    score,
                )
            }
        };
        score.total += 1;
        if report.passed {
            findings.push(Finding {
                check,
                label: LABEL.into(),
                summary: format!("the final tests accept {}: {}", m.path, m.kind),
                tests: super::lab::names(&report, true),
                evidence: m.diff.clone(),
            });
        } else {
            score.killed += 1;
        }
    }
    // The end state is back as the oracle left it (later checks use it).
    match lab.verify(end.session) {
        Ok(r) if r.passed => {}
        Ok(r) => notes.push(format!(
            "after the mutants were undone the final tests no longer pass: {}",
            super::lab::failures(&r)
        )),
        Err(e) => notes.push(format!("the restored end state could not be verified: {e}")),
    }
    (CheckResult::done(check, findings, notes), score)
}

/// The contents of a regular file the oracle created or modified, read
/// as base64 (`None` for other changes and files too large to edit).
fn read_content(session: &mut Session, change: &Change) -> Result<Option<Vec<u8>>, SandboxError> {
    let regular = change.after.as_ref().is_some_and(|a| a.kind == 'f');
    if change.kind == ChangeKind::Deleted || !regular {
        return Ok(None);
    }
    if change
        .after
        .as_ref()
        .is_some_and(|a| a.size as usize > mutants::MAX_EDITED_BYTES)
    {
        return Ok(None);
    }
    let out = root_sh(
        session,
        &format!("base64 -w0 -- {}", shell_quote(&change.path)),
    )?;
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD
        .decode(out.trim())
        .map(Some)
        .map_err(|e| SandboxError::Verify(format!("reading {}: {e}", change.path)))
}

/// The contents before the oracle of the regular files it modified, read
/// in a fresh session (none started when it modified none).
fn originals(
    lab: &Lab<'_>,
    changes: &[Change],
) -> Result<std::collections::BTreeMap<String, Vec<u8>>, SandboxError> {
    let mut out = std::collections::BTreeMap::new();
    let modified: Vec<&Change> = changes
        .iter()
        .filter(|c| {
            c.kind == ChangeKind::Modified && c.before.as_ref().is_some_and(|b| b.kind == 'f')
        })
        .collect();
    if modified.is_empty() {
        return Ok(out);
    }
    let mut session = lab.fresh()?;
    for c in modified {
        let as_before = Change {
            after: c.before.clone(),
            ..c.clone()
        };
        if let Some(bytes) = read_content(&mut session, &as_before)? {
            out.insert(c.path.clone(), bytes);
        }
    }
    session.close();
    Ok(out)
}

/// Apply `m`, run the final tests, undo it.
fn try_mutant(
    lab: &Lab<'_>,
    session: &mut Session,
    m: &Mutant,
    scratch: &str,
    before: &Manifest,
) -> Result<crate::verify::TestReport, SandboxError> {
    let path = shell_quote(&m.path);
    let bak = format!("{scratch}/bak");
    let backup = format!("rm -rf {bak} && cp -a -- {path} {bak}");
    let restore = format!("rm -rf -- {path} && cp -a {bak} {path} && rm -rf {bak}");
    let (apply, undo) = match &m.action {
        Action::Write(bytes) => {
            use base64::Engine as _;
            let b64 = base64::engine::general_purpose::STANDARD.encode(bytes);
            (
                format!("{backup} && printf '%s' '{b64}' | base64 -d > {path}"),
                restore,
            )
        }
        Action::Remove => (format!("{backup} && rm -rf -- {path}"), restore),
        Action::Chmod(mode) => (format!("{backup} && chmod {mode:o} -- {path}"), restore),
        Action::Recreate => {
            let (mode, (uid, gid)) = before
                .get(&m.path)
                .map_or((0o644, (0, 0)), |e| (e.mode, e.owner));
            (
                format!(": > {path} && chown {uid}:{gid} {path} && chmod {mode:o} {path}"),
                format!("rm -f -- {path}"),
            )
        }
    };
    root_sh(session, &apply)?;
    let report = lab.verify(session);
    root_sh(session, &undo)?;
    report
}
