//! Tests of the local models on tiny in-process models (no downloads).

use super::*;
use crate::model::models::gguf_llama;
use crate::model::models::tiny::{self, tiny_config, train_tokenizer, write_model_dir};
use crate::model::quantized::gguf;
use crate::model::text::chat_template;
use candle_core::{DType, Device, IndexOp, Tensor, D};
use candle_nn::{VarBuilder, VarMap};

pub(crate) const CORPUS: &[&str] = &[
    "ls -la /home/user",
    "cat notes.txt | grep error",
    "mkdir -p backup && cp *.log backup/",
    "find . -name '*.py' | wc -l",
    "echo done > status.txt",
    "The quick brown fox jumps over the lazy dog.",
];

fn tokenizer() -> tokenizers::Tokenizer {
    train_tokenizer(CORPUS.iter(), 300).unwrap()
}

fn model(arch: Arch, seed: u64) -> (VarMap, Transformer) {
    let cfg = tiny_config(arch, 300);
    let varmap = VarMap::new();
    let vb = VarBuilder::from_varmap(&varmap, DType::F32, &Device::Cpu);
    let m = Transformer::new(&cfg, vb).unwrap();
    tiny::reinit_seeded(&varmap, seed, 0.3).unwrap();
    (varmap, m)
}

fn msgs() -> Vec<TemplateMessage> {
    vec![TemplateMessage {
        role: "user".into(),
        content: "list the files".into(),
    }]
}

#[test]
fn tiny_tokenizer_round_trips_and_has_chatml_specials() {
    let t = tokenizer();
    assert!(t.get_vocab_size(true) <= 300);
    assert_eq!(t.token_to_id("<|im_end|>"), Some(2));
    let enc = t
        .encode("<|im_start|>user\nls -la<|im_end|>", false)
        .unwrap();
    assert_eq!(enc.get_ids()[0], 1);
    assert_eq!(
        t.decode(enc.get_ids(), false).unwrap(),
        "<|im_start|>user\nls -la<|im_end|>"
    );
}

#[test]
fn sampling_path_matches_training_path() {
    for arch in [Arch::Qwen2, Arch::Qwen3, Arch::Llama] {
        let (_vm, m) = model(arch, 1);
        let ids: Vec<u32> = (0..12).map(|i| (i * 37 % 290) as u32 + 3).collect();
        let input = Tensor::new(ids.as_slice(), &Device::Cpu)
            .unwrap()
            .unsqueeze(0)
            .unwrap();
        let full = m.logits(&m.hidden_states(&input).unwrap()).unwrap();
        // Prefill 5 tokens, then one at a time.
        let mut cache = m.new_cache();
        let mut parts = vec![m
            .logits(
                &m.forward_cached(&input.i((.., 0..5)).unwrap(), &mut cache)
                    .unwrap(),
            )
            .unwrap()];
        for p in 5..12 {
            let h = m
                .forward_cached(&input.i((.., p..p + 1)).unwrap(), &mut cache)
                .unwrap();
            parts.push(m.logits(&h).unwrap());
        }
        assert_eq!(cache.len(), 12);
        let inc = Tensor::cat(&parts, 1).unwrap();
        let diff = (full - inc).unwrap().abs().unwrap().max_all().unwrap();
        let diff = diff.to_scalar::<f32>().unwrap();
        assert!(diff < 1e-4, "{arch:?}: max |train - sample| = {diff}");
    }
}

/// Logits of each sequence's positions from `from` on, each run one position
/// at a time through its cache, the sequences taking turns.
fn step_logits(m: &Transformer, runs: &mut [(&mut KvCache, &Tensor)], from: usize) -> Vec<Tensor> {
    let mut parts = vec![Vec::new(); runs.len()];
    for p in from..runs[0].1.dim(1).unwrap() {
        for ((cache, ids), out) in runs.iter_mut().zip(&mut parts) {
            let h = m.forward_cached(&ids.i((.., p..p + 1)).unwrap(), cache);
            out.push(m.logits(&h.unwrap()).unwrap());
        }
    }
    parts.iter().map(|p| Tensor::cat(p, 1).unwrap()).collect()
}

/// Largest absolute difference between the elements of `a` and `b`.
pub(crate) fn max_diff(a: &Tensor, b: &Tensor) -> f32 {
    (a - b)
        .unwrap()
        .abs()
        .unwrap()
        .max_all()
        .unwrap()
        .to_scalar::<f32>()
        .unwrap()
}

/// The cache grows by `reserve` positions: growing at every step (1), at
/// some steps (3) or never (256) gives the logits of the whole-sequence pass;
/// a clone and its original then go different ways without writing into each
/// other's positions (copy on write), and a truncated cache is overwritten.
#[test]
fn kv_cache_reserve_clones_and_truncation_keep_every_position() {
    let (_vm, mut m) = model(Arch::Qwen2, 3);
    let ids: Vec<u32> = (0..20).map(|i| (i * 37 % 290) as u32 + 3).collect();
    let other: Vec<u32> = ids.iter().map(|i| (i * 5) % 290 + 3).collect();
    let tensor = |v: &[u32]| Tensor::new(v, &Device::Cpu).unwrap().unsqueeze(0).unwrap();
    let (input, branch) = (tensor(&ids), tensor(&[&ids[..8], &other[8..]].concat()));
    let full = m.logits(&m.hidden_states(&input).unwrap()).unwrap();
    let full_branch = m.logits(&m.hidden_states(&branch).unwrap()).unwrap();
    for reserve in [1, 3, 256] {
        m.set_kv_reserve(reserve);
        let mut cache = m.new_cache();
        m.forward_cached(&input.i((.., ..8)).unwrap(), &mut cache)
            .unwrap();
        let mut copy = cache.clone();
        let ab = step_logits(&m, &mut [(&mut cache, &input), (&mut copy, &branch)], 8);
        assert!(
            max_diff(&ab[0], &full.i((.., 8..)).unwrap()) < 1e-4,
            "reserve {reserve}"
        );
        assert!(
            max_diff(&ab[1], &full_branch.i((.., 8..)).unwrap()) < 1e-4,
            "reserve {reserve}"
        );
        // Cut back to the shared prefix and take the other branch in place.
        cache.truncate(8).unwrap();
        let c = step_logits(&m, &mut [(&mut cache, &branch)], 8);
        assert!(
            max_diff(&c[0], &full_branch.i((.., 8..)).unwrap()) < 1e-4,
            "reserve {reserve}"
        );
    }
}

#[test]
fn sampling_settings_are_counts_or_a_named_error() {
    use crate::model::models::transformer::parse_setting;
    let reserve = |v| parse_setting("ENDLESS_KV_RESERVE", v, KV_RESERVE, 1..=usize::MAX);
    assert_eq!(reserve(None).unwrap(), KV_RESERVE);
    assert_eq!(reserve(Some(" 1 ")).unwrap(), 1);
    assert_eq!(
        parse_setting("ENDLESS_DECODE_KERNELS", Some("0"), 1, 0..=1).unwrap(),
        0
    );
    assert!(parse_setting("ENDLESS_DECODE_KERNELS", Some("2"), 1, 0..=1).is_err());
    for bad in ["0", "-3", "lots", ""] {
        let e = reserve(Some(bad)).unwrap_err().to_string();
        assert!(
            e.contains("ENDLESS_KV_RESERVE") && e.contains(&format!("{bad:?}")),
            "{e}"
        );
    }
}

#[test]
fn every_weight_gets_a_gradient() {
    for arch in [Arch::Qwen2, Arch::Qwen3, Arch::Llama] {
        let (vm, m) = model(arch, 2);
        let ids = Tensor::new(
            &[[5u32, 9, 40, 77, 3, 120, 8], [6, 6, 200, 31, 2, 0, 0]],
            &Device::Cpu,
        )
        .unwrap();
        let logits = m.logits(&m.hidden_states(&ids).unwrap()).unwrap();
        let lp = candle_nn::ops::log_softmax(&logits, D::Minus1).unwrap();
        let target = ids
            .i((.., 1..))
            .unwrap()
            .contiguous()
            .unwrap()
            .unsqueeze(2)
            .unwrap();
        let picked = lp
            .i((.., ..6, ..))
            .unwrap()
            .contiguous()
            .unwrap()
            .gather(&target, 2)
            .unwrap();
        let loss = picked.sum_all().unwrap().neg().unwrap();
        let grads = loss.backward().unwrap();
        let data = vm.data().lock().unwrap();
        assert!(data.len() >= 20, "{arch:?}: {} vars", data.len());
        for (name, var) in data.iter() {
            let g = grads
                .get(var.as_tensor())
                .unwrap_or_else(|| panic!("{arch:?}: no gradient for {name}"));
            let norm = g
                .sqr()
                .unwrap()
                .sum_all()
                .unwrap()
                .to_scalar::<f32>()
                .unwrap();
            assert!(
                norm.is_finite() && norm > 0.0,
                "{arch:?}: {name} grad norm {norm}"
            );
        }
    }
}

#[test]
fn model_dir_loads_and_generates_with_logprobs() {
    let dir = tempfile::tempdir().unwrap();
    let tok = tokenizer();
    for (i, arch) in [Arch::Qwen2, Arch::Llama].into_iter().enumerate() {
        let d = dir.path().join(format!("m{i}"));
        write_model_dir(&d, &tiny_config(arch, 300), &tok, 7).unwrap();
        let mut lm = LocalModel::load(&d, &Device::Cpu).unwrap();
        let params = SamplingConfig {
            temperature: 1.0,
            top_p: 0.95,
            max_tokens: 10,
        };
        let a = lm.generate(&msgs(), &params, 42).unwrap();
        let b = lm.generate(&msgs(), &params, 42).unwrap();
        assert_eq!(a.token_ids, b.token_ids, "same seed, same reply");
        assert_eq!(a.token_ids.len(), a.logprobs.len());
        assert!(!a.token_ids.is_empty() && a.token_ids.len() <= 10);
        assert!(a.logprobs.iter().all(|l| *l <= 0.0 && l.is_finite()));
        let prompt = lm.tokenizer().decode(&a.prompt_ids).unwrap();
        assert!(prompt.contains("list the files"), "{prompt}");
        // Log-probs recorded at sampling time equal a fresh full forward pass.
        let Backend::Dense(m) = lm.backend() else {
            panic!("dense expected")
        };
        let all: Vec<u32> = a.prompt_ids.iter().chain(&a.token_ids).copied().collect();
        let x = Tensor::new(all.as_slice(), &Device::Cpu)
            .unwrap()
            .unsqueeze(0)
            .unwrap();
        let lp = candle_nn::ops::log_softmax(
            &m.logits(&m.hidden_states(&x).unwrap()).unwrap(),
            D::Minus1,
        )
        .unwrap()
        .squeeze(0)
        .unwrap();
        let p = a.prompt_ids.len();
        for (k, (&t, &l)) in a.token_ids.iter().zip(&a.logprobs).enumerate() {
            let v = lp
                .i((p + k - 1, t as usize))
                .unwrap()
                .to_scalar::<f32>()
                .unwrap();
            assert!((v - l).abs() < 1e-4, "token {k}: {v} vs {l}");
        }
    }
}

#[test]
fn broken_model_dirs_are_refused_with_the_file_named() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("m");
    write_model_dir(&d, &tiny_config(Arch::Qwen2, 300), &tokenizer(), 1).unwrap();
    // Truncated weights.
    let w = d.join("model.safetensors");
    let bytes = std::fs::read(&w).unwrap();
    std::fs::write(&w, &bytes[..bytes.len() / 2]).unwrap();
    let e = LocalModel::load(&d, &Device::Cpu).unwrap_err().to_string();
    assert!(e.contains("model.safetensors"), "{e}");
    std::fs::write(&w, &bytes).unwrap();
    // Config says more layers than the weights hold.
    let cfg_path = d.join("config.json");
    let cfg = std::fs::read_to_string(&cfg_path).unwrap();
    std::fs::write(
        &cfg_path,
        cfg.replace("\"num_hidden_layers\": 2", "\"num_hidden_layers\": 3"),
    )
    .unwrap();
    let e = LocalModel::load(&d, &Device::Cpu).unwrap_err().to_string();
    assert!(
        e.contains("model.layers.2.") && e.contains("missing"),
        "{e}"
    );
    std::fs::write(&cfg_path, cfg).unwrap();
    // No tokenizer.
    std::fs::remove_file(d.join("tokenizer.json")).unwrap();
    let e = LocalModel::load(&d, &Device::Cpu).unwrap_err().to_string();
    assert!(e.contains("tokenizer.json"), "{e}");
}

/// GGUF tokenizer metadata of [`tokenizer`] (byte-level BPE, ChatML template).
fn gguf_tokenizer_metadata(
) -> std::collections::HashMap<String, candle_core::quantized::gguf_file::Value> {
    use candle_core::quantized::gguf_file::Value;
    use std::collections::HashMap;
    let t = tokenizer();
    let json: serde_json::Value = serde_json::from_str(&t.to_string(false).unwrap()).unwrap();
    let vocab = json["model"]["vocab"].as_object().unwrap();
    let mut tokens = vec![String::new(); t.get_vocab_size(true)];
    for (k, v) in vocab {
        tokens[v.as_u64().unwrap() as usize] = k.clone();
    }
    for s in tiny::TINY_SPECIAL_TOKENS {
        tokens[t.token_to_id(s).unwrap() as usize] = s.to_string();
    }
    let merges: Vec<Value> = json["model"]["merges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| match m {
            serde_json::Value::String(s) => Value::String(s.clone()),
            serde_json::Value::Array(p) => Value::String(format!(
                "{} {}",
                p[0].as_str().unwrap(),
                p[1].as_str().unwrap()
            )),
            _ => panic!("merge {m}"),
        })
        .collect();
    let types: Vec<Value> = (0..tokens.len())
        .map(|i| Value::I32(if i < 3 { 3 } else { 1 }))
        .collect();
    let mut md = HashMap::new();
    md.insert(
        "tokenizer.ggml.model".to_string(),
        Value::String("gpt2".into()),
    );
    md.insert(
        "tokenizer.ggml.tokens".to_string(),
        Value::Array(tokens.into_iter().map(Value::String).collect()),
    );
    md.insert("tokenizer.ggml.merges".to_string(), Value::Array(merges));
    md.insert("tokenizer.ggml.token_type".to_string(), Value::Array(types));
    md.insert("tokenizer.ggml.eos_token_id".to_string(), Value::U32(2));
    md.insert(
        "tokenizer.chat_template".to_string(),
        Value::String(chat_template::CHATML_TEMPLATE.into()),
    );
    md
}

#[test]
fn gguf_metadata_tokenizer_matches_the_original() {
    use candle_core::quantized::gguf_file::Value;
    let t = tokenizer();
    let mut md = gguf_tokenizer_metadata();
    let ct = gguf::tokenizer_from_gguf(&md, std::path::Path::new("x.gguf")).unwrap();
    let text = "<|im_start|>user\ncat notes.txt | grep error<|im_end|>";
    assert_eq!(
        ct.encode(text).unwrap(),
        t.encode(text, false).unwrap().get_ids()
    );
    assert_eq!(ct.eos_ids(), &[2]);
    md.insert(
        "tokenizer.ggml.model".to_string(),
        Value::String("llama".into()),
    );
    let e = gguf::tokenizer_from_gguf(&md, std::path::Path::new("x.gguf")).unwrap_err();
    assert!(e.to_string().contains("x.gguf") && e.to_string().contains("tokenizer.ggml.model"));
}

/// A tiny random model of each architecture, saved under `dir` and loaded.
fn models_of_each_arch(dir: &std::path::Path, seed: u64) -> Vec<(Arch, LocalModel)> {
    let tok = tokenizer();
    [Arch::Qwen2, Arch::Qwen3, Arch::Llama]
        .into_iter()
        .enumerate()
        .map(|(i, arch)| {
            let d = dir.join(format!("m{i}"));
            write_model_dir(&d, &tiny_config(arch, 300), &tok, seed + i as u64).unwrap();
            (arch, LocalModel::load(&d, &Device::Cpu).unwrap())
        })
        .collect()
}

#[test]
fn batched_sampling_equals_one_sequence_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    for (arch, mut lm) in models_of_each_arch(dir.path(), 11) {
        let prompt = lm.tokenizer().encode_chat(&msgs()).unwrap();
        // Greedy: every sequence of the batch is the single greedy sequence.
        let greedy = SamplingConfig {
            temperature: 0.0,
            top_p: 1.0,
            max_tokens: 12,
        };
        let single = lm
            .generate_ids(&prompt, &mut Sampler::new(greedy, 0))
            .unwrap();
        let batch = lm.generate_batch(&prompt, &greedy, &[0, 1, 2, 3]).unwrap();
        assert_eq!(batch.len(), 4);
        for g in &batch {
            assert_eq!(g.token_ids, single.token_ids, "{arch:?}");
            assert_eq!(g.finish, single.finish);
            for (a, b) in g.logprobs.iter().zip(&single.logprobs) {
                assert!((a - b).abs() < 1e-4, "{arch:?}: {a} vs {b}");
            }
        }
        // Sampling: each sequence follows its own seed, and sequences of
        // different lengths leave the batch without disturbing the others.
        let hot = SamplingConfig {
            temperature: 1.0,
            top_p: 1.0,
            max_tokens: 10,
        };
        let mut samplers: Vec<Sampler> = (0..6)
            .map(|s| {
                Sampler::new(
                    SamplingConfig {
                        max_tokens: [10, 3, 1, 7, 10, 5][s],
                        ..hot
                    },
                    100 + s as u64,
                )
            })
            .collect();
        let (batch, timings) = lm
            .generate_batch_with(&prompt, &mut samplers.clone(), BatchOptions::default())
            .unwrap();
        assert_eq!(timings.batch, 6);
        assert_eq!(
            timings.sampled_tokens,
            batch.iter().map(|g| g.token_ids.len()).sum::<usize>()
        );
        let mut distinct = std::collections::HashSet::new();
        for (g, s) in batch.iter().zip(samplers.iter_mut()) {
            let one = lm.generate_ids(&prompt, s).unwrap();
            assert_eq!(g.token_ids, one.token_ids, "{arch:?}");
            assert_eq!(g.finish, one.finish);
            assert!(g.token_ids.len() <= s.config().max_tokens);
            for (a, b) in g.logprobs.iter().zip(&one.logprobs) {
                assert!((a - b).abs() < 1e-4, "{arch:?}: {a} vs {b}");
            }
            distinct.insert(g.token_ids.clone());
        }
        assert!(distinct.len() > 1, "{arch:?}: seeds should differ");
    }
}

/// Prefixes of `full` of lengths `lens`, each with a sampler at temperature 1
/// with its own reply limit (`max_tokens`) and seed (from `seed` on).
fn prefixes(
    full: &[u32],
    lens: &[usize],
    max_tokens: &[usize],
    seed: u64,
) -> (Vec<Vec<u32>>, Vec<Sampler>) {
    let prompts = lens.iter().map(|&n| full[..n].to_vec()).collect();
    let samplers = max_tokens
        .iter()
        .enumerate()
        .map(|(s, &max_tokens)| {
            let cfg = SamplingConfig {
                temperature: 1.0,
                top_p: 1.0,
                max_tokens,
            };
            Sampler::new(cfg, seed + s as u64)
        })
        .collect();
    (prompts, samplers)
}

#[test]
fn prompts_of_different_lengths_are_sampled_as_one_padded_batch() {
    let dir = tempfile::tempdir().unwrap();
    for (arch, mut lm) in models_of_each_arch(dir.path(), 21) {
        let full = lm.tokenizer().encode_chat(&msgs()).unwrap();
        // Prompts of 4 lengths (one of them twice), each with its own seed
        // and reply limit, including a sequence that samples nothing.
        let (prompts, samplers) = prefixes(
            &full,
            &[full.len(), 3, full.len() / 2, 3, 1],
            &[9, 4, 0, 7, 6],
            300,
        );
        let batch = lm.generate_many(&prompts, &mut samplers.clone()).unwrap();
        assert_eq!(batch.len(), prompts.len());
        for ((g, p), mut s) in batch.iter().zip(&prompts).zip(samplers) {
            let one = lm.generate_ids(p, &mut s).unwrap();
            assert_eq!(&g.prompt_ids, p);
            assert_eq!(
                g.token_ids,
                one.token_ids,
                "{arch:?}, prompt of {}",
                p.len()
            );
            assert_eq!(g.finish, one.finish);
            for (a, b) in g.logprobs.iter().zip(&one.logprobs) {
                assert!((a - b).abs() < 1e-4, "{arch:?}: {a} vs {b}");
            }
        }
        assert!(batch[2].token_ids.is_empty());
        // A prompt count that does not match the samplers is refused.
        let err = lm.generate_many(&prompts, &mut []).unwrap_err();
        assert!(
            err.to_string().contains("5 prompts for 0 samplers"),
            "{err}"
        );
    }
}

#[test]
fn long_prompts_run_in_chunks_give_the_whole_pass_s_logits() {
    use crate::model::models::transformer::PREFILL_CHUNK;
    for arch in [Arch::Qwen2, Arch::Llama] {
        let cfg = ModelConfig {
            max_position_embeddings: 4 * PREFILL_CHUNK,
            ..tiny_config(arch, 300)
        };
        let varmap = VarMap::new();
        let m = Transformer::new(
            &cfg,
            VarBuilder::from_varmap(&varmap, DType::F32, &Device::Cpu),
        )
        .unwrap();
        tiny::reinit_seeded(&varmap, 5, 0.3).unwrap();
        let n = 2 * PREFILL_CHUNK + 77;
        let ids: Vec<u32> = (0..n).map(|i| (i * 37 % 290) as u32 + 3).collect();
        let input = Tensor::new(ids.as_slice(), &Device::Cpu)
            .unwrap()
            .unsqueeze(0)
            .unwrap();
        let whole = m.logits(&m.hidden_states(&input).unwrap()).unwrap();
        // From an empty cache, and from a cache that already holds a prefix.
        for prefix in [0, 100] {
            let mut cache = m.new_cache();
            let mut parts = Vec::new();
            if prefix > 0 {
                let h = m.forward_cached(&input.i((.., ..prefix)).unwrap(), &mut cache);
                parts.push(m.logits(&h.unwrap()).unwrap());
            }
            let h = m.forward_cached(&input.i((.., prefix..)).unwrap(), &mut cache);
            parts.push(m.logits(&h.unwrap()).unwrap());
            assert_eq!(cache.len(), n);
            let chunked = Tensor::cat(&parts, 1).unwrap();
            let diff = (&whole - chunked)
                .unwrap()
                .abs()
                .unwrap()
                .max_all()
                .unwrap();
            let diff = diff.to_scalar::<f32>().unwrap();
            assert!(diff < 1e-4, "{arch:?}, prefix {prefix}: max diff {diff}");
        }
    }
}

#[test]
fn a_batch_over_its_kv_budget_is_sampled_in_groups_with_the_same_samples() {
    let dir = tempfile::tempdir().unwrap();
    for (arch, mut lm) in models_of_each_arch(dir.path(), 31) {
        let full = lm.tokenizer().encode_chat(&msgs()).unwrap();
        let lens = [full.len(), 3, full.len(), 5, full.len() / 2];
        let (prompts, samplers) = prefixes(&full, &lens, &[6, 4, 5, 7, 3], 500);
        let whole = lm.generate_many(&prompts, &mut samplers.clone()).unwrap();
        let Backend::Dense(m) = lm.backend() else {
            panic!("a dense model")
        };
        // Room for two rows of the longest prompt: three groups or more.
        let row = (full.len() + 7) * m.kv_bytes_per_position();
        for budget in [2 * row, 1] {
            lm.set_kv_budget(budget);
            let mut split_samplers = samplers.clone();
            let mut caches = vec![PromptCache::default(); prompts.len()];
            let (grouped, timings) = lm
                .generate_many_cached(&prompts, &mut split_samplers, &mut caches)
                .unwrap();
            assert_eq!(timings.batch, prompts.len());
            for (i, (g, w)) in grouped.iter().zip(&whole).enumerate() {
                assert_eq!(
                    g.prompt_ids, prompts[i],
                    "{arch:?}: results in prompt order"
                );
                assert_eq!(
                    g.token_ids, w.token_ids,
                    "{arch:?}, budget {budget}, prompt {i}"
                );
                for (a, b) in g.logprobs.iter().zip(&w.logprobs) {
                    assert!((a - b).abs() < 1e-4, "{arch:?}: {a} vs {b}");
                }
            }
            // Each conversation's cache now holds its own prompt: running
            // them again runs one token a prompt pass (the repeated prompt
            // shares its pass unless the budget puts each prompt alone).
            let (_, again) = lm
                .generate_many_cached(&prompts, &mut samplers.clone(), &mut caches)
                .unwrap();
            let passes = if budget == 1 { 5 } else { 4 };
            assert_eq!(again.prefill_tokens, passes, "{arch:?}, budget {budget}");
        }
        lm.set_kv_budget(crate::model::generation::batch_plan::DEFAULT_KV_BUDGET);
    }
}

#[test]
fn conversations_continue_from_their_prompt_caches() {
    let dir = tempfile::tempdir().unwrap();
    for (arch, mut lm) in models_of_each_arch(dir.path(), 41) {
        let full = lm.tokenizer().encode_chat(&msgs()).unwrap();
        let cfg = SamplingConfig {
            temperature: 1.0,
            top_p: 1.0,
            max_tokens: 5,
        };
        let mut prompts: Vec<Vec<u32>> =
            vec![full.clone(), full[..full.len() / 2].to_vec(), full.clone()];
        let mut cached = vec![PromptCache::default(); 3];
        let mut with: Vec<Sampler> = (0..3).map(|i| Sampler::new(cfg, 50 + i)).collect();
        let mut alone = with.clone();
        for turn in 0..3 {
            let (a, timings) = lm
                .generate_many_cached(&prompts, &mut with, &mut cached)
                .unwrap();
            // Only what the caches did not hold ran: the first turn runs the
            // two distinct prompts, later ones the new tokens.
            let distinct = [&prompts[0], &prompts[1]];
            let full_cost: usize = distinct.iter().map(|p| p.len()).sum();
            if turn == 0 {
                assert_eq!(timings.prefill_tokens, full_cost);
            } else {
                assert!(
                    timings.prefill_tokens < full_cost / 2,
                    "{arch:?}: {timings:?}"
                );
            }
            let b: Vec<Generation> = prompts
                .iter()
                .zip(alone.iter_mut())
                .map(|(p, s)| lm.generate_ids(p, s).unwrap())
                .collect();
            for (x, y) in a.iter().zip(&b) {
                assert_eq!(x.token_ids, y.token_ids, "{arch:?}, turn {turn}");
                for (p, q) in x.logprobs.iter().zip(&y.logprobs) {
                    assert!((p - q).abs() < 1e-4, "{arch:?}: {p} vs {q}");
                }
            }
            // The next turn: the reply and an observation appended, except
            // that conversation 2 is cut back and goes another way.
            for (i, (p, g)) in prompts.iter_mut().zip(&a).enumerate() {
                if i == 2 && turn == 1 {
                    p.truncate(4);
                }
                p.extend(&g.token_ids);
                p.extend(&full[1..4 + turn]);
            }
        }
    }
}

#[test]
fn concurrent_seated_callers_share_batches_and_get_their_own_samples() {
    let dir = tempfile::tempdir().unwrap();
    let tok = tokenizer();
    write_model_dir(dir.path(), &tiny_config(Arch::Qwen2, 300), &tok, 5).unwrap();
    let mut lm = LocalModel::load(dir.path(), &Device::Cpu).unwrap();
    let full = lm.tokenizer().encode_chat(&msgs()).unwrap();
    let cfg = SamplingConfig {
        temperature: 1.0,
        top_p: 1.0,
        max_tokens: 6,
    };
    // Four callers, three turns each, prompts of different lengths.
    let prompt = |caller: usize, turn: usize| full[..full.len() - caller - turn].to_vec();
    let mut expected = Vec::new();
    for caller in 0..4 {
        let mut s = Sampler::new(cfg, caller as u64);
        for turn in 0..3 {
            expected.push(
                lm.generate_ids(&prompt(caller, turn), &mut s)
                    .unwrap()
                    .token_ids,
            );
        }
    }
    // A long gathering window: the test checks that seated callers are
    // waited for, not the timing.
    let shared = SharedModel::new(lm, std::time::Duration::from_secs(30));
    let seats: Vec<_> = (0..4).map(|_| shared.seat()).collect();
    let got: Vec<Vec<Vec<u32>>> = std::thread::scope(|scope| {
        let handles: Vec<_> = seats
            .into_iter()
            .enumerate()
            .map(|(caller, seat)| {
                scope.spawn(move || {
                    let mut s = Sampler::new(cfg, caller as u64);
                    let out: Vec<Vec<u32>> = (0..3)
                        .map(|turn| {
                            seat.generate(prompt(caller, turn), &mut s)
                                .unwrap()
                                .token_ids
                        })
                        .collect();
                    drop(seat);
                    out
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(got.concat(), expected);
    assert_eq!(
        shared.batches(),
        3,
        "one batch per turn of all four callers"
    );
    // Unseated callers are not waited for.
    let mut s = Sampler::new(cfg, 9);
    let t0 = std::time::Instant::now();
    shared.generate(prompt(0, 0), &mut s).unwrap();
    assert!(t0.elapsed() < std::time::Duration::from_secs(10));
}

#[test]
fn batched_sampling_can_ignore_end_of_sequence() {
    let dir = tempfile::tempdir().unwrap();
    write_model_dir(dir.path(), &tiny_config(Arch::Llama, 300), &tokenizer(), 5).unwrap();
    let mut lm = LocalModel::load(dir.path(), &Device::Cpu).unwrap();
    let prompt = lm.tokenizer().encode_chat(&msgs()).unwrap();
    // A sampler that can only pick the end-of-sequence token would stop at once.
    let cfg = SamplingConfig {
        temperature: 1.0,
        top_p: 1.0,
        max_tokens: 9,
    };
    let mut samplers = vec![Sampler::new(cfg, 1), Sampler::new(cfg, 2)];
    let (gens, t) = lm
        .generate_batch_with(&prompt, &mut samplers, BatchOptions { ignore_eos: true })
        .unwrap();
    assert!(gens.iter().all(|g| g.token_ids.len() == 9));
    assert!(gens.iter().all(|g| g.finish == FinishReason::Length));
    assert_eq!(t.sampled_tokens, 18);
    assert_eq!(t.decode_steps, 8);
    assert_eq!(t.prefill_tokens, prompt.len());
}

/// The SmolLM2 GGUF if it was fetched before (`endless models fetch smollm2`
/// or the `llm_local` integration test); these tests skip without it.
pub(crate) fn smollm2_gguf() -> Option<std::path::PathBuf> {
    let cache = std::env::var_os("ENDLESS_MODEL_CACHE")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/model-cache")
        });
    let p = cache.join("smollm2").join(fetch::SMOLLM2_FILE);
    if p.is_file() {
        Some(p)
    } else {
        eprintln!("SKIPPED: {} not fetched", p.display());
        None
    }
}

#[test]
fn gguf_llama_runner_matches_candle_transformers() {
    use candle_core::quantized::gguf_file::Content;
    use candle_transformers::models::quantized_llama::ModelWeights;
    let Some(path) = smollm2_gguf() else {
        return;
    };
    let read = || {
        let mut f = std::fs::File::open(&path).unwrap();
        let ct = Content::read(&mut f).unwrap();
        (ct, f)
    };
    let (ct, mut f) = read();
    let mut reference = ModelWeights::from_gguf(ct, &mut f, &Device::Cpu).unwrap();
    let (ct, mut f) = read();
    let mut ours = gguf_llama::LlamaGguf::from_gguf(ct, &mut f, &Device::Cpu).unwrap();
    let ids: Vec<u32> = vec![1, 9690, 198, 2683, 359, 253, 5356, 5646, 198, 2, 11173];
    // Activations are quantized to 8 bits before every matmul, so a rounding
    // difference in attention (summation order) can flip one quantization step
    // and move logits (mean |diff| measured 0.25 on the prompt, up to 1.1 on
    // later positions fed arbitrary tokens, with the f32 activation scales of
    // `q4_1`): compare the top token, and the mean loosely.
    let max_diff = |a: &Tensor, b: &Tensor| {
        let (a, b) = (a.flatten_all().unwrap(), b.flatten_all().unwrap());
        assert_eq!(
            a.argmax(0).unwrap().to_scalar::<u32>().unwrap(),
            b.argmax(0).unwrap().to_scalar::<u32>().unwrap()
        );
        (a - b)
            .unwrap()
            .abs()
            .unwrap()
            .mean_all()
            .unwrap()
            .to_scalar::<f32>()
            .unwrap()
    };
    let x = Tensor::new(ids.as_slice(), &Device::Cpu)
        .unwrap()
        .unsqueeze(0)
        .unwrap();
    let r = reference.forward(&x, 0).unwrap();
    let o = ours.forward(&x).unwrap();
    assert!(max_diff(&r, &o) < 0.5, "prompt: {}", max_diff(&r, &o));
    // Two sequences share the prompt's cache, then decode together; row 0
    // follows the reference's single sequence.
    ours.repeat_batch(2).unwrap();
    for (p, tok) in [(11, 504u32), (12, 7), (13, 30)] {
        let r = reference
            .forward(&Tensor::new(&[[tok]], &Device::Cpu).unwrap(), p)
            .unwrap();
        let o = ours
            .forward(&Tensor::new(&[[tok], [tok + 1]], &Device::Cpu).unwrap())
            .unwrap();
        let d = max_diff(&r.squeeze(0).unwrap(), &o.i(0).unwrap());
        assert!(d < 1.5, "position {p}: {d}");
    }
    // Dropping row 1 keeps row 0 on the reference's track: the same top
    // token (keeping row 1 instead flips it) and a mean as close as the
    // prompt's (measured 0.13 with the AVX2/AVX-512 kernels, 0.37 with
    // `ENDLESS_KERNELS=portable`, whose summation order rounds differently).
    ours.retain(&[0]).unwrap();
    let r = reference
        .forward(&Tensor::new(&[[42u32]], &Device::Cpu).unwrap(), 14)
        .unwrap();
    let o = ours
        .forward(&Tensor::new(&[[42u32]], &Device::Cpu).unwrap())
        .unwrap();
    assert!(max_diff(&r, &o) < 0.5, "after retain: {}", max_diff(&r, &o));
}

/// Write a small random llama GGUF with `Q4_1` weights (and f32 norms) and
/// [`tokenizer`]'s metadata to `path`: hidden 64, 4 heads (2 kv heads), 2 layers.
pub(crate) fn write_q4_1_llama(path: &std::path::Path, seed: u64) {
    use candle_core::quantized::gguf_file::{self, Value};
    use candle_core::quantized::{GgmlDType, QTensor};
    let vocab = tokenizer().get_vocab_size(true);
    let (hidden, ffn, heads, kv_heads, layers) = (64usize, 128usize, 4usize, 2usize, 2usize);
    let head_dim = hidden / heads;
    let mut rng_state = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let mut rand = |n: usize, scale: f32| -> Vec<f32> {
        (0..n)
            .map(|_| {
                rng_state = rng_state
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((rng_state >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 2.0 * scale
            })
            .collect()
    };
    let q = |data: Vec<f32>, rows: usize, cols: usize| {
        let t = Tensor::from_vec(data, (rows, cols), &Device::Cpu).unwrap();
        QTensor::quantize(&t, GgmlDType::Q4_1).unwrap()
    };
    let f = |data: Vec<f32>| {
        let n = data.len();
        let t = Tensor::from_vec(data, n, &Device::Cpu).unwrap();
        QTensor::quantize(&t, GgmlDType::F32).unwrap()
    };
    let mut tensors: Vec<(String, QTensor)> = vec![
        (
            "token_embd.weight".into(),
            q(rand(vocab * hidden, 1.0), vocab, hidden),
        ),
        ("output_norm.weight".into(), f(vec![1.0; hidden])),
    ];
    for i in 0..layers {
        let w = 0.25;
        for (name, rows, cols) in [
            ("attn_q", heads * head_dim, hidden),
            ("attn_k", kv_heads * head_dim, hidden),
            ("attn_v", kv_heads * head_dim, hidden),
            ("attn_output", hidden, heads * head_dim),
            ("ffn_gate", ffn, hidden),
            ("ffn_up", ffn, hidden),
            ("ffn_down", hidden, ffn),
        ] {
            tensors.push((
                format!("blk.{i}.{name}.weight"),
                q(rand(rows * cols, w), rows, cols),
            ));
        }
        tensors.push((format!("blk.{i}.attn_norm.weight"), f(vec![1.0; hidden])));
        tensors.push((format!("blk.{i}.ffn_norm.weight"), f(vec![1.0; hidden])));
    }
    let mut md: Vec<(String, Value)> = gguf_tokenizer_metadata().into_iter().collect();
    for (k, v) in [
        ("general.architecture", Value::String("llama".into())),
        ("llama.embedding_length", Value::U32(hidden as u32)),
        ("llama.feed_forward_length", Value::U32(ffn as u32)),
        ("llama.block_count", Value::U32(layers as u32)),
        ("llama.attention.head_count", Value::U32(heads as u32)),
        ("llama.attention.head_count_kv", Value::U32(kv_heads as u32)),
        ("llama.rope.dimension_count", Value::U32(head_dim as u32)),
        ("llama.context_length", Value::U32(512)),
        ("llama.attention.layer_norm_rms_epsilon", Value::F32(1e-5)),
        ("llama.rope.freq_base", Value::F32(10_000.0)),
    ] {
        md.push((k.to_string(), v));
    }
    let md_refs: Vec<(&str, &Value)> = md.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let t_refs: Vec<(&str, &QTensor)> = tensors.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let mut file = std::fs::File::create(path).unwrap();
    gguf_file::write(&mut file, &md_refs, &t_refs).unwrap();
}

#[test]
fn numerics_check_compares_the_quantized_runner_with_the_f32_model() {
    use crate::model::numerics::{check_numerics, compare, CheckSequence};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tiny.Q4_1.gguf");
    write_q4_1_llama(&path, 7);
    let ids: Vec<u32> = (0..40u32).map(|i| (i * 37 + 5) % 250).collect();
    let sequences = vec![
        CheckSequence {
            ids: ids.clone(),
            prompt_len: 12,
        },
        CheckSequence {
            ids: ids[..20].to_vec(),
            prompt_len: 1,
        },
    ];
    let (report, exact) = check_numerics(&path, &sequences).unwrap();
    assert_eq!(report.all.positions, 39 + 19);
    assert_eq!(
        (report.prefill.positions, report.decode.positions),
        (12 + 1, 27 + 18)
    );
    assert_eq!(report.sequence_lengths, vec![40, 20]);
    // 4-bit weights with 8-bit activations: close to the exact computation
    // on the same weights, not equal to it.
    assert!(report.all.top1_agreement >= 0.9, "{report}");
    assert!(report.all.mean_kl < 0.01, "{report}");
    assert!(report.all.max_abs_logit_diff > 0.0, "{report}");
    // The f32 model against itself: exact agreement.
    let same = compare(&sequences, &exact, &exact).unwrap();
    assert_eq!((same.all.top1_agreement, same.all.mean_kl), (1.0, 0.0));
    // Bad sequences are refused, not panicked on.
    let bad = [CheckSequence {
        ids: vec![1, 2],
        prompt_len: 2,
    }];
    assert!(check_numerics(&path, &bad).is_err());
}

/// The vendored candle's backward pass (vendor/candle-core: a node's first
/// gradient stored as it is, not added to zeros) gives the same gradients:
/// fan-in (a tensor used twice, summed), a first gradient that arrives
/// transposed (stored contiguous), and the reductions and broadcasts whose
/// rules now take the argument's shape.
#[test]
fn patched_backward_gives_the_analytic_gradients() {
    let dev = Device::Cpu;
    let values = [0.5f32, -1.0, 2.0, 3.0, 0.25, -2.0];
    let x = candle_core::Var::from_vec(values.to_vec(), (2, 3), &dev).unwrap();
    let rows = |t: &Tensor| t.to_vec2::<f32>().unwrap();

    // sum(x * x + 3x): x reaches the product twice and the affine once.
    let f = ((x.as_tensor() * x.as_tensor()).unwrap() + (x.as_tensor() * 3.0).unwrap())
        .unwrap()
        .sum_all()
        .unwrap();
    let g = f.backward().unwrap();
    let want: Vec<f32> = values.iter().map(|v| 2.0 * v + 3.0).collect();
    assert_eq!(rows(g.get(&x).unwrap()).concat(), want);

    // sum(xᵀ ⊙ w): x's only gradient is wᵀ, a transposed view.
    let w = Tensor::from_vec(vec![1f32, 2., 3., 4., 5., 6.], (3, 2), &dev).unwrap();
    let f = (x.as_tensor().t().unwrap() * &w)
        .unwrap()
        .sum_all()
        .unwrap();
    let g = f.backward().unwrap();
    let gx = g.get(&x).unwrap();
    assert!(gx.is_contiguous());
    assert_eq!(rows(gx), rows(&w.t().unwrap()));

    // sum(max over each row) + sum(broadcast of a row): one-hot at each
    // row's maximum, plus the rows the broadcast copied.
    let max = x.as_tensor().max_keepdim(1).unwrap().sum_all().unwrap();
    let row = x
        .as_tensor()
        .narrow(0, 0, 1)
        .unwrap()
        .broadcast_as((4, 3))
        .unwrap();
    let f = (max + row.sum_all().unwrap()).unwrap();
    let g = f.backward().unwrap();
    assert_eq!(
        rows(g.get(&x).unwrap()),
        vec![vec![4.0, 4.0, 5.0], vec![1.0, 0.0, 0.0]]
    );
}
