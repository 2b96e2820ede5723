//! drl's endurance run (`scripts/soak`, RELIABILITY.md): real `drl serve`
//! and `redis-server` processes on loopback — 3 gossip nodes, a 5-node
//! Orbit ring, 2 nodes on one Redis, 1 local-scope node — under mixed
//! HTTP and gRPC load (hot keys and a flood of distinct keys, bad inputs
//! among them), with faults on a seeded schedule. Every second the clients'
//! own counts are checked against each scope's promise; RSS and open file
//! descriptors of every process are sampled and must not grow after
//! warm-up.
//!
//! | module | what it holds |
//! |---|---|
//! | [`processes`] | start/stop/SIGKILL/SIGSTOP/SIGCONT/restart of the processes |
//! | [`topology`] | the nodes, their limits and config files |
//! | [`load`] | the clients and the [`load::Recorder`] of what they saw |
//! | [`faults`] | the seeded fault schedule |
//! | [`checks`] | the per-second checks |
//! | [`resources`] | RSS and fd sampling, the growth verdict, the CSV |
//! | [`run`] | one run, start to summary |

pub mod checks;
pub mod faults;
pub mod load;
pub mod processes;
pub mod resources;
pub mod run;
pub mod topology;
