//! [`Rewind`]: an IO whose first reads return bytes already read from it,
//! for handing a connection to hyper after the fast path looked at it.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf as _, Bytes};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// `inner`, with `prefix` read before anything from it.
#[derive(Debug)]
pub struct Rewind<I> {
    prefix: Bytes,
    inner: I,
}

impl<I> Rewind<I> {
    /// Reads `prefix` first, then `inner`.
    pub fn new(inner: I, prefix: Bytes) -> Self {
        Self { prefix, inner }
    }

    /// The IO underneath.
    pub fn inner(&self) -> &I {
        &self.inner
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for Rewind<I> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.prefix.is_empty() {
            let n = this.prefix.len().min(buf.remaining());
            buf.put_slice(&this.prefix[..n]);
            this.prefix.advance(n);
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Rewind<I> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    proptest! {
        /// Whatever the read sizes, the prefix then the inner bytes come
        /// out, in order, once.
        #[test]
        fn prefix_then_inner(prefix in proptest::collection::vec(any::<u8>(), 0..300), rest in proptest::collection::vec(any::<u8>(), 0..300), chunk in 1usize..64) {
            let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
            rt.block_on(async {
                let (mut a, b) = tokio::io::duplex(1024);
                a.write_all(&rest).await.unwrap();
                drop(a);
                let mut r = Rewind::new(b, Bytes::from(prefix.clone()));
                let mut got = Vec::new();
                let mut buf = vec![0; chunk];
                loop {
                    let n = r.read(&mut buf).await.unwrap();
                    if n == 0 { break; }
                    got.extend_from_slice(&buf[..n]);
                }
                prop_assert_eq!(got, [prefix, rest].concat());
                Ok(())
            })?;
        }
    }
}
