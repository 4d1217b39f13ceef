// Formatting of times, durations, states, sources and result counts, and the badges that show them.

import { h } from "./dom.js";

const pad = (n, w = 2) => String(n).padStart(w, "0");

/** A local date and time, `2026-01-31 14:05:09`. */
export function dateTime(iso) {
  const d = new Date(iso);
  const day = `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}`;
  return `${day} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

/**
 * A `<time>` element with the local date and time, and the exact instant as its machine-readable value; a dash
 * for a moment that has not come (a run not yet started, say).
 */
export function timeEl(iso) {
  if (!iso) return "—";
  return h("time", { datetime: iso, title: iso }, dateTime(iso));
}

/** A duration for people: `850 ms`, `12.3 s`, `4 min 05 s`, `2 h 03 min`. */
export function duration(ms) {
  ms = Math.max(0, Math.round(ms));
  if (ms < 1000) return `${ms} ms`;
  const s = ms / 1000;
  if (s < 60) return `${s.toFixed(s < 10 ? 2 : 1)} s`;
  const total = Math.round(s);
  const m = Math.floor(total / 60);
  if (m < 60) return `${m} min ${pad(total % 60)} s`;
  const hours = Math.floor(m / 60);
  if (hours < 48) return `${hours} h ${pad(m % 60)} min`;
  return `${Math.floor(hours / 24)} days ${hours % 24} h`;
}

/** How long ago, from a number of seconds: `just now`, `42 s ago`, `3 min ago`. */
export function ago(seconds) {
  if (seconds < 2) return "just now";
  if (seconds < 60) return `${Math.round(seconds)} s ago`;
  if (seconds < 3600) return `${Math.round(seconds / 60)} min ago`;
  if (seconds < 48 * 3600) return `${Math.round(seconds / 3600)} h ago`;
  return `${Math.round(seconds / 86400)} days ago`;
}

/** A whole number with thousands separators. */
export function count(n) {
  return n.toLocaleString("en-US");
}

const SOURCE_TITLES = {
  explicit: "Given with the run request",
  override: "From the worker's persisted override",
  default: "The catalogue default",
  external: "Configured elsewhere, not here",
};

/** The badge saying where a configuration value comes from. */
export function sourceBadge(source) {
  if (!source) return null;
  return h("span", { class: `badge source source-${source}`, title: SOURCE_TITLES[source] }, source);
}

/**
 * What a worker's last `check` said: a state (`ready`, `not-ready`, `failed`, or `unknown` before any check), a
 * word for its badge, and the sentence that goes with it (what is missing, or why the check failed).
 */
export function readinessFacts(r) {
  if (!r) return { state: "unknown", word: "not checked yet", sentence: null };
  if (r.ready === true) return { state: "ready", word: "ready", sentence: null };
  if (r.ready === false) {
    return { state: "not-ready", word: "not ready", sentence: r.reason ?? "Its check says it is not ready." };
  }
  return { state: "failed", word: "check failed", sentence: r.error ?? "Its check did not answer." };
}

/** The badge of a worker's readiness. */
export function readinessBadge(r) {
  const f = readinessFacts(r);
  return h("span", { class: `badge readiness readiness-${f.state}`, dataset: { ready: f.state } }, f.word);
}

/**
 * `prefix` and how long ago, from a number of seconds, in a span that a view's `tick` redraws (it reads
 * `data-age-seconds` and `data-age-prefix`, and adds the time since the answer was fetched).
 */
export function ageSpan(prefix, seconds, className = "age muted") {
  const el = h("span", { class: className, dataset: { ageSeconds: seconds, agePrefix: prefix } });
  el.textContent = `${prefix}${ago(seconds)}`;
  return el;
}

/** Redraws the `ageSpan`s under `root`, `elapsed` seconds after their ages were read. */
export function tickAges(root, elapsed) {
  for (const el of root.querySelectorAll("[data-age-seconds]")) {
    el.textContent = `${el.dataset.agePrefix}${ago(Number(el.dataset.ageSeconds) + elapsed)}`;
  }
}

export const TERMINAL = new Set(["succeeded", "failed", "cancelled", "interrupted"]);
export const STATES = ["queued", "running", "succeeded", "failed", "cancelled", "interrupted"];

/** The badge of a run state. */
export function stateBadge(state) {
  return h("span", { class: `badge state state-${state}`, dataset: { state } }, state);
}

/** A JSON value as short text. */
export function valueText(v) {
  if (v === undefined) return "";
  if (v === null) return "null";
  if (typeof v === "string") return v;
  return JSON.stringify(v);
}

/** A result object as `processed 118 · failed 2`. */
export function resultSummary(result) {
  if (result == null) return "";
  if (typeof result !== "object") return valueText(result);
  // The counts only: nested tallies are shown in the run's detail.
  return Object.entries(result).filter(([, v]) => v === null || typeof v !== "object")
    .map(([k, v]) => `${k.replaceAll("_", " ")} ${typeof v === "number" ? count(v) : valueText(v)}`).join(" · ");
}

/** The first 8 characters of an id, with the whole id as its title. */
export function shortId(id) {
  return h("code", { class: "id", title: id }, id.slice(0, 8));
}

/** How far a run is: done, total, rate and time left, from its progress and start. */
export function progressFacts(run, nowMs) {
  const p = run.progress ?? null;
  const done = Number(p?.done ?? 0);
  const total = p?.total == null ? null : Number(p.total);
  const started = run.started_at ? Date.parse(run.started_at) : null;
  const elapsed = started ? Math.max(0, (nowMs - started) / 1000) : null;
  const rate = elapsed && elapsed > 0.2 && done > 0 ? done / elapsed : null;
  const left = rate && total != null ? Math.max(0, (total - done) / rate) : null;
  return { done, total, rate, left, message: p?.message ?? null, known: p != null };
}

/** The progress sentence: `40 / 120 · 12.5 per s · about 6 s left`. */
export function progressText(f) {
  if (!f.known) return "waiting for the first progress report";
  const parts = [f.total != null ? `${count(f.done)} / ${count(f.total)}` : `${count(f.done)} done`];
  if (f.rate != null) parts.push(`${f.rate >= 10 ? Math.round(f.rate) : f.rate.toFixed(1)} per s`);
  if (f.left != null) parts.push(f.left < 1 ? "almost done" : `about ${duration(f.left * 1000)} left`);
  if (f.message) parts.push(f.message);
  return parts.join(" · ");
}

/** A `<progress>` bar for a run (indeterminate until the total is known). */
export function progressBar(f, label) {
  const bar = h("progress", { "aria-label": label, class: "bar" });
  if (f.total != null && f.total > 0) {
    bar.max = f.total;
    bar.value = Math.min(f.done, f.total);
  } else if (f.total === 0) {
    bar.max = 1;
    bar.value = 1;
  }
  return bar;
}

/** A run's tags as small labels, each a link to the runs that carry it (nothing for a run without tags). */
export function tagList(tags) {
  if (!tags?.length) return null;
  return h("ul", { class: "tags", "aria-label": "Tags" }, tags.map((t) => h("li", null,
    h("a", { class: "tag", href: `#/runs?tag=${encodeURIComponent(t)}`, title: `Runs tagged ${t}` }, t))));
}
