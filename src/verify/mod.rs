//! Verification: run a task's pytest files (or its custom verifier script)
//! inside a session after the agent stopped, in a way the agent cannot
//! forge, and read the per-test results from JUnit XML.

mod failure;
mod junit;
mod run;
mod validate;

pub use failure::{classify, FailureClass};
pub use junit::parse_junit;
pub use run::{
    prestart, verify, verify_initial_and_final, verify_with, TestCase, TestReport, TestSet,
    VerifierMode, MAX_REPORT_BYTES, PYTHON,
};
pub(crate) use validate::run_oracle;
pub use validate::{validate_task, validate_task_reporting, Validation};
