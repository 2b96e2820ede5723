//! Closing a connection whose request was answered before it was read
//! whole (a body over `max_body_bytes`, a body that outlived the request
//! deadline).
//!
//! Closing a socket with unread input, or input still arriving, makes the
//! kernel reset the connection instead of ending it. A client still
//! writing the rest of its body then sees the reset (a broken pipe, a
//! "connection closed") and never reads the answer that was sent before
//! it. So the answer goes out, the write side is shut down (the client
//! reads the answer and then end of stream), and what the client still
//! sends is read and thrown away until it closes its side, for at most
//! [`LINGER_TIME`] and [`LINGER_BYTES`] (a client that never stops sending
//! is closed on then, reset or not).

use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};

/// The longest a closing connection is read for.
pub const LINGER_TIME: Duration = Duration::from_secs(2);

/// The most bytes read (and dropped) from a closing connection.
pub const LINGER_BYTES: u64 = 16 * 1024 * 1024;

/// Shuts down `io`'s write side, then reads and drops its input until the
/// client closes, [`LINGER_TIME`] passes or [`LINGER_BYTES`] were read.
/// Returns the bytes dropped.
pub async fn linger<I: AsyncRead + AsyncWrite + Unpin>(io: &mut I) -> u64 {
    let _ = io.shutdown().await;
    let mut scratch = vec![0u8; 16 * 1024];
    let mut dropped = 0u64;
    let drain = async {
        while dropped < LINGER_BYTES {
            match io.read(&mut scratch).await {
                Ok(0) | Err(_) => break,
                Ok(n) => dropped += n as u64,
            }
        }
    };
    let _ = tokio::time::timeout(LINGER_TIME, drain).await;
    dropped
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn reads_until_the_client_closes_and_says_how_much() {
        let (mut server, mut client) = tokio::io::duplex(64 * 1024);
        let writer = tokio::spawn(async move {
            client.write_all(&[7u8; 100_000]).await.unwrap();
            // The server shut its side: the client reads end of stream.
            let mut rest = Vec::new();
            client.read_to_end(&mut rest).await.unwrap();
            rest.len()
        });
        // The client's read_to_end only ends once the server's write side
        // is shut, and linger only ends once the client closed: each waits
        // on the other's half, so both ending shows both halves work.
        let dropped = tokio::time::timeout(Duration::from_secs(5), linger(&mut server))
            .await
            .expect("linger ends when the client closes");
        drop(server);
        assert_eq!(writer.await.unwrap(), 0);
        assert_eq!(dropped, 100_000);
    }

    #[tokio::test(start_paused = true)]
    async fn a_client_that_never_stops_is_cut_off() {
        let (mut server, _client) = tokio::io::duplex(1024);
        // The client neither sends nor closes: linger ends at LINGER_TIME.
        let t = tokio::time::Instant::now();
        assert_eq!(linger(&mut server).await, 0);
        assert!(t.elapsed() >= LINGER_TIME);
    }
}
