//! `endless serve`: the workspace's environments over HTTP/JSON, for RL
//! trainers on other machines or in other languages (SkyRL, Gymnasium
//! wrappers). One session is one episode in its own sandbox, driven by the
//! client's replies with the same episode rules as `endless eval`, and
//! recorded in the workspace like an eval episode.

mod app;
mod auth;
mod error;
mod http;
mod idempotency;
mod journal;
mod journal_dir;
mod metrics;
mod ndjson;
mod queue;
mod registry_guard;
mod routes;
mod sandbox_journal;
mod sandbox_limits;
mod sandbox_ops;
mod sandbox_routes;
mod sandbox_source;
mod sandboxes;
mod session_stream;
mod sessions;
mod slot;
mod tar_io;
mod tool_messages;
mod utf8_pieces;
mod waiters;
mod watch;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

pub use app::Settings;
pub use auth::{Auth, AuthError, Client};
pub use error::{ApiError, BODY_LIMIT};
pub use journal::{Entry as JournalEntry, Journal, Lost};
pub use queue::QueueLimits;
pub use sandbox_limits::SandboxLimits;

use crate::agent::BackendProvider;
use crate::store::Workspace;

/// Why the server could not run.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// A non-loopback address (given) was asked for with authentication off.
    #[error("refusing to serve on {0} without a token: non-loopback binds need authentication")]
    NoAuthOffLoopback(SocketAddr),
    /// A non-loopback address (given) was asked for with health and
    /// metrics open ([`Auth::with_open_metrics`]).
    #[error("refusing to serve /v1/health and /metrics without a token on {0}: open metrics ([serve] open_metrics, --open-metrics) need a loopback bind")]
    OpenMetricsOffLoopback(SocketAddr),
    /// The listening socket could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// The underlying error.
        source: std::io::Error,
    },
    /// Serving failed after startup.
    #[error("the server failed: {0}")]
    Io(#[from] std::io::Error),
}

/// Everything a server needs.
pub struct Server {
    /// The workspace whose tasks are served and where episodes are recorded.
    pub ws: Workspace,
    /// Opens a sandbox per session.
    pub provider: BackendProvider,
    /// Bearer tokens, or none (then only loopback binds are allowed).
    pub auth: Auth,
    /// Reward mode, timeouts and the default run.
    pub settings: Settings,
    /// Address to listen on.
    pub bind: SocketAddr,
    /// Open sessions at once, in all.
    pub max_sessions: usize,
    /// Open sessions at once per token.
    pub per_token: usize,
    /// The wait queue of creates over the limits: its length and longest wait.
    pub queue: QueueLimits,
    /// Where open sessions are journaled, so that a later server reports
    /// those a killed one left (none: not journaled).
    pub journal: Option<Journal>,
    /// Sessions lost by an earlier server, found by [`Server::recover_lost`].
    pub lost: Vec<Lost>,
}

impl Server {
    /// Record the sessions that servers killed before this one left open
    /// as interrupted episodes, and keep them for `/v1/health`; returns them.
    pub fn recover_lost(&mut self) -> Vec<Lost> {
        let Some(journal) = &self.journal else {
            return Vec::new();
        };
        let lost = journal.recover(&self.ws);
        for l in &lost {
            tracing::warn!(
                session = l.session_id,
                run = l.run_id,
                task = l.task_id,
                sample = l.sample,
                pid = l.pid,
                "a session lost by a server that died was recorded as interrupted"
            );
        }
        self.lost.extend(lost.iter().cloned());
        lost
    }

    /// Listen, then serve until SIGTERM or Ctrl-C: new requests get 503
    /// (until the server exits), requests in flight finish, sessions still
    /// open are recorded as interrupted. Prints `listening on ADDR` on
    /// stderr once bound, through `on_bound`.
    pub async fn run(self, on_bound: impl FnOnce(SocketAddr)) -> Result<(), ServeError> {
        self.run_until(on_bound, shutdown_signal()).await
    }

    /// [`Server::run`], stopping when `stop` resolves (or never, for a
    /// future that does not) instead of on a signal.
    pub async fn run_until(
        self,
        on_bound: impl FnOnce(SocketAddr),
        stop: impl std::future::Future<Output = ()>,
    ) -> Result<(), ServeError> {
        if !self.auth.is_enabled() && !self.bind.ip().is_loopback() {
            return Err(ServeError::NoAuthOffLoopback(self.bind));
        }
        if self.auth.metrics_open() && !self.bind.ip().is_loopback() {
            return Err(ServeError::OpenMetricsOffLoopback(self.bind));
        }
        let listener = tokio::net::TcpListener::bind(self.bind)
            .await
            .map_err(|source| ServeError::Bind {
                addr: self.bind,
                source,
            })?;
        let app = Arc::new(app::App {
            ws: parking_lot::Mutex::new(self.ws),
            provider: self.provider,
            registry: sessions::Registry::new(self.max_sessions, self.per_token)
                .with_queue(self.queue),
            metrics: metrics::Metrics::default(),
            auth: self.auth,
            settings: self.settings,
            draining: AtomicBool::new(false),
            in_flight: AtomicUsize::new(0),
            sandboxes: sandboxes::Sandboxes::new(
                self.max_sessions,
                self.per_token,
                self.journal
                    .as_ref()
                    .map(|j| sandbox_journal::SandboxJournal::in_dir(j.dir().join("sandboxes"))),
            )
            .with_queue(self.queue),
            journal: self.journal,
            lost: self.lost,
        });
        on_bound(listener.local_addr()?);
        let (stop_reaper, reaper_stopped) = tokio::sync::oneshot::channel();
        let reaper = tokio::spawn(reap_idle(app.clone(), reaper_stopped));
        let draining = app.clone();
        http::serve(
            listener,
            routes::router(app.clone()),
            app.settings.read_timeout,
            // The server keeps accepting while this runs: new requests get
            // 503 until it ends and the listener closes.
            async move {
                stop.await;
                draining.draining.store(true, Ordering::SeqCst);
                // Waiting creates are answered 503 now, not at their deadline.
                draining.registry.close_queue();
                draining.sandboxes.close_queue();
                tracing::info!("shutting down: new requests get 503");
                // The requests admitted before finish first.
                while draining.in_flight.load(Ordering::SeqCst) > 0 {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                // The reaper records the sessions it already took before it ends.
                let _ = stop_reaper.send(());
                let _ = reaper.await;
                let left = draining.registry.take_all();
                if !left.is_empty() {
                    tracing::info!(
                        sessions = left.len(),
                        "recording open sessions as interrupted"
                    );
                }
                let mut set = tokio::task::JoinSet::new();
                for slot in left {
                    let app = draining.clone();
                    set.spawn_blocking(move || app.abandon(&slot, "the server shut down"));
                }
                for sandbox in draining.sandboxes.take_all() {
                    set.spawn_blocking(move || {
                        sandboxes::shut(&sandbox);
                    });
                }
                while set.join_next().await.is_some() {}
            },
        )
        .await;
        Ok(())
    }
}

/// SIGTERM or Ctrl-C.
async fn shutdown_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = term => {},
        _ = tokio::signal::ctrl_c() => {},
    }
}

/// End and record sessions idle for longer than the idle timeout, until
/// `stop`; then wait until those it took are recorded (the server must not
/// exit with one half-written). A session counts as reaped once recorded.
async fn reap_idle(app: Arc<app::App>, mut stop: tokio::sync::oneshot::Receiver<()>) {
    let idle = app.settings.idle_timeout;
    let every = (idle / 4).clamp(Duration::from_millis(200), Duration::from_secs(30));
    let mut ending = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = &mut stop => break,
        }
        while ending.try_join_next().is_some() {}
        for sandbox in app.sandboxes.take_idle(idle) {
            tracing::info!(
                sandbox = sandbox.id,
                "deleting a sandbox idle for {} s",
                idle.as_secs()
            );
            ending.spawn_blocking(move || {
                sandboxes::shut(&sandbox);
            });
        }
        for slot in app.registry.take_idle(idle) {
            let app = app.clone();
            let why = format!("no request for {} s: the client went away", idle.as_secs());
            ending.spawn_blocking(move || {
                app.abandon(&slot, &why);
                app.metrics.reaped.fetch_add(1, Ordering::Relaxed);
            });
        }
    }
    while ending.join_next().await.is_some() {}
}
