//! Training checkpoints: `step-<N>/` directories holding the weights
//! (`model.safetensors`, decoder + value head; for LoRA `adapter.safetensors`,
//! adapters + value head, and `adapter.json` naming the base), the optimizer moments
//! (`optimizer.safetensors`), a separate critic's weights and moments when
//! there is one (`critic.safetensors`, `critic_optimizer.safetensors`), `trainer.json` (step, RNG state, configs), the
//! model's `config.json` and tokenizer files when known, and last
//! `manifest.json` with the size and SHA-256 of every file.
//!
//! A checkpoint is built in a temporary sibling and renamed into place, so it
//! exists whole or not at all; on load, a missing manifest, a size or digest
//! mismatch is refused with the reason, and [`latest`] falls back to the
//! newest checkpoint that verifies.

use super::error::{Result, RlError};
use crate::fsutil::{write_atomic, AtomicDir};
use crate::model::models::adapter::{ADAPTER_SPEC, ADAPTER_WEIGHTS};
use crate::model::ModelConfig;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The manifest file, written last.
pub const MANIFEST: &str = "manifest.json";
/// Weights of the policy.
pub const WEIGHTS: &str = "model.safetensors";
/// Optimizer moments.
pub const OPTIMIZER: &str = "optimizer.safetensors";
/// Step, RNG state and configurations.
pub const TRAINER: &str = "trainer.json";
/// Weights of a separate critic (`critic.*`), when training with one.
pub const CRITIC_WEIGHTS: &str = "critic.safetensors";
/// The separate critic's optimizer moments.
pub const CRITIC_OPTIMIZER: &str = "critic_optimizer.safetensors";

/// The state of a ChaCha8 generator.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RngState {
    /// The 32-byte seed, hex.
    pub seed: String,
    /// The generator's stream number.
    pub stream: u64,
    /// Word position (a u128, as decimal text).
    pub word_pos: String,
}

impl RngState {
    /// Capture a generator's state.
    pub fn capture(rng: &ChaCha8Rng) -> Self {
        Self {
            seed: hex::encode(rng.get_seed()),
            stream: rng.get_stream(),
            word_pos: rng.get_word_pos().to_string(),
        }
    }

    /// Rebuild the generator.
    pub fn restore(&self) -> Option<ChaCha8Rng> {
        use rand::SeedableRng;
        let bytes = hex::decode(&self.seed).ok()?;
        let seed: [u8; 32] = bytes.try_into().ok()?;
        let mut rng = ChaCha8Rng::from_seed(seed);
        rng.set_stream(self.stream);
        rng.set_word_pos(self.word_pos.parse().ok()?);
        Some(rng)
    }
}

/// `trainer.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainerState {
    /// PPO steps completed.
    pub step: u64,
    /// Optimizer updates applied.
    pub optimizer_steps: u64,
    /// Updates the separate critic's optimizer applied (none: no separate critic).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub critic_optimizer_steps: Option<u64>,
    /// The trainer's random generator (rollout sampling seeds).
    pub rng: RngState,
    /// The policy model's architecture.
    pub model: ModelConfig,
    /// The training configuration (opaque here).
    pub train: serde_json::Value,
}

#[derive(Debug, Serialize, Deserialize)]
struct FileEntry {
    bytes: u64,
    sha256: String,
}

/// The directory name of step `step`.
pub fn step_dir_name(step: u64) -> String {
    format!("step-{step:08}")
}

fn sha256_file(path: &Path) -> Result<(u64, String)> {
    let bytes = std::fs::read(path).map_err(|e| RlError::io(path, e))?;
    Ok((bytes.len() as u64, hex::encode(Sha256::digest(&bytes))))
}

/// Write a checkpoint under `root`. `fill` writes the payload files into the
/// directory it is given; `trainer.json` and the manifest are added here.
pub fn save(
    root: &Path,
    state: &TrainerState,
    fill: impl FnOnce(&Path) -> Result<()>,
) -> Result<PathBuf> {
    let target = root.join(step_dir_name(state.step));
    if target.exists() {
        std::fs::remove_dir_all(&target).map_err(|e| RlError::io(&target, e))?;
    }
    let dir = AtomicDir::new(&target).map_err(|e| RlError::io(&target, e))?;
    fill(dir.path())?;
    let tj = dir.path().join(TRAINER);
    let text = serde_json::to_string_pretty(state).unwrap_or_default();
    write_atomic(&tj, text.as_bytes()).map_err(|e| RlError::io(&tj, e))?;
    let mut files = BTreeMap::new();
    for entry in std::fs::read_dir(dir.path()).map_err(|e| RlError::io(dir.path(), e))? {
        let entry = entry.map_err(|e| RlError::io(dir.path(), e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name == MANIFEST || !entry.path().is_file() {
            continue;
        }
        let (bytes, sha256) = sha256_file(&entry.path())?;
        files.insert(name, FileEntry { bytes, sha256 });
    }
    let mf = dir.path().join(MANIFEST);
    let text = serde_json::to_string_pretty(&files).unwrap_or_default();
    write_atomic(&mf, text.as_bytes()).map_err(|e| RlError::io(&mf, e))?;
    dir.commit().map_err(|e| RlError::io(&target, e))
}

/// Check a checkpoint directory against its manifest and read `trainer.json`.
pub fn verify(dir: &Path) -> Result<TrainerState> {
    let mf = dir.join(MANIFEST);
    let text = std::fs::read_to_string(&mf).map_err(|e| {
        RlError::ckpt(
            dir,
            format!("no readable {MANIFEST} ({e}): incomplete checkpoint"),
        )
    })?;
    let files: BTreeMap<String, FileEntry> = serde_json::from_str(&text)
        .map_err(|e| RlError::ckpt(dir, format!("{MANIFEST} is corrupt: {e}")))?;
    let weights: &[&str] = if files.contains_key(ADAPTER_SPEC) {
        &[ADAPTER_WEIGHTS]
    } else {
        &[WEIGHTS]
    };
    for required in weights.iter().chain(&[OPTIMIZER, TRAINER]) {
        if !files.contains_key(*required) {
            return Err(RlError::ckpt(
                dir,
                format!("{MANIFEST} does not list {required}"),
            ));
        }
    }
    for (name, want) in &files {
        let p = dir.join(name);
        let len = std::fs::metadata(&p)
            .map_err(|e| RlError::ckpt(dir, format!("{name}: {e}")))?
            .len();
        if len != want.bytes {
            return Err(RlError::ckpt(
                dir,
                format!(
                    "{name} is truncated or altered: {len} bytes, manifest says {}",
                    want.bytes
                ),
            ));
        }
        let (_, sha) = sha256_file(&p)?;
        if sha != want.sha256 {
            return Err(RlError::ckpt(
                dir,
                format!("{name} is corrupt: SHA-256 mismatch"),
            ));
        }
    }
    let tj = dir.join(TRAINER);
    let text = std::fs::read_to_string(&tj).map_err(|e| RlError::io(&tj, e))?;
    serde_json::from_str(&text).map_err(|e| RlError::ckpt(dir, format!("{TRAINER}: {e}")))
}

/// A checkpoint that did not verify, and why.
#[derive(Debug, Clone)]
pub struct Skipped {
    /// The checkpoint directory.
    pub dir: PathBuf,
    /// Why it did not verify.
    pub reason: String,
}

/// A verified checkpoint directory and its state.
pub type Found = (PathBuf, TrainerState);

/// The newest checkpoint under `root` that verifies, with the ones skipped
/// (newer but broken). `None` when there is none.
pub fn latest(root: &Path) -> Result<(Option<Found>, Vec<Skipped>)> {
    let mut dirs: Vec<(u64, PathBuf)> = match std::fs::read_dir(root) {
        Ok(rd) => rd
            .filter_map(|e| e.ok())
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                let n = name.strip_prefix("step-")?.parse::<u64>().ok()?;
                Some((n, e.path()))
            })
            .collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(RlError::io(root, e)),
    };
    dirs.sort_by_key(|d| std::cmp::Reverse(d.0));
    let mut skipped = Vec::new();
    for (_, dir) in dirs {
        match verify(&dir) {
            Ok(state) => return Ok((Some((dir, state)), skipped)),
            Err(e) => skipped.push(Skipped {
                dir,
                reason: e.to_string(),
            }),
        }
    }
    Ok((None, skipped))
}
