//! Drivers for the paper's experiments beyond the baseline (§5.2-5.7):
//! each module builds the scenarios of one figure or table, measures what
//! the paper reports, and writes the outputs (`drl sim <name>`).

pub mod catalog;
pub mod common;
pub mod fig6;
pub mod fig7;
pub mod fig8;
pub mod fig9;
pub mod table1;
pub mod table2;
