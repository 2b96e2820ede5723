//! Orbit configuration and its validation (including the minimum window).

use drl_core::Nanos;

/// Node identifier on the ring (as given in the configuration).
pub type NodeId = u32;

/// Parts per million: the unit of `rollover_ppm` and `local_ppm`.
pub const PPM: u32 = 1_000_000;

/// Largest number of ring positions a configuration may have.
pub const MAX_RING: usize = 1024;

/// Largest key length, in bytes, that a table can carry.
pub const MAX_KEY_LEN: usize = 1024;

/// Largest number of lanes (independent tables per window).
pub const MAX_LANES: u32 = 16;

/// Hard upper bound on `max_keys` (and on entries in a decoded table).
pub const MAX_TABLE_KEYS: usize = 1 << 21;

/// Configuration of one Orbit limit. Every node of the ring must use the
/// same configuration and the same ring.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OrbitConfig {
    /// Permits per key per window (>= 1).
    pub cap: u64,
    /// Window length in nanoseconds; must be at least `epoch * ring size`.
    pub window: Nanos,
    /// How long a node holds the table before forwarding it, ns (> 0).
    pub epoch: Nanos,
    /// `rollover_ratio` in parts per million: share of the table's free
    /// capacity a node leaves for the nodes after it (< 1_000_000).
    pub rollover_ppm: u32,
    /// Share of `cap` carved out as local allowances, ppm (<= 1_000_000).
    pub local_ppm: u32,
    /// Demand forecast multiplier in percent (>= 100 recommended, > 0).
    pub headroom_pct: u32,
    /// Bound on keys per table and per node's window state.
    pub max_keys: usize,
    /// Number of lanes: independent tables per window, each created by its
    /// own origin with an equal share of the pool, so that one dead origin
    /// costs only its share (1..=16; at most the ring size is used).
    pub lanes: u32,
    /// Re-send the last forwarded table of a lane, identical and to the same
    /// node, every `resend_laps` laps until the table comes back (0: never).
    /// Recovers tables lost in transit; duplicates are harmless.
    pub resend_laps: u32,
}

impl OrbitConfig {
    /// A configuration with the defaults: `rollover_ratio` 0.1, local
    /// allowance 10% of the cap, headroom 200%, 1,048,576 keys.
    pub fn new(cap: u64, window: Nanos, epoch: Nanos) -> Self {
        Self {
            cap,
            window,
            epoch,
            rollover_ppm: 100_000,
            local_ppm: 100_000,
            headroom_pct: 200,
            max_keys: 1 << 20,
            lanes: 2,
            resend_laps: 2,
        }
    }

    /// Sets `rollover_ratio` from a fraction in `[0, 1)` (clamped).
    pub fn with_rollover_ratio(mut self, ratio: f64) -> Self {
        self.rollover_ppm = frac_to_ppm(ratio).min(PPM - 1);
        self
    }

    /// Sets the local allowance fraction from a fraction in `[0, 1]` (clamped).
    pub fn with_local_fraction(mut self, fraction: f64) -> Self {
        self.local_ppm = frac_to_ppm(fraction);
        self
    }

    /// The shortest window this configuration allows on a ring of `nodes`:
    /// one lap, `epoch * nodes`.
    pub fn min_window(&self, nodes: usize) -> Nanos {
        self.epoch.saturating_mul(nodes as u64)
    }

    /// Checks the configuration for a ring of `nodes` positions.
    pub fn validate(&self, nodes: usize) -> Result<(), ConfigError> {
        if self.cap == 0 {
            return Err(ConfigError::ZeroCap);
        }
        if self.epoch == 0 {
            return Err(ConfigError::ZeroEpoch);
        }
        if nodes == 0 {
            return Err(ConfigError::EmptyRing);
        }
        if nodes > MAX_RING {
            return Err(ConfigError::RingTooLarge {
                nodes,
                max: MAX_RING,
            });
        }
        let min = self.min_window(nodes);
        if self.window < min {
            return Err(ConfigError::WindowShorterThanLap {
                window: self.window,
                epoch: self.epoch,
                nodes,
                min,
            });
        }
        if self.rollover_ppm >= PPM {
            return Err(ConfigError::RolloverOutOfRange(self.rollover_ppm));
        }
        if self.local_ppm > PPM {
            return Err(ConfigError::LocalOutOfRange(self.local_ppm));
        }
        if self.headroom_pct == 0 {
            return Err(ConfigError::ZeroHeadroom);
        }
        if self.lanes == 0 || self.lanes > MAX_LANES {
            return Err(ConfigError::LanesOutOfRange(self.lanes));
        }
        if self.max_keys == 0 || self.max_keys > MAX_TABLE_KEYS {
            return Err(ConfigError::MaxKeysOutOfRange {
                max_keys: self.max_keys,
                limit: MAX_TABLE_KEYS,
            });
        }
        Ok(())
    }

    /// Total local allowance carved out of the cap: `floor(cap * local)`.
    pub fn local_total(&self) -> u64 {
        ((self.cap as u128 * self.local_ppm.min(PPM) as u128) / PPM as u128) as u64
    }

    /// The pool the origin puts in a fresh table: `cap - local_total`.
    pub fn pool(&self) -> u64 {
        self.cap - self.local_total()
    }

    /// Lanes in use on a ring of `nodes`: `min(lanes, nodes)`, at least 1.
    pub fn lanes_for(&self, nodes: usize) -> usize {
        (self.lanes.clamp(1, MAX_LANES) as usize).min(nodes.max(1))
    }

    /// Pool of lane `lane`: an equal share of [`Self::pool`], the remainder
    /// going to the first lanes.
    pub fn lane_pool(&self, lane: usize, nodes: usize) -> u64 {
        let k = self.lanes_for(nodes) as u64;
        let pool = self.pool();
        pool / k + u64::from((lane as u64) < pool % k)
    }

    /// Ring position of the origin of lane `lane` in window `w`: lanes
    /// start evenly spaced around the ring, and rotate with the window.
    pub fn lane_origin(&self, w: u64, lane: usize, nodes: usize) -> usize {
        let n = nodes.max(1) as u64;
        let k = self.lanes_for(nodes) as u64;
        ((w % n + lane as u64 * n / k) % n) as usize
    }

    /// Local allowance of ring position `pos` on a ring of `nodes`.
    pub fn local_allowance(&self, pos: usize, nodes: usize) -> u64 {
        let total = self.local_total();
        let n = nodes.max(1) as u64;
        total / n + u64::from((pos as u64) < total % n)
    }
}

fn frac_to_ppm(f: f64) -> u32 {
    if f.is_nan() || f <= 0.0 {
        0
    } else if f >= 1.0 {
        PPM
    } else {
        (f * PPM as f64).round() as u32
    }
}

/// Why an Orbit configuration or ring was rejected.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// `cap` must be at least 1.
    #[error("orbit: cap must be at least 1")]
    ZeroCap,
    /// `epoch` must be positive.
    #[error("orbit: epoch must be positive")]
    ZeroEpoch,
    /// The ring has no node.
    #[error("orbit: the ring is empty")]
    EmptyRing,
    /// The ring has too many positions.
    #[error("orbit: ring of {nodes} nodes is larger than the maximum {max}")]
    RingTooLarge {
        /// Ring size given.
        nodes: usize,
        /// Largest allowed.
        max: usize,
    },
    /// The window is shorter than one lap of the ring.
    #[error(
        "orbit: window {window}ns is shorter than one lap of the ring \
         (epoch {epoch}ns x {nodes} nodes = {min}ns); use a longer window or a shorter epoch"
    )]
    WindowShorterThanLap {
        /// Configured window, ns.
        window: Nanos,
        /// Configured epoch, ns.
        epoch: Nanos,
        /// Ring size.
        nodes: usize,
        /// Minimum window, ns.
        min: Nanos,
    },
    /// `rollover_ppm` must be below 1_000_000.
    #[error("orbit: rollover_ratio {0} ppm must be below 1000000")]
    RolloverOutOfRange(u32),
    /// `local_ppm` must be at most 1_000_000.
    #[error("orbit: local fraction {0} ppm must be at most 1000000")]
    LocalOutOfRange(u32),
    /// `headroom_pct` must be positive.
    #[error("orbit: headroom must be positive")]
    ZeroHeadroom,
    /// `lanes` out of range.
    #[error("orbit: lanes {0} must be in 1..=16")]
    LanesOutOfRange(u32),
    /// `max_keys` out of range.
    #[error("orbit: max_keys {max_keys} must be in 1..={limit}")]
    MaxKeysOutOfRange {
        /// Configured value.
        max_keys: usize,
        /// Upper bound.
        limit: usize,
    },
    /// A node id appears twice in the ring.
    #[error("orbit: node {0} appears twice in the ring")]
    DuplicateNode(NodeId),
    /// This node is not in the ring.
    #[error("orbit: node {0} is not in the ring")]
    NotInRing(NodeId),
}
