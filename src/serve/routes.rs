//! The HTTP API, versioned under `/v1`, plus `GET /metrics`. Every route
//! needs a token; health and metrics only unless opened (see
//! [`super::auth`]).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{DefaultBodyLimit, Path, Query, Request, State};
use axum::http::HeaderMap;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;

use super::app::{App, Open, SessionView, Stepped};
use super::error::{ApiError, BODY_LIMIT};
use super::idempotency::{self, Key};
use super::queue::{self, Acquired};
use super::sandbox_routes as sb;
use super::session_stream;
use crate::agent::protocol::Profile;
use crate::procgen::{task_split, Split};
use crate::store::{TaskFilter, TaskStatus};

type Shared = State<Arc<App>>;

/// The router over `app`.
pub fn router(app: Arc<App>) -> Router {
    Router::new()
        .route("/v1/health", get(health))
        .route("/v1/openapi.json", get(openapi))
        .route("/v1/tasks", get(tasks))
        .route("/v1/sessions", get(list).post(open))
        .route("/v1/sessions/{id}/step", post(step))
        .route("/v1/sessions/{id}/stream", get(session_stream::stream))
        .route("/v1/sessions/{id}", get(show).delete(close))
        .route("/v1/sandboxes", get(sb::list).post(sb::create))
        .route("/v1/sandboxes/{id}", get(sb::show).delete(sb::delete))
        .route("/v1/sandboxes/{id}/exec", post(sb::exec))
        .route("/v1/sandboxes/{id}/files", get(sb::pack).put(sb::unpack))
        .route("/metrics", get(metrics))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn_with_state(app.clone(), body_in_time))
        .layer(middleware::from_fn_with_state(
            app.clone(),
            refuse_when_draining,
        ))
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

/// While the server drains (after SIGTERM), answer every new request 503
/// with a JSON error, `GET /metrics` excepted (the final counters stay
/// readable); the requests admitted before are counted in
/// [`App::in_flight`], and the drain waits for them.
async fn refuse_when_draining(State(app): Shared, request: Request, next: Next) -> Response {
    // Counted before the check (the drain sets the flag, then reads the
    // count): a request either sees the flag or is waited for.
    let _admitted = InFlight::enter(&app);
    if app.draining.load(Ordering::SeqCst) && request.uri().path() != "/metrics" {
        return ApiError::Draining.into_response();
    }
    next.run(request).await
}

/// One request in [`App::in_flight`], until dropped (also when the client
/// goes away mid-request).
struct InFlight<'a>(&'a App);

impl<'a> InFlight<'a> {
    fn enter(app: &'a App) -> Self {
        app.in_flight.fetch_add(1, Ordering::SeqCst);
        Self(app)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Read the whole request body (up to [`BODY_LIMIT`]) within the read
/// timeout: a client that trickles its body gets 408, and holds no worker.
async fn body_in_time(State(app): Shared, request: Request, next: Next) -> Response {
    let (parts, body) = request.into_parts();
    let limit = app.settings.read_timeout;
    // Sandbox routes carry archives: a larger limit of their own.
    let max = sb::body_limit(parts.uri.path());
    let bytes = match tokio::time::timeout(limit, axum::body::to_bytes(body, max)).await {
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
                return ApiError::TooLarge(max).into_response();
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
        "queued": app.registry.waiting(),
        "allocator": crate::allocator::name(),
        "lost_sessions": app.lost.len(),
        "sandboxes": app.sandboxes.open_count(),
        "queued_sandboxes": app.sandboxes.waiting(),
        "lost_sandboxes": app.sandboxes.lost.len(),
    })))
}

/// The OpenAPI 3 document of this API (hand-written; a test checks that it
/// lists every route of [`router`]).
pub const OPENAPI: &str = include_str!("../../assets/serve/openapi.json");

async fn openapi(State(app): Shared, headers: HeaderMap) -> Result<impl IntoResponse, ApiError> {
    app.auth.check(&headers)?;
    Ok((
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        OPENAPI,
    ))
}

async fn metrics(State(app): Shared, headers: HeaderMap) -> Result<impl IntoResponse, ApiError> {
    app.auth.check_metrics(&headers)?;
    Ok((
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        app.metrics.render(app.registry.open_count())
            + &app
                .provider
                .backend()
                .pool_stats()
                .map(|p| super::metrics::render_pool(&p))
                .unwrap_or_default(),
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

/// `POST /v1/sessions` body (an unknown field is a 400 naming it).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
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

/// `POST /v1/sessions` query: how long to wait in line for a place.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct OpenQuery {
    wait: Option<f64>,
}

/// A JSON body kept as bytes (a replayed answer is sent as first encoded).
fn json_bytes(body: Bytes) -> Response {
    (
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response()
}

async fn open(
    State(app): Shared,
    headers: HeaderMap,
    query: Result<Query<OpenQuery>, QueryRejection>,
    body: Result<Json<OpenBody>, JsonRejection>,
) -> Result<Response, ApiError> {
    let client = app.auth.check(&headers)?;
    let Query(q) = query?;
    let Json(b) = body?;
    let key = Key::from_headers(&headers)?;
    let wait = queue::asked_wait(q.wait, &headers, app.registry.queue.max_wait)?;
    if b.max_turns == Some(0) {
        return Err(ApiError::BadRequest("max_turns must be at least 1".into()));
    }
    let key = key.map(|k| {
        let asked = format!("{b:?}");
        (k, idempotency::fingerprint(&[asked.as_bytes()]))
    });
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
    let new = {
        let (app, open) = (app.clone(), open.clone());
        blocking(move || app.prepare(client, &open, key)).await?
    };
    match queue::acquire(&app.registry, new, wait).await? {
        Acquired::New(slot) => blocking(move || app.start(&slot, open))
            .await
            .map(json_bytes),
        Acquired::Existing(slot) => queue::first_answer(&app.registry, &slot)
            .await
            .map(json_bytes),
    }
}

/// `POST /v1/sessions/{id}/step` body (an unknown field is a 400 naming it).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct StepBody {
    /// The model's reply as text.
    #[serde(default)]
    reply: Option<String>,
    /// The model's reply as an assistant message (with `tool_calls`).
    #[serde(default)]
    message: Option<super::tool_messages::StepMessage>,
}

async fn step(
    State(app): Shared,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Result<Json<StepBody>, JsonRejection>,
) -> Result<Response, ApiError> {
    let client = app.auth.check(&headers)?;
    let slot = app.registry.get(&id, &client)?;
    let Json(b) = body?;
    let reply = super::tool_messages::reply_message(b.reply, b.message)?;
    // With a key, a retried step gets the first one's answer (see
    // `App::step_once`).
    match Key::from_headers(&headers)? {
        Some(key) => blocking(move || app.step_once(&slot, &reply, key))
            .await
            .map(json_bytes),
        None => blocking(move || app.step(&slot, &reply))
            .await
            .map(|s: Stepped| {
                // The episode's own time (W3C Server-Timing), for
                // clients that measure the server's overhead.
                let timing = format!("step;dur={:.3}", s.step_secs * 1e3);
                ([("server-timing", timing)], Json(s)).into_response()
            }),
    }
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

/// `GET /v1/sessions/{id}`: one of the caller's sessions.
async fn show(
    State(app): Shared,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Json<SessionView>, ApiError> {
    let client = app.auth.check(&headers)?;
    let slot = app.registry.get(&id, &client)?;
    blocking(move || Ok(app.describe(&slot))).await.map(Json)
}

/// `GET /v1/sessions`: the caller's sessions, oldest first.
async fn list(State(app): Shared, headers: HeaderMap) -> Result<Json<Vec<SessionView>>, ApiError> {
    let client = app.auth.check(&headers)?;
    let slots = app.registry.of(&client);
    blocking(move || Ok(slots.iter().map(|s| app.describe(s)).collect()))
        .await
        .map(Json)
}

#[cfg(test)]
mod tests {
    /// Every `(method, path)` that `router` routes, read from its source.
    fn routed() -> Vec<(String, String)> {
        let source = include_str!("routes.rs");
        let body = &source[source.find("pub fn router(").unwrap()..];
        let body = &body[..body.find("\n}\n").unwrap()];
        let mut out = Vec::new();
        for line in body.lines().map(str::trim) {
            let Some(rest) = line.strip_prefix(".route(\"") else {
                continue;
            };
            let (path, handlers) = rest.split_once('"').unwrap();
            for method in ["get", "post", "put", "patch", "delete"] {
                let called = handlers
                    .match_indices(&format!("{method}("))
                    .any(|(i, _)| i == 0 || !handlers.as_bytes()[i - 1].is_ascii_alphanumeric());
                if called {
                    out.push((method.to_string(), path.to_string()));
                }
            }
        }
        out
    }

    #[test]
    fn the_openapi_document_lists_every_route() {
        let doc: serde_json::Value = serde_json::from_str(super::OPENAPI).unwrap();
        assert!(doc["openapi"].as_str().unwrap().starts_with("3."));
        let routes = routed();
        assert!(routes.len() >= 8, "{routes:?}");
        for (method, path) in &routes {
            assert!(
                doc["paths"][path][method].is_object(),
                "{} {path} is missing from assets/serve/openapi.json",
                method.to_uppercase()
            );
        }
        // And nothing else.
        let documented: usize = doc["paths"]
            .as_object()
            .unwrap()
            .values()
            .map(|ops| {
                ops.as_object()
                    .unwrap()
                    .keys()
                    .filter(|k| *k != "parameters")
                    .count()
            })
            .sum();
        assert_eq!(documented, routes.len(), "{routes:?}");
    }
}
