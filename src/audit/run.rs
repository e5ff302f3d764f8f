//! [`audit_task`]: one task's checks, in order, each under its budget,
//! sharing one oracle run (and its finished sandbox) between the checks
//! that need it.

use std::time::{Duration, Instant};

use super::lab::{Deadline, Lab, Played};
use super::snapshot::{self, Manifest};
use super::{
    cheap, flaky, network, passes_without_work, time_order, underspecified, weak_tests,
    AuditReport, Check, CheckResult, CheckStatus, MutationScore, AUDIT_FORMAT,
};
use crate::sandbox::{Backend, SandboxError};
use crate::task::Task;

/// What to audit and how hard.
#[derive(Debug, Clone, PartialEq)]
pub struct AuditOptions {
    /// The checks to run (run in [`Check::ALL`] order).
    pub checks: Vec<Check>,
    /// Each check's time budget.
    pub budget: Duration,
    /// Oracle runs (and test re-runs) of the flaky check.
    pub flaky_runs: u32,
    /// The most mutants the weak-tests check runs.
    pub max_mutants: usize,
    /// The share of final tests passing without work that is a finding
    /// (1.0: only all of them; a smaller share is a note).
    pub pass_share: f64,
}

impl Default for AuditOptions {
    fn default() -> Self {
        AuditOptions {
            checks: Check::ALL.to_vec(),
            budget: Duration::from_secs(300),
            flaky_runs: 3,
            max_mutants: 40,
            pass_share: 1.0,
        }
    }
}

/// The oracle's run shared by the checks that need it.
struct Shared {
    played: Played,
    before: Manifest,
    after: Manifest,
    seconds: f64,
}

/// Audit `task` with `backend`. `on_check` is called as each check starts
/// (with its name, for progress); it returns `false` to stop (a cancel):
/// then `None`, and nothing is reported. Sandbox failures are the failed
/// checks' [`CheckStatus::Error`], never the audit's.
pub fn audit_task(
    backend: &dyn Backend,
    task: &Task,
    opts: &AuditOptions,
    on_check: &dyn Fn(Check) -> bool,
) -> Option<AuditReport> {
    let start = Instant::now();
    let has_oracle = task.solve_script().is_some();
    let wanted = |c: Check| opts.checks.contains(&c);
    let mut results: Vec<CheckResult> = Vec::new();
    let mut mutation = None;
    let timed = |c: Check, f: &mut dyn FnMut() -> CheckResult| -> Option<CheckResult> {
        if !on_check(c) {
            return None;
        }
        let t = Instant::now();
        let mut r = f();
        r.seconds += t.elapsed().as_secs_f64();
        Some(r)
    };
    let sandboxed: Vec<Check> = opts
        .checks
        .iter()
        .copied()
        .filter(|c| c.needs_sandbox())
        .collect();
    if !sandboxed.is_empty() || wanted(Check::Underspecified) {
        match backend.prepare(task) {
            Err(e) => {
                if wanted(Check::Underspecified) {
                    results.push(timed(Check::Underspecified, &mut || {
                        underspecified::run(task, None)
                    })?);
                }
                for c in sandboxed {
                    results.push(CheckResult::error(
                        c,
                        format!("the environment did not build: {e}"),
                    ));
                }
            }
            Ok(image) => {
                let lab = Lab::new(backend, task, image, opts.budget);
                let deadline = || Deadline::new(opts.budget);
                // One fresh session lists the initial state's files (for
                // underspecified and cheap-solutions) and then serves
                // passes-without-work.
                let mut initial_session = None;
                let mut initial: Option<Manifest> = None;
                let mut listing_error = None;
                if wanted(Check::Underspecified)
                    || wanted(Check::CheapSolutions)
                    || wanted(Check::PassesWithoutWork)
                {
                    match lab
                        .fresh()
                        .and_then(|mut s| snapshot::take(&mut s).map(|m| (s, m)))
                    {
                        Ok((s, m)) => {
                            initial_session = Some(s);
                            initial = Some(m);
                        }
                        Err(e) => listing_error = Some(e.to_string()),
                    }
                }
                if wanted(Check::Underspecified) {
                    results.push(timed(Check::Underspecified, &mut || {
                        let mut r = underspecified::run(task, initial.as_ref());
                        if let Some(e) = &listing_error {
                            r.notes
                                .push(format!("listing the initial state failed: {e}"));
                        }
                        r
                    })?);
                }
                if wanted(Check::PassesWithoutWork) {
                    let session = initial_session.take();
                    let mut session = Some(session);
                    results.push(timed(Check::PassesWithoutWork, &mut || {
                        passes_without_work::run(
                            &lab,
                            session.take().flatten(),
                            opts.pass_share,
                            deadline(),
                        )
                    })?);
                }
                if let Some(s) = initial_session.take() {
                    s.close();
                }
                if wanted(Check::CheapSolutions) {
                    results.push(timed(Check::CheapSolutions, &mut || {
                        cheap::run(&lab, initial.as_ref(), deadline())
                    })?);
                }
                let oracle_checks: Vec<Check> = sandboxed
                    .iter()
                    .copied()
                    .filter(|c| c.needs_oracle())
                    .collect();
                if !oracle_checks.is_empty() && !has_oracle {
                    for c in &oracle_checks {
                        results.push(CheckResult::skipped(
                            *c,
                            "the task has no oracle (solution/solve.sh): this check compares against the oracle's work",
                        ));
                    }
                } else if !oracle_checks.is_empty() {
                    if !on_check(oracle_checks[0]) {
                        return None;
                    }
                    match shared_oracle(&lab, wanted(Check::WeakTests)) {
                        Err(e) => {
                            for c in &oracle_checks {
                                results
                                    .push(CheckResult::error(*c, format!("the oracle's run: {e}")));
                            }
                        }
                        Ok(mut shared) => {
                            let note = format!(
                                "the oracle's run these checks share took {:.1}s",
                                shared.seconds
                            );
                            let passed = shared.played.report.passed;
                            let failing = || {
                                format!(
                                    "the oracle does not pass the final tests ({}): there is no passing end state to vary",
                                    super::lab::failures(&shared.played.report)
                                )
                            };
                            // The flaky check re-runs the tests first, on the untouched end state.
                            if wanted(Check::Flaky) {
                                let first = shared.played.report.clone();
                                let session = &mut shared.played.session;
                                results.push(timed(Check::Flaky, &mut || {
                                    flaky::run(&lab, session, &first, opts.flaky_runs, deadline())
                                })?);
                            }
                            if wanted(Check::TimeOrder) {
                                let r = if passed {
                                    let session = &mut shared.played.session;
                                    timed(Check::TimeOrder, &mut || {
                                        time_order::run(&lab, session, deadline())
                                    })?
                                } else {
                                    CheckResult::skipped(Check::TimeOrder, failing())
                                };
                                results.push(r);
                            }
                            if wanted(Check::WeakTests) {
                                let r = if passed {
                                    let end = weak_tests::EndState {
                                        session: &mut shared.played.session,
                                        before: &shared.before,
                                        after: &shared.after,
                                    };
                                    let mut score = None;
                                    let mut end = Some(end);
                                    let r = timed(Check::WeakTests, &mut || match end.take() {
                                        Some(end) => {
                                            let (r, s) = weak_tests::run(
                                                &lab,
                                                end,
                                                opts.max_mutants,
                                                deadline(),
                                            );
                                            score = Some(s);
                                            r
                                        }
                                        None => CheckResult::error(Check::WeakTests, "ran twice"),
                                    })?;
                                    mutation = score.filter(|_| {
                                        matches!(
                                            r.status,
                                            CheckStatus::Ok
                                                | CheckStatus::Finding
                                                | CheckStatus::OutOfTime { .. }
                                        )
                                    });
                                    r
                                } else {
                                    CheckResult::skipped(Check::WeakTests, failing())
                                };
                                results.push(r);
                            }
                            if wanted(Check::NeedsNetwork) {
                                let played = &shared.played;
                                results.push(timed(Check::NeedsNetwork, &mut || {
                                    network::run(&lab, played, deadline())
                                })?);
                            }
                            for r in results.iter_mut().filter(|r| r.check.needs_oracle()) {
                                r.notes.push(note.clone());
                            }
                            shared.played.session.close();
                        }
                    }
                }
            }
        }
    }
    if task.meta.verifier.agent_packages {
        for r in results
            .iter_mut()
            .filter(|r| r.check == Check::PassesWithoutWork)
        {
            r.notes.push(crate::verify::TRUSTS_AGENT_PACKAGES.into());
        }
    }
    results.sort_by_key(|r| Check::ALL.iter().position(|c| *c == r.check));
    Some(AuditReport {
        format: AUDIT_FORMAT,
        task_id: task.id().to_string(),
        digest: super::report::audit_digest(task),
        audited_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        seconds: start.elapsed().as_secs_f64(),
        has_oracle,
        checks: results,
        mutation: mutation.map(|m: MutationScore| m),
    })
}

/// The oracle in a fresh session, with the manifests around it when the
/// weak-tests check needs them.
fn shared_oracle(lab: &Lab<'_>, manifests: bool) -> Result<Shared, SandboxError> {
    let t = Instant::now();
    let mut session = lab.fresh()?;
    let before = if manifests {
        snapshot::take(&mut session)?
    } else {
        Manifest::new()
    };
    let mut played = match lab.oracle_on(session) {
        Some(r) => r?,
        None => return Err(SandboxError::Verify("the task has no oracle".into())),
    };
    let after = if manifests {
        snapshot::take(&mut played.session)?
    } else {
        Manifest::new()
    };
    Ok(Shared {
        played,
        before,
        after,
        seconds: t.elapsed().as_secs_f64(),
    })
}
