// The workers overview (workers.js draws it first): one compact row per worker, so that the nine workers of an
// archive fit a laptop screen with their Run buttons — its name, what it is doing (idle, queued, running, not
// ready), its queue, its last run, whether its output is fresh, whether it is paused, and Run. A row opens the
// worker's detailed card in a row of its own beneath it; which cards are open is kept for the tab (session
// storage), so that going to a run and back, or reloading, shows the same cards.

import { h, idFor, replace } from "./dom.js";
import { ago, count, progressFacts, readinessFacts, stateBadge } from "./format.js";

const OPEN_KEY = "scrinalia.open-workers";
const COLUMNS = ["Worker", "State", "Queue", "Last run", "Freshness", "Paused", "Run"];

/** The names of the workers whose cards are open in this tab. */
function openNames() {
  try {
    return new Set(JSON.parse(sessionStorage.getItem(OPEN_KEY) ?? "[]"));
  } catch {
    return new Set();
  }
}

function keepOpen(name, open) {
  const names = openNames();
  if (open) names.add(name);
  else names.delete(name);
  sessionStorage.setItem(OPEN_KEY, JSON.stringify([...names]));
}

/** The table and its body; rows go in with `append`/`replace` from dom.js. */
export function overviewTable() {
  const body = h("tbody", { id: "workers" });
  const table = h("table", { class: "overview", "aria-label": "Workers" },
    h("thead", null, h("tr", null, COLUMNS.map((c, i) => h("th", {
      scope: "col", class: i === COLUMNS.length - 1 ? "run-col" : null,
    }, i === COLUMNS.length - 1 ? h("span", { class: "visually-hidden" }, c) : c)))),
    body);
  return { wrap: h("div", { class: "table-wrap overview-wrap" }, table), body };
}

/**
 * A worker's row and the row beneath it that holds its card (`card`, an element). `onRun` asks for a run with
 * the worker's configuration as it is.
 */
export function overviewRow(w, card, onRun) {
  const id = idFor("worker", w.name);
  const detailId = `${id}-detail`;
  const detail = h("tr", { class: "worker-detail", id: detailId, dataset: { worker: w.name } },
    h("td", { colspan: COLUMNS.length }, card));
  const toggle = h("button", {
    type: "button", class: "expand", "aria-expanded": "false", "aria-controls": detailId,
    title: `Show or hide the details of ${w.name}`,
  }, h("span", { class: "chevron", "aria-hidden": "true" }), h("span", { class: "title" }, w.title || w.name),
  w.title ? [" ", h("code", { class: "name" }, w.name)] : null);
  const cells = {
    state: h("td", { class: "state-cell" }),
    queue: h("td", { class: "queue-cell" }),
    last: h("td", { class: "last-cell" }),
    freshness: h("td", { class: "freshness-cell" }),
    paused: h("td", { class: "paused-cell" }),
  };
  const runButton = h("button", {
    type: "button", class: "run primary", "aria-label": `Run ${w.name}`, "aria-describedby": `${id}-reason`,
    onclick: () => onRun(w.name),
  }, "Run");
  const runCell = h("td", { class: "run-col" });
  const tr = h("tr", { class: "worker-row", dataset: { worker: w.name } },
    h("th", { scope: "row", class: "worker-cell" }, toggle),
    cells.state, cells.queue, cells.last, cells.freshness, cells.paused, runCell);
  const row = { tr, detail, toggle, cells, runCell, runButton };
  const setOpen = (open) => {
    toggle.setAttribute("aria-expanded", String(open));
    tr.classList.toggle("open", open);
    detail.hidden = !open;
    keepOpen(w.name, open);
  };
  row.open = () => setOpen(true);
  toggle.addEventListener("click", () => setOpen(detail.hidden));
  // The whole row opens the card, except where it has a control or a link of its own.
  tr.addEventListener("click", (e) => {
    if (!e.target.closest("button, a, input, select, textarea, summary")) setOpen(detail.hidden);
  });
  setOpen(openNames().has(w.name));
  return row;
}

/**
 * Draws a worker's row from its view `w`: `run` is `{ disabled, reason, shown }` for the Run button (`shown`
 * false for a viewer, who has none), `nowMs` the database clock.
 */
export function renderRow(row, w, run, nowMs) {
  const { cells } = row;
  replace(cells.state, stateCell(w));
  replace(cells.queue, queueCell(w));
  replace(cells.last, lastCell(w.name, w.last_finished, nowMs));
  replace(cells.freshness, freshnessCell(w.freshness));
  replace(cells.paused, pausedCell(w.paused));
  // A viewer gets no Run control at all, not a disabled one.
  if (run.shown && !row.runButton.parentNode) row.runCell.append(row.runButton);
  if (!run.shown) row.runButton.remove();
  row.runButton.disabled = run.disabled;
  row.runButton.title = run.reason || `Run ${w.name} with its configuration as it is`;
  row.tr.dataset.state = stateOf(w);
  row.tr.dataset.paused = String(!!w.paused);
  row.tr.dataset.stale = String(!!w.freshness?.breached);
}

/** Redraws the rows' relative times ("3 min ago") on the database clock. */
export function tickRows(rows, nowMs) {
  for (const row of rows) {
    for (const el of row.cells.last.querySelectorAll("time[data-at]")) {
      el.textContent = ago((nowMs - Date.parse(el.dataset.at)) / 1000);
    }
  }
}

/** `running`, `queued`, `not-ready` or `idle`. */
function stateOf(w) {
  if (w.in_flight) return w.in_flight.state;
  const ready = readinessFacts(w.readiness).state;
  return ready === "not-ready" ? "not-ready" : "idle";
}

function stateCell(w) {
  const r = w.in_flight;
  if (r) {
    // How far it is, when it says: the card has the bar, the rate and the time left.
    const f = progressFacts(r, 0);
    const far = r.state === "running" && f.known && f.total != null
      ? [" ", h("span", { class: "row-progress" }, `${count(f.done)} / ${count(f.total)}`)] : null;
    return [stateBadge(r.state), far, " ",
      h("a", { href: `#/runs/${r.id}`, "aria-label": `The ${r.state} run of ${w.name}` }, "run")];
  }
  const f = readinessFacts(w.readiness);
  if (f.state === "not-ready") {
    return h("span", { class: "badge readiness-not-ready", title: f.sentence ?? "" }, "not ready");
  }
  return h("span", { class: "idle muted" }, "idle");
}

function queueCell(w) {
  const q = w.queue;
  const parts = [];
  if (!q) parts.push(h("span", { class: "muted" }, "not measured"));
  else if (q.error) parts.push(h("span", { class: "warn", title: q.error }, "count failed"));
  else if (q.pending != null) {
    parts.push(h("span", { class: "pending", dataset: { pending: q.pending } }, `${count(q.pending)} pending`));
  } else parts.push(h("span", { class: "muted", title: q.unmeasurable ?? "" }, "not countable"));
  // One run in flight at a time: a queued one is the worker's queue of runs.
  if (w.in_flight?.state === "queued") parts.push(" · ", h("span", { class: "queued-runs" }, "1 run queued"));
  return parts;
}

function lastCell(name, r, nowMs) {
  if (!r) return h("span", { class: "muted" }, "never run");
  const at = r.finished_at;
  return [stateBadge(r.state), " ",
    at ? h("time", { datetime: at, title: at, dataset: { at } }, ago((nowMs - Date.parse(at)) / 1000)) : null, " ",
    h("a", { href: `#/runs/${r.id}`, "aria-label": `The last run of ${name}` }, "details")];
}

function freshnessCell(f) {
  if (!f) return h("span", { class: "muted" }, "no target");
  if (f.breached) {
    return h("span", { class: "stale warn", dataset: { breached: "true" } }, `stale: ${f.reason ?? "too old"}`);
  }
  const age = f.age_seconds != null ? ` (${span(f.age_seconds)} of ${span(f.within_seconds)})` : "";
  return h("span", { class: "fresh ok-text", dataset: { breached: "false" } }, `fresh${age}`);
}

/** A length of time for people, rounded: `45 s`, `30 min`, `24 h`, `3 days`. */
function span(seconds) {
  const s = Math.max(0, Math.round(seconds));
  if (s < 120) return `${s} s`;
  if (s < 7200) return `${Math.round(s / 60)} min`;
  if (s < 172800) return `${Math.round(s / 3600)} h`;
  return `${Math.round(s / 86400)} days`;
}

function pausedCell(p) {
  if (!p) return h("span", { class: "muted" }, "no");
  const who = p.automatic ? "automatically" : `by ${p.by}`;
  return h("span", { class: "badge paused", title: `${p.reason} (paused ${who})`, dataset: { automatic: p.automatic } },
    "Paused");
}
