//! `endless bench sample`: local-model sampling throughput (see
//! [`super::sampling`]), and with `--check` how close the quantized
//! runner is to the f32 dequantised model (see [`crate::model::numerics`]);
//! `scripts/bench_llamacpp.sh` puts both beside llama.cpp.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};
use candle_core::Device;
use serde::Serialize;

use super::sampling::{bench_sample, check_sequences, SampleBench};
use crate::model::kernels::level::CpuLevel;
use crate::model::kernels::ran::{KernelReport, Snapshot};
use crate::model::numerics::{check_numerics, NumericsCheck};
use crate::model::{fetch_smollm2, LocalModel};
use crate::workbench::Context;

/// Sequences sampled together in the batched run (the samples of one task).
pub const BATCH: usize = 16;

/// What `endless bench sample` reports: the speed figures, and with
/// `--check` the numerics.
#[derive(Debug, Clone, Serialize)]
pub struct SampleReport {
    /// The sampling throughput.
    #[serde(flatten)]
    pub bench: SampleBench,
    /// The kernel level and the hand kernels that ran over the timed runs.
    pub kernels: KernelReport,
    /// The quantized runner against the f32 dequantised model (`--check`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub check: Option<NumericsCheck>,
}

impl std::fmt::Display for SampleReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}\n  {}", self.bench, self.kernels)?;
        if let Some(c) = &self.check {
            write!(f, "\n{}", c.to_string().trim_end())?;
        }
        Ok(())
    }
}

/// Run the benchmark on `model` (default: SmolLM2 Q4_1, fetched), and with
/// `check` the numerics check; `dump` receives the checked sequences
/// (`check.json`) and the f32 model's logits (`f32_logits.bin`, f32 little
/// endian, rows of `vocab`).
pub fn run(
    ctx: &Context,
    tokens: usize,
    model: Option<PathBuf>,
    check: bool,
    dump: Option<&Path>,
) -> Result<SampleReport> {
    anyhow::ensure!(tokens >= 2, "--n must be at least 2 tokens");
    let path = match model {
        Some(p) => p,
        None => fetch_smollm2(&ctx.paths.cache_dir.join("models"))
            .context("fetching SmolLM2 (pass --model FILE.gguf to use a local copy)")?,
    };
    // A forced kernel level the CPU lacks fails here, before the model loads.
    CpuLevel::selected()?;
    let mut local = LocalModel::load(&path, &Device::Cpu)
        .with_context(|| format!("loading {}", path.display()))?;
    let before = Snapshot::now();
    let bench = bench_sample(&mut local, tokens, BATCH, 2)?;
    let kernels = KernelReport::since(&before)?;
    if !check {
        return Ok(SampleReport {
            bench,
            kernels,
            check: None,
        });
    }
    let sequences = check_sequences(&local, &bench)?;
    drop(local);
    let (report, exact) = check_numerics(&path, &sequences)
        .with_context(|| format!("checking the numerics of {}", path.display()))?;
    if let Some(dir) = dump {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let meta = serde_json::json!({
            "model": path,
            "vocab": exact.vocab,
            "sequences": sequences,
            "check": report,
        });
        let file = dir.join("check.json");
        std::fs::write(&file, serde_json::to_vec_pretty(&meta)?)
            .with_context(|| format!("writing {}", file.display()))?;
        let bytes: Vec<u8> = exact
            .logits
            .iter()
            .flatten()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        let file = dir.join("f32_logits.bin");
        std::fs::write(&file, bytes).with_context(|| format!("writing {}", file.display()))?;
    }
    Ok(SampleReport {
        bench,
        kernels,
        check: Some(report),
    })
}
