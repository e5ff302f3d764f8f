//! Which hand kernels ran, and on which path: each kernel counts its calls
//! per [`Kernel`] and path ([`CpuLevel`]), and a benchmark takes a
//! [`Snapshot`] before and after to report the kernels of its own run
//! (`endless bench sample --json`, `endless bench ppo --json`).

use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;

use super::level::CpuLevel;

/// A hand kernel, as reports name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kernel {
    /// `Q4_1` weights times one `Q8_1` activation row (decoding one sequence).
    Q41Row,
    /// `Q4_1` weights times a tile of `Q8_1` activation rows (prompts, batches).
    Q41Tile,
    /// `Q8_0` weights times one `Q8_1` activation row.
    Q80Row,
    /// `Q8_0` weights times a tile of `Q8_1` activation rows.
    Q80Tile,
    /// `Q8_0` weights times f32 activations (the output layer's top logits).
    Q80F32,
    /// f32 rows times a weight's transpose, a few rows (decoding steps).
    FewRows,
    /// Attention of one query per sequence over the cache (decoding steps).
    DecodeAttention,
    /// Causal attention with rope, forward and backward (training, prompts).
    CausalAttention,
    /// The frozen-weight (and LoRA) matmul of training.
    FrozenMatmul,
    /// Causal softmax, forward and backward.
    CausalSoftmax,
    /// RMS norm, forward and backward.
    RmsNorm,
    /// SwiGLU, forward and backward.
    SwiGlu,
    /// Log-softmax of the picked token and entropy, forward and backward.
    LogSoftmaxPick,
    /// Rope, forward and backward.
    Rope,
}

impl Kernel {
    const ALL: [Kernel; 14] = [
        Kernel::Q41Row,
        Kernel::Q41Tile,
        Kernel::Q80Row,
        Kernel::Q80Tile,
        Kernel::Q80F32,
        Kernel::FewRows,
        Kernel::DecodeAttention,
        Kernel::CausalAttention,
        Kernel::FrozenMatmul,
        Kernel::CausalSoftmax,
        Kernel::RmsNorm,
        Kernel::SwiGlu,
        Kernel::LogSoftmaxPick,
        Kernel::Rope,
    ];

    /// The kernel's name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Kernel::Q41Row => "q4_1·q8_1 row",
            Kernel::Q41Tile => "q4_1·q8_1 tile",
            Kernel::Q80Row => "q8_0·q8_1 row",
            Kernel::Q80Tile => "q8_0·q8_1 tile",
            Kernel::Q80F32 => "q8_0·f32 top logits",
            Kernel::FewRows => "few-rows f32 matmul",
            Kernel::DecodeAttention => "decode attention",
            Kernel::CausalAttention => "causal attention",
            Kernel::FrozenMatmul => "frozen matmul",
            Kernel::CausalSoftmax => "causal softmax",
            Kernel::RmsNorm => "rms norm",
            Kernel::SwiGlu => "swiglu",
            Kernel::LogSoftmaxPick => "log-softmax pick",
            Kernel::Rope => "rope",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

const LEVELS: usize = CpuLevel::ALL.len();
const SLOTS: usize = Kernel::ALL.len() * LEVELS;

static CALLS: [AtomicU64; SLOTS] = [const { AtomicU64::new(0) }; SLOTS];

/// Count one call of `kernel` on the `path` it took.
pub(crate) fn record(kernel: Kernel, path: CpuLevel) {
    CALLS[kernel.index() * LEVELS + path as usize].fetch_add(1, Ordering::Relaxed);
}

/// The call counts of every kernel and path so far in this process.
#[derive(Clone, Debug)]
pub struct Snapshot([u64; SLOTS]);

impl Snapshot {
    /// The counts now.
    pub fn now() -> Self {
        Self(std::array::from_fn(|i| CALLS[i].load(Ordering::Relaxed)))
    }

    /// The kernels called since `self`, with their path and calls, in
    /// [`Kernel`] order. Calls from other threads of the process over the
    /// same time are counted too.
    pub fn ran_since(&self) -> Vec<KernelRun> {
        let now = Self::now();
        let mut out = Vec::new();
        for kernel in Kernel::ALL {
            for path in CpuLevel::ALL {
                let i = kernel.index() * LEVELS + path as usize;
                let calls = now.0[i].saturating_sub(self.0[i]);
                if calls > 0 {
                    out.push(KernelRun {
                        name: format!("{} {}", kernel.name(), path.name()),
                        path,
                        calls,
                    });
                }
            }
        }
        out
    }
}

/// One kernel that ran, on one path.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct KernelRun {
    /// The kernel and its path, e.g. `q4_1·q8_1 row avx512-vnni`.
    pub name: String,
    /// The path it took.
    pub path: CpuLevel,
    /// Calls over the measured run.
    pub calls: u64,
}

/// The kernels of a benchmark run: the level chosen, the best the processor
/// has, and every hand kernel that ran with its path.
#[derive(Clone, Debug, Serialize)]
pub struct KernelReport {
    /// The level the hand kernels used ([`super::level::ENV_VAR`], else the
    /// best detected).
    pub level: CpuLevel,
    /// The best level this processor runs.
    pub detected: CpuLevel,
    /// The kernels that ran over the benchmark, with their paths.
    pub ran: Vec<KernelRun>,
}

impl KernelReport {
    /// The kernels run since `since`.
    pub fn since(since: &Snapshot) -> std::result::Result<Self, super::level::KernelsError> {
        Ok(Self {
            level: CpuLevel::selected()?,
            detected: CpuLevel::detect(),
            ran: since.ran_since(),
        })
    }
}

impl std::fmt::Display for KernelReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "kernels: {} (CPU runs {})", self.level, self.detected)?;
        if !self.ran.is_empty() {
            let names: Vec<&str> = self.ran.iter().map(|r| r.name.as_str()).collect();
            write!(f, ": {}", names.join(", "))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recorded_call_is_named_with_its_path() {
        let before = Snapshot::now();
        record(Kernel::Rope, CpuLevel::Portable);
        record(Kernel::Rope, CpuLevel::Portable);
        let ran = before.ran_since();
        let rope = ran
            .iter()
            .find(|r| r.name == "rope portable")
            .expect("rope recorded");
        // Other tests may run rope at the same time: at least ours.
        assert!(rope.calls >= 2, "{ran:?}");
        assert_eq!(rope.path, CpuLevel::Portable);
    }
}
