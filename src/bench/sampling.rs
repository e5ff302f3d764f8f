//! `endless bench sample`: sampling throughput of a local model, batch 1 and
//! batched, on a fixed chat prompt with greedy decoding (the settings
//! `scripts/bench_llamacpp.sh` gives llama.cpp, for a side-by-side table),
//! and the token sequences of its `--check`.

use crate::model::error::Result;
use crate::model::generation::local_model::{BatchOptions, GenTimings, LocalModel};
use crate::model::generation::sampling::{Sampler, SamplingConfig};
use crate::model::text::chat_template::TemplateMessage;
use serde::Serialize;

/// The benchmark's user message (the chat template wraps it).
pub const BENCH_PROMPT: &str =
    "Write a short story about a robot who learns to paint. Describe its first painting.";

/// Throughput of one configuration.
#[derive(Debug, Clone, Serialize)]
pub struct Throughput {
    /// Sequences sampled together.
    pub batch: usize,
    /// Tokens sampled per sequence.
    pub tokens_per_sequence: usize,
    /// Prompt tokens per second (the prompt run once, batch 1).
    pub prefill_tok_s: f64,
    /// Tokens per second after the prompt, all sequences together.
    pub decode_tok_s: f64,
    /// Milliseconds per decoding step (one forward pass for the whole batch, plus sampling).
    pub ms_per_step: f64,
}

impl Throughput {
    fn from_timings(t: &GenTimings, tokens_per_sequence: usize) -> Self {
        let decode = t.decode.as_secs_f64();
        let steps = t.decode_steps.max(1) as f64;
        Self {
            batch: t.batch,
            tokens_per_sequence,
            prefill_tok_s: t.prefill_tokens as f64 / t.prefill.as_secs_f64().max(1e-9),
            // The first token of each sequence comes from the prompt's logits.
            decode_tok_s: t.sampled_tokens.saturating_sub(t.batch) as f64 / decode.max(1e-9),
            ms_per_step: decode * 1000.0 / steps,
        }
    }
}

/// The report of `endless bench sample`.
#[derive(Debug, Clone, Serialize)]
pub struct SampleBench {
    /// Model name (file stem).
    pub model: String,
    /// Compute threads candle uses (`RAYON_NUM_THREADS` / `CANDLE_NUM_THREADS`, else the cores).
    pub threads: usize,
    /// `release` or `debug` (the crate's own code is unoptimised in debug builds).
    pub profile: &'static str,
    /// The user message and its chat-templated token ids.
    pub prompt: String,
    /// `prompt` after the chat template, tokenized.
    pub prompt_ids: Vec<u32>,
    /// Greedy tokens of the batch-1 run (to check another engine decodes the same).
    pub output_ids: Vec<u32>,
    /// Batch 1: the best of `repeats` runs.
    pub single: Throughput,
    /// Batched: the best of `repeats` runs.
    pub batched: Throughput,
    /// Sequences of the batched run whose greedy tokens equal the batch-1 run's.
    pub batched_equal_single: usize,
}

impl std::fmt::Display for SampleBench {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "{}: greedy sampling, {}-token prompt, {} threads, {} build",
            self.model,
            self.prompt_ids.len(),
            self.threads,
            self.profile
        )?;
        writeln!(
            f,
            "  prefill:  {:>8.1} tok/s (batch 1)",
            self.single.prefill_tok_s
        )?;
        writeln!(
            f,
            "  batch  1: {:>8.1} tok/s ({:.2} ms/step, {} tokens)",
            self.single.decode_tok_s, self.single.ms_per_step, self.single.tokens_per_sequence
        )?;
        write!(
            f,
            "  batch {:>2}: {:>8.1} tok/s aggregate ({:.2} ms/step, {} tokens each; {}/{} sequences equal batch 1)",
            self.batched.batch,
            self.batched.decode_tok_s,
            self.batched.ms_per_step,
            self.batched.tokens_per_sequence,
            self.batched_equal_single,
            self.batched.batch
        )
    }
}

/// The fixed prompt as token ids (chat template applied).
pub fn bench_prompt(model: &LocalModel) -> Result<Vec<u32>> {
    model.tokenizer().encode_chat(&[TemplateMessage {
        role: "user".into(),
        content: BENCH_PROMPT.into(),
    }])
}

/// Greedy-sample `tokens` tokens (end-of-sequence ignored) at batch 1 and at
/// batch `batch`, keeping the fastest of `repeats` runs of each.
pub fn bench_sample(
    model: &mut LocalModel,
    tokens: usize,
    batch: usize,
    repeats: usize,
) -> Result<SampleBench> {
    let prompt = bench_prompt(model)?;
    let greedy = SamplingConfig {
        temperature: 0.0,
        top_p: 1.0,
        max_tokens: tokens,
    };
    let opts = BatchOptions { ignore_eos: true };
    let run = |model: &mut LocalModel, n: usize| {
        let mut samplers: Vec<Sampler> = (0..n).map(|i| Sampler::new(greedy, i as u64)).collect();
        model.generate_batch_with(&prompt, &mut samplers, opts)
    };
    // Warm-up: first-touch of the weights, thread pool start.
    {
        let mut s = [Sampler::new(
            SamplingConfig {
                max_tokens: 4,
                ..greedy
            },
            0,
        )];
        model.generate_batch_with(&prompt, &mut s, opts)?;
    }
    let best = |a: Option<GenTimings>, b: GenTimings| match a {
        Some(a) if a.decode <= b.decode => Some(GenTimings {
            prefill: a.prefill.min(b.prefill),
            ..a
        }),
        Some(a) => Some(GenTimings {
            prefill: a.prefill.min(b.prefill),
            ..b
        }),
        None => Some(b),
    };
    let mut single = None;
    let mut output_ids = Vec::new();
    for _ in 0..repeats.max(1) {
        let (g, t) = run(model, 1)?;
        output_ids = g
            .into_iter()
            .next()
            .map(|g| g.token_ids)
            .unwrap_or_default();
        single = best(single, t);
    }
    let mut batched = None;
    let mut equal = 0;
    for _ in 0..repeats.max(1) {
        let (g, t) = run(model, batch)?;
        equal = g.iter().filter(|g| g.token_ids == output_ids).count();
        batched = best(batched, t);
    }
    let (single, batched) = (single.unwrap_or_default(), batched.unwrap_or_default());
    Ok(SampleBench {
        model: model.name().to_string(),
        threads: candle_core::utils::get_num_threads(),
        profile: if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        },
        prompt: BENCH_PROMPT.to_string(),
        prompt_ids: prompt.clone(),
        output_ids,
        single: Throughput::from_timings(&single, tokens),
        batched: Throughput::from_timings(&batched, tokens),
        batched_equal_single: equal,
    })
}

/// A terminal-agent exchange, the second sequence of the numerics check
/// (the kind of text this project samples).
pub const CHECK_TRANSCRIPT: &[(&str, &str)] = &[
    (
        "system",
        "You work in a Linux terminal. Think inside <think></think> tags, then give one shell command inside <command></command> tags, or <action>done</action> when the task is complete.",
    ),
    (
        "user",
        "Count the lines of /home/user/data/access.log that contain the word ERROR and write the number to /home/user/errors.txt.",
    ),
    (
        "assistant",
        "<think>I should look at the log first to see its format.</think>\n<command>head -n 5 /home/user/data/access.log</command>",
    ),
    (
        "user",
        "Command executed successfully. Output: 2024-01-01 10:00:01 INFO started\n2024-01-01 10:00:02 ERROR disk full\n2024-01-01 10:00:03 INFO retry\n2024-01-01 10:00:04 ERROR disk full\n2024-01-01 10:00:05 INFO done\n\n(exit_code=0)",
    ),
    (
        "assistant",
        "<think>Each error line has the word ERROR; grep -c counts them.</think>\n<command>grep -c ERROR /home/user/data/access.log > /home/user/errors.txt && cat /home/user/errors.txt</command>",
    ),
];

/// The token sequences of `endless bench sample --check`: the benchmark's
/// prompt followed by the greedy tokens the runner sampled (prompt run at
/// once, the rest fed one at a time), and [`CHECK_TRANSCRIPT`] under the
/// chat template (its first half as the prompt).
pub fn check_sequences(
    model: &LocalModel,
    bench: &SampleBench,
) -> Result<Vec<crate::model::numerics::CheckSequence>> {
    use crate::model::numerics::CheckSequence;
    let mut out = Vec::new();
    let mut ids = bench.prompt_ids.clone();
    ids.extend(&bench.output_ids);
    if ids.len() > bench.prompt_ids.len() && !bench.prompt_ids.is_empty() {
        out.push(CheckSequence {
            ids,
            prompt_len: bench.prompt_ids.len(),
        });
    }
    let messages: Vec<TemplateMessage> = CHECK_TRANSCRIPT
        .iter()
        .map(|(role, content)| TemplateMessage {
            role: (*role).into(),
            content: (*content).into(),
        })
        .collect();
    let ids = model.tokenizer().encode_chat(&messages)?;
    if ids.len() >= 4 {
        let prompt_len = ids.len() / 2;
        out.push(CheckSequence { ids, prompt_len });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::tests::{smollm2_gguf, write_q4_1_llama};
    use candle_core::Device;

    /// Sampling a Q4_1 model runs the 8-bit kernels on the selected level's
    /// path: one row while decoding one sequence, tiles for the prompt and for
    /// batches; the benchmark's report can name them.
    #[test]
    fn sampling_a_q4_1_model_runs_the_selected_kernels() {
        use crate::model::kernels::level::CpuLevel;
        use crate::model::kernels::ran::Snapshot;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tiny.Q4_1.gguf");
        write_q4_1_llama(&path, 3);
        let mut model = LocalModel::load(&path, &Device::Cpu).unwrap();
        let before = Snapshot::now();
        bench_sample(&mut model, 4, 2, 1).unwrap();
        let level = CpuLevel::selected().unwrap();
        let ran: Vec<String> = before.ran_since().into_iter().map(|k| k.name).collect();
        // Tiles run the AVX2 kernel on AVX-512 without VNNI (see `q4_1.rs`).
        let tile_level = crate::model::kernels::q4_1::tile_level(level);
        for name in [
            format!("q4_1·q8_1 row {level}"),
            format!("q4_1·q8_1 tile {tile_level}"),
        ] {
            assert!(ran.contains(&name), "{name} not in {ran:?}");
        }
    }

    /// The figures behind the goal of issue 15: SmolLM2's Q4_1 runner against
    /// its f32 dequantisation (skipped without the fetched model). Minutes in a
    /// debug build: `cargo test --lib smollm2_quantized -- --ignored --nocapture`.
    #[test]
    #[ignore = "minutes in a debug build; needs the fetched SmolLM2 GGUF"]
    fn smollm2_quantized_runner_agrees_with_its_f32_model() {
        use crate::model::numerics::check_numerics;
        let Some(path) = smollm2_gguf() else {
            return;
        };
        let mut model = LocalModel::load(&path, &Device::Cpu).unwrap();
        let bench = bench_sample(&mut model, 48, 1, 1).unwrap();
        let sequences = check_sequences(&model, &bench).unwrap();
        let (report, _) = check_numerics(&path, &sequences).unwrap();
        eprintln!("{report}");
        assert!(report.all.positions >= 150, "{report}");
        assert!(report.all.top1_agreement >= 0.9, "{report}");
    }

    /// What ggml's f16 activation scales (llama.cpp's Q4_1 x Q8_1 arithmetic)
    /// cost against this runner's f32 scales, on SmolLM2 (ignored: minutes in a
    /// debug build; needs the fetched model).
    #[test]
    #[ignore = "minutes in a debug build; needs the fetched SmolLM2 GGUF"]
    fn smollm2_f32_activation_scales_against_ggmls_f16_ones() {
        use crate::model::kernels::q4_1::GGML_F16_SCALES;
        use crate::model::numerics::{compare, f32_logits, quantized_logits, CheckSequence};
        use std::sync::atomic::Ordering;
        let Some(path) = smollm2_gguf() else {
            return;
        };
        let model = LocalModel::load(&path, &Device::Cpu).unwrap();
        let messages: Vec<TemplateMessage> = CHECK_TRANSCRIPT
            .iter()
            .map(|(r, c)| TemplateMessage {
                role: (*r).into(),
                content: (*c).into(),
            })
            .collect();
        let ids = model.tokenizer().encode_chat(&messages).unwrap();
        let sequences = vec![CheckSequence {
            prompt_len: ids.len() / 2,
            ids,
        }];
        let exact = f32_logits(&path, &sequences).unwrap();
        let ours = compare(
            &sequences,
            &exact,
            &quantized_logits(&path, &sequences).unwrap(),
        )
        .unwrap();
        GGML_F16_SCALES.store(true, Ordering::Relaxed);
        let ggml = quantized_logits(&path, &sequences);
        GGML_F16_SCALES.store(false, Ordering::Relaxed);
        let ggml = compare(&sequences, &exact, &ggml.unwrap()).unwrap();
        eprintln!("f32 activation scales (ours):\n{ours}\nf16 activation scales (ggml's):\n{ggml}");
        // The same positions all decoded one token at a time (split as above):
        // are the prompt positions harder, or is the prefill path worse?
        let one_by_one = vec![CheckSequence {
            prompt_len: 1,
            ids: sequences[0].ids.clone(),
        }];
        let decoded = quantized_logits(&path, &one_by_one).unwrap();
        let decoded = compare(&sequences, &exact, &decoded).unwrap();
        eprintln!("every position decoded one at a time (rows split as above):\n{decoded}");
    }
}
