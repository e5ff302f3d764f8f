//! `endless bench sample`: local-model sampling throughput (see
//! [`crate::model::bench`]); `scripts/bench_llamacpp.sh` puts it beside llama.cpp.

use std::path::PathBuf;

use anyhow::{Context as _, Result};
use candle_core::Device;

use crate::model::bench::{bench_sample, SampleBench};
use crate::model::{fetch_smollm2, LocalModel};
use crate::workbench::Context;

/// Sequences sampled together in the batched run (the samples of one task).
pub const BATCH: usize = 16;

/// Time sampling `tokens` tokens with the local engine (`model`, or the
/// cached SmolLM2).
pub fn run(ctx: &Context, tokens: usize, model: Option<PathBuf>) -> Result<SampleBench> {
    anyhow::ensure!(tokens >= 2, "--n must be at least 2 tokens");
    let path = match model {
        Some(p) => p,
        None => fetch_smollm2(&ctx.paths.cache_dir.join("models"))
            .context("fetching SmolLM2 (pass --model FILE.gguf to use a local copy)")?,
    };
    let mut model = LocalModel::load(&path, &Device::Cpu)
        .with_context(|| format!("loading {}", path.display()))?;
    Ok(bench_sample(&mut model, tokens, BATCH, 2)?)
}
