//! Standard input and output as the stdio MCP transport reads and writes them.
//!
//! tokio's `stdin()` and `stdout()` do each read and write on its blocking pool, so every
//! message crosses two threads on its way in and two on its way out. When a stream is a pipe,
//! as an MCP client's spawn makes it, [`standard_streams`] drives it from the async workers
//! instead (non-blocking, woken by epoll): on the proxy benchmark that takes 0.10 to 0.14 ms off
//! each tool call's p50 (`bench/NOTES.md`, "Stop 41"). Anything else (a terminal, a file, a
//! socket) keeps tokio's blocking streams.
//!
//! Non-blocking is a property of the open file that the process shares with whoever else holds
//! it, so a pipe is given back blocking when the transport lets it go, and standard output stays
//! blocking when standard error is the same pipe (`2>&1`): a notice written to a full
//! non-blocking pipe would fail instead of waiting.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::unix::pipe;

/// What the transport reads: a non-blocking pipe or tokio's standard input.
pub type Input = Box<dyn AsyncRead + Send + Unpin>;
/// What the transport writes: a non-blocking pipe or tokio's standard output.
pub type Output = Box<dyn AsyncWrite + Send + Unpin>;

/// This process's standard input and output for an MCP transport (see the module's text).
/// Call it inside a tokio runtime with I/O enabled: a pipe is registered with its reactor.
#[must_use]
pub fn standard_streams() -> (Input, Output) {
    let input: Input = match duplicate(io::stdin().as_fd()).and_then(pipe::Receiver::from_owned_fd)
    {
        Ok(receiver) => Box::new(Lent(Some(receiver))),
        Err(_) => Box::new(tokio::io::stdin()),
    };
    let output: Output = if shared_with_stderr() {
        Box::new(tokio::io::stdout())
    } else {
        match duplicate(io::stdout().as_fd()).and_then(pipe::Sender::from_owned_fd) {
            Ok(sender) => Box::new(Lent(Some(sender))),
            Err(_) => Box::new(tokio::io::stdout()),
        }
    };
    (input, output)
}

fn duplicate(fd: std::os::fd::BorrowedFd<'_>) -> io::Result<OwnedFd> {
    fd.try_clone_to_owned()
}

/// Whether standard output and standard error are the same file (a `2>&1` pipe, say).
fn shared_with_stderr() -> bool {
    let identity = |fd: std::os::fd::BorrowedFd<'_>| {
        duplicate(fd)
            .and_then(|fd| std::fs::File::from(fd).metadata())
            .map(|m| (m.dev(), m.ino()))
    };
    match (
        identity(io::stdout().as_fd()),
        identity(io::stderr().as_fd()),
    ) {
        (Ok(out), Ok(err)) => out == err,
        // Unknown: assume the worst, and stay blocking.
        _ => true,
    }
}

/// A pipe end lent to the transport in non-blocking mode and given back blocking when dropped.
struct Lent<P: GiveBack>(Option<P>);

/// A pipe end that can be made blocking again.
trait GiveBack {
    fn give_back(self);
}

impl GiveBack for pipe::Receiver {
    fn give_back(self) {
        // The returned descriptor is this module's duplicate; closing it leaves fd 0 open.
        let _ = self.into_blocking_fd();
    }
}

impl GiveBack for pipe::Sender {
    fn give_back(self) {
        let _ = self.into_blocking_fd();
    }
}

impl<P: GiveBack> Drop for Lent<P> {
    fn drop(&mut self) {
        if let Some(pipe) = self.0.take() {
            pipe.give_back();
        }
    }
}

impl AsyncRead for Lent<pipe::Receiver> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.0.as_mut() {
            Some(receiver) => Pin::new(receiver).poll_read(cx, buf),
            // Given back: nothing more to read.
            None => Poll::Ready(Ok(())),
        }
    }
}

impl AsyncWrite for Lent<pipe::Sender> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.0.as_mut() {
            Some(sender) => Pin::new(sender).poll_write(cx, buf),
            None => Poll::Ready(Err(io::ErrorKind::BrokenPipe.into())),
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.0.as_mut() {
            Some(sender) => Pin::new(sender).poll_flush(cx),
            None => Poll::Ready(Ok(())),
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.0.as_mut() {
            Some(sender) => Pin::new(sender).poll_shutdown(cx),
            None => Poll::Ready(Ok(())),
        }
    }
}
