//! drl-server (under construction).
