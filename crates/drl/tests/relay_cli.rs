//! `drl relay`'s errors: a bad config names file, line and column; an
//! unknown interface and a missing privilege say what is missing;
//! `--print-rules` shows the iptables rules.

mod relay_net;

use std::os::unix::process::CommandExt;
use std::process::Command;

use relay_net::*;

fn relay_cmd(cfg: &std::path::Path) -> Command {
    let mut c = Command::new(exe());
    c.args(["relay", "--config"]).arg(cfg);
    c
}

fn stderr_of(mut c: Command) -> (i32, String) {
    let out = c.output().expect("running drl");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn config_errors_name_line_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("relay.yaml");
    std::fs::write(&p, format!("queue: 1\n{}", class("10 Mbit/fortnight"))).unwrap();
    let (code, err) = stderr_of(relay_cmd(&p));
    assert_eq!(code, 2, "{err}");
    let want = format!("{}:5:12: ", p.display());
    assert!(err.contains(&want), "expected {want:?} in: {err}");
    assert!(err.contains("unknown rate unit"), "{err}");

    std::fs::write(&p, format!("queue: 1\nchian: OUTPUT\n{}", class("1MB/s"))).unwrap();
    let (code, err) = stderr_of(relay_cmd(&p));
    assert_eq!(code, 2);
    assert!(err.contains(":2:1: unknown field `chian`"), "{err}");
}

#[test]
fn an_unknown_interface_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("relay.yaml");
    std::fs::write(
        &p,
        format!("queue: 9\ninterface: nope0\n{}", class("1MB/s")),
    )
    .unwrap();
    let (code, err) = stderr_of(relay_cmd(&p));
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("interface \"nope0\"")
            && err.contains("does not exist in this network namespace"),
        "{err}"
    );
    assert!(err.contains("lo"), "lists the interfaces there: {err}");
}

#[test]
fn a_missing_privilege_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("relay.yaml");
    std::fs::write(&p, format!("queue: 9\n{}", class("1MB/s"))).unwrap();
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    let mut c = relay_cmd(&p);
    c.uid(65534).gid(65534);
    let (code, err) = stderr_of(c);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("needs CAP_NET_ADMIN"), "{err}");
    assert!(err.contains("run it as root"), "{err}");
}

#[test]
fn print_rules_shows_the_iptables_commands() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("relay.yaml");
    std::fs::write(
        &p,
        format!("queue: 3\nqueue_bypass: false\n{}", class("1MB/s")),
    )
    .unwrap();
    let out = Command::new(exe())
        .args(["relay", "--print-rules", "--config"])
        .arg(&p)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    assert_eq!(
        text.lines().collect::<Vec<_>>(),
        vec![
            "iptables -w -N DRL-RELAY-3",
            "iptables -w -A DRL-RELAY-3 -d 10.77.0.0/16 -p 6 --dport 5001 -m comment --comment \
             'drl relay class bulk' -j NFQUEUE --queue-num 3",
            "iptables -w -I OUTPUT 1 -j DRL-RELAY-3",
        ]
    );
}

#[test]
fn testbed_cleanup_removes_what_a_killed_run_left() {
    let p = prefix("tc");
    // What a SIGKILLed testbed leaves: namespaces named from its prefix.
    let left: Vec<String> = ["rx", "s1"].iter().map(|s| format!("{p}-{s}")).collect();
    for n in &left {
        let st = Command::new("ip")
            .args(["netns", "add", n])
            .status()
            .unwrap();
        assert!(
            st.success(),
            "cannot create namespace {n} (run the tests as root)"
        );
    }
    let out = Command::new(exe())
        .args(["testbed", "cleanup", "--prefix", &p])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listed = Command::new("ip").args(["netns", "list"]).output().unwrap();
    let listed = String::from_utf8_lossy(&listed.stdout);
    for n in &left {
        assert!(!listed.contains(n.as_str()), "{n} left behind:\n{listed}");
    }
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("removed 2 namespaces"));
}
