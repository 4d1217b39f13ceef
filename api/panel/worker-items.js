// What a worker card (workers.js) says of its running run's items: "412 items · 38/min", as the workers list
// answered (`running_items`: the item lines stored so far, and per minute since the run started, on the database
// clock). A batch of items written without a checkpoint changes nothing of the run itself, so no event may say
// the figures moved: while a run is running whose worker reports items (it has some already, or its describe says
// it does), the list is read again, at most every 10 s.

import { h } from "./dom.js";
import { count } from "./format.js";

const REFRESH_MS = 10_000; // how often the list is read again while a running run has items

/** `38`, or `0.4` under ten a minute (where a whole number would say too little). */
function rate(perMinute) {
  return perMinute >= 10 ? count(Math.round(perMinute)) : String(Math.round(perMinute * 10) / 10);
}

/** Whether worker view `w` has a running run that has reported items. */
const shows = (w) => !!w.running_items && w.in_flight?.state === "running";
/** Whether its running run has items or may report some (its worker's describe says it reports items). */
const awaits = (w) => shows(w)
  || (w.in_flight?.state === "running" && !!w.described?.description?.capabilities?.items);

/** "412 items · 38/min" of worker view `w`'s running run, or nothing when it has reported no items. */
export function runningItems(w) {
  if (!shows(w)) return null;
  const it = w.running_items;
  return h("span", {
    class: "running-items", dataset: { items: it.items, perMinute: it.per_minute },
    title: "Item lines the run has reported so far, and per minute since it started",
  }, `${count(it.items)} item${it.items === 1 ? "" : "s"} · ${rate(it.per_minute)}/min`);
}

/**
 * A tick's check (`poll(entries, now)`, with the cards' `{ data, fetchedAt }` and `performance.now()`): calls
 * `read` when a card shows a running run that has or may report items and was read 10 s ago or more, one read at
 * a time, and not again within 10 s of the last (even when that one failed).
 */
export function itemsPoller(read) {
  let out = false;
  let last = -Infinity;
  return (entries, now) => {
    if (out || now - last < REFRESH_MS) return;
    const due = entries.some((e) => awaits(e.data) && now - e.fetchedAt >= REFRESH_MS);
    if (!due) return;
    out = true;
    last = now;
    Promise.resolve(read()).finally(() => {
      out = false;
    });
  };
}
