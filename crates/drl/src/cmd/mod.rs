//! Subcommands, one module each.

pub mod replay;
pub mod serve;
pub mod sim;
pub mod config;
