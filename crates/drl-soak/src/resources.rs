//! RSS (`VmRSS` of /proc/PID/status) and open file descriptors (entries
//! of /proc/PID/fd) of every process, sampled every [`EVERY`], written to
//! a CSV, and judged at the end: after warm-up, a process incarnation
//! (one pid) must not grow beyond [`RSS_GROWTH`] x its post-warm-up level
//! + [`RSS_SLACK_KIB`], nor its fds beyond + [`FD_SLACK`].

use std::collections::BTreeMap;
use std::io::Write;
use std::time::Duration;

/// Sampling period.
pub const EVERY: Duration = Duration::from_secs(5);
/// Allowed RSS growth factor from the post-warm-up level to the end.
pub const RSS_GROWTH: f64 = 1.25;
/// Plus this much (KiB): allocator noise on a small heap.
pub const RSS_SLACK_KIB: u64 = 8 * 1024;
/// Allowed growth in open fds.
pub const FD_SLACK: u64 = 16;
/// A pid needs this many samples after its warm-up to be judged.
pub const MIN_SAMPLES: usize = 6;

/// One sample.
#[derive(Debug, Clone)]
pub struct Sample {
    /// Seconds since the start of the run.
    pub t_s: u64,
    /// Process name.
    pub name: String,
    /// Its pid.
    pub pid: u32,
    /// Resident set, KiB.
    pub rss_kib: u64,
    /// Open file descriptors.
    pub fds: u64,
}

/// RSS (KiB) and open fds of `pid`, or `None` if it is gone.
pub fn read(pid: u32) -> Option<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let rss = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count() as u64;
    Some((rss, fds))
}

/// The samples so far and the CSV they go to.
pub struct Resources {
    /// Every sample.
    pub samples: Vec<Sample>,
    csv: Box<dyn Write + Send>,
}

impl Resources {
    /// Writes the CSV header to `csv`.
    pub fn new(mut csv: Box<dyn Write + Send>) -> Resources {
        let _ = writeln!(csv, "t_s,process,pid,rss_kib,fds");
        Resources {
            samples: Vec::new(),
            csv,
        }
    }

    /// Samples every `(name, pid)` at `t_s`.
    pub fn sample(&mut self, t_s: u64, procs: &[(String, u32)]) {
        for (name, pid) in procs {
            if let Some((rss_kib, fds)) = read(*pid) {
                let _ = writeln!(self.csv, "{t_s},{name},{pid},{rss_kib},{fds}");
                self.samples.push(Sample {
                    t_s,
                    name: name.clone(),
                    pid: *pid,
                    rss_kib,
                    fds,
                });
            }
        }
        let _ = self.csv.flush();
    }

    /// Judges growth with warm-up `warmup_s` (counted from each pid's
    /// first sample): the failures, and one line per pid judged.
    pub fn verdict(&self, warmup_s: u64) -> (Vec<String>, Vec<String>) {
        let mut by_pid: BTreeMap<(String, u32), Vec<&Sample>> = BTreeMap::new();
        for s in &self.samples {
            by_pid.entry((s.name.clone(), s.pid)).or_default().push(s);
        }
        let (mut fails, mut lines) = (Vec::new(), Vec::new());
        for ((name, pid), v) in by_pid {
            let t0 = v[0].t_s;
            let after: Vec<&&Sample> = v.iter().filter(|s| s.t_s >= t0 + warmup_s).collect();
            if after.len() < MIN_SAMPLES {
                lines.push(format!(
                    "{name} pid {pid}: {} samples after warm-up, not judged",
                    after.len()
                ));
                continue;
            }
            let third = after.len() / 3;
            let head = &after[..third];
            let tail = &after[after.len() - third..];
            let base_rss = head.iter().map(|s| s.rss_kib).max().unwrap_or(0);
            let end_rss = tail.iter().map(|s| s.rss_kib).max().unwrap_or(0);
            let base_fds = head.iter().map(|s| s.fds).max().unwrap_or(0);
            let end_fds = tail.iter().map(|s| s.fds).max().unwrap_or(0);
            let rss_bound = (base_rss as f64 * RSS_GROWTH) as u64 + RSS_SLACK_KIB;
            let line = format!(
                "{name} pid {pid}: RSS {base_rss} -> {end_rss} KiB (bound {rss_bound}), fds {base_fds} -> {end_fds} (bound {}), s={}..{}",
                base_fds + FD_SLACK,
                after[0].t_s,
                after[after.len() - 1].t_s
            );
            if end_rss > rss_bound {
                fails.push(format!(
                    "s={} resources: {name} RSS grew after warm-up: {line}",
                    tail[0].t_s
                ));
            }
            if end_fds > base_fds + FD_SLACK {
                fails.push(format!(
                    "s={} resources: {name} fds grew after warm-up: {line}",
                    tail[0].t_s
                ));
            }
            lines.push(line);
        }
        (fails, lines)
    }

    /// Largest RSS (KiB) and fds per process name, over all its pids.
    pub fn maxima(&self) -> BTreeMap<String, (u64, u64)> {
        let mut m: BTreeMap<String, (u64, u64)> = BTreeMap::new();
        for s in &self.samples {
            let e = m.entry(s.name.clone()).or_default();
            e.0 = e.0.max(s.rss_kib);
            e.1 = e.1.max(s.fds);
        }
        m
    }
}
