//! Real `drl serve` processes for end-to-end tests: started from a config
//! text on free loopback ports, their addresses read from the "listening"
//! line, stderr kept; conditions waited on with deadlines; a minimal
//! blocking HTTP/1.1 client. The binary is a parameter: only drl's own
//! tests know it (`env!("CARGO_BIN_EXE_drl")`, see
//! `crates/drl/tests/common`).

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long any single wait may take before a test fails.
pub const DEADLINE: Duration = Duration::from_secs(30);

/// Fixed windows are aligned to the Unix epoch (docs/semantics.md): an
/// hourly window ends at the top of every hour, and an exhausted key is
/// fresh again then. Tests count admissions of hourly fixed windows (a
/// quota that cannot refill within the test, except at that instant), so
/// the first `drl serve` a test binary starts waits, when the wall clock
/// is this close to the top of an hour, until the hour has turned. A
/// condition on the clock, not a verdict: it costs at most this long, in
/// the runs that start in the last minutes of an hour.
pub const HOUR_MARGIN: Duration = Duration::from_secs(120);

/// Returns once the wall clock is more than `margin` before the end of
/// its current epoch-aligned `window` (waiting out the window's end if
/// need be): what a test does within `margin` then stays in one window.
pub fn clear_of_window_end(window: Duration, margin: Duration) {
    let w = window.as_nanos();
    loop {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock after 1970")
            .as_nanos();
        let left = w - now % w;
        if left > margin.as_nanos() {
            return;
        }
        std::thread::sleep(Duration::from_nanos(left as u64) + Duration::from_millis(10));
    }
}

/// A running `drl serve` (the binary given to the constructors), killed
/// on drop.
pub struct Drl {
    /// The child process.
    pub child: Child,
    /// HTTP address.
    pub http: SocketAddr,
    /// gRPC address.
    pub grpc: SocketAddr,
    /// The config file it was started with.
    pub config: PathBuf,
    /// Everything it wrote to stderr so far.
    pub log: Arc<Mutex<Vec<String>>>,
    /// Keeps the temp dir alive.
    pub dir: tempfile::TempDir,
}

impl Drl {
    /// Writes `yaml` to a temp file and starts `BIN serve` on free
    /// loopback ports; returns once it is ready.
    pub fn start(bin: &Path, yaml: &str) -> Drl {
        Self::start_with(bin, yaml, &[])
    }

    /// Like [`Drl::start`] with extra arguments.
    pub fn start_with(bin: &Path, yaml: &str, extra: &[&str]) -> Drl {
        let mut args = vec!["--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0"];
        args.extend_from_slice(extra);
        Self::start_args(bin, yaml, &args)
    }

    /// Starts `BIN serve --config FILE ARGS...` (no address flags added:
    /// the file's `listen:` applies unless `args` override it).
    pub fn start_args(bin: &Path, yaml: &str, args: &[&str]) -> Drl {
        let drl = Self::spawn(bin, yaml, args);
        drl.wait_ready();
        drl
    }

    /// Starts `BIN serve --config FILE ARGS...` and waits for its
    /// "listening" line only (not for `/readyz`: for listeners that need
    /// TLS or tokens).
    pub fn spawn(bin: &Path, yaml: &str, args: &[&str]) -> Drl {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("drl.yaml");
        std::fs::write(&config, yaml).unwrap();
        Self::spawn_at(bin, dir, config, args, &[])
    }

    /// Like [`Drl::start`] with `env` added to its environment.
    pub fn start_env(bin: &Path, yaml: &str, env: &[(&str, &str)]) -> Drl {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("drl.yaml");
        std::fs::write(&config, yaml).unwrap();
        let args = ["--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0"];
        let drl = Self::spawn_at(bin, dir, config, &args, env);
        drl.wait_ready();
        drl
    }

    /// Starts `BIN serve --config DIR` on free loopback ports, `DIR`
    /// holding `files` (name, text), and waits until it is ready.
    pub fn start_dir(bin: &Path, files: &[(&str, &str)]) -> Drl {
        let drl = Self::spawn_dir(bin, files, &[]);
        drl.wait_ready();
        drl
    }

    /// Starts `BIN serve --config DIR` on free loopback ports, `DIR`
    /// holding `files` (name, text), with `env` added, and waits for its
    /// "listening" line only (not for `/readyz`).
    pub fn spawn_dir(bin: &Path, files: &[(&str, &str)], env: &[(&str, &str)]) -> Drl {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("config");
        std::fs::create_dir(&config).unwrap();
        for (name, text) in files {
            std::fs::write(config.join(name), text).unwrap();
        }
        Self::spawn_at(
            bin,
            dir,
            config,
            &["--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0"],
            env,
        )
    }

    /// Starts `BIN serve --config CONFIG ARGS...` with `env` added
    /// (`dir` holds `config` and is kept with the process).
    fn spawn_at(
        bin: &Path,
        dir: tempfile::TempDir,
        config: PathBuf,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Drl {
        static CLEAR: std::sync::Once = std::sync::Once::new();
        CLEAR.call_once(|| clear_of_window_end(Duration::from_secs(3600), HOUR_MARGIN));
        let mut child = Command::new(bin)
            .arg("serve")
            .arg("--config")
            .arg(&config)
            .args(args)
            .envs(env.iter().copied())
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start drl");
        let log = Arc::new(Mutex::new(Vec::new()));
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        {
            let log = log.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines() {
                    let Ok(line) = line else { break };
                    if let Some(rest) = line.strip_prefix("drl serve: listening ") {
                        let _ = tx.send(rest.to_string());
                    }
                    log.lock().unwrap().push(line);
                }
            });
        }
        let line = match rx.recv_timeout(DEADLINE) {
            Ok(l) => l,
            Err(_) => {
                let _ = child.kill();
                panic!(
                    "drl serve did not start; log:\n{}",
                    log.lock().unwrap().join("\n")
                );
            }
        };
        let mut http = None;
        let mut grpc = None;
        for part in line.split_whitespace() {
            if let Some(a) = part.strip_prefix("http=") {
                http = Some(a.parse().unwrap());
            }
            if let Some(a) = part.strip_prefix("grpc=") {
                grpc = Some(a.parse().unwrap());
            }
        }
        Drl {
            child,
            http: http.expect("http address"),
            grpc: grpc.expect("grpc address"),
            config,
            log,
            dir,
        }
    }

    /// `http://ADDR`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.http)
    }

    /// `http://ADDR` of the gRPC port.
    pub fn grpc_url(&self) -> String {
        format!("http://{}", self.grpc)
    }

    /// Polls `/readyz` until it answers 200.
    pub fn wait_ready(&self) {
        let url = self.url("/readyz");
        wait_for("drl /readyz", || {
            http_get(&url).is_some_and(|(status, _)| status == 200)
        });
    }

    /// Waits until stderr has a line containing `needle`; returns it.
    pub fn wait_log(&self, needle: &str) -> String {
        let mut found = None;
        let what = format!("log line {needle:?}");
        wait_for_or(
            &what,
            || self.log.lock().unwrap().join("\n"),
            || {
                found = self
                    .log
                    .lock()
                    .unwrap()
                    .iter()
                    .find(|l| l.contains(needle))
                    .cloned();
                found.is_some()
            },
        );
        found.unwrap()
    }

    /// How many stderr lines contain `needle`.
    pub fn count_log(&self, needle: &str) -> usize {
        self.log
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.contains(needle))
            .count()
    }

    /// Sends a signal (`TERM`, `HUP`, `STOP`, `CONT`) to the process.
    /// `STOP` returns once every thread of the process is stopped and
    /// `CONT` once none is: the kernel delivers a stop asynchronously, and
    /// a thread still running on the other core could otherwise answer a
    /// request sent right after `kill` returned.
    pub fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(self.child.id().to_string())
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill -{sig} failed");
        let want_stopped = match sig {
            "STOP" => true,
            "CONT" => false,
            _ => return,
        };
        let start = Instant::now();
        while self.all_threads_stopped() != want_stopped {
            assert!(
                start.elapsed() < DEADLINE,
                "drl's threads did not {} after SIG{sig}",
                if want_stopped { "stop" } else { "resume" }
            );
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// True if every thread of the process is in the stopped state (`T`
    /// in /proc/PID/task/TID/stat).
    fn all_threads_stopped(&self) -> bool {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{}/task", self.child.id())) else {
            return false;
        };
        tasks.filter_map(Result::ok).all(|t| {
            std::fs::read_to_string(t.path().join("stat"))
                .ok()
                .and_then(|st| {
                    st.rsplit_once(')')
                        .map(|(_, rest)| rest.trim_start().starts_with('T'))
                })
                .unwrap_or(true)
        })
    }

    /// Waits for the process to exit; returns its status.
    pub fn wait_exit(&mut self) -> std::process::ExitStatus {
        let start = Instant::now();
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                return s;
            }
            assert!(start.elapsed() < DEADLINE, "drl did not exit");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Drl {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Polls `cond` every 20 ms until it holds; panics after [`DEADLINE`].
pub fn wait_for(what: &str, cond: impl FnMut() -> bool) {
    wait_for_or(what, String::new, cond);
}

/// Like [`wait_for`]; on timeout the panic shows `context()`.
pub fn wait_for_or(what: &str, context: impl Fn() -> String, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(
            start.elapsed() < DEADLINE,
            "timed out waiting for {what}\n{}",
            context()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Status, lowercase headers and body of an HTTP response.
pub type HttpResponse = (u16, Vec<(String, String)>, String);

/// A minimal blocking HTTP/1.1 request (no dependency on an async runtime):
/// returns status, lowercase headers and body.
pub fn http_request(
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Option<HttpResponse> {
    use std::io::{Read, Write};
    let rest = url.strip_prefix("http://")?;
    let (host, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let path = if path.is_empty() { "/" } else { path };
    let mut s = std::net::TcpStream::connect(host).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).ok()?;
    let _ = s.write_all(body);
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).ok()?;
    parse_response(&raw)
}

/// Parses a raw HTTP/1.1 response (content-length or chunked).
pub fn parse_response(raw: &[u8]) -> Option<HttpResponse> {
    let text = String::from_utf8_lossy(raw);
    let (head, body) = text.split_once("\r\n\r\n")?;
    let mut lines = head.lines();
    let status: u16 = lines.next()?.split_whitespace().nth(1)?.parse().ok()?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let chunked = headers
        .iter()
        .any(|(k, v)| k == "transfer-encoding" && v.contains("chunked"));
    let body = if chunked {
        dechunk(body)
    } else {
        body.to_string()
    };
    Some((status, headers, body))
}

fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = s.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        s = rest[n..].strip_prefix("\r\n").unwrap_or(&rest[n..]);
    }
    out
}

/// GET: status and body.
pub fn http_get(url: &str) -> Option<(u16, String)> {
    http_request("GET", url, &[], b"").map(|(s, _, b)| (s, b))
}
