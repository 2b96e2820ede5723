//! drl-client reads the limits of a config file as `drl serve` does: for
//! every example config of the repository and a set of inline ones, both
//! readers give the same limits, and both refuse the same bad files.

use drl_client::ClientConfig;
use drl_config as config;

/// (name, algorithm, quotas, max_keys, max_bytes, shadow, scope) of each limit.
type Summary = Vec<(String, String, Vec<String>, usize, usize, bool, String)>;

fn server_summary(text: &str) -> Result<Summary, String> {
    let c = config::parse(text, "t").map_err(|e| e.to_string())?;
    Ok(c.limits
        .iter()
        .map(|l| {
            (
                l.name.clone(),
                l.algorithm.to_string(),
                l.quotas.iter().map(|q| format!("{q:?}")).collect(),
                l.max_keys,
                l.max_bytes,
                l.shadow,
                l.scope.name().to_string(),
            )
        })
        .collect())
}

fn client_summary(text: &str) -> Result<Summary, String> {
    let c = ClientConfig::parse(text, "t").map_err(|e| e.to_string())?;
    Ok(c.limits
        .iter()
        .map(|l| {
            (
                l.name.clone(),
                l.algorithm.to_string(),
                l.quotas.iter().map(|q| format!("{q:?}")).collect(),
                l.max_keys,
                l.max_bytes,
                l.shadow,
                format!("{:?}", l.scope).to_lowercase(),
            )
        })
        .collect())
}

const GOOD: &[&str] = &[
    "limits:\n  - name: api\n    quota: 100/s\n    burst: 20\n",
    "limits:\n  - name: m\n    algorithm: token-bucket\n    quotas: [5/h, {quota: 2/m, burst: 1}]\n    max_keys: 10\n    max_bytes: 4096\n    shadow: true\n",
    "server: {max_key_bytes: 32}\nlimits:\n  - name: e\n    algorithm: sliding-window\n    quota: 2/h\n    key: {headers: [x-tenant], default: anon}\n",
];

const BAD: &[&str] = &[
    "limits:\n  - name: a\n    quota: 10/x\n",
    "limits:\n  - name: a\n",
    "limits:\n  - name: a\n    quota: 1/s\n    quotas: [1/s]\n",
    "limits:\n  - name: a\n    algorithm: fixed-window\n    quota: 1/s\n    burst: 4\n",
    "limits:\n  - name: a\n    quota: 1/s\n  - name: a\n    quota: 2/s\n",
    "limits:\n  - name: a\n    quota: 1/s\n    max_keys: 0\n",
    "limits:\n  - name: a\n    quota: 1/s\n    max_bytes: 10\n",
    "limits:\n  - name: a\n    quota: 1/s\n    colour: red\n",
    "limits:\n  - name: \"\"\n    quota: 1/s\n",
    "limits:\n  - name: a\n    algorithm: magic\n    quota: 1/s\n",
    "limits:\n  - name: a\n    quota: 1/s\n    key: {headers: []}\n",
];

#[test]
fn both_readers_agree_on_good_files() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut texts: Vec<String> = GOOD.iter().map(|s| s.to_string()).collect();
    texts.push(config::EMBEDDED_DEFAULT.to_string());
    for f in ["examples/serve/drl.yaml", "examples/axum-app/drl.yaml"] {
        texts.push(std::fs::read_to_string(root.join(f)).unwrap_or_else(|e| panic!("{f}: {e}")));
    }
    for t in &texts {
        let s = server_summary(t).unwrap_or_else(|e| panic!("server refused {t}: {e}"));
        assert!(!s.is_empty(), "{t}");
        assert_eq!(client_summary(t).unwrap(), s, "{t}");
    }
}

#[test]
fn both_readers_refuse_bad_files() {
    for t in BAD {
        let s = server_summary(t);
        let c = client_summary(t);
        assert!(s.is_err(), "server accepted {t}");
        assert!(c.is_err(), "client accepted {t} (server: {s:?})");
    }
    // Errors carry the line.
    let e = ClientConfig::parse(BAD[0], "f.yaml").unwrap_err();
    assert!(e.to_string().starts_with("f.yaml:3:"), "{e}");
}
