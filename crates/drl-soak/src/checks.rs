//! The checks, from the clients' own counts ([`crate::load::Counts`]),
//! run every second over what is complete (seconds and windows that ended
//! more than [`LAG`] ago, so that every request of them has been answered
//! or has timed out):
//!
//! - **Orbit**: per window, the admissions of all 5 nodes sum to at most
//!   the cap. No exclusion: Orbit's invariant holds through every fault.
//! - **Gossip**: per second, the 3 nodes admit at most the limit + 10 %,
//!   counting the admissions surely decided in that second (sent and
//!   answered within it: a request sent late in one second and answered in
//!   the next may have been decided, and charged, in either; on a loaded
//!   machine counting by send time alone put up to a second's late
//!   answers into the wrong second), except in the first [`GOSSIP_WARMUP_S`] s and within
//!   [`GOSSIP_EXCLUDE_S`] s after a fault on a gossip node starts or ends
//!   (docs/gossip.md: a peer is declared down within the detection bound
//!   of 1.2 s, its demand is kept for half of `stale_after` (1.2 s), the
//!   limit in force then rises over `rise`; a restarted node starts at
//!   1/N until membership confirms its peers; the 1 s EWMA of demand needs
//!   about a second to follow. 1.2 + 1.2 + 1 s, rounded up to 4 s). GRD
//!   admits each request with a probability set from a 1 s EWMA of
//!   demand, so it holds the limit on average, not against a surge: a
//!   second whose offered demand is above the mean of the two seconds
//!   before (a client starved by the loaded machine sending its delayed
//!   requests at once) is judged against the bound scaled by that surge,
//!   `1.1 x limit x offered(s) / mean(offered(s-1), offered(s-2))`, and
//!   logged with the factor.
//! - **Redis** (2 nodes, one Redis) and **local**: per window, admissions
//!   never exceed the quota, and equal it when demand exceeded it (sent in
//!   that window: at least 1.5 x quota, every request answered) — except
//!   windows that overlap a Redis restart (the counters are lost, and the
//!   `deny` failure policy answers meanwhile) or, for the local node, its
//!   own restart (its counters are in memory); a window next to a SIGSTOP
//!   of one of the limit's nodes is held to the quota only, not to
//!   equality (what was sent in it is decided after the resume, in a
//!   later window).
//! - **Answers**: every request got decisions, or a clear error
//!   (problem+json, a gRPC status) or a failed connection while its node
//!   was killed, stopped or restarting (plus [`GRACE_S`]); every bad input
//!   got a 4xx with problem+json (or a gRPC NOT_FOUND/INVALID_ARGUMENT).

use std::collections::BTreeMap;
use std::io::Write;

use crate::faults::Injected;
use crate::load::{Counts, Recorder, TIMEOUT};
use crate::processes::Group;
use crate::topology::{
    GOSSIP_LIMIT, LOCAL_QUOTA, LOCAL_WINDOW_MS, ORBIT_CAP, ORBIT_WINDOW_MS, REDIS_OPEN_MS,
    REDIS_QUOTA, REDIS_WINDOW_MS,
};

/// A second or window is checked once it ended this long ago (ns).
pub const LAG: u64 = TIMEOUT.as_nanos() as u64 + 3_000_000_000;
/// Gossip is not checked in the first seconds of the load (membership
/// forms, estimates converge).
pub const GOSSIP_WARMUP_S: u64 = 10;
/// Seconds excluded from the gossip check after a fault edge (see the
/// module doc).
pub const GOSSIP_EXCLUDE_S: u64 = 4;
/// A failed connection to a node counts as expected this long after the
/// node was back (pooled connections to the old process fail once).
pub const GRACE_S: u64 = 2;
/// Gossip's tolerance over the limit, per second.
pub const GOSSIP_TOLERANCE: f64 = 0.10;

const S: u64 = 1_000_000_000;

/// Tallies of one check.
#[derive(Debug, Default, Clone, Copy)]
pub struct Tally {
    /// Seconds or windows checked and passed.
    pub passed: u64,
    /// Checked and failed.
    pub failed: u64,
    /// Not checked (excluded), with the reason in the log.
    pub excluded: u64,
    /// Largest value seen in a checked unit (admissions).
    pub max: u64,
}

/// The incremental checker.
pub struct Checker {
    names: Vec<String>,
    groups: Vec<Group>,
    t0_ns: u64,
    next_second: u64,
    next_window: BTreeMap<&'static str, u64>,
    next_unanswered: usize,
    /// Per check name, its tallies.
    pub tallies: BTreeMap<&'static str, Tally>,
    /// Every failure, as printed.
    pub failures: Vec<String>,
    /// Gossip findings are printed and tallied but do not fail the run
    /// (for clusters run with `grd_draws: independent`, whose binomial
    /// spread passes the per-second bound about one second in 500).
    pub gossip_advisory: bool,
    log: Box<dyn Write + Send>,
}

impl Checker {
    /// A checker for processes `names`/`groups` (indexed as the
    /// topology), writing its per-second lines to `log`.
    pub fn new(
        names: Vec<String>,
        groups: Vec<Group>,
        t0_ns: u64,
        log: Box<dyn Write + Send>,
    ) -> Checker {
        Checker {
            names,
            groups,
            t0_ns,
            next_second: 0,
            next_window: BTreeMap::new(),
            next_unanswered: 0,
            tallies: BTreeMap::new(),
            failures: Vec::new(),
            gossip_advisory: false,
            log,
        }
    }

    fn line(&mut self, s: String) {
        let _ = writeln!(self.log, "{s}");
    }

    fn fail(&mut self, check: &'static str, s: String) {
        if check == "gossip" && self.gossip_advisory {
            eprintln!("ADVISORY {s}");
            self.line(format!("ADVISORY {s}"));
            self.tallies.entry(check).or_default().failed += 1;
            return;
        }
        eprintln!("FAIL {s}");
        self.line(format!("FAIL {s}"));
        self.failures.push(s);
        self.tallies.entry(check).or_default().failed += 1;
    }

    /// Checks everything that ended before `now_ns - LAG`.
    pub fn step(&mut self, rec: &Recorder, faults: &[Injected], now_ns: u64) {
        self.upto(rec, faults, now_ns.saturating_sub(LAG));
    }

    /// Checks everything that ended before `horizon_ns` (the end of the
    /// load, once every request is answered).
    pub fn upto(&mut self, rec: &Recorder, faults: &[Injected], horizon_ns: u64) {
        rec.with(|c| {
            self.gossip(c, faults, horizon_ns);
            self.windows(c, faults, horizon_ns, "o");
            self.windows(c, faults, horizon_ns, "r");
            self.windows(c, faults, horizon_ns, "l");
            self.answers(c, faults, horizon_ns);
        });
        let _ = self.log.flush();
    }

    fn sec_of(&self, ns: u64) -> u64 {
        ns.saturating_sub(self.t0_ns) / S
    }

    fn gossip(&mut self, c: &Counts, faults: &[Injected], horizon_ns: u64) {
        let limit = GOSSIP_LIMIT as f64 * (1.0 + GOSSIP_TOLERANCE);
        let gossip: Vec<usize> = (0..self.groups.len())
            .filter(|&i| self.groups[i] == Group::Gossip)
            .collect();
        while self.t0_ns + (self.next_second + 1) * S <= horizon_ns {
            let s = self.next_second;
            self.next_second += 1;
            let slot = c.seconds.get(&("g", s)).copied().unwrap_or_default();
            let (from, to) = (self.t0_ns + s * S, self.t0_ns + (s + 1) * S);
            let edge = faults.iter().find(|f| {
                f.kind != "reload-spare"
                    && f.kind != "reload-same"
                    && f.nodes.iter().any(|n| gossip.contains(n))
                    && [f.start_ns, f.end_ns]
                        .iter()
                        .any(|&e| e < to && e.saturating_add(GOSSIP_EXCLUDE_S * S) > from)
            });
            // GRD enforces the limit on a 1 s EWMA of demand: a surge over
            // the recent mean is admitted in proportion until the estimate
            // follows.
            let before = |d: u64| {
                c.seconds
                    .get(&("g", s.wrapping_sub(d)))
                    .map_or(0, |x| x.offered)
            };
            let mean = (before(1) + before(2)) as f64 / 2.0;
            let surge = if s >= 2 && mean > 0.0 {
                (slot.offered as f64 / mean).max(1.0)
            } else {
                1.0
            };
            let scaled = limit * surge;
            let t = self.tallies.entry("gossip").or_default();
            let head = format!(
                "s={s:>5} gossip admitted={} (within the second {}) offered={} unknown={}",
                slot.admitted, slot.admitted_within, slot.offered, slot.unknown
            );
            let admitted = slot.admitted_within;
            if s < GOSSIP_WARMUP_S {
                t.excluded += 1;
                self.line(format!("{head} excluded (warm-up)"));
            } else if let Some(f) = edge {
                t.excluded += 1;
                self.line(format!(
                    "{head} excluded ({} at s={})",
                    f.kind,
                    self.sec_of(f.start_ns)
                ));
            } else if admitted as f64 > limit && admitted as f64 <= scaled {
                t.passed += 1;
                t.max = t.max.max(admitted);
                self.line(format!(
                    "{head} ok (<= {scaled:.0}: demand surge x{surge:.2} over s-1, s-2: {}, {})",
                    before(1),
                    before(2)
                ));
            } else if admitted as f64 > scaled {
                let per: Vec<String> = gossip
                    .iter()
                    .map(|&n| {
                        format!(
                            "{}={}",
                            self.names[n],
                            c.node_seconds.get(&(n, s)).copied().unwrap_or(0)
                        )
                    })
                    .collect();
                self.fail(
                    "gossip",
                    format!(
                        "s={s} gossip: admitted {admitted} within one second > {GOSSIP_LIMIT} + 10% = {limit:.0} (x{surge:.2} demand surge: {scaled:.0}; offered {}, before {}, {}) ({})",
                        slot.offered,
                        before(1),
                        before(2),
                        per.join(" ")
                    ),
                );
            } else {
                t.passed += 1;
                t.max = t.max.max(admitted);
                self.line(format!("{head} ok (<= {limit:.0})"));
            }
        }
    }

    fn windows(&mut self, c: &Counts, faults: &[Injected], horizon_ns: u64, limit: &'static str) {
        let (check, cap, window_ms, group) = match limit {
            "o" => ("orbit", ORBIT_CAP, ORBIT_WINDOW_MS, Group::Orbit),
            "r" => ("redis", REDIS_QUOTA, REDIS_WINDOW_MS, Group::Redis),
            _ => ("local", LOCAL_QUOTA, LOCAL_WINDOW_MS, Group::Local),
        };
        let w_ns = window_ms * 1_000_000;
        let first = self.t0_ns / w_ns + 1; // the first whole window of the run
        let next = self.next_window.entry(limit).or_insert(first);
        let mut todo = Vec::new();
        while (*next + 1) * w_ns <= horizon_ns {
            todo.push(*next);
            *next += 1;
        }
        for w in todo {
            let (from, to) = (w * w_ns, (w + 1) * w_ns);
            let s = self.sec_of(from);
            let adm = c
                .windows
                .get(&(limit, w))
                .copied()
                .unwrap_or_default()
                .admitted;
            let sent = c.sent_windows.get(&(limit, w)).copied().unwrap_or_default();
            let before = c
                .sent_windows
                .get(&(limit, w.wrapping_sub(1)))
                .copied()
                .unwrap_or_default();
            let per: Vec<String> = (0..self.groups.len())
                .filter(|&i| self.groups[i] == group)
                .map(|n| {
                    format!(
                        "{}={}",
                        self.names[n],
                        c.node_windows.get(&(limit, w, n)).copied().unwrap_or(0)
                    )
                })
                .collect();
            let head = format!(
                "s={s:>5} {check} window={w} admitted={adm} offered={} unknown={}",
                sent.offered, sent.unknown
            );
            // Counters lost or a failure policy deciding: Redis restarts
            // for the Redis limit, the local node's restart for its limit.
            let reset = faults.iter().find(|f| {
                let touches = match limit {
                    "r" => f.kind == "redis-restart",
                    "l" => {
                        f.kind == "kill-restart"
                            && f.nodes.iter().any(|&n| self.groups[n] == Group::Local)
                    }
                    _ => false,
                };
                let end = f.end_ns.saturating_add(REDIS_OPEN_MS * 1_000_000 + S);
                touches && f.start_ns < to && end > from
            });
            if let Some(f) = reset {
                self.tallies.entry(check).or_default().excluded += 1;
                self.line(format!(
                    "{head} excluded ({} at s={})",
                    f.kind,
                    self.sec_of(f.start_ns)
                ));
                continue;
            }
            if adm > cap {
                self.fail(
                    check,
                    format!(
                        "s={s} {check} window {w}: admitted {adm} > cap {cap} ({})",
                        per.join(" ")
                    ),
                );
                continue;
            }
            // A node of this limit stopped (SIGSTOP) in or next to the
            // window decides what was sent in it after it resumes, in a
            // later window: the cap still holds, exactness cannot.
            let group = match limit {
                "r" => Some(Group::Redis),
                "l" => Some(Group::Local),
                _ => None,
            };
            let stopped = faults.iter().any(|f| {
                f.kind == "stop-cont"
                    && f.nodes.iter().any(|&n| Some(self.groups[n]) == group)
                    && f.start_ns < to
                    && f.end_ns.saturating_add(S) > from
            });
            let must_fill = limit != "o"
                && !stopped
                && sent.offered >= cap * 3 / 2
                && sent.unknown == 0
                && before.unknown == 0;
            if must_fill && adm != cap {
                self.fail(
                    check,
                    format!(
                        "s={s} {check} window {w}: admitted {adm} != quota {cap} with {} offered, all answered ({})",
                        sent.offered,
                        per.join(" ")
                    ),
                );
                continue;
            }
            let t = self.tallies.entry(check).or_default();
            t.passed += 1;
            t.max = t.max.max(adm);
            let how = if must_fill {
                format!("ok (== {cap})")
            } else {
                format!("ok (<= {cap})")
            };
            self.line(format!("{head} {how}"));
        }
    }

    fn answers(&mut self, c: &Counts, faults: &[Injected], horizon_ns: u64) {
        while let Some(u) = c.unanswered.get(self.next_unanswered) {
            if u.done_ns >= horizon_ns {
                break;
            }
            self.next_unanswered += 1;
            let disturbed = |node: usize| {
                faults.iter().any(|f| {
                    matches!(f.kind, "kill-restart" | "stop-cont")
                        && f.nodes.contains(&node)
                        && f.start_ns <= u.done_ns
                        && f.end_ns.saturating_add(GRACE_S * S) >= u.sent_ns
                })
            };
            let excused = !u.bad && (u.transport || u.clear) && disturbed(u.node)
                || u.bad && u.transport && disturbed(u.node);
            let t = self.tallies.entry("answers").or_default();
            if excused {
                t.excluded += 1;
            } else {
                let s = self.sec_of(u.sent_ns);
                let msg = format!(
                    "s={s} answers: {} got {:?} after {} ms (clear: {})",
                    self.names[u.node],
                    u.kind,
                    (u.done_ns - u.sent_ns) / 1_000_000,
                    u.clear
                );
                self.fail("answers", msg);
            }
        }
    }
}
