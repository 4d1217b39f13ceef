// Lines of a worker's card (workers.js) drawn from its view alone: its queue, why its queued run waits, its last
// run.

import { h, replace } from "./dom.js";
import { ageSpan, count, duration, resultSummary, shortId, stateBadge, timeEl } from "./format.js";

export function queueLine(q) {
  const line = h("p", { class: "queue" }, h("strong", null, "Queue: "));
  if (!q) return replace(line, h("strong", null, "Queue: "), h("span", { class: "muted" }, "not measured yet"));
  // A measurement has exactly one of a failure, a pending count or the reason it cannot be counted.
  if (q.error) line.append(h("span", { class: "warn" }, `the last measurement failed: ${q.error}`));
  else if (q.pending != null) {
    line.append(h("span", { class: "pending", dataset: { pending: q.pending } }, `${count(q.pending)} pending`));
  } else {
    line.append(h("span", { class: "unmeasurable" }, `not measurable: ${q.unmeasurable}`,
      q.done != null ? ` — ${count(q.done)} already done` : ""));
  }
  line.append(ageSpan(" · measured ", q.age_seconds));
  return line;
}

// Why the queued run waits, as the API said when the card was read (the same reason as on the run's page),
// with a link to each run it names (those holding the capacity or the resource, or the run a step waits for).
export function waitingLine(waiting) {
  if (!waiting) return h("p", { class: "waiting muted" }, "Waiting for a daemon to claim it.");
  const runs = waiting.runs ?? [];
  const links = runs.map((id, i) => [i ? ", " : "", h("a", { href: `#/runs/${id}` }, shortId(id))]);
  return h("p", { class: `waiting warn waiting-${waiting.code}`, dataset: { code: waiting.code } },
    h("span", { class: "waiting-message" }, waiting.message),
    runs.length ? [" ", h("span", { class: "waiting-runs muted" }, "(see ", links, ")")] : null);
}

export function lastRun(r) {
  if (!r) return h("p", { class: "last muted" }, "Never run.");
  const error = r.error?.length > 160 ? `${r.error.slice(0, 160)}…` : r.error;
  return h("p", { class: "last", dataset: { run: r.id, state: r.state } },
    h("strong", null, "Last run: "), stateBadge(r.state),
    r.duration_ms != null ? ` in ${duration(r.duration_ms)}` : "",
    " · finished ", timeEl(r.finished_at),
    r.result ? [" · ", h("span", { class: "result" }, resultSummary(r.result))] : "",
    error ? [" · ", h("span", { class: "error-text" }, error)] : "",
    " ", h("a", { href: `#/runs/${r.id}` }, "Details"));
}
