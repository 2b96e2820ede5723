//! TCP NewReno with SACK, as sans-IO state machines.
//!
//! Sequence numbers count whole segments (every segment is one MSS-sized
//! packet); the congestion window is in segments with a Linux-style
//! additive-increase counter, so everything is integer.
//!
//! Sender ([`TcpSender`]):
//! * slow start (`cwnd += acked` while `cwnd < ssthresh`) and congestion
//!   avoidance (`+1` per window of acked segments);
//! * a SACK scoreboard; a hole is *lost* once `DUPTHRESH` (3) segments above
//!   it are SACKed (RFC 6675 `IsLost`) or after three duplicate ACKs;
//! * fast retransmit and fast recovery: on the first loss, `ssthresh =
//!   max(flight/2, 2)`, `cwnd = ssthresh`, `recover = highest sent`; while
//!   in recovery, sending is paced by `pipe < cwnd` (RFC 6675), lost
//!   segments are retransmitted before new data, a *partial* ACK (below
//!   `recover`) marks the next unacked segment lost and retransmits it
//!   (NewReno, RFC 6582), and a full ACK ends recovery with `cwnd = ssthresh`;
//! * RTO per RFC 6298: `SRTT`, `RTTVAR` from timestamp echoes (so samples
//!   are valid even for retransmissions), `RTO = SRTT + 4·RTTVAR` with a
//!   200 ms floor (Linux), 1 s initially, doubled on each expiry (max 60 s);
//!   on expiry `ssthresh = max(min(flight, cwnd)/2, 2)` (kept if the
//!   timeout interrupts a fast recovery), `cwnd = 1`, every unSACKed
//!   outstanding segment is marked lost and retransmitted in slow start.
//!
//! Receiver ([`TcpSink`]): ACKs every segment (no delayed ACKs) with the
//! cumulative ACK, up to three SACK blocks (the one holding the segment just
//! received first) and the segment's timestamp echoed.

use std::collections::{BTreeSet, VecDeque};

use drl_core::Nanos;

/// Segments SACKed above a hole before it counts as lost.
pub const DUPTHRESH: u32 = 3;
/// Maximum SACK blocks per ACK.
pub const MAX_SACK_BLOCKS: usize = 3;

/// Sender parameters.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct TcpConfig {
    /// Initial congestion window (segments).
    pub initial_cwnd: u32,
    /// Receiver window (segments).
    pub rwnd: u32,
    /// Minimum RTO (ns).
    pub min_rto: Nanos,
    /// Initial RTO before any RTT sample (ns).
    pub initial_rto: Nanos,
    /// Maximum RTO (ns).
    pub max_rto: Nanos,
    /// Segments to send in total (`None`: an endless bulk transfer).
    pub total_segments: Option<u64>,
    /// Acknowledged segments per unit of window growth: 1 grows the window
    /// per segment acknowledged (our receiver ACKs every segment); 2 grows
    /// it per ACK of a receiver that delays its ACKs to every second
    /// segment, as an ACK-counting sender (Linux before 2.6.15, the
    /// paper's 2.6.9) does: half the growth in slow start and in
    /// congestion avoidance.
    pub growth_divisor: u32,
    /// Linux's retransmission timeout, `SRTT + max(4·RTTVAR, min_rto)`
    /// (its variance term never decays below `min_rto`), instead of
    /// RFC 6298's `max(SRTT + 4·RTTVAR, min_rto)`. A steady 100 ms path
    /// times out after about 300 ms instead of 200 ms.
    pub linux_rto: bool,
}

impl Default for TcpConfig {
    fn default() -> Self {
        Self {
            initial_cwnd: 3,
            rwnd: 1_000,
            min_rto: 200_000_000,
            initial_rto: 1_000_000_000,
            max_rto: 60_000_000_000,
            total_segments: None,
            growth_divisor: 1,
            linux_rto: false,
        }
    }
}

/// Shows [`TcpConfig::growth_divisor`] only when it is not 1 and
/// [`TcpConfig::linux_rto`] only when set, so that the
/// `Debug` text of results (which `examples/identity.rs` fingerprints) is
/// the same as before the field existed.
impl std::fmt::Debug for TcpConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("TcpConfig");
        d.field("initial_cwnd", &self.initial_cwnd)
            .field("rwnd", &self.rwnd)
            .field("min_rto", &self.min_rto)
            .field("initial_rto", &self.initial_rto)
            .field("max_rto", &self.max_rto)
            .field("total_segments", &self.total_segments);
        if self.growth_divisor != 1 {
            d.field("growth_divisor", &self.growth_divisor);
        }
        if self.linux_rto {
            d.field("linux_rto", &self.linux_rto);
        }
        d.finish()
    }
}

/// A data segment leaving the sender.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    /// Segment number.
    pub seq: u64,
    /// Send time (echoed back by the receiver, like a TCP timestamp).
    pub ts: Nanos,
    /// True for a retransmission.
    pub retransmit: bool,
}

/// A SACK block `[start, end)` of segment numbers.
pub type SackBlock = (u64, u64);

/// An acknowledgement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ack {
    /// Next segment expected (cumulative).
    pub ack: u64,
    /// SACK blocks; the first `nsack` are valid.
    pub sack: [SackBlock; MAX_SACK_BLOCKS],
    /// Number of valid SACK blocks.
    pub nsack: u8,
    /// Timestamp echoed from the segment that triggered this ACK.
    pub ts_echo: Nanos,
}

impl Ack {
    /// The valid SACK blocks.
    pub fn blocks(&self) -> &[SackBlock] {
        &self.sack[..(self.nsack as usize).min(MAX_SACK_BLOCKS)]
    }
}

#[derive(Debug, Clone, Copy, Default)]
struct SegState {
    sacked: bool,
    lost: bool,
    retransmitted: bool,
}

/// Counters for reports and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TcpStats {
    /// Segments sent, including retransmissions.
    pub sent: u64,
    /// Retransmitted segments.
    pub retransmits: u64,
    /// Entries into fast recovery.
    pub fast_recoveries: u64,
    /// Partial ACKs seen in recovery.
    pub partial_acks: u64,
    /// RTO expiries.
    pub timeouts: u64,
}

/// The sending side of one TCP connection.
#[derive(Debug, Clone)]
pub struct TcpSender {
    cfg: TcpConfig,
    snd_una: u64,
    snd_nxt: u64,
    cwnd: u32,
    cwnd_cnt: u32,
    /// Acknowledged segments not yet turned into growth credit.
    growth_rem: u32,
    ssthresh: u32,
    dupacks: u32,
    in_recovery: bool,
    recover: u64,
    force_retransmit: bool,
    rto_recover: Option<u64>,
    board: VecDeque<SegState>,
    srtt: Option<Nanos>,
    rttvar: Nanos,
    rto: Nanos,
    rto_deadline: Option<Nanos>,
    stats: TcpStats,
}

impl TcpSender {
    /// A sender that has not sent anything yet.
    pub fn new(cfg: TcpConfig) -> Self {
        Self {
            cwnd: cfg.initial_cwnd.max(1),
            cwnd_cnt: 0,
            growth_rem: 0,
            ssthresh: u32::MAX,
            snd_una: 0,
            snd_nxt: 0,
            dupacks: 0,
            in_recovery: false,
            recover: 0,
            force_retransmit: false,
            rto_recover: None,
            board: VecDeque::new(),
            srtt: None,
            rttvar: 0,
            rto: cfg.initial_rto,
            rto_deadline: None,
            stats: TcpStats::default(),
            cfg,
        }
    }

    /// Congestion window (segments).
    pub fn cwnd(&self) -> u32 {
        self.cwnd
    }

    /// Slow-start threshold (segments).
    pub fn ssthresh(&self) -> u32 {
        self.ssthresh
    }

    /// Oldest unacknowledged segment.
    pub fn snd_una(&self) -> u64 {
        self.snd_una
    }

    /// Next new segment to send.
    pub fn snd_nxt(&self) -> u64 {
        self.snd_nxt
    }

    /// True while in fast recovery.
    pub fn in_recovery(&self) -> bool {
        self.in_recovery
    }

    /// Current retransmission timeout (ns).
    pub fn rto(&self) -> Nanos {
        self.rto
    }

    /// Smoothed RTT, once measured.
    pub fn srtt(&self) -> Option<Nanos> {
        self.srtt
    }

    /// When the retransmission timer fires, if armed.
    pub fn rto_deadline(&self) -> Option<Nanos> {
        self.rto_deadline
    }

    /// Counters.
    pub fn stats(&self) -> TcpStats {
        self.stats
    }

    /// Starts the connection: the initial window.
    pub fn start(&mut self, now: Nanos) -> Vec<Segment> {
        self.send(now)
    }

    fn flight(&self) -> u32 {
        (self.snd_nxt - self.snd_una).min(u32::MAX as u64) as u32
    }

    /// RFC 6675 pipe: outstanding segments not SACKed and not (lost and not
    /// yet retransmitted).
    fn pipe(&self) -> u32 {
        self.board
            .iter()
            .filter(|s| !s.sacked && (!s.lost || s.retransmitted))
            .count() as u32
    }

    fn state_mut(&mut self, seq: u64) -> Option<&mut SegState> {
        if seq < self.snd_una {
            return None;
        }
        self.board.get_mut((seq - self.snd_una) as usize)
    }

    fn apply_sack(&mut self, blocks: &[SackBlock]) -> bool {
        let mut new = false;
        for &(start, end) in blocks {
            let lo = start.max(self.snd_una);
            let hi = end.min(self.snd_nxt);
            for seq in lo..hi {
                if let Some(s) = self.state_mut(seq)
                    && !s.sacked
                {
                    s.sacked = true;
                    new = true;
                }
            }
        }
        new
    }

    /// Marks holes with at least `DUPTHRESH` SACKed segments above them as
    /// lost; returns true if any segment is (newly or already) lost and
    /// awaiting retransmission.
    fn mark_lost(&mut self) -> bool {
        let mut above = 0u32;
        let mut pending = false;
        for s in self.board.iter_mut().rev() {
            if s.sacked {
                above += 1;
            } else if above >= DUPTHRESH && !s.lost {
                s.lost = true;
            }
            if s.lost && !s.retransmitted && !s.sacked {
                pending = true;
            }
        }
        pending
    }

    fn any_lost(&self) -> bool {
        self.board
            .iter()
            .any(|s| s.lost && !s.retransmitted && !s.sacked)
    }

    /// After an RTO, losses among the segments outstanding at the timeout
    /// are repaired by the slow-start retransmissions, not by a new fast
    /// recovery (RFC 6582 §4, the `recover` guard after a timeout).
    fn may_fast_retransmit(&self) -> bool {
        self.rto_recover.is_none()
    }

    fn enter_recovery(&mut self) {
        self.in_recovery = true;
        self.recover = self.snd_nxt.saturating_sub(1);
        self.ssthresh = (self.flight() / 2).max(2);
        self.cwnd = self.ssthresh;
        self.cwnd_cnt = 0;
        // Fast retransmit: the first lost segment goes out at once, whatever
        // the pipe (RFC 6675 step 4.3, RFC 6582).
        self.force_retransmit = true;
        self.stats.fast_recoveries += 1;
    }

    fn rtt_sample(&mut self, r: Nanos) {
        // RFC 6298 §2 with alpha = 1/8, beta = 1/4.
        match self.srtt {
            None => {
                self.srtt = Some(r);
                self.rttvar = r / 2;
            }
            Some(s) => {
                let diff = s.abs_diff(r);
                self.rttvar = (3 * self.rttvar + diff) / 4;
                self.srtt = Some((7 * s + r) / 8);
            }
        }
        let s = self.srtt.unwrap_or(r);
        let var = (4 * self.rttvar).max(1_000_000);
        self.rto = if self.cfg.linux_rto {
            s + var.max(self.cfg.min_rto)
        } else {
            (s + var).max(self.cfg.min_rto)
        }
        .min(self.cfg.max_rto);
    }

    fn arm_timer(&mut self, now: Nanos) {
        self.rto_deadline = if self.snd_nxt > self.snd_una {
            Some(now.saturating_add(self.rto))
        } else {
            None
        };
    }

    fn has_new_data(&self) -> bool {
        self.cfg.total_segments.is_none_or(|t| self.snd_nxt < t)
    }

    /// True when every segment has been acknowledged (finite transfers).
    pub fn is_done(&self) -> bool {
        self.cfg.total_segments.is_some_and(|t| self.snd_una >= t)
    }

    fn send(&mut self, now: Nanos) -> Vec<Segment> {
        let mut out = Vec::new();
        let mut pipe = self.pipe();
        while pipe < self.cwnd || self.force_retransmit {
            let forced = std::mem::take(&mut self.force_retransmit) && pipe >= self.cwnd;
            // Lost segments first, lowest first.
            let lost = self
                .board
                .iter()
                .position(|s| s.lost && !s.retransmitted && !s.sacked);
            if let Some(i) = lost {
                self.board[i].retransmitted = true;
                out.push(Segment {
                    seq: self.snd_una + i as u64,
                    ts: now,
                    retransmit: true,
                });
                self.stats.retransmits += 1;
            } else if !forced && self.has_new_data() && self.flight() < self.cfg.rwnd {
                out.push(Segment {
                    seq: self.snd_nxt,
                    ts: now,
                    retransmit: false,
                });
                self.board.push_back(SegState::default());
                self.snd_nxt += 1;
            } else {
                break;
            }
            pipe += 1;
        }
        if !out.is_empty() && self.rto_deadline.is_none() {
            self.arm_timer(now);
        }
        self.stats.sent += out.len() as u64;
        out
    }

    /// Processes an ACK; returns the segments to send.
    pub fn on_ack(&mut self, now: Nanos, ack: &Ack) -> Vec<Segment> {
        let acked_to = ack.ack.min(self.snd_nxt);
        if acked_to > self.snd_una {
            let newly = (acked_to - self.snd_una) as u32;
            if ack.ts_echo <= now {
                self.rtt_sample(now - ack.ts_echo);
            }
            for _ in 0..newly {
                self.board.pop_front();
            }
            self.snd_una = acked_to;
            self.apply_sack(ack.blocks());
            self.dupacks = 0;
            if self.in_recovery {
                if self.snd_una > self.recover {
                    // Full ACK: recovery is over.
                    self.in_recovery = false;
                    self.cwnd = self.ssthresh.max(1);
                    self.cwnd_cnt = 0;
                } else {
                    // Partial ACK: the next hole is lost too (NewReno).
                    self.stats.partial_acks += 1;
                    if let Some(s) = self.board.front_mut()
                        && !s.sacked
                        && !s.retransmitted
                    {
                        s.lost = true;
                    }
                }
            } else {
                let div = self.cfg.growth_divisor.max(1);
                let total = self.growth_rem + newly;
                let credit = total / div;
                self.growth_rem = total % div;
                if self.cwnd < self.ssthresh {
                    self.cwnd = self
                        .cwnd
                        .saturating_add(credit)
                        .min(self.ssthresh.max(self.cwnd + 1));
                } else {
                    self.cwnd_cnt += credit;
                    if self.cwnd_cnt >= self.cwnd {
                        self.cwnd_cnt -= self.cwnd;
                        self.cwnd = self.cwnd.saturating_add(1);
                    }
                }
            }
            // New data acknowledged: restart the timer (RFC 6298 5.3).
            self.rto_deadline = None;
            self.arm_timer(now);
            if self.rto_recover.is_some_and(|r| self.snd_una > r) {
                self.rto_recover = None;
            }
            let lost = self.mark_lost();
            if !self.in_recovery && lost && self.may_fast_retransmit() {
                self.enter_recovery();
            }
        } else if acked_to == self.snd_una && self.snd_nxt > self.snd_una {
            self.apply_sack(ack.blocks());
            self.dupacks += 1;
            let lost = self.mark_lost();
            if !self.in_recovery
                && (lost || self.dupacks >= DUPTHRESH)
                && self.may_fast_retransmit()
            {
                if let Some(s) = self.board.front_mut()
                    && !s.sacked
                {
                    s.lost = true;
                }
                self.enter_recovery();
            }
        }
        self.send(now)
    }

    /// The retransmission timer fired at `now`; returns what to resend.
    /// Does nothing if the timer is not due (a stale timer event).
    pub fn on_timeout(&mut self, now: Nanos) -> Vec<Segment> {
        match self.rto_deadline {
            Some(d) if d <= now => {}
            _ => return Vec::new(),
        }
        self.stats.timeouts += 1;
        // Halve the window in use, unless the timeout interrupts a fast
        // recovery that already halved it (as Linux does: the flight size
        // inflated by recovery's new data is not a measure of capacity).
        if !self.in_recovery {
            self.ssthresh = (self.flight().min(self.cwnd) / 2).max(2);
        }
        self.cwnd = 1;
        self.cwnd_cnt = 0;
        self.in_recovery = false;
        self.dupacks = 0;
        self.recover = self.snd_nxt.saturating_sub(1);
        self.rto_recover = Some(self.recover);
        for s in self.board.iter_mut() {
            if !s.sacked {
                s.lost = true;
                s.retransmitted = false;
            }
        }
        self.rto = (self.rto.saturating_mul(2)).min(self.cfg.max_rto);
        self.rto_deadline = None;
        let out = self.send(now);
        self.arm_timer(now);
        out
    }

    /// True if a lost segment awaits retransmission (for tests).
    pub fn has_pending_retransmission(&self) -> bool {
        self.any_lost()
    }
}

/// The receiving side: cumulative ACK plus SACK blocks.
#[derive(Debug, Clone, Default)]
pub struct TcpSink {
    next: u64,
    ooo: BTreeSet<u64>,
    duplicates: u64,
}

impl TcpSink {
    /// A receiver expecting segment 0.
    pub fn new() -> Self {
        Self::default()
    }

    /// Segments delivered in order so far.
    pub fn delivered(&self) -> u64 {
        self.next
    }

    /// Duplicate segments received.
    pub fn duplicates(&self) -> u64 {
        self.duplicates
    }

    /// Receives a segment; returns the ACK and how many segments became
    /// deliverable in order because of it.
    pub fn on_segment(&mut self, seg: &Segment) -> (Ack, u64) {
        let before = self.next;
        if seg.seq < self.next || self.ooo.contains(&seg.seq) {
            self.duplicates += 1;
        } else if seg.seq == self.next {
            self.next += 1;
            while self.ooo.remove(&self.next) {
                self.next += 1;
            }
        } else {
            self.ooo.insert(seg.seq);
        }
        let mut sack = [(0, 0); MAX_SACK_BLOCKS];
        let mut n = 0;
        // Blocks of out-of-order data, highest first.
        let mut blocks: Vec<SackBlock> = Vec::new();
        let mut iter = self.ooo.iter().rev().peekable();
        while let Some(&hi) = iter.next() {
            let mut lo = hi;
            while iter.peek().is_some_and(|&&x| x + 1 == lo) {
                lo -= 1;
                iter.next();
            }
            blocks.push((lo, hi + 1));
        }
        // The block holding this segment goes first (RFC 2018).
        if let Some(i) = blocks
            .iter()
            .position(|&(lo, hi)| seg.seq >= lo && seg.seq < hi)
        {
            let b = blocks.remove(i);
            blocks.insert(0, b);
        }
        for b in blocks.into_iter().take(MAX_SACK_BLOCKS) {
            sack[n] = b;
            n += 1;
        }
        (
            Ack {
                ack: self.next,
                sack,
                nsack: n as u8,
                ts_echo: seg.ts,
            },
            self.next - before,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Nanos = 1_000_000;

    /// A lossless loop with a fixed RTT; `drop(seq, retransmit)` decides
    /// which data segments are lost on the way to the sink.
    struct Pipe {
        s: TcpSender,
        r: TcpSink,
        now: Nanos,
        log: Vec<Segment>,
    }

    impl Pipe {
        fn new(cfg: TcpConfig) -> Self {
            Self {
                s: TcpSender::new(cfg),
                r: TcpSink::new(),
                now: 0,
                log: Vec::new(),
            }
        }

        /// Runs `rounds` RTTs: each round, every segment in flight arrives
        /// (unless dropped) and its ACK comes back before the next round.
        fn rounds(
            &mut self,
            first: Vec<Segment>,
            rounds: usize,
            mut drop: impl FnMut(&Segment) -> bool,
        ) {
            let mut inflight = first;
            for _ in 0..rounds {
                self.now += 40 * MS;
                let mut acks = Vec::new();
                for seg in inflight.drain(..) {
                    self.log.push(seg);
                    if !drop(&seg) {
                        acks.push(self.r.on_segment(&seg).0);
                    }
                }
                let mut next = Vec::new();
                for a in acks {
                    next.extend(self.s.on_ack(self.now, &a));
                }
                if next.is_empty()
                    && let Some(d) = self.s.rto_deadline()
                {
                    self.now = self.now.max(d);
                    next.extend(self.s.on_timeout(self.now));
                }
                inflight = next;
            }
        }
    }

    #[test]
    fn slow_start_doubles_the_window_each_rtt() {
        let mut p = Pipe::new(TcpConfig::default());
        let first = p.s.start(0);
        assert_eq!(first.len(), 3);
        p.rounds(first, 3, |_| false);
        // 3 -> 6 -> 12 -> 24
        assert_eq!(p.s.cwnd(), 24);
        assert_eq!(p.s.stats().retransmits, 0);
        assert!(p.s.srtt().unwrap() >= 40 * MS);
    }

    /// `growth_divisor: 2` (an ACK-counting sender behind a receiver that
    /// ACKs every second segment) grows the window by half as much: 3 ->
    /// 4 -> 6 -> 9 in slow start; in congestion avoidance +1 per two
    /// windows instead of per window.
    #[test]
    fn growth_divisor_halves_window_growth() {
        let cfg = TcpConfig {
            growth_divisor: 2,
            ..TcpConfig::default()
        };
        let mut p = Pipe::new(cfg);
        let first = p.s.start(0);
        p.rounds(first, 3, |_| false);
        assert_eq!(p.s.cwnd(), 9);
        // Congestion avoidance from a window of 10: 4 rounds give 2 segments
        // of growth, not 4.
        for div in [1u32, 2] {
            let mut p = Pipe::new(TcpConfig {
                initial_cwnd: 10,
                growth_divisor: div,
                ..TcpConfig::default()
            });
            p.s.ssthresh = 10;
            let first = p.s.start(0);
            p.rounds(first, 4, |_| false);
            let grown = p.s.cwnd() - 10;
            assert_eq!(grown, 4 / div, "divisor {div}");
        }
    }

    /// On a steady path (the Pipe's 40 ms rounds) RFC 6298 with a 200 ms
    /// floor times out after 200 ms; Linux's estimator after SRTT + 200 ms.
    #[test]
    fn linux_rto_keeps_the_floor_on_the_variance_term() {
        for linux in [false, true] {
            let mut p = Pipe::new(TcpConfig {
                linux_rto: linux,
                ..TcpConfig::default()
            });
            let first = p.s.start(0);
            p.rounds(first, 30, |_| false);
            let srtt = p.s.srtt().unwrap();
            assert!((39 * MS..=41 * MS).contains(&srtt), "srtt {srtt}");
            let want = if linux { srtt + 200 * MS } else { 200 * MS };
            assert_eq!(p.s.rto(), want, "linux_rto {linux}");
        }
    }

    #[test]
    fn a_loss_in_slow_start_is_repaired_by_fast_retransmit() {
        let mut p = Pipe::new(TcpConfig::default());
        let first = p.s.start(0);
        let mut dropped = false;
        p.rounds(first, 8, |seg| {
            if seg.seq == 10 && !seg.retransmit && !dropped {
                dropped = true;
                true
            } else {
                false
            }
        });
        let st = p.s.stats();
        assert_eq!(st.fast_recoveries, 1);
        assert_eq!(st.timeouts, 0);
        assert_eq!(st.retransmits, 1);
        assert!(p.log.iter().any(|s| s.seq == 10 && s.retransmit));
        // The loss is detected with about 14 segments in flight (cwnd 13
        // after the ACK of 9, plus limited transmit on the first dupacks):
        // ssthresh is half of that.
        assert!(
            (6..=8).contains(&p.s.ssthresh()),
            "ssthresh {}",
            p.s.ssthresh()
        );
        assert!(
            p.s.cwnd() > p.s.ssthresh(),
            "congestion avoidance grew the window"
        );
        assert!(!p.s.in_recovery());
        assert_eq!(p.r.delivered(), p.s.snd_una());
    }

    #[test]
    fn three_dupacks_trigger_fast_retransmit() {
        let mut s = TcpSender::new(TcpConfig {
            initial_cwnd: 10,
            ..TcpConfig::default()
        });
        let mut r = TcpSink::new();
        let segs = s.start(0);
        assert_eq!(segs.len(), 10);
        // Segment 0 is lost; 1, 2, 3 arrive: three dupacks.
        let mut out = Vec::new();
        for seg in &segs[1..4] {
            let (a, _) = r.on_segment(seg);
            assert_eq!(a.ack, 0);
            out = s.on_ack(50 * MS, &a);
        }
        assert!(s.in_recovery());
        // The first two dupacks each released one new segment (pipe < cwnd,
        // i.e. limited transmit), so 12 were in flight at the third.
        assert_eq!(s.snd_nxt(), 12);
        assert_eq!(s.ssthresh(), 6);
        assert_eq!(s.cwnd(), 6);
        assert!(out.iter().any(|x| x.seq == 0 && x.retransmit), "{out:?}");
        assert_eq!(s.stats().fast_recoveries, 1);
    }

    #[test]
    fn partial_ack_retransmits_the_next_hole() {
        let mut s = TcpSender::new(TcpConfig {
            initial_cwnd: 10,
            ..TcpConfig::default()
        });
        let mut r = TcpSink::new();
        let segs = s.start(0);
        // Segments 0 and 1 are lost (with 1 not yet "provably" lost: only
        // segments 2..=9 arrive).
        let mut sent = Vec::new();
        for seg in &segs[2..] {
            let (a, _) = r.on_segment(seg);
            sent.extend(s.on_ack(50 * MS, &a));
        }
        assert!(s.in_recovery());
        // Both holes had >= 3 SACKed segments above them: both resent, in
        // order, before any new data.
        let rexmit: Vec<u64> = sent
            .iter()
            .filter(|x| x.retransmit)
            .map(|x| x.seq)
            .collect();
        assert_eq!(rexmit, vec![0, 1]);
        // Now drop the retransmission of 1: the retransmission of 0 yields a
        // partial ACK (ack = 1 < recover = 9) ...
        let rexmit0 = sent.iter().find(|x| x.seq == 0 && x.retransmit).unwrap();
        let (a, _) = r.on_segment(rexmit0);
        assert_eq!(a.ack, 1);
        s.on_ack(90 * MS, &a);
        assert_eq!(s.stats().partial_acks, 1);
        assert!(s.in_recovery(), "a partial ACK keeps recovery going");
        // ... 1 arrives: still partial, as the segments sent during recovery
        // (limited transmit and pipe-paced new data) are above `recover`...
        let (a, _) = r.on_segment(&Segment {
            seq: 1,
            ts: 95 * MS,
            retransmit: true,
        });
        assert_eq!(a.ack, 10);
        s.on_ack(130 * MS, &a);
        // ... and a full ACK ends recovery once they are delivered too.
        let mut last = a;
        for seg in sent.iter().filter(|x| !x.retransmit) {
            last = r.on_segment(seg).0;
        }
        assert!(last.ack >= 12, "ack {}", last.ack);
        s.on_ack(140 * MS, &last);
        assert!(!s.in_recovery());
        assert_eq!(s.cwnd(), s.ssthresh());
    }

    #[test]
    fn partial_ack_marks_an_unsacked_next_segment_lost() {
        let mut s = TcpSender::new(TcpConfig {
            initial_cwnd: 8,
            ..TcpConfig::default()
        });
        let mut r = TcpSink::new();
        let segs = s.start(0);
        // 0 lost, 5 lost; 1-4 and 6-7 arrive.
        for seg in segs.iter().filter(|x| x.seq != 0 && x.seq != 5) {
            let (a, _) = r.on_segment(seg);
            s.on_ack(40 * MS, &a);
        }
        assert!(s.in_recovery());
        // 5 has only 2 SACKed segments above it: not yet known lost.
        let (a, _) = r.on_segment(&Segment {
            seq: 0,
            ts: 40 * MS,
            retransmit: true,
        });
        assert_eq!(a.ack, 5);
        let out = s.on_ack(80 * MS, &a);
        assert_eq!(s.stats().partial_acks, 1);
        assert!(out.iter().any(|x| x.seq == 5 && x.retransmit), "{out:?}");
    }

    #[test]
    fn rto_fires_when_everything_is_lost_and_backs_off() {
        let mut p = Pipe::new(TcpConfig::default());
        let first = p.s.start(0);
        p.rounds(first, 4, |_| false);
        let rto = p.s.rto();
        assert!(rto >= 200 * MS, "floor: {rto}");
        let before = p.s.stats().timeouts;
        // Black hole for two rounds (every segment lost).
        let inflight = p.s.on_timeout(0); // stale: not due
        assert!(inflight.is_empty());
        let deadline = p.s.rto_deadline().unwrap();
        let out = p.s.on_timeout(deadline);
        assert_eq!(p.s.stats().timeouts, before + 1);
        assert_eq!(p.s.cwnd(), 1);
        assert_eq!(out.len(), 1);
        assert!(out[0].retransmit && out[0].seq == p.s.snd_una());
        assert_eq!(p.s.rto(), (2 * rto).min(60_000 * MS));
        // The retransmission is lost too: the timer doubles again.
        let d2 = p.s.rto_deadline().unwrap();
        p.s.on_timeout(d2);
        assert_eq!(p.s.rto(), (4 * rto).min(60_000 * MS));
        // Then the path heals and slow start resumes.
        p.now = d2;
        let seg = Segment {
            seq: p.s.snd_una(),
            ts: d2,
            retransmit: true,
        };
        p.rounds(vec![seg], 6, |_| false);
        assert!(p.s.cwnd() > 4);
        assert_eq!(p.r.delivered(), p.s.snd_una());
    }

    #[test]
    fn sink_reports_sack_blocks_newest_first() {
        let mut r = TcpSink::new();
        let seg = |seq| Segment {
            seq,
            ts: 0,
            retransmit: false,
        };
        r.on_segment(&seg(0));
        r.on_segment(&seg(2));
        r.on_segment(&seg(3));
        let (a, n) = r.on_segment(&seg(6));
        assert_eq!(n, 0);
        assert_eq!(a.ack, 1);
        assert_eq!(a.blocks(), &[(6, 7), (2, 4)]);
        let (a, n) = r.on_segment(&seg(1));
        assert_eq!(n, 3);
        assert_eq!(a.ack, 4);
        assert_eq!(a.blocks(), &[(6, 7)]);
        r.on_segment(&seg(1));
        assert_eq!(r.duplicates(), 1);
    }

    #[test]
    fn finite_transfer_completes() {
        let mut p = Pipe::new(TcpConfig {
            total_segments: Some(50),
            ..TcpConfig::default()
        });
        let first = p.s.start(0);
        let mut k = 0;
        p.rounds(first, 20, |_| {
            k += 1;
            k % 7 == 0
        });
        assert!(p.s.is_done());
        assert_eq!(p.r.delivered(), 50);
    }
}
