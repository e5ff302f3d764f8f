//! Jinja chat templates (from `tokenizer_config.json` or GGUF metadata),
//! rendered with minijinja plus Python string methods (`startswith`, `strip`...).

use crate::model::error::{LocalError, Result};
use serde::Serialize;

/// A ChatML template, used when a model ships none.
pub const CHATML_TEMPLATE: &str = "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

/// One message as the template sees it.
#[derive(Debug, Clone, Serialize)]
pub struct TemplateMessage {
    /// `system`, `user` or `assistant`.
    pub role: String,
    /// The message text.
    pub content: String,
}

/// A compiled chat template plus the special-token strings it may refer to.
#[derive(Debug, Clone)]
pub struct ChatTemplate {
    source: String,
    bos_token: String,
    eos_token: String,
}

fn raise_exception(msg: String) -> std::result::Result<String, minijinja::Error> {
    Err(minijinja::Error::new(
        minijinja::ErrorKind::InvalidOperation,
        msg,
    ))
}

/// `strftime_now(format)`, which Llama 3 templates call for the current date.
fn strftime_now(format: String) -> std::result::Result<String, minijinja::Error> {
    use std::fmt::Write;
    let mut out = String::new();
    write!(out, "{}", chrono::Local::now().format(&format)).map_err(|_| {
        minijinja::Error::new(
            minijinja::ErrorKind::InvalidOperation,
            format!("strftime_now: bad format `{format}`"),
        )
    })?;
    Ok(out)
}

impl ChatTemplate {
    /// Compile `source`; fails on a syntax error.
    pub fn new(source: &str, bos_token: &str, eos_token: &str) -> Result<Self> {
        let t = Self {
            source: source.to_string(),
            bos_token: bos_token.to_string(),
            eos_token: eos_token.to_string(),
        };
        t.env()?;
        Ok(t)
    }

    /// The template text.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The `bos_token` string the template sees.
    pub fn bos_token(&self) -> &str {
        &self.bos_token
    }

    /// The `eos_token` string the template sees.
    pub fn eos_token(&self) -> &str {
        &self.eos_token
    }

    fn env(&self) -> Result<minijinja::Environment<'_>> {
        let mut env = minijinja::Environment::new();
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", strftime_now);
        env.add_template("chat", &self.source)
            .map_err(|e| LocalError::Template(e.to_string()))?;
        Ok(env)
    }

    /// Render the conversation; with `add_generation_prompt` the text ends where
    /// the assistant's reply begins.
    pub fn render(
        &self,
        messages: &[TemplateMessage],
        add_generation_prompt: bool,
    ) -> Result<String> {
        let env = self.env()?;
        let tmpl = env
            .get_template("chat")
            .map_err(|e| LocalError::Template(e.to_string()))?;
        tmpl.render(minijinja::context! {
            messages => messages,
            add_generation_prompt => add_generation_prompt,
            bos_token => self.bos_token,
            eos_token => self.eos_token,
            enable_thinking => false,
        })
        .map_err(|e| {
            let mut msg = e.to_string();
            let mut src = std::error::Error::source(&e);
            while let Some(s) = src {
                msg.push_str(&format!(": {s}"));
                src = s.source();
            }
            LocalError::Template(msg)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msgs() -> Vec<TemplateMessage> {
        vec![
            TemplateMessage {
                role: "system".into(),
                content: "Be brief.".into(),
            },
            TemplateMessage {
                role: "user".into(),
                content: "hi".into(),
            },
        ]
    }

    #[test]
    fn chatml_renders_generation_prompt() {
        let t = ChatTemplate::new(CHATML_TEMPLATE, "", "<|im_end|>").unwrap();
        let s = t.render(&msgs(), true).unwrap();
        assert_eq!(
            s,
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
        );
    }

    #[test]
    fn python_methods_and_raise_exception_work() {
        // The shape of Qwen/Llama templates: string methods, namespace, loop vars.
        let dated = ChatTemplate::new("{{ strftime_now('%Y') }}", "", "").unwrap();
        assert_eq!(dated.render(&msgs(), false).unwrap().len(), 4);
        let src = "{%- set ns = namespace(n=0) -%}{%- for m in messages -%}{%- if m.content.startswith('Be') -%}{%- set ns.n = ns.n + 1 -%}{%- endif -%}[{{ m.role | upper }}:{{ m.content.strip() }}]{%- if loop.last and ns.n == 0 -%}{{ raise_exception('no system') }}{%- endif -%}{%- endfor -%}{{ bos_token }}";
        let t = ChatTemplate::new(src, "<s>", "</s>").unwrap();
        assert_eq!(
            t.render(&msgs(), false).unwrap(),
            "[SYSTEM:Be brief.][USER:hi]<s>"
        );
        let e = t.render(&msgs()[1..], false).unwrap_err().to_string();
        assert!(e.contains("no system"), "{e}");
    }
}
