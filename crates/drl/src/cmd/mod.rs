//! Subcommands, one module each.

pub mod replay;
