//! API errors: each a status code and a JSON body `{"error": "..."}`.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

/// Largest request body accepted, in bytes.
pub const BODY_LIMIT: usize = 1 << 20;

/// `Retry-After` of a 429, seconds: a place frees when an episode ends
/// (a client that can wait asks to, with `?wait=SECONDS`).
pub const RETRY_AFTER_BUSY: u32 = 1;

/// `Retry-After` of a 503 (the server drains before it exits; a
/// supervisor that restarts it takes a few seconds).
pub const RETRY_AFTER_DRAINING: u32 = 5;

/// Why a request failed.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The request is malformed (bad JSON, a bad id, a bad parameter).
    #[error("{0}")]
    BadRequest(String),
    /// A missing or wrong bearer token.
    #[error("missing or wrong bearer token")]
    Unauthorized,
    /// No such task, session or route.
    #[error("{0}")]
    NotFound(String),
    /// The session is busy with another step, or its episode is over.
    #[error("{0}")]
    Conflict(String),
    /// The body is larger than the server accepts.
    #[error("request body too large (limit {0} bytes)")]
    TooLarge(usize),
    /// The session limit or the token's quota is reached.
    #[error("{0}")]
    TooManySessions(String),
    /// The server is shutting down.
    #[error("the server is shutting down")]
    Draining,
    /// Something on the server's side failed (sandbox, workspace).
    #[error("{0}")]
    Internal(String),
    /// Any other status the HTTP layer decided (unsupported media type...).
    #[error("{1}")]
    Other(StatusCode, String),
}

impl ApiError {
    /// The HTTP status of this error.
    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ApiError::Unauthorized => StatusCode::UNAUTHORIZED,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::Conflict(_) => StatusCode::CONFLICT,
            ApiError::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::TooManySessions(_) => StatusCode::TOO_MANY_REQUESTS,
            ApiError::Draining => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
            ApiError::Other(status, _) => *status,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        let mut response = (
            status,
            axum::Json(serde_json::json!({ "error": self.to_string() })),
        )
            .into_response();
        let retry_after = match status {
            StatusCode::TOO_MANY_REQUESTS => Some(RETRY_AFTER_BUSY),
            StatusCode::SERVICE_UNAVAILABLE => Some(RETRY_AFTER_DRAINING),
            _ => None,
        };
        if let Some(secs) = retry_after {
            response
                .headers_mut()
                .insert(axum::http::header::RETRY_AFTER, secs.into());
        }
        if status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(
                axum::http::header::WWW_AUTHENTICATE,
                axum::http::HeaderValue::from_static("Bearer"),
            );
        }
        response
    }
}

impl From<axum::extract::rejection::JsonRejection> for ApiError {
    fn from(r: axum::extract::rejection::JsonRejection) -> Self {
        match r.status() {
            StatusCode::PAYLOAD_TOO_LARGE => ApiError::TooLarge(BODY_LIMIT),
            StatusCode::BAD_REQUEST | StatusCode::UNPROCESSABLE_ENTITY => {
                let text = r.body_text();
                ApiError::BadRequest(
                    unknown_field(&text, "the request body")
                        .unwrap_or_else(|| format!("invalid JSON body: {text}")),
                )
            }
            status => ApiError::Other(status, r.body_text()),
        }
    }
}

impl From<axum::extract::rejection::QueryRejection> for ApiError {
    fn from(r: axum::extract::rejection::QueryRejection) -> Self {
        let text = r.body_text();
        ApiError::BadRequest(
            unknown_field(&text, "the query").unwrap_or_else(|| format!("invalid query: {text}")),
        )
    }
}

/// serde's refusal of an unknown field (`unknown field `x`, expected one of
/// `a`, `b` at line 1 column 9`), as `unknown field "x" in WHERE (expected
/// one of "a", "b")`; `None` for any other error.
fn unknown_field(text: &str, place: &str) -> Option<String> {
    let rest = &text[text.find("unknown field `")? + "unknown field `".len()..];
    let (name, rest) = rest.split_once('`')?;
    let expected = rest
        .strip_prefix(", ")
        .map(|e| e.split(" at line ").next().unwrap_or(e).replace('`', "\""));
    Some(match expected {
        Some(e) if !e.is_empty() => format!("unknown field {name:?} in {place} ({e})"),
        _ => format!("unknown field {name:?} in {place}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_fields_are_named() {
        let serde = "Failed to deserialize the JSON body into the target type: unknown field `temprature`, expected one of `task_id`, `seed` at line 1 column 30";
        assert_eq!(
            unknown_field(serde, "the request body").unwrap(),
            "unknown field \"temprature\" in the request body (expected one of \"task_id\", \"seed\")"
        );
        assert_eq!(
            unknown_field("unknown field `x`, expected `reply`", "the request body").unwrap(),
            "unknown field \"x\" in the request body (expected \"reply\")"
        );
        assert_eq!(unknown_field("missing field `reply`", "the query"), None);
    }
}
