//! Orbit: a ring protocol for strict global caps (under construction).
