// The cluster page: reads /ui/state every second and draws it. Text goes in as text (textContent),
// never as markup: a model's name or a cause is data. Charts are uPlot's (vendored, VENDORED.md).
"use strict";

const EVERY_MS = 1000;
const charts = new Map();

function cell(row, text, cls) {
  const td = document.createElement("td");
  td.textContent = text === null || text === undefined ? "" : String(text);
  if (cls) td.className = cls;
  row.appendChild(td);
  return td;
}

function clock(at) {
  return new Date(at * 1000).toLocaleTimeString();
}

function gib(bytes) {
  return (bytes / 2 ** 30).toFixed(1) + " GiB";
}

function stateClass(state) {
  if (state.startsWith("serving")) return "state-serving";
  if (state === "loading") return "state-loading";
  return "state-stopped";
}

// a table's body drawn again: a row per item, named by `key` in its data, filled by `fill`
function drawRows(selector, items, key, fill) {
  const body = document.querySelector(selector);
  body.replaceChildren();
  for (const item of items) {
    const row = document.createElement("tr");
    row.dataset[key] = item.name;
    fill(row, item);
    body.appendChild(row);
  }
}

function drawModels(models) {
  drawRows("#models tbody", models, "model", (row, m) => {
    cell(row, m.name);
    cell(row, m.recipe);
    cell(row, m.node);
    const state = m.state === "unknown" ? "not asked for since the gateway started" : m.state;
    cell(row, state + (m.on_demand ? " (on demand)" : ""), "state " + stateClass(m.state));
    cell(row, m.cause || "", "cause");
    cell(row, m.in_flight);
    cell(row, m.waiting);
    cell(row, m.ttl_left_s === null ? "" : m.ttl_left_s + " s");
    const r = m.receipt;
    cell(row, r ? `${r.since || ""} ${r.at || ""}: ready in ${r.http_ready_s} s` : "");
  });
}

function drawNode(node) {
  const memory = node.memory;
  document.getElementById("node").textContent =
    (node.name || "this node") +
    (memory ? `: ${gib(memory.available_bytes)} of ${gib(memory.total_bytes)} available` : "");
  const list = document.getElementById("twins");
  list.replaceChildren();
  for (const twin of node.twins) {
    const li = document.createElement("li");
    li.textContent = `cable twin ${twin.name}: ${twin.carrier ? "carrier" : "no carrier"}`;
    li.className = twin.carrier ? "up" : "down";
    list.appendChild(li);
  }
}

function claimText(c) {
  const now = c.state === "unknown" ? "not asked for" : c.state.replace(" on demand", "");
  const state = c.on_demand ? ` (on demand: ${now})` : "";
  const use = c.use ? `: uses ${gib(c.use.use_bytes)}` + (c.use.limit_bytes ? ` of ${gib(c.use.limit_bytes)}` : "") : "";
  return `${c.model} ${gib(c.bytes)}${state}${use}`;
}

function drawNodes(nodes) {
  drawRows("#nodes tbody", nodes, "node", (row, n) => {
    cell(row, n.name + (n.here ? " (the gateway's)" : ""));
    const live = n.memory ? `, ${gib(n.memory.available_bytes)} available now` : "";
    cell(row, n.total_bytes ? `${gib(n.total_bytes)} less ${gib(n.reserve_bytes)} kept${live}` : live);
    cell(row, gib(n.counted_bytes));
    cell(row, n.on_demand_budget_bytes == null ? "" : gib(n.on_demand_budget_bytes));
    const claims = cell(row, "");
    for (const c of n.claims) {
      const line = document.createElement("div");
      line.textContent = claimText(c);
      if (c.use && c.use.limit_bytes && c.use.use_bytes > 0.9 * c.use.limit_bytes) line.className = "near";
      claims.appendChild(line);
    }
  });
}

function lastMinutes(min, max) {
  const end = Number.isFinite(max) && max > 0 ? max : Date.now() / 1000;
  const start = Number.isFinite(min) && min > 0 ? min : end - 900;
  return [Math.max(start, end - 900), end + 5];
}

function drawCharts(models) {
  if (typeof uPlot === "undefined") return;
  for (const m of models) {
    const h = m.history;
    const data = [
      h.map((p) => p.t),
      h.map((p) => p.requests),
      h.map((p) => p.errors),
      h.map((p) => p.latency_p50),
      h.map((p) => p.latency_p95),
      h.map((p) => p.first_byte_p95),
    ];
    let chart = charts.get(m.name);
    if (!chart) {
      const box = document.createElement("div");
      box.className = "chart";
      const title = document.createElement("h3");
      title.textContent = m.name;
      box.appendChild(title);
      document.getElementById("charts").appendChild(box);
      chart = new uPlot(
        {
          width: 460,
          height: 180,
          series: [
            {},
            { label: "requests", stroke: "#1f77b4", scale: "n" },
            { label: "errors", stroke: "#d62728", scale: "n" },
            { label: "p50 s", stroke: "#2ca02c", scale: "s" },
            { label: "p95 s", stroke: "#ff7f0e", scale: "s" },
            { label: "first byte p95 s", stroke: "#9467bd", scale: "s", dash: [4, 4] },
          ],
          // the last fifteen minutes, whatever the points (one point alone would stretch the axis to years;
          // none at all, a model not asked for yet, would draw 1970): the page's clock when there are none
          scales: { x: { time: true, range: (u, min, max) => lastMinutes(min, max) } },
          axes: [{}, { scale: "n" }, { scale: "s", side: 1, grid: { show: false } }],
        },
        data,
        box,
      );
      charts.set(m.name, chart);
    } else {
      chart.setData(data);
    }
  }
}

function drawEvents(events) {
  const list = document.getElementById("events");
  list.replaceChildren();
  for (const e of events) {
    const li = document.createElement("li");
    li.textContent = `${clock(e.at)}  ${e.what}`;
    list.appendChild(li);
  }
}

async function tick() {
  const updated = document.getElementById("updated");
  try {
    const reply = await fetch("/ui/state", { cache: "no-store", credentials: "same-origin" });
    if (!reply.ok) throw new Error(`the gateway answered ${reply.status}`);
    const state = await reply.json();
    drawNode(state.node);
    drawNodes(state.nodes || []);
    drawModels(state.models);
    drawCharts(state.models);
    drawEvents(state.events);
    updated.textContent = `as of ${clock(state.at)}`;
    updated.className = "";
  } catch (err) {
    updated.textContent = `not updated: ${err.message}`;
    updated.className = "stale";
  }
}

tick();
setInterval(tick, EVERY_MS);
