//! PLACEHOLDER (replaced on merge): `endless train` is being built on main.
//! Only the signature of [`options`] is real here, so that the TUI's
//! training job compiles; the integrator drops this file for main's.

use crate::cli::TrainArgs;
use crate::commands::Context;
use crate::rl::session::TrainOptions;

/// Resolve `endless train` arguments into [`TrainOptions`] (placeholder:
/// always fails until the real implementation is merged).
pub fn options(_ctx: &Context, _args: &TrainArgs) -> anyhow::Result<TrainOptions> {
    anyhow::bail!("training is not merged yet")
}
