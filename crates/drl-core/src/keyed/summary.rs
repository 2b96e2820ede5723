//! [`Summary`]: what a keyed table remembers of the live states it evicted,
//! in fixed memory, so that an evicted key never comes back more generous
//! than it left.
//!
//! A count-min-style array: [`SUMMARY_ROWS`] rows of cells, each cell
//! holding one envelope ([`envelope`]) per quota. Evicting a state folds its
//! envelope into one cell per row, chosen by the key's hash, by a lane-wise
//! maximum (`fetch_max`, so folds from several shards commute). A key
//! decided without an entry starts from the lane-wise minimum of its cells:
//! every one of them is at least its own evicted envelope, so the state
//! [`envelope::restore`] builds from it is no more generous than the
//! evicted state. Another key folded into the same cells can only make the
//! restored state stricter: a collision costs a false denial, never an
//! admission. Lanes hold times and counts that age out (a `tat` in the
//! past, a window that ended), so the summary needs no clearing.
//!
//! States dropped as fresh are folded too (a request stamped before the
//! drop may find them still holding back), and the cells are allocated
//! when a full shard first evicts or drops a state: a table that never
//! fills pays nothing.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use super::envelope::{self, Lanes, MAX_LANES};
use crate::limiter::{Limiter, State};
use crate::time::Nanos;

/// Rows of the summary (cells a key's envelope is folded into).
pub const SUMMARY_ROWS: usize = 2;

/// The least number of cells per row.
const MIN_ROW: usize = 32;

/// Multipliers picking a key's cell in each row (odd, well mixed).
const ROW_MUL: [u64; SUMMARY_ROWS] = [0x9E37_79B9_7F4A_7C15, 0xD6E8_FEB8_6659_FD93];

/// Evicted live state, folded per key hash into fixed memory.
pub(crate) struct Summary {
    parts: Box<[Limiter]>,
    /// Lane offset of each part within a cell.
    offsets: Box<[usize]>,
    /// Lanes per cell (the sum over parts).
    width: usize,
    /// log2 of the cells per row.
    bits: u32,
    /// `SUMMARY_ROWS << bits` cells of `width` lanes, allocated at the
    /// first fold.
    cells: OnceLock<Box<[AtomicU64]>>,
    /// States folded so far.
    folds: AtomicU64,
}

/// Cells per row for a table of `max_keys` keys: `max_keys / 2` rounded up
/// to a power of two (at least 32), so the rows hold about `max_keys`
/// cells in all.
pub(crate) fn row_cells(max_keys: usize) -> usize {
    (max_keys / SUMMARY_ROWS).max(MIN_ROW).next_power_of_two()
}

impl Summary {
    /// An empty summary for the quotas `parts`, sized for `max_keys`.
    pub fn new(parts: &[Limiter], max_keys: usize) -> Self {
        let mut width = 0;
        let offsets = parts
            .iter()
            .map(|l| {
                let at = width;
                width += envelope::lanes(l.algorithm());
                at
            })
            .collect();
        Self {
            parts: parts.into(),
            offsets,
            width,
            bits: row_cells(max_keys).trailing_zeros(),
            cells: OnceLock::new(),
            folds: AtomicU64::new(0),
        }
    }

    /// Bytes the cells take (0 until the first fold allocates them).
    pub fn bytes(&self) -> usize {
        if self.cells.get().is_none() {
            return 0;
        }
        (SUMMARY_ROWS << self.bits) * self.width * std::mem::size_of::<AtomicU64>()
    }

    /// True once the cells exist (after the first fold that allocates).
    #[inline]
    pub fn is_allocated(&self) -> bool {
        self.cells.get().is_some()
    }

    /// States folded so far (compared before and after a decision on
    /// an unknown key to see whether its cells may have changed).
    #[inline]
    pub fn folds(&self) -> u64 {
        self.folds.load(Ordering::Acquire)
    }

    /// The first lane of `hash`'s cell in `row`.
    #[inline]
    fn cell(&self, hash: u64, row: usize) -> usize {
        let h = hash.rotate_left(32 * row as u32).wrapping_mul(ROW_MUL[row]);
        let i = (h >> (64 - self.bits)) as usize;
        ((row << self.bits) + i) * self.width
    }

    /// Folds the states of a key leaving the table (one per part) into its
    /// cells; allocates them first if `allocate`, else folds only into
    /// cells already allocated.
    pub fn fold(&self, hash: u64, states: &[State], allocate: bool) {
        let cells = if allocate {
            self.cells.get_or_init(|| {
                (0..(SUMMARY_ROWS << self.bits) * self.width)
                    .map(|_| AtomicU64::new(0))
                    .collect()
            })
        } else {
            match self.cells.get() {
                Some(cells) => cells,
                None => return,
            }
        };
        for ((part, state), &off) in self.parts.iter().zip(states).zip(self.offsets.iter()) {
            let env = envelope::envelope(part, state);
            let n = envelope::lanes(part.algorithm());
            for row in 0..SUMMARY_ROWS {
                let at = self.cell(hash, row) + off;
                for (lane, &v) in env[..n].iter().enumerate() {
                    if v > 0 {
                        cells[at + lane].fetch_max(v, Ordering::Relaxed);
                    }
                }
            }
        }
        self.folds.fetch_add(1, Ordering::Release);
    }

    /// True if every cell restores states that decide as fresh ones at
    /// `now` (and so at any later time): the summary holds nothing back.
    /// Reads every cell.
    pub fn is_fresh(&self, now: Nanos) -> bool {
        let Some(cells) = self.cells.get() else {
            return true;
        };
        cells.chunks(self.width).all(|cell| {
            self.parts
                .iter()
                .zip(self.offsets.iter())
                .all(|(part, &off)| {
                    let n = envelope::lanes(part.algorithm());
                    let mut env = [0; MAX_LANES];
                    for (lane, v) in env[..n].iter_mut().enumerate() {
                        *v = cell[off + lane].load(Ordering::Relaxed);
                    }
                    envelope::fresh_at(part, &env, now)
                })
        })
    }

    /// The states a key of `hash` without an entry starts from at `now`
    /// (one per part), or `None` if they decide as fresh ones.
    pub fn restore(&self, hash: u64, now: Nanos) -> Option<Vec<State>> {
        let cells = self.cells.get()?;
        let mut all: [Lanes; 8] = [[0; MAX_LANES]; 8];
        let mut heap = Vec::new();
        let envs: &mut [Lanes] = if self.parts.len() <= all.len() {
            &mut all[..self.parts.len()]
        } else {
            heap.resize(self.parts.len(), [0; MAX_LANES]);
            &mut heap
        };
        let mut fresh = true;
        for ((part, &off), env) in self
            .parts
            .iter()
            .zip(self.offsets.iter())
            .zip(envs.iter_mut())
        {
            let n = envelope::lanes(part.algorithm());
            for (lane, v) in env[..n].iter_mut().enumerate() {
                *v = (0..SUMMARY_ROWS)
                    .map(|row| cells[self.cell(hash, row) + off + lane].load(Ordering::Relaxed))
                    .min()
                    .unwrap_or(0);
            }
            fresh &= envelope::fresh_at(part, env, now);
        }
        if fresh {
            return None;
        }
        Some(
            self.parts
                .iter()
                .zip(envs.iter())
                .map(|(part, env)| envelope::restore(part, env, now))
                .collect(),
        )
    }
}
