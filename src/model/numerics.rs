//! How close the quantized GGUF runner is to the exact computation on the
//! same weights: teacher-forced on fixed token sequences, the runner's
//! next-token distribution at every position is compared with the one of
//! the f32 model dequantised from the same file (top-1 agreement, KL
//! divergence, largest logit difference). `endless bench sample --check`
//! prints it beside the speed figures; `scripts/bench_llamacpp.sh` measures
//! llama.cpp against the same f32 logits ([`F32Dump`]).
//!
//! Each sequence is run the way sampling runs it: its prompt in one forward
//! pass (the tiled prefill kernels), the rest one token at a time (the
//! decoding kernels), so both paths are measured, and reported apart.

use std::collections::HashMap;
use std::path::Path;

use candle_core::{DType, Device, IndexOp, Tensor};
use candle_nn::VarBuilder;
use serde::Serialize;

use crate::model::error::{LocalError, Result};
use crate::model::models::transformer::Transformer;
use crate::model::quantized::dequant::dequantize_gguf;
use crate::model::quantized::gguf::GgufModel;

/// One teacher-forced sequence: token ids, the first `prompt_len` of which
/// are run at once (as a prompt), the rest one at a time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CheckSequence {
    /// The token ids, prompt first.
    pub ids: Vec<u32>,
    /// How many leading ids form the prompt.
    pub prompt_len: usize,
}

/// Agreement over a set of positions.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Agreement {
    /// Positions compared (each predicts the next token).
    pub positions: usize,
    /// Share of positions where both put the same token first.
    pub top1_agreement: f64,
    /// Mean KL(f32 ‖ quantized) of the next-token distributions, in nats.
    pub mean_kl: f64,
    /// Largest KL at one position, in nats.
    pub max_kl: f64,
    /// Mean over positions of the largest |logit difference|.
    pub mean_max_abs_logit_diff: f64,
    /// Largest |logit difference| anywhere.
    pub max_abs_logit_diff: f64,
}

/// The result of a numerics check.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NumericsCheck {
    /// All positions.
    pub all: Agreement,
    /// Positions whose logits came from a prompt's forward pass.
    pub prefill: Agreement,
    /// Positions decoded one token at a time.
    pub decode: Agreement,
    /// Tokens of each sequence.
    pub sequence_lengths: Vec<usize>,
}

impl std::fmt::Display for NumericsCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "numerics: quantized runner vs the f32 dequantised model, teacher-forced on {} positions ({} sequences)",
            self.all.positions,
            self.sequence_lengths.len()
        )?;
        for (name, a) in [
            ("all", &self.all),
            ("prefill", &self.prefill),
            ("decode", &self.decode),
        ] {
            writeln!(
                f,
                "  {name:<8} {:>4} positions: top-1 agreement {:>6.2}%, mean KL {:.5} nats (max {:.4}), max |Δlogit| {:.3} (mean per position {:.3})",
                a.positions,
                a.top1_agreement * 100.0,
                a.mean_kl,
                a.max_kl,
                a.max_abs_logit_diff,
                a.mean_max_abs_logit_diff
            )?;
        }
        Ok(())
    }
}

/// Running sums of an [`Agreement`].
#[derive(Default)]
struct Tally {
    positions: usize,
    agree: usize,
    kl: f64,
    max_kl: f64,
    diff: f64,
    max_diff: f64,
}

impl Tally {
    fn add(&mut self, exact: &[f32], quantized: &[f32]) {
        let (e, q) = (log_softmax(exact), log_softmax(quantized));
        let kl: f64 = e
            .iter()
            .zip(&q)
            .map(|(le, lq)| {
                if le.is_finite() {
                    le.exp() * (le - lq)
                } else {
                    0.0
                }
            })
            .sum();
        let kl = kl.max(0.0);
        let diff = exact
            .iter()
            .zip(quantized)
            .map(|(a, b)| f64::from((a - b).abs()))
            .fold(0.0, f64::max);
        self.positions += 1;
        self.agree += usize::from(argmax(exact) == argmax(quantized));
        self.kl += kl;
        self.max_kl = self.max_kl.max(kl);
        self.diff += diff;
        self.max_diff = self.max_diff.max(diff);
    }

    fn merge(&mut self, other: &Tally) {
        self.positions += other.positions;
        self.agree += other.agree;
        self.kl += other.kl;
        self.max_kl = self.max_kl.max(other.max_kl);
        self.diff += other.diff;
        self.max_diff = self.max_diff.max(other.max_diff);
    }

    fn agreement(&self) -> Agreement {
        let n = self.positions.max(1) as f64;
        Agreement {
            positions: self.positions,
            top1_agreement: self.agree as f64 / n,
            mean_kl: self.kl / n,
            max_kl: self.max_kl,
            mean_max_abs_logit_diff: self.diff / n,
            max_abs_logit_diff: self.max_diff,
        }
    }
}

/// The index of the largest value (the first of equals).
pub fn argmax(xs: &[f32]) -> usize {
    let mut best = 0;
    for (i, x) in xs.iter().enumerate() {
        if *x > xs[best] {
            best = i;
        }
    }
    best
}

fn log_softmax(xs: &[f32]) -> Vec<f64> {
    let max = xs.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let sum: f64 = xs.iter().map(|x| (f64::from(*x) - max).exp()).sum();
    let log_z = max + sum.ln();
    xs.iter().map(|x| f64::from(*x) - log_z).collect()
}

/// The f32 model's logits at every position of each sequence but the last
/// (`len - 1` rows of `vocab` each), for [`compare`] and for other engines.
#[derive(Debug, Clone, PartialEq)]
pub struct F32Dump {
    /// Vocabulary size: the width of each logits row.
    pub vocab: usize,
    /// Per sequence, row-major `(len - 1, vocab)`.
    pub logits: Vec<Vec<f32>>,
}

/// Dequantise `gguf` to f32 and run each sequence through it in one pass.
pub fn f32_logits(gguf: &Path, sequences: &[CheckSequence]) -> Result<F32Dump> {
    let device = Device::Cpu;
    let dense = dequantize_gguf(gguf, &device)?;
    let tensors: HashMap<String, Tensor> = dense.tensors;
    let vb = VarBuilder::from_tensors(tensors, DType::F32, &device);
    let model = Transformer::new(&dense.config, vb)?;
    let mut logits = Vec::with_capacity(sequences.len());
    let mut vocab = 0;
    for s in sequences {
        check_sequence(s)?;
        let input = Tensor::new(&s.ids[..s.ids.len() - 1], &device)?.unsqueeze(0)?;
        let l = model.logits(&model.hidden_states(&input)?)?.i(0)?;
        vocab = l.dim(1)?;
        logits.push(l.flatten_all()?.to_vec1::<f32>()?);
    }
    Ok(F32Dump { vocab, logits })
}

fn check_sequence(s: &CheckSequence) -> Result<()> {
    if s.ids.len() < 2 || s.prompt_len == 0 || s.prompt_len >= s.ids.len() {
        return Err(LocalError::Generation(format!(
            "a checked sequence needs a prompt of at least 1 token and at least 1 token after it (got {} tokens, prompt {})",
            s.ids.len(),
            s.prompt_len
        )));
    }
    Ok(())
}

/// The quantized runner's logits at the same positions as [`f32_logits`]:
/// each prompt in one pass, then the rest fed one token at a time.
pub fn quantized_logits(gguf: &Path, sequences: &[CheckSequence]) -> Result<F32Dump> {
    let device = Device::Cpu;
    let (model, _) = GgufModel::load(gguf, &device)?;
    let GgufModel::Llama(mut model) = model else {
        return Err(LocalError::Generation(
            "the numerics check runs llama-architecture GGUF files only (this crate's runner)"
                .into(),
        ));
    };
    let mut logits = Vec::with_capacity(sequences.len());
    let mut vocab = 0;
    for s in sequences {
        check_sequence(s)?;
        model.clear_kv_cache();
        let prompt = Tensor::new(&s.ids[..s.prompt_len], &device)?.unsqueeze(0)?;
        let first = model.forward_all(&prompt)?.i(0)?;
        vocab = first.dim(1)?;
        let mut rows = first.flatten_all()?.to_vec1::<f32>()?;
        for &id in &s.ids[s.prompt_len..s.ids.len() - 1] {
            let l = model.forward(&Tensor::new(&[[id]], &device)?)?;
            rows.extend(l.flatten_all()?.to_vec1::<f32>()?);
        }
        logits.push(rows);
    }
    Ok(F32Dump { vocab, logits })
}

/// Compare `quantized` with `exact` position by position; positions before
/// each sequence's `prompt_len` count as prefill, the rest as decode.
pub fn compare(
    sequences: &[CheckSequence],
    exact: &F32Dump,
    quantized: &F32Dump,
) -> Result<NumericsCheck> {
    if exact.vocab != quantized.vocab || exact.logits.len() != quantized.logits.len() {
        return Err(LocalError::Generation(
            "the two engines' logits have different shapes".into(),
        ));
    }
    let v = exact.vocab.max(1);
    let (mut prefill, mut decode) = (Tally::default(), Tally::default());
    for ((s, e), q) in sequences.iter().zip(&exact.logits).zip(&quantized.logits) {
        if e.len() != q.len() {
            return Err(LocalError::Generation(
                "the two engines' logits have different lengths".into(),
            ));
        }
        for (pos, (er, qr)) in e.chunks_exact(v).zip(q.chunks_exact(v)).enumerate() {
            if pos < s.prompt_len {
                prefill.add(er, qr);
            } else {
                decode.add(er, qr);
            }
        }
    }
    let mut all = Tally::default();
    all.merge(&prefill);
    all.merge(&decode);
    Ok(NumericsCheck {
        all: all.agreement(),
        prefill: prefill.agreement(),
        decode: decode.agreement(),
        sequence_lengths: sequences.iter().map(|s| s.ids.len()).collect(),
    })
}

/// Run the whole check on `gguf`: the f32 dequantised model against the
/// quantized runner, teacher-forced on `sequences`. Also returns the f32
/// logits (to measure other engines against).
pub fn check_numerics(
    gguf: &Path,
    sequences: &[CheckSequence],
) -> Result<(NumericsCheck, F32Dump)> {
    let exact = f32_logits(gguf, sequences)?;
    let quantized = quantized_logits(gguf, sequences)?;
    Ok((compare(sequences, &exact, &quantized)?, exact))
}
