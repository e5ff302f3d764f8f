//! Verification: run a task's pytest files (or its custom verifier script)
//! inside a session after the agent stopped, in a way the agent cannot
//! forge, and read the per-test results from JUnit XML.

mod junit;
mod run;
mod validate;

pub use junit::parse_junit;
pub use run::{verify, TestCase, TestReport, TestSet, PYTHON};
pub use validate::{validate_task, Validation};
