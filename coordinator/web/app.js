// The coordinator's live web view. It polls /api/state and redraws four
// parts: the cluster (nodes and devices, coloured by the job holding each),
// the job table, the current plan with its explanations, and a timeline of
// recent rounds. Every value from the server goes through textContent or an
// SVG attribute, never through innerHTML: a job's model name is text.
"use strict";

const SVG = "http://www.w3.org/2000/svg";
let updates = 0;
let failures = 0;

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v;
    else if (k === "title") e.title = v;
    else e.setAttribute(k, v);
  }
  for (const k of kids) e.append(k instanceof Node ? k : document.createTextNode(String(k)));
  return e;
}

function svg(tag, attrs, ...kids) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
  for (const k of kids) e.append(k);
  return e;
}

function titled(node, text) {
  node.append(svg("title", {}, document.createTextNode(text)));
  return node;
}

// A stable colour per job id.
function colour(job) {
  let h = 0;
  for (const c of job) h = (h * 31 + c.charCodeAt(0)) >>> 0;
  return `hsl(${h % 360}, 62%, 52%)`;
}

function duration(s) {
  if (!(s > 0)) return "–";
  s = Math.round(s);
  const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), r = s % 60;
  if (h > 0) return `${h}h${String(m).padStart(2, "0")}m`;
  if (m > 0) return `${m}m${String(r).padStart(2, "0")}s`;
  return `${r}s`;
}

// A fair-share finish is a time on the coordinator's clock: shown relative
// to the clock of the reply.
function relative(at, now) {
  if (!(at > 0) || !(now > 0)) return "–";
  const d = at - now;
  return d >= 0 ? `in ${duration(d)}` : `${duration(-d)} ago`;
}

function replaceRows(tbody, rows) {
  tbody.replaceChildren(...rows);
}

// The cluster's devices grouped by node (nodes in GPU id order, each
// holding the next n.gpus ids), else one group of GPU ids 0..gpus-1.
function nodesOf(st, nodes) {
  if (Array.isArray(nodes) && nodes.length > 0) {
    let next = 0;
    return nodes.map((n) => {
      const count = Array.isArray(n.devices) ? n.devices.length : (n.gpus || 0);
      const first = Number.isInteger(n.first) ? n.first : next;
      next = first + count;
      const ids = Array.from({ length: count }, (_, i) => first + i);
      return { name: n.name || "node", type: n.type || "", ids, used: n.used };
    });
  }
  return [{ name: "cluster", type: "", ids: Array.from({ length: st.gpus || 0 }, (_, i) => i) }];
}

// Who holds each device: by node and local index from the jobs' devices
// when the reply names them, else by cluster-wide GPU id.
function holders(st) {
  const byId = new Map(), byDevice = new Map();
  for (const j of st.jobs || []) {
    for (const g of j.gpus || []) byId.set(g, j.job);
    for (const d of j.devices || []) for (const k of d.devices || []) byDevice.set(`${d.node}/${k}`, j.job);
  }
  return (node, local, id) => (byDevice.size > 0 ? byDevice.get(`${node}/${local}`) : byId.get(id));
}

function drawCluster(st) {
  const holder = holders(st);
  const box = document.getElementById("cluster");
  const nodes = nodesOf(st, st.nodes).map((n) => {
    const devs = n.ids.map((id, local) => {
      const job = holder(n.name, local, id);
      const d = el("div", { class: job ? "device busy" : "device idle", "data-gpu": id,
        title: `GPU ${id} (${n.name} device ${local})${job ? ": " + job : ": idle"}` },
        el("span", { class: "gpu" }, `${local}`), el("span", { class: "holder" }, job || "idle"));
      if (job) d.style.background = colour(job);
      return d;
    });
    return el("div", { class: "node", "data-node": n.name },
      el("div", { class: "node-name" }, n.name + (n.type ? ` · ${n.type}` : ""), el("small", {}, ` ${n.ids.length} GPU${n.ids.length === 1 ? "" : "s"}` +
        (Number.isInteger(n.used) ? `, ${n.used} in use` : ""))),
      el("div", { class: "devices" }, ...devs));
  });
  box.replaceChildren(...nodes);
}

function progressBar(done, total) {
  const frac = total > 0 ? Math.min(1, done / total) : 0;
  const s = svg("svg", { width: 120, height: 12, class: "bar" },
    svg("rect", { x: 0, y: 0, width: 120, height: 12, rx: 3, class: "track" }),
    svg("rect", { x: 0, y: 0, width: (120 * frac).toFixed(1), height: 12, rx: 3, class: "fill" }));
  return el("span", { class: "progress" }, s, ` ${(100 * frac).toFixed(0)} %`);
}

// The forecast's remaining time as a point on a log-free linear axis scaled
// to the largest P90 of the table, with its P10–P90 band.
function bandChart(e, scale) {
  if (!e || !(e.forecast_remaining_s > 0)) return document.createTextNode("–");
  const w = 140, x = (v) => Math.max(0, Math.min(w, (w * v) / scale));
  const s = svg("svg", { width: w, height: 12, class: "band" },
    svg("rect", { x: 0, y: 5, width: w, height: 2, class: "axis" }));
  if (e.forecast_p90_s > 0) {
    const lo = x(e.forecast_p10_s || 0), hi = x(e.forecast_p90_s);
    s.append(titled(svg("rect", { x: lo, y: 1, width: Math.max(1, hi - lo), height: 10, rx: 2, class: "p1090" }),
      `P10 ${duration(e.forecast_p10_s)} – P90 ${duration(e.forecast_p90_s)}`));
  }
  s.append(svg("rect", { x: Math.max(0, x(e.forecast_remaining_s) - 1.5), y: 0, width: 3, height: 12, class: "median" }));
  const label = e.forecast_p90_s > 0
    ? ` ${duration(e.forecast_remaining_s)} (${duration(e.forecast_p10_s)}–${duration(e.forecast_p90_s)})`
    : ` ${duration(e.forecast_remaining_s)}`;
  return el("span", { class: "forecast" }, s, label);
}

// A job's GPUs: node:local indices when the reply names devices.
function gpusOf(j) {
  if (Array.isArray(j.devices) && j.devices.length > 0) {
    return j.devices.map((d) => `${d.node}:${(d.devices || []).join(",")}`).join(" ");
  }
  return (j.gpus || []).join(" ") || "–";
}

function drawJobs(st) {
  const explain = new Map();
  let scale = 1;
  for (const e of (st.plan && st.plan.explain) || []) {
    explain.set(e.job, e);
    scale = Math.max(scale, e.forecast_p90_s || 0, e.forecast_remaining_s || 0);
  }
  const rows = (st.jobs || []).map((j) => {
    const e = explain.get(j.job);
    const sw = el("span", { class: "swatch" });
    sw.style.background = colour(j.job);
    return el("tr", { "data-job": j.job, "data-state": j.state },
      el("td", {}, sw, j.job),
      el("td", {}, el("span", { class: `state ${j.state}` }, j.state)),
      el("td", { class: "model", title: j.model || "" }, j.model || "–"),
      el("td", {}, progressBar(j.steps_done, j.total_steps)),
      el("td", { class: "num" }, j.epoch),
      el("td", { class: "num" }, j.batch_size),
      el("td", { class: "num" }, j.throughput > 0 ? j.throughput.toPrecision(3) : "–"),
      el("td", {}, bandChart(e, scale)),
      el("td", { class: "num" }, e && e.projected_rho > 0 ? e.projected_rho.toFixed(2) : "–"),
      el("td", {}, gpusOf(j)));
  });
  replaceRows(document.querySelector("#jobs tbody"), rows);
}

function drawPlan(st) {
  const p = st.plan;
  const title = document.getElementById("plan-title");
  const note = document.getElementById("plan-note");
  if (!p) {
    title.textContent = "";
    note.textContent = "no round scheduled yet";
    replaceRows(document.querySelector("#plan tbody"), []);
    return;
  }
  title.textContent = `of round ${p.round} (${p.solved ? "re-solved" : "followed the stored plan"}): run ${(p.run || []).join(" ") || "nothing"}`;
  note.textContent = p.note || "";
  const rows = (p.explain || []).map((e) => el("tr", { "data-job": e.job, class: e.run ? "running" : "" },
    el("td", {}, e.job),
    el("td", {}, e.run ? "yes" : "no"),
    el("td", { class: "num" }, (e.share || 0).toFixed(2)),
    el("td", { class: "num" }, e.planned_rounds || "–"),
    el("td", {}, (e.forecast_prior || "–") + (e.forecast_waiting ? " (waiting)" : "")),
    el("td", { class: "num" }, e.regime || "–"),
    el("td", { class: "num" }, e.change_prob > 0 ? e.change_prob.toFixed(2) : "–"),
    el("td", {}, relative(e.fair_share_finish_s, st.now)),
    el("td", { class: "why" }, e.reason || "")));
  replaceRows(document.querySelector("#plan tbody"), rows);
}

// The timeline: one row per job, one column per round; a filled cell means
// the job held a RUN lease that round. Below, each round's solve time.
function drawTimeline(state) {
  const rounds = (state.rounds || []).slice(-80); // the coordinator keeps as many (MaxWebRounds)
  const box = document.getElementById("timeline");
  if (rounds.length === 0) {
    box.replaceChildren(el("p", {}, "no round since this coordinator started"));
    return;
  }
  const jobs = [];
  const seen = new Set();
  for (const j of state.status.jobs || []) { seen.add(j.job); jobs.push(j.job); }
  for (const r of rounds) for (const g of r.run) if (!seen.has(g.job)) { seen.add(g.job); jobs.push(g.job); }
  const label = 110, cell = Math.max(4, Math.min(14, Math.floor(720 / rounds.length))), row = 16, solveH = 30;
  const w = Math.max(label + 200, label + cell * rounds.length + 10), h = row * jobs.length + solveH + 28;
  const s = svg("svg", { width: w, height: h, class: "timeline" });
  jobs.forEach((job, i) => {
    s.append(svg("text", { x: label - 6, y: i * row + 12, "text-anchor": "end", class: "label" }, document.createTextNode(job)));
    s.append(svg("rect", { x: label, y: i * row + 2, width: cell * rounds.length, height: row - 4, class: "lane" }));
  });
  const maxSolve = Math.max(1e-3, ...rounds.map((r) => r.solve_s));
  rounds.forEach((r, k) => {
    const x = label + k * cell;
    for (const g of r.run) {
      const i = jobs.indexOf(g.job);
      const c = titled(svg("rect", { x: x + 0.5, y: i * row + 2, width: cell - 1, height: row - 4, fill: colour(g.job), class: "ran" }),
        `round ${r.round}: ${g.job} on GPU ${(g.gpus || []).join(" ")}`);
      s.append(c);
    }
    const bh = Math.max(1, (solveH - 4) * (r.solve_s / maxSolve));
    s.append(titled(svg("rect", { x: x + 0.5, y: jobs.length * row + solveH - bh, width: cell - 1, height: bh,
      class: r.solved ? "solve solved" : "solve" }),
      `round ${r.round}: ${(1000 * r.solve_s).toFixed(1)} ms${r.solved ? ", re-solved" : ""}, ${r.active} active`));
  });
  s.append(svg("text", { x: label - 6, y: jobs.length * row + solveH, "text-anchor": "end", class: "label" },
    document.createTextNode(`solve ≤ ${(1000 * maxSolve).toFixed(1)} ms`)));
  const first = rounds[0].round, last = rounds[rounds.length - 1].round;
  s.append(svg("text", { x: label, y: h - 4, class: "label" },
    document.createTextNode(first === last ? `round ${first}` : `rounds ${first}–${last} (left to right)`)));
  box.replaceChildren(s);
}

function drawHeader(st, total) {
  const shown = (st.jobs || []).length;
  const jobs = total > shown ? `${total} jobs (the ${shown} furthest from their fair share shown)` : `${shown} jobs`;
  const parts = [`policy ${st.policy}`, `${st.gpus} GPUs`, `${st.round_seconds} s rounds`, `next round ${st.round}`,
    `log record ${st.log_seq}`, jobs];
  document.getElementById("summary").textContent = parts.join(" · ");
  const live = document.getElementById("live");
  live.textContent = st.recovering ? "replaying its log" : `live · ${new Date().toLocaleTimeString()}`;
  live.className = st.recovering ? "badge warn" : "badge ok";
}

function interval(st, total) {
  const r = (st && st.round_seconds) || 4;
  const base = Math.min(5000, Math.max(500, (1000 * r) / 4));
  // A large cluster's state costs the coordinator to build (on its event
  // loop) even when it sends a few hundred jobs of it: at 10,000 jobs,
  // polling every 1.25 s took the coordinator's event p99 past its 10 ms
  // target (docs/scale.md, session 20). So a poll waits at least a
  // millisecond per job (15 s at most).
  return Math.max(base, Math.min(15000, total || 0));
}

async function refresh() {
  let wait = 2000;
  try {
    const res = await fetch("api/state", { cache: "no-store" });
    if (!res.ok) throw new Error(`HTTP ${res.status}`);
    const state = await res.json();
    const st = state.status;
    drawHeader(st, state.jobs_total);
    drawCluster(st);
    drawJobs(st);
    drawPlan(st);
    drawTimeline(state);
    updates++;
    failures = 0;
    document.body.dataset.round = String(st.round);
    document.body.dataset.updates = String(updates);
    wait = interval(st, state.jobs_total);
  } catch (err) {
    failures++;
    const live = document.getElementById("live");
    live.textContent = `disconnected (${err.message}); retrying`;
    live.className = "badge warn";
    wait = Math.min(10000, 1000 * failures);
  }
  setTimeout(refresh, wait);
}

refresh();
