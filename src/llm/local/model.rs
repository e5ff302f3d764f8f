//! [`LocalModel`]: a chat model run in-process with candle, loaded from a
//! Hugging Face-style directory (safetensors) or a GGUF file.

use super::chat_template::TemplateMessage;
use super::config::{token_ids, ModelConfig};
use super::error::{LocalError, Result};
use super::gguf::GgufModel;
use super::sampling::{Sampler, SamplingConfig};
use super::tokenizer::ChatTokenizer;
use super::transformer::Transformer;
use super::weights::{check_weights, mmap, weight_files};
use candle_core::{DType, Device, IndexOp, Tensor};
use candle_nn::VarBuilder;
use std::path::Path;

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
            });
        }
        Self::load_dir(path, device)
    }

    /// Load `config.json`, the tokenizer files and the safetensors weights of `dir`.
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
        let files = weight_files(dir)?;
        let st = mmap(&files)?;
        check_weights(&files, &st, &cfg)?;
        let vb = VarBuilder::from_backend(Box::new(st), DType::F32, device.clone());
        let model = Transformer::new(&cfg, vb)?;
        Ok(Self {
            backend: Backend::Dense(Box::new(model)),
            tokenizer,
            device: device.clone(),
            name: dir
                .file_name()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default(),
            defaults,
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
        if prompt.is_empty() {
            return Err(LocalError::Generation("empty prompt".into()));
        }
        let max_tokens = sampler.config().max_tokens;
        let mut tokens = Vec::new();
        let mut logprobs = Vec::new();
        let mut finish = FinishReason::Length;
        let mut step = Stepper::new(&mut self.backend);
        let mut logits = step.feed(prompt, &self.device)?;
        for _ in 0..max_tokens {
            let (tok, lp) = sampler.sample(&logits);
            tokens.push(tok);
            logprobs.push(lp);
            if self.tokenizer.eos_ids().contains(&tok) {
                finish = FinishReason::Stop;
                break;
            }
            if tokens.len() == max_tokens {
                break;
            }
            logits = step.feed(&[tok], &self.device)?;
        }
        let text = self.tokenizer.decode(&tokens)?;
        Ok(Generation {
            text,
            prompt_ids: prompt.to_vec(),
            token_ids: tokens,
            logprobs,
            finish,
        })
    }
}

/// Feeds tokens through a backend with its KV cache, returning last-position logits.
struct Stepper<'a> {
    backend: &'a mut Backend,
    cache: Option<super::transformer::KvCache>,
    pos: usize,
}

impl<'a> Stepper<'a> {
    fn new(backend: &'a mut Backend) -> Self {
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
            pos: 0,
        }
    }

    fn feed(&mut self, ids: &[u32], device: &Device) -> Result<Vec<f32>> {
        let input = Tensor::new(ids, device)?.unsqueeze(0)?;
        let logits = match (&mut *self.backend, self.cache.as_mut()) {
            (Backend::Dense(m), Some(cache)) => {
                let h = m.forward_cached(&input, cache)?;
                let last = h.i((.., ids.len() - 1..ids.len(), ..))?;
                m.logits(&last)?
            }
            (Backend::Gguf(g), _) => g.forward(&input, self.pos)?,
            (Backend::Dense(_), None) => {
                return Err(LocalError::Generation("missing KV cache".into()))
            }
        };
        self.pos += ids.len();
        Ok(logits
            .flatten_all()?
            .to_dtype(DType::F32)?
            .to_vec1::<f32>()?)
    }
}
