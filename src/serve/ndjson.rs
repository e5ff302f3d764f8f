//! Streamed NDJSON answers (exec output, a session's live stream): lines
//! handed to a channel by the worker that makes them, and sent to the
//! client as they come. A full channel makes the worker wait (the client
//! reads too slowly); a client that goes away closes it.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::{Body, Bytes};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use hyper::body::Frame;
use tokio::sync::mpsc;

/// Lines a worker may have queued before it waits for the client.
pub const QUEUED_LINES: usize = 64;

/// The sending side of a streamed answer.
#[derive(Clone)]
pub struct Lines(mpsc::Sender<Bytes>);

impl Lines {
    /// A new stream: its sender, and the response that sends what it gets.
    pub fn channel() -> (Lines, Response) {
        let (tx, rx) = mpsc::channel(QUEUED_LINES);
        let response = (
            [(header::CONTENT_TYPE, "application/x-ndjson")],
            Body::new(LinesBody(rx)),
        )
            .into_response();
        (Lines(tx), response)
    }

    /// Queue `value` as one line from a blocking worker (waits while the
    /// queue is full); `false` once the client has gone away.
    pub fn blocking_send(&self, value: &serde_json::Value) -> bool {
        self.0.blocking_send(line(value)).is_ok()
    }

    /// [`Lines::blocking_send`] from async code.
    pub async fn send(&self, value: &serde_json::Value) -> bool {
        self.0.send(line(value)).await.is_ok()
    }

    /// Wait until the client has gone away.
    pub async fn closed(&self) {
        self.0.closed().await
    }
}

fn line(value: &serde_json::Value) -> Bytes {
    let mut s = value.to_string();
    s.push('\n');
    Bytes::from(s)
}

/// A response body of the lines a channel carries, ending when every
/// sender is gone.
struct LinesBody(mpsc::Receiver<Bytes>);

impl hyper::body::Body for LinesBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.0.poll_recv(cx).map(|l| l.map(|b| Ok(Frame::data(b))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::body::Body as _;

    #[tokio::test]
    async fn lines_arrive_one_by_one_and_the_body_ends_with_its_senders() {
        let (lines, response) = Lines::channel();
        assert_eq!(
            response.headers()[header::CONTENT_TYPE],
            "application/x-ndjson"
        );
        let mut body = response.into_body();
        assert!(lines.send(&serde_json::json!({"a": 1})).await);
        let frame = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(frame.into_data().unwrap(), "{\"a\":1}\n");
        drop(lines);
        let end = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await;
        assert!(end.is_none());
    }
}
