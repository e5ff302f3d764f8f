//! Tokenizer plus chat template: turns a conversation into prompt token ids
//! and generated ids back into text.

use crate::model::error::{LocalError, Result};
use crate::model::text::chat_template::{ChatTemplate, TemplateMessage, CHATML_TEMPLATE};
use std::path::Path;
use tokenizers::Tokenizer;

/// A tokenizer together with its chat template and stop tokens.
#[derive(Clone)]
pub struct ChatTokenizer {
    tokenizer: Tokenizer,
    template: ChatTemplate,
    eos_ids: Vec<u32>,
}

impl std::fmt::Debug for ChatTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTokenizer")
            .field("vocab_size", &self.tokenizer.get_vocab_size(true))
            .field("eos_ids", &self.eos_ids)
            .finish()
    }
}

/// A special token given as a string or as `{"content": ...}`.
fn token_string(v: Option<&serde_json::Value>) -> Option<String> {
    match v? {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Object(o) => o.get("content")?.as_str().map(str::to_string),
        _ => None,
    }
}

impl ChatTokenizer {
    /// Assemble from parts. `template = None` uses ChatML. Stop tokens are
    /// `eos_ids` plus the id of `eos_token`, if the vocabulary has it.
    pub fn new(
        tokenizer: Tokenizer,
        template: Option<&str>,
        bos_token: &str,
        eos_token: &str,
        eos_ids: &[u32],
    ) -> Result<Self> {
        let template =
            ChatTemplate::new(template.unwrap_or(CHATML_TEMPLATE), bos_token, eos_token)?;
        let mut ids = eos_ids.to_vec();
        for s in [eos_token, "<|im_end|>", "<|eot_id|>", "<|endoftext|>"] {
            if let Some(id) = tokenizer.token_to_id(s) {
                if !ids.contains(&id) && (s == eos_token || template.source().contains(s)) {
                    ids.push(id);
                }
            }
        }
        Ok(Self {
            tokenizer,
            template,
            eos_ids: ids,
        })
    }

    /// Load `tokenizer.json`, `tokenizer_config.json` (chat template, bos/eos),
    /// `chat_template.jinja` and the eos ids given (from config/generation config).
    pub fn from_dir(dir: &Path, eos_ids: &[u32]) -> Result<Self> {
        let tok_path = dir.join("tokenizer.json");
        if !tok_path.is_file() {
            return Err(LocalError::MissingFile {
                path: tok_path,
                what: "the Hugging Face tokenizer".into(),
            });
        }
        let tokenizer = Tokenizer::from_file(&tok_path).map_err(|e| LocalError::BadFile {
            path: tok_path.clone(),
            message: e.to_string(),
        })?;
        let cfg_path = dir.join("tokenizer_config.json");
        let cfg: serde_json::Value = if cfg_path.is_file() {
            let text =
                std::fs::read_to_string(&cfg_path).map_err(|e| LocalError::io(&cfg_path, e))?;
            serde_json::from_str(&text).map_err(|e| LocalError::BadFile {
                path: cfg_path.clone(),
                message: e.to_string(),
            })?
        } else {
            serde_json::Value::Null
        };
        let mut template = match cfg.get("chat_template") {
            None | Some(serde_json::Value::Null) => None,
            Some(serde_json::Value::String(s)) => Some(s.clone()),
            Some(serde_json::Value::Array(list)) => list
                .iter()
                .find(|t| t.get("name").and_then(|n| n.as_str()) == Some("default"))
                .or(list.first())
                .and_then(|t| t.get("template"))
                .and_then(|t| t.as_str())
                .map(str::to_string),
            Some(_) => {
                return Err(LocalError::field(
                    &cfg_path,
                    "chat_template",
                    "expected a string or a list of {name, template}",
                ))
            }
        };
        let jinja = dir.join("chat_template.jinja");
        if template.is_none() && jinja.is_file() {
            template =
                Some(std::fs::read_to_string(&jinja).map_err(|e| LocalError::io(&jinja, e))?);
        }
        let bos = token_string(cfg.get("bos_token")).unwrap_or_default();
        let eos = token_string(cfg.get("eos_token")).unwrap_or_default();
        Self::new(tokenizer, template.as_deref(), &bos, &eos, eos_ids).map_err(|e| match e {
            LocalError::Template(m) => LocalError::field(&cfg_path, "chat_template", m),
            e => e,
        })
    }

    /// Write `tokenizer.json` and `tokenizer_config.json` (chat template,
    /// bos/eos) into `dir`, so that [`ChatTokenizer::from_dir`] reads them back.
    pub fn save_to_dir(&self, dir: &Path) -> Result<()> {
        let tok = dir.join("tokenizer.json");
        let json = self
            .tokenizer
            .to_string(false)
            .map_err(|e| LocalError::Tokenizer(e.to_string()))?;
        crate::fsutil::write_atomic(&tok, json.as_bytes()).map_err(|e| LocalError::io(&tok, e))?;
        let cfg = dir.join("tokenizer_config.json");
        let v = serde_json::json!({
            "chat_template": self.template.source(),
            "bos_token": self.template.bos_token(),
            "eos_token": self.template.eos_token(),
        });
        crate::fsutil::write_atomic(&cfg, v.to_string().as_bytes())
            .map_err(|e| LocalError::io(&cfg, e))
    }

    /// The underlying tokenizer.
    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    /// Token ids that end generation.
    pub fn eos_ids(&self) -> &[u32] {
        &self.eos_ids
    }

    /// Render the conversation with the chat template.
    pub fn render(
        &self,
        messages: &[TemplateMessage],
        add_generation_prompt: bool,
    ) -> Result<String> {
        self.template.render(messages, add_generation_prompt)
    }

    /// Encode text exactly as written (special tokens in the text are recognised;
    /// none are added).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        Ok(self
            .tokenizer
            .encode(text, false)
            .map_err(|e| LocalError::Tokenizer(e.to_string()))?
            .get_ids()
            .to_vec())
    }

    /// Decode ids to text, dropping special tokens.
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        self.tokenizer
            .decode(ids, true)
            .map_err(|e| LocalError::Tokenizer(e.to_string()))
    }

    /// Render and encode a conversation, ready for the assistant's reply.
    pub fn encode_chat(&self, messages: &[TemplateMessage]) -> Result<Vec<u32>> {
        self.encode(&self.render(messages, true)?)
    }
}
