// The sluice console: plain JavaScript over the admin API (GET /v1/stats,
// GET /v1/policy, POST /v1/lookup, POST /v1/simulate), charts by uPlot.
// Everything it loads comes from the binary that serves it.
"use strict";

const $ = (sel) => document.querySelector(sel);

// el builds an element; text goes in as text, never as HTML.
function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") e.className = v;
    else if (k.startsWith("data-")) e.setAttribute(k, v);
    else e[k] = v;
  }
  for (const k of kids) e.append(k instanceof Node ? k : document.createTextNode(String(k)));
  return e;
}

async function api(path, body) {
  const opts = body === undefined ? {} : {
    method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body),
  };
  const r = await fetch(path, opts);
  let j = null;
  try { j = await r.json(); } catch (_) { /* not JSON */ }
  if (!r.ok) throw new Error((j && j.error) || `${path}: ${r.status} ${r.statusText}`);
  if (j === null) throw new Error(`${path}: the answer is not JSON`);
  return j;
}

const colors = { within: "#16a34a", over: "#dc2626", shadow: "#d97706", arrivals: "#64748b", mean: "#1d4ed8", p99: "#7c3aed" };

function fmtNum(n) { return n === null || n === undefined ? "–" : Number(n).toLocaleString("en-US"); }

function fmtMs(ms) {
  if (ms === null || ms === undefined) return "–";
  if (ms === 0) return "0";
  if (ms < 1) return `${(ms * 1000).toFixed(ms < 0.1 ? 1 : 0)}µs`;
  if (ms < 1000) return `${+ms.toFixed(2)}ms`;
  if (ms < 120000) return `${+(ms / 1000).toFixed(3)}s`;
  if (ms < 7200000) return `${+(ms / 60000).toFixed(1)}m`;
  return `${+(ms / 3600000).toFixed(1)}h`;
}

function chartWidth(target) { return Math.max(300, (target.clientWidth || 900) - 14); }

// Pages.

const pages = ["live", "policy", "lookup", "playground"];
const entered = {};

function showPage() {
  const name = pages.includes(location.hash.slice(1)) ? location.hash.slice(1) : "live";
  for (const p of pages) {
    $(`#page-${p}`).classList.toggle("active", p === name);
    $(`nav a[data-page=${p}]`).classList.toggle("active", p === name);
  }
  if (name === "live") startLive(); else stopLive();
  if (name === "policy") loadPolicy();
  if (name === "lookup") enterLookup();
  if (name === "playground" && !entered.playground) { entered.playground = true; runPlayground(); }
}

// Live.

let liveTimer = null;
let liveCharts = null;
let selected = null; // "domain\u0000rule", or null for every rule
let lastStats = null;

function startLive() {
  if (liveTimer) return;
  refreshLive();
  liveTimer = setInterval(refreshLive, 1000);
}

function stopLive() {
  clearInterval(liveTimer);
  liveTimer = null;
}

async function refreshLive() {
  try {
    const s = await api("/v1/stats");
    lastStats = s;
    renderLive(s);
    $("#live-note").textContent = s.note + ` Per second, the last ${s.window_seconds / 60} minutes at most.`;
    $("#live-note").classList.remove("error");
  } catch (e) {
    $("#live-note").textContent = `Could not read /v1/stats: ${e.message}`;
    $("#live-note").classList.add("error");
  }
}

const sum = (a) => a.reduce((x, y) => x + y, 0);

function renderLive(s) {
  const n = s.seconds.length;
  const rules = s.rules.filter((r) => selected === null || r.domain + "\u0000" + r.rule === selected);
  const add = (field) => {
    const out = new Array(n).fill(0);
    for (const r of rules) r[field].forEach((v, i) => { out[i] += v; });
    return out;
  };
  const within = add("within"), over = add("over"), shadow = add("shadow_over");
  const last = (a) => (n > 0 ? a[n - 1] : null);
  $("#card-within").textContent = fmtNum(last(within));
  $("#card-over").textContent = fmtNum(last(over));
  $("#card-shadow").textContent = fmtNum(last(shadow));
  let p99 = null;
  for (let i = n - 1; i >= 0 && i >= n - 10; i--) if (s.latency.p99_ms[i] !== null && s.latency.decisions[i] > 0) { p99 = s.latency.p99_ms[i]; break; }
  $("#card-p99").textContent = p99 === null ? "–" : "≤ " + fmtMs(p99);
  const st = s.store;
  $("#card-store").textContent = st.health;
  $("#card-store").className = "value " + (st.health === "ok" ? "ok" : "bad");
  let badge = `store: ${st.name}`;
  if (st.keys !== undefined && st.keys !== null) badge += ` · ${fmtNum(st.keys)} keys`;
  if (st.breaker) badge += ` · breaker ${st.breaker}`;
  badge += ` · ${fmtNum(st.errors_total)} errors`;
  $("#store-badge").textContent = badge;
  $("#live-which").textContent = selected === null ? "all rules" : selected.replace("\u0000", " / ");

  // The table: every rule seen, with its window and its total.
  const tbody = $("#live-rules tbody");
  tbody.replaceChildren(...s.rules.map((r) => {
    const key = r.domain + "\u0000" + r.rule;
    const tr = el("tr", { "data-domain": r.domain, "data-rule": r.rule, class: key === selected ? "selected" : "" },
      el("td", {}, r.domain), el("td", {}, r.rule),
      el("td", { class: "num win-within" }, fmtNum(sum(r.within))),
      el("td", { class: "num win-over" }, fmtNum(sum(r.over))),
      el("td", { class: "num win-shadow" }, fmtNum(sum(r.shadow_over))),
      el("td", { class: "num tot-within" }, fmtNum(r.total.within)),
      el("td", { class: "num tot-over" }, fmtNum(r.total.over)),
      el("td", { class: "num tot-shadow" }, fmtNum(r.total.shadow_over)));
    tr.addEventListener("click", () => {
      selected = selected === key ? null : key;
      renderLive(lastStats);
    });
    return tr;
  }));
  $("#live-empty").classList.toggle("hidden", s.rules.length > 0);

  const xs = s.seconds.length ? s.seconds : [s.now];
  const pad = (a) => (s.seconds.length ? a : [null]);
  const dec = [xs, pad(within), pad(over), pad(shadow)];
  const lat = [xs, pad(s.latency.mean_ms), pad(s.latency.p99_ms)];
  if (!liveCharts) {
    const t1 = $("#live-chart"), t2 = $("#latency-chart");
    liveCharts = [
      new uPlot({
        width: chartWidth(t1), height: 220, cursor: { sync: { key: "live" } },
        series: [{}, { label: "allowed", stroke: colors.within, width: 1.5 },
          { label: "denied", stroke: colors.over, width: 1.5 }, { label: "shadow over", stroke: colors.shadow, width: 1.5 }],
        axes: [{}, { label: "per second" }], scales: { y: { range: (u, min, max) => [0, Math.max(1, max)] } },
      }, dec, t1),
      new uPlot({
        width: chartWidth(t2), height: 180, cursor: { sync: { key: "live" } },
        series: [{}, { label: "mean ms", stroke: colors.mean, width: 1.5, value: (u, v) => fmtMs(v) },
          { label: "p99 ms (bucket bound)", stroke: colors.p99, width: 1.5, value: (u, v) => fmtMs(v) }],
        axes: [{}, { label: "milliseconds" }], scales: { y: { range: (u, min, max) => [0, Math.max(0.1, max || 0)] } },
      }, lat, t2),
    ];
  } else {
    liveCharts[0].setData(dec);
    liveCharts[1].setData(lat);
  }
}

// Policy.

function where(file, line) { return line ? `${file}:${line}` : file; }

function descriptorText(es) {
  return es.map((e) => (e.value ? `${e.key}=${e.value}` : `${e.key} (any value)`)).join(", ");
}

async function loadPolicy() {
  let p;
  try {
    p = await api("/v1/policy");
  } catch (e) {
    $("#policy-head").replaceChildren(el("div", { class: "error" }, `Could not read /v1/policy: ${e.message}`));
    return;
  }
  $("#policy-head").replaceChildren(
    el("p", {}, "Config: ", el("code", {}, p.source.join(", ")),
      ...(p.source[0].startsWith("xDS ") ? [" — version ", el("code", { id: "xds-version" }, p.xds_version || "(none pushed yet)")] : []),
      ` — loaded ${new Date(p.loaded).toLocaleString()}`,
      p.shadow ? " — every rule in shadow mode (--shadow)" : ""));
  const lr = p.last_reload;
  let reload;
  if (!lr) {
    reload = el("p", { class: "note", id: "reload-status" }, "No reload since the service started.");
  } else if (lr.ok) {
    reload = el("p", { class: "ok", id: "reload-status" }, `Last reload ${new Date(lr.at).toLocaleString()}: loaded.`);
  } else {
    reload = el("div", { class: "error", id: "reload-status" },
      `Last reload ${new Date(lr.at).toLocaleString()} failed; the last good config keeps serving:\n` +
      lr.errors.map((e) => (e.file ? `${where(e.file, e.line)}: ` : "") + (e.field ? `${e.field}: ` : "") + e.message).join("\n"));
  }
  $("#policy-reload").replaceChildren(reload);
  $("#policy-domains").replaceChildren(...p.domains.map((d) => el("div", { class: "domain", "data-domain": d.name },
    el("h2", {}, `domain ${d.name}`),
    d.forward_auth ? el("p", { class: "note" }, `forward auth: ${d.forward_auth}`) : "",
    el("table", { class: "grid policy" },
      el("thead", {}, el("tr", {}, ...["descriptor", "limit", "algorithm", "rate", "burst", "mode", "charge", "failure", "replaces", "where"].map((h) => el("th", {}, h)))),
      el("tbody", {}, ...d.limits.map((l) => el("tr", { "data-rule": l.name },
        el("td", { class: "mono" }, descriptorText(l.descriptor)),
        el("td", {}, l.name),
        el("td", {}, l.unlimited ? "unlimited" : l.algorithm),
        el("td", { class: "num" }, l.unlimited ? "" : `${fmtNum(l.rate)} / ${l.period}`),
        el("td", { class: "num" }, l.capacity ? fmtNum(l.capacity) : ""),
        el("td", {}, l.shadow ? "shadow" : "enforced"),
        el("td", {}, l.charge || ""),
        el("td", {}, l.failure || ""),
        el("td", {}, (l.replaces || []).join(", ")),
        el("td", { class: "mono where" }, where(l.file, l.line)))))))));
}

// Look up a key.

async function enterLookup() {
  try {
    const [s, p] = await Promise.all([api("/v1/stats"), api("/v1/policy")]);
    $("#lookup-off").classList.toggle("hidden", s.lookup);
    $("#lookup-form").classList.toggle("hidden", !s.lookup);
    const sel = $("#lookup-domain");
    const cur = sel.value;
    sel.replaceChildren(...p.domains.map((d) => el("option", { value: d.name }, d.name)));
    if (cur) sel.value = cur;
  } catch (e) {
    showError("#lookup-error", e.message);
  }
}

function showError(sel, msg) {
  const box = $(sel);
  box.textContent = msg;
  box.classList.toggle("hidden", !msg);
}

function parseDescriptors(text) {
  const out = [];
  for (const line of text.split("\n")) {
    if (!line.trim()) continue;
    const entries = line.split(",").map((part) => {
      const i = part.indexOf("=");
      return i < 0 ? { key: part.trim(), value: "" } : { key: part.slice(0, i).trim(), value: part.slice(i + 1).trim() };
    });
    out.push({ entries });
  }
  return out;
}

async function lookup(ev) {
  ev.preventDefault();
  showError("#lookup-error", "");
  const descs = parseDescriptors($("#lookup-descriptors").value);
  let r;
  try {
    r = await api("/v1/lookup", { domain: $("#lookup-domain").value, descriptors: descs });
  } catch (e) {
    showError("#lookup-error", e.message);
    $("#lookup-result").replaceChildren();
    return;
  }
  const parts = [];
  if (r.store_error) parts.push(el("div", { class: "error" }, `The store did not answer (${r.store_error}): the numbers below are the failure modes', not the key's.`));
  r.descriptors.forEach((d, i) => {
    parts.push(el("h2", {}, descriptorText(descs[i].entries)));
    if (!d.limits.length) { parts.push(el("p", { class: "empty" }, "No limit applies.")); return; }
    parts.push(el("table", { class: "grid" },
      el("thead", {}, el("tr", {}, ...["limit", "algorithm", "", "remaining", "reset in", "retry in", "where"].map((h) => el("th", {}, h)))),
      el("tbody", {}, ...d.limits.map((l) => el("tr", { "data-rule": l.rule },
        el("td", {}, l.rule + (l.shadow ? " (shadow)" : "")),
        el("td", {}, l.unlimited ? "unlimited" : l.algorithm),
        el("td", {}, l.limit || ""),
        el("td", { class: "num remaining" }, l.unlimited ? "∞" : l.replaced ? "replaced" : `${fmtNum(l.remaining)} of ${fmtNum(l.quota)}`),
        el("td", { class: "num" }, l.unlimited || l.replaced ? "" : fmtMs(l.reset_ms)),
        el("td", { class: "num" }, l.unlimited || l.replaced ? "" : l.retry_ms === 0 ? "now" : (l.retry_exact ? "" : "≤ ") + fmtMs(l.retry_ms)),
        el("td", { class: "mono" }, l.file ? where(l.file, l.line) : ""))))));
  });
  $("#lookup-result").replaceChildren(...parts);
}

// Playground.

// The algorithms come from the server's list (GET /v1/algorithms), so that
// a new one appears here without a change to this page.
async function setupPlayground() {
  $("#play-form").addEventListener("submit", (ev) => { ev.preventDefault(); runPlayground(); });
  let algorithms;
  try {
    algorithms = await api("/v1/algorithms");
  } catch (err) {
    $("#play-legend").textContent = "The algorithms could not be listed: " + err.message;
    return;
  }
  const defaults = ["token_bucket", "fixed_window", "sliding_log"];
  document.querySelectorAll("select.alg").forEach((sel, i) => {
    sel.replaceChildren(el("option", { value: "" }, "(none)"),
      ...algorithms.map((a) => el("option", { value: a.id, title: a.summary }, a.name)));
    sel.value = algorithms.some((a) => a.id === defaults[i]) ? defaults[i] : "";
  });
}

function playRequest() {
  const kind = document.querySelector("input[name=kind]:checked").value;
  const num = (sel) => Number($(sel).value);
  const pattern = { kind };
  if (kind === "scenario") pattern.scenario = $("#play-scenario").value;
  if (kind === "poisson") Object.assign(pattern, { rate: num("#play-prate"), duration: $("#play-duration").value, seed: Math.max(0, Math.trunc(num("#play-seed"))) });
  if (kind === "list") pattern.times = $("#play-times").value;
  return {
    algorithms: [...document.querySelectorAll("select.alg")].map((s) => s.value).filter((v) => v),
    limit: { rate: Math.trunc(num("#play-rate")), period: $("#play-period").value, burst: Math.trunc(num("#play-burst")) },
    pattern,
  };
}

let playCharts = [];
let playRuns = 0;

async function runPlayground() {
  showError("#play-error", "");
  const body = document.body;
  body.dataset.play = "running";
  let r;
  try {
    r = await api("/v1/simulate", playRequest());
  } catch (e) {
    showError("#play-error", e.message);
    clearPlayground();
    body.dataset.play = "error";
    return;
  }
  renderPlayground(r);
  body.dataset.play = "done";
  body.dataset.playRuns = String(++playRuns);
}

function clearPlayground() {
  for (const c of playCharts) c.destroy();
  playCharts = [];
  $("#play-charts").replaceChildren();
  $("#play-desc").textContent = "";
  $("#play-table").classList.add("hidden");
  $("#play-legend").textContent = "";
}

// boundaries draws the fixed windows' boundaries, every period from t=0.
function boundaries(periodSec) {
  return {
    hooks: {
      draw: [(u) => {
        const { min, max } = u.scales.x;
        const first = Math.ceil(min / periodSec), last = Math.floor(max / periodSec);
        if (last - first > 60) return;
        const ctx = u.ctx;
        ctx.save();
        ctx.strokeStyle = "#94a3b8";
        ctx.setLineDash([4, 4]);
        ctx.lineWidth = 1;
        for (let k = first; k <= last; k++) {
          const x = Math.round(u.valToPos(k * periodSec, "x", true));
          ctx.beginPath();
          ctx.moveTo(x, u.bbox.top);
          ctx.lineTo(x, u.bbox.top + u.bbox.height);
          ctx.stroke();
        }
        ctx.restore();
      }],
    },
  };
}

function renderPlayground(r) {
  clearPlayground();
  $("#play-desc").textContent = `Limit ${r.limit}, bucket capacity ${r.capacity}. ${r.description}`;
  const xs = r.start_ms.map((v) => v / 1000);
  const bars = uPlot.paths.bars({ size: [0.9, 30], align: 1 });
  const target = $("#play-charts");
  const peak = Math.max(1, ...r.counts);
  const count = r.results.length + 1;
  const make = (title, series, data, range) => {
    const box = el("div", { class: "chart small-chart" });
    target.append(box);
    const lastChart = playCharts.length === count - 1;
    playCharts.push(new uPlot({
      title, width: chartWidth(target), height: lastChart ? 150 : 115, cursor: { sync: { key: "play" } }, legend: { show: false },
      plugins: [boundaries(r.period_ms / 1000)],
      scales: { x: { time: false, range: (u, min, max) => [0, Math.max(max + r.bin_ms / 1000, r.period_ms / 1000)] }, y: { range } },
      axes: [lastChart ? { label: "t (s), from a fixed-window boundary" } : {}, { size: 50 }],
      series: [{ label: "t", value: (u, v) => (v === null ? "–" : `${+v.toFixed(6)}s`) }, ...series],
    }, data, box));
  };
  make(`arrivals: ${fmtNum(r.arrivals)} in bins of ${fmtMs(r.bin_ms)}`,
    [{ label: "arrivals", stroke: colors.arrivals, fill: colors.arrivals + "99", paths: bars, points: { show: false } }],
    [xs, r.counts], () => [0, peak]);
  for (const res of r.results) {
    make(`${res.name}: ${fmtNum(res.allowed)} allowed, ${fmtNum(res.denied)} denied`,
      [{ label: "allowed", stroke: colors.within, fill: colors.within + "bb", paths: bars, points: { show: false } },
        { label: "denied", stroke: colors.over, fill: colors.over + "bb", paths: bars, points: { show: false }, value: (u, v) => (v === null ? "–" : -v) }],
      [xs, res.bin_allowed, res.bin_denied.map((v) => -v)], () => [-peak, peak]);
  }
  $("#play-table tbody").replaceChildren(...r.results.map((res) => el("tr", { "data-alg": res.id },
    el("td", {}, res.name), el("td", { class: "num allowed" }, fmtNum(res.allowed)), el("td", { class: "num denied" }, fmtNum(res.denied)),
    el("td", { class: "retry" }, res.retry_after), el("td", { class: "timeline" }, res.timeline || "(over 400 arrivals)"))));
  $("#play-table").classList.remove("hidden");
  $("#play-legend").textContent = "Charts: allowed above the axis, denied below; dashed lines are the fixed windows' boundaries. " +
    "Timeline, as sluice demo draws it: # allowed (queued, for the leaky queue), . denied, | a fixed-window boundary." +
    r.results.filter((x) => x.max_delay).map((x) => ` The leaky queue's last admitted request waits ${x.max_delay}.`).join("");
}

window.addEventListener("resize", () => {
  for (const c of [...(liveCharts || []), ...playCharts]) c.setSize({ width: chartWidth(c.root.parentNode), height: c.height });
});

setupPlayground();
$("#lookup-form").addEventListener("submit", lookup);
window.addEventListener("hashchange", showPage);
showPage();
