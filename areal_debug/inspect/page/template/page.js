// SPDX-License-Identifier: Apache-2.0
// areal-debug report: the page's own script. No library: the charts are SVG drawn
// here, every element is built with textContent (recorded texts are never HTML).
"use strict";
const D = JSON.parse(document.getElementById("report-data").textContent);
const SVG = "http://www.w3.org/2000/svg";
const R = D.replay;
const FIRST = R && R.first_divergence ? R.first_divergence : null;
// A second recording set beside the first (report A B): its statistics, the two
// runs' batches compared step by step, and each of a's rows' pair in b.
const O = D.other;

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else if (v !== undefined && v !== null) e.setAttribute(k, v);
  }
  for (const kid of kids.flat()) {
    if (kid === null || kid === undefined) continue;
    e.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
  }
  return e;
}
function add(parent, ...kids) {
  // DOM append writes null as "null": leave out what is not there.
  parent.append(...kids.flat().filter((k) => k !== null && k !== undefined));
}
function sv(tag, attrs, text) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}
const isNum = (v) => typeof v === "number" && isFinite(v);
function fmt(v, digits) {
  if (v === null || v === undefined) return "–";
  if (typeof v === "string") return v;  // nan, inf
  if (Number.isInteger(v)) return String(v);
  const a = Math.abs(v);
  if (a !== 0 && (a < 1e-3 || a >= 1e5)) return v.toExponential(digits || 3);
  return v.toPrecision(digits || 4).replace(/\.?0+$/, "");
}
const range = (p) => (p ? (p[0] === p[1] ? String(p[0]) : p[0] + "–" + p[1]) : "–");

// -- header, verdict, notes ---------------------------------------------------------
function header() {
  const m = D.manifest;
  add(document.getElementById("head"), 
    el("h1", {}, "areal-debug report: " + D.label),
    el("div", { class: "sub" }, "recording " + D.recording),
    R ? el("div", { class: "sub" }, R.label + ": " + R.path) : null,
    O ? el("div", { class: "sub" }, O.label + ": " + O.recording) : null,
    el("div", { class: "sub" },
      `${D.steps.length} step(s) shown · created ${m.created || "?"} · page written ${D.generated} by ${D.tool}`)
  );
}
function verdict() {
  const box = document.getElementById("verdict");
  if (O) twoRuns(box);
  if (!R) return;
  // The story leads: where the replay left the recording and why; the metric with
  // the largest difference is a detail below it.
  if (R.headline) add(box, el("div", { id: "story" }, el("b", {}, "Replay story: "), R.headline));
  if (FIRST) {
    add(box, el("div", { class: "divergence", id: "first-divergence" },
      el("b", {}, `First divergence: step ${FIRST.global_step}`),
      ` · ${FIRST.metric}: recorded ${fmt(FIRST.recorded, 8)}, replayed ${fmt(FIRST.replayed, 8)}` +
      (isNum(FIRST.rel_diff) ? ` (relative difference ${fmt(FIRST.rel_diff, 3)})` : "") +
      ` · ${FIRST.num_diverged_metrics} metric(s) diverged at that step`,
      R.first_stage ? el("div", {}, `First divergent stage: ${R.first_stage.stage} at ${R.first_stage.where || "?"}` +
        (R.first_stage.step !== FIRST.global_step ? ` (step ${R.first_stage.step})` : "")) : null));
  } else {
    add(box, el("div", { class: "identical", id: "verdict-identical" },
      el("b", {}, `${R.label}: identical`), ` at every replayed step (${R.steps.length})` +
      ` within rtol ${R.tolerance.rtol}, atol ${R.tolerance.atol}`));
  }
  const changed = R.config_changes;  // null: a report from before replays kept them
  if (changed) add(box, el("div", { class: "note", id: "config-changes" }, changed.length
    ? ["Changed from the recording: ", changed.map((c) => `${c.key} ${JSON.stringify(c.recorded)} → ${JSON.stringify(c.replay)}`).join("; ")]
    : "The replay ran with the recording's training settings."));
  if (R.topology) add(box, el("div", { class: "note" }, R.topology));
}
function twoRuns(box) {
  const c = O.counts || {};
  const common = Object.keys(O.compared).length;
  const prompts = `Prompts over the ${common} common step(s): ${c.only_in_a || 0} only in a, ${c.only_in_b || 0} only in b, ` +
    `${c.more_in_a || 0} more often in a, ${c.more_in_b || 0} more often in b.`;
  const lacking = D.steps.filter((s) => !O.compared[s]);
  add(box, el("div", { class: O.first_step === null ? "identical" : "divergence", id: "two-runs" },
    el("b", {}, `a ${D.label} and ${O.label}: `),
    O.first_step === null
      ? `the same prompts in the same order, completions, rewards, versions and start weights at every common step (${common}).`
      : `the runs part at step ${O.first_step}, in ${O.first_parts.join(", ")}.`,
    el("div", {}, prompts),
    lacking.length ? el("div", {}, `Steps b does not hold: ${lacking.join(", ")}.`) : null));
}
function pairOf(step, r) {
  // a's row r at ``step``: its pair in b (the sample of the same prompt and
  // occurrence) and b's row on the page; null where b has none.
  const c = O && O.compared[step];
  const p = c ? c.pairs[`${r.group},${r.row}`] : null;
  if (!p) return null;
  const row = O.details[step].rows.find((x) => x.group === p.group && x.row === p.sample);
  return { ...p, row };
}
function inB(step, r) {
  const c = O.compared[step];
  if (!c) return "step not in b";
  const p = pairOf(step, r);
  if (!p) return "prompt not in b";
  const parts = ["completion", "reward", "versions"].filter((k) => !p[k]);
  return parts.length ? parts.join(", ") + (parts.length > 1 ? " differ" : " differs") : "same";
}
function notes() {
  const box = document.getElementById("notes");
  for (const n of D.notes) add(box, el("div", { class: "note" }, n));
  const left = D.steps.map((s) => D.details[s]).filter((d) => d.left_out > 0);
  if (left.length) {
    const out = left.reduce((a, d) => a + d.left_out, 0);
    add(box, el("div", { class: "note", id: "cap-note" },
      `${out} trajectories are left out of this page: at most ${D.limits.max_per_step} per step are kept ` +
      `(the first ones in batch order; build with --max-per-step 0 to keep all, or fewer --steps).`));
  }
}

// -- charts ---------------------------------------------------------------------------
const W = 400, H = 200, ML = 58, MR = 10, MT = 22, MB = 30;
function legend() {
  const items = [["var(--rec)", O ? "a " + D.label : "recorded"]];
  if (R) items.push(["var(--rep)", R.label]);
  if (O) items.push(["var(--oth)", O.label]);
  const box = document.getElementById("legend");
  for (const [c, t] of items) add(box, el("span", {}, el("i", { class: "sw", style: `background:${c}` }), t));
  if (D.anomalies.length) add(box, el("span", {}, el("b", { style: "color:var(--pin)" }, "▼ "), "anomaly pin"));
  if (D.incomplete.length || D.without_stats.length)
    add(box, el("span", {}, el("i", { class: "sw", style: "background:var(--shade);height:10px" }), "incomplete or no statistics"));
  if (FIRST) add(box, el("span", {}, el("i", { class: "sw", style: "background:var(--pin)" }), "first divergence"));
}
function charts() {
  const box = document.getElementById("charts");
  if (!D.metrics.length) {
    add(box, el("p", { class: "note" }, "No recorded statistics in the steps shown (no stats.json): the steps' trajectories are below."));
    return;
  }
  for (const m of D.metrics) add(box, chart(m));
}
function chart(m) {
  const every = [...new Set([...D.steps, ...D.incomplete])].sort((a, b) => a - b);
  const lo = every[0] - 0.5, hi = every[every.length - 1] + 0.5;
  const rec = D.steps.filter((s) => D.series[s] && m.name in D.series[s]).map((s) => [s, D.series[s][m.name]]);
  const rep = R ? Object.keys(R.series).map(Number).sort((a, b) => a - b)
    .filter((s) => m.name in R.series[s]).map((s) => [s, R.series[s][m.name]]) : [];
  const oth = O ? Object.keys(O.series).map(Number).sort((a, b) => a - b)
    .filter((s) => m.name in O.series[s]).map((s) => [s, O.series[s][m.name]]) : [];
  const ys = [...rec, ...rep, ...oth].map((p) => p[1]).filter(isNum);
  let y0 = ys.length ? Math.min(...ys) : 0, y1 = ys.length ? Math.max(...ys) : 1;
  if (y0 === y1) { const d = Math.abs(y0) * 0.05 || 1; y0 -= d; y1 += d; }
  const pad = (y1 - y0) * 0.08; y0 -= pad; y1 += pad;
  const ticks = niceTicks(y0, y1);
  const X = (s) => ML + ((s - lo) / (hi - lo)) * (W - ML - MR);
  const Y = (v) => MT + (1 - (v - y0) / (y1 - y0)) * (H - MT - MB);
  const svg = sv("svg", { viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": m.title });
  for (const s of [...D.incomplete, ...D.without_stats])
    svg.append(sv("rect", { x: X(s - 0.4), y: MT, width: X(s + 0.4) - X(s - 0.4), height: H - MT - MB, fill: "var(--shade)", class: "gap" }));
  for (const [v, label] of ticks) {
    svg.append(sv("line", { x1: ML, x2: W - MR, y1: Y(v), y2: Y(v), stroke: "#eee" }));
    svg.append(sv("text", { x: ML - 4, y: Y(v) + 4, "text-anchor": "end", "font-size": 10, fill: "#555", class: "ytick" }, label));
  }
  const tick = Math.max(1, Math.ceil(every.length / 12));
  every.forEach((s, i) => {
    if (i % tick) return;
    svg.append(sv("text", { x: X(s), y: H - MB + 14, "text-anchor": "middle", "font-size": 10, fill: "#555" }, s));
  });
  svg.append(sv("text", { x: (ML + W - MR) / 2, y: H - 3, "text-anchor": "middle", "font-size": 10, fill: "#555" }, "global step"));
  svg.append(sv("text", { x: 11, y: (MT + H - MB) / 2, "text-anchor": "middle", "font-size": 10, fill: "#555", transform: `rotate(-90 11 ${(MT + H - MB) / 2})` }, m.unit));
  if (FIRST && FIRST.global_step > lo && FIRST.global_step < hi) {
    const x = X(FIRST.global_step);
    svg.append(sv("line", { x1: x, x2: x, y1: MT, y2: H - MB, stroke: "var(--pin)", "stroke-width": 1.5, class: "divergence-line" }));
    svg.append(sv("text", { x: x + 3, y: MT + 10, "font-size": 10, fill: "var(--pin)" }, "first divergence"));
  }
  for (const a of D.anomalies) {
    const x = X(a.step);
    svg.append(sv("line", { x1: x, x2: x, y1: MT, y2: H - MB, stroke: "var(--pin)", "stroke-dasharray": "2 3" }));
    const pin = sv("path", { d: `M${x - 5},${MT - 12} L${x + 5},${MT - 12} L${x},${MT - 3} Z`, fill: "var(--pin)", class: "pin" });
    pin.append(sv("title", {}, `step ${a.step}: ${a.reasons.join("; ")}`));
    svg.append(pin);
    const v = D.series[a.step] && D.series[a.step][m.name];
    if (typeof v === "string") svg.append(sv("text", { x: x, y: MT + 22, "text-anchor": "middle", "font-size": 10, fill: "var(--pin)" }, v));
  }
  // After the replay left the recording, its mismatch is its own weights' drift
  // from those that generated the batch, not the engine's gap: banded and said.
  const meaning = (R && R.mismatch_meaning) || {};
  const drift = Object.keys(meaning).map(Number).filter((s) => s > lo && s < hi);
  if (m.name.startsWith("areal_debug/mismatch/") && drift.length) {
    for (const s of drift)
      svg.append(sv("rect", { x: X(s - 0.5), y: MT, width: X(s + 0.5) - X(s - 0.5), height: H - MT - MB, fill: "rgba(240, 190, 0, 0.16)", class: "drift-band" }));
    const s0 = Math.min(...drift);
    svg.append(sv("text", { x: X(s0 - 0.5) + 3, y: H - MB - 4, "font-size": 10, fill: "#8a6d00", class: "drift-label" }, "replayed: " + meaning[s0]));
  }
  line(svg, rec, X, Y, "var(--rec)", false);
  if (rep.length) line(svg, rep, X, Y, "var(--rep)", true);
  if (oth.length) line(svg, oth, X, Y, "var(--oth)", true, "oth");
  if (O && O.first_step !== null && O.first_step > lo && O.first_step < hi) {
    const x = X(O.first_step);
    svg.append(sv("line", { x1: x, x2: x, y1: MT, y2: H - MB, stroke: "var(--oth)", "stroke-width": 1.5, "stroke-dasharray": "4 2", class: "parting-line" }));
  }
  return el("div", { class: "chart", "data-metric": m.name },
    el("div", { class: "title" }, m.title), el("div", { class: "metric" }, m.name), svg);
}
// Round ticks: multiples of 1, 2 or 5 times a power of ten inside [y0, y1], each
// written with the digits its step needs (0.005, 0.01, ... or 0.99995, 1, ...).
function niceTicks(y0, y1) {
  const raw = (y1 - y0) / 4, p = Math.pow(10, Math.floor(Math.log10(raw)));
  const step = [1, 2, 5, 10].map((m) => m * p).find((s) => s >= raw);
  const decimals = Math.max(0, -Math.floor(Math.log10(step) + 1e-9));
  const out = [];
  for (let k = Math.ceil(y0 / step); k * step <= y1 + step * 1e-9; k++) {
    const v = k * step;
    out.push([v, Math.abs(v) < step / 2 ? "0" : v.toFixed(decimals)]);
  }
  return out;
}
function line(svg, pts, X, Y, colour, dashed, cls) {
  const finite = pts.filter((p) => isNum(p[1]));
  const poly = svg.appendChild(sv("polyline", {
    points: finite.map((p) => `${X(p[0])},${Y(p[1])}`).join(" "), fill: "none", stroke: colour,
    "stroke-width": dashed ? 1.6 : 2.2, "stroke-dasharray": dashed ? "5 3" : "none",
  }));
  if (cls) poly.setAttribute("class", cls);
  for (const [s, v] of finite) {
    const mark = dashed
      ? sv("path", { d: `M${X(s) - 4},${Y(v) - 4} l8,8 m0,-8 l-8,8`, stroke: colour, "stroke-width": 1.8, class: "pt", "data-step": s })
      : sv("circle", { cx: X(s), cy: Y(v), r: 4.5, fill: colour, class: "pt", "data-step": s });
    mark.append(sv("title", {}, `step ${s}: ${fmt(v, 8)}`));
    mark.addEventListener("click", () => showStep(s));
    svg.append(mark);
  }
}

// -- steps ------------------------------------------------------------------------------
function steps() {
  const box = document.getElementById("steps");
  const pinned = new Set(D.anomalies.map((a) => a.step));
  const all = [...new Set([...D.steps, ...D.incomplete])].sort((a, b) => a - b);
  for (const s of all) {
    if (!D.details[s]) {
      add(box, el("span", { class: "stepbtn off", title: "incomplete: no step.json" }, `${s} (incomplete)`));
      continue;
    }
    const diverged = R && R.status[s] === "diverged";
    const c = O ? O.compared[s] : null;
    const parted = O && (!c || c.differ.length);
    const cls = "stepbtn" + (pinned.has(s) ? " anomaly" : "") + (diverged ? " diverged" : "") + (parted ? " parted" : "");
    const why = [pinned.has(s) ? "anomaly pin" : null, diverged ? "replay diverged" : null,
      parted ? (c ? "b differs: " + c.differ.join(", ") : "not in b") : null].filter(Boolean).join(", ");
    add(box, el("button", { class: cls, "data-step": s, title: why || null, onclick: () => showStep(s) }, `step ${s}`));
  }
}
let current = null;
function showStep(s, fromLink) {
  // Where the trainer's log-probs were kept, the rows open worst |Δ| first: the
  // training-inference gap is what a person opens the page for.
  const worst = D.details[s].rows.some((r) => isNum(r.worst_delta));
  current = { step: s, sort: worst ? { key: "worst_delta", dir: -1 } : { key: "i", dir: 1 } };
  if (!fromLink) link(`step=${s}`);
  for (const b of document.querySelectorAll(".stepbtn[data-step]")) b.classList.toggle("sel", Number(b.dataset.step) === s);
  document.getElementById("traj").hidden = true;
  document.getElementById("group").hidden = true;
  renderStep();
  reveal(document.getElementById("step"), fromLink);
}
const COLUMNS = [
  ["i", "#", "num"], ["group", "group", "num"], ["reward", "reward", "num"],
  ["gmean", "group mean", "num"], ["gstd", "group std", "num"],
  ["prompt_len", "prompt tokens", "num"], ["completion_len", "completion tokens", "num"],
  ["version", "versions", "num"], ["stale", "staleness", "num"],
  ["ptext", "prompt", "text"], ["completion", "completion", "text"],
  // Where the trainer's log-probs were kept: d = trainer - engine at the row's worst token.
  ["worst_delta", "worst Δ", "num"],
  // A replay with debug.blame_steps: the sample's share of the step's gradient
  // (its projection on its mini-batch's; signed) and of its loss.
  ["grad_share", "grad share", "num"], ["loss_share", "loss share", "num"],
  // Two recordings: this sample's pair in b (same prompt and occurrence).
  ["in_b", "in b", "text"],
];
// Columns shown only where a row of the step has a value for them.
const WHERE_PRESENT = ["worst_delta", "grad_share", "loss_share"];
function renderStep() {
  const d = D.details[current.step];
  const box = document.getElementById("step");
  box.hidden = false;
  box.replaceChildren();
  const groups = Object.fromEntries(d.groups.map((g) => [g.group, g]));
  const rows = d.rows.map((r) => ({ ...r, gmean: groups[r.group].mean, gstd: groups[r.group].std,
    ptext: d.prompts[r.prompt], version: r.versions ? r.versions[1] : null, stale: r.staleness ? r.staleness[1] : null }));
  if (O) for (const r of rows) r.in_b = inB(current.step, r);
  const columns = COLUMNS.filter(([key]) => (!WHERE_PRESENT.includes(key) || rows.some((r) => r[key] !== undefined)) && (key !== "in_b" || O));
  const stats = D.series[current.step];
  add(box, el("h2", {}, `Step ${current.step}`),
    el("p", {}, `${d.num_trajectories} trajectories in ${d.num_groups} groups, ${d.num_tokens} tokens, epoch ${d.epoch}, ` +
      `policy versions ${range(d.policy_version)}` + (stats ? "" : " · no recorded statistics")),
    d.left_out ? el("p", { class: "note step-cap" }, `${d.left_out} of ${d.num_trajectories} trajectories left out of this page ` +
      `(at most ${D.limits.max_per_step} kept per step); group statistics count them all.`) : null,
    d.stage_note ? el("p", { class: "note" }, d.stage_note) : null,
    d.blame ? blameNote(current.step, d.blame) : null,
    O ? el("p", { class: "note", id: "vs-b" }, versusB(current.step)) : null);
  const f = current.filter || (current.filter = { rmax: "", rmin: "", lmin: "", text: "" });
  const input = (key, label, cls) => el("label", {}, label + " ",
    el("input", { class: cls || null, value: f[key], oninput: (e) => { f[key] = e.target.value; fill(); } }));
  add(box, el("div", { class: "filters" }, input("rmax", "reward ≤"), input("rmin", "reward ≥"),
    input("lmin", "completion tokens ≥"), input("text", "text contains", "wide"),
    el("span", { class: "muted" }, "click a column to sort, a row for its tokens")));
  const thead = el("tr", {}, columns.map(([key, label]) => el("th", {
    class: "sortable", "data-key": key,
    onclick: () => { const s = current.sort; s.dir = s.key === key ? -s.dir : (["completion_len", "reward", "worst_delta"].includes(key) ? -1 : 1); s.key = key; fill(); },
  }, label)));
  const tbody = el("tbody", { id: "traj-rows" });
  add(box, el("table", { id: "traj-table" }, el("thead", {}, thead), tbody), el("p", { class: "muted", id: "row-count" }));
  add(box, el("h2", {}, "Groups"), el("p", { class: "hint" }, "Each prompt once with its samples; click a group to set them side by side."), groupTable(d));
  function fill() {
    const num = (v) => (v === "" ? null : Number(v));
    const rmax = num(f.rmax), rmin = num(f.rmin), lmin = num(f.lmin), text = f.text.toLowerCase();
    const shown = rows.filter((r) => (rmax === null || (isNum(r.reward) && r.reward <= rmax)) &&
      (rmin === null || (isNum(r.reward) && r.reward >= rmin)) && (lmin === null || r.completion_len >= lmin) &&
      (!text || (r.ptext + "\n" + r.completion).toLowerCase().includes(text)));
    const { key, dir } = current.sort;
    // The worst token sorts by its size, either sign.
    const sortValue = (r) => (key === "worst_delta" && isNum(r[key]) ? Math.abs(r[key]) : r[key]);
    shown.sort((a, b) => cmp(sortValue(a), sortValue(b)) * dir || a.i - b.i);
    tbody.replaceChildren(...shown.map((r) => el("tr", { class: "row", "data-i": r.i, onclick: (e) => showTrajectory(r, e.currentTarget) },
      columns.map(([k, , kind]) => el("td", { class: kind, title: kind === "text" ? r[k] : null },
        k === "version" ? range(r.versions) : k === "stale" ? range(r.staleness) : kind === "num" ? fmt(r[k]) : r[k])))));
    for (const th of thead.children) th.textContent = columns.find((c) => c[0] === th.dataset.key)[1] + (th.dataset.key === key ? (dir > 0 ? " ▲" : " ▼") : "");
    document.getElementById("row-count").textContent = `${shown.length} of ${rows.length} trajectories on this page shown`;
  }
  fill();
}
// A blamed step (areal-debug blame): its top samples, each a link to its tokens,
// and where a non-finite step's NaN came from.
function blameNote(step, b) {
  const at = (g, r) => el("a", { href: `#step=${step}&group=${g}&sample=${r}` }, `${g}/${r}`);
  const top = b.top.flatMap((t, k) => [k ? ", " : "", at(t.group, t.sample), ` (${fmt(t.grad_share, 3)})`]);
  return el("div", { class: "note", id: "blame" },
    b.origin ? el("p", { class: "bad", id: "blame-origin" }, "Not finite: it entered at group ",
      at(b.origin.group, b.origin.sample), `'s ${b.origin.entered}.`) : null,
    el("p", {}, "Samples that drove this step's update (grad share, areal-debug blame): ", ...top,
      `; the grad shares add up to ${fmt(b.grad_share_sum, 4)}.`));
}
function versusB(step) {
  const c = O.compared[step];
  if (!c) return `vs ${O.label}: b does not hold step ${step}.`;
  if (!c.differ.length) return `vs ${O.label}: the same prompts in the same order, completions, rewards and versions; start weights ${c.weights.replace("_", " ")}.`;
  const parts = [];
  if (c.prompts_only_in_a || c.prompts_only_in_b) parts.push(`prompts: ${c.prompts_only_in_a} sample(s) only in a, ${c.prompts_only_in_b} only in b`);
  else if (c.differ.includes("prompt order")) parts.push("the same prompts in another order");
  for (const [k, n] of [["completions", c.completions_differ], ["rewards", c.rewards_differ], ["versions", c.versions_differ]])
    if (n) parts.push(`${k} of ${n} sample(s) differ`);
  parts.push(`start weights ${c.weights.replace("_", " ")}`);
  return `vs ${O.label}: ${parts.join("; ")}.`;
}
function cmp(a, b) {
  const na = a === null || a === undefined, nb = b === null || b === undefined;
  if (na || nb) return na - nb;
  if (typeof a === "number" && typeof b === "number") return a - b;
  return String(a).localeCompare(String(b));
}
// -- groups: a prompt and its samples side by side -------------------------------------
// GRPO learns from a group's spread: a group whose rewards are all equal has zero
// advantage everywhere and trains nothing (AReaL's advantages are the reward
// minus the group's mean, then normalised; the page shows the first part).
function worstOf(rows) {
  const ds = rows.map((r) => r.worst_delta).filter(isNum);
  return ds.length ? ds.reduce((a, b) => (Math.abs(b) > Math.abs(a) ? b : a)) : null;
}
function spanOf(values) {
  const v = (values || []).filter(isNum);
  return v.length ? range([Math.min(...v), Math.max(...v)]) : "–";
}
function groupTable(d) {
  const head = ["group", "prompt", "samples", "rewards", "reward mean", "reward std", "completion tokens", "worst Δ", "staleness", "spread"];
  return el("table", { id: "group-table" },
    el("tr", {}, head.map((h) => el("th", {}, h))),
    d.groups.map((g) => {
      const rows = d.rows.filter((r) => r.group === g.group);
      const stale = (g.staleness || []).filter(Boolean);
      return el("tr", { class: "row group-row" + (g.no_spread ? " no-spread" : ""), "data-group": g.group, onclick: () => showGroup(g.group) },
        el("td", { class: "num" }, g.group),
        el("td", { class: "text", title: rows.length ? d.prompts[rows[0].prompt] : null }, rows.length ? d.prompts[rows[0].prompt] : "–"),
        el("td", { class: "num" }, g.n),
        el("td", { class: "num" }, (g.rewards || []).map((x) => fmt(x, 3)).join(" ")),
        el("td", { class: "num" }, fmt(g.mean)), el("td", { class: "num" }, fmt(g.std)),
        el("td", { class: "num" }, spanOf(g.completion_len)), el("td", { class: "num" }, fmt(worstOf(rows))),
        el("td", { class: "num" }, stale.length ? range([Math.min(...stale.map((x) => x[0])), Math.max(...stale.map((x) => x[1]))]) : "–"),
        el("td", {}, g.no_spread ? "equal rewards: zero advantage" : ""));
    }));
}
function showGroup(g, fromLink) {
  const d = D.details[current.step];
  const group = d.groups.find((x) => x.group === g);
  if (!fromLink) link(`step=${current.step}&group=${g}`);
  for (const x of document.querySelectorAll("tr.group-row")) x.classList.toggle("sel", Number(x.dataset.group) === g);
  document.getElementById("traj").hidden = true;
  const box = document.getElementById("group");
  box.hidden = false;
  box.replaceChildren();
  const rows = d.rows.filter((r) => r.group === g);
  const rewards = group.rewards || [];
  const cards = rewards.map((reward, k) => {
    const r = rows.find((x) => x.row === k);
    const adv = isNum(reward) && isNum(group.mean) ? reward - group.mean : null;
    const stale = group.staleness ? group.staleness[k] : null;
    const lines = [
      el("div", { class: "card-head" }, `sample ${k}`),
      el("div", {}, `reward ${fmt(reward)}`),
      el("div", {}, `advantage ${fmt(adv)}`, el("span", { class: "muted" }, " (reward − group mean)")),
      el("div", {}, `${group.completion_len[k]} completion tokens`),
      el("div", {}, `worst Δ ${fmt(r ? r.worst_delta : null)}`),
      el("div", {}, `staleness ${range(stale)}`),
      r ? el("div", { class: "card-text" }, r.completion.slice(0, 240)) : el("div", { class: "muted" }, "not on this page (--max-per-step)"),
    ];
    return el("div", { class: "card" + (r ? " open" : ""), "data-sample": k,
      onclick: r ? () => openTrajectory(r) : null }, lines);
  });
  const prompt = rows.length ? d.prompts[rows[0].prompt] : null;
  add(box, el("h2", {}, `Step ${current.step}, group ${g}: ${group.n} samples of one prompt`),
    group.no_spread ? el("p", { class: "note", id: "no-spread" }, `Every sample's reward is ${fmt(rewards[0])}: the advantages are all zero and this group trains nothing.`) : null,
    prompt !== null ? el("div", { class: "tokens group-prompt" }, el("span", { class: "prompt" }, prompt)) : el("p", { class: "muted" }, "The prompt's samples are not on this page (--max-per-step)."),
    el("div", { class: "cards" }, cards),
    el("p", { class: "muted" }, "Click a sample for its tokens."));
  reveal(box, fromLink);
}

// -- one trajectory's tokens ---------------------------------------------------------------
const SOURCES = [
  ["logp", "recorded log-prob (generation)"],
  ["stage_logp", "recomputed log-prob (trainer, recorded stage)"],
  ["stage_ref_logp", "reference log-prob (recorded stage)"],
  // Computed here from the two above: the training-inference mismatch per token.
  ["delta", "Δ = trainer − engine log-prob"],
];
// Each source's scale: [value to colour, the legend's two ends, its gradient].
const LOGP_GRADIENT = "linear-gradient(to right, rgb(200,240,200), rgb(255,235,160), rgb(230,80,80))";
const LOGP_SCALE = [colour, "0 ", " −6 nats and below", LOGP_GRADIENT];
// Δ keeps its sign on a diverging scale: blue where the trainer's log-prob is
// below the engine's, red where above, white at 0; full colour at the step's
// 99th percentile of |Δ| (a step's gap, not a fixed 0.5 nats that paints a
// 1e-3 gap white and a 5-nat one like a 0.5-nat one).
const NEG = [33, 102, 172], POS = [215, 48, 39];
function diverging(u) {
  if (u === null || u === undefined || !isFinite(u)) return "transparent";
  const t = Math.min(1, Math.abs(u)), c = u < 0 ? NEG : POS;
  const mix = (a) => Math.round(255 + (a - 255) * t);
  return `rgb(${mix(c[0])},${mix(c[1])},${mix(c[2])})`;
}
function deltaOf(r) {
  if (r.logp && r.stage_logp && !r.delta) {
    r.delta = r.logp.map((e, k) => (isNum(e) && isNum(r.stage_logp[k]) ? r.stage_logp[k] - e : null));
  }
  return r.delta;
}
function deltaScale(step) {
  // The 99th percentile of |Δ| over the step's rows on the page, in nats.
  const d = D.details[step];
  if (d._dscale === undefined) {
    const all = d.rows.flatMap((r) => (deltaOf(r) || []).filter(isNum).map((x) => Math.abs(x) / 1000)).sort((a, b) => a - b);
    d._dscale = all.length ? Math.max(all[Math.min(all.length - 1, Math.floor(0.99 * all.length))], 1e-6) : 1;
  }
  return d._dscale;
}
function scaleOf(by) {
  if (by !== "delta") return LOGP_SCALE;
  const s = deltaScale(current.step);
  return [(d) => diverging(d / s), `Δ −${fmt(s)} `, ` +${fmt(s)} nats (the step's 99th percentile of |Δ|; beyond it, full colour)`,
    `linear-gradient(to right, rgb(${NEG}), rgb(255,255,255), rgb(${POS}))`];
}
function colour(lp) {
  // 0 nats (certain) green, -2 yellow, -6 and below red.
  if (lp === null || lp === undefined) return "transparent";
  const t = Math.max(0, Math.min(1, -lp / 6));
  const mix = (a, b, u) => Math.round(a + (b - a) * u);
  const [c0, c1, c2] = [[200, 240, 200], [255, 235, 160], [230, 80, 80]];
  const [a, b, u] = t < 1 / 3 ? [c0, c1, t * 3] : [c1, c2, (t - 1 / 3) * 1.5];
  return `rgb(${mix(a[0], b[0], u)},${mix(a[1], b[1], u)},${mix(a[2], b[2], u)})`;
}
// A token's text as the page shows it: its piece, or <id> where none was kept.
const pieceOf = (id) => (D.vocab[id] !== undefined ? D.vocab[id] : `<${id}>`);
// A trajectory of the step shown, its row in the table selected.
function openTrajectory(r, fromLink) {
  showTrajectory(r, document.querySelector(`#traj-rows tr[data-i="${r.i}"]`), fromLink);
}
function showTrajectory(r, tr, fromLink) {
  for (const x of document.querySelectorAll("tr.row.sel")) x.classList.remove("sel");
  if (tr) tr.classList.add("sel");
  // One numbering with the CLI: a trajectory is step, group (the trajectory dict:
  // a prompt and its samples) and sample (its row), the batch index beside them.
  if (!fromLink) link(`step=${current.step}&group=${r.group}&sample=${r.row}`);
  const d = D.details[current.step];
  const box = document.getElementById("traj");
  box.hidden = false;
  deltaOf(r);
  const have = SOURCES.filter(([k]) => r[k]);
  // The gap at first sight: Δ where the trainer's log-probs are there.
  let by = have.some(([k]) => k === "delta") ? "delta" : have.length ? have[0][0] : null;
  const tokens = el("div", { class: "tokens", id: "tokens" });
  const byLabel = el("span", { id: "coloured-by" });
  const [low, high] = [el("span", {}), el("span", {})];
  const bar = el("span", { class: "scale" });
  function paint() {
    const [paintOf, lowText, highText, gradient] = scaleOf(by);
    bar.style.backgroundImage = gradient;
    byLabel.textContent = by ? SOURCES.find((s) => s[0] === by)[1] : "";
    low.textContent = lowText;
    high.textContent = highText;
    tokens.replaceChildren(el("span", { class: "prompt", title: "prompt: outside the loss, in no figure" }, d.prompts[r.prompt]));
    const masked = new Set(r.masked || []);
    r.tokens.forEach((id, k) => {
      const text = pieceOf(id);
      if (masked.has(k)) {
        // Outside the loss after the prompt (a tool's output, an observation):
        // in place, dimmed, in no figure.
        tokens.append(el("span", { class: "tok masked", title: `token ${k}: id ${id}\noutside the loss (masked): in no figure` }, text));
        return;
      }
      const v = (key) => (r[key] && r[key][k] !== null && r[key][k] !== undefined ? r[key][k] / 1000 : null);
      const tip = [`token ${k}: id ${id}`, ...have.map(([key, label]) => `${label}: ${fmt(v(key))}`)];
      if (isNum(v("delta"))) tip.push(`importance ratio exp(Δ): ${fmt(Math.exp(v("delta")))}`);
      if (r.divergent_token === k) tip.push("the replay differs most here (first divergent stage)");
      const value = by ? v(by) : null;
      tokens.append(el("span", {
        class: "tok" + (r.divergent_token === k ? " divergent" : ""), title: tip.join("\n"),
        style: `background:${value === null ? "transparent" : paintOf(value)}`,
      }, text));
    });
    if (r.tokens_left_out) tokens.append(el("span", { class: "muted" }, ` … ${r.tokens_left_out} more tokens not on this page (--max-tokens)`));
  }
  const pick = have.length > 1 ? el("span", {}, "colour by ", el("select", { onchange: (e) => { by = e.target.value; paint(); } },
    have.map(([k, label]) => el("option", { value: k, selected: k === by ? "" : null }, label)))) : null;
  box.replaceChildren();
  add(box,
    el("h2", {}, `Step ${current.step}, group ${r.group}, sample ${r.row} (trajectory #${r.i} of the step's batch)`),
    el("p", {}, `reward ${fmt(r.reward)} · ${r.prompt_len} prompt + ${r.completion_len} completion tokens · versions ${range(r.versions)} · staleness ${range(r.staleness)}`),
    el("p", { class: "muted" }, have.length ? ["Completion tokens (the loss's) coloured by ", byLabel, ": ", low,
      bar, high, "; the prompt and tokens outside the loss, dimmed, are in no figure; hover a token for its values. ", pick] :
      "No log-probabilities recorded for this trajectory."),
    r.divergent_token !== undefined ? el("p", { class: "divergence" }, `The replay's first divergent stage differs most at completion token ${r.divergent_token} (outlined).`) : null,
    r.divergent_layer ? el("p", { class: "divergence" }, `Below the log-probs, the replay first computes something else in this sequence at ${r.divergent_layer.module}` +
      (r.divergent_layer.token !== undefined ? `, token ${r.divergent_layer.token} (prompt and completion counted from 0)` : "") + ".") : null,
    tokens, O ? alignedB(r) : null);
  paint();
  reveal(box, fromLink);
}

// -- search across steps ----------------------------------------------------------------------
const FOUND_LISTED = 200;
function matcher(q) {
  // A question in one of three forms; anything else is text.
  const byReward = q.match(/^reward\s*(:|=|>=|<=|>|<)\s*(-?[\d.]+(?:e-?\d+)?)$/i);
  if (byReward) {
    const [, op, x] = byReward, v = Number(x);
    const ops = { ":": (a) => a === v, "=": (a) => a === v, ">=": (a) => a >= v, "<=": (a) => a <= v, ">": (a) => a > v, "<": (a) => a < v };
    return [(r) => isNum(r.reward) && ops[op](r.reward), (r) => `reward ${fmt(r.reward)}`];
  }
  const byId = q.match(/^id:(\d+)$/i);
  if (byId) {
    const id = Number(byId[1]);
    return [(r) => r.tokens.includes(id), (r) => `token ${r.tokens.indexOf(id)} of the completion is id ${id}`];
  }
  const text = q.toLowerCase();
  return [(r, d) => (d.prompts[r.prompt] + "\n" + r.completion).toLowerCase().includes(text), (r, d) => {
    const where = r.completion.toLowerCase().indexOf(text);
    const from = where >= 0 ? r.completion : d.prompts[r.prompt];
    const at = Math.max(0, from.toLowerCase().indexOf(text) - 40);
    return (where >= 0 ? "completion: …" : "prompt: …") + from.slice(at, at + 120) + "…";
  }];
}
function search(q) {
  const found = document.getElementById("found");
  q = q.trim();
  if (!q) { found.replaceChildren(); return; }
  const [test, why] = matcher(q);
  const hits = [];
  for (const s of D.steps) {
    const d = D.details[s];
    if (d) for (const r of d.rows) if (test(r, d)) hits.push([s, r, d]);
  }
  found.replaceChildren(
    el("p", { class: "muted", id: "found-count" }, `${hits.length} trajectories on this page match` +
      (hits.length > FOUND_LISTED ? ` (the first ${FOUND_LISTED} listed)` : "")),
    hits.length ? el("table", { id: "found-table" },
      el("tr", {}, ["step", "group", "sample", "reward", "where"].map((h) => el("th", {}, h))),
      hits.slice(0, FOUND_LISTED).map(([s, r, d]) => el("tr", { class: "row", onclick: () => openFound(s, r) },
        el("td", { class: "num" }, s), el("td", { class: "num" }, r.group), el("td", { class: "num" }, r.row),
        el("td", { class: "num" }, fmt(r.reward)), el("td", { class: "text" }, why(r, d))))) : null);
}
function openFound(s, r) {
  showStep(s);
  openTrajectory(r);
}

// -- two recordings: a trajectory's pair in b, aligned ---------------------------------------
function alignedB(r) {
  const p = pairOf(current.step, r);
  const box = el("div", { id: "pair-b" });
  if (!p || !p.row) {
    add(box, el("p", { class: "muted", id: "pair-note" }, O.compared[current.step]
      ? `b has no sample of this prompt at step ${current.step} (or fewer of them): nothing to set beside it.` : `b does not hold step ${current.step}.`));
    return box;
  }
  const b = p.row;
  // The first completion token that differs (or where one ends first).
  const n = Math.min(r.tokens.length, b.tokens.length);
  let k = 0;
  while (k < n && r.tokens[k] === b.tokens[k]) k++;
  const same = k === n && r.tokens.length === b.tokens.length;
  const strip = (row, id) => el("div", { class: "tokens", id }, row.tokens.map((t, j) =>
    el("span", { class: "tok" + (j === k && !same ? " first-diff" : "") + ((row.masked || []).includes(j) ? " masked" : "") }, pieceOf(t))));
  const note = same
    ? `The same ${n} completion tokens in a and b` + (r.tokens_left_out || b.tokens_left_out ? " (as far as this page holds them)." : ".")
    : `First differing completion token: ${k} (a: ${k < r.tokens.length ? pieceOf(r.tokens[k]) : "ended"}, b: ${k < b.tokens.length ? pieceOf(b.tokens[k]) : "ended"}), outlined in both.`;
  add(box, el("h2", {}, `Its pair in ${O.label}: group ${p.group}, sample ${p.sample}`),
    el("p", { id: "pair-note", class: same ? "muted" : "divergence" }, note,
      ` Reward a ${fmt(r.reward)}, b ${fmt(b.reward)}.`),
    el("div", { class: "muted" }, "a:"), strip(r, "tokens-a"), el("div", { class: "muted" }, "b:"), strip(b, "tokens-b"));
  return box;
}

// -- stage report and manifest ----------------------------------------------------------------
function stageReport() {
  const sr = R && R.stage_report;
  if (!sr) return;
  const box = document.getElementById("stages");
  box.hidden = false;
  const by = (s) => {
    if (isNum(s.max_abs_diff)) return `max abs diff ${fmt(s.max_abs_diff)}, rel ${fmt(s.max_rel_diff)} at ${JSON.stringify(s.position)}`;
    if (isNum(s.abs_diff)) return `recorded ${fmt(s.recorded, 8)}, replayed ${fmt(s.replayed, 8)} (abs diff ${fmt(s.abs_diff)})`;
    if (isNum(s.rel_diff)) return `recorded ${fmt(s.recorded, 8)}, replayed ${fmt(s.replayed, 8)} (rel diff ${fmt(s.rel_diff)})`;
    return "";
  };
  add(box, el("h2", {}, `Stage report of step ${sr.step} (first divergent step)`),
    sr.line ? el("p", {}, sr.line) : el("p", { class: "muted" }, "The replay compared no stage digests at this step (stages.json absent)."),
    el("table", { id: "stage-table" },
      el("tr", {}, ["stage", "status", "where", "by how much", "differing / compared"].map((h) => el("th", {}, h))),
      sr.stages.map((s) => el("tr", { class: s.status === "differs" ? "differs" : null },
        el("td", {}, s.stage), el("td", { style: s.status === "differs" ? "color:var(--pin);font-weight:600" : null }, s.status),
        el("td", {}, (s.where || "") + (s.below ? `; below it, first at ${s.below}` : "")), el("td", {}, by(s)),
        el("td", { class: "num" }, s.compared !== undefined ? `${s.differing || 0} / ${s.compared}` : "")))));
}
function manifest() {
  const m = D.manifest;
  const kv = (obj) => el("table", { class: "kv" }, Object.entries(obj).map(([k, v]) =>
    el("tr", {}, el("td", {}, k), el("td", {}, v === null || v === undefined ? "–" : typeof v === "object" ? JSON.stringify(v) : String(v)))));
  add(document.getElementById("manifest"), el("h2", {}, "Manifest"),
    kv({ experiment: m.experiment, trial: m.trial, created: m.created, "format version": m.format_version,
      ...m.versions, recording: D.recording }),
    el("h2", {}, "Layout"), kv(m.layout),
    el("h2", {}, "Determinism settings of the dump run"), Object.keys(m.determinism || {}).length ? kv(m.determinism) : el("p", { class: "muted" }, "not recorded"),
    el("details", {}, el("summary", {}, "the whole recorded config"), el("pre", { class: "config" }, JSON.stringify(m.config, null, 1))));
}

// -- links: #step=2&group=5&sample=0 opens that step and trajectory (the CLI prints
// them), #step=2&group=5 the group; each click adds one to the history, so Back and
// Forward walk the views.
// #step=2&traj=20 (the batch index) still opens what it did.
function link(hash) {
  if (location.hash === "#" + hash) return;
  history.pushState(null, "", "#" + hash);
}
// A view opened by a click glides to it; one a link opens is there at once, so the
// page's first paint is the trajectory the link names, not the charts above it.
function reveal(box, fromLink) {
  box.scrollIntoView({ behavior: fromLink ? "auto" : "smooth", block: "start" });
}
function missing(text) {
  const box = document.getElementById("link-note");
  box.hidden = !text;
  box.textContent = text || "";
}
function follow(hash) {
  missing(null);
  const want = Object.fromEntries(new URLSearchParams(hash.replace(/^#/, "")));
  if (want.step === undefined) return;
  const s = Number(want.step);
  if (!D.details[s]) {
    const have = Object.keys(D.details).map(Number).sort((a, b) => a - b);
    missing(`The link names step ${want.step}, which this page does not hold (its steps: ${range([have[0], have[have.length - 1]])}).`);
    return;
  }
  showStep(s, true);
  const rows = D.details[s].rows;
  let r = null;
  if (want.group !== undefined && want.sample === undefined) {
    const g = Number(want.group);
    if (D.details[s].groups.some((x) => x.group === g)) showGroup(g, true);
    else missing(`The link names group ${want.group} of step ${s}, which has ${D.details[s].groups.length} groups.`);
    return;
  }
  if (want.group !== undefined) {
    r = rows.find((x) => x.group === Number(want.group) && x.row === Number(want.sample));
    if (!r) missing(`The link names group ${want.group}, sample ${want.sample} of step ${s}, which this page does not hold (${rows.length} trajectories of the step are on it).`);
  } else if (want.traj !== undefined) {
    r = rows.find((x) => x.i === Number(want.traj));
    if (!r) missing(`The link names trajectory #${want.traj} of step ${s}, which this page does not hold.`);
  }
  if (!r) return;
  openTrajectory(r, true);
}

header(); verdict(); notes(); legend(); charts(); steps(); stageReport(); manifest();
document.getElementById("search").addEventListener("input", (e) => search(e.target.value));
// With no link, a step whose loss or gradient is not finite opens on its origin.
function originLink() {
  const s = Object.keys(D.details).map(Number).sort((a, b) => a - b)
    .find((k) => D.details[k].blame && D.details[k].blame.origin);
  if (s === undefined) return "";
  const o = D.details[s].blame.origin;
  return `#step=${s}&group=${o.group}&sample=${o.sample}`;
}
follow(location.hash || originLink());
window.addEventListener("popstate", () => follow(location.hash));
