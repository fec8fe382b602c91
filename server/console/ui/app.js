// The sluice console: plain JavaScript over the admin API (GET /v1/stats,
// GET /v1/policy, GET /v1/leases, POST /v1/lookup, POST /v1/simulate),
// charts by uPlot.
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

const pages = ["live", "policy", "leases", "lookup", "playground"];
const entered = {};

function showPage() {
  const name = pages.includes(location.hash.slice(1)) ? location.hash.slice(1) : "live";
  for (const p of pages) {
    $(`#page-${p}`).classList.toggle("active", p === name);
    $(`nav a[data-page=${p}]`).classList.toggle("active", p === name);
  }
  if (name === "live") startLive(); else { stopLive(); refreshBadge(); }
  if (name === "policy") loadPolicy();
  if (name === "leases") startLeases(); else stopLeases();
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

// refreshRLQS shows the RLQS streams' assignments, when there are any.
async function refreshRLQS() {
  let r;
  try { r = await api("/v1/rlqs"); } catch (_) { return; }
  const as = r.assignments || [];
  $("#live-rlqs").classList.toggle("hidden", as.length === 0);
  $("#rlqs-table tbody").replaceChildren(...as.map((a) => el("tr", {},
    el("td", {}, a.domain),
    el("td", {}, Object.keys(a.bucket).sort().map((k) => `${k}=${a.bucket[k]}`).join(", ")),
    el("td", {}, a.stream),
    el("td", {}, a.result),
    el("td", { class: "num" }, a.result === "assigned" ? `${fmtNum(a.share)} / ${a.period_seconds}s` : "–"),
    el("td", { class: "num" }, a.result === "assigned" ? fmtNum(a.burst) : "–"),
    el("td", { class: "num" }, fmtNum(Math.round(a.demand_per_second))),
    el("td", { class: "num" }, a.result === "assigned" ? fmtNum(a.holders) : "–"),
    el("td", { class: "num" }, `${a.ttl_seconds}s`))));
}

async function refreshLive() {
  refreshRLQS();
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

// renderBadge shows the store's state in the header, on every tab.
function renderBadge(s) {
  const st = s.store;
  let badge = `store: ${st.name} · ${st.health}`;
  if (st.keys !== undefined && st.keys !== null) badge += ` · ${fmtNum(st.keys)} keys`;
  if (st.breaker) badge += ` · breaker ${st.breaker}`;
  badge += ` · ${fmtNum(st.errors_total)} errors`;
  const b = $("#store-badge");
  b.textContent = badge;
  b.classList.toggle("bad", st.health !== "ok");
}

// The badge outside Live, which refreshes it itself.
async function refreshBadge() {
  if (liveTimer) return;
  try { renderBadge(await api("/v1/stats")); } catch (_) { /* Live shows the error */ }
}

// countsRow is a row of the requests' or the limits' table.
function countsRow(r, attrs, ...lead) {
  return el("tr", attrs, ...lead.map((v) => el("td", {}, v)),
    el("td", { class: "num win-within" }, fmtNum(sum(r.within))),
    el("td", { class: "num win-over" }, fmtNum(sum(r.over))),
    el("td", { class: "num win-shadow" }, fmtNum(sum(r.shadow_over))),
    el("td", { class: "num tot-within" }, fmtNum(r.total.within)),
    el("td", { class: "num tot-over" }, fmtNum(r.total.over)),
    el("td", { class: "num tot-shadow" }, fmtNum(r.total.shadow_over)));
}

function renderLive(s) {
  const n = s.seconds.length;
  const requests = s.requests || [];
  // The chart: every domain's requests, or one domain's, or one limit's
  // decisions, as the row selected says.
  let rows = requests, what = "requests, all domains";
  if (selected !== null) {
    const [domain, rule] = selected.split("\u0000");
    if (rule) {
      rows = s.rules.filter((r) => r.domain === domain && r.rule === rule);
      what = `decisions of limit ${rule} (domain ${domain})`;
    } else {
      rows = requests.filter((r) => r.domain === domain);
      what = `requests, domain ${domain}`;
    }
  }
  const add = (from, field) => {
    const out = new Array(n).fill(0);
    for (const r of from) r[field].forEach((v, i) => { out[i] += v; });
    return out;
  };
  const within = add(rows, "within"), over = add(rows, "over"), shadow = add(rows, "shadow_over");
  const all = { within: add(requests, "within"), over: add(requests, "over"), shadow: add(requests, "shadow_over") };
  const last = (a) => (n > 0 ? a[n - 1] : null);
  $("#card-within").textContent = fmtNum(last(all.within));
  $("#card-over").textContent = fmtNum(last(all.over));
  $("#card-shadow").textContent = fmtNum(last(all.shadow));
  // The latest second with decisions in the window, so that the card
  // keeps its value while traffic pauses.
  let p99 = null, mean = null;
  for (let i = n - 1; i >= 0; i--) {
    if (s.latency.decisions[i] > 0) { p99 = s.latency.p99_ms[i]; mean = s.latency.mean_ms[i]; break; }
  }
  // p99 is null past the histogram's last bucket, 0.8192s.
  $("#card-p99").textContent = mean === null ? "–" : p99 === null ? "over 819ms" : fmtMs(p99);
  const st = s.store;
  $("#card-store").textContent = st.health;
  $("#card-store").className = "value " + (st.health === "ok" ? "ok" : "bad");
  renderBadge(s);
  $("#live-which").textContent = what;

  const pick = (key) => () => {
    selected = selected === key ? null : key;
    renderLive(lastStats);
  };
  $("#live-requests tbody").replaceChildren(...requests.map((r) => {
    const key = r.domain + "\u0000";
    const tr = countsRow(r, { "data-domain": r.domain, class: key === selected ? "selected" : "" }, r.domain);
    tr.addEventListener("click", pick(key));
    return tr;
  }));
  $("#live-rules tbody").replaceChildren(...s.rules.map((r) => {
    const key = r.domain + "\u0000" + r.rule;
    const tr = countsRow(r, { "data-domain": r.domain, "data-rule": r.rule, class: key === selected ? "selected" : "" }, r.domain, r.rule);
    tr.addEventListener("click", pick(key));
    return tr;
  }));
  $("#live-empty").classList.toggle("hidden", s.rules.length > 0 || requests.length > 0);

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
          { label: "denied", stroke: colors.over, width: 1.5 }, { label: "allowed, over a shadow limit", stroke: colors.shadow, width: 1.5 }],
        axes: [{}, { label: "per second" }], scales: { y: { range: (u, min, max) => [0, Math.max(1, max)] } },
      }, dec, t1),
      new uPlot({
        width: chartWidth(t2), height: 180, cursor: { sync: { key: "live" } },
        series: [{}, { label: "average", stroke: colors.mean, width: 1.5, value: (u, v) => fmtMs(v) },
          { label: "99% of decisions took at most", stroke: colors.p99, width: 1.5, value: (u, v) => fmtMs(v) }],
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
        el("td", { class: "num rate" }, l.unlimited ? "" : l.rate ? `${fmtNum(l.rate)} / ${l.period}` : "always denied"),
        el("td", { class: "num" }, l.capacity ? fmtNum(l.capacity) : ""),
        el("td", { title: l.lease || "" }, (l.shadow ? "shadow" : "enforced") + (l.lease ? ", leased" : "")),
        el("td", {}, l.charge || ""),
        el("td", {}, l.failure || ""),
        el("td", {}, (l.replaces || []).join(", ")),
        el("td", { class: "mono where" }, where(l.file, l.line)))))))));
}

// Leases.

let leasesTimer = null;

function startLeases() {
  if (leasesTimer) return;
  refreshLeases();
  leasesTimer = setInterval(refreshLeases, 2000);
}

function stopLeases() {
  clearInterval(leasesTimer);
  leasesTimer = null;
}

// fmtIn is how long until t, from the page's clock: "lapsed" once past.
function fmtIn(t) {
  const ms = new Date(t).getTime() - Date.now();
  return ms <= 0 ? "lapsed" : fmtMs(ms);
}

async function refreshLeases() {
  let r;
  try {
    r = await api("/v1/leases");
  } catch (e) {
    showError("#leases-error", `Could not read /v1/leases: ${e.message}`);
    return;
  }
  showError("#leases-error", "");
  $("#leases-off").classList.toggle("hidden", r.leasing);
  $("#leases-head").textContent = !r.leasing ? "" :
    `This process holds ${fmtNum(r.held)} lease${r.held === 1 ? "" : "s"} as ${r.holder}` +
    (r.held > r.keys.length ? `; the ${r.keys.length} keys asked most of are shown.` : ".") +
    (r.keys_shown ? "" : " Keys are shown as a digest: sluice serve --key-lookup shows them.");
  $("#leases-table").classList.toggle("hidden", r.keys.length === 0);
  const rows = [];
  for (const k of r.keys) {
    // Without the authority's answer, this process's own lease.
    const holders = k.holders.length ? k.holders :
      [{ holder: r.holder, self: true, share: k.share, burst: k.burst, demand: k.demand, expires: k.expires }];
    holders.forEach((h, i) => {
      const lead = i === 0 ? [
        el("td", { rowSpan: holders.length }, k.rule),
        el("td", { rowSpan: holders.length, class: "mono" }, k.key),
      ] : [];
      rows.push(el("tr", { "data-rule": k.rule, class: h.self ? "self" : "" }, ...lead,
        el("td", { class: "mono" }, h.holder + (h.self ? " (this process)" : "")),
        el("td", { class: "num share" }, fmtNum(h.share)),
        el("td", { class: "num" }, fmtNum(h.burst)),
        el("td", { class: "num demand" }, fmtNum(h.demand)),
        el("td", { class: "num" }, fmtIn(h.expires)),
        el("td", { class: k.error ? "bad" : "" }, i === 0 ? k.error || "" : "")));
    });
  }
  $("#leases-table tbody").replaceChildren(...rows);
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
      el("thead", {}, el("tr", {}, ...["limit", "algorithm", "rate", "remaining", "reset in", "retry in", "where"].map((h) => el("th", {}, h)))),
      el("tbody", {}, ...d.limits.map((l) => el("tr", { "data-rule": l.rule },
        el("td", {}, l.rule + (l.shadow ? " (shadow)" : "")),
        el("td", {}, l.unlimited ? "unlimited" : l.algorithm),
        el("td", { class: "rate" }, /^0\//.test(l.limit || "") ? "always denied" : l.limit || ""),
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

let lastPlay = null;
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
  lastPlay = null;
  $("#play-charts").replaceChildren();
  $("#play-desc").textContent = "";
  $("#play-table").classList.add("hidden");
  $("#play-legend").textContent = "";
}

// The playground's charts are SVG drawn here: a few hundred elements each,
// with axes a test (or a reader of the DOM) can read.

const SVGNS = "http://www.w3.org/2000/svg";

function svg(tag, attrs, ...kids) {
  const e = document.createElementNS(SVGNS, tag);
  for (const [k, v] of Object.entries(attrs || {})) if (v !== undefined && v !== null) e.setAttribute(k, v);
  for (const k of kids) e.append(k instanceof Node ? k : document.createTextNode(String(k)));
  return e;
}

// fmtDur rounds a duration in milliseconds to what a reader needs: ms with
// at most one decimal below a second, then seconds, minutes, hours, days.
function fmtDur(ms) {
  if (ms === null || ms === undefined) return "–";
  const r = (v, d) => +v.toFixed(d);
  if (ms === 0) return "0";
  if (ms < 1000) return `${r(ms, 1)}ms`;
  if (ms < 60000) return `${r(ms / 1000, 2)}s`;
  if (ms < 3600000) return `${r(ms / 60000, 1)}m`;
  if (ms < 172800000) return `${r(ms / 3600000, 1)}h`;
  return `${r(ms / 86400000, 1)}d`;
}

// step is a round step (1, 2 or 5 times a power of ten) that cuts max
// into about n parts; whole is the least step allowed.
function step(max, n, whole) {
  const raw = Math.max(max / n, Number.MIN_VALUE);
  const mag = Math.pow(10, Math.floor(Math.log10(raw)));
  for (const m of [1, 2, 5, 10]) if (m * mag >= raw) return Math.max(m * mag, whole || 0);
  return Math.max(10 * mag, whole || 0);
}

function ticks(max, n, whole) {
  const st = step(max, n, whole);
  const out = [];
  for (let v = 0; v <= max + st * 1e-9 && out.length < 20; v += st) out.push(+v.toPrecision(12));
  return out;
}

// chart draws one playground chart: a plot of y values over time, with a
// y-axis and its tick labels, strips of allowed and denied marks below it,
// and the time axis.
function chart(r, o) {
  const W = chartWidth($("#play-charts")), L = 64, R = W - 14, top = 18, plotH = o.height || 110;
  const strips = o.strips || [];
  const stripH = 16, axisTop = top + plotH + 6 + strips.length * (stripH + 2);
  const H = axisTop + 24;
  const xmax = Math.max(r.start_ms[r.start_ms.length - 1] + r.bin_ms, r.period_ms);
  const x = (t) => L + (R - L) * t / xmax;
  const ytop = Math.max(o.ymax, Number.MIN_VALUE);
  const yt = ticks(ytop, 4, o.ms ? 0 : 1);
  const ymax = Math.max(ytop, yt[yt.length - 1]);
  const y = (v) => top + plotH - plotH * v / ymax;
  const root = svg("svg", { width: W, height: H, viewBox: `0 0 ${W} ${H}`, class: "play-svg", "data-alg": o.id, role: "img", "aria-label": o.title });

  // The fixed windows' boundaries, every period from t=0.
  const nb = Math.floor(xmax / r.period_ms);
  if (nb <= 60) {
    for (let k = 1; k <= nb; k++) {
      root.append(svg("line", { class: "boundary", x1: x(k * r.period_ms), x2: x(k * r.period_ms), y1: top, y2: axisTop }));
    }
  }
  // The y-axis.
  const ya = svg("g", { class: "y-axis" });
  ya.append(svg("line", { class: "axis", x1: L, x2: L, y1: top, y2: top + plotH }));
  for (const v of yt) {
    ya.append(svg("line", { class: "grid", x1: L, x2: R, y1: y(v), y2: y(v) }));
    ya.append(svg("text", { class: "tick", x: L - 6, y: y(v) + 4, "text-anchor": "end" }, o.ms ? fmtDur(v) : fmtNum(v)));
  }
  ya.append(svg("text", { class: "label", transform: `translate(12 ${top + plotH / 2}) rotate(-90)`, "text-anchor": "middle" }, o.label));
  root.append(ya);
  if (o.limit !== undefined) {
    root.append(svg("line", { class: "limit", x1: L, x2: R, y1: y(o.limit), y2: y(o.limit) }));
    root.append(svg("text", { class: "limit-label", x: R - 4, y: y(o.limit) - 4, "text-anchor": "end" }, o.limitLabel));
  }
  if (o.bars) {
    const w = Math.max(1, (x(r.bin_ms) - x(0)) * 0.9);
    o.bars.forEach((v, i) => {
      if (v > 0) root.append(svg("rect", { class: "arrivals", x: x(r.start_ms[i]), y: y(v), width: w, height: top + plotH - y(v) },
        svg("title", {}, `${fmtNum(v)} at ${fmtDur(r.start_ms[i])}`)));
    });
  }
  if (o.series) {
    const { t_ms: ts, v: vs } = o.series;
    let d = "";
    for (let i = 0; i < ts.length; i++) d += `${i ? "L" : "M"}${x(ts[i]).toFixed(1)} ${y(vs[i]).toFixed(1)}`;
    // The line holds its last value to the chart's end.
    if (ts.length) d += `L${R} ${y(vs[vs.length - 1]).toFixed(1)}`;
    root.append(svg("path", { class: "state", d }));
  }
  if (o.waits) {
    o.waits.t_ms.forEach((t, i) => {
      const v = o.waits.v[i];
      root.append(svg("circle", { class: "wait", cx: x(t).toFixed(1), cy: y(v).toFixed(1), r: 2.5, "data-v": v },
        svg("title", {}, `arrived at ${fmtDur(t)}, waited ${fmtDur(v)}`)));
    });
  }
  // The strips of marks: one bar per bin, as tall as its count against
  // the busiest bin of arrivals.
  const peak = Math.max(1, ...r.counts);
  strips.forEach((st, k) => {
    const y0 = top + plotH + 6 + k * (stripH + 2);
    root.append(svg("text", { class: "strip-label " + st.cls, x: L - 6, y: y0 + 12, "text-anchor": "end" }, st.label));
    root.append(svg("line", { class: "grid", x1: L, x2: R, y1: y0 + stripH, y2: y0 + stripH }));
    const w = Math.max(1, (x(r.bin_ms) - x(0)) * 0.9);
    st.counts.forEach((v, i) => {
      if (v <= 0) return;
      const h = Math.max(2, stripH * v / peak);
      root.append(svg("rect", { class: st.cls, x: x(r.start_ms[i]), y: y0 + stripH - h, width: w, height: h },
        svg("title", {}, `${fmtNum(v)} ${st.label} at ${fmtDur(r.start_ms[i])}`)));
    });
  });
  // The time axis.
  const xa = svg("g", { class: "x-axis" });
  xa.append(svg("line", { class: "axis", x1: L, x2: R, y1: axisTop, y2: axisTop }));
  for (const t of ticks(xmax, Math.max(2, Math.floor((R - L) / 90)))) {
    xa.append(svg("line", { class: "axis", x1: x(t), x2: x(t), y1: axisTop, y2: axisTop + 4 }));
    xa.append(svg("text", { class: "tick", x: x(t), y: axisTop + 16, "text-anchor": "middle" }, fmtDur(t)));
  }
  root.append(xa);
  return root;
}

function renderPlayground(r) {
  clearPlayground();
  lastPlay = r;
  $("#play-desc").textContent = `Limit ${r.limit}, bucket capacity ${r.capacity}. ${r.description}`;
  const target = $("#play-charts");
  const box = (id, title, caption, svgEl) => el("div", { class: "play-chart", "data-alg": id },
    el("h3", {}, title), caption ? el("p", { class: "caption" }, caption) : "", svgEl);
  target.append(box("arrivals", `Arrivals: ${fmtNum(r.arrivals)}, counted in bins of ${fmtDur(r.bin_ms)}`, "",
    chart(r, { id: "arrivals", title: "arrivals", label: "requests", ymax: Math.max(1, ...r.counts), bars: r.counts, height: 70 })));
  for (const res of r.results) {
    const st = res.state;
    const strips = [{ cls: "allowed", label: res.id === "leaky_queue" ? "queued" : "allowed", counts: res.bin_allowed }];
    if (res.denied > 0) strips.push({ cls: "denied", label: "denied", counts: res.bin_denied });
    const ymax = Math.max(st.limit, ...st.v, ...(res.waits ? res.waits.v : []));
    const title = `${res.name}: ${fmtNum(res.allowed)} ${res.id === "leaky_queue" ? "queued" : "allowed"}, ` +
      (res.denied > 0 ? `${fmtNum(res.denied)} denied` : "none denied");
    target.append(box(res.id, title, st.caption, chart(r, {
      id: res.id, title, label: st.label, ms: st.ms, ymax, limit: st.limit, limitLabel: st.limit_label,
      series: st, waits: res.waits, strips,
    })));
  }
  $("#play-table tbody").replaceChildren(...r.results.map((res) => el("tr", { "data-alg": res.id },
    el("td", {}, res.name), el("td", { class: "num allowed" }, fmtNum(res.allowed)), el("td", { class: "num denied" }, fmtNum(res.denied)),
    el("td", { class: "retry", title: res.retry_after },
      res.denied === 0 ? "–" : res.retry_after_ms === null ? "never" : fmtDur(res.retry_after_ms)),
    el("td", { class: "timeline" }, res.timeline || "(over 400 arrivals)"))));
  $("#play-table").classList.remove("hidden");
  const queue = r.results.find((x) => x.id === "leaky_queue");
  $("#play-legend").textContent = "Charts: what each algorithm holds over time, against its limit (the dashed line), and below it the requests " +
    "allowed and denied, per bin; the grey dashed lines are the fixed windows' boundaries. " +
    "Timeline, as sluice demo draws it: # allowed (queued, for the leaky queue), . denied, | a fixed-window boundary. " +
    "Retry after is rounded; hover for the exact value." +
    (queue && queue.allowed > 0 ? ` The leaky queue's last admitted request waits ${fmtDur(queue.max_delay_ms || 0)}.` : "");
}

window.addEventListener("resize", () => {
  for (const c of liveCharts || []) c.setSize({ width: chartWidth(c.root.parentNode), height: c.height });
  if (lastPlay) renderPlayground(lastPlay);
});

setupPlayground();
setInterval(refreshBadge, 5000);
$("#lookup-form").addEventListener("submit", lookup);
window.addEventListener("hashchange", showPage);
showPage();
