//! The handlers of `/v1/sandboxes`: create (from a task, an uploaded
//! environment directory or an image), list, show, delete, exec (output as
//! NDJSON lines sent as the command writes it, then the exit status), and
//! files up and down as tar.
//! Every route needs a token, and a token sees only its own sandboxes.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use base64::Engine;
use serde::Deserialize;

use super::app::App;
use super::error::ApiError;
use super::ndjson::Lines;
use super::sandbox_limits::Shape;
use super::sandbox_ops::{self, ExecRequest, Identity, OpError};
use super::sandbox_source::{task_for, Source, SourceError};
use super::sandboxes::{shut, Sandbox, SandboxState};
use super::tar_io::{check_upload, sandbox_path};
use crate::agent::{SandboxProvider, StartOptions};

type Shared = State<Arc<App>>;

/// Largest request body of a sandbox route (an uploaded archive, an
/// environment in a create).
pub const SANDBOX_BODY_LIMIT: usize = 256 << 20;

/// A command's limit when the client names none.
const DEFAULT_EXEC_TIMEOUT: Duration = Duration::from_secs(3600);
/// The longest limit a client may ask for.
const MAX_EXEC_TIMEOUT: Duration = Duration::from_secs(24 * 3600);
/// Limit of packing or unpacking one archive.
const TRANSFER_TIMEOUT: Duration = Duration::from_secs(600);
/// Bytes of output per NDJSON line.
const LINE_BYTES: usize = 64 * 1024;

/// The body limit of a request to `path`: sandbox routes carry archives.
pub fn body_limit(path: &str) -> usize {
    if path.starts_with("/v1/sandboxes") {
        SANDBOX_BODY_LIMIT
    } else {
        super::error::BODY_LIMIT
    }
}

/// Run blocking sandbox work on tokio's blocking pool.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ApiError::Internal(format!("the sandbox worker failed: {e}")))?
}

/// Read a JSON body (already buffered, see `routes::body_in_time`).
async fn json_body<T: serde::de::DeserializeOwned>(body: Body) -> Result<T, ApiError> {
    let bytes = axum::body::to_bytes(body, SANDBOX_BODY_LIMIT)
        .await
        .map_err(|e| ApiError::BadRequest(format!("cannot read the request body: {e}")))?;
    serde_json::from_slice(&bytes)
        .map_err(|e| ApiError::BadRequest(format!("invalid JSON body: {e}")))
}

impl From<SourceError> for ApiError {
    fn from(e: SourceError) -> Self {
        match e {
            SourceError::NoTask(_) => ApiError::NotFound(e.to_string()),
            SourceError::Io(_) => ApiError::Internal(e.to_string()),
            SourceError::Invalid(_) | SourceError::Archive(_) => {
                ApiError::BadRequest(e.to_string())
            }
        }
    }
}

impl From<OpError> for ApiError {
    fn from(e: OpError) -> Self {
        match e {
            OpError::Missing(_) => ApiError::NotFound(e.to_string()),
            OpError::TooLarge(_) => ApiError::Other(StatusCode::PAYLOAD_TOO_LARGE, e.to_string()),
            OpError::Failed { .. } | OpError::User(_) => ApiError::BadRequest(e.to_string()),
            OpError::Sandbox(_) => ApiError::Internal(e.to_string()),
        }
    }
}

/// `POST /v1/sandboxes` body: exactly one of `task_id`, `environment` (a
/// base64 tar, plain or gzip, of an environment directory with its
/// Dockerfile) or `image`; `image` with `environment` is the base of an
/// environment without a Dockerfile.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateBody {
    task_id: Option<String>,
    environment: Option<String>,
    image: Option<String>,
    workdir: Option<String>,
    cpus: Option<f64>,
    memory_mb: Option<u64>,
    storage_mb: Option<u64>,
    /// Wall-clock limit of the sandbox, in seconds.
    lifetime_sec: Option<f64>,
    /// Network access (Harbor's `network_mode = "public"`); default none.
    #[serde(default)]
    network: bool,
}

impl CreateBody {
    fn source(&mut self) -> Result<Source, ApiError> {
        let bad = |m: &str| ApiError::BadRequest(m.to_string());
        match (
            self.task_id.take(),
            self.environment.take(),
            self.image.take(),
        ) {
            (Some(id), None, None) => Ok(Source::Task(id)),
            (None, Some(env), image) => {
                let archive = base64::engine::general_purpose::STANDARD
                    .decode(env.as_bytes())
                    .map_err(|e| bad(&format!("environment: not base64: {e}")))?;
                Ok(Source::Environment { archive, image })
            }
            (None, None, Some(image)) => Ok(Source::Image(image)),
            (None, None, None) => Err(bad(
                "name what the sandbox starts from: task_id, environment or image",
            )),
            _ => Err(bad("task_id cannot be combined with environment or image")),
        }
    }

    fn shape(&self) -> Result<Shape, ApiError> {
        let workdir = match &self.workdir {
            Some(w) => {
                Some(sandbox_path(w).map_err(|e| ApiError::BadRequest(format!("workdir: {e}")))?)
            }
            None => None,
        };
        let lifetime = match self.lifetime_sec {
            Some(s) if s.is_finite() && s > 0.0 && s <= MAX_EXEC_TIMEOUT.as_secs_f64() => {
                Some(Duration::from_secs_f64(s))
            }
            Some(_) => {
                return Err(ApiError::BadRequest(
                    "lifetime_sec: seconds, above 0 and at most a day".into(),
                ))
            }
            None => None,
        };
        Ok(Shape {
            workdir,
            cpus: self.cpus,
            memory_mb: self.memory_mb,
            storage_mb: self.storage_mb,
            lifetime,
            network: self.network,
        })
    }
}

/// How long a create waits in line for a place when it does not say
/// (`?wait=` or `Prefer: wait=`), cut to `--max-wait`: a Harbor job with
/// more trials in flight than the server's `--max-sessions` just queues.
const DEFAULT_CREATE_WAIT: Duration = Duration::from_secs(600);

/// `POST /v1/sandboxes` query: how long to wait in line for a place.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateQuery {
    wait: Option<f64>,
}

/// `POST /v1/sandboxes`: over `--max-sessions`, waits in line for a place
/// (`?wait=SECONDS` or `Prefer: wait=SECONDS`, default 600, at most
/// `--max-wait`; `wait=0`: a 429 at once).
pub async fn create(
    State(app): Shared,
    headers: HeaderMap,
    query: Result<Query<CreateQuery>, QueryRejection>,
    body: Body,
) -> Result<(StatusCode, Json<serde_json::Value>), ApiError> {
    let client = app.auth.check(&headers)?;
    let Query(q) = query?;
    let mut b: CreateBody = json_body(body).await?;
    let source = b.source()?;
    let shape = b.shape()?;
    let max_wait = app.sandboxes.max_wait();
    let wait = match (q.wait, super::queue::prefer_wait(&headers)?) {
        (None, None) => DEFAULT_CREATE_WAIT.min(max_wait),
        (asked, _) => super::queue::asked_wait(asked, &headers, max_wait)?,
    };
    if app.draining.load(Ordering::Relaxed) {
        return Err(ApiError::Draining);
    }
    let sandbox = app.sandboxes.acquire(client, source.label(), wait).await?;
    blocking(move || {
        let started = start(&app, &sandbox, &source, &shape);
        if let Err(e) = started {
            // Its place is given up once it is shut.
            shut(&sandbox);
            app.sandboxes.remove(&sandbox.id);
            return Err(e);
        }
        sandbox.touch();
        Ok((StatusCode::CREATED, Json(sandbox.view())))
    })
    .await
}

/// Build and start `sandbox`, learn who runs in it, journal it.
fn start(app: &App, sandbox: &Sandbox, source: &Source, shape: &Shape) -> Result<(), ApiError> {
    let task = task_for(source, shape, &app.settings.sandbox, &app.ws)?;
    let mut session = app
        .provider
        .start(&task, &StartOptions { record: None })
        .map_err(|e| ApiError::Internal(e.message))?;
    sandbox.arm(&session);
    let who = sandbox_ops::identity(&mut session)?;
    let _ = sandbox.identity.set(who);
    {
        // A deletion marks it closing before it takes the state: either it
        // is seen here, or the deletion finds the session and shuts it.
        let mut state = sandbox.state.lock();
        if sandbox.is_closing() {
            drop(state);
            session.close();
            return Err(ApiError::Conflict(
                "the sandbox was deleted while it started".into(),
            ));
        }
        *state = SandboxState::Ready(Box::new(session));
    }
    app.sandboxes.journal(sandbox)
}

/// `GET /v1/sandboxes`: the caller's sandboxes, oldest first.
pub async fn list(
    State(app): Shared,
    headers: HeaderMap,
) -> Result<Json<Vec<serde_json::Value>>, ApiError> {
    let client = app.auth.check(&headers)?;
    Ok(Json(
        app.sandboxes.of(&client).iter().map(|s| s.view()).collect(),
    ))
}

/// `GET /v1/sandboxes/{id}`.
pub async fn show(
    State(app): Shared,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let client = app.auth.check(&headers)?;
    Ok(Json(app.sandboxes.get(&id, &client)?.view()))
}

/// `DELETE /v1/sandboxes/{id}`: every process of the sandbox ends (a
/// running command's too), its files are gone. It counts against the
/// quotas until then: answered once it is shut (one still starting is
/// given up by its create, which then frees its place).
pub async fn delete(
    State(app): Shared,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let client = app.auth.check(&headers)?;
    let sandbox = app.sandboxes.get(&id, &client)?;
    blocking(move || {
        if !shut(&sandbox) {
            app.sandboxes.remove(&sandbox.id);
        }
        Ok(Json(
            serde_json::json!({ "sandbox_id": sandbox.id, "deleted": true }),
        ))
    })
    .await
}

/// Run `f` on the ready session of `sandbox` (waiting for a request
/// using it), marking it used before and after. Blocking.
fn with_session<T>(
    sandbox: &Sandbox,
    f: impl FnOnce(&mut crate::sandbox::Session, &Identity) -> Result<T, ApiError>,
) -> Result<T, ApiError> {
    sandbox.touch();
    let mut state = sandbox.state.lock();
    if sandbox.is_closing() {
        return Err(ApiError::NotFound(format!("no sandbox {}", sandbox.id)));
    }
    let who = sandbox
        .identity
        .get()
        .ok_or_else(|| ApiError::Conflict("the sandbox is still starting".into()))?;
    let out = match &mut *state {
        SandboxState::Ready(session) => f(session, who),
        SandboxState::Starting => Err(ApiError::Conflict("the sandbox is still starting".into())),
        SandboxState::Closed => Err(ApiError::NotFound(format!("no sandbox {}", sandbox.id))),
    };
    sandbox.touch();
    out
}

/// `POST /v1/sandboxes/{id}/exec` body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ExecBody {
    command: String,
    cwd: Option<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    /// A user name or uid: the sandbox's own user, or (where the sandbox
    /// maps them) another account of its `/etc/passwd`.
    user: Option<serde_json::Value>,
    timeout_sec: Option<f64>,
}

fn exec_request(b: ExecBody) -> Result<ExecRequest, ApiError> {
    if b.command.contains('\0') {
        return Err(ApiError::BadRequest("command: holds a NUL byte".into()));
    }
    let cwd = match &b.cwd {
        Some(c) => Some(sandbox_path(c).map_err(|e| ApiError::BadRequest(format!("cwd: {e}")))?),
        None => None,
    };
    for (k, v) in &b.env {
        let name_ok = !k.is_empty()
            && !k.starts_with(|c: char| c.is_ascii_digit())
            && k.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_');
        if !name_ok {
            return Err(ApiError::BadRequest(format!(
                "env: {k:?} is not a variable name (letters, digits, _)"
            )));
        }
        if v.contains('\0') {
            return Err(ApiError::BadRequest(format!(
                "env: the value of {k} holds a NUL byte"
            )));
        }
    }
    let timeout = match b.timeout_sec {
        None => DEFAULT_EXEC_TIMEOUT,
        Some(s) if s.is_finite() && s > 0.0 => Duration::from_secs_f64(s).min(MAX_EXEC_TIMEOUT),
        Some(_) => return Err(ApiError::BadRequest("timeout_sec: seconds, above 0".into())),
    };
    Ok(ExecRequest {
        command: b.command,
        cwd,
        env: b.env.into_iter().collect(),
        timeout,
    })
}

/// `POST /v1/sandboxes/{id}/exec`: the command's output as NDJSON lines
/// (`{"stream": "stdout"|"stderr", "data": ...}`, at most 64 KiB each),
/// sent as the command writes it, then `{"exit_code", "timed_out",
/// "duration_secs"}` (with `"error"` when the sandbox failed mid-command).
/// A request refused before the command starts (bad user, sandbox still
/// starting or gone) is an error status, not a stream. A client that goes
/// away (its connection closed) takes its command along: it is killed,
/// and the sandbox counts as idle from then on.
pub async fn exec(
    State(app): Shared,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Body,
) -> Result<Response, ApiError> {
    let client = app.auth.check(&headers)?;
    let sandbox = app.sandboxes.get(&id, &client)?;
    let b: ExecBody = json_body(body).await?;
    let user = b.user.clone();
    let req = exec_request(b)?;
    let (head_tx, head_rx) = tokio::sync::oneshot::channel();
    let (lines, response) = Lines::channel();
    let cancel = Arc::new(AtomicBool::new(false));
    let (done_tx, done_rx) = tokio::sync::oneshot::channel::<()>();
    // The request is in flight until its command ends or its client goes
    // away, whichever comes first (it is killed then).
    let busy = sandbox.busy();
    let watched = lines.clone();
    let stop = cancel.clone();
    tokio::spawn(async move {
        tokio::select! {
            _ = watched.closed() => stop.store(true, Ordering::SeqCst),
            _ = done_rx => {}
        }
        drop(busy);
    });
    tokio::task::spawn_blocking(move || {
        run_exec(&sandbox, user.as_ref(), &req, &cancel, head_tx, &lines);
        drop(done_tx);
    });
    match head_rx.await {
        Ok(Ok(())) => Ok(response),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(ApiError::Internal("the sandbox worker failed".into())),
    }
}

/// Run an exec for [`exec`]: `head` learns whether the command started
/// (or why not), then its output and final line go to `lines`; setting
/// `cancel` kills the command. Blocking.
fn run_exec(
    sandbox: &Sandbox,
    user: Option<&serde_json::Value>,
    req: &ExecRequest,
    cancel: &AtomicBool,
    head: tokio::sync::oneshot::Sender<Result<(), ApiError>>,
    lines: &Lines,
) {
    let mut head = Some(head);
    let ran = with_session(sandbox, |session, who| {
        let account = sandbox_ops::resolve_user(session, who, user)?;
        let mut started = || {
            if let Some(h) = head.take() {
                let _ = h.send(Ok(()));
            }
        };
        let mut output = |stream: sandbox_ops::Stream, text: &str| {
            for piece in pieces(text, LINE_BYTES) {
                // A client gone away reads nothing more; its command is
                // being killed (see `exec`).
                lines.blocking_send(&serde_json::json!({ "stream": stream.name(), "data": piece }));
            }
        };
        Ok(sandbox_ops::exec(
            session,
            who,
            account.as_ref(),
            req,
            cancel,
            &mut started,
            &mut output,
        )?)
    });
    match ran {
        Ok(end) => {
            lines.blocking_send(&serde_json::json!({
                "exit_code": end.exit_code,
                "timed_out": end.timed_out,
                "truncated": end.truncated,
                "duration_secs": end.duration.as_secs_f64(),
            }));
        }
        Err(e) => match head.take() {
            Some(h) => {
                let _ = h.send(Err(e));
            }
            None => {
                lines.blocking_send(&serde_json::json!({
                    "exit_code": null,
                    "timed_out": false,
                    "error": e.to_string(),
                }));
            }
        },
    }
}

/// `text` in pieces of at most `max` bytes, cut at character boundaries.
fn pieces(text: &str, max: usize) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let mut cut = rest.len().min(max);
        while !rest.is_char_boundary(cut) {
            cut -= 1;
        }
        out.push(&rest[..cut]);
        rest = &rest[cut..];
    }
    out
}

/// `?path=` of the file routes.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PathQuery {
    path: String,
}

/// `PUT /v1/sandboxes/{id}/files?path=DIR`: unpack the tar body into
/// directory `DIR` (created when missing).
pub async fn unpack(
    State(app): Shared,
    headers: HeaderMap,
    Path(id): Path<String>,
    query: Result<Query<PathQuery>, QueryRejection>,
    body: Body,
) -> Result<Json<serde_json::Value>, ApiError> {
    let client = app.auth.check(&headers)?;
    let sandbox = app.sandboxes.get(&id, &client)?;
    let Query(q) = query?;
    let dir = sandbox_path(&q.path).map_err(|e| ApiError::BadRequest(e.to_string()))?;
    let archive = axum::body::to_bytes(body, SANDBOX_BODY_LIMIT)
        .await
        .map_err(|e| ApiError::BadRequest(format!("cannot read the archive: {e}")))?
        .to_vec();
    let checked = check_upload(&archive).map_err(|e| ApiError::BadRequest(e.to_string()))?;
    let target = dir.clone();
    blocking(move || {
        let _busy = sandbox.busy();
        with_session(&sandbox, |session, who| {
            Ok(sandbox_ops::upload(
                session,
                who,
                &target,
                archive,
                TRANSFER_TIMEOUT,
            )?)
        })
    })
    .await?;
    Ok(Json(serde_json::json!({
        "path": dir, "entries": checked.entries, "bytes": checked.bytes,
    })))
}

/// `GET /v1/sandboxes/{id}/files?path=PATH`: a tar of `PATH` (a
/// directory's content, or one file under its own name).
pub async fn pack(
    State(app): Shared,
    headers: HeaderMap,
    Path(id): Path<String>,
    query: Result<Query<PathQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let client = app.auth.check(&headers)?;
    let sandbox = app.sandboxes.get(&id, &client)?;
    let Query(q) = query?;
    let path = sandbox_path(&q.path).map_err(|e| ApiError::BadRequest(e.to_string()))?;
    let archive = blocking(move || {
        let _busy = sandbox.busy();
        with_session(&sandbox, |session, who| {
            Ok(sandbox_ops::download(
                session,
                who,
                &path,
                TRANSFER_TIMEOUT,
            )?)
        })
    })
    .await?;
    Ok(([(header::CONTENT_TYPE, "application/x-tar")], archive).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exec_requests_are_checked_by_field() {
        let body = |v: serde_json::Value| exec_request(serde_json::from_value(v).unwrap());
        let e = body(serde_json::json!({"command": "ls", "cwd": "/a/../b"})).unwrap_err();
        assert!(e.to_string().starts_with("cwd:"), "{e}");
        let e = body(serde_json::json!({"command": "ls", "env": {"A B": "x"}})).unwrap_err();
        assert!(e.to_string().starts_with("env:"), "{e}");
        let e = body(serde_json::json!({"command": "ls", "timeout_sec": -1})).unwrap_err();
        assert!(e.to_string().starts_with("timeout_sec:"), "{e}");
        let r = body(serde_json::json!({"command": "ls", "timeout_sec": 5, "env": {"A": "1"}}))
            .unwrap();
        assert_eq!(r.timeout, Duration::from_secs(5));
        assert_eq!(r.env, [("A".to_string(), "1".to_string())]);
    }

    #[test]
    fn output_is_cut_at_character_boundaries() {
        let text = "é".repeat(10);
        let parts = pieces(&text, 3);
        assert!(parts.iter().all(|p| p.len() <= 3));
        assert_eq!(parts.concat(), text);
        assert!(pieces("", 3).is_empty());
    }
}
