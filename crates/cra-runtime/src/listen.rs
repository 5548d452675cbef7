//! Serving HTTP connections under the limits a server facing hostile clients needs: each
//! connection is served by hyper's HTTP/1 with upgrades (WebSockets), and
//!
//! * **header-read timeout** (`limits.header_read_timeout_ms`, 10 s): a request head must arrive
//!   whole within it, the first one and every later one on a kept-alive connection, so the same
//!   timer closes idle keep-alive connections;
//! * **connection limit** (`limits.max_connections`; by default three quarters of the process's
//!   open-file limit): at the limit, the oldest connection that has not yet sent a whole request
//!   head is closed to make room, so half-open connections cannot lock out a client that sends
//!   its request; only when every connection has sent one is the new connection refused;
//! * **write timeout** (`limits.write_timeout_ms`, 30 s): a write the client does not read within
//!   it closes the connection;
//! * **shutdown deadline** (`limits.shutdown_deadline_ms`, 10 s): on shutdown, connections
//!   without a whole request head close at once, the others finish their requests until the
//!   deadline and are then closed.
//!
//! With TLS (`crate::tls`), the handshake must complete within the header-read timeout too, and
//! a connection still in its handshake counts as one without a request head. The verified client
//! certificate's subject (mutual TLS) goes into every request's extensions as a
//! [`PeerCertificate`].
//!
//! Upgraded connections (WebSocket streams) leave this module's bookkeeping: the stream's own
//! keepalives and queue limits govern them (`crate::stream`). The body timeout is the
//! extractors' (`crate::extract::read_body`).

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::{Pin, pin};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

use crate::tls::PeerCertificate;

/// The limits [`serve`] applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ConnectionLimits {
    /// How long a whole request head may take to arrive (also the keep-alive idle timeout).
    pub header_read_timeout: Duration,
    /// How long a write may wait for the client to read.
    pub write_timeout: Duration,
    /// Connections served at once.
    pub max_connections: usize,
    /// How long shutdown waits for requests in progress.
    pub shutdown_deadline: Duration,
}

/// One open connection, as the registry keeps it until its task has closed it.
struct Open {
    /// Set once the connection has sent a whole request head.
    headed: Arc<AtomicBool>,
    /// Cancelled to close the connection at once (it stays counted until it is closed).
    close: CancellationToken,
}

/// The open connections, by accept order (the key grows with each accept).
#[derive(Default)]
struct Registry {
    open: Mutex<BTreeMap<u64, Open>>,
}

impl Registry {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, Open>> {
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// True when fewer than `max` connections are open (closing ones count until closed).
    fn has_room(&self, max: usize) -> bool {
        self.lock().len() < max
    }

    /// Closes the oldest connection that has not sent a whole request head and is not closing
    /// already; false when there is none.
    fn evict_one(&self) -> bool {
        let open = self.lock();
        let oldest = open
            .values()
            .find(|c| !c.headed.load(Ordering::Acquire) && !c.close.is_cancelled());
        oldest.map(|c| c.close.cancel()).is_some()
    }
}

/// Serves `app` on `listener` until `stop` resolves, then shuts down within the deadline.
/// A connection is accepted only when there is room for it, so the process does not run out of
/// descriptors on accept; while the registry is full, the oldest connection without a request
/// head is closed, and the loop accepts again once a connection has ended.
pub(crate) async fn serve(
    listener: TcpListener,
    app: Router,
    limits: ConnectionLimits,
    tls: Option<TlsAcceptor>,
    stop: impl Future<Output = ()> + Send,
) {
    let registry = Arc::new(Registry::default());
    let shutting = CancellationToken::new();
    let mut tasks = tokio::task::JoinSet::new();
    let mut stop = pin!(stop);
    // After a failed accept: no accept until a connection ends or this passes.
    let mut pause: Option<Pin<Box<tokio::time::Sleep>>> = None;
    let mut next_id = 0u64;
    loop {
        let room = registry.has_room(limits.max_connections);
        if !room && !registry.evict_one() {
            tracing::debug!(
                max = limits.max_connections,
                "every connection is serving a request; accepting again when one ends"
            );
        }
        tokio::select! {
            () = &mut stop => break,
            Some(_) = tasks.join_next(), if !tasks.is_empty() => pause = None,
            () = wait(&mut pause), if pause.is_some() => pause = None,
            accepted = listener.accept(), if room && pause.is_none() => match accepted {
                Ok((tcp, _)) => {
                    next_id += 1;
                    let conn = Connection::register(next_id, &registry, &shutting, limits);
                    tasks.spawn(conn.run(tcp, app.clone(), tls.clone()));
                }
                Err(e) => {
                    // Out of descriptors (something else holds them) or a connection reset
                    // before it was taken: close one that has sent nothing whole, and wait.
                    tracing::warn!(error = %e, "accepting a connection failed");
                    registry.evict_one();
                    pause = Some(Box::pin(tokio::time::sleep(Duration::from_millis(100))));
                }
            },
        }
    }
    shutting.cancel();
    while tasks.join_next().await.is_some() {}
}

/// Waits for `pause` to pass (never, without one).
async fn wait(pause: &mut Option<Pin<Box<tokio::time::Sleep>>>) {
    match pause {
        Some(p) => p.as_mut().await,
        None => std::future::pending().await,
    }
}

/// One accepted connection and what it needs to serve itself.
struct Connection {
    id: u64,
    registry: Arc<Registry>,
    shutting: CancellationToken,
    limits: ConnectionLimits,
    headed: Arc<AtomicBool>,
    close: CancellationToken,
}

impl Connection {
    /// Counts a new connection in `registry` (before its task runs, so the accept loop sees it).
    fn register(
        id: u64,
        registry: &Arc<Registry>,
        shutting: &CancellationToken,
        limits: ConnectionLimits,
    ) -> Self {
        let headed = Arc::new(AtomicBool::new(false));
        let close = CancellationToken::new();
        registry.lock().insert(
            id,
            Open {
                headed: headed.clone(),
                close: close.clone(),
            },
        );
        Self {
            id,
            registry: registry.clone(),
            shutting: shutting.clone(),
            limits,
            headed,
            close,
        }
    }

    /// Serves the connection until it ends, is evicted, or shutdown closes it; it leaves the
    /// registry only once its socket is closed.
    async fn run(self, tcp: TcpStream, app: Router, tls: Option<TlsAcceptor>) {
        let _ = tcp.set_nodelay(true);
        let io = WriteTimeout::new(tcp, self.limits.write_timeout);
        match tls {
            None => self.serve(io, app, None).await,
            Some(acceptor) => {
                if let Some(stream) = self.handshake(&acceptor, io).await {
                    let peer = stream
                        .get_ref()
                        .1
                        .peer_certificates()
                        .and_then(|c| c.first());
                    let peer = peer.map(|c| PeerCertificate {
                        subject: crate::tls::subject_of(c),
                    });
                    self.serve(stream, app, peer).await;
                }
            }
        }
        self.registry.lock().remove(&self.id);
    }

    /// The TLS handshake, under the header-read timeout; `None` when it fails, times out, or
    /// the connection is evicted or shut down first.
    async fn handshake(
        &self,
        acceptor: &TlsAcceptor,
        io: WriteTimeout,
    ) -> Option<tokio_rustls::server::TlsStream<WriteTimeout>> {
        let handshake = tokio::time::timeout(self.limits.header_read_timeout, acceptor.accept(io));
        tokio::select! {
            done = handshake => match done {
                Ok(Ok(stream)) => Some(stream),
                Ok(Err(e)) => {
                    tracing::debug!(error = %e, "TLS handshake failed");
                    None
                }
                Err(_) => {
                    tracing::debug!("TLS handshake timed out");
                    None
                }
            },
            () = self.close.cancelled() => None,
            () = self.shutting.cancelled() => None,
        }
    }

    /// Serves HTTP/1 on `io`; the connection is closed when this returns. `peer` goes into
    /// every request's extensions.
    async fn serve<I>(&self, io: I, app: Router, peer: Option<PeerCertificate>)
    where
        I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let seen = self.headed.clone();
        let service = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
            seen.store(true, Ordering::Release);
            let mut req = req.map(axum::body::Body::new);
            if let Some(p) = &peer {
                req.extensions_mut().insert(p.clone());
            }
            app.clone().oneshot(req)
        });
        let conn = hyper::server::conn::http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(self.limits.header_read_timeout)
            .serve_connection(TokioIo::new(io), service)
            .with_upgrades();
        let mut conn = pin!(conn);
        tokio::select! {
            _ = conn.as_mut() => {}
            () = self.close.cancelled() => {}
            () = self.shutting.cancelled() => {
                if self.headed.load(Ordering::Acquire) {
                    conn.as_mut().graceful_shutdown();
                    let _ = tokio::time::timeout(self.limits.shutdown_deadline, conn.as_mut()).await;
                }
            }
        }
    }
}

/// A stream whose writes fail once one has waited `timeout` for the client to read.
struct WriteTimeout<S = TcpStream> {
    inner: S,
    timeout: Duration,
    /// Armed while a write is pending.
    deadline: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl<S> WriteTimeout<S> {
    fn new(inner: S, timeout: Duration) -> Self {
        Self {
            inner,
            timeout,
            deadline: None,
        }
    }

    /// `Pending` from a write: arms the deadline, or fails once it has passed.
    fn pending<T>(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<T>> {
        let timeout = self.timeout;
        let deadline = self
            .deadline
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        match deadline.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "the client did not read the answer in time",
            ))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn settle<T>(
        &mut self,
        cx: &mut Context<'_>,
        p: Poll<std::io::Result<T>>,
    ) -> Poll<std::io::Result<T>> {
        match p {
            Poll::Pending => self.pending(cx),
            ready => {
                self.deadline = None;
                ready
            }
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for WriteTimeout<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for WriteTimeout<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let p = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.settle(cx, p)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let p = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.settle(cx, p)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let p = Pin::new(&mut self.inner).poll_flush(cx);
        self.settle(cx, p)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// The default connection limit: three quarters of the open-file limit (the rest is kept for the
/// store, the logs and outgoing connections), at least 64; 10,000 where the limit cannot be read
/// (it is read from `/proc/self/limits`, so on Linux).
pub(crate) fn default_max_connections() -> usize {
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap_or_default();
    open_file_limit(&limits).map_or(10_000, |n| (n / 4 * 3).max(64))
}

/// The soft open-file limit in a `/proc/self/limits` text (`None` when unlimited or absent).
fn open_file_limit(limits: &str) -> Option<usize> {
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line.trim_start_matches("Max open files")
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A write the peer does not read fails at the write timeout (the test waits on that
    /// timeout, nothing else); one it reads goes through, however slowly it reads.
    #[tokio::test]
    async fn a_write_the_client_does_not_read_fails_at_the_write_timeout() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let timeout = Duration::from_millis(100);
        let (server, mut client) = tokio::io::duplex(64);
        let mut slow = WriteTimeout::new(server, timeout);
        // A generous bound, so that a write that never fails fails the test instead of hanging.
        let bounded = tokio::time::timeout(Duration::from_secs(10), slow.write_all(&[7u8; 4096]));
        let e = bounded.await.expect("the write fails").unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::TimedOut);

        let (server, mut client2) = tokio::io::duplex(64);
        let mut read = WriteTimeout::new(server, timeout);
        let reader = tokio::spawn(async move {
            let mut got = vec![0u8; 4096];
            client2.read_exact(&mut got).await.map(|_| got)
        });
        read.write_all(&[7u8; 4096]).await.unwrap();
        assert_eq!(reader.await.unwrap().unwrap(), vec![7u8; 4096]);
        // The first client's buffer held what it was sent before the timeout.
        let mut first = [0u8; 64];
        client.read_exact(&mut first).await.unwrap();
        assert_eq!(first, [7u8; 64]);
    }

    #[test]
    fn the_open_file_limit_is_read_from_proc_self_limits() {
        let text = "Limit                     Soft Limit           Hard Limit           Units\n\
                    Max cpu time              unlimited            unlimited            seconds\n\
                    Max open files            512                  4096                 files\n";
        assert_eq!(open_file_limit(text), Some(512));
        assert_eq!(
            open_file_limit("Max open files  unlimited  unlimited  files\n"),
            None
        );
        assert_eq!(open_file_limit(""), None);
    }
}
