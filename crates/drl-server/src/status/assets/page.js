// drl status page: re-renders <main> from GET /v1/status once a second,
// with the same markup the server renders (see status/page.rs). Keys come
// from clients: they are only ever set as text, never as HTML.
"use strict";
(function () {
  var main = document.getElementById("main");
  var note = document.getElementById("updated");
  var SVG = "http://www.w3.org/2000/svg";

  function el(tag, attrs) {
    var e = document.createElement(tag);
    for (var k in attrs || {}) e.setAttribute(k, attrs[k]);
    for (var i = 2; i < arguments.length; i++) {
      var c = arguments[i];
      if (c === null || c === undefined) continue;
      e.append(typeof c === "object" ? c : String(c));
    }
    return e;
  }
  function num(v) { return el("td", { class: "num" }, v); }
  function f1(x) { return x === null || x === undefined ? "\u2013" : x.toFixed(1); }
  function us(x) { return x < 1000 ? x.toFixed(1) + " \u00b5s" : (x / 1000).toFixed(2) + " ms"; }
  function last(v) { return v.length ? v[v.length - 1] : "\u2013"; }
  function cols(names) {
    return el("thead", {}, el.apply(null, ["tr", {}].concat(names.map(function (n) {
      var numeric = n.charAt(0) === "#";
      return el("th", numeric ? { scope: "col", class: "num" } : { scope: "col" }, numeric ? n.slice(1) : n);
    }))));
  }
  function table(attrs, caption, head, rows, span) {
    var body = el("tbody", {});
    if (!rows.length && span) body.append(el("tr", {}, el("td", { colspan: span }, "none")));
    rows.forEach(function (r) { body.append(r); });
    return el("table", attrs, el("caption", {}, caption), head, body);
  }
  function kv(id, caption, pairs) {
    return table({ class: "kv", id: id }, caption, null, pairs.map(function (p) {
      var td = p[2] ? el("td", p[2], p[1]) : el("td", {}, p[1]);
      return el("tr", {}, el("th", { scope: "row" }, p[0]), td);
    }));
  }
  function section(id, title) {
    var s = el("section", { "aria-labelledby": id }, el("h2", { id: id }, title));
    for (var i = 2; i < arguments.length; i++) if (arguments[i]) s.append(arguments[i]);
    return s;
  }
  function sparkline(a, d) {
    var W = 120, H = 28;
    var peak = Math.max.apply(null, [1].concat(a, d));
    function pts(v) {
      var n = Math.max(v.length, 2) - 1;
      return v.map(function (y, i) {
        return (i * W / n).toFixed(1) + "," + (H - 1 - (y / peak) * (H - 2)).toFixed(1);
      }).join(" ");
    }
    var svg = document.createElementNS(SVG, "svg");
    svg.setAttribute("class", "spark");
    svg.setAttribute("viewBox", "0 0 120 28");
    svg.setAttribute("width", "120");
    svg.setAttribute("height", "28");
    svg.setAttribute("role", "img");
    svg.setAttribute("aria-label", "allowed (solid blue) and denied (dashed red) per second over the last " + a.length + " s; peak " + peak + "/s");
    [["a", a], ["d", d]].forEach(function (p) {
      var l = document.createElementNS(SVG, "polyline");
      l.setAttribute("class", p[0]);
      l.setAttribute("points", pts(p[1]));
      svg.append(l);
    });
    return svg;
  }
  function field(name, v) { return el("td", { class: "num", "data-field": name }, v); }

  function limits(s) {
    var rows = s.limits.map(function (l) {
      var lat = l.latency && l.latency.samples > 0 ? l.latency : null;
      return el("tr", { "data-limit": l.name },
        el("th", { scope: "row" }, l.name + (l.shadow ? " (shadow)" : "")),
        el("td", {}, l.scope),
        el("td", {}, l.algorithm + " " + l.quotas.join(", ")),
        field("allowed-rate", last(l.allowed_per_s)),
        field("denied-rate", last(l.denied_per_s)),
        el("td", {}, sparkline(l.allowed_per_s, l.denied_per_s)),
        field("p50", lat ? us(lat.p50_us) : "\u2013"),
        field("p99", lat ? us(lat.p99_us) : "\u2013"),
        field("allowed-total", l.allowed_total),
        field("denied-total", l.denied_total));
    });
    return section("h-limits", "Limits", table({ id: "limits" },
      "Decisions per limit: the last second, the last minute, latency over about the last minute",
      cols(["Limit", "Scope", "Quota", "#Allowed/s", "#Denied/s", "Last minute", "#p50", "#p99", "#Allowed total", "#Denied total"]),
      rows));
  }
  function ranking(id, title, r) {
    return table({ class: "keys", id: id }, title + ": total " + r.total + ", each count at most " + r.error_bound + " over",
      cols(["Key", "#Count", "#Error"]),
      r.keys.map(function (k) {
        return el("tr", {}, el("th", { scope: "row" }, el("code", {}, k.key)), num(k.count), num(k.error));
      }), 3);
  }
  function topKeys(s) {
    var with_ = s.limits.filter(function (l) { return l.top_keys; });
    if (!with_.length) return null;
    var sec = section("h-top", "Top keys", el("p", { class: "note" },
      "From a fixed-size sketch per limit (space-saving); a key\u2019s true weight lies between count \u2212 error and count."));
    with_.forEach(function (l, i) {
      var n = l.top_keys.sample_1_in;
      sec.append(el("h3", {}, l.name));
      if (n > 1) sec.append(el("p", { class: "note sampled" }, "Sampled: 1 decision in " + n +
        " recorded, weighted by " + n + "; counts and totals are estimates."));
      sec.append(el("div", { class: "pair" },
        ranking("top-demand-" + i, "By demand", l.top_keys.by_demand),
        ranking("top-denials-" + i, "By denials", l.top_keys.by_denials)));
    });
    return sec;
  }
  function gossip(s) {
    var g = s.gossip;
    if (!g) return null;
    var sec = section("h-gossip", "Gossip", table({ id: "members" },
      "Members: " + g.live_nodes + " live (this one included)" + (g.nodes ? " of " + g.nodes : "") + ", algorithm " + g.algorithm,
      cols(["Node", "Address", "State"]),
      g.members.map(function (m) {
        return el("tr", {}, el("th", { scope: "row" }, m.id + (m.self ? " (this node)" : "")),
          el("td", {}, m.addr), el("td", { class: "state-" + m.state }, m.state));
      })));
    s.limits.forEach(function (l) {
      if (!l.gossip_keys) return;
      sec.append(table({ class: "gossip-keys" }, "Hot keys of " + l.name + ": this node\u2019s view",
        cols(["Key", "#Estimate/s", "#Published", "#Others/s", "#Share", "#Local limit", "#Effective limit", "#Live nodes"]),
        l.gossip_keys.map(function (k) {
          return el("tr", {}, el("th", { scope: "row" }, el("code", {}, k.key)),
            num(f1(k.estimate)), num(f1(k.published)), num(f1(k.remote)),
            num((k.share * 100).toFixed(1) + " %"), num(f1(k.local_limit)),
            num(k.effective_limit), num(k.live_nodes));
        }), 8));
    });
    return sec;
  }
  function orbit(s) {
    var o = s.orbit;
    if (!o) return null;
    var sec = section("h-orbit", "Orbit", table({ id: "ring" }, "Ring order (epoch " + o.epoch_ms + " ms)",
      cols(["Position", "Node", "State"]),
      o.ring.map(function (id, i) {
        var st = id === o.node_id ? "this node" : (o.down.indexOf(id) >= 0 ? "down" : "up");
        return el("tr", {}, el("th", { scope: "row" }, i + 1), el("td", {}, id), el("td", {}, st));
      })));
    s.limits.forEach(function (l) {
      if (!l.orbit_keys) return;
      sec.append(table({ class: "orbit-keys" }, "Window usage of " + l.name + " at this node",
        cols(["Key", "#Window", "#Admitted here", "#Capacity here", "#Cap"]),
        l.orbit_keys.map(function (k) {
          return el("tr", {}, el("th", { scope: "row" }, el("code", {}, k.key)),
            num(k.window), num(k.admitted_here), num(k.capacity_here), num(k.cap));
        }), 5));
    });
    return sec;
  }
  function redis(s) {
    var r = s.redis;
    if (!r) return null;
    return section("h-redis", "Redis", kv("redis", "Connection and circuit breaker", [
      ["Engine", r.engine], ["Breaker", r.breaker, { class: "state-" + r.breaker }],
      ["Errors", r.errors, { class: "num" }], ["Timeouts", r.timeouts, { class: "num" }],
      ["Fail-overs", r.fail_overs, { class: "num" }],
      ["Calls in flight", r.in_flight + " of " + r.max_in_flight, { class: "num" }]]));
  }
  function render(s) {
    var node = section("h-node", "Node", kv("node", "This process", [
      ["Version", s.node.version],
      ["Uptime", s.node.uptime_s + " s", { "data-field": "uptime" }],
      ["State", s.node.draining ? "draining" : "serving"]]));
    return [node, limits(s), topKeys(s), gossip(s), orbit(s), redis(s)].filter(Boolean);
  }

  function refresh() {
    fetch("/v1/status", { cache: "no-store", headers: { accept: "application/json" } })
      .then(function (r) {
        if (!r.ok) throw new Error("HTTP " + r.status);
        return r.json();
      })
      .then(function (s) {
        main.replaceChildren.apply(main, render(s));
        note.dataset.source = "script";
        note.dataset.now = s.node.now_ms;
        note.textContent = "Live: updated every second from /v1/status, last at " + new Date(s.node.now_ms).toISOString() + ".";
      })
      .catch(function (e) {
        note.dataset.source = "error";
        note.textContent = "Refresh failed (" + e.message + "); the numbers below may be stale.";
      })
      .then(function () { setTimeout(refresh, 1000); });
  }
  refresh();
})();
