//! The paper's four-stage generation pipeline: (1) task + privileged truth,
//! (2) environment + initial-state tests with up to k repair rounds (the
//! tests fixed unless the model says they are wrong),
//! (3) completion tests that must fail on the initial state, (4) a pass@n
//! solvability filter; optionally (5) the task audit (`--audit reject|flag`,
//! see [`crate::audit`]). [`repair`] sends a stored task back through the
//! same stages with the reasons it needs repair.

mod candidate;
pub mod config;
pub mod funnel;
mod initial_tests;
pub mod pipeline;
pub mod prompts;
pub mod record;
pub mod repair;
pub mod reply;
mod stages;
pub mod taxonomy;
