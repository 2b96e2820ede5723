//! [`Node`]: one Cloud Control node, sans-IO, for many keys.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use drl_core::Nanos;
use rand::seq::{IndexedRandom, SliceRandom};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::key::{Admission, KeyLimit, Settle};
use super::members::{Heard, Members, NOT_UP, Roster};
use super::settings::{Aggregation, Settings, SettingsError};
use super::table::{AdmitError, KeyRef, Keys};
use super::wire::{self, Frames, Header, Value};
use crate::alloc::{AlgorithmKind, FlowId};
use crate::gossip::FlowUpdating;

/// A peer's identity: the transport's node id.
pub type PeerId = u32;

/// Largest gossip payload a node emits, bytes: a 1,200-byte datagram less
/// the transport's 34 bytes of framing.
pub const MAX_PAYLOAD: usize = 1_166;

/// Intervals a Flow Updating estimate is given to average out the step of
/// a dropped link, after the last drop can have happened
/// ([`Node::settle_span`]).
pub const SETTLE_INTERVALS: u64 = 20;

/// Intervals in a row in which a Flow Updating node's neighbours'
/// estimates must agree with its own (within [`CALM_SPREAD`]) before it
/// takes its estimate as settled after a change.
pub const CALM: u64 = 10;

/// Relative disagreement of neighbouring estimates taken as agreement.
pub const CALM_SPREAD: f64 = 0.1;

mod costs;
mod links;
mod mix;
pub use links::{DatagramError, FlowState, NodeStats};
use links::{Flows, Mass, neighbours};

/// True if a member went down less than `span` ago (and is still down).
fn members_down_within(m: &Members, now: Nanos, span: Nanos) -> bool {
    m.down.values().any(|&t| now.saturating_sub(t) < span)
}

/// One Cloud Control node (Raghavan et al., SIGCOMM 2007) for many keys:
/// per-key demand estimators and allocator, the interval step, the
/// aggregation of the peers' values (peer table or push-sum), the paper's
/// 1/N rule, and dissemination in bounded, prefix-compressed payloads.
/// Sans-IO: it never reads a clock, sleeps or touches a socket; the
/// service (drl-cluster-net) and the simulator (drl-sim) drive the same type.
///
/// # Call order
///
/// The driver owns the node and, in any order, feeds it:
///
/// * [`Node::admit`] (or the same call on [`Node::keys`], shared with the
///   request path, which then never waits for the node) for every unit of
///   traffic;
/// * [`Node::handle_datagram`] for every authenticated payload from a
///   peer;
/// * [`Node::peer_up`], [`Node::peer_down`] (and [`Node::peer_left`]) as
///   membership reports them;
/// * [`Node::handle_timeout`] once `now` reaches [`Node::poll_timeout`].
///
/// After each input it drains [`Node::poll_transmit`] until `None`,
/// sending each payload to the peer named, and re-arms its timer at
/// [`Node::poll_timeout`]. Time must not go backwards across calls.
///
/// # Counting peers
///
/// A peer counts (toward `live` of the 1/N rule and toward the remote
/// sums) only while membership says it is up, it has sent a payload since
/// it came up (within `stale_after`), and that payload carried the same
/// membership view as this node's (a digest of the members each has up).
/// Nodes whose views agree form a group that shares `|group| / N` of the
/// limit; nodes whose views differ (one side of a healing partition has
/// learnt of the other and the other not yet, or a peer is wrongly
/// suspected) do not count each other, so no node's `1/N` is handed out
/// twice while views converge. Nodes with no active key send a heartbeat
/// (an empty payload) to keep it so. (Push-sum counts membership alone: a
/// push-sum node hears only from its links.)
#[derive(Debug)]
pub struct Node {
    me: PeerId,
    settings: Settings,
    header: Header,
    keys: Arc<Keys>,
    rng: ChaCha8Rng,
    next_tick: Nanos,
    /// Flow Updating: the next averaging step between two interval steps.
    next_mix: Nanos,
    /// Membership, the peers heard from, the peer table's values.
    members: Members,
    /// Peer table: this round of destinations (shuffled) and the next.
    round: Vec<PeerId>,
    cursor: usize,
    masses: BTreeMap<Vec<u8>, Mass>,
    /// Flow Updating: per wire key, and the neighbours (ascending, with
    /// the view they were computed for).
    flows: BTreeMap<Vec<u8>, Flows>,
    nbrs: Option<(u64, Vec<PeerId>)>,
    /// Flow Updating: until when the estimates may still be settling
    /// after a membership change (see [`Node::settle_span`]).
    settle_until: Nanos,
    /// ... and at least until then.
    settle_min: Nanos,
    /// Intervals in a row in which the neighbours' estimates agreed with
    /// this node's ([`CALM`]).
    calm: u64,
    /// A membership change was seen since the last interval step.
    changed: bool,
    frames: Frames,
    queue: VecDeque<(PeerId, usize)>,
    scratch: Vec<u8>,
    stats: NodeStats,
}

/// The wire code of an allocator.
fn algorithm_code(k: AlgorithmKind) -> u8 {
    AlgorithmKind::ALL
        .iter()
        .position(|a| *a == k)
        .map_or(0, |i| i as u8 + 1)
}

/// Push-sum's links: the peers `1, 2, 4, ...` places after `me` on the
/// ring of live ids (itself included). Push-sum makes up for a lost share
/// only when the same link delivers again; with targets drawn from all
/// `N - 1` peers a link is reused every `(N - 1) / branching` rounds, and at
/// hundreds of nodes most of the mass sits lost for seconds at a time.
/// Drawing from `log2 N` fixed links (an expander: any node reaches any
/// other in `log2 N` hops) reuses each every few rounds.
fn fan(me: PeerId, mut ring: Vec<PeerId>) -> Vec<PeerId> {
    ring.push(me);
    ring.sort_unstable();
    ring.dedup();
    let n = ring.len();
    let pos = ring.binary_search(&me).unwrap_or(0);
    let mut out = Vec::new();
    let mut d = 1;
    while d < n {
        out.push(ring[(pos + d) % n]);
        d *= 2;
    }
    out.sort_unstable();
    out.dedup();
    out
}

impl Node {
    /// Node `me` with `settings`, its random streams seeded from `seed`,
    /// created at `now` (first interval step due at `now + interval`).
    pub fn new(
        me: PeerId,
        settings: Settings,
        seed: u64,
        now: Nanos,
    ) -> Result<Self, SettingsError> {
        settings.validate()?;
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x9e37_79b9_7f4a_7c15);
        Ok(Self {
            me,
            header: Header {
                algorithm: algorithm_code(settings.algorithm),
                aggregation: settings.aggregation.code(),
                instance: rng.random(),
                view: 0,
            },
            keys: Arc::new(Keys::new(settings.clone(), seed)),
            rng,
            next_tick: now.saturating_add(settings.interval),
            next_mix: Nanos::MAX,
            members: Members::default(),
            round: Vec::new(),
            cursor: 0,
            masses: BTreeMap::new(),
            flows: BTreeMap::new(),
            nbrs: None,
            settle_until: 0,
            settle_min: 0,
            calm: 0,
            changed: false,
            frames: Frames::default(),
            queue: VecDeque::new(),
            scratch: Vec::new(),
            stats: NodeStats::default(),
            settings,
        })
    }

    /// This node's id.
    pub fn id(&self) -> PeerId {
        self.me
    }

    /// The settings.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// The key table, for a request path that decides without the node.
    pub fn keys(&self) -> &Arc<Keys> {
        &self.keys
    }

    /// What the node refused and sent so far.
    pub fn stats(&self) -> NodeStats {
        self.stats
    }

    /// Decides `cost` units of `key` from `flow` at `now`
    /// ([`Keys::admit`]).
    pub fn admit(
        &self,
        now: Nanos,
        key: KeyRef<'_>,
        limit: KeyLimit,
        cost: u64,
        flow: FlowId,
    ) -> Result<Admission, AdmitError> {
        self.keys.admit(now, key, limit, cost, flow)
    }

    /// Consumes `cost` units of `key` at `now` whatever its state (a cost
    /// known afterwards; [`Keys::charge`]).
    pub fn charge(
        &self,
        now: Nanos,
        key: KeyRef<'_>,
        limit: KeyLimit,
        cost: u64,
        flow: FlowId,
    ) -> Result<Admission, AdmitError> {
        self.keys.charge(now, key, limit, cost, flow)
    }

    /// Membership: `peer` is up (joined, or back).
    pub fn peer_up(&mut self, now: Nanos, peer: PeerId) {
        // A push-sum link taken back when the peer went down is given back
        // (a wrong suspicion or a healed cut; a restarted peer's first
        // payload takes it back again, see `forget`).
        if self.members.up_at(self.me, peer).is_none() {
            for m in self.masses.values_mut() {
                m.sum.restore(peer);
            }
            self.settle(now);
        }
        self.members.peer_up(self.me, now, peer);
    }

    /// Membership: every member of `roster` is up, as [`Node::peer_up`]
    /// for each at the roster's time (this node's own id is skipped). A
    /// node with no membership yet shares the roster instead of copying
    /// it, so N nodes started from one roster hold one membership.
    pub fn roster_up(&mut self, roster: &Roster) {
        if roster
            .up
            .keys()
            .any(|&id| id != self.me && self.members.up_at(self.me, id).is_none())
        {
            self.settle(roster.at);
        }
        if !self.masses.is_empty() {
            for &id in roster.up.keys() {
                if id != self.me && self.members.up_at(self.me, id).is_none() {
                    for m in self.masses.values_mut() {
                        m.sum.restore(id);
                    }
                }
            }
        }
        self.members.roster_up(self.me, roster);
    }

    /// Membership: `peer` is down (failed, or cut off). The 1/N rule takes
    /// its share away at the next interval step; its published values
    /// still count in the remote sums for [`Settings::down_hold`] (the
    /// limit in force drops at once, the demand it stood for later: the
    /// other side of a partition may detect it up to a detection time
    /// later, and until then still takes its share of the whole limit),
    /// then are dropped (the paper's §5.6).
    pub fn peer_down(&mut self, now: Nanos, peer: PeerId) {
        // Push-sum takes back what the link with the peer carried, which
        // recovers the mass a dead peer held; the links' running totals
        // stay, and a wrong suspicion (views can disagree) is undone when
        // the peer's next share arrives (`PushSum::reclaim`).
        if self.members.up_at(self.me, peer).is_some() {
            for m in self.masses.values_mut() {
                m.sum.reclaim(peer);
            }
            self.settle(now);
        }
        self.members.peer_down(self.me, now, peer);
    }

    /// Membership: `peer` left gracefully (same as down, without waiting
    /// for failure detection).
    pub fn peer_left(&mut self, now: Nanos, peer: PeerId) {
        self.peer_down(now, peer);
    }

    /// How long after a membership change seen at this node a Flow
    /// Updating estimate may still be moving: the other nodes see the same
    /// change up to a detection time apart and drop their links with a
    /// peer that went down [`Settings::down_hold`] after they saw it (the
    /// hold is at least a detection time), so the last drop comes at most
    /// `1.5 × hold` after this node saw the change; then
    /// [`SETTLE_INTERVALS`] intervals to average the step out.
    pub fn settle_span(&self) -> Nanos {
        let hold = self.settings.down_hold();
        hold.saturating_add(hold / 2)
            .saturating_add(self.settings.interval.saturating_mul(SETTLE_INTERVALS))
    }

    fn settle(&mut self, now: Nanos) {
        if self.settings.aggregation == Aggregation::FlowUpdating {
            self.settle_until = self
                .settle_until
                .max(now.saturating_add(self.settle_span()));
            let least = self.settings.interval.saturating_mul(SETTLE_INTERVALS);
            self.settle_min = self.settle_min.max(now.saturating_add(least));
            self.calm = 0;
            self.changed = true;
        }
    }

    /// Flow Updating's state for `wire_key` (diagnostics).
    pub fn flow_state(&self, wire_key: &[u8]) -> Option<FlowState> {
        self.flows.get(wire_key).map(|f| FlowState {
            local: f.fu.local(),
            estimate: f.fu.estimate(),
            flows: f.fu.flows().collect(),
        })
    }

    /// Peers membership has up, ascending.
    pub fn peers_up(&self) -> impl Iterator<Item = PeerId> + '_ {
        self.members.up_ids(self.me)
    }

    /// Digest of this node's membership view: itself and the peers it has
    /// up (FNV-1a over the ids, ascending).
    pub fn view(&self) -> u64 {
        match &self.members.derived {
            Some(d) => d.view,
            None => self.members.compute_view(self.me),
        }
    }

    /// Nodes counted live now (this one included): with the peer table,
    /// the members up that were heard from within `stale_after` (a value
    /// reaches every peer; the heal-window guard); with push-sum and Flow
    /// Updating, the members up (a node hears only from its links, so it
    /// cannot ask to have heard from every peer).
    pub fn live(&self, now: Nanos) -> u32 {
        if self.settings.aggregation != Aggregation::PeerTable {
            return 1 + self.members.up_count(self.me);
        }
        let stale = self.settings.stale_after;
        let view = self.view();
        1 + self
            .members
            .heard
            .values()
            .filter(|p| p.counted(now, stale, view))
            .count() as u32
    }

    /// Applies an authenticated payload from `from` received at `now`.
    /// A payload that does not decode, or comes from a node configured
    /// differently, changes nothing and is counted.
    pub fn handle_datagram(
        &mut self,
        now: Nanos,
        from: PeerId,
        bytes: &[u8],
    ) -> Result<(), DatagramError> {
        if from == self.me {
            return Err(DatagramError::FromSelf);
        }
        // Check the whole payload before touching any state.
        let header = match wire::decode(bytes, &mut self.scratch, |_, _| {}) {
            Ok(h) => h,
            Err(e) => {
                self.stats.malformed += 1;
                return Err(e.into());
            }
        };
        if (header.algorithm, header.aggregation)
            != (self.header.algorithm, self.header.aggregation)
        {
            self.stats.mismatched += 1;
            return Err(DatagramError::Mismatched);
        }
        let max = self.settings.max_keys;
        let up_at = self.members.up_at(self.me, from).unwrap_or(NOT_UP);
        let mut renewed = false;
        self.members
            .heard
            .entry(from)
            .and_modify(|h| {
                h.at = now;
                h.view = header.view;
                // A new incarnation: nothing it said before counts, and
                // push-sum links start from zero.
                renewed = h.instance != header.instance;
                h.instance = header.instance;
            })
            .or_insert(Heard {
                at: now,
                view: header.view,
                up_at,
                instance: header.instance,
                keys: 0,
            });
        if renewed {
            self.members.clear_values(from);
            for m in self.masses.values_mut() {
                m.sum.forget(from);
            }
            for f in self.flows.values_mut() {
                f.fu.forget(from);
            }
            self.settle(now);
        }
        let mut refused = 0u64;
        let result = match self.settings.aggregation {
            Aggregation::PeerTable => {
                let m = &mut self.members;
                let Some(peer) = m.heard.get_mut(&from) else {
                    unreachable!("just inserted")
                };
                let values = &mut m.values;
                wire::decode(bytes, &mut self.scratch, |key, v| {
                    if let Value::Published(x) = v {
                        if values.get_mut(key).is_some_and(|t| t.update(from, x, now)) {
                            // Updated in place.
                        } else if (peer.keys as usize) < max {
                            match values.get_mut(key) {
                                Some(t) => t.insert(from, x, now),
                                None => {
                                    values.entry(key.to_vec()).or_default().insert(from, x, now)
                                }
                            };
                            peer.keys += 1;
                        } else {
                            refused += 1;
                        }
                    }
                })
            }
            Aggregation::PushSum => {
                let masses = &mut self.masses;
                let s = &self.settings;
                let me = self.me;
                wire::decode(bytes, &mut self.scratch, |key, v| {
                    if let Value::Mass(m) = v {
                        let len = masses.len();
                        let mass = match masses.get_mut(key) {
                            Some(m) => m,
                            None if len < max => masses
                                .entry(key.to_vec())
                                .or_insert_with(|| Mass::new(me, s, now)),
                            None => {
                                refused += 1;
                                return;
                            }
                        };
                        mass.touched = now;
                        mass.sum.receive(from, m);
                    }
                })
            }
            Aggregation::FlowUpdating => {
                let flows = &mut self.flows;
                wire::decode(bytes, &mut self.scratch, |key, v| {
                    if let Value::Flow(m) = v {
                        let len = flows.len();
                        let f = match flows.get_mut(key) {
                            Some(f) => f,
                            None if len < max => flows.entry(key.to_vec()).or_insert(Flows {
                                fu: FlowUpdating::new(),
                                touched: now,
                            }),
                            None => {
                                refused += 1;
                                return;
                            }
                        };
                        f.touched = now;
                        f.fu.receive(from, m);
                    }
                })
            }
        };
        self.stats.refused_values += refused;
        result.map(|_| ()).map_err(DatagramError::from)
    }

    /// When [`Node::handle_timeout`] is next due.
    pub fn poll_timeout(&self) -> Option<Nanos> {
        Some(self.next_tick.min(self.next_mix))
    }

    /// Runs the interval step if it is due at `now`: closes every key's
    /// estimate interval, aggregates, applies the 1/N rule, reallocates,
    /// and queues this interval's payloads for [`Node::poll_transmit`].
    pub fn handle_timeout(&mut self, now: Nanos) {
        if now < self.next_tick {
            return self.mix(now);
        }
        self.next_tick = now.saturating_add(self.settings.interval);
        self.arm_mix(now);
        self.step(now);
    }

    /// The next payload to send: writes it into `buf` (cleared first) and
    /// returns the peer to send it to.
    pub fn poll_transmit(&mut self, _now: Nanos, buf: &mut Vec<u8>) -> Option<PeerId> {
        let (to, i) = self.queue.pop_front()?;
        buf.clear();
        buf.extend_from_slice(self.frames.get(i));
        self.stats.sent += 1;
        Some(to)
    }

    /// This interval's destinations. Peer table: the next `branching`
    /// peers of a shuffled round of all peers up, so every peer hears from
    /// this node once per `ceil((N - 1) / branching)` intervals (random
    /// picks would leave a long tail: at 490 nodes and branching 3, 5% of
    /// peers would wait over 24 s instead of at most 8). Push-sum: random
    /// links of the fan. Flow Updating: every neighbour.
    fn targets(&mut self) -> Vec<PeerId> {
        let up = self.members.up_count(self.me) as usize;
        let b = self.settings.branching as usize;
        let mut t: Vec<PeerId> = match self.settings.aggregation {
            Aggregation::PeerTable => {
                let mut t = Vec::with_capacity(b.min(up));
                let mut reshuffles = 0;
                while t.len() < b.min(up) && reshuffles < 2 {
                    if self.cursor >= self.round.len() {
                        self.round.clear();
                        self.round.extend(self.members.up_ids(self.me));
                        self.round.shuffle(&mut self.rng);
                        self.cursor = 0;
                        reshuffles += 1;
                    }
                    let p = self.round[self.cursor];
                    self.cursor += 1;
                    if !t.contains(&p) && self.members.up_at(self.me, p).is_some() {
                        t.push(p);
                    }
                }
                t
            }
            Aggregation::PushSum => {
                // The fan depends on the members up alone: computed when
                // they change, not every interval.
                let me = self.me;
                self.members.view(me);
                if self
                    .members
                    .derived
                    .as_ref()
                    .is_some_and(|d| d.fan.is_none())
                {
                    let up: Vec<PeerId> = self.members.up_ids(me).collect();
                    if let Some(d) = self.members.derived.as_mut() {
                        d.fan = Some(fan(me, up));
                    }
                }
                let pool = self
                    .members
                    .derived
                    .as_ref()
                    .and_then(|d| d.fan.as_deref())
                    .unwrap_or_default();
                let b = b.min(pool.len());
                pool.choose_multiple(&mut self.rng, b).copied().collect()
            }
            Aggregation::FlowUpdating => {
                // Every neighbour, every interval: `2 + branching` links on
                // average whatever N (sending to `branching` of them in
                // turn let averages go stale, and FPS at 490 nodes admitted
                // 69 Mbps against 50 in its first second instead of 51).
                let view = self.members.view(self.me);
                if self.nbrs.as_ref().is_none_or(|(v, _)| *v != view) {
                    let up: Vec<PeerId> = self.members.up_ids(self.me).collect();
                    let n = neighbours(self.me, &up, self.settings.nodes, self.settings.branching);
                    self.nbrs = Some((view, n));
                }
                self.nbrs
                    .as_ref()
                    .map(|(_, n)| n.clone())
                    .unwrap_or_default()
            }
        };
        t.sort_unstable();
        t
    }

    fn step(&mut self, now: Nanos) {
        let stale = self.settings.stale_after;
        let view = self.members.view(self.me);
        self.header.view = view;
        let hold = self.settings.down_hold();
        self.members.expire_values(now, stale, hold);
        let live = self.live(now);
        self.keys.set_live(live);
        let keys = self.keys.sorted();
        self.frames.clear();
        self.queue.clear();
        let targets = self.targets();
        match self.settings.aggregation {
            Aggregation::PeerTable => {
                let mut out: Vec<(usize, f32)> = Vec::new();
                for (i, e) in keys.iter().enumerate() {
                    // Every fresh value counts in the sum, also of peers
                    // not counted in `live` (their views differ, or they
                    // went down within `rise`): the share is the group's,
                    // the demand everyone's that is known.
                    let remote: f64 = self
                        .members
                        .values
                        .get(&e.wire_key)
                        .into_iter()
                        .flat_map(|t| t.values())
                        .map(|v| v as f64)
                        .sum();
                    let (published, send) = e.state.tick(&self.settings, now, remote, live);
                    if send {
                        out.push((i, published as f32));
                    }
                }
                wire::encode(
                    self.header,
                    out.iter()
                        .map(|(i, v)| (keys[*i].wire_key.as_slice(), Value::Published(*v))),
                    MAX_PAYLOAD,
                    &mut self.frames,
                );
                for &t in &targets {
                    for f in 0..self.frames.len() {
                        self.queue.push_back((t, f));
                    }
                }
            }
            Aggregation::PushSum => {
                let me = self.me;
                let s = &self.settings;
                // Push-sum averages over every node holding mass: the
                // members up.
                let holders = live;
                for e in &keys {
                    let mass = self
                        .masses
                        .entry(e.wire_key.clone())
                        .or_insert_with(|| Mass::new(me, s, now));
                    mass.touched = now;
                    mass.sum.set_nodes(holders);
                    let remote = mass.sum.remote_estimate();
                    let (published, _) = e.state.tick(&self.settings, now, remote, live);
                    mass.sum.set_local(published);
                }
                // Every mass held moves, whether or not the key is active
                // here: push-sum conserves it only if nobody sits on it.
                let idle = self.settings.idle_after;
                let active: std::collections::BTreeSet<&[u8]> =
                    keys.iter().map(|e| e.wire_key.as_slice()).collect();
                self.masses.retain(|k, m| {
                    active.contains(k.as_slice()) || now.saturating_sub(m.touched) <= idle
                });
                let mut per_target: Vec<Vec<(&[u8], Value)>> = vec![Vec::new(); targets.len()];
                for (k, m) in self.masses.iter_mut() {
                    m.sum.set_nodes(holders);
                    m.sum.round_to(&targets, |to, msg| {
                        if let Ok(i) = targets.binary_search(&to) {
                            per_target[i].push((k.as_slice(), Value::Mass(msg)));
                        }
                    });
                }
                for (i, entries) in per_target.into_iter().enumerate() {
                    let first = self.frames.len();
                    wire::encode(self.header, entries, MAX_PAYLOAD, &mut self.frames);
                    for f in first..self.frames.len() {
                        self.queue.push_back((targets[i], f));
                    }
                }
            }
            Aggregation::FlowUpdating => {
                let nbrs = &targets;
                let members = &self.members;
                let me = self.me;
                // A link lives while its peer is up, and for `hold` after
                // it went down (as the peer table's values do); then its
                // flows are dropped and the rest hold their own values.
                let keep = |p: PeerId| {
                    members.up_at(me, p).is_some()
                        || members
                            .down
                            .get(&p)
                            .is_some_and(|d| now.saturating_sub(*d) <= hold)
                };
                for e in &keys {
                    let f = self.flows.entry(e.wire_key.clone()).or_insert(Flows {
                        fu: FlowUpdating::new(),
                        touched: now,
                    });
                    f.touched = now;
                }
                let idle = self.settings.idle_after;
                let active: std::collections::BTreeSet<&[u8]> =
                    keys.iter().map(|e| e.wire_key.as_slice()).collect();
                self.flows.retain(|k, f| {
                    active.contains(k.as_slice()) || now.saturating_sub(f.touched) <= idle
                });
                // Every instance held averages and is sent, whether or not
                // the key is active here: a node is a relay of the graph.
                // Links with peers down are held as they are until dropped.
                let frozen: Vec<PeerId> = members
                    .down
                    .iter()
                    .filter(|(_, d)| now.saturating_sub(**d) <= hold)
                    .map(|(p, _)| *p)
                    .collect();
                let mut dropped = false;
                let mut apart: f64 = 0.0;
                for f in self.flows.values_mut() {
                    dropped |= f.fu.retain(keep);
                    apart = apart.max(f.fu.disagreement(nbrs));
                    f.fu.average(nbrs, &frozen);
                }
                if dropped {
                    self.settle(now);
                }
                self.calm = if apart <= CALM_SPREAD {
                    self.calm + 1
                } else {
                    0
                };
                // Settling: for a while after any change; while a peer down
                // may still have its links dropped, here or elsewhere; and
                // then until the neighbours agree (or the span ends).
                let span = self.settle_span();
                let pending = members_down_within(&self.members, now, span);
                let settling = now < self.settle_min
                    || pending
                    || (now < self.settle_until && self.calm < CALM);
                if !settling {
                    // Settled: over until the next change.
                    self.settle_until = self.settle_until.min(now);
                }
                let settle = Settle {
                    changed: std::mem::take(&mut self.changed),
                    settling,
                };
                let fps = matches!(
                    self.settings.algorithm,
                    AlgorithmKind::Fps | AlgorithmKind::FpsMean | AlgorithmKind::FpsLrd
                );
                let alone = self.nbrs.as_ref().is_none_or(|(_, n)| n.is_empty());
                for e in &keys {
                    let Some(f) = self.flows.get_mut(&e.wire_key) else {
                        continue;
                    };
                    // FPS's weights jump by orders of magnitude as limiters
                    // change regime, and the estimates overshoot as far: the
                    // remote sum is held, where no settling cap already
                    // bounds the allowance. (GRD's demands move as TCP does;
                    // held, GRD at 1,000 limiters with flows arriving swung
                    // more: up to 90 Mbps in a second against 62.)
                    let remote = f.fu.held_remote(live, fps && !e.state.capped(settle));
                    // FPS claims no more than the others count of this node
                    // (a rise not averaged yet); alone (no neighbour up), its
                    // own (counted unheard, its refilled burst admitted 2x).
                    let heard = (fps && !alone).then(|| f.fu.heard());
                    let (published, _) =
                        e.state
                            .tick_heard(&self.settings, now, remote, live, heard, settle);
                    f.fu.set_local(published);
                }
                self.send_flows(&targets);
            }
        }
        let idle = self.settings.idle_after;
        for e in &keys {
            if e.state.is_idle(now, idle) {
                self.keys.remove(&e.limit, &e.aggregate);
            }
        }
    }
}
