// A worker card's pause (workers.js): "Paused since … by …: reason" while the worker is paused (no run of it is
// requested: not by its schedules, its retries, its pipelines' steps or the Run button), and for operators a
// Pause or a Resume button, each asking for a reason kept in the worker's pause history.

import { api } from "./api.js";
import { h, replace } from "./dom.js";
import { timeEl } from "./format.js";
import { askReason } from "./quarantine.js";

/**
 * The pause line and buttons of worker `name` (card id `id`); `changed()` is called after a pause or a resume
 * the API accepted. `update(w, operator)` redraws it from the worker's view; a reason being typed stays.
 */
export function pauseBox(name, id, changed) {
  const line = h("p", { class: "paused-line", id: `${id}-paused`, role: "status", hidden: true });
  const send = (verb) => async (reason) => {
    await api(`/api/workers/${encodeURIComponent(name)}/${verb}`, { method: "POST", body: { reason } });
    changed();
  };
  const pause = askReason(`${id}-pause`, "Pause", `Pause ${name}`, send("pause"), "pause", "pause");
  const resume = askReason(`${id}-resume`, "Resume", `Resume ${name}`, send("resume"), "resume", "resume");
  pause.button.setAttribute("aria-label", `Pause ${name}`);
  resume.button.setAttribute("aria-label", `Resume ${name}`);
  const el = h("div", { class: "pause-box" }, line, pause.el, resume.el);

  function update(w, operator) {
    const p = w.paused;
    line.hidden = !p;
    line.dataset.automatic = p ? String(p.automatic) : "";
    if (p) {
      replace(line, [h("strong", null, "Paused"), " since ", timeEl(p.at), " by ", h("span", { class: "by" }, p.by),
        p.automatic ? " (automatically)" : null, ": ", h("span", { class: "why" }, p.reason)]);
    }
    pause.el.hidden = !operator || !!p;
    resume.el.hidden = !operator || !p;
  }

  return { el, update };
}
