// What a run cost (`usage` of GET /api/runs/{id}, recorded when its worker ended): wall time, CPU and peak memory
// as the daemon measured them, under names that say how (the whole process tree with a cgroup; the worker and
// what it waited for, and the largest single process's peak, with rusage), and what the worker reported: tokens,
// GPU time, cost.

import { h } from "./dom.js";
import { count } from "./format.js";

/** `310 MiB`, `4.0 GiB`. */
function size(bytes) {
  const gib = 1024 ** 3;
  return bytes >= gib ? `${(bytes / gib).toFixed(1)} GiB` : `${Math.round(bytes / 1024 ** 2)} MiB`;
}

const seconds = (s) => (s >= 100 ? `${count(Math.round(s))} s` : `${s.toFixed(1)} s`);

/** The usage table of run `r`, or nothing when it has none (its worker never ran). */
export function usageTable(r) {
  const u = r.usage;
  if (!u) return null;
  const rows = [["Wall time", seconds(u.wall_seconds)]];
  if (u.cpu_seconds != null) rows.push(["CPU", seconds(u.cpu_seconds)]);
  if (u.peak_memory_bytes != null) {
    const cache = u.measured_by === "cgroup v1" ? " (page cache included)" : "";
    rows.push(["Peak memory", `${size(u.peak_memory_bytes)}${cache}`]);
  }
  if (u.peak_rss_largest_process_bytes != null) {
    rows.push(["Peak of its largest process", size(u.peak_rss_largest_process_bytes)]);
  }
  const rep = u.reported || {};
  if (rep.tokens_in != null) rows.push(["Tokens in", count(rep.tokens_in)]);
  if (rep.tokens_out != null) rows.push(["Tokens out", count(rep.tokens_out)]);
  if (rep.gpu_seconds != null) rows.push(["GPU", seconds(rep.gpu_seconds)]);
  if (rep.cost != null) rows.push(["Cost", `${rep.cost} ${rep.currency ?? ""}`.trim()]);
  return h("table", { class: "counts usage" },
    h("caption", null, `Usage (measured by ${u.measured_by})`),
    h("tbody", null, rows.map(([k, v]) => h("tr", null, h("th", { scope: "row" }, k), h("td", { class: "num" }, v)))));
}
