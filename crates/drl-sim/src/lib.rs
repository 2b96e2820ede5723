//! drl-sim: a deterministic discrete-event simulator for distributed rate
//! limiting. TCP NewReno+SACK flows cross policing limiters, each one
//! `drl_cluster::cloud_control::Node` (the node `drl serve` runs for
//! `scope: gossip`); runs produce rate time series, per-flow goodput and
//! fairness, reproducing the Cloud Control paper's experiments.
//!
//! Time is integer nanoseconds; events are ordered by `(time, sequence)`;
//! every random draw comes from a seeded per-component ChaCha8 stream. The
//! same scenario and seed produce byte-identical output.
//!
//! [`faults`] runs protocol state machines (the Orbit ring, Cloud Control
//! nodes) on the same event queue under seeded loss, delay, duplication,
//! crashes and partitions, and checks their invariants (`drl sim faults`).
//! [`node_trace`] replays a recorded trace through a node as the simulator
//! drives it.

pub mod engine;
pub mod event;
pub mod experiment;
pub mod faults;
pub mod figures;
pub mod metrics;
pub mod node_trace;
pub mod plot;
pub mod report;
pub mod rng;
pub mod scenario;
pub mod tcp;

pub use engine::{FlowResult, RunOptions, RunResult, TickSample, run, run_with};
pub use experiment::{Experiment, ExperimentResult, Progress, Summary};
pub use scenario::{Scenario, ScenarioError};
