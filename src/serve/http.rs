//! The accept loop: HTTP/1.1 connections served by hyper with a header read
//! timeout (a slow-loris client that trickles its headers is dropped), and
//! a graceful shutdown (no new connections; requests in flight finish).
//! `axum::serve` has no header timeout, hence this small loop.

use std::future::Future;
use std::pin::pin;
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;

/// Serve `router` on `listener` until `shutdown` resolves (new connections
/// are accepted while it runs: the server drains then, see
/// [`super::Server::run_until`]), then close the listener and wait for the
/// connections to finish their requests. Clients get `read_timeout` to
/// send a request's headers.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    read_timeout: Duration,
    shutdown: impl Future<Output = ()>,
) {
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut connections = JoinSet::new();
    let mut shutdown = pin!(shutdown);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let stream = match accepted {
                    Ok((stream, _)) => stream,
                    Err(e) => {
                        // Out of file descriptors and the like: wait, go on.
                        tracing::warn!(%e, "cannot accept a connection");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                let _ = stream.set_nodelay(true);
                let service = TowerToHyperService::new(router.clone());
                let mut stop = stop_rx.clone();
                connections.spawn(async move {
                    let mut builder = http1::Builder::new();
                    builder.timer(TokioTimer::new()).header_read_timeout(read_timeout);
                    let mut conn = pin!(builder.serve_connection(TokioIo::new(stream), service));
                    tokio::select! {
                        result = conn.as_mut() => {
                            if let Err(e) = result {
                                tracing::debug!(%e, "connection ended with an error");
                            }
                            return;
                        }
                        _ = stop.changed() => conn.as_mut().graceful_shutdown(),
                    }
                    if let Err(e) = conn.await {
                        tracing::debug!(%e, "connection ended with an error");
                    }
                });
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            _ = &mut shutdown => break,
        }
    }
    drop(listener);
    let _ = stop_tx.send(true);
    while connections.join_next().await.is_some() {}
}
