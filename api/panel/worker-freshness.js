// What a worker card (workers.js) says of the worker's freshness target (`freshness` of GET /api/workers): the
// age of its oldest pending document against `fresh_within_seconds`, and when it is behind, why, in the sentence
// the API gives ("No daemon with label gpu for 3 h: 62 pending, …").

import { h } from "./dom.js";

/** The card's freshness line, or nothing for a worker without a target. */
export function freshnessLine(w) {
  const f = w.freshness;
  if (!f) return null;
  const within = `within ${f.within_seconds} s`;
  if (f.breached) {
    return h("p", { class: "freshness-line breached", dataset: { breached: "true" } },
      h("strong", null, "Freshness: behind. "), f.reason || `Older than ${within}.`);
  }
  const age = f.age_seconds == null ? "nothing pending" : `oldest pending ${f.age_seconds} s old`;
  return h("p", { class: "freshness-line muted", dataset: { breached: "false" } },
    h("strong", null, "Freshness: "), `${age}, ${within}.`);
}
