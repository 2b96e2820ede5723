//! The sans-IO Orbit node: admission decisions, table handling, timers.

mod costs;
mod rule;

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};

use drl_core::Nanos;

use super::config::{ConfigError, MAX_KEY_LEN, NodeId, OrbitConfig};
use super::outcome::{Admit, OrbitStats, Outgoing};
use super::table::{Entry, Table, TableMsg};
use rule::Rule;

#[derive(Clone, Copy, Debug, Default)]
struct KeyState {
    holding: u64,
    admitted: u64,
    demand: u64,
    prev_demand: u64,
    /// What charges consumed beyond what the node held (`holding` is 0
    /// while it is not); repaid first from anything the node obtains.
    debt: u64,
    /// Reservations admitted in this window not yet refunded: the most a
    /// refund may give back.
    reserved: u64,
}

#[derive(Debug)]
struct Held {
    table: Table,
    due: Nanos,
    /// Id of this visit (entries' reserves are valid for this visit only).
    visit: u32,
}

/// The state of one lane: its table lineage as this node sees it.
#[derive(Debug, Default)]
struct Lane {
    /// The pool this lane's table starts with (value of absent keys).
    pool: u64,
    /// The table while this node holds it.
    held: Option<Held>,
    /// Copy of the table this node last forwarded (delta base).
    base: Option<Table>,
    /// Highest hop processed in the current window.
    last_hop: Option<u32>,
    /// A table for a later window, kept aside unprocessed.
    pending: Option<TableMsg>,
    /// After a forward, until the table comes back: the ring position it
    /// was sent to and when to send the same message again.
    resend: Option<(usize, Nanos)>,
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
    down: BTreeSet<NodeId>,
    /// Peers known to have restarted in the current window: they sit it
    /// out (restart rule) and would drop the table, so they are skipped.
    recovering: BTreeSet<NodeId>,
    start_window: u64,
    last_now: Nanos,
    window: u64,
    keys: BTreeMap<Vec<u8>, KeyState>,
    /// One independent table lineage per lane (`docs/orbit.md`, lanes).
    lanes: Vec<Lane>,
    stats: OrbitStats,
    /// Visit counter (ids for [`Held::visit`]).
    visits: u32,
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
        let lanes = (0..config.lanes_for(ring.len()))
            .map(|l| Lane {
                pool: config.lane_pool(l, ring.len()),
                ..Lane::default()
            })
            .collect();
        let w = now / config.window;
        Ok(Self {
            cfg: config,
            id,
            ring,
            pos,
            local,
            down: BTreeSet::new(),
            recovering: BTreeSet::new(),
            start_window: w,
            last_now: now,
            window: w,
            keys: BTreeMap::new(),
            lanes,
            stats: OrbitStats::default(),
            visits: 0,
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

    /// True while the node holds a table (of any lane) of its window.
    pub fn holds_table(&self) -> bool {
        self.lanes.iter().any(|l| l.held.is_some())
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
        let t: u64 = self
            .lanes
            .iter()
            .filter_map(|l| l.held.as_ref().map(|h| h.table.free(key, l.pool)))
            .sum();
        h + t
    }

    /// What this node admitted for `key` in its current window.
    pub fn admitted(&self, key: &[u8]) -> u64 {
        self.keys.get(key).map_or(0, |k| k.admitted)
    }

    /// When the caller must call [`Self::on_tick`] next (at the latest).
    pub fn next_deadline(&self) -> Nanos {
        let next_window = (self.window + 1).saturating_mul(self.cfg.window);
        self.lanes
            .iter()
            .flat_map(|l| [l.held.as_ref().map(|h| h.due), l.resend.map(|r| r.1)])
            .flatten()
            .fold(next_window, Nanos::min)
    }

    /// The failure detector believes `peer` is down: skip it when forwarding.
    pub fn on_peer_down(&mut self, peer: NodeId) {
        if peer != self.id {
            self.down.insert(peer);
        }
    }

    /// The failure detector saw `peer` come back as a new incarnation (it
    /// restarted). It is up, but sits out the current window, so the table
    /// skips it until the next window.
    pub fn on_peer_restarted(&mut self, peer: NodeId) {
        self.down.remove(&peer);
        if peer != self.id {
            self.recovering.insert(peer);
        }
    }

    /// The failure detector believes `peer` is up again (reachable, same
    /// incarnation: a healed partition or a wrong suspicion).
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
        if let Some(d) = self.refuse(now, key, cost) {
            return d;
        }
        self.want(now, key, cost);
        match self.keys.get_mut(key) {
            Some(ks) if ks.debt == 0 && cost <= ks.holding => {
                ks.holding -= cost;
                ks.admitted += cost;
                Admit::Allowed {
                    remaining: ks.holding,
                }
            }
            ks => {
                let in_debt = ks.is_some_and(|ks| ks.debt > 0);
                self.short(now, in_debt)
            }
        }
    }

    /// A table message arrived from `from` (the sender the transport
    /// authenticated; a message whose `from` field disagrees is dropped).
    pub fn on_message(&mut self, now: Nanos, from: NodeId, msg: TableMsg) -> Vec<Outgoing> {
        let now = self.observe(now);
        if from != msg.from || from == self.id {
            // The transport's authenticated sender must be the forwarder,
            // and a node never sends a table to itself: a table coming back
            // from this node would fork its lane.
            self.stats.dropped_invalid += 1;
        } else {
            self.accept(now, msg);
        }
        self.poll(now)
    }

    /// Timer: forwards a table held for an epoch, enters new windows.
    pub fn on_tick(&mut self, now: Nanos) -> Vec<Outgoing> {
        let now = self.observe(now);
        self.poll(now)
    }

    fn next_visit(&mut self) -> u32 {
        // 0 means "no visit" in `Entry::visit`.
        self.visits = self.visits.checked_add(1).unwrap_or(1);
        self.visits
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
        self.recovering.clear();
        let n = self.ring.len();
        for lane in 0..self.lanes.len() {
            let l = &mut self.lanes[lane];
            l.held = None;
            l.base = None;
            l.last_hop = None;
            l.resend = None;
            if eligible && self.cfg.lane_origin(w, lane, n) == self.pos {
                self.stats.tables_created += 1;
                let visit = self.next_visit();
                self.lanes[lane].held = Some(Held {
                    table: Table::fresh(w, lane as u32, n),
                    due: now.saturating_add(self.cfg.epoch),
                    visit,
                });
                self.rebalance_all(now, lane);
            }
        }
        for lane in 0..self.lanes.len() {
            if let Some(p) = self.lanes[lane].pending.take() {
                if p.window == w {
                    self.accept(now, p);
                } else if p.window > w {
                    self.lanes[lane].pending = Some(p);
                }
            }
        }
    }

    /// What [`Self::on_message`] would do with a well-formed table message
    /// of this header, given the node's state (the checks of `docs/orbit.md`).
    fn verdict(&self, window: u64, lane: u32, hop: u32, base_hop: u32) -> Verdict {
        let Some(l) = self.lanes.get(lane as usize) else {
            return Verdict::Invalid;
        };
        if window < self.window {
            return Verdict::Stale;
        }
        if window > self.window {
            // Sender's clock is ahead: keep one, unprocessed.
            return match &l.pending {
                Some(p) if (window, hop) <= (p.window, p.hop) => Verdict::Duplicate,
                _ => Verdict::Pending,
            };
        }
        if !self.is_eligible(self.window) {
            return Verdict::Ineligible;
        }
        if l.last_hop.is_some_and(|last| hop <= last) || l.held.is_some() {
            return Verdict::Duplicate;
        }
        if base_hop != 0 {
            match &l.base {
                Some(b) if b.window == window && b.hop == base_hop => {}
                _ => return Verdict::NoBase,
            }
        }
        Verdict::Process
    }

    /// For test harnesses: true if a well-formed table message with this
    /// header, delivered now, would be processed or kept aside for its
    /// window (as opposed to dropped).
    pub fn would_accept(&self, window: u64, lane: u32, hop: u32, base_hop: u32) -> bool {
        matches!(
            self.verdict(window, lane, hop, base_hop),
            Verdict::Process | Verdict::Pending
        )
    }

    /// For test harnesses: the tables this node holds or keeps aside, as
    /// `(window, lane, hop)` (hop 0: created here as the origin).
    pub fn live_tables(&self) -> Vec<(u64, u32, u32)> {
        let mut v = Vec::new();
        for l in &self.lanes {
            if let Some(h) = &l.held {
                v.push((h.table.window, h.table.lane, h.table.hop));
            }
            if let Some(p) = &l.pending {
                v.push((p.window, p.lane, p.hop));
            }
        }
        v
    }

    fn accept(&mut self, now: Nanos, msg: TableMsg) {
        let lane = msg.lane as usize;
        if self.lanes.get(lane).is_none_or(|l| msg.pool != l.pool)
            || msg.visits.len() != self.ring.len()
            || msg.hop == 0
            || msg.base_hop >= msg.hop
            || msg.entries.len() > self.cfg.max_keys
            || msg.entries.iter().any(|(k, f, m)| {
                *f > self.cfg.cap
                    || k.len() > MAX_KEY_LEN
                    || *m > msg.hop
                    || (msg.base_hop != 0 && *m <= msg.base_hop)
            })
            || msg.entries.windows(2).any(|p| p[0].0 >= p[1].0)
        {
            self.stats.dropped_invalid += 1;
            return;
        }
        match self.verdict(msg.window, msg.lane, msg.hop, msg.base_hop) {
            Verdict::Invalid => {
                self.stats.dropped_invalid += 1;
                return;
            }
            Verdict::Stale => {
                self.stats.dropped_stale += 1;
                return;
            }
            Verdict::Pending => {
                self.lanes[lane].pending = Some(msg);
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
            Table::fresh(msg.window, msg.lane, self.ring.len())
        } else {
            match self.lanes[lane].base.take() {
                Some(b) => b,
                None => {
                    self.stats.dropped_no_base += 1;
                    return;
                }
            }
        };
        table.hop = msg.hop;
        table.visits = msg.visits;
        let entries = msg.entries.into_iter().map(|(k, free, modified)| {
            let e = Entry {
                free,
                modified,
                reserve: 0,
                visit: 0,
            };
            (k, e)
        });
        if table.entries.is_empty() {
            // Sorted input: built in one pass.
            table.entries = entries.collect();
        } else {
            table.entries.extend(entries);
        }
        if table.entries.len() > self.cfg.max_keys {
            self.stats.dropped_invalid += 1;
            return;
        }
        self.lanes[lane].last_hop = Some(msg.hop);
        // The table came back: the last forward arrived.
        self.lanes[lane].resend = None;
        self.stats.tables_received += 1;
        let visit = self.next_visit();
        self.lanes[lane].held = Some(Held {
            table,
            due: now.saturating_add(self.cfg.epoch),
            visit,
        });
        self.rebalance_all(now, lane);
    }

    fn poll(&mut self, now: Nanos) -> Vec<Outgoing> {
        let mut out = Vec::new();
        for lane in 0..self.lanes.len() {
            if let Some(o) = self.poll_resend(now, lane) {
                out.push(o);
            }
            if let Some(o) = self.poll_lane(now, lane) {
                out.push(o);
            }
        }
        out
    }

    fn resend_period(&self) -> Option<Nanos> {
        match self.cfg.resend_laps {
            0 => None,
            k => Some(self.lap().saturating_mul(k as u64)),
        }
    }

    /// Sends the last forward of `lane` again, byte for byte the same message
    /// to the same node, if the table has not come back in time. Only ever
    /// the same destination: re-routing a table could fork it.
    fn poll_resend(&mut self, now: Nanos, lane: usize) -> Option<Outgoing> {
        let period = self.resend_period()?;
        let l = &mut self.lanes[lane];
        let (succ, at) = l.resend?;
        if now < at {
            return None;
        }
        let base = l.base.as_ref()?;
        let hop = base.hop;
        let delta_base = base
            .visits
            .get(succ)
            .copied()
            .filter(|&b| b < hop)
            .unwrap_or(0);
        let msg = base.to_msg(self.id, hop, delta_base, l.pool);
        l.resend = Some((succ, now.saturating_add(period)));
        self.stats.tables_resent += 1;
        Some(Outgoing {
            to: self.ring[succ],
            msg,
        })
    }

    /// Forwards lane `lane`'s table if it has been held for an epoch.
    fn poll_lane(&mut self, now: Nanos, lane: usize) -> Option<Outgoing> {
        if self.lanes[lane].held.as_ref().is_none_or(|h| now < h.due) {
            return None;
        }
        self.rebalance_all(now, lane);
        let n = self.ring.len();
        let succ = (1..n).map(|d| (self.pos + d) % n).find(|&p| {
            !self.down.contains(&self.ring[p]) && !self.recovering.contains(&self.ring[p])
        });
        let Some(succ) = succ else {
            // Alone: keep the table and keep rebalancing from it, one new
            // visit per epoch.
            let visit = self.next_visit();
            if let Some(h) = &mut self.lanes[lane].held {
                h.due = now.saturating_add(self.cfg.epoch);
                h.visit = visit;
            }
            return None;
        };
        let period = self.resend_period();
        let l = &mut self.lanes[lane];
        let mut held = l.held.take()?;
        // A window that would need more hops than u32 stops forwarding.
        let hop = held.table.hop.checked_add(1)?;
        held.table.visits[self.pos] = hop;
        let base = held.table.visits[succ];
        let base = if base < hop { base } else { 0 };
        let msg = held.table.to_msg(self.id, hop, base, l.pool);
        held.table.hop = hop;
        l.base = Some(held.table);
        l.resend = period.map(|p| (succ, now.saturating_add(p)));
        self.stats.tables_forwarded += 1;
        Some(Outgoing {
            to: self.ring[succ],
            msg,
        })
    }

    fn rule(&self, now: Nanos) -> Rule {
        let start = self.window.saturating_mul(self.cfg.window);
        Rule {
            lap: self.lap() as u128,
            elapsed: now.saturating_sub(start).max(self.cfg.epoch) as u128,
            window: self.cfg.window as u128,
            headroom_pct: self.cfg.headroom_pct as u128,
            cap: self.cfg.cap,
            rollover_ppm: self.cfg.rollover_ppm,
        }
    }

    /// Rebalances every key of the held table and every key the node has
    /// state for (one merge pass, no key copies for unchanged keys).
    fn rebalance_all(&mut self, now: Nanos, lane: usize) {
        let rule = self.rule(now);
        let (local, max_keys) = (self.local, self.cfg.max_keys);
        let Some(l) = self.lanes.get_mut(lane) else {
            return;
        };
        let pool = l.pool;
        let Some(held) = l.held.as_mut() else {
            return;
        };
        let visit = held.visit;
        let hop1 = held.table.hop.saturating_add(1);
        let table = &mut held.table.entries;
        let keys = &mut self.keys;
        let (keys_len, table_len) = (keys.len(), table.len());
        let mut new_keys = Vec::new();
        let mut new_entries = Vec::new();
        // Both maps are ordered by key: walk them together (a merge join),
        // sequential access and no lookups.
        let mut t_it = table.iter_mut().peekable();
        let mut k_it = keys.iter_mut().peekable();
        loop {
            let order = match (t_it.peek(), k_it.peek()) {
                (None, None) => break,
                (Some(_), None) => Ordering::Less,
                (None, Some(_)) => Ordering::Greater,
                (Some((tk, _)), Some((kk, _))) => tk.as_slice().cmp(kk.as_slice()),
            };
            match order {
                Ordering::Less => {
                    // In the table only: this node has seen no demand for the
                    // key, so it gives its local allowance to the table.
                    let Some((k, e)) = t_it.next() else { break };
                    if e.visit != visit {
                        e.visit = visit;
                        e.reserve = rule.reserve(e.free);
                    }
                    let (keep, free) = rule.split(local, e.free, e.reserve, 0);
                    if keep != local && keys_len + new_keys.len() < max_keys {
                        new_keys.push((
                            k.clone(),
                            KeyState {
                                holding: keep,
                                ..KeyState::default()
                            },
                        ));
                        e.free = free;
                        e.modified = hop1;
                    }
                }
                Ordering::Greater => {
                    // Node state only: the table holds the pool for it.
                    let Some((k, ks)) = k_it.next() else { break };
                    let reserve = rule.reserve(pool);
                    let (keep, free) = rule.split(ks.holding, pool, reserve, rule.want(ks));
                    if keep != ks.holding && table_len + new_entries.len() < max_keys {
                        ks.holding = keep;
                        ks.repay();
                        new_entries.push((
                            k.clone(),
                            Entry {
                                free,
                                modified: hop1,
                                reserve,
                                visit,
                            },
                        ));
                    }
                }
                Ordering::Equal => {
                    let (Some((_, e)), Some((_, ks))) = (t_it.next(), k_it.next()) else {
                        break;
                    };
                    if e.visit != visit {
                        e.visit = visit;
                        e.reserve = rule.reserve(e.free);
                    }
                    let (keep, free) = rule.split(ks.holding, e.free, e.reserve, rule.want(ks));
                    if keep != ks.holding {
                        ks.holding = keep;
                        ks.repay();
                        e.free = free;
                        e.modified = hop1;
                    }
                }
            }
        }
        merge_sorted(keys, new_keys);
        merge_sorted(table, new_entries);
    }

    /// The rebalance rule for one key the node has state for, with `want`
    /// raised to at least `min_want` (a request's cost) plus the key's debt.
    fn rebalance_key(&mut self, now: Nanos, lane: usize, key: &[u8], min_want: u64) {
        let rule = self.rule(now);
        let Some(ks) = self.keys.get(key) else {
            return;
        };
        let Some(p) = self.plan_key(&rule, lane, key, ks, min_want) else {
            return;
        };
        let (Some(held), Some(ks)) = (
            self.lanes.get_mut(lane).and_then(|l| l.held.as_mut()),
            self.keys.get_mut(key),
        ) else {
            return;
        };
        let visit = held.visit;
        let hop1 = held.table.hop.saturating_add(1);
        let table = &mut held.table.entries;
        if let Some(e) = table.get_mut(key) {
            // The visit's reserve is fixed at its first touch of the key.
            e.visit = visit;
            e.reserve = p.reserve;
        }
        if p.keep == ks.holding {
            return;
        }
        let e = table.entry(key.to_vec()).or_insert(Entry {
            free: p.free,
            modified: hop1,
            reserve: p.reserve,
            visit,
        });
        e.free = p.free;
        e.modified = hop1;
        ks.holding = p.keep;
        ks.repay();
    }
}

/// Adds `new` (sorted, keys absent from `map`) to `map`. Many new keys:
/// one bulk rebuild (the sort of two sorted runs is a linear merge) instead
/// of one tree insertion each.
fn merge_sorted<V>(map: &mut BTreeMap<Vec<u8>, V>, new: Vec<(Vec<u8>, V)>) {
    if new.len() > 64 && new.len() * 4 > map.len() {
        let old = std::mem::take(map);
        *map = old.into_iter().chain(new).collect();
    } else {
        map.extend(new);
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Verdict {
    Invalid,
    Stale,
    Pending,
    Ineligible,
    Duplicate,
    NoBase,
    Process,
}
