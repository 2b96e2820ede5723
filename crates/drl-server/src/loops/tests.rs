//! The policy alone; the loop at work: `tests/loops.rs` (a test binary of
//! its own, so that no other test's CPU time holds its gathering off).

use proptest::prelude::*;

use super::*;

#[test]
fn one_window_alone_switches_nothing() {
    let mut runs = Runs::default();
    for _ in 1..POOL_WINDOWS {
        assert_eq!(
            decide(false, 0.95, Some(1.0), Spare::Yes, &mut runs),
            Switch::Stay
        );
    }
    assert_eq!(
        decide(false, 0.95, Some(1.0), Spare::Yes, &mut runs),
        Switch::Pool
    );
    let mut runs = Runs::default();
    for _ in 1..GATHER_WINDOWS {
        assert_eq!(
            decide(true, 0.01, Some(0.3), Spare::No, &mut runs),
            Switch::Stay
        );
    }
    assert_eq!(
        decide(true, 0.01, Some(0.3), Spare::No, &mut runs),
        Switch::Gather
    );
}

#[test]
fn a_busy_process_stays_pooled_however_little_the_loop_polls() {
    let mut runs = Runs::default();
    for _ in 0..4 * GATHER_WINDOWS {
        assert_eq!(
            decide(true, 0.0, Some(0.9), Spare::No, &mut runs),
            Switch::Stay
        );
    }
}

#[test]
fn a_window_the_other_way_starts_the_count_again() {
    let mut runs = Runs::default();
    for _ in 0..3 {
        for _ in 1..GATHER_WINDOWS {
            assert_eq!(
                decide(true, 0.0, Some(0.1), Spare::No, &mut runs),
                Switch::Stay
            );
        }
        assert_eq!(
            decide(true, 0.0, Some(0.9), Spare::No, &mut runs),
            Switch::Stay
        );
    }
}

#[test]
fn a_busy_loop_on_a_machine_with_nothing_to_spare_keeps_its_connections() {
    let mut runs = Runs::default();
    for _ in 0..10 * POOL_WINDOWS {
        assert_eq!(
            decide(false, 1.0, Some(1.0), Spare::No, &mut runs),
            Switch::Stay
        );
    }
    // Room appears (a core idles, or threads queue for CPU): at once, the
    // streak of busy windows already long enough.
    assert_eq!(
        decide(false, 1.0, Some(1.0), Spare::Yes, &mut runs),
        Switch::Pool
    );
    // Where the system has no readings, as before: busy is enough.
    let mut runs = Runs::default();
    for _ in 1..POOL_WINDOWS {
        decide(false, 1.0, None, Spare::Unknown, &mut runs);
    }
    assert_eq!(
        decide(false, 1.0, None, Spare::Unknown, &mut runs),
        Switch::Pool
    );
}

fn spare() -> impl Strategy<Value = Spare> {
    prop_oneof![Just(Spare::Yes), Just(Spare::No), Just(Spare::Unknown)]
}

proptest! {
    /// Whatever the measures: the loop pools only after POOL_WINDOWS busy
    /// windows in a row and only with room to spare in the last, gathers
    /// only after GATHER_WINDOWS quiet ones, never switches to the mode it
    /// is in, and restarts its count after a switch.
    #[test]
    fn switches_obey_the_policy(
        pooled in any::<bool>(),
        windows in prop::collection::vec((0.0f64..=1.0, prop::option::of(0.0f64..2.0), spare()), 1..40),
    ) {
        let mut runs = Runs::default();
        let mut pooled = pooled;
        let mut streak = 0u32;
        for (load, cpu, room) in windows {
            let busy = load >= HIGH;
            let quiet = cpu.unwrap_or(load) < LOW;
            streak = if (pooled && quiet) || (!pooled && busy) { streak + 1 } else { 0 };
            match decide(pooled, load, cpu, room, &mut runs) {
                Switch::Stay => {
                    if pooled {
                        prop_assert!(streak < GATHER_WINDOWS);
                    } else {
                        prop_assert!(streak < POOL_WINDOWS || room == Spare::No);
                    }
                }
                Switch::Pool => {
                    prop_assert!(!pooled && streak >= POOL_WINDOWS && room != Spare::No);
                    pooled = true;
                    streak = 0;
                }
                Switch::Gather => {
                    prop_assert!(pooled && streak >= GATHER_WINDOWS);
                    pooled = false;
                    streak = 0;
                }
            }
        }
    }
}
