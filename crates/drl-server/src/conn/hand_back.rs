//! [`HandBack`]: a socket lent to hyper that comes back when hyper drops
//! it.

use std::pin::Pin;
use std::task::{Context, Poll};

/// The socket under a hyper connection, handed back through `back` when
/// hyper drops it, so that the connection can linger
/// (`ConnState::linger`) instead of closing with input unread.
pub(super) struct HandBack<I> {
    /// The socket and where it goes back to (taken on drop).
    inner: Option<(I, tokio::sync::oneshot::Sender<I>)>,
}

impl<I> HandBack<I> {
    pub(super) fn new(io: I) -> (Self, tokio::sync::oneshot::Receiver<I>) {
        let (tx, rx) = tokio::sync::oneshot::channel();
        (
            Self {
                inner: Some((io, tx)),
            },
            rx,
        )
    }

    fn io(&mut self) -> Pin<&mut I>
    where
        I: Unpin,
    {
        Pin::new(&mut self.inner.as_mut().expect("only taken on drop").0)
    }
}

impl<I> Drop for HandBack<I> {
    fn drop(&mut self) {
        if let Some((io, back)) = self.inner.take() {
            let _ = back.send(io);
        }
    }
}

impl<I: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for HandBack<I> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        self.get_mut().io().poll_read(cx, buf)
    }
}

impl<I: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for HandBack<I> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.get_mut().io().poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        self.get_mut().io().poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner
            .as_ref()
            .is_some_and(|(io, _)| io.is_write_vectored())
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        self.get_mut().io().poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        self.get_mut().io().poll_shutdown(cx)
    }
}
