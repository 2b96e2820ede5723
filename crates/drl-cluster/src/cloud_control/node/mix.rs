//! Flow Updating's averaging steps between two interval steps.
//!
//! An estimate interval longer than [`MIX_EVERY`] (the paper's Figure 6
//! runs at 500 ms, Figure 9 at 100 ms) would otherwise give Flow Updating
//! one averaging step per interval: its estimates need several steps to
//! mix a change across the graph, and values that move by a large part
//! every interval were read up to several times too high or at 0 (Figure
//! 6 at 500 ms: GRD's estimate of the others' demand read 5.0 MB/s where
//! it was 3.4, then 0 where it was 0.35; GRD delivered 7.65 Mbps against
//! 10 and FPS 8.69). So a node with such an interval also averages, and
//! sends its flows to every neighbour, every [`MIX_EVERY`] in between;
//! the interval step (estimates, allocators, membership changes) runs as
//! before. At the default interval (50 ms) nothing changes.

use drl_core::Nanos;

use super::{MAX_PAYLOAD, Node, PeerId};
use crate::cloud_control::settings::Aggregation;
use crate::cloud_control::wire::{self, Value};

/// Longest time between two averaging steps of Flow Updating (ns).
pub const MIX_EVERY: Nanos = 50_000_000;

impl Node {
    /// Arms the first averaging step after the interval step at `now`:
    /// none unless Flow Updating with an interval longer than
    /// [`MIX_EVERY`].
    pub(super) fn arm_mix(&mut self, now: Nanos) {
        let s = &self.settings;
        self.next_mix = if s.aggregation == Aggregation::FlowUpdating && s.interval > MIX_EVERY {
            now.saturating_add(MIX_EVERY)
        } else {
            Nanos::MAX
        };
    }

    /// An averaging step if one is due at `now` (and the interval step is
    /// not): every key's instance averages with its neighbours (links with
    /// peers down held as they are) and is sent to each of them.
    pub(super) fn mix(&mut self, now: Nanos) {
        if now < self.next_mix {
            return;
        }
        self.arm_mix(now);
        if self.next_mix >= self.next_tick {
            // The interval step comes first; it averages too.
            self.next_mix = Nanos::MAX;
        }
        self.header.view = self.members.view(self.me);
        self.frames.clear();
        self.queue.clear();
        let targets = self.targets();
        let hold = self.settings.down_hold();
        let frozen: Vec<PeerId> = self
            .members
            .down
            .iter()
            .filter(|(_, d)| now.saturating_sub(**d) <= hold)
            .map(|(p, _)| *p)
            .collect();
        for f in self.flows.values_mut() {
            f.fu.average(&targets, &frozen);
        }
        self.send_flows(&targets);
    }

    /// Queues every Flow Updating instance's message to each of `targets`.
    pub(super) fn send_flows(&mut self, targets: &[PeerId]) {
        for &t in targets {
            let first = self.frames.len();
            wire::encode(
                self.header,
                self.flows
                    .iter()
                    .map(|(k, f)| (k.as_slice(), Value::Flow(f.fu.message_to(t)))),
                MAX_PAYLOAD,
                &mut self.frames,
            );
            for f in first..self.frames.len() {
                self.queue.push_back((t, f));
            }
        }
    }
}
