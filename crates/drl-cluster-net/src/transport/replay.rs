//! Freshness of authenticated frames (sans-IO): a sliding window of
//! sequence numbers per sender ([`ReplayWindow`]) and the table of senders
//! with the rule for a sender's restarts ([`Senders`]).
//!
//! ## Instances: the restart rule
//!
//! Every sender process draws a random 64-bit *instance* at start and
//! numbers its frames from the wall clock in nanoseconds upward; both are
//! in every frame (and in its nonce). A receiver keeps, per sender id, the
//! instance it currently follows, that instance's replay window, and the
//! last [`RETIRED_INSTANCES`] instances it followed before. A frame is
//! fresh if:
//!
//! * its instance is the current one and its sequence number is new to
//!   the window (the usual case); or
//! * its instance is not retired, and its sequence number is above the
//!   highest seen from the current instance: a restarted sender, whose
//!   clock-based numbering continues above its previous life. The receiver
//!   switches to the new instance and retires the old one; or
//! * its instance is not retired, and the current instance has not been
//!   heard for [`TAKEOVER_SILENCE_MS`]: a sender restarted with its clock
//!   stepped back (so its numbers are lower than before).
//!
//! A retired instance never comes back: frames of a previous life (in
//! flight, or recorded and replayed) are dropped as replays, and cannot
//! re-open a window. Of two live processes with the same node id (a
//! misconfiguration), the one started last wins.
//!
//! What this cannot stop: a receiver that restarts forgets its table, so a
//! frame recorded earlier *and addressed to it* is accepted once, until the
//! sender's live frames move the window past it (frames addressed to other
//! nodes stay refused: see the receiver binding in [`super::frame`]).

use std::collections::HashMap;

use super::frame::Reject;

/// Bits of history a replay window keeps.
pub const REPLAY_WINDOW: u64 = 128;

/// Previous instances of a sender remembered (and refused) per sender.
pub const RETIRED_INSTANCES: usize = 4;

/// A sender silent this long may be taken over by a new instance whose
/// sequence numbers are lower (clock stepped back at restart), ms.
pub const TAKEOVER_SILENCE_MS: u64 = 10_000;

/// Sliding anti-replay window of one sender instance (as IPsec's): accepts
/// each sequence number at most once, and nothing older than
/// [`REPLAY_WINDOW`] below the highest seen.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReplayWindow {
    top: u64,
    seen: u128,
}

impl ReplayWindow {
    /// Accepts `seq` (and records it) if it is new.
    pub fn accept(&mut self, seq: u64) -> bool {
        if seq == 0 {
            return false;
        }
        if seq > self.top {
            let shift = seq - self.top;
            self.seen = if shift >= REPLAY_WINDOW {
                0
            } else {
                self.seen << shift
            };
            self.seen |= 1;
            self.top = seq;
            return true;
        }
        let back = self.top - seq;
        if back >= REPLAY_WINDOW {
            return false;
        }
        let bit = 1u128 << back;
        if self.seen & bit != 0 {
            return false;
        }
        self.seen |= bit;
        true
    }

    /// Highest sequence number accepted.
    pub fn top(&self) -> u64 {
        self.top
    }
}

#[derive(Debug, Clone)]
struct Sender {
    instance: u64,
    window: ReplayWindow,
    /// Superseded instances, newest first; 0 = empty slot.
    retired: [u64; RETIRED_INSTANCES],
    /// When a frame of the current instance was last accepted, ms.
    last_ms: u64,
}

/// The bounded table of senders and their windows.
#[derive(Debug)]
pub struct Senders {
    map: HashMap<u32, Sender>,
    max: usize,
}

impl Senders {
    /// A table of at most `max` senders.
    pub fn new(max: usize) -> Self {
        Self {
            map: HashMap::new(),
            max,
        }
    }

    /// Senders tracked.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// True if no sender is tracked.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// The instance currently followed for `sender`.
    pub fn instance(&self, sender: u32) -> Option<u64> {
        self.map.get(&sender).map(|s| s.instance)
    }

    /// Accepts (and records) frame `seq` of `sender`'s `instance` at
    /// monotonic time `now_ms` if it is fresh (see the module doc).
    pub fn accept(
        &mut self,
        sender: u32,
        instance: u64,
        seq: u64,
        now_ms: u64,
    ) -> Result<(), Reject> {
        if instance == 0 || seq == 0 {
            return Err(Reject::Replayed);
        }
        let full = self.map.len() >= self.max;
        let Some(s) = self.map.get_mut(&sender) else {
            if full {
                return Err(Reject::TooManySenders);
            }
            let mut window = ReplayWindow::default();
            window.accept(seq);
            self.map.insert(
                sender,
                Sender {
                    instance,
                    window,
                    retired: [0; RETIRED_INSTANCES],
                    last_ms: now_ms,
                },
            );
            return Ok(());
        };
        if s.instance == instance {
            if !s.window.accept(seq) {
                return Err(Reject::Replayed);
            }
            s.last_ms = s.last_ms.max(now_ms);
            return Ok(());
        }
        if s.retired.contains(&instance) {
            return Err(Reject::Replayed);
        }
        let restarted = seq > s.window.top();
        let silent = now_ms.saturating_sub(s.last_ms) >= TAKEOVER_SILENCE_MS;
        if !restarted && !silent {
            return Err(Reject::Replayed);
        }
        s.retired.copy_within(0..RETIRED_INSTANCES - 1, 1);
        s.retired[0] = s.instance;
        s.instance = instance;
        s.window = ReplayWindow::default();
        s.window.accept(seq);
        s.last_ms = now_ms;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn replay_window_accepts_each_number_once() {
        let mut w = ReplayWindow::default();
        assert!(!w.accept(0));
        assert!(w.accept(5));
        assert!(!w.accept(5));
        assert!(w.accept(3));
        assert!(!w.accept(3));
        assert!(w.accept(200));
        assert!(!w.accept(5), "older than the window");
        assert!(w.accept(199));
        assert!(w.accept(200 - 127));
        assert!(!w.accept(200 - 128));
        assert!(w.accept(u64::MAX));
        assert!(!w.accept(u64::MAX));
    }

    #[test]
    fn a_restarted_sender_takes_over_and_its_past_never_comes_back() {
        let mut t = Senders::new(16);
        let (old, new) = (11, 22);
        for seq in 1_000..1_010 {
            t.accept(7, old, seq, 0).unwrap();
        }
        // Restart: higher numbers (clock-based), new instance.
        t.accept(7, new, 5_000, 1).unwrap();
        assert_eq!(t.instance(7), Some(new));
        // The old life's frames, replayed or late, are refused, whatever
        // their number.
        for seq in [1_000, 1_009, 1_010, 6_000, u64::MAX] {
            assert_eq!(t.accept(7, old, seq, 2), Err(Reject::Replayed), "{seq}");
        }
        assert_eq!(t.instance(7), Some(new), "the old instance did not re-open");
        t.accept(7, new, 5_001, 3).unwrap();
        assert_eq!(t.accept(7, new, 5_001, 3), Err(Reject::Replayed));
        // An unknown instance with lower numbers is refused while the
        // current one is heard, and takes over after a long silence.
        let stepped_back = 33;
        assert_eq!(t.accept(7, stepped_back, 10, 4), Err(Reject::Replayed));
        t.accept(7, stepped_back, 10, 3 + TAKEOVER_SILENCE_MS)
            .unwrap();
        assert_eq!(t.instance(7), Some(stepped_back));
        assert_eq!(t.accept(7, new, 9_999, u64::MAX), Err(Reject::Replayed));
        assert_eq!(t.accept(7, old, 9_999, u64::MAX), Err(Reject::Replayed));
        // Instance and sequence 0 are never valid.
        assert_eq!(t.accept(8, 0, 1, 0), Err(Reject::Replayed));
        assert_eq!(t.accept(8, 1, 0, 0), Err(Reject::Replayed));
    }

    #[test]
    fn the_table_is_bounded() {
        let mut t = Senders::new(2);
        t.accept(1, 1, 1, 0).unwrap();
        t.accept(2, 1, 1, 0).unwrap();
        assert_eq!(t.accept(3, 1, 1, 0), Err(Reject::TooManySenders));
        t.accept(2, 1, 2, 0).unwrap();
        assert_eq!(t.len(), 2);
    }

    proptest! {
        /// Whatever sequence of (instance, seq) frames arrives, no
        /// (instance, seq) pair is ever accepted twice, and once an
        /// instance is superseded none of its frames is accepted while it
        /// is remembered as retired.
        #[test]
        fn no_frame_is_accepted_twice(
            frames in proptest::collection::vec((1u64..4, 1u64..300, 0u64..20_000), 1..400),
        ) {
            let mut t = Senders::new(4);
            let mut seen = std::collections::HashSet::new();
            let mut now = 0;
            let mut retired: Vec<u64> = Vec::new();
            for (inst, seq, dt) in frames {
                now += dt;
                let before = t.instance(1);
                if t.accept(1, inst, seq, now).is_ok() {
                    prop_assert!(seen.insert((inst, seq)), "({inst}, {seq}) twice");
                    prop_assert!(!retired.contains(&inst), "retired {inst} came back");
                    if let Some(b) = before && b != inst {
                        retired.push(b);
                    }
                }
            }
        }
    }
}
