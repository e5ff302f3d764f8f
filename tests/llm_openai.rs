//! The OpenAI-compatible client against a fixture server that answers like
//! OpenAI's API does for reasoning (o-series) models.

#![allow(clippy::unwrap_used)] // tests and benches fail loudly

mod support;

use std::time::Duration;

use endless::llm::{
    ChatMessage, ChatModel, ChatResponse, LlmError, OpenAiChat, OpenAiConfig, RetryPolicy,
    SamplingParams,
};
use support::fixture_llm::{reasoning_model_rejection, FixtureLlm, Reply};

fn client(server: &FixtureLlm, model: &str) -> OpenAiChat {
    let mut config = OpenAiConfig::new(model, server.url());
    config.api_key = None;
    config.retry = RetryPolicy {
        max_retries: 2,
        base_delay: Duration::from_millis(5),
        max_delay: Duration::from_millis(20),
    };
    OpenAiChat::new(config).unwrap()
}

fn params() -> SamplingParams {
    SamplingParams {
        temperature: 0.7,
        top_p: 0.9,
        max_tokens: Some(100),
    }
}

fn ask(client: &OpenAiChat) -> Result<ChatResponse, LlmError> {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(client.chat(&[ChatMessage::user("hi")], &params()))
}

fn keys(body: &serde_json::Value) -> Vec<String> {
    let mut keys: Vec<String> = body.as_object().unwrap().keys().cloned().collect();
    keys.sort();
    keys
}

#[test]
fn o_series_names_get_the_reasoning_request_first_time() {
    let server = FixtureLlm::reasoning_model(Reply::text("ok"));
    let c = client(&server, "o3-mini");
    let r = ask(&c).unwrap();
    assert_eq!((r.content.as_str(), r.attempts), ("ok", 1));
    let reqs = server.requests();
    assert_eq!(reqs.len(), 1, "no rejected request first");
    assert_eq!(
        keys(&reqs[0].body),
        ["max_completion_tokens", "messages", "model"]
    );
    assert_eq!(reqs[0].body["max_completion_tokens"], 100);
}

#[test]
fn unknown_name_adapts_once_to_a_rejected_max_tokens_and_remembers() {
    // A server that only refuses max_tokens, exactly as OpenAI words it.
    let server = FixtureLlm::start(|req| {
        reasoning_model_rejection(req)
            .filter(|_| req.body.get("max_tokens").is_some())
            .unwrap_or_else(|| Reply::text("ok"))
    });
    let c = client(&server, "house-reasoner");
    let r = ask(&c).unwrap();
    assert_eq!(r.attempts, 2, "one adapted retry");
    let reqs = server.requests();
    assert_eq!(reqs.len(), 2);
    assert_eq!(reqs[0].body["max_tokens"], 100);
    assert!(reqs[1].body.get("max_tokens").is_none());
    assert_eq!(reqs[1].body["max_completion_tokens"], 100);
    assert_eq!(
        reqs[1].body["temperature"]
            .as_f64()
            .map(|t| (t * 10.0).round()),
        Some(7.0),
        "sampling parameters the server did not refuse are kept"
    );

    let r = ask(&c).unwrap();
    assert_eq!(r.attempts, 1);
    let reqs = server.requests();
    assert_eq!(
        reqs.len(),
        3,
        "the second call goes straight to the adapted form"
    );
    assert_eq!(reqs[2].body["max_completion_tokens"], 100);
    assert!(reqs[2].body.get("max_tokens").is_none());
}

#[test]
fn unknown_name_on_an_o_series_server_drops_each_refused_parameter() {
    let server = FixtureLlm::reasoning_model(Reply::text("ok"));
    let c = client(&server, "my-deployment");
    let r = ask(&c).unwrap();
    assert_eq!(
        r.attempts, 4,
        "max_tokens, temperature, top_p: one retry each"
    );
    let r = ask(&c).unwrap();
    assert_eq!(r.attempts, 1);
    let reqs = server.requests();
    assert_eq!(reqs.len(), 5);
    assert_eq!(
        keys(&reqs[4].body),
        ["max_completion_tokens", "messages", "model"]
    );
}

#[test]
fn other_bad_requests_fail_without_retrying() {
    let server = FixtureLlm::start(|_| {
        Reply::invalid_request(
            "The model 'nope' does not exist",
            "model",
            "model_not_found",
        )
    });
    let e = ask(&client(&server, "nope")).unwrap_err().to_string();
    assert!(e.contains("400") && e.contains("does not exist"), "{e}");
    assert_eq!(server.requests().len(), 1);

    // A server that keeps refusing a parameter the client already dropped
    // gets one adapted retry, not a loop.
    let server = FixtureLlm::start(|_| {
        Reply::invalid_request(
            "Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead.",
            "max_tokens",
            "unsupported_parameter",
        )
    });
    let e = ask(&client(&server, "stubborn")).unwrap_err().to_string();
    assert!(e.contains("max_tokens"), "{e}");
    assert_eq!(server.requests().len(), 2);
}

#[test]
fn server_errors_are_still_retried_with_the_adapted_shape() {
    let server = FixtureLlm::queue(vec![Reply::status(503)], Reply::text("ok"));
    let c = client(&server, "o4-mini");
    let r = ask(&c).unwrap();
    assert_eq!(r.attempts, 2);
    let reqs = server.requests();
    assert_eq!(reqs.len(), 2);
    assert!(reqs
        .iter()
        .all(|r| r.body.get("max_completion_tokens").is_some()));
}
