//! The status page: HTML rendered on the server from the same
//! [`Status`] document `/v1/status` returns, so the numbers are there
//! without JavaScript; the embedded script (`assets/page.js`) re-renders
//! the same markup from `/v1/status` once a second. Tables use `<th
//! scope>` headers and captions; colours meet WCAG AA contrast on white.
//! Every key is escaped (keys come from clients).

use std::fmt::Write as _;

use drl_service::status::snapshot::{LimitInfo, RankingInfo, Status};

const CSS: &str = include_str!("assets/page.css");
const JS: &str = include_str!("assets/page.js");

/// Escapes text for HTML content and attribute values.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Microseconds as the page shows them (`12.3 µs`, `4.56 ms`).
pub fn fmt_us(us: f64) -> String {
    if us < 1_000.0 {
        format!("{us:.1} µs")
    } else {
        format!("{:.2} ms", us / 1_000.0)
    }
}

fn fmt_f(x: f64) -> String {
    format!("{x:.1}")
}

fn opt_f(x: Option<f64>) -> String {
    x.map_or_else(|| "–".to_string(), fmt_f)
}

/// The sparkline of a limit: allowed and denied per second, inline SVG.
pub fn sparkline(allowed: &[u64], denied: &[u64]) -> String {
    const W: f64 = 120.0;
    const H: f64 = 28.0;
    let peak = allowed
        .iter()
        .chain(denied)
        .copied()
        .max()
        .unwrap_or(0)
        .max(1);
    let points = |v: &[u64]| {
        let n = v.len().max(2) - 1;
        let mut p = String::new();
        for (i, &y) in v.iter().enumerate() {
            let x = i as f64 * W / n as f64;
            let y = H - 1.0 - (y as f64 / peak as f64) * (H - 2.0);
            let _ = write!(p, "{}{x:.1},{y:.1}", if i > 0 { " " } else { "" });
        }
        p
    };
    let label = format!(
        "allowed (solid blue) and denied (dashed red) per second over the last {} s; peak {peak}/s",
        allowed.len()
    );
    format!(
        r#"<svg class="spark" viewBox="0 0 120 28" width="120" height="28" role="img" aria-label="{label}"><polyline class="a" points="{}"/><polyline class="d" points="{}"/></svg>"#,
        points(allowed),
        points(denied)
    )
}

fn last(v: &[u64]) -> String {
    v.last().map_or_else(|| "–".to_string(), u64::to_string)
}

fn limits_table(out: &mut String, s: &Status) {
    out.push_str(r#"<section aria-labelledby="h-limits"><h2 id="h-limits">Limits</h2><table id="limits"><caption>Decisions per limit: the last second, the last minute, latency over about the last minute</caption><thead><tr><th scope="col">Limit</th><th scope="col">Scope</th><th scope="col">Quota</th><th scope="col" class="num">Allowed/s</th><th scope="col" class="num">Denied/s</th><th scope="col">Last minute</th><th scope="col" class="num">p50</th><th scope="col" class="num">p99</th><th scope="col" class="num">Allowed total</th><th scope="col" class="num">Denied total</th></tr></thead><tbody>"#);
    for l in &s.limits {
        let (p50, p99) = match &l.latency {
            Some(x) if x.samples > 0 => (fmt_us(x.p50_us), fmt_us(x.p99_us)),
            _ => ("–".into(), "–".into()),
        };
        let _ = write!(
            out,
            r#"<tr data-limit="{name}"><th scope="row">{name}{shadow}</th><td>{scope}</td><td>{quota}</td><td class="num" data-field="allowed-rate">{ar}</td><td class="num" data-field="denied-rate">{dr}</td><td>{spark}</td><td class="num" data-field="p50">{p50}</td><td class="num" data-field="p99">{p99}</td><td class="num" data-field="allowed-total">{at}</td><td class="num" data-field="denied-total">{dt}</td></tr>"#,
            name = escape(&l.name),
            shadow = if l.shadow { " (shadow)" } else { "" },
            scope = l.scope,
            quota = escape(&format!("{} {}", l.algorithm, l.quotas.join(", "))),
            ar = last(&l.allowed_per_s),
            dr = last(&l.denied_per_s),
            spark = sparkline(&l.allowed_per_s, &l.denied_per_s),
            at = l.allowed_total,
            dt = l.denied_total,
        );
    }
    out.push_str("</tbody></table></section>");
}

fn ranking_table(out: &mut String, id: &str, title: &str, r: &RankingInfo) {
    let _ = write!(
        out,
        r#"<table class="keys" id="{id}"><caption>{title}: total {}, each count at most {} over</caption><thead><tr><th scope="col">Key</th><th scope="col" class="num">Count</th><th scope="col" class="num">Error</th></tr></thead><tbody>"#,
        r.total, r.error_bound
    );
    if r.keys.is_empty() {
        out.push_str(r#"<tr><td colspan="3">none</td></tr>"#);
    }
    for k in &r.keys {
        let _ = write!(
            out,
            r#"<tr><th scope="row"><code>{}</code></th><td class="num">{}</td><td class="num">{}</td></tr>"#,
            escape(&k.key),
            k.count,
            k.error
        );
    }
    out.push_str("</tbody></table>");
}

fn top_keys(out: &mut String, s: &Status) {
    let with: Vec<&LimitInfo> = s.limits.iter().filter(|l| l.top_keys.is_some()).collect();
    if with.is_empty() {
        return;
    }
    out.push_str(r#"<section aria-labelledby="h-top"><h2 id="h-top">Top keys</h2><p class="note">From a fixed-size sketch per limit (space-saving); a key's true weight lies between count − error and count.</p>"#);
    for (i, l) in with.iter().enumerate() {
        let t = l.top_keys.as_ref().expect("filtered");
        let _ = write!(out, r#"<h3>{}</h3>"#, escape(&l.name));
        if t.sample_1_in > 1 {
            let _ = write!(
                out,
                r#"<p class="note sampled">Sampled: 1 decision in {} recorded, weighted by {}; counts and totals are estimates.</p>"#,
                t.sample_1_in, t.sample_1_in
            );
        }
        out.push_str(r#"<div class="pair">"#);
        ranking_table(out, &format!("top-demand-{i}"), "By demand", &t.by_demand);
        ranking_table(
            out,
            &format!("top-denials-{i}"),
            "By denials",
            &t.by_denials,
        );
        out.push_str("</div>");
    }
    out.push_str("</section>");
}

fn gossip(out: &mut String, s: &Status) {
    let Some(g) = &s.gossip else { return };
    let _ = write!(
        out,
        r#"<section aria-labelledby="h-gossip"><h2 id="h-gossip">Gossip</h2><table id="members"><caption>Members: {} live (this one included){}, algorithm {}</caption><thead><tr><th scope="col">Node</th><th scope="col">Address</th><th scope="col">State</th></tr></thead><tbody>"#,
        g.live_nodes,
        g.nodes.map_or_else(String::new, |n| format!(" of {n}")),
        escape(&g.algorithm)
    );
    for m in &g.members {
        let _ = write!(
            out,
            r#"<tr><th scope="row">{}{}</th><td>{}</td><td class="state-{}">{}</td></tr>"#,
            m.id,
            if m.is_self { " (this node)" } else { "" },
            escape(&m.addr),
            m.state,
            m.state
        );
    }
    out.push_str("</tbody></table>");
    for l in &s.limits {
        let Some(keys) = &l.gossip_keys else { continue };
        let _ = write!(
            out,
            r#"<table class="gossip-keys"><caption>Hot keys of {}: this node's view</caption><thead><tr><th scope="col">Key</th><th scope="col" class="num">Estimate/s</th><th scope="col" class="num">Published</th><th scope="col" class="num">Others/s</th><th scope="col" class="num">Share</th><th scope="col" class="num">Local limit</th><th scope="col" class="num">Effective limit</th><th scope="col" class="num">Live nodes</th></tr></thead><tbody>"#,
            escape(&l.name)
        );
        if keys.is_empty() {
            out.push_str(r#"<tr><td colspan="8">none</td></tr>"#);
        }
        for k in keys {
            let _ = write!(
                out,
                r#"<tr><th scope="row"><code>{}</code></th><td class="num">{}</td><td class="num">{}</td><td class="num">{}</td><td class="num">{:.1} %</td><td class="num">{}</td><td class="num">{}</td><td class="num">{}</td></tr>"#,
                escape(&k.key),
                fmt_f(k.estimate),
                fmt_f(k.published),
                fmt_f(k.remote),
                k.share * 100.0,
                opt_f(k.local_limit),
                k.effective_limit,
                k.live_nodes
            );
        }
        out.push_str("</tbody></table>");
    }
    out.push_str("</section>");
}

fn orbit(out: &mut String, s: &Status) {
    let Some(o) = &s.orbit else { return };
    let _ = write!(
        out,
        r#"<section aria-labelledby="h-orbit"><h2 id="h-orbit">Orbit</h2><table id="ring"><caption>Ring order (epoch {} ms)</caption><thead><tr><th scope="col">Position</th><th scope="col">Node</th><th scope="col">State</th></tr></thead><tbody>"#,
        o.epoch_ms
    );
    for (i, id) in o.ring.iter().enumerate() {
        let state = if *id == o.node_id {
            "this node"
        } else if o.down.contains(id) {
            "down"
        } else {
            "up"
        };
        let _ = write!(
            out,
            r#"<tr><th scope="row">{}</th><td>{id}</td><td>{state}</td></tr>"#,
            i + 1
        );
    }
    out.push_str("</tbody></table>");
    for l in &s.limits {
        let Some(keys) = &l.orbit_keys else { continue };
        let _ = write!(
            out,
            r#"<table class="orbit-keys"><caption>Window usage of {} at this node</caption><thead><tr><th scope="col">Key</th><th scope="col" class="num">Window</th><th scope="col" class="num">Admitted here</th><th scope="col" class="num">Capacity here</th><th scope="col" class="num">Cap</th></tr></thead><tbody>"#,
            escape(&l.name)
        );
        if keys.is_empty() {
            out.push_str(r#"<tr><td colspan="5">none</td></tr>"#);
        }
        for k in keys {
            let _ = write!(
                out,
                r#"<tr><th scope="row"><code>{}</code></th><td class="num">{}</td><td class="num">{}</td><td class="num">{}</td><td class="num">{}</td></tr>"#,
                escape(&k.key),
                k.window,
                k.admitted_here,
                k.capacity_here,
                k.cap
            );
        }
        out.push_str("</tbody></table>");
    }
    out.push_str("</section>");
}

fn redis(out: &mut String, s: &Status) {
    let Some(r) = &s.redis else { return };
    let _ = write!(
        out,
        r#"<section aria-labelledby="h-redis"><h2 id="h-redis">Redis</h2><table class="kv" id="redis"><caption>Connection and circuit breaker</caption><tbody><tr><th scope="row">Engine</th><td>{}</td></tr><tr><th scope="row">Breaker</th><td class="state-{}">{}</td></tr><tr><th scope="row">Errors</th><td class="num">{}</td></tr><tr><th scope="row">Timeouts</th><td class="num">{}</td></tr><tr><th scope="row">Fail-overs</th><td class="num">{}</td></tr><tr><th scope="row">Calls in flight</th><td class="num">{} of {}</td></tr></tbody></table></section>"#,
        r.engine,
        r.breaker,
        r.breaker,
        r.errors,
        r.timeouts,
        r.fail_overs,
        r.in_flight,
        r.max_in_flight
    );
}

/// The `<main>` content for `s` (what the script re-renders).
pub fn main_html(s: &Status) -> String {
    let mut out = String::with_capacity(8192);
    let _ = write!(
        out,
        r#"<section aria-labelledby="h-node"><h2 id="h-node">Node</h2><table class="kv" id="node"><caption>This process</caption><tbody><tr><th scope="row">Version</th><td>{}</td></tr><tr><th scope="row">Uptime</th><td data-field="uptime">{} s</td></tr><tr><th scope="row">State</th><td>{}</td></tr></tbody></table></section>"#,
        escape(s.node.version),
        s.node.uptime_s,
        if s.node.draining {
            "draining"
        } else {
            "serving"
        }
    );
    limits_table(&mut out, s);
    top_keys(&mut out, s);
    gossip(&mut out, s);
    orbit(&mut out, s);
    redis(&mut out, s);
    out
}

/// The whole page.
pub fn render(s: &Status) -> String {
    format!(
        r#"<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1"><title>drl status</title><style>{CSS}</style></head>
<body><header><h1>drl status</h1><p id="updated" data-source="server" data-now="{now}" aria-live="polite">Rendered by the server; the numbers refresh every second when JavaScript runs.</p></header>
<main id="main">{main}</main>
<script>{JS}</script></body></html>
"#,
        now = s.node.now_ms,
        main = main_html(s)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_escaped_and_sparklines_scale() {
        assert_eq!(
            escape(r#"<a href="x">&'"#),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
        let svg = sparkline(&[0, 5, 10], &[10, 0, 0]);
        assert!(
            svg.contains(r#"points="0.0,27.0 60.0,14.0 120.0,1.0""#),
            "{svg}"
        );
        assert!(svg.contains("peak 10/s"), "{svg}");
        // Empty history: no NaN.
        assert!(!sparkline(&[], &[]).contains("NaN"));
        assert_eq!(fmt_us(12.34), "12.3 µs");
        assert_eq!(fmt_us(4_560.0), "4.56 ms");
    }
}
