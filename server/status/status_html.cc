// The status page: one HTML document with its CSS and JS inline, so the
// binary serves it without files and the browser loads nothing else. It
// fetches /status.json every 1.5 s and redraws with DOM calls (textContent
// only: names and probe reasons are never parsed as HTML). Rows carry
// data-* attributes (group, address, health) for scripts and tests.
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
function tile(label, value, cls) {
  return el("div", {class: "tile" + (cls ? " " + cls : "")},
            el("b", {}, String(value)), label);
}

function backendRow(g, b) {
  const probe = b.probe;
  const health = el("td", {}, badge(b.health, b.health));
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
  return el("tr", {"data-group": g.name, "data-address": b.address,
                   "data-health": b.health, "data-ready": String(b.ready)},
    el("td", {}, b.address, b.zone ? el("span", {class: "reason"},
                                        " " + b.zone) : null),
    el("td", {class: "num"}, b.effective_weight +
       (b.effective_weight !== b.weight ? " / " + b.weight : "")),
    health,
    el("td", {class: "num"}, probe ? num(probe.latency_ms, 2) + " ms" : ""),
    state,
    el("td", {class: "num"}, l.in_flight === undefined ? "" : l.in_flight),
    el("td", {class: "num"}, num(l.latency_ewma_ms, 2)),
    el("td", {class: "num"}, num(l.requests_per_second)),
    el("td", {class: "num"}, num(l.errors_per_second)),
    el("td", {class: "num"}, num(l.picks_per_second)));
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
      "picks/s"].map((h, i) => el("th", {class: i === 1 || i === 3 ||
      i > 4 ? "num" : ""}, h)))),
    body);
  return el("section", {class: "group", "data-group": g.name,
                        "data-ready": g.ready, "data-total": g.total},
            head, table);
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
}

async function refresh() {
  const conn = document.getElementById("conn");
  const error = document.getElementById("error");
  try {
    const headers = token ? {"Authorization": "Bearer " + token} : {};
    const r = await fetch("status.json", {headers, cache: "no-store"});
    if (!r.ok) throw new Error("status.json: HTTP " + r.status + " " +
                               (await r.text()).trim());
    render(await r.json());
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
refresh();
</script>
</body>
</html>
)HTML";
  return kHtml;
}

}  // namespace aside::server
