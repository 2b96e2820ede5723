//! The testbed's Figure 3 outputs, in the shape of `drl sim fig3`:
//! `summary.json` (aggregate, per-site rates and shares, Jain's index
//! over flows, rate statistics over 1 s and 100 ms windows) and an SVG
//! with one panel per algorithm (per-site and aggregate rate over time).
//!
//! Pure functions of the sampled byte counters.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

/// One algorithm's run: cumulative bytes per flow, sampled.
#[derive(Debug, Clone)]
pub struct Run {
    /// The algorithm's name.
    pub algorithm: String,
    /// Flows of each site; flows are numbered site by site.
    pub flows_per_site: Vec<usize>,
    /// (seconds since the flows started, cumulative bytes per flow).
    pub samples: Vec<(f64, Vec<u64>)>,
    /// IP bytes each limiting relay (one for CTB, one per site
    /// otherwise) (allowed, dropped) over the whole run, warm-up included.
    pub relay_bytes: Vec<(f64, f64)>,
}

/// Rate statistics over windows of one length.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct TimescaleStats {
    /// Window length.
    pub timescale_ms: u64,
    /// Mean aggregate rate.
    pub mean_mbps: f64,
    /// Standard deviation of the aggregate rate.
    pub stddev_mbps: f64,
    /// Fraction of windows above 110 % of the limit.
    pub frac_over_110pct: f64,
}

/// One algorithm's summary (the fields `drl sim` writes that a real
/// network can measure).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct AlgorithmSummary {
    /// Aggregate goodput after the warm-up.
    pub aggregate_mbps: f64,
    /// Per site.
    pub limiter_mbps: Vec<f64>,
    /// Per site, share of the aggregate.
    pub limiter_share: Vec<f64>,
    /// Jain's fairness index over the flows' goodput.
    pub jain: f64,
    /// Per flow.
    pub flow_goodput_mbps: Vec<f64>,
    /// Over 1 s and 100 ms windows.
    pub timescales: Vec<TimescaleStats>,
    /// Per limiting relay, the fraction of the IP bytes offered to it
    /// that it dropped (whole run): how hard the limit bound the senders.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub relay_drop_fraction: Vec<f64>,
}

/// The run's parameters, as `drl sim` records them.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Parameters {
    /// Flows per site.
    pub flows: Vec<usize>,
    /// Global limit.
    pub limit_mbps: f64,
    /// Token bucket depth.
    pub depth_bytes: u64,
    /// RTT the receiver's relay adds (delay line).
    pub flow_rtt_ms: f64,
    /// Gossip interval.
    pub estimate_interval_ms: f64,
    /// RTT between the relays (each gossip datagram is held half of it).
    pub limiter_rtt_ms: f64,
    /// Length of each run.
    pub duration_s: f64,
    /// Time excluded from the averages.
    pub warmup_s: f64,
    /// TCP congestion control.
    pub congestion_control: String,
}

/// `summary.json`.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Summary {
    /// Per algorithm.
    pub algorithms: BTreeMap<String, AlgorithmSummary>,
    /// How it was run.
    pub parameters: Parameters,
}

impl Summary {
    /// The summary as pretty-printed JSON, with a final newline.
    pub fn to_json(&self) -> String {
        let mut json = serde_json::to_string_pretty(self)
            .expect("a summary of numbers and strings serializes");
        json.push('\n');
        json
    }
}

fn r6(x: f64) -> f64 {
    (x * 1e6).round() / 1e6
}

/// Jain's index of `xs` (1 = equal).
pub fn jain(xs: &[f64]) -> f64 {
    let s: f64 = xs.iter().sum();
    let q: f64 = xs.iter().map(|x| x * x).sum();
    if q == 0.0 {
        return 1.0;
    }
    s * s / (xs.len() as f64 * q)
}

impl Run {
    fn at(&self, t: f64) -> Option<&(f64, Vec<u64>)> {
        self.samples.iter().find(|(s, _)| *s >= t - 1e-9)
    }

    fn site_of(&self, flow: usize) -> usize {
        let mut acc = 0;
        for (i, n) in self.flows_per_site.iter().enumerate() {
            acc += n;
            if flow < acc {
                return i;
            }
        }
        self.flows_per_site.len().saturating_sub(1)
    }

    /// Per-site rate (Mbps) in windows of `w` seconds: (window end,
    /// per-site rates).
    pub fn site_series(&self, w: f64) -> Vec<(f64, Vec<f64>)> {
        let mut out = Vec::new();
        let Some((t_end, _)) = self.samples.last() else {
            return out;
        };
        let mut t = w;
        while t <= *t_end + 1e-9 {
            let (Some((t0, a)), Some((t1, b))) = (self.at(t - w), self.at(t)) else {
                break;
            };
            let dt = (t1 - t0).max(1e-9);
            let mut sites = vec![0.0; self.flows_per_site.len()];
            for f in 0..a.len().min(b.len()) {
                // A counter that went back (the flow started over between
                // the samples) counts nothing for this window rather than
                // underflowing.
                sites[self.site_of(f)] += b[f].saturating_sub(a[f]) as f64 * 8.0 / dt / 1e6;
            }
            out.push((t, sites));
            t += w;
        }
        out
    }

    /// The summary over `[warmup, end]`.
    pub fn summary(&self, warmup: f64, limit_mbps: f64) -> AlgorithmSummary {
        let (Some((t0, a)), Some((t1, b))) = (self.at(warmup), self.samples.last()) else {
            return AlgorithmSummary {
                aggregate_mbps: 0.0,
                limiter_mbps: vec![],
                limiter_share: vec![],
                jain: 1.0,
                flow_goodput_mbps: vec![],
                timescales: vec![],
                relay_drop_fraction: vec![],
            };
        };
        let dt = (t1 - t0).max(1e-9);
        let flows: Vec<f64> = (0..a.len().min(b.len()))
            .map(|f| (b[f] - a[f]) as f64 * 8.0 / dt / 1e6)
            .collect();
        let mut sites = vec![0.0; self.flows_per_site.len()];
        for (f, x) in flows.iter().enumerate() {
            sites[self.site_of(f)] += x;
        }
        let agg: f64 = sites.iter().sum();
        let timescales = [1.0, 0.1]
            .iter()
            .map(|&w| {
                let xs: Vec<f64> = self
                    .site_series(w)
                    .into_iter()
                    .filter(|(t, _)| *t - w >= warmup - 1e-9)
                    .map(|(_, s)| s.iter().sum())
                    .collect();
                let n = xs.len().max(1) as f64;
                let mean = xs.iter().sum::<f64>() / n;
                let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n;
                TimescaleStats {
                    timescale_ms: (w * 1000.0).round() as u64,
                    mean_mbps: r6(mean),
                    stddev_mbps: r6(var.sqrt()),
                    frac_over_110pct: r6(xs.iter().filter(|&&x| x > 1.1 * limit_mbps).count()
                        as f64
                        / n),
                }
            })
            .collect();
        AlgorithmSummary {
            aggregate_mbps: r6(agg),
            limiter_share: sites
                .iter()
                .map(|s| r6(if agg > 0.0 { s / agg } else { 0.0 }))
                .collect(),
            limiter_mbps: sites.iter().map(|&s| r6(s)).collect(),
            jain: r6(jain(&flows)),
            flow_goodput_mbps: flows.iter().map(|&x| r6(x)).collect(),
            timescales,
            relay_drop_fraction: self
                .relay_bytes
                .iter()
                .map(|&(ok, dropped)| {
                    r6(if ok + dropped > 0.0 {
                        dropped / (ok + dropped)
                    } else {
                        0.0
                    })
                })
                .collect(),
        }
    }
}

const COLORS: [&str; 4] = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"];

/// The Figure 3 SVG: one panel per run, per-site and aggregate rate in
/// 1-second windows, the limit as a dashed line.
pub fn svg(runs: &[Run], limit_mbps: f64, duration: f64) -> String {
    let (pw, ph) = (600.0, 260.0);
    let (ml, mr, mt, mb) = (50.0, 15.0, 28.0, 35.0);
    let mut o = String::new();
    let _ = writeln!(
        o,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{pw}" height="{}" font-family="sans-serif" font-size="12">"#,
        ph * runs.len() as f64
    );
    let _ = writeln!(o, r#"<rect width="100%" height="100%" fill="white"/>"#);
    for (i, run) in runs.iter().enumerate() {
        let y0 = ph * i as f64;
        let series = run.site_series(1.0);
        let ymax = series
            .iter()
            .map(|(_, s)| s.iter().sum::<f64>())
            .fold(limit_mbps * 1.6, f64::max);
        let x = |t: f64| ml + (t / duration.max(1e-9)) * (pw - ml - mr);
        let y = |v: f64| y0 + mt + (1.0 - v / ymax) * (ph - mt - mb);
        let _ = writeln!(
            o,
            r#"<text x="{}" y="{}" text-anchor="middle" font-size="15">{} (real TCP, drl relay)</text>"#,
            pw / 2.0,
            y0 + 18.0,
            run.algorithm.to_uppercase()
        );
        let _ = writeln!(
            o,
            r#"<rect x="{ml}" y="{}" width="{}" height="{}" fill="none" stroke="black"/>"#,
            y0 + mt,
            pw - ml - mr,
            ph - mt - mb
        );
        let mut tick = 0.0;
        while tick <= ymax {
            let _ = writeln!(
                o,
                r#"<text x="{}" y="{}" text-anchor="end">{tick:.0}</text>"#,
                ml - 4.0,
                y(tick) + 4.0
            );
            tick += if ymax > 30.0 { 10.0 } else { 5.0 };
        }
        let step = if duration > 30.0 { 10.0 } else { 5.0 };
        let mut t = 0.0;
        while t <= duration + 1e-9 {
            let _ = writeln!(
                o,
                r#"<text x="{}" y="{}" text-anchor="middle">{t:.0}</text>"#,
                x(t),
                y0 + ph - mb + 15.0
            );
            t += step;
        }
        let _ = writeln!(
            o,
            r#"<text x="{}" y="{}" text-anchor="middle">Time (s)</text><text x="12" y="{}" transform="rotate(-90 12 {})" text-anchor="middle">Rate (Mbps)</text>"#,
            pw / 2.0,
            y0 + ph - 5.0,
            y0 + ph / 2.0,
            y0 + ph / 2.0
        );
        let _ = writeln!(
            o,
            r##"<line x1="{ml}" x2="{}" y1="{ly}" y2="{ly}" stroke="#888" stroke-dasharray="4 3"/>"##,
            pw - mr,
            ly = y(limit_mbps)
        );
        let nsites = run.flows_per_site.len();
        for line in 0..=nsites {
            let pts: Vec<String> = series
                .iter()
                .map(|(t, s)| {
                    let v = if line == nsites {
                        s.iter().sum()
                    } else {
                        s[line]
                    };
                    format!("{:.1},{:.1}", x(*t), y(v))
                })
                .collect();
            let (color, width, label) = if line == nsites {
                ("black", 2, "Aggregate".to_string())
            } else {
                (
                    COLORS[line % COLORS.len()],
                    1,
                    format!("Site {} ({} flows)", line + 1, run.flows_per_site[line]),
                )
            };
            let _ = writeln!(
                o,
                r#"<polyline fill="none" stroke="{color}" stroke-width="{width}" points="{}"/>"#,
                pts.join(" ")
            );
            let ly = y0 + mt + 14.0 + 14.0 * line as f64;
            let _ = writeln!(
                o,
                r#"<line x1="{}" x2="{}" y1="{ly}" y2="{ly}" stroke="{color}" stroke-width="{width}"/><text x="{}" y="{}">{label}</text>"#,
                pw - mr - 150.0,
                pw - mr - 134.0,
                pw - mr - 130.0,
                ly + 4.0
            );
        }
    }
    o.push_str("</svg>\n");
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run() -> Run {
        // Site 1: one flow at 1 MB/s; site 2: two flows at 0.5 MB/s each;
        // sampled every 100 ms for 4 s.
        let samples = (0..=40)
            .map(|i| {
                let t = i as f64 / 10.0;
                let b = (t * 1e6) as u64;
                (t, vec![b, b / 2, b / 2])
            })
            .collect();
        Run {
            algorithm: "ctb".into(),
            flows_per_site: vec![1, 2],
            samples,
            relay_bytes: vec![(900.0, 100.0), (0.0, 0.0)],
        }
    }

    #[test]
    fn rates_shares_and_jain() {
        let s = run().summary(1.0, 16.0);
        assert_eq!(s.aggregate_mbps, 16.0);
        assert_eq!(s.limiter_mbps, vec![8.0, 8.0]);
        assert_eq!(s.limiter_share, vec![0.5, 0.5]);
        assert_eq!(s.flow_goodput_mbps, vec![8.0, 4.0, 4.0]);
        // (16)^2 / (3 * (64 + 16 + 16)) = 256 / 288
        assert!((s.jain - 256.0 / 288.0).abs() < 1e-6);
        assert_eq!(s.timescales[0].timescale_ms, 1000);
        assert_eq!(s.timescales[0].stddev_mbps, 0.0);
        assert_eq!(s.timescales[1].mean_mbps, 16.0);
        assert_eq!(s.timescales[0].frac_over_110pct, 0.0);
        assert_eq!(s.relay_drop_fraction, vec![0.1, 0.0]);
        let json = Summary {
            algorithms: [("ctb".to_string(), s)].into_iter().collect(),
            parameters: Parameters {
                flows: vec![1, 2],
                limit_mbps: 16.0,
                depth_bytes: 1,
                flow_rtt_ms: 40.0,
                estimate_interval_ms: 50.0,
                limiter_rtt_ms: 40.0,
                duration_s: 4.0,
                warmup_s: 1.0,
                congestion_control: "reno".into(),
            },
        }
        .to_json();
        assert!(
            json.contains("\"relay_drop_fraction\": [\n        0.1,"),
            "{json}"
        );
    }

    #[test]
    fn svg_has_a_panel_per_run_and_a_line_per_site() {
        let svg = svg(&[run(), run()], 16.0, 4.0);
        assert_eq!(svg.matches("<polyline").count(), 6);
        assert!(svg.contains("Site 2 (2 flows)"));
        assert!(svg.ends_with("</svg>\n"));
    }

    #[test]
    fn jain_bounds() {
        assert_eq!(jain(&[1.0, 1.0]), 1.0);
        assert!((jain(&[1.0, 0.0]) - 0.5).abs() < 1e-12);
    }
}
