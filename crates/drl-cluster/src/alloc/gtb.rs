//! Global token bucket (GTB), paper §3.2: every limiter's bucket refills at
//! the *global* limit, and besides local arrivals it drains continuously at
//! the rate the other limiters last reported, standing in for their traffic.

use drl_core::Nanos;
use rand_chacha::ChaCha8Rng;

use super::{AlgorithmKind, Allocator, FlowId, IntervalInput, VarBucket, Verdict, to_units};

/// One limiter of a global token bucket.
#[derive(Debug, Clone)]
pub struct Gtb {
    bucket: VarBucket,
    limit: u64,
}

impl Gtb {
    /// A full bucket of `depth` units; global limit `limit` units/s.
    pub fn new(limit: u64, depth: u64, now: Nanos) -> Self {
        let limit = limit.min(i64::MAX as u64);
        Self {
            bucket: VarBucket::new(depth, limit as i64, now),
            limit,
        }
    }

    /// Net fill rate (units/s): the global limit minus the remote demand.
    pub fn net_rate(&self) -> i64 {
        self.bucket.rate()
    }
}

impl Allocator for Gtb {
    fn kind(&self) -> AlgorithmKind {
        AlgorithmKind::Gtb
    }

    fn on_arrival(&mut self, now: Nanos, _flow: FlowId, size: u64, _: &mut ChaCha8Rng) -> Verdict {
        if self.bucket.try_take(now, size) {
            Verdict::Forward
        } else {
            Verdict::Drop
        }
    }

    fn on_interval(&mut self, input: &IntervalInput) -> f64 {
        let remote = to_units(input.remote);
        self.bucket
            .set_rate(input.now, (self.limit as i64).saturating_sub(remote));
        input.local_rate
    }

    fn set_limit(&mut self, _now: Nanos, limit: u64) {
        // The fill rate follows at the next interval.
        self.limit = limit.clamp(1, i64::MAX as u64);
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

    fn local_limit(&self) -> Option<f64> {
        Some(self.bucket.rate().max(0) as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn input(now: Nanos, local: f64, remote: f64) -> IntervalInput {
        IntervalInput {
            now,
            elapsed: 50_000_000,
            local_rate: local,
            local_forwarded: local,
            raw_forwarded: local,
            remote,
            nodes: 2,
            heard: None,
            unpublished: false,
            ceiling: None,
        }
    }

    #[test]
    fn remote_demand_drains_the_bucket() {
        let mut rng = ChaCha8Rng::seed_from_u64(0);
        let mut g = Gtb::new(10_000, 1_000, 0);
        // Others report 6000/s: this limiter nets 4000/s.
        let published = g.on_interval(&input(0, 123.0, 6_000.0));
        assert_eq!(published, 123.0);
        assert_eq!(g.net_rate(), 4_000);
        assert!(g.on_arrival(0, 1, 1_000, &mut rng) == Verdict::Forward);
        assert!(g.on_arrival(0, 1, 1, &mut rng) == Verdict::Drop);
        // 100 ms later: 400 units.
        assert_eq!(
            g.on_arrival(100_000_000, 1, 400, &mut rng),
            Verdict::Forward
        );
        assert_eq!(g.on_arrival(100_000_000, 1, 1, &mut rng), Verdict::Drop);
        // Remote demand above the limit: nothing ever refills.
        g.on_interval(&input(100_000_000, 0.0, 20_000.0));
        assert_eq!(g.on_arrival(2_000_000_000, 1, 1, &mut rng), Verdict::Drop);
        assert_eq!(g.local_limit(), Some(0.0));
    }
}
