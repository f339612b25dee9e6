//! The HTTP/1.1 connections under the router: an accept loop over hyper's connection
//! builder, so that every connection has a header read timeout (which also closes idle
//! kept-alive connections), shutdown is bounded by a grace period, and the answers hyper
//! makes itself (400 for a request it cannot parse, 414, 431) carry the service's JSON
//! error body like every other answer.
//!
//! hyper (1.x) starts the header read timer when the connection is ready to read a request
//! head: as soon as it is accepted, and again as soon as the previous answer is written
//! (`proto/h1/conn.rs`: `poll_read_head`, and `notify_read` set on going idle when a header
//! timeout is configured). So one timer bounds a client that sends nothing, one that sends
//! half a head, and a kept-alive connection left idle between requests.
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;

use sift_service::{ApiError, ErrorKind};

/// The longest any of the service's durations is taken to be: larger ones are cut to it,
/// so that no `Instant + Duration` can overflow.
pub(crate) const LONGEST: Duration = Duration::from_secs(365 * 24 * 3600);

/// How [`serve_http`](crate::serve_http) ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stopped {
    /// Connections still open when the grace period ended, closed without waiting more.
    pub dropped: usize,
}

/// Connection settings.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ConnOptions {
    pub header_timeout: Duration,
    pub shutdown_grace: Duration,
}

/// Accepts connections on `listener` until `shutdown` resolves, then stops accepting, calls
/// `on_stop`, asks every connection to close after its request in flight, and waits at
/// most the grace period for them before dropping the rest.
pub(crate) async fn serve(
    listener: TcpListener,
    app: Router,
    options: ConnOptions,
    shutdown: impl Future<Output = ()>,
    on_stop: impl FnOnce(),
) -> io::Result<Stopped> {
    let header_timeout = options.header_timeout.min(LONGEST);
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut conns = JoinSet::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let _ = stream.set_nodelay(true);
                    conns.spawn(connection(stream, app.clone(), header_timeout, stop_rx.clone()));
                }
                // the client went away between connecting and being accepted
                Err(e) if is_connection_error(&e) => {}
                // out of file descriptors or memory: wait a little instead of spinning
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            },
            () = &mut shutdown => break,
        }
        while conns.try_join_next().is_some() {}
    }
    drop(listener);
    on_stop();
    let _ = stop_tx.send(true);
    let grace = options.shutdown_grace.min(LONGEST);
    let drained =
        tokio::time::timeout(grace, async { while conns.join_next().await.is_some() {} }).await;
    let dropped = if drained.is_err() { conns.len() } else { 0 };
    conns.abort_all();
    while conns.join_next().await.is_some() {}
    Ok(Stopped { dropped })
}

fn is_connection_error(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    )
}

/// Serves one connection until it closes; on `stop`, closes it once its request in flight
/// is answered (at once when it is idle).
async fn connection(
    stream: TcpStream,
    app: Router,
    header_timeout: Duration,
    mut stop: watch::Receiver<bool>,
) {
    let io = TokioIo::new(JsonErrorIo::new(stream));
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(header_timeout);
    let conn = builder.serve_connection(io, TowerToHyperService::new(app));
    let mut conn = std::pin::pin!(conn);
    let mut stopping = false;
    loop {
        tokio::select! {
            _ = conn.as_mut() => break,
            _ = stop.wait_for(|s| *s), if !stopping => {
                stopping = true;
                conn.as_mut().graceful_shutdown();
            }
        }
    }
}

/// The socket of a connection, with hyper's own error answers rewritten.
///
/// hyper answers a request head it cannot take with a bare head of its own (`400`, `414 URI
/// Too Long`, `431 Request Header Fields Too Large`, `content-length: 0`) written in one
/// piece before it closes the connection. Every answer of the service has a body, so a
/// write that is exactly such a head is hyper's: it is replaced by the same status with the
/// JSON error body. The client may still be sending the rest of its head, which the closing
/// socket would answer with a reset that can destroy the answer before it is read: so the
/// socket then lingers, reading and dropping what arrives for a moment, before it closes.
struct JsonErrorIo {
    stream: Option<TcpStream>,
    /// A replacement being written, how far it is, and the length hyper wrote.
    pending: Vec<u8>,
    at: usize,
    reported: Option<usize>,
    replaced: bool,
}

impl JsonErrorIo {
    fn new(stream: TcpStream) -> JsonErrorIo {
        JsonErrorIo {
            stream: Some(stream),
            pending: Vec::new(),
            at: 0,
            reported: None,
            replaced: false,
        }
    }

    fn stream(&mut self) -> io::Result<Pin<&mut TcpStream>> {
        match self.stream.as_mut() {
            Some(s) => Ok(Pin::new(s)),
            None => Err(io::ErrorKind::NotConnected.into()),
        }
    }

    /// Starts replacing hyper's write of `len` bytes with `bytes`.
    fn replace(&mut self, bytes: Vec<u8>, len: usize) {
        self.pending = bytes;
        self.at = 0;
        self.reported = Some(len);
    }

    /// Writes the pending replacement; `Ready(n)`: hyper's `n` bytes are done.
    fn poll_pending(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        let Some(reported) = self.reported else {
            return Poll::Ready(Ok(0));
        };
        let Some(stream) = self.stream.as_mut() else {
            return Poll::Ready(Err(io::ErrorKind::NotConnected.into()));
        };
        while self.at < self.pending.len() {
            let n = ready!(Pin::new(&mut *stream).poll_write(cx, &self.pending[self.at..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.at += n;
        }
        self.reported = None;
        self.replaced = true;
        Poll::Ready(Ok(reported))
    }
}

/// The JSON answer standing in for hyper's bare `head` (the whole of one write), if it is
/// one.
fn replacement(head: &[u8]) -> Option<Vec<u8>> {
    let rest = head.strip_prefix(b"HTTP/1.1 ")?;
    let status = std::str::from_utf8(rest.get(..3)?).ok()?;
    let (kind, message) = match status {
        "400" => (
            ErrorKind::InvalidRequest,
            "the request is not HTTP/1.1 the service can read (request line or headers)",
        ),
        "414" => (
            ErrorKind::UriTooLong,
            "the request's URI is longer than the 65,534 bytes the service reads",
        ),
        "431" => (
            ErrorKind::HeadersTooLarge,
            "the request's headers are larger than the service reads (about 400 KiB, at most \
             100 headers)",
        ),
        _ => return None,
    };
    if !head.ends_with(b"\r\n\r\n") || head.len() > 512 {
        return None;
    }
    let text = std::str::from_utf8(head).ok()?;
    let mut lines = text[..text.len() - 4].split("\r\n");
    let status_line = lines.next()?;
    let mut bodyless = false;
    let mut date = None;
    for line in lines {
        let (name, value) = line.split_once(':')?;
        match name.to_ascii_lowercase().as_str() {
            "content-length" if value.trim() == "0" => bodyless = true,
            "date" => date = Some(value.trim()),
            "connection" => {}
            _ => return None,
        }
    }
    if !bodyless {
        return None;
    }
    let body = serde_json::to_vec(&ApiError::new(kind, message).body()).ok()?;
    let mut out = format!(
        "{status_line}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n",
        body.len()
    );
    if let Some(date) = date {
        out.push_str(&format!("date: {date}\r\n"));
    }
    out.push_str("\r\n");
    let mut out = out.into_bytes();
    out.extend_from_slice(&body);
    Some(out)
}

impl AsyncRead for JsonErrorIo {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        self.stream()?.poll_read(cx, buf)
    }
}

impl AsyncWrite for JsonErrorIo {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if self.reported.is_none()
            && let Some(r) = replacement(buf)
        {
            self.replace(r, buf.len());
        }
        if self.reported.is_some() {
            return self.poll_pending(cx);
        }
        self.stream()?.poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        if self.reported.is_none() {
            let mut whole = bufs.iter().filter(|b| !b.is_empty());
            if let (Some(first), None) = (whole.next(), whole.next())
                && let Some(r) = replacement(first)
            {
                let len = first.len();
                self.replace(r, len);
            }
        }
        if self.reported.is_some() {
            return self.poll_pending(cx);
        }
        self.stream()?.poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.as_ref().is_some_and(|s| s.is_write_vectored())
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.reported.is_some() {
            ready!(self.poll_pending(cx))?;
        }
        self.stream()?.poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.reported.is_some() {
            ready!(self.poll_pending(cx))?;
        }
        self.stream()?.poll_shutdown(cx)
    }
}

/// How long, and how many bytes, a socket whose error answer was replaced reads and drops
/// before closing.
const LINGER_TIME: Duration = Duration::from_secs(2);
const LINGER_BYTES: usize = 1 << 20;

impl Drop for JsonErrorIo {
    fn drop(&mut self) {
        if !self.replaced {
            return;
        }
        let (Some(mut stream), Ok(rt)) =
            (self.stream.take(), tokio::runtime::Handle::try_current())
        else {
            return;
        };
        rt.spawn(async move {
            let _ = stream.shutdown().await;
            let _ = tokio::time::timeout(LINGER_TIME, async {
                let mut buf = vec![0u8; 16 << 10];
                let mut total = 0;
                while total < LINGER_BYTES {
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => total += n,
                    }
                }
            })
            .await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::replacement;

    #[test]
    fn hyper_bare_error_heads_become_json_answers() {
        let head = b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: 0\r\ndate: Thu, 01 Jan 2026 00:00:00 GMT\r\n\r\n";
        let out = String::from_utf8(replacement(head).unwrap()).unwrap();
        let (h, body) = out.split_once("\r\n\r\n").unwrap();
        assert!(
            h.starts_with("HTTP/1.1 431 Request Header Fields Too Large\r\n"),
            "{h}"
        );
        assert!(h.contains("content-type: application/json"), "{h}");
        assert!(
            h.contains(&format!("content-length: {}", body.len())),
            "{h}"
        );
        assert!(h.contains("date: Thu, 01 Jan 2026 00:00:00 GMT"), "{h}");
        let v: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(v["error"]["type"], "headers_too_large");
        for other in [
            &b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: 10\r\n\r\n"[..],
            b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n",
            b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n",
            b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\nx",
            b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n",
        ] {
            assert!(replacement(other).is_none(), "{}", String::from_utf8_lossy(other));
        }
    }
}
