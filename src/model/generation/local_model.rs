//! [`LocalModel`]: a chat model run in-process with candle, loaded from a
//! Hugging Face-style directory (safetensors) or a GGUF file.

use crate::model::config::{token_ids, ModelConfig};
use crate::model::error::{LocalError, Result};
use crate::model::generation::batch_plan::{plan_groups, DEFAULT_KV_BUDGET};
use crate::model::generation::sampling::{Sampler, SamplingConfig};
use crate::model::models::adapter::{load_adapted, ADAPTER_SPEC};
use crate::model::models::transformer::{KvCache, Transformer};
use crate::model::quantized::gguf::GgufModel;
use crate::model::text::chat_template::TemplateMessage;
use crate::model::text::tokenizer::ChatTokenizer;
use crate::model::weights::{check_weights, mmap, weight_files};
use candle_core::{DType, Device, IndexOp, Tensor};
use candle_nn::VarBuilder;
use std::path::Path;
use std::time::{Duration, Instant};

/// The network behind a [`LocalModel`].
pub enum Backend {
    /// Full-precision weights from safetensors, run by the project's decoder.
    Dense(Box<Transformer>),
    /// Quantized GGUF weights, run by candle-transformers.
    Gguf(Box<GgufModel>),
}

/// Why generation stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinishReason {
    /// An end-of-sequence token was sampled.
    Stop,
    /// `max_tokens` was reached.
    Length,
}

impl FinishReason {
    /// The OpenAI-style name (`stop`, `length`).
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Stop => "stop",
            Self::Length => "length",
        }
    }
}

/// One generated reply, with everything PPO needs.
#[derive(Debug, Clone)]
pub struct Generation {
    /// The decoded reply (special tokens dropped).
    pub text: String,
    /// The prompt as the model saw it.
    pub prompt_ids: Vec<u32>,
    /// The sampled tokens, including a final end-of-sequence token if any.
    pub token_ids: Vec<u32>,
    /// Log-probability of each sampled token at sampling time.
    pub logprobs: Vec<f32>,
    /// Why sampling stopped.
    pub finish: FinishReason,
}

/// A local chat model.
pub struct LocalModel {
    backend: Backend,
    tokenizer: ChatTokenizer,
    device: Device,
    name: String,
    defaults: SamplingConfig,
    /// See [`LocalModel::set_kv_budget`].
    kv_budget: usize,
}

impl std::fmt::Debug for LocalModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalModel")
            .field("name", &self.name)
            .finish()
    }
}

/// The `generation_config.json` fields used here.
fn generation_config(dir: &Path) -> Result<(Vec<u32>, SamplingConfig)> {
    let path = dir.join("generation_config.json");
    let mut defaults = SamplingConfig::default();
    if !path.is_file() {
        return Ok((Vec::new(), defaults));
    }
    let text = std::fs::read_to_string(&path).map_err(|e| LocalError::io(&path, e))?;
    let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| LocalError::BadFile {
        path: path.clone(),
        message: e.to_string(),
    })?;
    if let Some(t) = v.get("temperature").and_then(|t| t.as_f64()) {
        defaults.temperature = t as f32;
    }
    if let Some(p) = v.get("top_p").and_then(|t| t.as_f64()) {
        defaults.top_p = p as f32;
    }
    let eos = v.get("eos_token_id").map(token_ids).unwrap_or_default();
    Ok((eos, defaults))
}

impl LocalModel {
    /// Load a model directory, or a `.gguf` file.
    pub fn load(path: &Path, device: &Device) -> Result<Self> {
        if path.is_file() && path.extension().is_some_and(|e| e == "gguf") {
            let (model, tokenizer) = GgufModel::load(path, device)?;
            return Ok(Self {
                name: path
                    .file_stem()
                    .map(|s| s.to_string_lossy().into_owned())
                    .unwrap_or_default(),
                backend: Backend::Gguf(Box::new(model)),
                tokenizer,
                device: device.clone(),
                defaults: SamplingConfig::default(),
                kv_budget: DEFAULT_KV_BUDGET,
            });
        }
        Self::load_dir(path, device)
    }

    /// Load `config.json`, the tokenizer files and the safetensors weights of
    /// `dir`, or, in a LoRA checkpoint (`adapter.json`), its base with the
    /// adapters merged.
    pub fn load_dir(dir: &Path, device: &Device) -> Result<Self> {
        if !dir.is_dir() {
            return Err(LocalError::MissingFile {
                path: dir.to_path_buf(),
                what: "model directory".into(),
            });
        }
        let cfg_path = dir.join("config.json");
        if !cfg_path.is_file() {
            return Err(LocalError::MissingFile {
                path: cfg_path,
                what: "the model configuration".into(),
            });
        }
        let cfg = ModelConfig::from_file(&cfg_path)?;
        let (gen_eos, defaults) = generation_config(dir)?;
        let mut eos = cfg.eos_token_ids.clone();
        eos.extend(
            gen_eos
                .into_iter()
                .filter(|e| !cfg.eos_token_ids.contains(e)),
        );
        let tokenizer = ChatTokenizer::from_dir(dir, &eos)?;
        let model = if dir.join(ADAPTER_SPEC).is_file() {
            load_adapted(dir, &cfg, device)?
        } else {
            let files = weight_files(dir)?;
            let st = mmap(&files)?;
            check_weights(&files, &st, &cfg)?;
            let vb = VarBuilder::from_backend(Box::new(st), DType::F32, device.clone());
            Transformer::new(&cfg, vb)?
        };
        Ok(Self {
            backend: Backend::Dense(Box::new(model)),
            tokenizer,
            device: device.clone(),
            name: dir
                .file_name()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default(),
            defaults,
            kv_budget: DEFAULT_KV_BUDGET,
        })
    }

    /// A model from parts already in memory (e.g. the policy being trained).
    pub fn from_parts(model: Transformer, tokenizer: ChatTokenizer, name: &str) -> Self {
        Self {
            device: model.device().clone(),
            backend: Backend::Dense(Box::new(model)),
            tokenizer,
            name: name.to_string(),
            defaults: SamplingConfig::default(),
            kv_budget: DEFAULT_KV_BUDGET,
        }
    }

    /// A short name (directory or file stem).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The tokenizer and chat template.
    pub fn tokenizer(&self) -> &ChatTokenizer {
        &self.tokenizer
    }

    /// Sampling defaults from `generation_config.json`.
    pub fn default_sampling(&self) -> SamplingConfig {
        self.defaults
    }

    /// The network.
    pub fn backend(&self) -> &Backend {
        &self.backend
    }

    /// Positions the model can attend over (prompt plus reply). candle's
    /// quantized models build masks for at most
    /// `quantized_llama::MAX_SEQ_LEN` positions.
    pub fn context_window(&self) -> usize {
        match &self.backend {
            Backend::Dense(m) => m.config().max_position_embeddings,
            Backend::Gguf(_) => candle_transformers::models::quantized_llama::MAX_SEQ_LEN,
        }
    }

    /// Reply to a conversation: apply the chat template, sample with a KV cache.
    pub fn generate(
        &mut self,
        messages: &[TemplateMessage],
        params: &SamplingConfig,
        seed: u64,
    ) -> Result<Generation> {
        let prompt = self.tokenizer.encode_chat(messages)?;
        let mut sampler = Sampler::new(*params, seed);
        self.generate_ids(&prompt, &mut sampler)
    }

    /// Sample a continuation of `prompt` token ids.
    pub fn generate_ids(&mut self, prompt: &[u32], sampler: &mut Sampler) -> Result<Generation> {
        let (mut out, _) = self.generate_batch_with(
            prompt,
            std::slice::from_mut(sampler),
            BatchOptions::default(),
        )?;
        out.pop()
            .ok_or_else(|| LocalError::Generation("no sequence generated".into()))
    }

    /// Sample `seeds.len()` continuations of the same `prompt`, one seeded
    /// sampler each, in lockstep (see [`LocalModel::generate_batch_with`]).
    pub fn generate_batch(
        &mut self,
        prompt: &[u32],
        params: &SamplingConfig,
        seeds: &[u64],
    ) -> Result<Vec<Generation>> {
        let mut samplers: Vec<Sampler> = seeds.iter().map(|&s| Sampler::new(*params, s)).collect();
        Ok(self
            .generate_batch_with(prompt, &mut samplers, BatchOptions::default())?
            .0)
    }

    /// Sample one continuation of `prompt` per sampler, all in one batch: the
    /// prompt is run once, then every step feeds the last token of each live
    /// sequence through one forward pass of batch size = live sequences.
    /// A sequence leaves the batch when it samples an end-of-sequence token or
    /// reaches its sampler's `max_tokens`. Each sequence's tokens and
    /// log-probabilities are those [`LocalModel::generate_ids`] would record
    /// with the same sampler (up to floating-point summation order).
    ///
    /// Dense models and GGUF llama models run the prompt once and copy its
    /// KV cache to every sequence. GGUF qwen2/qwen3 models (run by
    /// candle-transformers, which cannot batch them) fall back to sampling
    /// the sequences one after another.
    pub fn generate_batch_with(
        &mut self,
        prompt: &[u32],
        samplers: &mut [Sampler],
        opts: BatchOptions,
    ) -> Result<(Vec<Generation>, GenTimings)> {
        if prompt.is_empty() {
            return Err(LocalError::Generation("empty prompt".into()));
        }
        let n = samplers.len();
        let mut timings = GenTimings {
            batch: n,
            prefill_tokens: prompt.len(),
            ..GenTimings::default()
        };
        if n == 0 {
            return Ok((Vec::new(), timings));
        }
        if n > 1 && matches!(&self.backend, Backend::Gguf(g) if !g.can_batch()) {
            let mut out = Vec::with_capacity(n);
            timings.prefill_tokens = 0;
            for s in samplers.iter_mut() {
                let (mut g, t) = self.generate_batch_with(prompt, std::slice::from_mut(s), opts)?;
                timings.add(&t);
                out.append(&mut g);
            }
            return Ok((out, timings));
        }
        let start = Instant::now();
        let mut step = Stepper::new(&mut self.backend, n);
        let logits = step.prefill(prompt, &self.device)?;
        timings.prefill = start.elapsed();
        let out = decode(
            &mut step,
            logits,
            samplers,
            &self.tokenizer,
            |_| prompt.to_vec(),
            opts,
            &self.device,
            &mut timings,
        )?;
        Ok((out, timings))
    }

    /// Sample one continuation of each `prompts[i]` with `samplers[i]`, as
    /// one batch where the network allows: dense models run each distinct
    /// prompt alone, then join their KV caches into one batch padded on the
    /// left and masked (rotary positions are relative, so each sequence is
    /// sampled as if alone); other models share one prompt pass among
    /// identical prompts, else run the sequences one after another.
    pub fn generate_many(
        &mut self,
        prompts: &[Vec<u32>],
        samplers: &mut [Sampler],
    ) -> Result<Vec<Generation>> {
        let mut caches = vec![PromptCache::default(); prompts.len()];
        Ok(self.generate_many_cached(prompts, samplers, &mut caches)?.0)
    }

    /// [`LocalModel::generate_many`] for conversations that come back:
    /// `caches[i]` holds what conversation `i`'s previous prompt left in a
    /// dense model, so that only the tokens after it are run, and is
    /// updated to this prompt. The timings count the prompt tokens run.
    pub fn generate_many_cached(
        &mut self,
        prompts: &[Vec<u32>],
        samplers: &mut [Sampler],
        caches: &mut [PromptCache],
    ) -> Result<(Vec<Generation>, GenTimings)> {
        if prompts.len() != samplers.len() || prompts.len() != caches.len() {
            return Err(LocalError::Generation(format!(
                "{} prompts for {} samplers and {} caches",
                prompts.len(),
                samplers.len(),
                caches.len()
            )));
        }
        let Some(first) = prompts.first() else {
            return Ok((Vec::new(), GenTimings::default()));
        };
        let opts = BatchOptions::default();
        let width = prompts.iter().map(Vec::len).max().unwrap_or(0);
        let longest_reply = samplers.iter().map(|s| s.config().max_tokens).max();
        let fits = width + longest_reply.unwrap_or(0) <= self.context_window();
        if !matches!(self.backend, Backend::Dense(_)) || !fits || prompts.iter().any(Vec::is_empty)
        {
            if prompts.iter().all(|p| p == first) {
                return self.generate_batch_with(first, samplers, opts);
            }
            let mut out = Vec::with_capacity(prompts.len());
            let mut timings = GenTimings {
                batch: prompts.len(),
                ..GenTimings::default()
            };
            for (p, s) in prompts.iter().zip(samplers.iter_mut()) {
                let (mut g, t) = self.generate_batch_with(p, std::slice::from_mut(s), opts)?;
                timings.add(&t);
                out.append(&mut g);
            }
            return Ok((out, timings));
        }
        let mut timings = GenTimings {
            batch: prompts.len(),
            ..GenTimings::default()
        };
        if let Backend::Dense(m) = &self.backend {
            let groups = plan_groups(
                prompts,
                longest_reply.unwrap_or(0),
                m.kv_bytes_per_position(),
                self.kv_budget,
            );
            if groups.len() > 1 {
                return self.generate_groups(&groups, prompts, samplers, caches);
            }
        }
        let start = Instant::now();
        let mut step = Stepper::new(&mut self.backend, prompts.len());
        let (logits, run) = step.prefill_padded(prompts, caches, &self.device)?;
        timings.prefill = start.elapsed();
        timings.prefill_tokens = run;
        let out = decode(
            &mut step,
            logits,
            samplers,
            &self.tokenizer,
            |i| prompts[i].clone(),
            opts,
            &self.device,
            &mut timings,
        )?;
        Ok((out, timings))
    }

    /// [`LocalModel::generate_many_cached`] one group of `groups` (see
    /// [`plan_groups`]) after another; results in the order of `prompts`.
    fn generate_groups(
        &mut self,
        groups: &[Vec<usize>],
        prompts: &[Vec<u32>],
        samplers: &mut [Sampler],
        caches: &mut [PromptCache],
    ) -> Result<(Vec<Generation>, GenTimings)> {
        let mut timings = GenTimings {
            batch: prompts.len(),
            ..GenTimings::default()
        };
        let mut out: Vec<Option<Generation>> = vec![None; prompts.len()];
        for group in groups {
            let sub_prompts: Vec<Vec<u32>> = group.iter().map(|&i| prompts[i].clone()).collect();
            let mut sub_samplers: Vec<Sampler> =
                group.iter().map(|&i| samplers[i].clone()).collect();
            let mut sub_caches: Vec<PromptCache> = group
                .iter()
                .map(|&i| std::mem::take(&mut caches[i]))
                .collect();
            let result =
                self.generate_many_cached(&sub_prompts, &mut sub_samplers, &mut sub_caches);
            for (j, &i) in group.iter().enumerate() {
                samplers[i] = sub_samplers[j].clone();
                caches[i] = std::mem::take(&mut sub_caches[j]);
            }
            let (gens, t) = result?;
            timings.add(&t);
            for (g, &i) in gens.into_iter().zip(group) {
                out[i] = Some(g);
            }
        }
        out.into_iter()
            .map(|g| {
                g.ok_or_else(|| {
                    LocalError::Generation("a prompt of the batch was not sampled".into())
                })
            })
            .collect::<Result<Vec<_>>>()
            .map(|g| (g, timings))
    }

    /// Bytes a padded batch's key/value cache may take before
    /// [`LocalModel::generate_many_cached`] samples it in groups
    /// ([`DEFAULT_KV_BUDGET`] unless set).
    pub fn set_kv_budget(&mut self, bytes: usize) {
        self.kv_budget = bytes;
    }

    /// Positions a dense model's key/value caches grow by (see
    /// [`Transformer::set_kv_reserve`]); no effect on GGUF models.
    pub fn set_kv_reserve(&mut self, positions: usize) {
        if let Backend::Dense(m) = &mut self.backend {
            m.set_kv_reserve(positions);
        }
    }

    /// Whether a dense model's decoding steps run the project's kernels (see
    /// [`Transformer::set_decode_kernels`]); no effect on GGUF models.
    pub fn set_decode_kernels(&mut self, on: bool) {
        if let Backend::Dense(m) = &mut self.backend {
            m.set_decode_kernels(on);
        }
    }
}

/// What a conversation's last prompt left in a dense model (its tokens, and
/// their keys and values), so that the next turn runs only what is new.
#[derive(Debug, Clone, Default)]
pub struct PromptCache {
    tokens: Vec<u32>,
    kv: Option<KvCache>,
}

impl PromptCache {
    /// The cache to continue `prompt` from, and where the new tokens start:
    /// the longest cached prefix that leaves at least one token to run.
    fn resume_for(&mut self, prompt: &[u32]) -> Result<Option<(KvCache, usize)>> {
        let common = self
            .tokens
            .iter()
            .zip(prompt)
            .take_while(|(a, b)| a == b)
            .count()
            .min(prompt.len().saturating_sub(1));
        let Some(mut kv) = self.kv.take().filter(|_| common > 0) else {
            return Ok(None);
        };
        kv.truncate(common)?;
        Ok(Some((kv, common)))
    }
}

/// Sample every sequence of `step`'s batch from `logits` (the prompt's) on:
/// each step feeds the last token of each live sequence through one forward
/// pass; a sequence leaves the batch at an end-of-sequence token or at its
/// sampler's `max_tokens`.
#[allow(clippy::too_many_arguments)]
fn decode(
    step: &mut Stepper,
    mut logits: Logits,
    samplers: &mut [Sampler],
    tokenizer: &ChatTokenizer,
    prompt_of: impl Fn(usize) -> Vec<u32>,
    opts: BatchOptions,
    device: &Device,
    timings: &mut GenTimings,
) -> Result<Vec<Generation>> {
    let n = samplers.len();
    let eos = tokenizer.eos_ids();
    let mut tokens: Vec<Vec<u32>> = vec![Vec::new(); n];
    let mut logprobs: Vec<Vec<f32>> = vec![Vec::new(); n];
    let mut finish = vec![FinishReason::Length; n];
    let decode_start = Instant::now();
    // Sequences still sampling, in batch-row order.
    let mut live: Vec<usize> = (0..n)
        .filter(|&i| samplers[i].config().max_tokens > 0)
        .collect();
    if live.len() < n {
        step.retain(&live)?;
    }
    // The logits row of each live sequence: the prompt pass has a row per
    // sequence (or one shared row), later passes one per live sequence.
    let mut logit_rows = live.clone();
    while !live.is_empty() {
        let vocab = logits.len() / logits.rows;
        let mut keep = Vec::with_capacity(live.len());
        let mut feed = Vec::with_capacity(live.len());
        for (row, &seq) in live.iter().enumerate() {
            let (tok, lp) = samplers[seq].sample(logits.row(logit_rows[row], vocab));
            tokens[seq].push(tok);
            logprobs[seq].push(lp);
            timings.sampled_tokens += 1;
            if !opts.ignore_eos && eos.contains(&tok) {
                finish[seq] = FinishReason::Stop;
            } else if tokens[seq].len() < samplers[seq].config().max_tokens {
                keep.push(row);
                feed.push(tok);
            }
        }
        if keep.is_empty() {
            break;
        }
        if keep.len() < live.len() {
            step.retain(&keep)?;
            live = keep.iter().map(|&r| live[r]).collect();
        }
        logits = step.feed(&feed, device)?;
        logit_rows = (0..live.len()).collect();
        timings.decode_steps += 1;
    }
    timings.decode = decode_start.elapsed();
    let mut out = Vec::with_capacity(n);
    for (i, ((token_ids, logprobs), finish)) in
        tokens.into_iter().zip(logprobs).zip(finish).enumerate()
    {
        out.push(Generation {
            text: tokenizer.decode(&token_ids)?,
            prompt_ids: prompt_of(i),
            token_ids,
            logprobs,
            finish,
        });
    }
    Ok(out)
}

/// Options of [`LocalModel::generate_batch_with`].
#[derive(Debug, Clone, Copy, Default)]
pub struct BatchOptions {
    /// Keep sampling after end-of-sequence tokens, up to `max_tokens`
    /// (benchmarks that need a fixed number of tokens).
    pub ignore_eos: bool,
}

/// Where the time of one [`LocalModel::generate_batch_with`] call went.
#[derive(Debug, Clone, Copy, Default)]
pub struct GenTimings {
    /// Sequences sampled together.
    pub batch: usize,
    /// Prompt tokens (run once, or once per sequence where the cache cannot be shared).
    pub prefill_tokens: usize,
    /// Time to run the prompt, up to its last-position logits.
    pub prefill: Duration,
    /// Time of the sampling steps after the prompt (forward passes and sampling).
    pub decode: Duration,
    /// Forward passes after the prompt.
    pub decode_steps: usize,
    /// Tokens sampled, all sequences together.
    pub sampled_tokens: usize,
}

impl GenTimings {
    /// Add the times and counts of a part run separately (not the batch size).
    fn add(&mut self, t: &GenTimings) {
        self.prefill_tokens += t.prefill_tokens;
        self.prefill += t.prefill;
        self.decode += t.decode;
        self.decode_steps += t.decode_steps;
        self.sampled_tokens += t.sampled_tokens;
    }
}

/// Last-position logits of the rows of a batch, row-major.
struct Logits {
    data: Vec<f32>,
    rows: usize,
}

impl Logits {
    fn len(&self) -> usize {
        self.data.len()
    }

    /// Row `row`; a single row stands for every row (a prompt run once).
    fn row(&self, row: usize, vocab: usize) -> &[f32] {
        let row = if self.rows == 1 { 0 } else { row };
        &self.data[row * vocab..(row + 1) * vocab]
    }
}

/// Feeds tokens through a backend with its KV cache, for a batch of sequences
/// that share a prompt.
struct Stepper<'a> {
    backend: &'a mut Backend,
    cache: Option<crate::model::models::transformer::KvCache>,
    /// Sequences sampled together.
    batch: usize,
    pos: usize,
}

impl<'a> Stepper<'a> {
    fn new(backend: &'a mut Backend, batch: usize) -> Self {
        let cache = match backend {
            Backend::Dense(m) => Some(m.new_cache()),
            Backend::Gguf(g) => {
                g.clear_kv_cache();
                None
            }
        };
        Self {
            backend,
            cache,
            batch,
            pos: 0,
        }
    }

    /// Run the prompt once; its logits (one row) stand for every sequence,
    /// whose KV caches start as copies of the prompt's.
    fn prefill(&mut self, ids: &[u32], device: &Device) -> Result<Logits> {
        let input = Tensor::new(ids, device)?.unsqueeze(0)?;
        let logits = self.forward(&input)?;
        if self.batch > 1 {
            match (&mut *self.backend, self.cache.as_mut()) {
                (Backend::Dense(_), Some(cache)) => cache.repeat_batch(self.batch)?,
                (Backend::Gguf(g), _) => g.repeat_batch(self.batch)?,
                (Backend::Dense(_), None) => {}
            }
        }
        Ok(logits)
    }

    /// Run prompts of different lengths (dense models only): each distinct
    /// prompt alone, from what its cache holds on (the cache is updated),
    /// then their caches moved to their padding as origin and joined into
    /// one left-padded batch. Logits of each row, and the tokens run.
    fn prefill_padded(
        &mut self,
        prompts: &[Vec<u32>],
        caches: &mut [PromptCache],
        device: &Device,
    ) -> Result<(Logits, usize)> {
        let Backend::Dense(m) = &mut *self.backend else {
            return Err(LocalError::Generation(
                "padded batches need a dense model".into(),
            ));
        };
        let width = prompts.iter().map(Vec::len).max().unwrap_or(0);
        let mut rows = Vec::with_capacity(prompts.len());
        let mut data: Vec<f32> = Vec::new();
        let mut vocab = 0;
        let mut run = 0;
        for (r, p) in prompts.iter().enumerate() {
            if let Some(q) = prompts[..r].iter().position(|o| o == p) {
                // The same prompt again (samples of one task): run once.
                caches[r] = caches[q].clone();
                data.extend_from_within(q * vocab..(q + 1) * vocab);
                rows.push(m.shift_cache(
                    caches[q].kv.as_ref().unwrap_or(&m.new_cache()),
                    width - p.len(),
                )?);
                continue;
            }
            let (mut kv, start) = caches[r].resume_for(p)?.unwrap_or((m.new_cache(), 0));
            run += p.len() - start;
            let input = Tensor::new(&p[start..], device)?.unsqueeze(0)?;
            let h = m.forward_cached(&input, &mut kv)?;
            let last = h.i((.., p.len() - start - 1.., ..))?;
            let logits = m
                .sampling_logits(&last)?
                .flatten_all()?
                .to_dtype(DType::F32)?
                .to_vec1::<f32>()?;
            vocab = logits.len();
            data.extend(logits);
            rows.push(m.shift_cache(&kv, width - p.len())?);
            caches[r] = PromptCache {
                tokens: p.clone(),
                kv: Some(kv),
            };
        }
        self.cache = Some(KvCache::join_left_padded(rows)?);
        self.pos = width;
        let logits = Logits {
            data,
            rows: prompts.len(),
        };
        Ok((logits, run))
    }

    /// Keep only the batch rows at positions `keep` (ascending, non-empty).
    fn retain(&mut self, keep: &[usize]) -> Result<()> {
        if keep.is_empty() {
            return Ok(());
        }
        match (&mut *self.backend, self.cache.as_mut()) {
            (Backend::Dense(_), Some(cache)) => cache.retain(keep)?,
            (Backend::Gguf(g), _) => g.retain(keep)?,
            (Backend::Dense(_), None) => {}
        }
        Ok(())
    }

    /// Append one token per live sequence; logits of each live row.
    fn feed(&mut self, ids: &[u32], device: &Device) -> Result<Logits> {
        let input = Tensor::new(ids, device)?.unsqueeze(1)?;
        self.forward(&input)
    }

    /// Forward `(rows, time)` ids; logits of the last position of each row.
    fn forward(&mut self, input: &Tensor) -> Result<Logits> {
        let (rows, t) = input.dims2()?;
        let logits = match (&mut *self.backend, self.cache.as_mut()) {
            (Backend::Dense(m), Some(cache)) => {
                let h = m.forward_cached(input, cache)?;
                let last = h.i((.., t - 1..t, ..))?;
                m.sampling_logits(&last)?
            }
            (Backend::Gguf(g), _) => g.forward(input, self.pos)?,
            (Backend::Dense(_), None) => {
                return Err(LocalError::Generation("missing KV cache".into()))
            }
        };
        self.pos += t;
        let data = logits
            .flatten_all()?
            .to_dtype(DType::F32)?
            .to_vec1::<f32>()?;
        Ok(Logits { data, rows })
    }
}
