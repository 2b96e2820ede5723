//! End-to-end: the real `drl serve` over TLS (rustls), with mutual TLS,
//! certificate rotation without dropping connections, and gRPC over TLS
//! with a bearer token. Certificates are made by the test (rcgen).

#[path = "common/certs.rs"]
mod certs;
mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use certs::{Ca, Pair};
use common::{DEADLINE, Drl};
use drl_api::pb::rate_limiter_client::RateLimiterClient;
use drl_api::pb::{CheckItem, CheckRequest};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A client config trusting `ca`, presenting `identity` if given.
fn client(ca: &Ca, identity: Option<&Pair>, alpn: &[&[u8]]) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls_pemfile::certs(&mut ca.pem().as_bytes()) {
        roots.add(c.unwrap()).unwrap();
    }
    let b = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    let mut cfg = match identity {
        None => b.with_no_client_auth(),
        Some(p) => {
            let chain: Vec<CertificateDer<'static>> =
                rustls_pemfile::certs(&mut std::fs::read(&p.cert).unwrap().as_slice())
                    .map(Result::unwrap)
                    .collect();
            let key: PrivateKeyDer<'static> =
                rustls_pemfile::private_key(&mut std::fs::read(&p.key).unwrap().as_slice())
                    .unwrap()
                    .unwrap();
            b.with_client_auth_cert(chain, key).unwrap()
        }
    };
    cfg.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Arc::new(cfg)
}

async fn connect(
    addr: SocketAddr,
    cfg: Arc<rustls::ClientConfig>,
) -> std::io::Result<TlsStream<TcpStream>> {
    let tcp = TcpStream::connect(addr).await?;
    let name = ServerName::try_from("127.0.0.1").unwrap();
    TlsConnector::from(cfg).connect(name, tcp).await
}

/// One HTTP/1.1 request on a kept-alive stream: status and body.
async fn request(
    s: &mut TlsStream<TcpStream>,
    method: &str,
    path: &str,
    body: &str,
) -> std::io::Result<(u16, String)> {
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\ncontent-type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_string();
            let len: usize = head
                .lines()
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.eq_ignore_ascii_case("content-length")
                        .then(|| v.trim().parse().ok())?
                })
                .unwrap_or(0);
            while buf.len() < end + 4 + len {
                let n = s.read(&mut chunk).await?;
                if n == 0 {
                    return Err(std::io::ErrorKind::UnexpectedEof.into());
                }
                buf.extend_from_slice(&chunk[..n]);
            }
            let status = head
                .split_whitespace()
                .nth(1)
                .and_then(|c| c.parse().ok())
                .unwrap_or(0);
            let body = String::from_utf8_lossy(&buf[end + 4..end + 4 + len]).to_string();
            return Ok((status, body));
        }
        let n = s.read(&mut chunk).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

const CHECK: &str = r#"{"requests":[{"limit":"api","key":"k"}]}"#;

fn config(http_tls: &str, extra: &str) -> String {
    format!(
        "listen:\n  http_tls: {http_tls}\n{extra}limits:\n  - name: api\n    algorithm: fixed-window\n    quota: 3/h\n"
    )
}

#[tokio::test]
async fn mutual_tls_admits_only_clients_with_a_certificate_of_the_ca() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("drl test CA");
    let server = ca.server(dir.path(), "server", "drl");
    let good = ca.client(dir.path(), "good", "tenant-a");
    let rogue_ca = Ca::new("someone else");
    let rogue = rogue_ca.client(dir.path(), "rogue", "tenant-a");
    let ca_file = ca.write(&dir.path().join("ca.crt"));
    let tls = format!(
        "{{cert_file: {}, key_file: {}, client_ca_file: {}}}",
        server.cert.display(),
        server.key.display(),
        ca_file.display()
    );
    let drl = Drl::spawn(
        &config(&tls, ""),
        &["--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0"],
    );

    // A client with a certificate of the CA is served, decisions exact.
    let mut s = connect(drl.http, client(&ca, Some(&good), &[b"http/1.1"]))
        .await
        .unwrap();
    for i in 0..4 {
        let (status, body) = request(&mut s, "POST", "/v1/check", CHECK).await.unwrap();
        assert_eq!(status, 200, "{body}");
        let allowed = body.contains("\"allowed\":true");
        assert_eq!(allowed, i < 3, "request {i}: {body}");
    }

    // Without a certificate, or with one of another CA: refused (the
    // handshake or the first read fails; nothing is answered).
    for (what, id) in [
        ("no certificate", None),
        ("another CA's certificate", Some(&rogue)),
    ] {
        let answered = match connect(drl.http, client(&ca, id, &[b"http/1.1"])).await {
            Err(_) => false,
            Ok(mut s) => request(&mut s, "GET", "/healthz", "").await.is_ok(),
        };
        assert!(!answered, "a client with {what} was answered");
    }
    // Plain HTTP on the TLS port gets no HTTP answer.
    assert!(common::http_get(&drl.url("/healthz")).is_none());
    let metrics = {
        let mut s = connect(drl.http, client(&ca, Some(&good), &[b"http/1.1"]))
            .await
            .unwrap();
        request(&mut s, "GET", "/metrics", "").await.unwrap().1
    };
    let failed = common::metric(
        &metrics,
        "drl_connections_total{listener=\"http\",event=\"tls_failed\"}",
    )
    .unwrap_or(0.0);
    assert!(
        failed >= 2.0,
        "TLS failures not counted: {failed}\n{metrics}"
    );
}

/// The certificate the server presents on a new connection.
async fn presented(addr: SocketAddr, cfg: Arc<rustls::ClientConfig>) -> Vec<u8> {
    let s = connect(addr, cfg).await.unwrap();
    s.get_ref().1.peer_certificates().unwrap()[0].to_vec()
}

#[tokio::test]
async fn a_rotated_certificate_is_served_to_new_connections_and_open_ones_stay() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("drl test CA");
    let one = ca.server(dir.path(), "one", "drl-one");
    let live = Pair {
        cert: dir.path().join("live.crt"),
        key: dir.path().join("live.key"),
        der: one.der.clone(),
    };
    std::fs::copy(&one.cert, &live.cert).unwrap();
    std::fs::copy(&one.key, &live.key).unwrap();
    let tls = format!(
        "{{cert_file: {}, key_file: {}}}",
        live.cert.display(),
        live.key.display()
    );
    let drl = Drl::spawn(
        &config(&tls, ""),
        &["--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0"],
    );
    let cfg = client(&ca, None, &[b"http/1.1"]);
    assert_eq!(presented(drl.http, cfg.clone()).await, one.der);

    // A connection opened before the rotation.
    let mut old = connect(drl.http, cfg.clone()).await.unwrap();
    assert_eq!(
        request(&mut old, "POST", "/v1/check", CHECK)
            .await
            .unwrap()
            .0,
        200
    );

    // Rotate: write the new pair in place (key first, then certificate,
    // as a careless operator would, each by rename).
    let two = ca.server(dir.path(), "two", "drl-two");
    for (from, to) in [(&two.key, &live.key), (&two.cert, &live.cert)] {
        let tmp = to.with_extension("tmp");
        std::fs::copy(from, &tmp).unwrap();
        std::fs::rename(&tmp, to).unwrap();
    }
    let t0 = Instant::now();
    loop {
        if presented(drl.http, cfg.clone()).await == two.der {
            break;
        }
        assert!(
            t0.elapsed() < DEADLINE,
            "the new certificate was never served"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The connection made before the rotation still works.
    let (status, body) = request(&mut old, "POST", "/v1/check", CHECK).await.unwrap();
    assert_eq!(status, 200, "{body}");
    drl.wait_log("TLS certificate reloaded");

    // A broken rotation (a key that does not match) keeps the last good pair.
    std::fs::copy(&one.key, &live.key).unwrap();
    drl.wait_log("cannot be used; the previous certificate keeps serving");
    assert_eq!(presented(drl.http, cfg.clone()).await, two.der);
}

#[tokio::test]
async fn grpc_over_tls_with_a_bearer_token() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("drl test CA");
    let server = ca.server(dir.path(), "server", "drl");
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, "# clients\ngrpc-client-token-0123456789\n").unwrap();
    let yaml = format!(
        "listen:\n  grpc_tls: {{cert_file: {}, key_file: {}}}\nauth:\n  tokens_file: {}\nlimits:\n  - name: api\n    algorithm: fixed-window\n    quota: 2/h\n",
        server.cert.display(),
        server.key.display(),
        tokens.display()
    );
    let drl = Drl::start_args(&yaml, &["--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0"]);
    let cfg = client(&ca, None, &[b"h2"]);
    let addr = drl.grpc;
    let channel = tonic::transport::Endpoint::from_static("http://drl.invalid")
        .connect_with_connector(tower::service_fn(move |_| {
            let cfg = cfg.clone();
            async move { connect(addr, cfg).await.map(hyper_util::rt::TokioIo::new) }
        }))
        .await
        .unwrap();
    let mut c = RateLimiterClient::new(channel);
    let req = |token: Option<&str>| {
        let mut r = tonic::Request::new(CheckRequest {
            requests: vec![CheckItem {
                limit: "api".into(),
                key: "k".into(),
                cost: None,
                ..Default::default()
            }],
        });
        if let Some(t) = token {
            r.metadata_mut()
                .insert("authorization", format!("Bearer {t}").parse().unwrap());
        }
        r
    };
    let e = c.check(req(None)).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unauthenticated, "{e}");
    let e = c
        .check(req(Some("wrong-token-0123456789")))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unauthenticated, "{e}");
    let mut allowed = Vec::new();
    for _ in 0..3 {
        let r = c
            .check(req(Some("grpc-client-token-0123456789")))
            .await
            .unwrap();
        allowed.push(r.into_inner().results[0].allowed);
    }
    assert_eq!(allowed, [true, true, false]);
}

/// envoyproxy/ratelimit test/integration/integration_test.go: Test_mTLS,
/// on drl's gRPC listener (`grpc_tls` with `client_ca_file`): a client
/// with a certificate of the client CA completes the handshake (ALPN h2)
/// and is answered over Envoy RLS; one without a certificate is not.
#[tokio::test]
async fn grpc_mutual_tls() {
    let dir = tempfile::tempdir().unwrap();
    let server_ca = Ca::new("server CA");
    let client_ca = Ca::new("client CA");
    let server = server_ca.server(dir.path(), "server", "drl");
    let good = client_ca.client(dir.path(), "good", "envoy");
    let client_ca_file = client_ca.write(&dir.path().join("client-ca.crt"));
    let yaml = format!(
        "listen:\n  grpc_tls: {{cert_file: {}, key_file: {}, client_ca_file: {}}}\nenvoy:\n  - domain: d\n    descriptors:\n      - key: k\n        rate_limit: {{unit: hour, requests_per_unit: 5}}\n",
        server.cert.display(),
        server.key.display(),
        client_ca_file.display()
    );
    let drl = Drl::spawn(&yaml, &["--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0"]);
    let s = connect(drl.grpc, client(&server_ca, Some(&good), &[b"h2"]))
        .await
        .unwrap();
    assert_eq!(s.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    drop(s);
    let refused = match connect(drl.grpc, client(&server_ca, None, &[b"h2"])).await {
        Err(_) => true,
        // TLS 1.3: the server's refusal arrives with the first read.
        Ok(mut s) => {
            let mut b = [0u8; 1];
            s.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n").await.ok();
            !matches!(s.read(&mut b).await, Ok(n) if n > 0)
        }
    };
    assert!(refused, "a client without a certificate was served");

    // The RLS answer itself, over the mutual-TLS channel.
    let cfg = client(&server_ca, Some(&good), &[b"h2"]);
    let addr = drl.grpc;
    let channel = tonic::transport::Endpoint::from_static("http://drl.invalid")
        .connect_with_connector(tower::service_fn(move |_| {
            let cfg = cfg.clone();
            async move { connect(addr, cfg).await.map(hyper_util::rt::TokioIo::new) }
        }))
        .await
        .unwrap();
    let mut rls = envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient::new(channel);
    let a = rls
        .should_rate_limit(drl_test_kit::envoy::request("d", &[&[("k", "v")]], 1))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(a.statuses[0].limit_remaining, 4);
}

/// envoyproxy/ratelimit test/integration/integration_test.go:
/// TestReloadGRPCServerCerts: the gRPC listener's certificate replaced by
/// rename (a new CA's) is served to new connections without a restart;
/// clients trusting only the old CA then fail, as the reference expects.
#[tokio::test]
async fn grpc_server_certificate_reloads() {
    let dir = tempfile::tempdir().unwrap();
    let (first_ca, second_ca) = (Ca::new("first CA"), Ca::new("second CA"));
    let first = first_ca.server(dir.path(), "first", "drl");
    let second = second_ca.server(dir.path(), "second", "drl");
    let live = Pair {
        cert: dir.path().join("live.crt"),
        key: dir.path().join("live.key"),
        der: first.der.clone(),
    };
    std::fs::copy(&first.cert, &live.cert).unwrap();
    std::fs::copy(&first.key, &live.key).unwrap();
    let yaml = format!(
        "listen:\n  grpc_tls: {{cert_file: {}, key_file: {}}}\nlimits:\n  - name: api\n    quota: 3/h\n",
        live.cert.display(),
        live.key.display()
    );
    let drl = Drl::spawn(&yaml, &["--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0"]);
    let trusts_first = client(&first_ca, None, &[b"h2"]);
    let trusts_second = client(&second_ca, None, &[b"h2"]);
    assert!(connect(drl.grpc, trusts_first.clone()).await.is_ok());
    assert!(connect(drl.grpc, trusts_second.clone()).await.is_err());
    for (from, to) in [(&second.key, &live.key), (&second.cert, &live.cert)] {
        let tmp = to.with_extension("tmp");
        std::fs::copy(from, &tmp).unwrap();
        std::fs::rename(&tmp, to).unwrap();
    }
    let t0 = Instant::now();
    while connect(drl.grpc, trusts_second.clone()).await.is_err() {
        assert!(
            t0.elapsed() < DEADLINE,
            "the new certificate was never served"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(connect(drl.grpc, trusts_first).await.is_err());
}
