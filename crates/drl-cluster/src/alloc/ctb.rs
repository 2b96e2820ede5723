//! Central token bucket (CTB): the reference limiter. One bucket, filling
//! at the global limit, sees all traffic; packets are forwarded while tokens
//! last and dropped otherwise (no queue).

use drl_core::Nanos;
use rand_chacha::ChaCha8Rng;

use super::{AlgorithmKind, Allocator, FlowId, IntervalInput, VarBucket, Verdict};

/// A token bucket at the global rate.
#[derive(Debug, Clone)]
pub struct Ctb {
    bucket: VarBucket,
    limit: u64,
}

impl Ctb {
    /// A full bucket of `depth` units refilling at `limit` units per second.
    pub fn new(limit: u64, depth: u64, now: Nanos) -> Self {
        Self {
            bucket: VarBucket::new(depth, limit.min(i64::MAX as u64) as i64, now),
            limit,
        }
    }
}

impl Allocator for Ctb {
    fn kind(&self) -> AlgorithmKind {
        AlgorithmKind::Ctb
    }

    fn on_arrival(&mut self, now: Nanos, _flow: FlowId, size: u64, _: &mut ChaCha8Rng) -> Verdict {
        if self.bucket.try_take(now, size) {
            Verdict::Forward
        } else {
            Verdict::Drop
        }
    }

    fn on_interval(&mut self, input: &IntervalInput) -> f64 {
        input.local_rate
    }

    fn local_limit(&self) -> Option<f64> {
        Some(self.limit as f64)
    }

    fn set_limit(&mut self, now: Nanos, limit: u64) {
        self.limit = limit.max(1);
        self.bucket
            .set_rate(now, self.limit.min(i64::MAX as u64) as i64);
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
    fn forwards_depth_then_polices_to_the_rate() {
        let mut rng = ChaCha8Rng::seed_from_u64(0);
        // 1000 units/s, depth 3000, arrivals of 100 units every 10 ms
        // (10_000 units/s offered).
        let mut c = Ctb::new(1_000, 3_000, 0);
        let mut fwd = 0u64;
        for i in 0..1_000u64 {
            if c.on_arrival(i * 10_000_000, 1, 100, &mut rng) == Verdict::Forward {
                fwd += 100;
            }
        }
        // 10 s at 1000/s plus the initial 3000 of depth.
        assert!((12_900..=13_000).contains(&fwd), "fwd = {fwd}");
    }
}
