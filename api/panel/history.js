// A worker's history, a section of its card (workers.js): closed at first, read when opened (and again when a
// run of the worker ends while it is open), over 7 or 30 days — items processed per day, runs per day by
// outcome, the success rate, and the median and 95th percentile duration, as small inline-SVG charts
// (charts.js) from `GET /api/workers/<name>/history?days=N`.

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
  const summary = h("p", { class: "history-summary" },
    `${count(history.runs)} runs ended · ${count(history.succeeded)} succeeded · ${count(history.failed)} failed`,
    history.interrupted ? ` · ${count(history.interrupted)} interrupted` : "",
    history.cancelled ? ` · ${count(history.cancelled)} cancelled` : "",
    ` · ${count(history.items)} items`);
  return [summary, h("div", { class: "history-charts" }, items, runs, rate, durations)];
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
