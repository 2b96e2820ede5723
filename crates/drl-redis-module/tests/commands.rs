//! DRL.DECIDE's errors (and that an erroring call writes nothing), expiry,
//! COMMAND GETKEYS, replication to a replica without the module, and
//! DRL.VERSION, on a real redis-server.

mod common;

use std::time::Duration;

use common::{Redis, at, items, wait_until};
use drl_core::{Algorithm, Quota};
use drl_redis_module::spec::{self, Clock, Decision, MAGIC, Op};
use redis::Value;

fn q(limit: u64, window: u64) -> Quota {
    Quota::new(limit, window).unwrap()
}

fn raw_decide(c: &mut redis::Connection, keys: &[&str], spec: &[u8]) -> redis::RedisResult<Value> {
    let mut cmd = redis::cmd("DRL.DECIDE");
    for k in keys {
        cmd.arg(*k);
    }
    cmd.arg(spec).query(c)
}

/// Every key and value of the database (with TTLs), for "nothing written".
fn dump(c: &mut redis::Connection) -> Vec<(String, Option<Vec<u8>>, i64)> {
    let mut keys: Vec<String> = redis::cmd("KEYS").arg("*").query(c).unwrap();
    keys.sort();
    keys.into_iter()
        .map(|k| {
            let v: Option<Vec<u8>> = redis::cmd("GET").arg(&k).query(c).unwrap_or(None);
            let t: i64 = redis::cmd("TTL").arg(&k).query(c).unwrap();
            (k, v, t)
        })
        .collect()
}

#[test]
fn errors_write_nothing() {
    let r = Redis::start_module();
    let mut c = r.admin();
    let _: () = redis::cmd("SET")
        .arg("good")
        .arg("5 0")
        .query(&mut c)
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg("corrupt")
        .arg("5 x")
        .query(&mut c)
        .unwrap();
    let _: () = redis::cmd("RPUSH")
        .arg("list")
        .arg("x")
        .query(&mut c)
        .unwrap();
    let before = dump(&mut c);
    let ok = |n| at(n, Algorithm::Gcra, 1, &[q(10, 1_000_000_000)]);
    // The first decision would admit and write "fresh"; the second fails.
    let two = |second: Decision| spec::encode(60_000, &[ok(1_000), second]);
    let word = |spec: &mut Vec<u8>, i: usize, w: u64| {
        spec[i * 8..i * 8 + 8].copy_from_slice(&w.to_le_bytes())
    };
    let cases: Vec<(Vec<&str>, Vec<u8>, &str)> = vec![
        (
            vec!["fresh", "good"],
            two(ok(2_000))[..141].to_vec(),
            "ERR drl: malformed spec",
        ),
        (
            vec!["fresh", "good"],
            two(ok(2_000))[..136].to_vec(),
            "ERR drl: truncated spec",
        ),
        (
            vec!["fresh"],
            MAGIC.to_le_bytes().to_vec(),
            "ERR drl: truncated spec",
        ),
        (
            vec!["fresh"],
            {
                let mut s = spec::encode(0, &[ok(1)]);
                word(&mut s, 0, MAGIC + (1 << 32));
                s
            },
            "ERR drl: bad spec magic",
        ),
        (
            vec!["fresh", "good", "x"],
            two(ok(2_000)),
            "ERR drl: key count mismatch: 3 keys given, the spec uses 2",
        ),
        (vec!["fresh"], two(ok(2_000)), "ERR drl: key count mismatch"),
        (
            vec!["fresh", "good"],
            {
                let mut s = two(ok(2_000));
                word(&mut s, 2 + 8 + 5, 0);
                s
            },
            "ERR drl: decision 1 quota 0: limit must be at least 1",
        ),
        (
            vec!["fresh", "good"],
            {
                let mut s = two(ok(2_000));
                word(&mut s, 2 + 8 + 5 + 1, 0);
                s
            },
            "ERR drl: decision 1 quota 0: window must be longer than 0",
        ),
        (
            vec!["fresh", "good"],
            {
                let mut s = two(ok(2_000));
                word(&mut s, 2 + 8 + 5 + 2, 0);
                s
            },
            "ERR drl: decision 1 quota 0: burst must be at least 1",
        ),
        (
            vec!["fresh", "good"],
            {
                let mut s = two(ok(2_000));
                word(&mut s, 2 + 8 + 5 + 2, u64::MAX);
                s
            },
            "ERR drl: decision 1 quota 0: quota too large",
        ),
        (
            vec!["fresh", "good"],
            {
                let mut s = two(ok(2_000));
                word(&mut s, 2 + 8 + 2, 7);
                s
            },
            "ERR drl: decision 1: unknown algorithm 7",
        ),
        (
            vec!["fresh", "good"],
            {
                let mut s = two(ok(2_000));
                word(&mut s, 2 + 8 + 4, 0);
                s
            },
            "ERR drl: decision 1: no quotas",
        ),
        (vec!["fresh", "list"], two(ok(2_000)), "WRONGTYPE"),
        (
            vec!["fresh", "corrupt"],
            two(ok(2_000)),
            "ERR drl: corrupt state at key \"corrupt\": state field \"x\" is not a u64",
        ),
        (
            vec!["fresh", "good"],
            two(at(2, Algorithm::FixedWindow, 1, &[q(1, 1)])),
            "ERR drl: corrupt state at key \"good\": fixed-window state with 2 fields",
        ),
    ];
    for (keys, spec, want) in cases {
        let err = raw_decide(&mut c, &keys, &spec).expect_err(want);
        let text = format!("{}", err);
        let code = err.code().unwrap_or("").to_string();
        let full = format!("{code} {}", err.detail().unwrap_or(""));
        assert!(
            full.starts_with(want) || text.contains(want.trim_start_matches("ERR ")),
            "keys {keys:?}: expected {want:?}, got {text:?}"
        );
        assert_eq!(
            dump(&mut c),
            before,
            "an erroring call ({want}) wrote something"
        );
    }
    // Wrong arity: only a spec, or nothing.
    assert!(raw_decide(&mut c, &[], &spec::encode(0, &[ok(1)])).is_err());
    assert!(redis::cmd("DRL.DECIDE").query::<Value>(&mut c).is_err());
    assert_eq!(dump(&mut c), before);
    // The same call with good inputs does write.
    raw_decide(&mut c, &["fresh", "good"], &two(ok(2_000))).unwrap();
    assert_ne!(dump(&mut c), before);
}

#[test]
fn keys_expire_once_fresh() {
    let r = Redis::start_module();
    let mut c = r.admin();
    // gcra 1 per 5 s: after one admission the state is fresh in 5 s;
    // PX = 5000 + grace 50. (At 1 per 200 ms a loaded machine's pause
    // between two calls made the denial below an admission.)
    let d = [Decision {
        clock: Clock::Server,
        op: Op::Take,
        algorithm: Algorithm::Gcra,
        cost: 1,
        quotas: vec![q(1, 5_000_000_000), q(10, 50_000_000_000)],
        marks: vec![],
    }];
    let keys = ["ttl:a".to_string(), "ttl:b".to_string()];
    let started = std::time::Instant::now();
    let got = items(&common::decide(&mut c, &keys, 50, &d).unwrap(), &[2]);
    assert_eq!(got[0].0, 1);
    let pttl =
        |c: &mut redis::Connection, k: &str| -> i64 { redis::cmd("PTTL").arg(k).query(c).unwrap() };
    let a = pttl(&mut c, "ttl:a");
    let b = pttl(&mut c, "ttl:b");
    // PX 5050 at the write, less the time since (slack for a loaded machine).
    let since = started.elapsed().as_millis() as i64 + 2;
    assert!(
        a <= 5050 && a >= 5050 - since,
        "PTTL {a}, expected 5050 - {since} ms"
    );
    assert!(
        b <= 5050 && b >= 5050 - since,
        "PTTL {b}: 10 per 50 s, one used: fresh in 5 s (+ 50 grace)"
    );
    // Cost 0 and denials write nothing (the key keeps its expiry).
    let probe = [Decision {
        cost: 0,
        ..d[0].clone()
    }];
    common::decide(&mut c, &keys, 50, &probe).unwrap();
    let denied = items(&common::decide(&mut c, &keys, 50, &d).unwrap(), &[2]);
    assert_eq!(denied[0].0, 0);
    assert!(pttl(&mut c, "ttl:a") <= a);
    wait_until(Duration::from_secs(30), "the keys to expire", || {
        let n: i64 = redis::cmd("EXISTS")
            .arg(&keys[0])
            .arg(&keys[1])
            .query(&mut c)
            .unwrap();
        n == 0
    });
    // Fresh again: admitted.
    let again = items(&common::decide(&mut c, &keys, 50, &d).unwrap(), &[2]);
    assert_eq!(again[0].0, 1);
    assert_eq!(again[0].2, [b"".to_vec(), b"".to_vec()]);
}

#[test]
fn getkeys_version_and_replication() {
    let master = Redis::start_module();
    let mut c = master.admin();
    let v: i64 = redis::cmd("DRL.VERSION").query(&mut c).unwrap();
    assert_eq!(v, drl_redis_module::PROTOCOL_VERSION);
    let keys: Vec<String> = redis::cmd("COMMAND")
        .arg("GETKEYS")
        .arg("DRL.DECIDE")
        .arg("k1")
        .arg("k2")
        .arg("k3")
        .arg("spec")
        .query(&mut c)
        .unwrap();
    assert_eq!(keys, ["k1", "k2", "k3"]);
    // A replica WITHOUT the module follows the SETs the module replicates.
    let port = master.port.to_string();
    let replica = Redis::start_with_free_port(&["--replicaof", "127.0.0.1", &port]);
    let mut rc = replica.admin();
    wait_until(Duration::from_secs(30), "the replica to sync", || {
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query(&mut rc)
            .unwrap();
        info.contains("master_link_status:up")
    });
    let d = [
        at(
            5_000_000_000,
            Algorithm::TokenBucket,
            1,
            &[q(5, 1_000_000_000)],
        ),
        at(
            6_000_000_000,
            Algorithm::SlidingLog,
            2,
            &[q(5, 60_000_000_000)],
        ),
    ];
    let keys = ["rep:tb".to_string(), "rep:log".to_string()];
    let got = items(&common::decide(&mut c, &keys, 60_000, &d).unwrap(), &[1, 1]);
    assert_eq!((got[0].0, got[1].0), (1, 1));
    let want: Vec<Option<String>> = redis::cmd("MGET").arg(&keys[..]).query(&mut c).unwrap();
    assert_eq!(
        want,
        [
            Some("5000000000 800000000".to_string()),
            Some("6000000000 6000000000 2".to_string())
        ]
    );
    wait_until(
        Duration::from_secs(30),
        "the replica to receive the keys",
        || {
            let got: Vec<Option<String>> =
                redis::cmd("MGET").arg(&keys[..]).query(&mut rc).unwrap();
            got == want
        },
    );
    let ttl: i64 = redis::cmd("PTTL").arg(&keys[1]).query(&mut rc).unwrap();
    // 60 s until fresh + 60 s grace, less the time since.
    assert!(ttl > 110_000 && ttl <= 120_000, "replica PTTL {ttl}");
    // The replica refuses DRL.DECIDE (it has no module), the master's
    // keyspace is unaffected by reads.
    assert!(
        redis::cmd("DRL.DECIDE")
            .arg("x")
            .arg("y")
            .query::<Value>(&mut rc)
            .is_err()
    );
}

#[test]
fn reads_integer_encoded_values() {
    // Redis stores "5" as an integer object; the module must read it as text.
    let r = Redis::start_module();
    let mut c = r.admin();
    let _: () = redis::cmd("SET").arg("log").arg(5).query(&mut c).unwrap();
    let _: () = redis::cmd("SET").arg("num").arg(12).query(&mut c).unwrap();
    let enc: String = redis::cmd("OBJECT")
        .arg("ENCODING")
        .arg("log")
        .query(&mut c)
        .unwrap();
    assert_eq!(enc, "int");
    let keys = ["log".to_string()];
    let d = [at(10, Algorithm::SlidingLog, 1, &[q(5, 100)])];
    // A long grace: the key must still be there when read back.
    let got = items(&common::decide(&mut c, &keys, 60_000, &d).unwrap(), &[1]);
    assert_eq!(got[0].0, 1);
    assert_eq!(
        got[0].2,
        [b"5".to_vec()],
        "sliding-log state: last=5, empty log"
    );
    let stored: String = redis::cmd("GET").arg("log").query(&mut c).unwrap();
    assert_eq!(stored, "10 10 1");
    let err = common::decide(
        &mut c,
        &["num".to_string()],
        0,
        &[at(10, Algorithm::Gcra, 1, &[q(5, 100)])],
    )
    .unwrap_err();
    assert!(
        err.to_string()
            .contains("corrupt state at key \"num\": gcra state with 1 fields"),
        "{err}"
    );
}

#[test]
fn aof_replays_without_the_module() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let aof = ["--dir", d, "--appendonly", "yes", "--appendfsync", "always"];
    let keys = ["aof:a".to_string(), "aof:b".to_string()];
    let want: Vec<Option<String>> = {
        let path = common::module_path();
        let mut args = aof.to_vec();
        args.extend(["--loadmodule", path.to_str().unwrap()]);
        let master = Redis::start_with_free_port(&args);
        let mut c = master.admin();
        let d = [at(
            7_000_000_000,
            Algorithm::FixedWindow,
            2,
            &[q(5, 60_000_000_000), q(50, 3_600_000_000_000)],
        )];
        let got = items(&common::decide(&mut c, &keys, 0, &d).unwrap(), &[2]);
        assert_eq!(got[0].0, 1);
        redis::cmd("MGET").arg(&keys[..]).query(&mut c).unwrap()
    }; // SIGKILLed here: only the AOF remains.
    assert_eq!(want[0].as_deref(), Some("7000000000 0 2"));
    let plain = Redis::start_with_free_port(&aof);
    let mut c = plain.admin();
    let got: Vec<Option<String>> = redis::cmd("MGET").arg(&keys[..]).query(&mut c).unwrap();
    assert_eq!(got, want, "the AOF holds the module's writes as plain SETs");
    let ttl: i64 = redis::cmd("PTTL").arg(&keys[1]).query(&mut c).unwrap();
    assert!(ttl > 3_000_000, "expiry kept: {ttl}");
}

#[test]
fn cluster_checks_the_declared_keys() {
    // A one-node cluster owning every slot: Redis itself enforces that one
    // call's keys share a slot, from the key spec the module declares.
    let path = common::module_path();
    let r = Redis::start_with_free_port(&[
        "--cluster-enabled",
        "yes",
        "--loadmodule",
        path.to_str().unwrap(),
    ]);
    let mut c = r.admin();
    let _: () = redis::cmd("CLUSTER")
        .arg("ADDSLOTSRANGE")
        .arg(0)
        .arg(16383)
        .query(&mut c)
        .unwrap();
    wait_until(Duration::from_secs(30), "the cluster to be ok", || {
        let info: String = redis::cmd("CLUSTER").arg("INFO").query(&mut c).unwrap();
        info.contains("cluster_state:ok")
    });
    let d = [at(1, Algorithm::Gcra, 1, &[q(5, 1_000), q(50, 60_000)])];
    let err = common::decide(&mut c, &["a".into(), "b".into()], 0, &d).unwrap_err();
    assert_eq!(err.code(), Some("CROSSSLOT"), "{err}");
    let keys = ["{t}:1".to_string(), "{t}:2".to_string()];
    let got = items(&common::decide(&mut c, &keys, 0, &d).unwrap(), &[2]);
    assert_eq!(got[0].0, 1);
}

#[test]
fn only_written_keys_count_as_modified() {
    // Like the Lua script, a call that only reads a key (a denial, a query)
    // does not abort a transaction WATCHing it; a write does.
    let r = Redis::start_module();
    let mut c = r.admin();
    let mut other = r.admin();
    let keys = ["watched".to_string()];
    let quota = [q(1, 60_000_000_000)];
    let run = |c: &mut redis::Connection, other: &mut redis::Connection, cost| -> bool {
        let _: () = redis::cmd("WATCH").arg("watched").query(c).unwrap();
        common::decide(other, &keys, 0, &[at(5, Algorithm::Gcra, cost, &quota)]).unwrap();
        let _: () = redis::cmd("MULTI").query(c).unwrap();
        let _: () = redis::cmd("PING").query(c).unwrap();
        let v: Value = redis::cmd("EXEC").query(c).unwrap();
        !matches!(v, Value::Nil)
    };
    assert!(!run(&mut c, &mut other, 1), "an admission writes the key");
    assert!(run(&mut c, &mut other, 0), "a query writes nothing");
    assert!(run(&mut c, &mut other, 1), "a denial writes nothing");
}

#[test]
fn a_panic_is_an_error_and_writes_nothing() {
    // A sliding-log state with an entry after `last` is not one drl ever
    // writes; with debug assertions drl-core's arithmetic panics on it. The
    // module must answer an error, write nothing and keep serving.
    let r = Redis::start_module();
    let mut c = r.admin();
    let _: () = redis::cmd("SET")
        .arg("odd")
        .arg("5 9 1")
        .query(&mut c)
        .unwrap();
    let keys = ["fresh".to_string(), "odd".to_string()];
    let d = [
        at(0, Algorithm::Gcra, 1, &[q(5, 1_000)]),
        at(0, Algorithm::SlidingLog, 1, &[q(5, 100)]),
    ];
    let result = common::decide(&mut c, &keys, 0, &d);
    if cfg!(debug_assertions) {
        let err = result.unwrap_err();
        assert!(err.to_string().contains("drl: internal error"), "{err}");
        let fresh: i64 = redis::cmd("EXISTS").arg("fresh").query(&mut c).unwrap();
        assert_eq!(fresh, 0, "nothing written");
        let odd: String = redis::cmd("GET").arg("odd").query(&mut c).unwrap();
        assert_eq!(odd, "5 9 1");
    }
    let v: i64 = redis::cmd("DRL.VERSION").query(&mut c).unwrap();
    assert_eq!(
        v,
        drl_redis_module::PROTOCOL_VERSION,
        "the server still serves"
    );
}

/// A charge (mode bit 1) on a real server: every quota consumes the cost
/// past its capacity, the verdict is 1, and the stored debt (a token
/// bucket's credit above its capacity, `credit - 2^64`) is read back as a
/// debt: takes and queries are denied until time repays it, as drl-core
/// decides on the same state.
#[test]
fn charges_store_debts_that_are_read_as_debts() {
    const S: u64 = 1_000_000_000;
    let r = Redis::start_module();
    let mut c = r.admin();
    let t0 = 1_764_000_000 * S;
    let d = |op, now, cost| Decision {
        clock: Clock::Caller(now),
        op,
        algorithm: Algorithm::TokenBucket,
        cost,
        quotas: vec![q(2, 2 * S)],
        marks: vec![],
    };
    let keys = ["debt".to_string()];
    let got = items(
        &common::decide(&mut c, &keys, 0, &[d(Op::Charge, t0, 5)]).unwrap(),
        &[1],
    );
    assert_eq!(got[0].0, 1, "a charge's verdict is 1");
    let stored: String = redis::cmd("GET").arg("debt").query(&mut c).unwrap();
    // 5 tokens from a full bucket of 2: 3 tokens of debt.
    assert_eq!(stored, format!("{t0} {}", 0u64.wrapping_sub(3 * S)));
    let limiter = drl_core::Limiter::new(Algorithm::TokenBucket, q(2, 2 * S));
    let state = drl_redis_wire::state_text::parse(&limiter, stored.as_bytes()).unwrap();
    for (at, cost, admitted) in [
        (t0, 0, false),
        (t0 + 3 * S - 1, 0, false),
        (t0 + 3 * S, 0, true),
        (t0 + 4 * S - 1, 1, false),
        (t0 + 4 * S, 1, true),
    ] {
        assert_eq!(limiter.check(&state, at, cost).allowed, admitted);
        let got = items(
            &common::decide(&mut c, &keys, 0, &[d(Op::Take, at, cost)]).unwrap(),
            &[1],
        );
        assert_eq!(got[0].0, admitted as i64, "at +{} cost {cost}", at - t0);
    }
}
