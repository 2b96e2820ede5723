//! Cloud Control (Raghavan et al., SIGCOMM 2007): one node for many keys,
//! the type the service (`scope: gossip`), the simulator (`drl sim`) and
//! the fault harness all run.
//!
//! * [`node::Node`]: the sans-IO node (call order on the type);
//! * [`table::Keys`]: its active keys, shared with the request path;
//! * [`key`]: one key's estimators and allocator (two locks), the 1/N rule;
//! * [`members`]: membership, the peers heard from, the peer table's
//!   values ([`Roster`]: one membership shared by many nodes);
//! * [`settings::Settings`]: every tunable, from a config or from flags;
//! * [`wire`]: the batched, prefix-compressed payload.

pub mod key;
pub mod members;
pub mod node;
pub mod settings;
pub mod table;
pub mod wire;

pub use key::{Admission, Hold, KeyLimit, KeySnapshot, effective_limit};
pub use members::Roster;
pub use node::{DatagramError, MAX_PAYLOAD, Node, NodeStats, PeerId};
pub use settings::{Aggregation, Settings, SettingsError, scale_warning};
pub use table::{AdmitError, KeyRef, Keys, fnv1a, wire_key};
