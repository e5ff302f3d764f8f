//! What a family is made of: its definition ([`Def`]) and the [`Spec`] its
//! build function returns; the families and the generator both use them.

use rand_chacha::ChaCha8Rng;

use super::pytest::Check;
use super::util::Setup;

/// The work a family does: data, checks and oracle, before instruction framing.
#[derive(Debug, Default)]
pub(crate) struct Spec {
    /// Short task name.
    pub title: String,
    /// Alternative phrasings of the core request (one is chosen).
    pub goals: Vec<String>,
    /// Precise requirements (bullets).
    pub reqs: Vec<String>,
    /// Extra lines for truth.md.
    pub truth: Vec<String>,
    /// The environment script.
    pub setup: Setup,
    /// Checks on the initial state.
    pub initial: Vec<Check>,
    /// Checks on the final state (must fail initially).
    pub checks: Vec<Check>,
    /// Oracle steps (shell, run as `user` in /home/user).
    pub solve: Vec<String>,
    /// Custom near-miss steps; default: the solve steps without the last one.
    pub near_miss: Option<Vec<String>>,
    /// The single output file, enabling the generic follow-up steps.
    pub output: Option<String>,
}

/// A family defined by a build function.
pub(crate) struct Def {
    /// [`Family::name`](super::Family::name): stable, part of task ids.
    pub name: &'static str,
    /// [`Family::category`](super::Family::category).
    pub category: &'static str,
    /// [`Family::required_tools`](super::Family::required_tools).
    pub tools: &'static [&'static str],
    /// Builds the spec from the data RNG and the complexity (already clamped to 1..=6).
    pub build: fn(&mut ChaCha8Rng, u8) -> Spec,
}
