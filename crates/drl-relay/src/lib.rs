//! drl-relay: Cloud Control on real packets.
//!
//! The relay takes packets from a Linux NFQUEUE, classifies them into
//! configured limits, and forwards or drops each one with drl-cluster's
//! Cloud Control node: alone (`scope: local`) or sharing a global limit
//! with other relays by gossip (`scope: gossip`, through drl-cluster-net's
//! [`drl_cluster_net::GossipStore`]: the same node, transport and membership as
//! `drl serve`). docs/relay.md is the operator's guide.
//!
//! Sans-IO parts (pure, tested without a kernel):
//! * [`packet`]: IPv4/IPv6 header and TCP/UDP ports, the packet length;
//! * [`classify`]: CIDR, protocol, port and fwmark matching;
//! * [`units`]: `10Mbit/s`-style rates and sizes;
//! * [`config`]: `relay.yaml`, errors with line and column;
//! * [`delay`]: the delay line that holds verdicts (the testbed's RTT);
//! * [`limiter`]: one decision per packet against the node.
//!
//! I/O parts:
//! * [`nfqueue`]: NFQUEUE over netlink (rustix), batched verdicts;
//! * [`iptables`]: the capture rules, installed and removed;
//! * [`http`] and [`stats`]: `/metrics` and `/healthz`;
//! * [`run`]: the packet loop, signals, cleanup;
//! * [`netns`] and [`traffic`]: the testbed's namespaces, TCP senders
//!   and sink; [`report`]: its Figure 3 summary and SVG.

pub mod classify;
pub mod config;
pub mod delay;
pub mod http;
pub mod iptables;
pub mod limiter;
pub mod netns;
pub mod nfqueue;
pub mod packet;
pub mod report;
pub mod run;
pub mod stats;
pub mod traffic;
pub mod units;

pub use config::{ConfigError, RelayConfig};
pub use run::{RunError, run};
