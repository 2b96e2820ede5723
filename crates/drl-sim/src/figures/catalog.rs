//! The figure commands (`drl sim fig6`, ...) by name: plan, write, report.

use std::path::{Path, PathBuf};

use drl_core::Nanos;

use super::common::{FigureOptions, FigurePlan, VariantRuns, write_all};
use super::{fig6, fig7, fig9, table1, table2};
use crate::report::ReportError;

/// A figure or table of the paper beyond §5.1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Figure {
    /// Figure 6: flows joining and leaving 5 limiters.
    Fig6,
    /// Figure 7: an upstream bottleneck, then an unbottlenecked flow.
    Fig7,
    /// Figure 9: demand moving between 10 sites; FPS against static 1/N.
    Fig9,
    /// Table 1: bulk flows against Poisson Web flows.
    Table1,
    /// Table 2: 3 long-RTT flows against 7 short-RTT flows.
    Table2,
}

impl Figure {
    /// The command and file name.
    pub fn name(self) -> &'static str {
        match self {
            Figure::Fig6 => "fig6",
            Figure::Fig7 => "fig7",
            Figure::Fig9 => "fig9",
            Figure::Table1 => "table1",
            Figure::Table2 => "table2",
        }
    }

    /// The runs the figure needs.
    pub fn plan(self, o: &FigureOptions) -> FigurePlan {
        match self {
            Figure::Fig6 => fig6::plan(o),
            Figure::Fig7 => fig7::plan(o),
            Figure::Fig9 => fig9::plan(o),
            Figure::Table1 => table1::plan(o),
            Figure::Table2 => table2::plan(o),
        }
    }

    /// Writes the outputs into `dir`; rate series over `series` windows.
    pub fn write(
        self,
        plan: &FigurePlan,
        runs: &[VariantRuns],
        dir: &Path,
        series: Nanos,
    ) -> Result<Vec<PathBuf>, ReportError> {
        match self {
            Figure::Fig6 => write_all(plan, runs, &fig6::summary(plan, runs), dir, series),
            Figure::Fig7 => write_all(plan, runs, &fig7::summary(plan, runs), dir, series),
            Figure::Fig9 => write_all(plan, runs, &fig9::summary(plan, runs), dir, series),
            Figure::Table1 => write_all(plan, runs, &table1::summary(plan, runs), dir, series),
            Figure::Table2 => write_all(plan, runs, &table2::summary(plan, runs), dir, series),
        }
    }

    /// The figure's results as terminal lines.
    pub fn report(self, runs: &[VariantRuns]) -> Vec<String> {
        match self {
            Figure::Fig6 => fig6::report(runs),
            Figure::Fig7 => fig7::report(runs),
            Figure::Fig9 => fig9::report(runs),
            Figure::Table1 => table1::report(runs),
            Figure::Table2 => table2::report(runs),
        }
    }
}
