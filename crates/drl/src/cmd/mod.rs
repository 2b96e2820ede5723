//! Subcommands, one module each.

pub mod config;
pub mod relay;
pub mod replay;
pub mod serve;
pub mod sim;
mod sim_faults;
mod sim_fig8;
pub mod testbed;
