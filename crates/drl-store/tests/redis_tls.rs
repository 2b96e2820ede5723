//! Redis over TLS (`rediss://`), with certificates made by rcgen, against
//! real `redis-server` processes whose plain port is off: decisions as
//! exact as over plain TCP; a wrong CA, a missing or foreign client
//! certificate, a plain port, a wrong or missing password each refused
//! with a clear error; passwords from a file and ACL users; a 3-node Redis
//! Cluster with TLS on client connections, the bus and replication; and
//! passwords never shown by `Debug` or in errors.

mod common;

use std::sync::Arc;

use common::tls::Pki;
use common::{RedisCluster, RedisServer};
use drl_core::{Algorithm, Quota};
use drl_store::{Check, LimitSpec, RedisConfig, RedisStore, RedisTls, Store, StoreError};

/// 5 per hour, burst 5: five admitted, then denied (no window boundary).
fn five_per_hour(name: &str) -> LimitSpec {
    LimitSpec::new(name, Algorithm::Gcra, vec![Quota::parse("5/h").unwrap()])
}

fn check<'a>(spec: &'a LimitSpec, key: &'a str) -> Check<'a> {
    Check {
        spec,
        key,
        cost: 1,
        now: 0,
    }
}

/// `n` decisions one after another on `key`: which were admitted.
async fn admitted(store: &RedisStore, spec: &LimitSpec, key: &str, n: usize) -> Vec<bool> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let d = store
            .decide(check(spec, key))
            .await
            .unwrap_or_else(|e| panic!("decision over TLS failed: {e}"));
        out.push(d.allowed);
    }
    out
}

/// Five admitted then denied, one by one; then 64 concurrent decisions on
/// a fresh key of a 20-per-hour limit (coalesced into shared calls) admit
/// exactly 20; and `decide_many` in order.
async fn assert_exact(store: &RedisStore, tag: &str) {
    let spec = five_per_hour("tls");
    let key = common::unique(tag);
    let got = admitted(store, &spec, &key, 8).await;
    assert_eq!(got, [true, true, true, true, true, false, false, false]);

    let spec = LimitSpec::new("tls", Algorithm::Gcra, vec![Quota::parse("20/h").unwrap()]);
    let key = common::unique(tag);
    let all = futures::future::join_all((0..64).map(|_| store.decide(check(&spec, &key)))).await;
    let allowed = all
        .iter()
        .map(|r| r.as_ref().expect("concurrent decision over TLS").allowed)
        .filter(|a| *a)
        .count();
    assert_eq!(allowed, 20, "exactly the quota over TLS");

    let spec = five_per_hour("tls-many");
    let key = common::unique(tag);
    let checks = vec![check(&spec, &key); 7];
    let many: Vec<bool> = store
        .decide_many(&checks)
        .await
        .into_iter()
        .map(|r| r.expect("decide_many over TLS").allowed)
        .collect();
    assert_eq!(many, [true, true, true, true, true, false, false]);
}

fn tls_config(url: String, tls: RedisTls) -> RedisConfig {
    RedisConfig {
        tls: Some(tls),
        ..RedisConfig::single(url)
    }
}

fn ca_only(pki: &Pki, ca: &str) -> RedisTls {
    RedisTls {
        ca_file: Some(pki.path(ca)),
        ..RedisTls::default()
    }
}

/// The error of the first `PING` of `cfg` (a single server: connected
/// lazily, so the failure shows at first use).
async fn first_error(cfg: &RedisConfig) -> String {
    let store = RedisStore::connect(cfg)
        .await
        .expect("a single server connects lazily");
    let e = store.ping().await.expect_err("must be refused");
    // The same explanation reaches decisions.
    let spec = five_per_hour("x");
    let d = store.decide(check(&spec, "k")).await.expect_err("refused");
    assert!(matches!(d, StoreError::Backend(_)), "{d:?}");
    e.to_string()
}

fn assert_says(text: &str, parts: &[&str]) {
    for p in parts {
        assert!(text.contains(p), "{text:?} lacks {p:?}");
    }
    assert!(!text.contains('\n'), "one line: {text:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decisions_over_tls_are_exact() {
    let pki = Arc::new(Pki::generate());
    let server = tokio::task::block_in_place(|| RedisServer::start_tls(&pki, "optional", &[]));
    assert!(server.url().starts_with("rediss://"));
    // A private CA, no client certificate (`tls-auth-clients optional`).
    let store = RedisStore::connect(&tls_config(server.url(), ca_only(&pki, "ca.pem")))
        .await
        .unwrap();
    store.ping().await.unwrap();
    assert_exact(&store, "tls").await;
    // The state is where the plain-TCP store would put it.
    let spec = five_per_hour("tls");
    let key = common::unique("where");
    admitted(&store, &spec, &key, 1).await;
    let stored: Option<String> = redis::cmd("GET")
        .arg(&store.keys(&spec, &key)[0])
        .query(&mut server.admin())
        .unwrap();
    assert!(stored.is_some(), "the decision wrote its key over TLS");
    // `localhost` is in the certificate too.
    let by_name = format!("rediss://localhost:{}", server.port);
    let store = RedisStore::connect(&tls_config(by_name, ca_only(&pki, "ca.pem")))
        .await
        .unwrap();
    store.ping().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_ca_a_plain_port_and_a_wrong_scheme_are_refused_clearly() {
    let pki = Arc::new(Pki::generate());
    let server = tokio::task::block_in_place(|| RedisServer::start_tls(&pki, "optional", &[]));
    // A CA that did not sign the server's certificate.
    let e = first_error(&tls_config(server.url(), ca_only(&pki, "other-ca.pem"))).await;
    assert_says(&e, &["not signed by a trusted CA", "redis.tls.ca_file"]);
    // No `tls:` at all: the system trust store does not know the test CA.
    let e = first_error(&RedisConfig::single(server.url())).await;
    assert_says(&e, &["not signed by a trusted CA", "redis.tls.ca_file"]);
    // rediss:// to a port without TLS: the plain server waits for the end
    // of a command line that never comes, so the handshake times out
    // (after `connect_timeout_ms`, once per attempt), never hangs.
    let plain = tokio::task::block_in_place(RedisServer::start);
    let url = format!("rediss://127.0.0.1:{}", plain.port);
    let cfg = RedisConfig {
        connect_timeout_ms: 300,
        response_timeout_ms: 300,
        ..tls_config(url, ca_only(&pki, "ca.pem"))
    };
    let started = std::time::Instant::now();
    let store = RedisStore::connect(&cfg).await.unwrap();
    let e = store.ping().await.unwrap_err();
    assert_eq!(e, StoreError::Timeout(300), "{e}");
    // A hang guard, not a latency bound (a loaded machine stretches the
    // attempts; a hang never ends).
    assert!(started.elapsed() < std::time::Duration::from_secs(30));
    // redis:// to the TLS port: refused, never a hang past the timeouts.
    let url = format!("redis://127.0.0.1:{}", server.port);
    let cfg = RedisConfig {
        connect_timeout_ms: 300,
        response_timeout_ms: 300,
        ..RedisConfig::single(url)
    };
    let started = std::time::Instant::now();
    let store = RedisStore::connect(&cfg).await.unwrap();
    assert!(store.ping().await.is_err());
    // A hang guard, not a latency bound (a loaded machine stretches the
    // attempts; a hang never ends).
    assert!(started.elapsed() < std::time::Duration::from_secs(30));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_certificates_when_redis_requires_them() {
    let pki = Arc::new(Pki::generate());
    let server = tokio::task::block_in_place(|| RedisServer::start_tls(&pki, "yes", &[]));
    // No client certificate: refused, and the error says what to set.
    let e = first_error(&tls_config(server.url(), ca_only(&pki, "ca.pem"))).await;
    assert_says(
        &e,
        &["requires a client certificate", "redis.tls.cert_file"],
    );
    // A certificate from a CA the server does not trust: refused.
    let foreign = RedisTls {
        ca_file: Some(pki.path("ca.pem")),
        cert_file: Some(pki.path("other-client.pem")),
        key_file: Some(pki.path("other-client.key")),
    };
    let e = first_error(&tls_config(server.url(), foreign)).await;
    assert_says(&e, &["TLS handshake with Redis failed"]);
    // The right one: decisions exact.
    let store = RedisStore::connect(&tls_config(server.url(), pki.client_tls()))
        .await
        .unwrap();
    assert_exact(&store, "mtls").await;
}

/// The ACL of docs/redis.md ("Credentials and ACL"): what drl needs, and
/// no more.
fn minimal_acl(user: &str, password: &str) -> Vec<String> {
    let mut acl = vec![
        "SETUSER".to_string(),
        user.to_string(),
        "reset".to_string(),
        "on".to_string(),
        format!(">{password}"),
        "~drl:*".to_string(),
    ];
    acl.extend(
        [
            "+ping",
            "+evalsha",
            "+eval",
            "+script|load",
            "+get",
            "+mget",
            "+set",
            "+time",
        ]
        .map(String::from),
    );
    acl
}

fn acl(server: &RedisServer, args: &[String]) {
    let _: () = redis::cmd("ACL")
        .arg(args)
        .query(&mut server.admin())
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passwords_from_files_and_acl_users() {
    let pki = Arc::new(Pki::generate());
    let server = tokio::task::block_in_place(|| RedisServer::start_tls(&pki, "optional", &[]));
    acl(&server, &minimal_acl("drl", "acl-Pa55word"));
    // A user that may not run scripts.
    acl(
        &server,
        &[
            "SETUSER",
            "reader",
            "reset",
            "on",
            ">reader-pw",
            "~drl:*",
            "+ping",
            "+get",
        ]
        .map(String::from),
    );
    let dir = tempfile::tempdir().unwrap();
    let file = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p
    };
    let with = |username: Option<&str>, password_file| RedisConfig {
        username: username.map(String::from),
        password_file,
        ..tls_config(server.url(), ca_only(&pki, "ca.pem"))
    };

    // The ACL user with its password from a file (trailing newline
    // trimmed): decisions exact.
    let cfg = with(Some("drl"), Some(file("pw", "acl-Pa55word\n")));
    let store = RedisStore::connect(&cfg).await.unwrap();
    assert_exact(&store, "acl").await;
    // The same user in the URL.
    let url = format!("rediss://drl:acl-Pa55word@127.0.0.1:{}", server.port);
    let store = RedisStore::connect(&tls_config(url, ca_only(&pki, "ca.pem")))
        .await
        .unwrap();
    assert_exact(&store, "acl-url").await;

    // A wrong password: refused clearly, and the password is not shown.
    let cfg = with(Some("drl"), Some(file("bad", "not-the-Pa55word")));
    let e = first_error(&cfg).await;
    assert_says(&e, &["Redis refused the credentials", "password_file"]);
    assert!(!e.contains("not-the-Pa55word"), "{e}");
    // A user without the permission to run scripts: says so.
    let cfg = with(Some("reader"), Some(file("reader", "reader-pw")));
    let store = RedisStore::connect(&cfg).await.unwrap();
    store.ping().await.unwrap();
    let spec = five_per_hour("x");
    let e = store
        .decide(check(&spec, "k"))
        .await
        .unwrap_err()
        .to_string();
    assert_says(&e, &["lacks a permission drl needs", "evalsha"]);

    // The default user with a password (requirepass), from a file.
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("requirepass")
        .arg("default-Pa55")
        .query(&mut server.admin())
        .unwrap();
    let cfg = with(None, Some(file("default", "  default-Pa55  \n")));
    let store = RedisStore::connect(&cfg).await.unwrap();
    assert_exact(&store, "requirepass").await;
    // No password at all: says one is needed.
    let e = first_error(&with(None, None)).await;
    assert_says(&e, &["Redis requires a password", "password_file"]);
}

/// `engine: module` over TLS as an ACL user that may run only drl's
/// module commands (and `PING`): the module's ACL of docs/redis.md.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn module_engine_over_tls_with_its_minimal_acl() {
    let pki = Arc::new(Pki::generate());
    let module = common::module_path();
    let server = tokio::task::block_in_place(|| {
        RedisServer::start_tls(
            &pki,
            "optional",
            &["--loadmodule", module.to_str().expect("utf-8 path")],
        )
    });
    acl(
        &server,
        &[
            "SETUSER",
            "drl",
            "reset",
            "on",
            ">module-Pa55",
            "~drl:*",
            "+ping",
            "+drl.decide",
            "+drl.version",
        ]
        .map(String::from),
    );
    let dir = tempfile::tempdir().unwrap();
    let pw = dir.path().join("pw");
    std::fs::write(&pw, "module-Pa55").unwrap();
    let cfg = RedisConfig {
        engine: drl_store::Engine::Module,
        username: Some("drl".into()),
        password_file: Some(pw),
        ..tls_config(server.url(), ca_only(&pki, "ca.pem"))
    };
    let store = RedisStore::connect(&cfg).await.unwrap();
    store.load_script().await.unwrap();
    assert_exact(&store, "module").await;
    // The scripts are not allowed to this user: the Lua engine is told so.
    let lua = RedisStore::connect(&RedisConfig {
        engine: drl_store::Engine::Lua,
        ..cfg
    })
    .await
    .unwrap();
    let spec = five_per_hour("x");
    let e = lua.decide(check(&spec, "k")).await.unwrap_err().to_string();
    assert_says(&e, &["lacks a permission drl needs", "evalsha"]);
}

#[test]
fn passwords_are_never_shown() {
    let cfg = RedisConfig::single("rediss://drl:Sup3r-Secret@127.0.0.1:6380/0");
    let shown = format!("{cfg:?}");
    assert!(!shown.contains("Sup3r-Secret"), "{shown}");
    assert!(
        shown.contains("rediss://drl:***@127.0.0.1:6380/0"),
        "{shown}"
    );
    assert!(!cfg.redacted().contains("Sup3r-Secret"));
    let cluster = RedisConfig::cluster([
        "rediss://:Sup3r-Secret@10.0.0.1:7000",
        "rediss://:Sup3r-Secret@10.0.0.2:7000",
    ]);
    let shown = format!("{cluster:?} {}", cluster.redacted());
    assert!(!shown.contains("Sup3r-Secret"), "{shown}");
    // A config error that names the URL does not show its password.
    let bad = RedisConfig {
        tls: Some(RedisTls::default()),
        ..RedisConfig::single("redis://drl:Sup3r-Secret@127.0.0.1:6379")
    };
    let e = bad.validate().unwrap_err().to_string();
    assert!(
        e.contains("127.0.0.1:6379") && !e.contains("Sup3r-Secret"),
        "{e}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_errors_never_show_the_password() {
    let pki = Arc::new(Pki::generate());
    // A cluster that cannot be reached fails at connect, naming its nodes.
    let dead = tokio::task::block_in_place(|| RedisServer::start_tls(&pki, "optional", &[]));
    let url = format!("rediss://drl:Sup3r-Secret@127.0.0.1:{}", dead.port);
    drop(dead);
    let cfg = RedisConfig {
        tls: Some(ca_only(&pki, "ca.pem")),
        connect_timeout_ms: 300,
        ..RedisConfig::cluster([url.clone()])
    };
    let e = RedisStore::connect(&cfg).await.unwrap_err().to_string();
    assert!(e.contains("127.0.0.1"), "names the node: {e}");
    assert!(!e.contains("Sup3r-Secret"), "{e}");
    // A single server with a wrong password in the URL.
    let server = tokio::task::block_in_place(|| RedisServer::start_tls(&pki, "optional", &[]));
    let url = format!("rediss://drl:Sup3r-Secret@127.0.0.1:{}", server.port);
    let e = first_error(&tls_config(url, ca_only(&pki, "ca.pem"))).await;
    assert_says(&e, &["Redis refused the credentials"]);
    assert!(!e.contains("Sup3r-Secret"), "{e}");
}

#[test]
fn tls_and_credential_config_is_checked_at_load() {
    let pki = Pki::generate();
    let err = |cfg: &RedisConfig| cfg.validate().unwrap_err().to_string();
    let url = "rediss://127.0.0.1:6380".to_string();
    // The whole set: valid.
    tls_config(url.clone(), pki.client_tls())
        .validate()
        .unwrap();
    // `tls:` with a plain URL.
    let e = err(&tls_config(
        "redis://127.0.0.1:6379".into(),
        pki.client_tls(),
    ));
    assert!(e.contains("`tls:` needs rediss://"), "{e}");
    // A cluster that mixes schemes.
    let e = err(&RedisConfig::cluster(["rediss://a:1", "redis://b:2"]));
    assert!(e.contains("mixes rediss://"), "{e}");
    // Missing files, named.
    let missing = pki.dir().join("nope.pem");
    for tls in [
        RedisTls {
            ca_file: Some(missing.clone()),
            ..RedisTls::default()
        },
        RedisTls {
            cert_file: Some(missing.clone()),
            ..pki.client_tls()
        },
        RedisTls {
            key_file: Some(missing.clone()),
            ..pki.client_tls()
        },
    ] {
        let e = err(&tls_config(url.clone(), tls));
        assert!(e.contains("nope.pem") && e.contains("tls."), "{e}");
    }
    // A CA file that holds no certificate.
    let e = err(&tls_config(url.clone(), ca_only(&pki, "client.key")));
    assert!(
        e.contains("`tls.ca_file`") && e.contains("no PEM certificate"),
        "{e}"
    );
    // A certificate without its key, and a key of another certificate.
    let e = err(&tls_config(
        url.clone(),
        RedisTls {
            key_file: None,
            ..pki.client_tls()
        },
    ));
    assert!(e.contains("`tls.cert_file` needs `tls.key_file`"), "{e}");
    let e = err(&tls_config(
        url.clone(),
        RedisTls {
            key_file: Some(pki.path("other-client.key")),
            ..pki.client_tls()
        },
    ));
    assert!(e.contains("do not make a client certificate"), "{e}");
    // Passwords: never empty, never twice; a user needs one.
    let empty = pki.dir().join("empty");
    std::fs::write(&empty, "\n").unwrap();
    let with = |url: &str, user: Option<&str>, file: Option<&std::path::Path>| RedisConfig {
        username: user.map(String::from),
        password_file: file.map(Into::into),
        ..RedisConfig::single(url)
    };
    let e = err(&with("redis://h:1", None, Some(&empty)));
    assert!(e.contains("is empty") && e.contains("empty"), "{e}");
    let e = err(&with("redis://h:1", None, Some(&missing)));
    assert!(
        e.contains("`password_file`") && e.contains("nope.pem"),
        "{e}"
    );
    let pw = pki.dir().join("pw");
    std::fs::write(&pw, "pw\n").unwrap();
    let e = err(&with("redis://:other@h:1", None, Some(&pw)));
    assert!(e.contains("password is given twice"), "{e}");
    let e = err(&with("redis://u@h:1", Some("drl"), Some(&pw)));
    assert!(e.contains("user name is given twice"), "{e}");
    let e = err(&with("redis://h:1", Some("drl"), None));
    assert!(e.contains("`username` needs a password"), "{e}");
    with("redis://h:1", Some("drl"), Some(&pw))
        .validate()
        .unwrap();
    // As YAML (what the server's `redis:` section is).
    let yaml = format!(
        "url: rediss://127.0.0.1:6380\nusername: drl\npassword_file: {}\n\
         tls: {{ca_file: {}, cert_file: {}, key_file: {}}}\n",
        pw.display(),
        pki.path("ca.pem").display(),
        pki.path("client.pem").display(),
        pki.path("client.key").display()
    );
    let cfg: RedisConfig = serde_norway::from_str(&yaml).unwrap();
    cfg.validate().unwrap();
    assert_eq!(cfg.tls, Some(pki.client_tls()));
    let e = serde_norway::from_str::<RedisConfig>("url: rediss://h:1\ntls: {ca: x}\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("unknown field `ca`"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_cluster_over_tls() {
    let pki = Arc::new(Pki::generate());
    let cluster = tokio::task::block_in_place(|| RedisCluster::start_tls(3, &pki));
    assert!(cluster.urls().iter().all(|u| u.starts_with("rediss://")));
    // The bus is TLS too: the nodes agree on the cluster over it.
    let info: String = redis::cmd("CLUSTER")
        .arg("INFO")
        .query(&mut cluster.nodes[0].admin())
        .unwrap();
    assert!(info.contains("cluster_known_nodes:3"), "{info}");
    // An ACL user with the password from a file, on every node: the
    // minimal ACL plus `cluster|slots` (the topology).
    let mut acl_args = minimal_acl("drl", "cluster-Pa55");
    acl_args.push("+cluster|slots".into());
    for node in &cluster.nodes {
        acl(node, &acl_args);
    }
    let dir = tempfile::tempdir().unwrap();
    let pw = dir.path().join("pw");
    std::fs::write(&pw, "cluster-Pa55\n").unwrap();
    let cfg = RedisConfig {
        tls: Some(pki.client_tls()),
        username: Some("drl".into()),
        password_file: Some(pw),
        ..RedisConfig::cluster(cluster.urls())
    };
    let store = RedisStore::connect(&cfg).await.unwrap();
    store.load_script().await.unwrap();
    // Keys on every node, each exact.
    let spec = five_per_hour("cluster-tls");
    let mut owners = std::collections::BTreeSet::new();
    for i in 0..24 {
        let key = format!("tenant-{i}");
        let redis_key = &store.keys(&spec, &key)[0];
        let slot = tokio::task::block_in_place(|| cluster.slot(redis_key));
        owners.insert(tokio::task::block_in_place(|| cluster.owner(slot)));
        let got = admitted(&store, &spec, &key, 7).await;
        assert_eq!(got, [true, true, true, true, true, false, false], "{key}");
    }
    assert_eq!(owners.len(), 3, "keys on every node");
    assert_exact(&store, "cluster").await;
    // The wrong CA: the cluster refuses to connect, with a clear error.
    let wrong = RedisConfig {
        tls: Some(ca_only(&pki, "other-ca.pem")),
        // Long enough that a loaded machine's handshake ends in the
        // certificate error, not in a timeout.
        connect_timeout_ms: 30_000,
        ..cfg.clone()
    };
    let e = RedisStore::connect(&wrong).await.unwrap_err().to_string();
    assert_says(&e, &["not signed by a trusted CA", "redis.tls.ca_file"]);
    assert!(e.contains("rediss://127.0.0.1:"), "names the nodes: {e}");
    // Without `cluster|slots` the ACL user cannot learn the topology: says so.
    for node in &cluster.nodes {
        acl(
            node,
            &["SETUSER", "drl", "-cluster|slots"].map(String::from),
        );
    }
    let e = RedisStore::connect(&cfg).await.unwrap_err().to_string();
    assert_says(&e, &["lacks a permission drl needs", "cluster|slots"]);
}
