// One pipeline run: its state, who asked for it (or the schedule that fired it), and each step with its runs
// (state, attempt, a link to each), why it waits (a code and the API's sentence), and a Cancel button for
// operators. Read again on a `pipeline` event about it, on a `run` event of one of its steps' workers, and, while
// it waits, on a change to the daemons.

import { ApiError, api } from "./api.js";
import { debouncer, facts, h, replace } from "./dom.js";
import { TERMINAL, duration, resultSummary, shortId, stateBadge, timeEl } from "./format.js";
import { stepText } from "./pipelines.js";

export function mount(root, [id], ctx) {
  const debounce = debouncer(250);
  let closed = false;
  let view = null;
  let busy = false;

  const head = h("div", { class: "view-head" });
  const notice = h("div", { class: "notice", role: "status" });
  const alert = h("p", { class: "alert", role: "alert", hidden: true, id: "pipeline-run-alert" });
  const summary = h("section", { class: "card", "aria-label": "Summary" });
  const steps = h("section", { class: "card", "aria-labelledby": "steps-title" });
  replace(root, head, notice, alert, h("div", { class: "run-grid" }, summary), steps);

  function render() {
    const p = view;
    replace(head, h("p", { class: "crumbs" }, h("a", { href: "#/pipelines" }, "Pipelines"), " / ", p.pipeline),
      h("h1", null, "Pipeline run ", h("code", { title: p.id }, shortId(p.id)), " ", stateBadge(p.state)));
    head.dataset.state = p.state;
    const rows = [
      ["Pipeline", h("a", { href: "#/pipelines" }, p.pipeline)],
      ["Where", p.state === "running" ? stepText(p) : `${p.steps.length} steps`],
      ["Requested", [timeEl(p.requested_at), " by ", p.requested_by]],
      ["Finished", timeEl(p.finished_at)],
    ];
    if (p.error) rows.push(["Error", h("span", { class: "error-text" }, p.error)]);
    if (p.cancel_requested_at) {
      rows.push(["Cancel requested", [timeEl(p.cancel_requested_at), " by ", p.cancel_requested_by]]);
    }
    if (p.schedule_id) {
      rows.push(["Fired by", [p.requested_by.replace(/^schedule:/, "schedule "),
        p.fire_at ? [" at ", timeEl(p.fire_at)] : null]]);
    }
    const controls = [];
    if (!TERMINAL.has(p.state) && ctx.can("operator") && !p.cancel_requested_at) {
      const attrs = { type: "button", class: "cancel", id: "pipeline-cancel", disabled: busy, onclick: cancel };
      controls.push(h("button", attrs, "Cancel this pipeline run"));
    }
    replace(summary, facts(rows), waitingLine(view.waiting), controls);

    const body = [];
    p.steps.forEach((worker, i) => {
      const runs = view.runs.filter((r) => r.pipeline_step === i);
      if (!runs.length) {
        const word = p.state !== "running" ? "not run" : i === p.step ? "waiting" : i > p.step ? "pending" : "not run";
        body.push(h("tr", { dataset: { step: i, state: word } }, h("td", null, i + 1), h("td", null, worker),
          h("td", null, "—"), h("td", null, h("span", { class: "badge state" }, word)), h("td", null, "—"),
          h("td", null, i === p.step && view.waiting ? view.waiting.message : "")));
      }
      for (const r of runs) {
        const outcome = r.error ? h("span", { class: "error-text" }, r.error.split("\n")[0]) : resultSummary(r.result);
        body.push(h("tr", { dataset: { step: i, run: r.id, state: r.state } },
          h("td", null, i + 1), h("td", null, worker),
          h("td", null, h("a", { href: `#/runs/${r.id}`, "aria-label": `Run ${r.id}` }, shortId(r.id))),
          h("td", null, stateBadge(r.state)), h("td", { class: "num" }, r.attempt),
          h("td", { class: "outcome" }, r.duration_ms != null ? `${duration(r.duration_ms)} · ` : "", outcome)));
      }
    });
    replace(steps, h("h2", { id: "steps-title" }, "Steps"),
      h("div", { class: "table-wrap" }, h("table", { class: "ledger", id: "pipeline-steps" },
        h("thead", null, h("tr", null, ["Step", "Worker", "Run", "State", "Attempt", "Outcome"].map((c) =>
          h("th", { scope: "col" }, c)))),
        h("tbody", null, body))));
  }

  // Why the pipeline run waits: its current step's queued run's own reason, or why that step is not requested
  // yet (`pipeline_step`: its worker busy with the run named, linked here).
  function waitingLine(waiting) {
    if (!waiting) return null;
    const runs = waiting.runs ?? [];
    const links = runs.map((r, i) => [i ? ", " : "", h("a", { href: `#/runs/${r}` }, shortId(r))]);
    return h("p", { class: `warn waiting waiting-${waiting.code}`, id: "pipeline-waiting",
      dataset: { code: waiting.code } }, waiting.message,
    runs.length ? [" ", h("span", { class: "waiting-runs muted" }, "(see ", links, ")")] : null);
  }

  async function load() {
    try {
      view = await api(`/api/pipeline-runs/${id}`);
      if (closed) return;
      replace(notice);
      render();
    } catch (e) {
      if (!(e instanceof ApiError)) throw e;
      replace(notice, h("p", { class: "error" }, e.message));
    }
  }

  async function cancel() {
    busy = true;
    render();
    alert.hidden = true;
    try {
      view = await api(`/api/pipeline-runs/${id}/cancel`, { method: "POST" });
    } catch (e) {
      if (!(e instanceof ApiError)) throw e;
      alert.textContent = e.message;
      alert.hidden = false;
    } finally {
      busy = false;
      if (view) render();
    }
  }

  // Why a step waits depends on the daemons: a change to them reads the pipeline run again while it waits.
  const stopDaemons = ctx.onDaemons(() => {
    if (view?.waiting) debounce("pipeline", load);
  });
  load();

  return {
    onEvent(ev) {
      if (ev.kind === "pipeline" && ev.pipeline_run === id) debounce("pipeline", load);
      if (ev.kind === "run" && view?.steps.includes(ev.worker)) debounce("pipeline", load);
    },
    refresh: load,
    unmount() {
      closed = true;
      debounce.cancel();
      stopDaemons();
    },
  };
}
