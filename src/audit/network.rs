//! `needs-network`: the oracle's episode and the final tests offline, and
//! when they fail, again in a session with network access (the same
//! image; the sandbox's user-mode network, see `sandbox/isolate/net.rs`).
//! Failing offline but passing with network is a finding, with the
//! offline transcript and failures. A sandbox that cannot give a session
//! network skips the second half and says why.

use super::lab::{failures, transcript, Deadline, Lab, Played};
use super::{Check, CheckResult, CheckStatus, Finding};
use crate::sandbox::SandboxError;

/// The label of its findings.
pub const LABEL: &str = "needs-network";

/// Run the check; `shared` is the oracle run the other checks share,
/// offline unless the task declares `network = true`.
pub(crate) fn run(lab: &Lab<'_>, shared: &Played, deadline: Deadline) -> CheckResult {
    let check = Check::NeedsNetwork;
    let declared = lab.task.meta.environment.network;
    let offline_run;
    let offline: &Played = if declared {
        match lab.fresh_with_network(false).map(|s| lab.oracle_on(s)) {
            Ok(Some(Ok(p))) => {
                offline_run = p;
                &offline_run
            }
            Ok(Some(Err(e))) | Err(e) => {
                return CheckResult::error(check, format!("the oracle offline: {e}"))
            }
            Ok(None) => return CheckResult::skipped(check, "the task has no oracle"),
        }
    } else {
        shared
    };
    if offline.report.passed {
        let mut notes = vec!["the oracle passes the final tests offline".to_string()];
        if declared {
            notes.push("the task declares network = true but does not need it".into());
        }
        return CheckResult::done(check, Vec::new(), notes);
    }
    if deadline.passed() {
        return CheckResult::new(
            check,
            CheckStatus::OutOfTime {
                done: "the oracle failed offline; the run with network did not start".into(),
            },
        );
    }
    let online_run;
    let online: &Played = if declared {
        shared
    } else {
        match lab.fresh_with_network(true) {
            Ok(s) => match lab.oracle_on(s) {
                Some(Ok(p)) => {
                    online_run = p;
                    &online_run
                }
                Some(Err(e)) => {
                    return CheckResult::error(check, format!("the oracle with network: {e}"))
                }
                None => return CheckResult::skipped(check, "the task has no oracle"),
            },
            Err(
                e @ (SandboxError::ToolMissing { .. }
                | SandboxError::NetworkNotAllowed { .. }
                | SandboxError::Unavailable { .. }),
            ) => {
                return CheckResult::skipped(
                    check,
                    format!("the oracle fails offline, and this sandbox cannot give a session network to compare: {e}"),
                )
            }
            Err(e) => {
                return CheckResult::error(check, format!("starting a session with network: {e}"))
            }
        }
    };
    if !online.report.passed {
        return CheckResult::done(
            check,
            Vec::new(),
            vec!["the oracle fails offline and with network alike: not a network problem (see the validation)".into()],
        );
    }
    let finding = Finding {
        check,
        label: LABEL.into(),
        summary: format!(
            "the oracle passes the final tests only with network{}",
            if declared {
                " (the task declares network = true)"
            } else {
                ""
            }
        ),
        tests: super::lab::names(&offline.report, false),
        evidence: format!(
            "offline, the final tests fail:\n{}\nthe oracle's episode offline:\n{}",
            failures(&offline.report),
            transcript(&offline.trajectory)
        ),
    };
    CheckResult::done(check, vec![finding], Vec::new())
}
