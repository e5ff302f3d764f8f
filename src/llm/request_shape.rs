//! Which request parameters a chat model accepts.
//!
//! OpenAI's reasoning models (o1, o3, o4-mini, the gpt-5 family) answer HTTP
//! 400 to `max_tokens` (they take `max_completion_tokens`, which also counts
//! their hidden reasoning tokens) and to any sampling parameter other than its
//! default. The client guesses the shape from the model name
//! ([`is_reasoning_model`]) and corrects it from the server's 400 answer
//! ([`Adaptation::from_error_body`]).

use serde::Deserialize;

use super::{ChatMessage, SamplingParams, ToolSpec};

/// Whether `model` names an OpenAI reasoning model: `o1`, `o3`, `o4` or
/// `gpt-5`, alone or followed by `-` (`o3-mini`, `o4-mini-2025-04-16`) or, for
/// gpt-5, `.` (`gpt-5.1`); a provider prefix (`openai/o3`) is ignored. The
/// `gpt-5-chat` models take sampling parameters and are not included. A model
/// this misses is still served: the client adapts to the server's 400.
pub fn is_reasoning_model(model: &str) -> bool {
    let name = model
        .rsplit('/')
        .next()
        .unwrap_or(model)
        .to_ascii_lowercase();
    let family = |prefix: &str, seps: &[char]| {
        name.strip_prefix(prefix)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with(seps))
    };
    family("o1", &['-'])
        || family("o3", &['-'])
        || family("o4", &['-'])
        || (family("gpt-5", &['-', '.']) && !name.starts_with("gpt-5-chat"))
}

/// The request field that bounds generated tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenLimitField {
    /// `max_tokens` (chat models, vLLM, llama.cpp, Ollama, ...).
    MaxTokens,
    /// `max_completion_tokens` (OpenAI reasoning models).
    MaxCompletionTokens,
}

/// What a request sends besides the model and the messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestShape {
    /// Which field carries the token limit.
    pub token_limit: TokenLimitField,
    /// Send `temperature`.
    pub temperature: bool,
    /// Send `top_p`.
    pub top_p: bool,
}

impl RequestShape {
    /// Everything, as `max_tokens`: what most servers take.
    pub const CHAT: RequestShape = RequestShape {
        token_limit: TokenLimitField::MaxTokens,
        temperature: true,
        top_p: true,
    };
    /// `max_completion_tokens` and no sampling parameters.
    pub const REASONING: RequestShape = RequestShape {
        token_limit: TokenLimitField::MaxCompletionTokens,
        temperature: false,
        top_p: false,
    };

    /// The shape guessed from the model's name.
    pub fn for_model(model: &str) -> Self {
        if is_reasoning_model(model) {
            Self::REASONING
        } else {
            Self::CHAT
        }
    }

    /// The JSON body of a chat-completion request in this shape, offering
    /// `tools` (the OpenAI `tools` array; none: no `tools` field).
    pub fn body(
        &self,
        model: &str,
        messages: &[ChatMessage],
        tools: &[ToolSpec],
        params: &SamplingParams,
    ) -> serde_json::Value {
        let mut body = serde_json::Map::new();
        body.insert("model".into(), model.into());
        body.insert("messages".into(), serde_json::json!(messages));
        if !tools.is_empty() {
            body.insert("tools".into(), super::tool_call::openai_tools(tools));
        }
        if self.temperature {
            body.insert("temperature".into(), params.temperature.into());
        }
        if self.top_p {
            body.insert("top_p".into(), params.top_p.into());
        }
        if let Some(max) = params.max_tokens {
            let key = match self.token_limit {
                TokenLimitField::MaxTokens => "max_tokens",
                TokenLimitField::MaxCompletionTokens => "max_completion_tokens",
            };
            body.insert(key.into(), max.into());
        }
        serde_json::Value::Object(body)
    }

    /// This shape with `adaptation` applied.
    pub fn apply(self, adaptation: Adaptation) -> Self {
        match adaptation {
            Adaptation::UseMaxCompletionTokens => Self {
                token_limit: TokenLimitField::MaxCompletionTokens,
                ..self
            },
            Adaptation::DropTemperature => Self {
                temperature: false,
                ..self
            },
            Adaptation::DropTopP => Self {
                top_p: false,
                ..self
            },
        }
    }
}

/// One change to a request that a server asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Adaptation {
    /// Rename `max_tokens` to `max_completion_tokens`.
    UseMaxCompletionTokens,
    /// Leave `temperature` to the server's default.
    DropTemperature,
    /// Leave `top_p` to the server's default.
    DropTopP,
}

#[derive(Deserialize)]
struct ErrorBody {
    error: ErrorDetail,
}

#[derive(Deserialize)]
struct ErrorDetail {
    #[serde(default)]
    message: Option<String>,
    #[serde(default)]
    param: Option<String>,
    #[serde(default)]
    code: Option<String>,
}

impl Adaptation {
    /// The change an HTTP 400 body in OpenAI's error format asks for: the
    /// error must say the parameter is unsupported (`code` is
    /// `unsupported_parameter` or `unsupported_value`, or the message says
    /// "unsupported" / "not supported"), and name it in `param` or, quoted,
    /// in the message. Anything else (a bad value in range terms, an unknown
    /// model, a body in another format) is no adaptation.
    pub fn from_error_body(body: &str) -> Option<Adaptation> {
        let detail = serde_json::from_str::<ErrorBody>(body).ok()?.error;
        let message = detail.message.unwrap_or_default();
        let lower = message.to_ascii_lowercase();
        let unsupported = matches!(
            detail.code.as_deref(),
            Some("unsupported_parameter" | "unsupported_value")
        ) || lower.contains("unsupported")
            || lower.contains("not supported");
        if !unsupported {
            return None;
        }
        let named = |param: &str| {
            detail.param.as_deref() == Some(param)
                || (detail.param.is_none() && message.contains(&format!("'{param}'")))
        };
        if named("max_tokens") {
            Some(Adaptation::UseMaxCompletionTokens)
        } else if named("temperature") {
            Some(Adaptation::DropTemperature)
        } else if named("top_p") {
            Some(Adaptation::DropTopP)
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasoning_models_by_name() {
        for m in [
            "o1",
            "o1-mini",
            "o3",
            "o3-mini",
            "O3-2025-04-16",
            "o4-mini",
            "openai/o3",
            "gpt-5",
            "gpt-5-mini",
            "gpt-5.1",
        ] {
            assert!(is_reasoning_model(m), "{m}");
        }
        for m in [
            "gpt-4o",
            "gpt-4.1-mini",
            "gpt-5-chat-latest",
            "o10",
            "o3x",
            "Qwen/Qwen2.5-7B-Instruct",
            "qwen2.5:7b",
        ] {
            assert!(!is_reasoning_model(m), "{m}");
        }
    }

    #[test]
    fn bodies_follow_the_shape() {
        let params = SamplingParams {
            temperature: 0.5,
            top_p: 0.9,
            max_tokens: Some(64),
        };
        let msgs = [ChatMessage::user("hi")];
        let chat = RequestShape::for_model("gpt-4o").body("gpt-4o", &msgs, &[], &params);
        assert_eq!(chat["max_tokens"], 64);
        assert_eq!(chat["temperature"], 0.5);
        assert!(chat["top_p"].is_number());
        let o3 = RequestShape::for_model("o3").body("o3", &msgs, &[], &params);
        assert_eq!(o3["max_completion_tokens"], 64);
        for key in ["max_tokens", "temperature", "top_p"] {
            assert!(o3.get(key).is_none(), "{key}");
        }
        assert_eq!(o3["messages"][0]["content"], "hi");
        assert!(chat.get("tools").is_none());
        let tool = ToolSpec {
            name: "bash".into(),
            description: "Run a command.".into(),
            parameters: serde_json::json!({"type": "object"}),
        };
        let with = RequestShape::CHAT.body("m", &msgs, &[tool], &params);
        assert_eq!(with["tools"][0]["function"]["name"], "bash");
        assert_eq!(with["tools"][0]["type"], "function");
    }

    #[test]
    fn errors_name_the_adaptation() {
        let max = r#"{"error": {"message": "Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead.", "type": "invalid_request_error", "param": "max_tokens", "code": "unsupported_parameter"}}"#;
        assert_eq!(
            Adaptation::from_error_body(max),
            Some(Adaptation::UseMaxCompletionTokens)
        );
        let temp = r#"{"error": {"message": "Unsupported value: 'temperature' does not support 0.7 with this model. Only the default (1) value is supported.", "type": "invalid_request_error", "param": "temperature", "code": "unsupported_value"}}"#;
        assert_eq!(
            Adaptation::from_error_body(temp),
            Some(Adaptation::DropTemperature)
        );
        let no_param = r#"{"error": {"message": "Unsupported parameter: 'top_p' is not supported with this model."}}"#;
        assert_eq!(
            Adaptation::from_error_body(no_param),
            Some(Adaptation::DropTopP)
        );
        for other in [
            r#"{"error": {"message": "temperature must be at most 2", "param": "temperature", "code": "invalid_value"}}"#,
            r#"{"error": {"message": "The model 'x' does not exist", "code": "model_not_found"}}"#,
            r#"{"error": "fixture status 400"}"#,
            "<html>bad request</html>",
        ] {
            assert_eq!(Adaptation::from_error_body(other), None, "{other}");
        }
    }

    #[test]
    fn adaptations_compose() {
        let shape = RequestShape::CHAT
            .apply(Adaptation::UseMaxCompletionTokens)
            .apply(Adaptation::DropTemperature)
            .apply(Adaptation::DropTopP);
        assert_eq!(shape, RequestShape::REASONING);
        assert_eq!(
            RequestShape::REASONING.apply(Adaptation::DropTopP),
            RequestShape::REASONING
        );
    }
}
