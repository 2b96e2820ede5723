//! Static 1/N: the baseline the paper compares FPS against in §5.7
//! (Figure 9a). Each of the `N` limiters polices its traffic with a token
//! bucket at a fixed `limit / N`, whatever the demand elsewhere: it never
//! exceeds the global limit and never lends unused capacity to another
//! site. It publishes nothing (its gossip is heartbeats only).
//!
//! The `1/N` share itself is applied by the node
//! (`cloud_control::key`): for this algorithm the limit in force is always
//! `limit / N`, with `N` the configured cluster size, not the live count.

use drl_core::Nanos;
use rand_chacha::ChaCha8Rng;

use super::{AlgorithmKind, Allocator, FlowId, IntervalInput, VarBucket, Verdict};

/// A token bucket at a fixed share of the global limit.
#[derive(Debug, Clone)]
pub struct StaticShare {
    bucket: VarBucket,
    share: u64,
}

impl StaticShare {
    /// A full bucket of `depth` units refilling at `share` units per second
    /// (the node passes `limit / N`).
    pub fn new(share: u64, depth: u64, now: Nanos) -> Self {
        Self {
            bucket: VarBucket::new(depth, share.min(i64::MAX as u64) as i64, now),
            share,
        }
    }
}

impl Allocator for StaticShare {
    fn kind(&self) -> AlgorithmKind {
        AlgorithmKind::Static
    }

    fn on_arrival(&mut self, now: Nanos, _flow: FlowId, size: u64, _: &mut ChaCha8Rng) -> Verdict {
        if self.bucket.try_take(now, size) {
            Verdict::Forward
        } else {
            Verdict::Drop
        }
    }

    fn on_interval(&mut self, _input: &IntervalInput) -> f64 {
        // Nothing to tell the others.
        0.0
    }

    fn local_limit(&self) -> Option<f64> {
        Some(self.share as f64)
    }

    fn set_limit(&mut self, now: Nanos, share: u64) {
        self.share = share.max(1);
        self.bucket
            .set_rate(now, self.share.min(i64::MAX as u64) as i64);
    }

    fn in_debt(&mut self, now: Nanos) -> bool {
        self.bucket.in_debt(now)
    }

    fn admits(&self, now: Nanos, size: u64) -> bool {
        self.bucket.admits(now, size)
    }

    fn bucket(&mut self) -> Option<&mut VarBucket> {
        Some(&mut self.bucket)
    }

    fn on_charge(&mut self, now: Nanos, _flow: FlowId, size: u64) {
        self.bucket.charge(now, size);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn forwards_exactly_its_share_whatever_it_is_told() {
        let mut s = StaticShare::new(1_000, 100, 0);
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let input = IntervalInput {
            now: 0,
            elapsed: 50_000_000,
            local_rate: 1e9,
            local_forwarded: 0.0,
            raw_forwarded: 0.0,
            remote: 0.0,
            nodes: 1,
            heard: None,
            unpublished: false,
            ceiling: None,
        };
        assert_eq!(s.on_interval(&input), 0.0);
        // 10 s of one unit every 100 µs (10,000/s offered): depth + 10 s x
        // 1,000/s forwarded.
        let fwd = (0..100_000u64)
            .filter(|i| s.on_arrival(i * 100_000, 0, 1, &mut rng) == Verdict::Forward)
            .count();
        assert_eq!(fwd, 100 + 9_999);
        assert_eq!(s.local_limit(), Some(1_000.0));
    }
}
