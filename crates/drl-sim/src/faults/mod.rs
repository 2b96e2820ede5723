//! Fault harnesses: protocol state machines on virtual time, under a seeded
//! hostile network, with the protocol's invariant checked after every event.
//!
//! Each protocol has its own harness module ([`orbit`]); each harness draws
//! a whole scenario (ring size, configuration, workload, faults) from one
//! `u64` seed, so a seed is a complete, reproducible test case. This module
//! is the common entry point: pick a [`Protocol`], run one seed
//! ([`run_seed`]) or a range of them ([`run_seeds`]); a broken invariant
//! comes back as a [`Failure`] naming the seed, which
//! `drl sim faults --protocol P --first-seed S --seeds 1` replays.
//!
//! A new harness plugs in as one more [`Protocol`] variant (its name in
//! [`Protocol::ALL`] and [`Protocol::name`]) and one more arm in
//! [`run_seed`] that turns its report into an [`Outcome`].

pub mod gossip;
pub mod orbit;

use std::fmt;
use std::str::FromStr;

use drl_core::Nanos;

/// A protocol with a fault harness.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Protocol {
    /// The Orbit ring (strict global caps), [`orbit`].
    Orbit,
    /// Cloud Control nodes (`scope: gossip`), [`gossip`].
    Gossip,
}

impl Protocol {
    /// Every protocol, in the order they are listed to users.
    pub const ALL: &'static [Protocol] = &[Protocol::Orbit, Protocol::Gossip];

    /// The name used on the command line (`--protocol orbit`).
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Orbit => "orbit",
            Protocol::Gossip => "gossip",
        }
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A protocol name that is not in [`Protocol::ALL`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown protocol {name:?} (expected one of: {})", known())]
pub struct UnknownProtocol {
    /// The name that was given.
    pub name: String,
}

fn known() -> String {
    let names: Vec<&str> = Protocol::ALL.iter().map(|p| p.name()).collect();
    names.join(", ")
}

impl FromStr for Protocol {
    type Err = UnknownProtocol;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Protocol::ALL
            .iter()
            .copied()
            .find(|p| p.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| UnknownProtocol { name: s.to_owned() })
    }
}

/// What one passing seed did (enough to see that faults were injected and
/// requests admitted; the harness's own report has the details).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// Cost admitted, all nodes, keys and windows.
    pub admitted: u64,
    /// Node crashes injected.
    pub crashes: u64,
    /// Partitions injected.
    pub partitions: u64,
    /// Events processed.
    pub events: u64,
    /// Messages sent (before loss).
    pub messages: u64,
    /// Virtual time simulated, ns.
    pub simulated: Nanos,
}

/// Sums over the seeds of a [`run_seeds`] call.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Totals {
    /// Seeds run (all passed).
    pub seeds: u64,
    /// Sum of [`Outcome::admitted`].
    pub admitted: u64,
    /// Sum of [`Outcome::crashes`].
    pub crashes: u64,
    /// Sum of [`Outcome::partitions`].
    pub partitions: u64,
    /// Sum of [`Outcome::events`].
    pub events: u64,
    /// Sum of [`Outcome::messages`].
    pub messages: u64,
    /// Sum of [`Outcome::simulated`], ns.
    pub simulated: Nanos,
}

impl Totals {
    /// Adds one seed's outcome.
    pub fn add(&mut self, o: &Outcome) {
        self.seeds += 1;
        self.admitted += o.admitted;
        self.crashes += o.crashes;
        self.partitions += o.partitions;
        self.events += o.events;
        self.messages += o.messages;
        self.simulated += o.simulated;
    }
}

/// A seed whose run broke the protocol's invariant (or whose scenario the
/// protocol rejected).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{protocol} seed {seed}: {violation}")]
pub struct Failure {
    /// The protocol.
    pub protocol: Protocol,
    /// The failing seed: `run_seed(protocol, seed)` fails the same way.
    pub seed: u64,
    /// What broke, when (virtual time, event index) and how.
    pub violation: String,
    /// The scenario the seed drew, pretty-printed (`{:#?}`), for debugging.
    pub scenario: String,
}

/// Runs the random scenario of `seed` for `protocol`, checking the
/// invariant after every event. Deterministic: the same arguments give the
/// same result.
pub fn run_seed(protocol: Protocol, seed: u64) -> Result<Outcome, Failure> {
    match protocol {
        Protocol::Orbit => {
            let cfg = orbit::random_config(seed);
            let simulated = cfg.duration;
            match orbit::run_seed(seed) {
                Ok(r) => Ok(Outcome {
                    admitted: r.admitted.values().sum(),
                    crashes: r.crashes,
                    partitions: r.partitions,
                    events: r.events,
                    messages: r.messages,
                    simulated,
                }),
                Err(v) => Err(Failure {
                    protocol,
                    seed,
                    violation: v.to_string(),
                    scenario: format!("{cfg:#?}"),
                }),
            }
        }
        Protocol::Gossip => {
            let sc = gossip::random_scenario(seed);
            match gossip::run(&sc, seed) {
                Ok(r) => Ok(Outcome {
                    admitted: r.admitted,
                    crashes: r.kills,
                    partitions: r.partitions,
                    events: r.events,
                    messages: r.payloads,
                    simulated: sc.duration,
                }),
                Err(v) => Err(Failure {
                    protocol,
                    seed,
                    violation: v.to_string(),
                    scenario: format!("{sc:#?}"),
                }),
            }
        }
    }
}

/// Runs `count` seeds from `first` on (`first`, `first + 1`, ...; wrapping
/// past `u64::MAX`) and sums their outcomes; stops at the first failing
/// seed. After each passing seed, `progress` is called with the number of
/// seeds done so far (1 to `count`).
pub fn run_seeds(
    protocol: Protocol,
    first: u64,
    count: u64,
    progress: &mut dyn FnMut(u64),
) -> Result<Totals, Failure> {
    let mut totals = Totals::default();
    for i in 0..count {
        let outcome = run_seed(protocol, first.wrapping_add(i))?;
        totals.add(&outcome);
        progress(i + 1);
    }
    Ok(totals)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protocols_parse_by_name() {
        for &p in Protocol::ALL {
            assert_eq!(p.name().parse::<Protocol>(), Ok(p));
            assert_eq!(p.to_string(), p.name());
        }
        assert_eq!("ORBIT".parse::<Protocol>(), Ok(Protocol::Orbit));
        let err = "raft".parse::<Protocol>().unwrap_err();
        assert_eq!(
            err.to_string(),
            "unknown protocol \"raft\" (expected one of: orbit, gossip)"
        );
    }

    #[test]
    fn a_seed_is_a_reproducible_test_case() {
        for seed in 0..5 {
            let a = run_seed(Protocol::Orbit, seed);
            assert_eq!(a, run_seed(Protocol::Orbit, seed));
            let a = a.unwrap();
            assert!(a.events > 0 && a.simulated > 0, "seed {seed}: {a:?}");
        }
    }

    #[test]
    fn run_seeds_sums_outcomes_and_reports_progress() {
        let mut seen = Vec::new();
        let totals = run_seeds(Protocol::Orbit, 10, 4, &mut |n| seen.push(n)).unwrap();
        assert_eq!(seen, vec![1, 2, 3, 4]);
        let mut expected = Totals::default();
        for seed in 10..14 {
            expected.add(&run_seed(Protocol::Orbit, seed).unwrap());
        }
        assert_eq!(totals, expected);
        assert_eq!(totals.seeds, 4);
        let none = run_seeds(Protocol::Orbit, 0, 0, &mut |_| panic!("no seed run"));
        assert_eq!(none, Ok(Totals::default()));
    }
}
