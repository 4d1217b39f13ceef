// The pipelines view: each pipeline of the catalogue with its steps, its run in flight or its last run (linked to
// that run's detail), its schedules, and for operators a Run button (the API's sentence shown when it refuses, a
// 409 while a run is in flight included). A `pipeline` event reads the list again.

import { ApiError, api } from "./api.js";
import { debouncer, h, idFor, replace } from "./dom.js";
import { stateBadge, timeEl } from "./format.js";
import { createSchedules } from "./schedules.js";

/** Where a pipeline run is: `step 2 of 3 (embed)`. */
export function stepText(p) {
  return `step ${p.step + 1} of ${p.steps.length} (${p.steps[p.step] ?? "?"})`;
}

export function mount(root, _params, ctx) {
  const debounce = debouncer(250);
  const schedules = createSchedules(ctx);
  const cards = new Map(); // name → card
  const busy = new Set();
  let closed = false;

  const list = h("div", { class: "pipeline-grid", id: "pipelines", "aria-busy": "true" });
  const notice = h("div", { class: "notice", role: "status" });
  replace(root, h("div", { class: "view-head" }, h("h1", null, "Pipelines"),
    h("p", { class: "muted" }, "Steps run one after the other; each starts when the one before it succeeded.")),
  notice, list);

  async function load() {
    schedules.load();
    try {
      const pipelines = await api("/api/pipelines");
      if (closed) return;
      const seen = new Set();
      const articles = pipelines.map((p) => {
        seen.add(p.name);
        let card = cards.get(p.name);
        if (!card) {
          card = buildCard(p);
          cards.set(p.name, card);
        }
        card.data = p;
        update(card);
        return card.article;
      });
      for (const name of [...cards.keys()]) if (!seen.has(name)) cards.delete(name);
      replace(list, articles.length ? articles
        : h("p", { class: "muted" }, "The catalogue has no pipelines ([[pipelines]] in the configuration)."));
      replace(notice);
    } catch (e) {
      if (!(e instanceof ApiError)) throw e;
      replace(notice, h("p", { class: "error" }, e.message));
    } finally {
      list.setAttribute("aria-busy", "false");
    }
  }

  function buildCard(p) {
    const id = idFor("pipeline", p.name);
    const last = h("div", { class: "pipeline-last" });
    const alert = h("p", { class: "alert", role: "alert", id: `${id}-alert`, hidden: true });
    const reason = h("p", { class: "reason", id: `${id}-reason` });
    const run = h("button", {
      type: "button", class: "run primary", "aria-describedby": reason.id, onclick: () => start(p.name),
    }, "Run");
    const steps = h("ol", { class: "steps" }, p.steps.map((w) => h("li", { dataset: { worker: w } },
      h("a", { href: `#/runs?worker=${encodeURIComponent(w)}` }, w))));
    const article = h("article", { class: "pipeline card", id, dataset: { pipeline: p.name },
      "aria-labelledby": `${id}-title` },
    h("h2", { id: `${id}-title` }, p.name),
    p.description ? h("p", { class: "description" }, p.description) : null,
    h("h3", null, "Steps"), steps, last,
    schedules.section("pipeline", p.name),
    h("div", { class: "actions" }, h("div", { class: "controls" }, run), reason, alert));
    return { article, last, alert, reason, run, data: p };
  }

  function setAlert(card, message, runId) {
    replace(card.alert, message ?? "",
      runId ? [" ", h("a", { href: `#/pipelines/runs/${runId}` }, "Open that pipeline run")] : null);
    card.alert.hidden = !message;
  }

  function update(card) {
    const p = card.data;
    const r = p.last_run;
    replace(card.last, r
      ? h("p", { class: "last", dataset: { state: r.state, run: r.id } },
        h("strong", null, r.state === "running" ? "Running: " : "Last run: "), stateBadge(r.state), " ",
        r.state === "running" ? stepText(r) : ["finished ", timeEl(r.finished_at)],
        " · requested ", timeEl(r.requested_at), " by ", r.requested_by,
        r.error ? [" · ", h("span", { class: "error-text" }, r.error)] : null,
        " ", h("a", { href: `#/pipelines/runs/${r.id}` }, "Details"))
      : h("p", { class: "last muted" }, "Never run."));
    const operator = ctx.can("operator");
    card.run.hidden = !operator;
    let reason = "";
    if (!operator) reason = "Running a pipeline needs the operator role.";
    else if (r?.state === "running") reason = "A run of it is in flight; wait for it to end or cancel it.";
    card.run.disabled = !operator || busy.has(p.name) || !!reason;
    card.reason.textContent = reason;
    card.reason.hidden = !reason;
  }

  async function start(name) {
    const card = cards.get(name);
    setAlert(card, null);
    busy.add(name);
    update(card);
    try {
      const view = await api(`/api/pipelines/${encodeURIComponent(name)}/runs`, { method: "POST", body: {} });
      card.data.last_run = view;
    } catch (e) {
      if (!(e instanceof ApiError)) throw e;
      setAlert(card, e.message, e.body.pipeline_run_id);
    } finally {
      busy.delete(name);
      update(card);
      debounce("pipelines", load);
    }
  }

  load();

  return {
    onEvent(ev) {
      schedules.onEvent(ev);
      if (ev.kind === "pipeline") debounce("pipelines", load);
    },
    refresh: load,
    unmount() {
      closed = true;
      debounce.cancel();
      schedules.unmount();
    },
  };
}
