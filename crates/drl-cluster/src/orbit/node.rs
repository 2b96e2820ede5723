//! The sans-IO Orbit node: admission decisions, table handling, timers.

use std::collections::{BTreeMap, BTreeSet};

use drl_core::Nanos;

use super::config::{ConfigError, MAX_KEY_LEN, NodeId, OrbitConfig, PPM};
use super::table::{Entry, Table, TableMsg};

/// A message the caller must send: `msg` to node `to`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outgoing {
    /// Destination node.
    pub to: NodeId,
    /// The table to deliver (encode it with [`super::codec::encode`]).
    pub msg: TableMsg,
}

/// Why a request was denied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DenyReason {
    /// `cost > cap`: can never be admitted.
    CostExceedsCap,
    /// The node restarted in this window and sits it out (restart rule).
    Recovering,
    /// The node holds no capacity for the key and does not hold the table.
    Exhausted,
    /// The node's per-window key state is full (`max_keys`).
    TooManyKeys,
    /// The key is longer than [`super::MAX_KEY_LEN`] bytes.
    KeyTooLong,
}

/// The decision for one admission request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admit {
    /// Admitted; `remaining` is what this node still holds for the key.
    Allowed {
        /// Capacity this node still holds for the key in this window.
        remaining: u64,
    },
    /// Denied; nothing consumed.
    Denied {
        /// Why.
        reason: DenyReason,
        /// When retrying may succeed (`None`: never, for this cost).
        retry_after: Option<Nanos>,
    },
}

impl Admit {
    /// True if admitted.
    pub fn is_allowed(&self) -> bool {
        matches!(self, Admit::Allowed { .. })
    }
}

/// Counters of what the node did (for metrics and tests).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OrbitStats {
    /// Tables created as the origin.
    pub tables_created: u64,
    /// Table messages accepted and processed.
    pub tables_received: u64,
    /// Tables forwarded.
    pub tables_forwarded: u64,
    /// Dropped: for a window that is over.
    pub dropped_stale: u64,
    /// Dropped: duplicate or old hop.
    pub dropped_duplicate: u64,
    /// Dropped: the node sits out this window (restart rule).
    pub dropped_ineligible: u64,
    /// Dropped: delta whose base this node does not have.
    pub dropped_no_base: u64,
    /// Dropped: malformed or inconsistent with the configuration.
    pub dropped_invalid: u64,
    /// Requests admitted.
    pub admitted: u64,
    /// Requests denied.
    pub denied: u64,
}

#[derive(Clone, Copy, Debug, Default)]
struct KeyState {
    holding: u64,
    admitted: u64,
    demand: u64,
    prev_demand: u64,
}

#[derive(Debug)]
struct Held {
    table: Table,
    due: Nanos,
    /// Per key, the free capacity this visit must leave in the table:
    /// `ceil(r * free)` when the key was first rebalanced in this visit.
    reserve: BTreeMap<Vec<u8>, u64>,
}

/// One node of an Orbit ring: a pure state machine. Feed it requests,
/// messages, failure-detector events and timer ticks, all with `now`; send
/// what it returns. See `docs/orbit.md` for the protocol and its invariant.
#[derive(Debug)]
pub struct OrbitNode {
    cfg: OrbitConfig,
    id: NodeId,
    ring: Vec<NodeId>,
    pos: usize,
    local: u64,
    pool: u64,
    down: BTreeSet<NodeId>,
    start_window: u64,
    last_now: Nanos,
    window: u64,
    keys: BTreeMap<Vec<u8>, KeyState>,
    held: Option<Held>,
    base: Option<Table>,
    last_hop: Option<u32>,
    pending: Option<TableMsg>,
    stats: OrbitStats,
}

impl OrbitNode {
    /// A node `id` on `ring` (node ids in ring order), started at `now`.
    ///
    /// A node created at `now` has no memory of an earlier incarnation, so it
    /// admits nothing and ignores tables in the window containing `now` (the
    /// restart rule); it takes part normally from the next window on.
    pub fn new(
        config: OrbitConfig,
        id: NodeId,
        ring: Vec<NodeId>,
        now: Nanos,
    ) -> Result<Self, ConfigError> {
        config.validate(ring.len())?;
        let mut seen = BTreeSet::new();
        for &n in &ring {
            if !seen.insert(n) {
                return Err(ConfigError::DuplicateNode(n));
            }
        }
        let pos = ring
            .iter()
            .position(|&n| n == id)
            .ok_or(ConfigError::NotInRing(id))?;
        let local = config.local_allowance(pos, ring.len());
        let pool = config.pool();
        let w = now / config.window;
        Ok(Self {
            cfg: config,
            id,
            ring,
            pos,
            local,
            pool,
            down: BTreeSet::new(),
            start_window: w,
            last_now: now,
            window: w,
            keys: BTreeMap::new(),
            held: None,
            base: None,
            last_hop: None,
            pending: None,
            stats: OrbitStats::default(),
        })
    }

    /// This node's id.
    pub fn id(&self) -> NodeId {
        self.id
    }

    /// The configuration.
    pub fn config(&self) -> &OrbitConfig {
        &self.cfg
    }

    /// Counters.
    pub fn stats(&self) -> OrbitStats {
        self.stats
    }

    /// Window index of `now`.
    pub fn window_of(&self, now: Nanos) -> u64 {
        now / self.cfg.window
    }

    /// The window the node is in (as of the last `now` it saw).
    pub fn current_window(&self) -> u64 {
        self.window
    }

    /// True if the node may admit in window `w` (restart rule).
    pub fn is_eligible(&self, w: u64) -> bool {
        w > self.start_window
    }

    /// True while the node holds the table of its current window.
    pub fn holds_table(&self) -> bool {
        self.held.is_some()
    }

    /// This node's local allowance per key per window.
    pub fn local_allowance(&self) -> u64 {
        self.local
    }

    /// Capacity for `key` this node could still admit in window `w` without
    /// any message: its holding plus, if it holds the table, the table's free
    /// capacity. 0 for any window but the current one.
    pub fn live_capacity(&self, key: &[u8], w: u64) -> u64 {
        if w != self.window || !self.is_eligible(w) {
            return 0;
        }
        let h = self.keys.get(key).map_or(self.local, |k| k.holding);
        let t = self
            .held
            .as_ref()
            .map_or(0, |h| h.table.free(key, self.pool));
        h + t
    }

    /// What this node admitted for `key` in its current window.
    pub fn admitted(&self, key: &[u8]) -> u64 {
        self.keys.get(key).map_or(0, |k| k.admitted)
    }

    /// When the caller must call [`Self::on_tick`] next (at the latest).
    pub fn next_deadline(&self) -> Nanos {
        let next_window = (self.window + 1).saturating_mul(self.cfg.window);
        match &self.held {
            Some(h) => h.due.min(next_window),
            None => next_window,
        }
    }

    /// The failure detector believes `peer` is down: skip it when forwarding.
    pub fn on_peer_down(&mut self, peer: NodeId) {
        if peer != self.id {
            self.down.insert(peer);
        }
    }

    /// The failure detector believes `peer` is up again.
    pub fn on_peer_up(&mut self, peer: NodeId) {
        self.down.remove(&peer);
    }

    /// Decides one request of `cost` for `key`. Never waits on the network.
    pub fn admit(&mut self, now: Nanos, key: &[u8], cost: u64) -> Admit {
        let now = self.observe(now);
        let d = self.decide(now, key, cost);
        if d.is_allowed() {
            self.stats.admitted += 1;
        } else {
            self.stats.denied += 1;
        }
        d
    }

    fn decide(&mut self, now: Nanos, key: &[u8], cost: u64) -> Admit {
        if cost > self.cfg.cap {
            return Admit::Denied {
                reason: DenyReason::CostExceedsCap,
                retry_after: None,
            };
        }
        let to_next_window = (self.window + 1)
            .saturating_mul(self.cfg.window)
            .saturating_sub(now);
        if !self.is_eligible(self.window) {
            return Admit::Denied {
                reason: DenyReason::Recovering,
                retry_after: Some(to_next_window),
            };
        }
        if key.len() > MAX_KEY_LEN {
            return Admit::Denied {
                reason: DenyReason::KeyTooLong,
                retry_after: None,
            };
        }
        if !self.keys.contains_key(key) {
            if self.keys.len() >= self.cfg.max_keys {
                return Admit::Denied {
                    reason: DenyReason::TooManyKeys,
                    retry_after: Some(to_next_window),
                };
            }
            self.keys.insert(
                key.to_vec(),
                KeyState {
                    holding: self.local,
                    ..KeyState::default()
                },
            );
        }
        let ks = self.keys.get_mut(key).expect("inserted above");
        ks.demand = ks.demand.saturating_add(cost);
        if cost > ks.holding && self.held.is_some() {
            self.rebalance_key(now, key, cost);
        }
        let ks = self.keys.get_mut(key).expect("inserted above");
        if cost <= ks.holding {
            ks.holding -= cost;
            ks.admitted += cost;
            Admit::Allowed {
                remaining: ks.holding,
            }
        } else {
            Admit::Denied {
                reason: DenyReason::Exhausted,
                retry_after: Some(self.lap().min(to_next_window).max(1)),
            }
        }
    }

    /// A table message arrived from `from` (as claimed by the transport).
    pub fn on_message(&mut self, now: Nanos, from: NodeId, msg: TableMsg) -> Vec<Outgoing> {
        let now = self.observe(now);
        let _ = from;
        self.accept(now, msg);
        self.poll(now)
    }

    /// Timer: forwards a table held for an epoch, enters new windows.
    pub fn on_tick(&mut self, now: Nanos) -> Vec<Outgoing> {
        let now = self.observe(now);
        self.poll(now)
    }

    fn lap(&self) -> Nanos {
        self.cfg.epoch.saturating_mul(self.ring.len() as u64)
    }

    fn observe(&mut self, now: Nanos) -> Nanos {
        let now = now.max(self.last_now);
        self.last_now = now;
        let w = now / self.cfg.window;
        if w > self.window {
            self.enter_window(now, w);
        }
        now
    }

    fn enter_window(&mut self, now: Nanos, w: u64) {
        let consecutive = w == self.window + 1;
        let eligible = self.is_eligible(w);
        let holding = if eligible { self.local } else { 0 };
        let old = std::mem::take(&mut self.keys);
        if consecutive {
            for (k, ks) in old {
                if ks.demand > 0 {
                    self.keys.insert(
                        k,
                        KeyState {
                            holding,
                            prev_demand: ks.demand,
                            ..KeyState::default()
                        },
                    );
                }
            }
        }
        self.window = w;
        self.held = None;
        self.base = None;
        self.last_hop = None;
        if eligible && (w % self.ring.len() as u64) as usize == self.pos {
            self.stats.tables_created += 1;
            self.held = Some(Held {
                table: Table::fresh(w, self.ring.len()),
                due: now.saturating_add(self.cfg.epoch),
                reserve: BTreeMap::new(),
            });
            self.rebalance_all(now);
        }
        if let Some(p) = self.pending.take() {
            if p.window == w {
                self.accept(now, p);
            } else if p.window > w {
                self.pending = Some(p);
            }
        }
    }

    /// What [`Self::on_message`] would do with a well-formed table message
    /// of this header, given the node's state (the checks of `docs/orbit.md`).
    fn verdict(&self, window: u64, hop: u32, base_hop: u32) -> Verdict {
        if window < self.window {
            return Verdict::Stale;
        }
        if window > self.window {
            // Sender's clock is ahead: keep one, unprocessed.
            return match &self.pending {
                Some(p) if (window, hop) <= (p.window, p.hop) => Verdict::Duplicate,
                _ => Verdict::Pending,
            };
        }
        if !self.is_eligible(self.window) {
            return Verdict::Ineligible;
        }
        if self.last_hop.is_some_and(|l| hop <= l) || self.held.is_some() {
            return Verdict::Duplicate;
        }
        if base_hop != 0 {
            match &self.base {
                Some(b) if b.window == window && b.hop == base_hop => {}
                _ => return Verdict::NoBase,
            }
        }
        Verdict::Process
    }

    /// For test harnesses: true if a well-formed table message with this
    /// header, delivered now, would be processed or kept aside for its
    /// window (as opposed to dropped).
    pub fn would_accept(&self, window: u64, hop: u32, base_hop: u32) -> bool {
        matches!(
            self.verdict(window, hop, base_hop),
            Verdict::Process | Verdict::Pending
        )
    }

    /// For test harnesses: the tables this node holds or keeps aside, as
    /// `(window, hop)` (hop 0: created here as the origin).
    pub fn live_tables(&self) -> Vec<(u64, u32)> {
        let mut v = Vec::new();
        if let Some(h) = &self.held {
            v.push((h.table.window, h.table.hop));
        }
        if let Some(p) = &self.pending {
            v.push((p.window, p.hop));
        }
        v
    }

    fn accept(&mut self, now: Nanos, msg: TableMsg) {
        if msg.pool != self.pool
            || msg.visits.len() != self.ring.len()
            || msg.hop == 0
            || msg.base_hop >= msg.hop
            || msg.entries.len() > self.cfg.max_keys
            || msg
                .entries
                .iter()
                .any(|(k, f)| *f > self.cfg.cap || k.len() > MAX_KEY_LEN)
            || msg.entries.windows(2).any(|p| p[0].0 >= p[1].0)
        {
            self.stats.dropped_invalid += 1;
            return;
        }
        match self.verdict(msg.window, msg.hop, msg.base_hop) {
            Verdict::Stale => {
                self.stats.dropped_stale += 1;
                return;
            }
            Verdict::Pending => {
                self.pending = Some(msg);
                return;
            }
            Verdict::Ineligible => {
                self.stats.dropped_ineligible += 1;
                return;
            }
            Verdict::Duplicate => {
                self.stats.dropped_duplicate += 1;
                return;
            }
            Verdict::NoBase => {
                self.stats.dropped_no_base += 1;
                return;
            }
            Verdict::Process => {}
        }
        let mut table = if msg.base_hop == 0 {
            Table::fresh(msg.window, self.ring.len())
        } else {
            match self.base.take() {
                Some(b) => b,
                None => {
                    self.stats.dropped_no_base += 1;
                    return;
                }
            }
        };
        table.hop = msg.hop;
        table.visits = msg.visits;
        for (k, free) in msg.entries {
            table.entries.insert(
                k,
                Entry {
                    free,
                    modified: msg.hop,
                },
            );
        }
        if table.entries.len() > self.cfg.max_keys {
            self.stats.dropped_invalid += 1;
            return;
        }
        self.last_hop = Some(msg.hop);
        self.stats.tables_received += 1;
        self.held = Some(Held {
            table,
            due: now.saturating_add(self.cfg.epoch),
            reserve: BTreeMap::new(),
        });
        self.rebalance_all(now);
    }

    fn poll(&mut self, now: Nanos) -> Vec<Outgoing> {
        let mut out = Vec::new();
        let due = match &self.held {
            Some(h) => now >= h.due,
            None => false,
        };
        if !due {
            return out;
        }
        self.rebalance_all(now);
        let n = self.ring.len();
        let succ = (1..n)
            .map(|d| (self.pos + d) % n)
            .find(|&p| !self.down.contains(&self.ring[p]));
        let Some(succ) = succ else {
            // Alone: keep the table and keep rebalancing from it.
            if let Some(h) = &mut self.held {
                h.due = now.saturating_add(self.cfg.epoch);
                h.reserve.clear();
            }
            return out;
        };
        let Some(mut held) = self.held.take() else {
            return out;
        };
        let Some(hop) = held.table.hop.checked_add(1) else {
            return out;
        };
        held.table.visits[self.pos] = hop;
        let base = held.table.visits[succ];
        let base = if base < hop { base } else { 0 };
        let msg = held.table.to_msg(self.id, hop, base, self.pool);
        held.table.hop = hop;
        self.base = Some(held.table);
        self.stats.tables_forwarded += 1;
        out.push(Outgoing {
            to: self.ring[succ],
            msg,
        });
        out
    }

    fn forecast(&self, now: Nanos, ks: &KeyState) -> u64 {
        let lap = self.lap() as u128;
        let start = self.window.saturating_mul(self.cfg.window);
        let elapsed = now.saturating_sub(start).max(self.cfg.epoch) as u128;
        let cur = ks.demand as u128 * lap / elapsed;
        let prev = ks.prev_demand as u128 * lap / self.cfg.window as u128;
        let want = cur.max(prev) * self.cfg.headroom_pct as u128 / 100;
        want.min(self.cfg.cap as u128) as u64
    }

    fn rebalance_all(&mut self, now: Nanos) {
        let Some(held) = &self.held else { return };
        let mut keys: BTreeSet<Vec<u8>> = held.table.entries.keys().cloned().collect();
        keys.extend(self.keys.keys().cloned());
        for k in keys {
            self.rebalance_key(now, &k, 0);
        }
    }

    /// The rebalance rule of `docs/orbit.md`: `keep = min(want, H + F - reserve)`.
    fn rebalance_key(&mut self, now: Nanos, key: &[u8], min_want: u64) {
        let ks = self.keys.get(key).copied().unwrap_or(KeyState {
            holding: self.local,
            ..KeyState::default()
        });
        let want = self.forecast(now, &ks).max(min_want);
        let pool = self.pool;
        let max_keys = self.cfg.max_keys;
        let rollover = self.cfg.rollover_ppm;
        let have_key = self.keys.contains_key(key);
        let keys_full = self.keys.len() >= max_keys;
        let Some(held) = &mut self.held else { return };
        let h = ks.holding;
        let f = held.table.free(key, pool);
        let reserve = match held.reserve.get(key) {
            Some(&r) => r,
            None => {
                let r = (f as u128 * rollover as u128 / PPM as u128) as u64;
                if held.reserve.len() < max_keys {
                    held.reserve.insert(key.to_vec(), r);
                }
                r
            }
        };
        let takeable = f.saturating_sub(reserve);
        let keep = (want as u128).min(h as u128 + takeable as u128) as u64;
        // keep <= h + f, and h + f <= cap by conservation (forged tables are
        // rejected in `accept` if any free > cap), so this cannot wrap.
        let new_free = u64::try_from(h as u128 + f as u128 - keep as u128).unwrap_or(u64::MAX);
        if keep == h {
            return;
        }
        let in_table = held.table.entries.contains_key(key);
        if (!in_table && held.table.entries.len() >= max_keys) || (!have_key && keys_full) {
            return;
        }
        let modified = held.table.hop.saturating_add(1);
        held.table.entries.insert(
            key.to_vec(),
            Entry {
                free: new_free,
                modified,
            },
        );
        self.keys.entry(key.to_vec()).or_insert(ks).holding = keep;
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Verdict {
    Stale,
    Pending,
    Ineligible,
    Duplicate,
    NoBase,
    Process,
}
