// The status page: one HTML document with its CSS and JS inline, so the
// binary serves it without files and the browser loads nothing else. It
// fetches /status.json every 1.5 s, and with it status/history.json and
// status/events.json, and redraws with DOM calls (textContent only: names,
// probe reasons and event causes are never parsed as HTML). The plots are
// inline SVG drawn here: per group picks/s, errors/s and latency over the
// kept window, and per backend its share of picks against the share its
// effective weight asks for; below them the event timeline, filterable by
// group. A value never measured is drawn as a gap and shown as a dash
// with a tooltip saying why. Rows, plots and lines carry data-* attributes
// (group, address, health, series, the last value drawn) for scripts and
// tests.
#include "server/status/status_page.h"

namespace aside::server {

absl::string_view StatusPage::Html() {
  static constexpr absl::string_view kHtml = R"HTML(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Aside status</title>
<style>
:root { --ok: #1a7f37; --bad: #cf222e; --warn: #9a6700; --dim: #656d76;
        --line: #d0d7de; --bg: #f6f8fa; }
* { box-sizing: border-box; }
body { font: 14px/1.4 system-ui, sans-serif; margin: 0; color: #1f2328; }
header { background: #24292f; color: #fff; padding: 10px 20px;
         display: flex; gap: 24px; align-items: baseline; flex-wrap: wrap; }
header h1 { font-size: 18px; margin: 0; }
header .meta { color: #c9d1d9; font-size: 13px; }
#conn { margin-left: auto; font-size: 13px; }
#conn.live::before { content: "\25CF "; color: #3fb950; }
#conn.stale::before { content: "\25CF "; color: #f85149; }
main { padding: 12px 20px; }
.totals { display: flex; gap: 12px; flex-wrap: wrap; margin-bottom: 12px; }
.tile { background: var(--bg); border: 1px solid var(--line);
        border-radius: 6px; padding: 6px 12px; }
.tile b { font-size: 18px; display: block; }
.group { border: 1px solid var(--line); border-radius: 6px;
         margin-bottom: 14px; }
.group h2 { font-size: 15px; margin: 0; padding: 8px 12px;
            background: var(--bg); border-bottom: 1px solid var(--line);
            display: flex; gap: 16px; flex-wrap: wrap; align-items: baseline; }
.group h2 .facts { font-weight: normal; color: var(--dim); font-size: 13px; }
table { border-collapse: collapse; width: 100%; }
th, td { text-align: left; padding: 4px 10px; border-bottom: 1px solid #eaeef2;
         white-space: nowrap; }
th { font-weight: 600; color: var(--dim); font-size: 12px; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
.badge { border-radius: 10px; padding: 0 8px; font-size: 12px;
         border: 1px solid currentColor; }
.healthy { color: var(--ok); }
.unhealthy, .panic { color: var(--bad); }
.unknown, .drained, .ejected { color: var(--warn); }
.reason { color: var(--dim); font-size: 12px; white-space: normal; }
.bar { display: inline-block; width: 80px; height: 8px; background: #eaeef2;
       border-radius: 4px; overflow: hidden; vertical-align: middle; }
.bar span { display: block; height: 100%; background: var(--ok); }
#error { color: var(--bad); margin: 8px 0; }
h3 { font-size: 14px; margin: 18px 0 6px; }
.nm { color: var(--dim); cursor: help; }
.plots { display: flex; gap: 10px; flex-wrap: wrap; padding: 8px 12px;
         border-bottom: 1px solid #eaeef2; }
.plot { border: 1px solid #eaeef2; border-radius: 4px; background: #fff; }
.plot text { font-size: 10px; fill: var(--dim); }
.plot .title { font-size: 11px; fill: #1f2328; font-weight: 600; }
.plot .grid { stroke: #eaeef2; }
.plot path { fill: none; stroke-width: 1.6; }
.legend { font-size: 11px; color: var(--dim); padding: 2px 6px 6px; }
.legend span { margin-right: 10px; white-space: nowrap; }
.legend i { display: inline-block; width: 14px; height: 0; vertical-align: middle;
            border-top: 2px solid; margin-right: 3px; }
.legend i.dash { border-top-style: dashed; }
#events-filter { font: inherit; margin-left: 8px; }
#events td.time { font-variant-numeric: tabular-nums; }
.ev-health, .ev-ejected, .ev-store_down, .ev-member_left,
.ev-config_reload_failed { color: var(--bad); }
.ev-drained, .ev-backend_removed, .ev-group_removed { color: var(--warn); }
.ev-undrained, .ev-returned, .ev-store_up, .ev-member_joined,
.ev-backend_added { color: var(--ok); }
</style>
</head>
<body>
<header>
  <h1>Aside</h1>
  <span class="meta" id="server"></span>
  <span class="meta" id="store"></span>
  <span id="conn" class="stale">connecting</span>
</header>
<main>
  <div id="error"></div>
  <div class="totals" id="totals"></div>
  <div id="groups"></div>
  <h3>Events <select id="events-filter"><option value="">all groups</option>
    </select> <span class="reason" id="events-meta"></span></h3>
  <table id="events"><thead><tr><th>time</th><th>kind</th><th>group</th>
    <th>backend</th><th>cause</th></tr></thead><tbody></tbody></table>
  <h3>Health targets</h3>
  <table id="targets"><thead><tr><th>address</th><th>check</th>
    <th>state</th><th>last probe</th><th class="num">latency</th>
    <th class="num">probes</th><th>groups</th></tr></thead>
    <tbody></tbody></table>
</main>
<script>
"use strict";
const REFRESH_MS = 1500;
const token = new URLSearchParams(location.hash.slice(1)).get("token");
let updates = 0;
let history = null;  // the last status/history.json
let events = null;   // the last status/events.json
let historyAt = 0;   // when history was fetched (ms)
// Past this many groups the page fetches backend series only for the group
// chosen in the timeline's filter (one group's history is ~80 KB; every
// group's backends at 1000 groups would be tens of MB a refresh).
const BACKEND_PLOTS_MAX_GROUPS = 20;
const NS = "http://www.w3.org/2000/svg";
const COLORS = ["#0969da", "#cf222e", "#1a7f37", "#8250df", "#bc4c00",
                "#1b7c83", "#bf3989", "#57606a"];
const NOT_MEASURED = "\u2014";

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v; else e.setAttribute(k, v);
  }
  for (const c of children) {
    if (c === null || c === undefined) continue;
    e.append(typeof c === "string" || typeof c === "number" ? String(c) : c);
  }
  return e;
}
function num(v, digits) {
  if (v === null || v === undefined) return "";
  return Number(v).toFixed(digits === undefined ? 1 : digits);
}
function badge(text, cls) { return el("span", {class: "badge " + cls}, text); }
// A value that was never measured: a dash, and why on hover.
function nm(why) { return el("span", {class: "nm", title: why}, NOT_MEASURED); }
function svg(tag, attrs) {
  const e = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  return e;
}
function fmt(v) {
  if (v === null || v === undefined) return NOT_MEASURED;
  const a = Math.abs(v);
  return a >= 100 ? v.toFixed(0) : a >= 10 ? v.toFixed(1) : v.toFixed(2);
}
// A line plot of `lines` ({name, values, color, dash, data}) over `times`
// (unix ms): nulls are gaps, `max` fixes the y range (else the data's).
function plot(title, times, lines, opts) {
  const W = 300, H = 110, L = 34, R = 6, T = 16, B = 16;
  const root = svg("svg", {class: "plot", width: W, height: H,
                           viewBox: "0 0 " + W + " " + H,
                           "data-plot": opts.name});
  let max = opts.max || 0;
  if (!opts.max) {
    for (const l of lines) for (const v of l.values) {
      if (v !== null && v > max) max = v;
    }
    if (max <= 0) max = 1;
    max *= 1.1;
  }
  const t0 = times.length ? times[0] : 0;
  const t1 = times.length ? times[times.length - 1] : 1;
  const span = Math.max(t1 - t0, 1);
  const x = t => L + (W - L - R) * (t - t0) / span;
  const y = v => T + (H - T - B) * (1 - Math.min(v, max) / max);
  root.append(svg("line", {class: "grid", x1: L, x2: W - R, y1: y(0), y2: y(0)}),
              svg("line", {class: "grid", x1: L, x2: W - R, y1: y(max / 2),
                           y2: y(max / 2)}));
  const t = svg("text", {class: "title", x: L, y: 11});
  t.textContent = title;
  root.append(t);
  const label = (text, xx, yy, anchor) => {
    const e = svg("text", {x: xx, y: yy, "text-anchor": anchor || "start"});
    e.textContent = text;
    root.append(e);
  };
  label(opts.max === 1 ? "100%" : fmt(max), L - 3, T + 4, "end");
  label("0", L - 3, y(0) + 3, "end");
  if (times.length > 1) {
    label("-" + Math.round(span / 60000 * 10) / 10 + " min", L, H - 4);
    label("now", W - R, H - 4, "end");
  }
  for (const l of lines) {
    let d = "", pen = false, last = null, points = 0;
    l.values.forEach((v, i) => {
      if (v === null || v === undefined) { pen = false; return; }
      d += (pen ? "L" : "M") + x(times[i]).toFixed(1) + " " + y(v).toFixed(1);
      pen = true;
      points++;
    });
    for (let i = l.values.length - 1; i >= 0; i--) {
      if (l.values[i] !== null) { last = l.values[i]; break; }
    }
    const p = svg("path", Object.assign({d: d || "M0 0", stroke: l.color,
        "stroke-dasharray": l.dash ? "4 3" : "none", "data-series": l.series,
        "data-points": String(points),
        "data-last": last === null ? "" : String(last)}, l.data || {}));
    const tip = svg("title", {});
    tip.textContent = l.name + ": " + (last === null ? "not measured" :
        (opts.max === 1 ? (100 * last).toFixed(1) + "%" : fmt(last)));
    p.append(tip);
    root.append(p);
  }
  if (!lines.some(l => l.values.some(v => v !== null))) {
    label(opts.empty || "not measured yet", W / 2, H / 2, "middle");
  }
  return root;
}
function legend(items) {
  return el("div", {class: "legend"}, ...items.map(i =>
    el("span", {}, el("i", {class: i.dash ? "dash" : "",
                            style: "border-color:" + i.color}), i.name)));
}
function groupPlots(g, h) {
  if (!h) {
    return el("div", {class: "plots reason"},
              "no history for this group yet (or past the tracked cap)");
  }
  const times = history.times_unix_ms;
  const box = el("div", {class: "plots", "data-group": g.name});
  const wrap = (svgEl, leg) => el("div", {}, svgEl, leg);
  box.append(
    wrap(plot("picks/s", times, [
      {name: "picks/s", series: "picks", values: h.picks_per_second,
       color: COLORS[0]},
      {name: "failed picks/s", series: "pick_failures",
       values: h.pick_failures_per_second, color: COLORS[1]}],
      {name: "picks", empty: "no picks yet"}),
      legend([{name: "picks/s", color: COLORS[0]},
              {name: "failed picks/s", color: COLORS[1]}])),
    wrap(plot("reported requests and errors /s", times, [
      {name: "requests/s", series: "requests", values: h.requests_per_second,
       color: COLORS[2]},
      {name: "errors/s", series: "errors", values: h.errors_per_second,
       color: COLORS[1]}], {name: "errors", empty: "no load reports yet"}),
      legend([{name: "requests/s", color: COLORS[2]},
              {name: "errors/s", color: COLORS[1]}])),
    wrap(plot("mean latency ms (reported)", times, [
      {name: "latency ms", series: "latency", values: h.latency_ms,
       color: COLORS[3]}], {name: "latency", empty: "no load reports yet"}),
      legend([{name: "latency ms", color: COLORS[3]}])));
  const backends = h.backends || [];
  if (!h.backends) {
    box.append(el("div", {class: "reason"},
        "backend shares: choose this group in the timeline's filter below"));
  }
  if (backends.length) {
    const lines = [], items = [];
    backends.forEach((b, i) => {
      const color = COLORS[i % COLORS.length];
      const data = {"data-address": b.address};
      lines.push({name: b.address + " picks", series: "pick_share",
                  values: b.pick_share, color, data});
      lines.push({name: b.address + " weight", series: "weight_share",
                  values: b.weight_share, color, dash: true, data});
      items.push({name: b.address, color});
    });
    items.push({name: "solid: share of picks, dashed: share of weight",
                color: "transparent"});
    box.append(wrap(plot("share of picks vs weight", times, lines,
                         {name: "share", max: 1, empty: "no picks yet"}),
                    legend(items)));
  }
  return box;
}
function renderEvents() {
  const select = document.getElementById("events-filter");
  const chosen = select.value;
  const names = new Set();
  const body = document.querySelector("#events tbody");
  if (!events) return;
  for (const e of events.events) if (e.group) names.add(e.group);
  if (history) for (const g of history.groups) names.add(g.name);
  const have = [...select.options].map(o => o.value);
  for (const n of [...names].sort()) {
    if (!have.includes(n)) select.append(el("option", {value: n}, n));
  }
  const shown = events.events.filter(e => !chosen || !e.group ||
                                          e.group === chosen);
  document.getElementById("events-meta").textContent =
    shown.length + " shown \u00b7 last " + events.capacity + " kept" +
    (events.dropped ? " (" + events.dropped + " older dropped)" : "");
  body.replaceChildren(...shown.slice(-200).reverse().map(e =>
    el("tr", {"data-kind": e.kind, "data-group": e.group,
              "data-backend": e.backend, "data-time": String(e.time_unix_ms)},
      el("td", {class: "time", title: e.time},
         new Date(e.time_unix_ms).toLocaleTimeString()),
      el("td", {class: "ev-" + e.kind}, e.kind.replace(/_/g, " ")),
      el("td", {}, e.group), el("td", {}, e.backend),
      el("td", {class: "reason"}, e.cause))));
}
function tile(label, value, cls) {
  return el("div", {class: "tile" + (cls ? " " + cls : "")},
            el("b", {}, String(value)), label);
}

function backendRow(g, b) {
  const probe = b.probe;
  const probed = g.health_check !== "none";
  const health = el("td", {},
    !probed ? nm("not probed: the group has no health check") :
    b.health === "unknown" && !probe ? nm("not probed yet") :
    badge(b.health, b.health));
  if (probe) {
    health.append(" ", el("span", {class: "reason"},
        (probe.success ? "ok" : "failed") +
        (probe.reason ? ": " + probe.reason : "") +
        " (" + num(probe.age_seconds, 0) + " s ago)"));
  }
  const state = el("td", {});
  if (b.drained) state.append(badge("drained", "drained"), " ");
  if (b.outlier) state.append(badge("ejected \u00d7" + b.outlier.count,
                                    "ejected"), " ");
  if (!b.drained && !b.outlier) state.append(b.ready ? "ready" : "not ready");
  const l = b.load || {};
  const reported = l.reporters > 0;
  const noReports = "no load reports for this backend yet";
  const loadCell = v => el("td", {class: "num"},
                           reported ? num(v) : nm(noReports));
  return el("tr", {"data-group": g.name, "data-address": b.address,
                   "data-health": probed ? b.health : "not_probed",
                   "data-ready": String(b.ready)},
    el("td", {}, b.address, b.zone ? el("span", {class: "reason"},
                                        " " + b.zone) : null),
    el("td", {class: "num"}, b.effective_weight +
       (b.effective_weight !== b.weight ? " / " + b.weight : "")),
    health,
    el("td", {class: "num"}, probe ? num(probe.latency_ms, 2) + " ms" :
       nm(probed ? "not probed yet" : "no health check")),
    state,
    el("td", {class: "num"}, reported ? String(l.in_flight) : nm(noReports)),
    el("td", {class: "num"}, l.latency_ewma_measured ?
       num(l.latency_ewma_ms, 2) :
       nm("no completion reported yet (the policy assumes " +
          num(l.latency_ewma_ms, 2) + " ms)")),
    loadCell(l.requests_per_second),
    loadCell(l.errors_per_second),
    el("td", {class: "num"}, num(l.picks_per_second)),
    utilCell(g, b));
}

// The backend's utilisation: its own ORCA report when the group asks for
// them (what its weight follows), else what load reporters said.
function utilCell(g, b) {
  const o = b.orca;
  if (g.orca) {
    if (!o || o.utilization === undefined) {
      return el("td", {class: "num"}, nm(
          o && o.state === "unimplemented" ? "the backend serves no ORCA" :
          "no ORCA report yet" + (o && o.last_error ? ": " + o.last_error : "")));
    }
    return el("td", {class: "num", title: "ORCA: qps " + num(o.qps) +
                     ", eps " + num(o.eps) + ", " + num(o.age_seconds, 1) +
                     " s ago" + (o.state === "peer" ? " (from the replica " +
                     "holding its stream)" : "") +
                     (g.orca_weights ? "; the weight follows it" : "")},
              num(o.utilization, 2));
  }
  const l = b.load || {};
  return el("td", {class: "num"}, l.utilization !== undefined ?
            num(l.utilization, 2) : nm("no utilisation reported"));
}

function groupCard(g) {
  const pct = g.total ? Math.round(100 * g.ready / g.total) : 0;
  const head = el("h2", {},
    el("span", {}, g.name),
    el("span", {class: "facts"}, g.policy + " \u00b7 gen " + g.generation +
       " \u00b7 " + g.source),
    el("span", {class: "facts"},
       el("span", {class: "bar"}, el("span", {style: "width:" + pct + "%"})),
       " " + g.ready + "/" + g.total + " ready"),
    g.panic ? badge("panic", "panic") : null,
    el("span", {class: "facts"}, num(g.picks_per_second) + " picks/s \u00b7 " +
       g.watch_subscribers + " watching \u00b7 " + g.grpclb_clients +
       " grpclb"),
    g.dns_error ? el("span", {class: "reason"}, "dns: " + g.dns_error) : null);
  const body = el("tbody", {});
  for (const b of g.backends) body.append(backendRow(g, b));
  const table = el("table", {},
    el("thead", {}, el("tr", {}, ...["backend", "weight", "health",
      "probe", "state", "in flight", "ewma ms", "req/s", "err/s",
      "picks/s", "util"].map((h, i) => el("th", {class: i === 1 || i === 3 ||
      i > 4 ? "num" : ""}, h)))),
    body);
  const h = history ? history.groups.find(x => x.name === g.name) : null;
  return el("section", {class: "group", "data-group": g.name,
                        "data-ready": g.ready, "data-total": g.total},
            head, groupPlots(g, h), table);
}

function render(s) {
  updates++;
  document.body.setAttribute("data-updates", String(updates));
  document.getElementById("server").textContent =
    "v" + s.version + " \u00b7 server " + s.server_id + " \u00b7 up " +
    num(s.uptime_seconds, 0) + " s";
  let store = "store: " + s.store.type;
  if (s.store.location) store += " (" + s.store.location + ")";
  for (const [k, v] of Object.entries(s.store.details || {})) {
    store += " \u00b7 " + k + ": " + v;
  }
  document.getElementById("store").textContent = store;
  const t = s.totals;
  document.getElementById("totals").replaceChildren(
    tile("groups", t.groups),
    tile("backends ready", t.ready + " / " + t.backends,
         t.ready < t.backends ? "unhealthy" : ""),
    tile("groups in panic", t.panicking_groups,
         t.panicking_groups ? "panic" : ""),
    tile("health targets", t.targets),
    tile("watch subscribers", t.watch_subscribers),
    tile("grpclb clients", t.grpclb_clients));
  document.getElementById("groups").replaceChildren(...s.groups.map(groupCard));
  document.querySelector("#targets tbody").replaceChildren(
    ...s.targets.map(x => el("tr", {"data-address": x.address,
                                    "data-state": x.state},
      el("td", {}, x.address), el("td", {}, x.kind),
      el("td", {}, badge(x.state, x.state)),
      el("td", {class: "reason"}, x.last_success === undefined ? "" :
         (x.last_success ? "ok" : "failed") +
         (x.last_reason ? ": " + x.last_reason : "")),
      el("td", {class: "num"}, x.last_latency_ms === undefined ? "" :
         num(x.last_latency_ms, 2) + " ms"),
      el("td", {class: "num"}, x.probes),
      el("td", {}, x.groups.join(", ")))));
  renderEvents();
}

async function refresh() {
  const conn = document.getElementById("conn");
  const error = document.getElementById("error");
  try {
    const headers = token ? {"Authorization": "Bearer " + token} : {};
    const get = async (path, optional) => {
      const r = await fetch(path, {headers, cache: "no-store"});
      if (r.status === 404 && optional) return null;
      if (!r.ok) throw new Error(path + ": HTTP " + r.status + " " +
                                 (await r.text()).trim());
      return r.json();
    };
    // The history changes once a sample: fetched at most once an interval.
    const due = !history ||
        Date.now() - historyAt >= 1000 * history.interval_seconds;
    const many = history && history.groups.length > BACKEND_PLOTS_MAX_GROUPS;
    const chosen = document.getElementById("events-filter").value;
    const [s, h, one, e] = await Promise.all([get("status.json"),
        due ? get("status/history.json?backends=" + (many ? 0 : 1), true)
            : Promise.resolve(undefined),
        due && many && chosen ?
            get("status/history.json?group=" + encodeURIComponent(chosen), true)
            : Promise.resolve(undefined),
        get("status/events.json", true)]);
    if (h !== undefined) {
      history = h;
      historyAt = Date.now();
      if (h && one && one.groups.length) {
        const i = h.groups.findIndex(g => g.name === one.groups[0].name);
        if (i >= 0) h.groups[i] = one.groups[0];
      }
    }
    events = e;
    render(s);
    conn.className = "live";
    conn.textContent = "live \u00b7 " + new Date().toLocaleTimeString();
    error.textContent = "";
  } catch (e) {
    conn.className = "stale";
    conn.textContent = "not updating";
    error.textContent = String(e.message || e);
  } finally {
    setTimeout(refresh, REFRESH_MS);
  }
}
document.getElementById("events-filter").addEventListener("change",
                                                          renderEvents);
refresh();
</script>
</body>
</html>
)HTML";
  return kHtml;
}

}  // namespace aside::server
