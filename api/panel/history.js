// A worker's history, a section of its card (workers.js): closed at first, read when opened (and again when a
// run of the worker ends while it is open), over 7 or 30 days — items processed per day, runs per day by
// outcome, the success rate, the median and 95th percentile duration, and CPU-hours per day, as small inline-SVG
// charts (charts.js), then what the runs cost per day (CPU, peak memory p95, tokens, cost, and each per item) as
// a table, from `GET /api/workers/<name>/history?days=N`.

import { ApiError, api } from "./api.js";
import { barChart, meterChart, stackedChart } from "./charts.js";
import { debouncer, h, idFor, replace } from "./dom.js";
import { TERMINAL, count, duration } from "./format.js";

const WINDOWS = [7, 30];
const OUTCOMES = [
  { name: "succeeded", label: "succeeded" },
  { name: "failed", label: "failed" },
  { name: "interrupted", label: "interrupted" },
  { name: "cancelled", label: "cancelled" },
];

/** `2026-12-01` as `Tue 1 Dec`, read as a UTC day (the API's days are UTC). */
function dayLabel(day) {
  const d = new Date(`${day}T00:00:00Z`);
  return d.toLocaleDateString("en-GB", { weekday: "short", day: "numeric", month: "short", timeZone: "UTC" });
}

function percent(rate) {
  return rate == null ? "—" : `${(rate * 100).toFixed(1)} %`;
}

/** `310 MiB`, `4.0 GiB`. */
function size(bytes) {
  const gib = 1024 ** 3;
  return bytes >= gib ? `${(bytes / gib).toFixed(1)} GiB` : `${Math.round(bytes / 1024 ** 2)} MiB`;
}

/** CPU time given in hours, in the unit that reads best: `850 ms`, `4 min 05 s`, `12.5 h`. */
function cpuText(hours) {
  return hours >= 48 ? `${hours.toFixed(1)} h` : duration(hours * 3600 * 1000);
}

/** A figure with at most four significant digits: `0.0042`, `112.5`, `1,235`. */
function figure(n) {
  return n.toLocaleString("en-US", { maximumSignificantDigits: 4 });
}

/** Money by currency (`{ EUR: 0.5, USD: 2 }`), never added across currencies: `0.5 EUR + 2 USD`, or `—`. */
function money(cost) {
  const parts = Object.entries(cost ?? {}).map(([currency, amount]) => `${figure(amount)} ${currency}`);
  return parts.length ? parts.join(" + ") : "—";
}

/** `2026-12-01` as `1 Dec`, for the table. */
function shortDay(day) {
  return new Date(`${day}T00:00:00Z`).toLocaleDateString("en-GB", { day: "numeric", month: "short", timeZone: "UTC" });
}

/** Lines in one cell (each its own block), or `—` when there are none. */
function lines(parts) {
  return parts.length ? parts.map((p) => h("div", null, p)) : "—";
}

/** What one item cost, in words: `300 tokens in, 75 out · 0.0042 EUR · 2 ms CPU`. */
function perItemText(p) {
  const parts = [];
  if (p.tokens_in != null) parts.push(`${figure(p.tokens_in)} tokens in, ${figure(p.tokens_out ?? 0)} out`);
  if (Object.keys(p.cost).length) parts.push(money(p.cost));
  if (p.cpu_seconds != null) parts.push(`${duration(p.cpu_seconds * 1000)} CPU`);
  return parts.join(" · ");
}

const USAGE_COLUMNS = [
  { field: "cpu", label: "CPU", cell: (u) => cpuText(u.cpu_hours) },
  { field: "peak", label: "Memory p95",
    cell: (u) => (u.peak_memory_p95_bytes == null ? "—" : size(u.peak_memory_p95_bytes)) },
  { field: "tokens", label: "Tokens",
    cell: (u) => lines(u.tokens_in || u.tokens_out ? [`${count(u.tokens_in)} in`, `${count(u.tokens_out)} out`] : []) },
  { field: "cost", label: "Cost", cell: (u) => money(u.cost) },
];

/**
 * What the runs cost: rows per day that has runs with a usage, newest first, and the window's total; under a
 * day whose runs reported items, what one item cost.
 */
function usageTable(history) {
  const days = history.per_day.filter((d) => d.usage.runs > 0).reverse();
  if (!days.length) {
    return h("p", { class: "muted history-usage-none" }, "No run of this window recorded what it cost.");
  }
  const rows = (key, label, u) => [
    h("tr", { dataset: { day: key, runs: u.runs } },
      h("th", { scope: "row", title: `${count(u.runs)} runs measured` }, label),
      USAGE_COLUMNS.map((c) => h("td", { dataset: { field: c.field } }, c.cell(u)))),
    u.per_item && h("tr", { class: "per-item", dataset: { day: key } },
      h("th", { scope: "row" }, "per item"),
      h("td", { colspan: USAGE_COLUMNS.length, dataset: { field: "per_item" } }, perItemText(u.per_item))),
  ];
  const table = h("table", { class: "counts history-usage", dataset: { chart: "usage" } },
    h("caption", null, `What the runs cost, last ${history.days} days`),
    h("thead", null, h("tr", null, h("th", { scope: "col" }, "Day"),
      USAGE_COLUMNS.map((c) => h("th", { scope: "col" }, c.label)))),
    h("tbody", null, days.map((d) => rows(d.day, shortDay(d.day), d.usage))),
    h("tfoot", null, rows("window", `${history.days} days`, history.usage)));
  const note = h("p", { class: "muted history-usage-note" },
    `${count(history.usage.runs)} runs measured. Memory: the 95th percentile of the runs' peaks. Per item: `,
    "of the runs that reported items, over the items they processed (succeeded or failed).");
  return h("div", { class: "history-usage-wrap" }, table, note);
}

/** The figures of one history, as charts. */
export function renderHistory(history) {
  const days = history.per_day;
  const items = barChart({
    kind: "items",
    title: `Items processed per day, last ${history.days} days`,
    headers: ["Day", "Items"],
    values: days.map((d) => ({ key: d.day, label: dayLabel(d.day), value: d.items, text: `${count(d.items)} items` })),
  });
  const runs = stackedChart({
    kind: "outcomes",
    title: `Runs per day by outcome, last ${history.days} days`,
    series: OUTCOMES,
    values: days.map((d) => ({ key: d.day, label: dayLabel(d.day), parts: d })),
  });
  const rate = meterChart({
    kind: "success",
    title: "Success rate (succeeded of every run that ended)",
    max: 1,
    values: [{ key: "rate", label: "rate", value: history.success_rate, text: percent(history.success_rate) }],
  });
  const d = history.durations;
  const text = (ms) => (ms == null ? "—" : duration(ms));
  const durations = meterChart({
    kind: "durations",
    title: `Duration of the ${count(d.runs)} successful runs`,
    values: [
      { key: "p50", label: "p50", value: d.p50_ms, text: text(d.p50_ms) },
      { key: "p95", label: "p95", value: d.p95_ms, text: text(d.p95_ms) },
    ],
  });
  const cpu = barChart({
    kind: "cpu",
    title: `CPU per day, last ${history.days} days`,
    headers: ["Day", "CPU"],
    // In milliseconds: the chart scales to at least 1, which would flatten a day of a few CPU-seconds in hours.
    values: days.map((d) => ({
      key: d.day, label: dayLabel(d.day), value: Math.round(d.usage.cpu_hours * 3600 * 1000),
      text: cpuText(d.usage.cpu_hours),
    })),
  });
  const u = history.usage;
  const summary = h("p", { class: "history-summary" },
    `${count(history.runs)} runs ended · ${count(history.succeeded)} succeeded · ${count(history.failed)} failed`,
    history.interrupted ? ` · ${count(history.interrupted)} interrupted` : "",
    history.cancelled ? ` · ${count(history.cancelled)} cancelled` : "",
    ` · ${count(history.items)} items`,
    u.runs ? ` · ${cpuText(u.cpu_hours)} CPU` : "",
    u.tokens_in || u.tokens_out ? ` · ${count(u.tokens_in + u.tokens_out)} tokens` : "",
    Object.keys(u.cost).length ? ` · ${money(u.cost)}` : "");
  return [summary, h("div", { class: "history-charts" }, items, runs, rate, durations, cpu), usageTable(history)];
}

/** The History sections of the workers view; `section(name)` makes one per card. */
export function createHistory() {
  const sections = new Map(); // worker → { details, load }
  const debounce = debouncer(500);
  let closed = false;

  function section(worker) {
    const id = idFor("history", worker);
    let days = WINDOWS[0];
    let loaded = false;
    const body = h("div", { class: "history-body", id: `${id}-body`, "aria-live": "polite", "aria-busy": "false" });
    const radios = WINDOWS.map((n) => h("label", { class: "window" },
      h("input", {
        type: "radio", name: `${id}-days`, value: n, checked: n === days,
        onchange: () => {
          days = n;
          load();
        },
      }), ` ${n} days`));
    const windows = h("fieldset", { class: "history-window" }, h("legend", null, "Window"), radios);
    const details = h("details", { class: "worker-history", id, dataset: { worker } },
      h("summary", null, "History"), windows, body);
    details.addEventListener("toggle", () => {
      if (details.open && !loaded) load();
    });

    async function load() {
      loaded = true;
      body.setAttribute("aria-busy", "true");
      try {
        const history = await api(`/api/workers/${encodeURIComponent(worker)}/history?days=${days}`);
        if (closed || history.days !== days) return;
        details.dataset.days = String(days);
        replace(body, renderHistory(history));
      } catch (e) {
        if (!(e instanceof ApiError)) throw e;
        replace(body, h("p", { class: "error" }, e.message));
      } finally {
        body.setAttribute("aria-busy", "false");
      }
    }

    sections.set(worker, { details, load });
    return details;
  }

  return {
    section,
    /** A run of the worker that ended changes its history: an open section is read again. */
    onEvent(ev) {
      if (ev.kind !== "run" || !TERMINAL.has(ev.state)) return;
      const s = sections.get(ev.worker);
      if (s?.details.open) debounce(ev.worker, s.load);
    },
    unmount() {
      closed = true;
      debounce.cancel();
    },
  };
}
