// What a worker card (workers.js) says of the worker's limits that a host does not keep as set (`limit_notes` of
// GET /api/workers: "memory_max not enforced on host H: …", "cpu_max 4 clamped to the 2 cores of host H"): its
// runs go on there, so it is said on the card rather than hidden in a daemon's log.

import { h } from "./dom.js";

/** The card's line of limit notes, or nothing when every host keeps the worker's limits. */
export function limitNotes(w) {
  const notes = w.limit_notes || [];
  if (!notes.length) return null;
  return h("ul", { class: "limit-notes", title: "Limits a host does not keep as set; the runs go on there" },
    notes.map((n) => h("li", { class: n.includes("not enforced") ? "warning" : "muted" }, n)));
}
