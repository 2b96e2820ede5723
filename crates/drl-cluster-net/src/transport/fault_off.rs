//! What stands in for the fault injector in a build without the cargo
//! feature `fault-injection` (every shipped build): no wrapper, no loss, no
//! delay. The settings that would reach it (`cluster.faults`,
//! `orbit.fault`) are refused when a config sets them
//! ([`crate::test_only`]), so [`FaultConfig`] is never anything but off.

/// An empty fault section: the only one a shipped build accepts (by
/// leaving the key out).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FaultConfig {
    _off: (),
}

impl FaultConfig {
    /// Always true: this build injects nothing.
    pub fn is_off(&self) -> bool {
        true
    }
}

/// A handle with nothing to control.
#[derive(Debug, Clone, Default)]
pub struct FaultHandle {
    _off: (),
}

impl FaultHandle {
    /// Does nothing (there is no fault injector; `cfg` is always off).
    pub fn apply(&self, cfg: &FaultConfig) {
        debug_assert!(cfg.is_off());
    }
}
