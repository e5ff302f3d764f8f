//! The HTTP API, versioned under `/v1`, plus `GET /metrics`. Every route
//! needs a token; health and metrics only unless opened (see
//! [`super::auth`]).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{DefaultBodyLimit, Path, Query, Request, State};
use axum::http::HeaderMap;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;

use super::app::{App, Open, Opened, Stepped};
use super::error::{ApiError, BODY_LIMIT};
use crate::agent::protocol::Profile;
use crate::procgen::{task_split, Split};
use crate::store::{TaskFilter, TaskStatus};

type Shared = State<Arc<App>>;

/// The router over `app`.
pub fn router(app: Arc<App>) -> Router {
    Router::new()
        .route("/v1/health", get(health))
        .route("/v1/tasks", get(tasks))
        .route("/v1/sessions", post(open))
        .route("/v1/sessions/{id}/step", post(step))
        .route("/v1/sessions/{id}", axum::routing::delete(close))
        .route("/metrics", get(metrics))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn_with_state(app.clone(), body_in_time))
        .layer(middleware::from_fn_with_state(app.clone(), count_errors))
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .with_state(app)
}

/// Run blocking session work on tokio's blocking pool.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ApiError::Internal(format!("the session worker failed: {e}")))?
}

/// Count error responses by status.
async fn count_errors(State(app): Shared, request: Request, next: Next) -> Response {
    let response = next.run(request).await;
    let status = response.status();
    if status.is_client_error() || status.is_server_error() {
        app.metrics.error(status.as_u16());
    }
    response
}

/// Read the whole request body (up to [`BODY_LIMIT`]) within the read
/// timeout: a client that trickles its body gets 408, and holds no worker.
async fn body_in_time(State(app): Shared, request: Request, next: Next) -> Response {
    let (parts, body) = request.into_parts();
    let limit = app.settings.read_timeout;
    let bytes = match tokio::time::timeout(limit, axum::body::to_bytes(body, BODY_LIMIT)).await {
        Err(_) => {
            return ApiError::Other(
                axum::http::StatusCode::REQUEST_TIMEOUT,
                format!(
                    "the request body did not arrive within {:.0} s",
                    limit.as_secs_f64()
                ),
            )
            .into_response()
        }
        Ok(Err(e)) => {
            let inner = e.into_inner();
            if inner
                .downcast_ref::<http_body_util::LengthLimitError>()
                .is_some()
            {
                return ApiError::TooLarge(BODY_LIMIT).into_response();
            }
            return ApiError::BadRequest(format!("cannot read the request body: {inner}"))
                .into_response();
        }
        Ok(Ok(bytes)) => bytes,
    };
    next.run(Request::from_parts(parts, axum::body::Body::from(bytes)))
        .await
}

async fn not_found() -> ApiError {
    ApiError::NotFound("no such route (the API is under /v1)".into())
}

async fn method_not_allowed() -> ApiError {
    ApiError::Other(
        axum::http::StatusCode::METHOD_NOT_ALLOWED,
        "method not allowed on this route".into(),
    )
}

async fn health(
    State(app): Shared,
    headers: HeaderMap,
) -> Result<Json<serde_json::Value>, ApiError> {
    app.auth.check_metrics(&headers)?;
    Ok(Json(serde_json::json!({
        "status": if app.draining.load(Ordering::Relaxed) { "draining" } else { "ok" },
        "version": env!("CARGO_PKG_VERSION"),
        "sessions": app.registry.open_count(),
        "max_sessions": app.registry.max_sessions,
        "lost_sessions": app.lost.len(),
    })))
}

async fn metrics(State(app): Shared, headers: HeaderMap) -> Result<impl IntoResponse, ApiError> {
    app.auth.check_metrics(&headers)?;
    Ok((
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        app.metrics.render(app.registry.open_count()),
    ))
}

/// `GET /v1/tasks` filters.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TaskQuery {
    status: Option<TaskStatus>,
    category: Option<String>,
    /// `train` or `dev` (procedural tasks only).
    split: Option<String>,
}

async fn tasks(
    State(app): Shared,
    headers: HeaderMap,
    query: Result<Query<TaskQuery>, QueryRejection>,
) -> Result<Json<Vec<serde_json::Value>>, ApiError> {
    app.auth.check(&headers)?;
    let Query(q) = query?;
    let split = match q.split.as_deref() {
        None => None,
        Some("train") => Some(Split::Train),
        Some("dev") => Some(Split::Dev),
        Some(other) => {
            return Err(ApiError::BadRequest(format!(
                "unknown split {other:?} (train or dev)"
            )))
        }
    };
    blocking(move || {
        let ws = app.ws.lock();
        let filter = TaskFilter {
            status: q.status,
            category: q.category,
            search: None,
        };
        let rows = ws
            .list_tasks(&filter)
            .map_err(|e| ApiError::Internal(e.to_string()))?;
        let mut out = Vec::new();
        for r in rows {
            let task_split = ws.load_task(&r.id).ok().and_then(|t| task_split(&t));
            if split.is_some() && task_split != split {
                continue;
            }
            out.push(serde_json::json!({
                "id": r.id, "category": r.category, "complexity": r.complexity,
                "status": r.status,
                "split": task_split.map(|s| if s == Split::Dev { "dev" } else { "train" }),
            }));
        }
        Ok(Json(out))
    })
    .await
}

/// `POST /v1/sessions` body.
#[derive(Debug, Deserialize)]
struct OpenBody {
    task_id: String,
    max_turns: Option<u32>,
    seed: Option<u64>,
    /// Record under run `serve-<run>` instead of the server's run.
    run: Option<String>,
    /// Label of the policy in the recorded episode (default `http`).
    policy: Option<String>,
    /// Protocol profile, `endless` or `reference` (default: the server's
    /// `--protocol`).
    protocol: Option<String>,
}

async fn open(
    State(app): Shared,
    headers: HeaderMap,
    body: Result<Json<OpenBody>, JsonRejection>,
) -> Result<Json<Opened>, ApiError> {
    let client = app.auth.check(&headers)?;
    let Json(b) = body?;
    if b.max_turns == Some(0) {
        return Err(ApiError::BadRequest("max_turns must be at least 1".into()));
    }
    let policy = b.policy.unwrap_or_else(|| "http".into());
    if policy.is_empty() || policy.len() > 128 || policy.chars().any(char::is_control) {
        return Err(ApiError::BadRequest(
            "policy: 1-128 printable characters".into(),
        ));
    }
    let protocol = match b.protocol.as_deref() {
        None => None,
        Some(name) => {
            Some(Profile::parse(name).map_err(|e| ApiError::BadRequest(format!("protocol: {e}")))?)
        }
    };
    let open = Open {
        task_id: b.task_id,
        max_turns: b.max_turns,
        seed: b.seed,
        run: b.run,
        policy,
        protocol,
    };
    blocking(move || app.open(client, open)).await.map(Json)
}

/// `POST /v1/sessions/{id}/step` body.
#[derive(Debug, Deserialize)]
struct StepBody {
    reply: String,
}

async fn step(
    State(app): Shared,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Result<Json<StepBody>, JsonRejection>,
) -> Result<Json<Stepped>, ApiError> {
    let client = app.auth.check(&headers)?;
    let slot = app.registry.get(&id, &client)?;
    let Json(b) = body?;
    blocking(move || app.step(&slot, &b.reply)).await.map(Json)
}

async fn close(
    State(app): Shared,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let client = app.auth.check(&headers)?;
    let slot = app.registry.get(&id, &client)?;
    let answer = blocking(move || {
        let answer = app.close(&slot, "the client deleted the session")?;
        Ok(serde_json::json!({ "session_id": slot.id, "result": answer }))
    })
    .await?;
    Ok(Json(answer))
}
