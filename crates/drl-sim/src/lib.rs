//! drl-sim (under construction).
