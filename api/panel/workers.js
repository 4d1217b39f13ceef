// The workers view: every worker in catalogue order with its effective configuration (each value marked with
// where it comes from), its queue, its run in flight with live progress, its last outcome, and the Run and Cancel
// controls. An event refetches only the worker it concerns.

import { ApiError, api } from "./api.js";
import { debouncer, h, idFor, replace } from "./dom.js";
import {
  ago, count, duration, progressBar, progressFacts, progressText, resultSummary, shortId, sourceBadge, stateBadge,
  timeEl, valueText,
} from "./format.js";

export function mount(root, _params, ctx) {
  const workers = new Map(); // name → { data, fetchedAt, card }
  let engines = {};
  const alerts = new Map(); // name → { message, runId }
  const busy = new Set();
  const debounce = debouncer(250);
  let closed = false;

  const list = h("div", { class: "worker-grid", id: "workers", "aria-busy": "true" });
  const notice = h("div", { class: "notice", role: "status" });
  replace(root, h("div", { class: "view-head" }, h("h1", null, "Workers"),
    h("p", { class: "muted" }, "In catalogue order. Badges say where each value comes from: ",
      sourceBadge("explicit"), " ", sourceBadge("override"), " ", sourceBadge("default"), " ", sourceBadge("external"), ".")),
  notice, list);

  async function loadAll() {
    try {
      const data = await api("/api/workers");
      if (closed) return;
      ctx.sawServerTime(data.now);
      engines = data.engines ?? {};
      const items = Array.isArray(data) ? data : data.workers ?? [];
      const now = performance.now();
      const seen = new Set();
      const cards = [];
      for (const w of items) {
        seen.add(w.name);
        let entry = workers.get(w.name);
        if (!entry) {
          entry = { data: w, fetchedAt: now, card: null };
          workers.set(w.name, entry);
          entry.card = buildCard(w);
        }
        entry.data = w;
        entry.fetchedAt = now;
        cards.push(entry.card.article);
        update(w.name);
      }
      for (const name of [...workers.keys()]) if (!seen.has(name)) workers.delete(name);
      replace(list, cards.length ? cards : h("p", { class: "muted" }, "The catalogue has no workers."));
      replace(notice);
    } catch (e) {
      if (!(e instanceof ApiError)) throw e;
      replace(notice, h("p", { class: "error" }, e.message));
    } finally {
      list.setAttribute("aria-busy", "false");
    }
  }

  async function loadOne(name) {
    try {
      const w = await api(`/api/workers/${encodeURIComponent(name)}`);
      const entry = workers.get(name);
      if (closed || !entry) return;
      entry.data = w;
      entry.fetchedAt = performance.now();
      update(name);
    } catch (e) {
      if (!(e instanceof ApiError)) throw e;
      setAlert(name, e.message);
    }
  }

  function setAlert(name, message, runId) {
    if (message) alerts.set(name, { message, runId });
    else alerts.delete(name);
    const card = workers.get(name)?.card;
    if (!card) return;
    const a = alerts.get(name);
    replace(card.alert, a ? [a.message, a.runId ? [" ", h("a", { href: `#/runs/${a.runId}` }, "Open that run")] : null,
      " ", h("button", { type: "button", class: "link", "aria-label": `Dismiss the message about ${name}`, onclick: () => setAlert(name, null) }, "Dismiss")] : []);
    card.alert.hidden = !a;
  }

  async function trigger(name, args) {
    setAlert(name, null);
    busy.add(name);
    update(name);
    try {
      const run = await api(`/api/workers/${encodeURIComponent(name)}/runs`, { method: "POST", body: args });
      const entry = workers.get(name);
      if (entry && run?.id) entry.data.in_flight = run;
    } catch (e) {
      if (!(e instanceof ApiError)) throw e;
      setAlert(name, e.message, e.body?.run_id);
    } finally {
      busy.delete(name);
      update(name);
      loadOne(name);
    }
  }

  async function cancel(name, runId) {
    setAlert(name, null);
    busy.add(name);
    update(name);
    try {
      await api(`/api/runs/${runId}/cancel`, { method: "POST" });
    } catch (e) {
      if (!(e instanceof ApiError)) throw e;
      setAlert(name, e.message);
    } finally {
      busy.delete(name);
      loadOne(name);
    }
  }

  function buildCard(w) {
    const id = idFor("worker", w.name);
    const status = h("div", { class: "status" });
    const alert = h("p", { class: "alert", role: "alert", id: `${id}-alert`, hidden: true });
    const reason = h("p", { class: "reason", id: `${id}-reason` });
    const runButton = h("button", { type: "button", class: "run primary", "aria-describedby": `${id}-reason`, onclick: () => trigger(w.name, {}) }, "Run");
    const form = buildRunForm(w, id);
    const overrideLink = h("a", { href: `#/overrides/${encodeURIComponent(w.name)}`, class: "override-link" }, "Override and audit trail");
    const controls = h("div", { class: "controls" }, runButton, form.details);
    const article = h("article", { class: "worker card", id, dataset: { worker: w.name }, "aria-labelledby": `${id}-title` },
      h("header", null,
        h("h2", { id: `${id}-title` }, w.title || w.name, w.title ? [" ", h("code", { class: "name" }, w.name)] : null),
        h("p", { class: "tags" },
          w.axis ? h("span", { class: "tag", title: "Axis of the archive" }, h("span", { class: "k" }, "axis"), " ", w.axis) : null,
          w.governance ? h("span", { class: "tag", title: "Who governs its output" }, h("span", { class: "k" }, "governance"), " ", w.governance) : null,
          w.stamp ? h("span", { class: "tag", title: "The stamp it leaves" }, h("span", { class: "k" }, "stamp"), " ", w.stamp) : null)),
      w.description ? h("p", { class: "description" }, w.description) : null,
      status,
      h("div", { class: "actions" }, controls, reason, alert, overrideLink));
    return { article, status, alert, reason, runButton, controls, form };
  }

  function buildRunForm(w, id) {
    const fields = [];
    let engineSelect = null;
    let presetSelect = null;
    const eff = w.effective;
    if (w.engine_configurable && Object.keys(engines).length) {
      engineSelect = h("select", { id: `${id}-engine`, name: "engine" },
        h("option", { value: "" }, `as configured (${eff?.engine?.value ?? "none"})`),
        Object.keys(engines).map((name) => h("option", { value: name }, name)));
      presetSelect = h("select", { id: `${id}-preset`, name: "preset" });
      const fillPresets = () => {
        const engine = engineSelect.value || eff?.engine?.value;
        const presets = engines[engine]?.presets ?? {};
        replace(presetSelect, h("option", { value: "" }, engineSelect.value ? "the engine's preset as configured" : `as configured (${eff?.preset?.value ?? "none"})`),
          Object.entries(presets).map(([p, model]) => h("option", { value: p }, `${p} (${model})`)));
      };
      engineSelect.addEventListener("change", fillPresets);
      fillPresets();
      fields.push(h("div", { class: "field" }, h("label", { for: `${id}-engine` }, "Engine"), engineSelect));
      fields.push(h("div", { class: "field" }, h("label", { for: `${id}-preset` }, "Preset"), presetSelect));
    }
    const inputs = [];
    for (const o of w.options ?? []) {
      const inputId = `${id}-opt-${o.name}`;
      const current = eff?.options?.[o.name]?.value;
      const hint = current !== undefined ? `as configured: ${valueText(current)}` : "worker's own default";
      let input;
      if (Array.isArray(o.choices) && o.choices.length) {
        input = h("select", { id: inputId }, h("option", { value: "" }, hint), o.choices.map((c) => h("option", { value: JSON.stringify(c) }, valueText(c))));
      } else if (o.type === "boolean") {
        input = h("select", { id: inputId }, h("option", { value: "" }, hint), h("option", { value: "true" }, "true"), h("option", { value: "false" }, "false"));
      } else if (o.type === "integer" || o.type === "number") {
        input = h("input", { id: inputId, type: "number", step: o.type === "integer" ? "1" : "any", placeholder: hint, inputmode: o.type === "integer" ? "numeric" : "decimal" });
      } else {
        input = h("input", { id: inputId, type: "text", placeholder: hint });
      }
      inputs.push({ spec: o, input });
      fields.push(h("div", { class: "field" },
        h("label", { for: inputId }, o.name, h("span", { class: "type" }, ` ${o.type}`)),
        input,
        o.description ? h("small", { class: "muted" }, o.description) : null));
    }
    const submit = h("button", { type: "submit", class: "primary" }, "Run with these arguments");
    const form = h("form", { class: "run-form", "aria-label": `Arguments for a run of ${w.name}`, onsubmit: (event) => {
      event.preventDefault();
      const args = {};
      if (engineSelect?.value) args.engine = engineSelect.value;
      if (presetSelect?.value) args.preset = presetSelect.value;
      const options = {};
      for (const { spec, input } of inputs) {
        const raw = input.value.trim();
        if (raw === "") continue;
        if (input.tagName === "SELECT" && spec.type !== "boolean") options[spec.name] = JSON.parse(raw);
        else if (spec.type === "boolean") options[spec.name] = raw === "true";
        else if (spec.type === "integer") options[spec.name] = Number.parseInt(raw, 10);
        else if (spec.type === "number") options[spec.name] = Number(raw);
        else options[spec.name] = raw;
      }
      if (Object.keys(options).length) args.options = options;
      trigger(w.name, args);
    } }, fields.length ? fields : h("p", { class: "muted" }, "This worker declares no options."), submit);
    const details = h("details", { class: "run-options" }, h("summary", null, "Run with arguments…"), form);
    return { details, submit };
  }

  function update(name) {
    const entry = workers.get(name);
    if (!entry) return;
    const { data: w, card } = entry;
    renderStatus(card.status, w, entry);
    // Controls: operators only; disabled with the reason when a run is in flight or no daemon takes the worker.
    const operator = ctx.can("operator");
    // A viewer gets no Run control at all, not a disabled one.
    if (operator && !card.controls.parentNode) card.reason.before(card.controls);
    if (!operator && card.controls.parentNode) card.controls.remove();
    let reason = "";
    if (!operator) reason = ctx.session ? "Running and cancelling need the operator role." : "";
    else if (w.in_flight) reason = `A run is already ${w.in_flight.state === "queued" ? "queued" : "running"}; wait for it to end or cancel it.`;
    else {
      const alive = ctx.daemonsFor(name);
      if (alive && alive.length === 0) reason = "No daemon is alive to run it: start one (see the health strip).";
    }
    const disabled = !operator || busy.has(name) || !!reason;
    card.runButton.disabled = disabled;
    card.form.submit.disabled = disabled;
    card.reason.textContent = reason;
    card.reason.hidden = !reason;
    card.article.dataset.inFlight = w.in_flight ? w.in_flight.state : "";
  }

  function renderStatus(el, w, entry) {
    const eff = w.effective;
    const parts = [];
    if (eff) {
      const rows = [];
      const derived = eff.preset?.source ?? eff.engine?.source;
      rows.push(["Engine", eff.engine ? eff.engine.value : "none", eff.engine?.source, "engine"]);
      if (eff.engine || eff.preset) rows.push(["Preset", eff.preset?.value ?? "none", eff.preset?.source, "preset"]);
      if (eff.model) rows.push(["Model", eff.model, derived, "model"]);
      const opts = Object.entries(eff.options ?? {});
      parts.push(h("dl", { class: "config" },
        rows.map(([k, v, source, field]) => [h("dt", null, k), h("dd", { dataset: { field, source: source ?? "" } }, h("span", { class: "value" }, v), " ", sourceBadge(source))]),
        opts.length ? [h("dt", null, "Options"), h("dd", null, h("ul", { class: "options" }, opts.map(([k, r]) =>
          h("li", { dataset: { option: k, source: r.source } }, h("code", null, k), " = ", h("span", { class: "value" }, valueText(r.value)), " ", sourceBadge(r.source)))))] : null));
      if (eff.endpoint) parts.push(h("p", { class: "endpoint muted" }, "Model server: ", h("code", null, eff.endpoint)));
    } else if (w.effective_error) {
      parts.push(h("p", { class: "error" }, "The effective configuration cannot be resolved: ", w.effective_error));
    }
    if (!w.engine_configurable && w.engine_source) {
      parts.push(h("p", { class: "engine-source" }, h("strong", null, "Engine not configurable here: "), w.engine_source,
        w.engine_source_url ? [" ", h("a", { href: w.engine_source_url, rel: "noopener noreferrer", target: "_blank" }, "Where it is configured")] : null));
    }
    parts.push(queueLine(w.queue, entry));
    parts.push(inFlight(w));
    parts.push(lastRun(w.last_finished));
    replace(el, parts);
  }

  function queueLine(q, entry) {
    const line = h("p", { class: "queue" }, h("strong", null, "Queue: "));
    if (!q) return replace(line, h("strong", null, "Queue: "), h("span", { class: "muted" }, "not measured yet"));
    if (q.error) line.append(h("span", { class: "warn" }, `the last measurement failed: ${q.error}`));
    else if (q.pending != null) line.append(h("span", { class: "pending", dataset: { pending: q.pending } }, `${count(q.pending)} pending`));
    else line.append(h("span", { class: "unmeasurable" }, `not measurable: ${q.unmeasurable ?? "no reason given"}`,
      q.done != null ? ` — ${count(q.done)} already done` : ""));
    const age = h("span", { class: "age muted", dataset: { ageSeconds: q.age_seconds } });
    age.textContent = ` · measured ${ago(q.age_seconds)}`;
    entry.ageEl = age;
    line.append(age);
    return line;
  }

  function inFlight(w) {
    const r = w.in_flight;
    if (!r) return null;
    const label = `Progress of ${w.name}'s run`;
    const box = h("div", { class: "in-flight", dataset: { run: r.id, state: r.state } });
    const head = h("p", null, stateBadge(r.state), " ",
      r.state === "running" ? ["since ", timeEl(r.started_at ?? r.claimed_at), r.daemon_id ? [" on daemon ", shortId(r.daemon_id)] : null]
        : ["requested ", timeEl(r.requested_at), " by ", r.requested_by, " — waiting for a daemon"],
      " ", h("a", { href: `#/runs/${r.id}` }, "Details"));
    box.append(head);
    if (r.state === "running") {
      const f = progressFacts(r, ctx.serverNow());
      box.append(h("div", { class: "progress" }, progressBar(f, label), h("span", { class: "progress-text" }, progressText(f))));
    }
    if (r.cancel_requested_at) box.append(h("p", { class: "muted" }, `Cancellation requested by ${r.cancel_requested_by ?? "someone"}.`));
    else if (ctx.can("operator")) {
      box.append(h("button", { type: "button", class: "cancel", disabled: busy.has(w.name), "aria-label": `Cancel the run of ${w.name}`, onclick: () => cancel(w.name, r.id) }, "Cancel"));
    }
    return box;
  }

  function lastRun(r) {
    if (!r) return h("p", { class: "last muted" }, "Never run.");
    return h("p", { class: "last", dataset: { run: r.id, state: r.state } }, h("strong", null, "Last run: "), stateBadge(r.state),
      r.duration_ms != null ? ` in ${duration(r.duration_ms)}` : "",
      r.finished_at ? [" · finished ", timeEl(r.finished_at)] : "",
      r.result ? [" · ", h("span", { class: "result" }, resultSummary(r.result))] : "",
      r.error ? [" · ", h("span", { class: "error-text" }, r.error.length > 160 ? `${r.error.slice(0, 160)}…` : r.error)] : "",
      " ", h("a", { href: `#/runs/${r.id}` }, "Details"));
  }

  const stopDaemons = ctx.onDaemons(() => {
    for (const name of workers.keys()) update(name);
  });
  loadAll();

  return {
    onEvent(ev) {
      if (ev?.worker && workers.has(ev.worker)) debounce(ev.worker, () => loadOne(ev.worker));
      else if (ev?.kind === "run" || ev?.kind === "override" || ev?.kind === "queue") debounce("*", loadAll);
    },
    refresh: loadAll,
    tick() {
      const now = performance.now();
      for (const entry of workers.values()) {
        if (entry.ageEl) entry.ageEl.textContent = ` · measured ${ago(Number(entry.ageEl.dataset.ageSeconds) + (now - entry.fetchedAt) / 1000)}`;
        const r = entry.data.in_flight;
        const text = entry.card.status.querySelector(".progress-text");
        if (r?.state === "running" && text) text.textContent = progressText(progressFacts(r, ctx.serverNow()));
      }
    },
    unmount() {
      closed = true;
      debounce.cancel();
      stopDaemons();
    },
  };
}
