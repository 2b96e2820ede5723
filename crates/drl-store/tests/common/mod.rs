//! The shared test harness (drl-test-kit): real Redis servers and a test PKI.

pub use drl_test_kit::redis::*;
#[allow(unused_imports)]
pub use drl_test_kit::tls;
