//! Verification: run a task's pytest files (or its custom verifier script)
//! inside a session after the agent stopped, in a way the agent cannot
//! forge, and read the per-test results from JUnit XML.

mod failure;
mod hosts;
mod junit;
mod report;
mod run;
mod standin_diff;
mod validate;
mod validation;

pub use failure::{classify, first_blocker};
pub use junit::parse_junit;
pub use report::{TestCase, TestReport};
pub use run::{
    prestart, verify, verify_initial_and_final, verify_with, TestSet, VerifierMode,
    MAX_REPORT_BYTES, PYTHON, TRUSTS_AGENT_PACKAGES,
};
pub(crate) use validate::run_oracle;
pub use validate::{validate_task, validate_task_reporting};
pub use validation::{Blocker, FailureClass, Validation};
