// The workers view: every worker in catalogue order with its effective configuration (each value marked with
// where it comes from), whether it is ready, where its catalogue entry and its code disagree, when its code was
// last described, its queue, its run in flight with live progress (or, while it is queued, why it waits: the
// API's sentence), its last outcome, its schedules (schedules.js), and the Run, Cancel and chore (describe, count,
// check) controls. An event refetches only the worker it concerns. A card whose worker has documents in quarantine
// says how many and links to the quarantine view (quarantine.js); one whose running run reports items says how
// many so far and how fast (worker-items.js). The cards sit in the overview (worker-table.js), one compact row per
// worker, each opening its card beneath it.

import { ApiError, api } from "./api.js";
import { append, debouncer, h, idFor, replace } from "./dom.js";
import { engineFields, optionField, optionInput, readOptions } from "./form.js";
import { createHistory } from "./history.js";
import { quarantineLink } from "./quarantine.js";
import { createSchedules } from "./schedules.js";
import {
  ageSpan, duration, progressBar, progressFacts, progressText, readinessBadge, readinessFacts,
  shortId, sourceBadge, stateBadge, tickAges, timeEl, valueText,
} from "./format.js";
import { itemsPoller, runningItems } from "./worker-items.js";
import { lastRun, queueLine, waitingLine } from "./worker-lines.js";
import { overviewRow, overviewTable, renderRow, tickRows } from "./worker-table.js";
import { freshnessLine } from "./worker-freshness.js";
import { limitNotes } from "./worker-limits.js";
import { pauseBox } from "./worker-pause.js";

// The chores an operator may ask for now: the endpoint's verb and the button's words.
const CHORES = [
  { verb: "describe", label: "Describe again", title: "Run the worker's describe again (after its code changed)" },
  { verb: "count", label: "Count now", title: "Measure the worker's queue now" },
  { verb: "check", label: "Check now", title: "Ask the worker whether it has what it needs" },
];

export function mount(root, _params, ctx) {
  const workers = new Map(); // name → { data, fetchedAt, card, row }
  let engines = {};
  const alerts = new Map(); // name → { message, runId }
  const busy = new Set();
  const choresBusy = new Set(); // `${name} ${verb}` while that request is out
  const debounce = debouncer(250);
  const schedules = createSchedules(ctx);
  const history = createHistory();
  const pollItems = itemsPoller(() => loadList());
  let closed = false;

  const { wrap, body: list } = overviewTable();
  list.setAttribute("aria-busy", "true");
  const notice = h("div", { class: "notice", role: "status" });
  const sources = ["explicit", "override", "default", "external"].map((s, i) => [i ? " " : "", sourceBadge(s)]);
  replace(root, h("div", { class: "view-head" }, h("h1", null, "Workers"),
    h("p", { class: "muted" }, "In catalogue order; a row opens its worker's card, whose badges say where each ",
      "value comes from: ", sources, ".")),
  notice, wrap);

  function loadAll() {
    schedules.load();
    return loadList();
  }

  async function loadList() {
    try {
      const data = await api("/api/workers");
      if (closed) return;
      ctx.sawServerTime(data.now);
      engines = data.engines;
      const now = performance.now();
      const seen = new Set();
      const cards = [];
      for (const w of data.workers) {
        seen.add(w.name);
        let entry = workers.get(w.name);
        if (!entry) {
          entry = { data: w, fetchedAt: now, card: buildCard(w), row: null };
          entry.row = overviewRow(w, entry.card.article, (name) => trigger(name, {}));
          workers.set(w.name, entry);
        }
        entry.data = w;
        entry.fetchedAt = now;
        cards.push(entry.row.tr, entry.row.detail);
        update(w.name);
      }
      for (const name of [...workers.keys()]) if (!seen.has(name)) workers.delete(name);
      // The same cards in the same order stay where they are, so that a form being filled in keeps its focus.
      const shown = list.children;
      const same = cards.length && cards.length === shown.length && cards.every((c, i) => shown[i] === c);
      const none = h("tr", null, h("td", { colspan: 7, class: "muted" }, "The catalogue has no workers."));
      if (!same) replace(list, cards.length ? cards : none);
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
    // The sentence is on the card: a Run refused from the overview opens it.
    if (message) workers.get(name)?.row.open();
    const card = workers.get(name)?.card;
    if (!card) return;
    const a = alerts.get(name);
    const dismiss = () => h("button", {
      type: "button", class: "link", "aria-label": `Dismiss the message about ${name}`,
      onclick: () => setAlert(name, null),
    }, "Dismiss");
    replace(card.alert, a
      ? [a.message, a.runId ? [" ", h("a", { href: `#/runs/${a.runId}` }, "Open that run")] : null, " ", dismiss()]
      : []);
    card.alert.hidden = !a;
  }

  async function trigger(name, args) {
    setAlert(name, null);
    busy.add(name);
    update(name);
    try {
      const run = await api(`/api/workers/${encodeURIComponent(name)}/runs`, { method: "POST", body: args });
      const entry = workers.get(name);
      if (entry) entry.data.in_flight = run;
    } catch (e) {
      if (!(e instanceof ApiError)) throw e;
      setAlert(name, e.message, e.body.run_id);
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

  async function askChore(name, verb) {
    const key = `${name} ${verb}`;
    const card = workers.get(name)?.card;
    setAlert(name, null);
    if (card) card.choreMessage.textContent = "";
    choresBusy.add(key);
    update(name);
    try {
      const answer = await api(`/api/workers/${encodeURIComponent(name)}/${verb}`, { method: "POST" });
      const now = workers.get(name)?.card;
      if (now) {
        now.choreMessage.textContent = answer.message;
        now.choreMessage.dataset.chore = verb;
        now.choreMessage.dataset.taken = String(answer.taken);
      }
    } catch (e) {
      if (!(e instanceof ApiError)) throw e;
      setAlert(name, e.message);
    } finally {
      choresBusy.delete(key);
      update(name);
    }
  }

  function tag(title, key, value) {
    return value ? h("span", { class: "tag", title }, h("span", { class: "k" }, key), " ", value) : null;
  }

  function buildCard(w) {
    const id = idFor("worker", w.name);
    const status = h("div", { class: "status" });
    const alert = h("p", { class: "alert", role: "alert", id: `${id}-alert`, hidden: true });
    const reason = h("p", { class: "reason", id: `${id}-reason` });
    const runButton = h("button", {
      type: "button", class: "run primary", "aria-describedby": `${id}-reason`, onclick: () => trigger(w.name, {}),
    }, "Run");
    const overrideLink = h("a", { href: `#/overrides/${encodeURIComponent(w.name)}`, class: "override-link" },
      "Override and audit trail");
    const controls = h("div", { class: "controls" }, runButton);
    const choreButtons = CHORES.map((c) => h("button", {
      type: "button", class: `chore chore-${c.verb}`, title: c.title, dataset: { chore: c.verb },
      "aria-label": `${c.label}: ${w.name}`, onclick: () => askChore(w.name, c.verb),
    }, c.label));
    const choreMessage = h("p", { class: "chore-message muted", role: "status", id: `${id}-chore-message` });
    const pause = pauseBox(w.name, id, () => loadOne(w.name));
    const chores = h("div", { class: "chores", role: "group", "aria-label": `Chores of ${w.name}` },
      choreButtons, choreMessage);
    const header = h("header", null,
      h("h2", { id: `${id}-title` }, w.title || w.name, w.title ? [" ", h("code", { class: "name" }, w.name)] : null),
      h("p", { class: "tags" },
        tag("Axis of the archive", "axis", w.axis),
        tag("Who governs its output", "governance", w.governance),
        tag("The stamp it leaves", "stamp", w.stamp)));
    const attrs = { class: "worker card", id, dataset: { worker: w.name }, "aria-labelledby": `${id}-title` };
    const article = h("article", attrs, header,
      w.description ? h("p", { class: "description" }, w.description) : null,
      status,
      pause.el,
      schedules.section("worker", w.name, () => workers.get(w.name)?.data.options ?? w.options),
      history.section(w.name),
      h("div", { class: "actions" }, controls, reason, alert, chores, overrideLink));
    return { article, status, alert, reason, runButton, controls, form: null, formKey: null, chores, choreButtons,
      choreMessage, pause };
  }

  // The form follows the options and engines the worker accepts, which change when its code describes itself
  // anew: it is built again then (kept open if it was), and only then, so typing into it is never undone.
  function syncForm(card, w) {
    const key = JSON.stringify([w.options, w.engine_configurable, w.effective, engines]);
    if (card.formKey === key) return;
    const open = card.form?.details.open ?? false;
    const form = buildRunForm(w, idFor("worker", w.name));
    form.details.open = open;
    if (card.form) card.form.details.replaceWith(form.details);
    else card.controls.append(form.details);
    card.form = form;
    card.formKey = key;
  }

  function buildRunForm(w, id) {
    const fields = [];
    const eff = w.effective;
    let picks = null;
    if (w.engine_configurable && Object.keys(engines).length) {
      // Left on its first option, a select sends nothing and the run uses what is configured.
      picks = engineFields(id, engines, eff?.engine?.value, (text) => text, (name, chosen) => {
        let head = `as configured (${eff?.[name]?.value ?? "none"})`;
        if (name === "preset" && chosen) head = "the engine's preset as configured";
        return [h("option", { value: "" }, head), null];
      });
      fields.push(picks.fields);
    }
    const inputs = [];
    for (const o of w.options) {
      const current = eff?.options[o.name]?.value;
      const hint = current !== undefined ? `as configured: ${valueText(current)}` : "worker's own default";
      const input = optionInput(o, id, hint, (text) => text);
      inputs.push({ spec: o, input });
      fields.push(optionField(o, input));
    }
    const submit = h("button", { type: "submit", class: "primary" }, "Run with these arguments");
    const onsubmit = (event) => {
      event.preventDefault();
      const args = {};
      if (picks?.engine.value) args.engine = picks.engine.value;
      if (picks?.preset.value) args.preset = picks.preset.value;
      const options = readOptions(inputs);
      if (Object.keys(options).length) args.options = options;
      trigger(w.name, args);
    };
    // novalidate: a value out of an option's bounds is refused by the API, whose sentence says why.
    const attrs = { class: "run-form", "aria-label": `Arguments for a run of ${w.name}`, novalidate: true, onsubmit };
    const form = h("form", attrs,
      fields.length ? fields : h("p", { class: "muted" }, "This worker declares no options."), submit);
    const details = h("details", { class: "run-options" }, h("summary", null, "Run with arguments…"), form);
    return { details, submit };
  }

  function update(name) {
    const entry = workers.get(name);
    if (!entry) return;
    const { data: w, card } = entry;
    syncForm(card, w);
    renderStatus(card.status, w);
    // Controls: operators only; disabled with the reason when a run is in flight or no daemon takes the worker.
    const operator = ctx.can("operator");
    // A viewer gets no Run or chore control at all, not a disabled one.
    if (operator && !card.controls.parentNode) card.reason.before(card.controls);
    if (!operator && card.controls.parentNode) card.controls.remove();
    if (operator && !card.chores.parentNode) card.alert.after(card.chores);
    if (!operator && card.chores.parentNode) card.chores.remove();
    card.choreButtons.forEach((b) => {
      b.disabled = choresBusy.has(`${name} ${b.dataset.chore}`);
    });
    let reason = "";
    card.pause.update(w, operator);
    if (!operator) reason = "Running and cancelling need the operator role.";
    else if (w.paused) reason = "The worker is paused: resume it to run it.";
    else if (w.in_flight) {
      reason = `A run is already ${w.in_flight.state}; wait for it to end or cancel it.`;
    } else {
      const alive = ctx.daemonsFor(name);
      if (alive && alive.length === 0) reason = "No daemon is alive to run it: start one (see the health strip).";
    }
    const disabled = !operator || busy.has(name) || !!reason;
    card.runButton.disabled = disabled;
    card.form.submit.disabled = disabled;
    card.reason.textContent = reason;
    card.reason.hidden = !reason;
    renderRow(entry.row, w, { shown: operator, disabled, reason }, ctx.serverNow());
    card.article.dataset.inFlight = w.in_flight ? w.in_flight.state : "";
    card.article.dataset.paused = w.paused ? "true" : "";
    card.article.dataset.ready = readinessFacts(w.readiness).state;
  }

  function renderStatus(el, w) {
    const eff = w.effective;
    const parts = [readinessLine(w)];
    if (eff) {
      const rows = [["Engine", eff.engine?.value ?? "none", eff.engine?.source, "engine"]];
      // A preset needs an engine, and a model comes from a preset.
      if (eff.engine) rows.push(["Preset", eff.preset?.value ?? "none", eff.preset?.source, "preset"]);
      if (eff.model) rows.push(["Model", eff.model, eff.preset?.source ?? eff.engine?.source, "model"]);
      const row = ([k, v, source, field]) => [h("dt", null, k), h("dd", { dataset: { field, source: source ?? "" } },
        h("span", { class: "value" }, v), " ", sourceBadge(source))];
      const option = ([k, r]) => h("li", { dataset: { option: k, source: r.source } },
        h("code", null, k), " = ", h("span", { class: "value" }, valueText(r.value)), " ", sourceBadge(r.source));
      const opts = Object.entries(eff.options);
      const options = opts.length
        ? [h("dt", null, "Options"), h("dd", null, h("ul", { class: "options" }, opts.map(option)))]
        : null;
      parts.push(h("dl", { class: "config" }, rows.map(row), options));
      parts.push(disagreements(w));
      if (eff.endpoint) {
        parts.push(h("p", { class: "endpoint muted" }, "Model server: ", h("code", null, eff.endpoint)));
      }
    } else {
      parts.push(h("p", { class: "error" }, "The effective configuration cannot be resolved: ", w.effective_error));
      parts.push(disagreements(w));
    }
    if (!w.engine_configurable) {
      const link = w.engine_source_url
        ? [" ", h("a", { href: w.engine_source_url, rel: "noopener noreferrer", target: "_blank" },
          "Where it is configured")]
        : null;
      parts.push(h("p", { class: "engine-source" },
        h("strong", null, "Engine not configurable here: "), w.engine_source, link));
    }
    parts.push(describedLine(w));
    // Quarantined documents are said beside the queue (its runs skip them), on the same line: informational, the
    // card's colour stays its readiness.
    const queue = queueLine(w.queue);
    if (w.quarantined > 0) queue.append(" · ", quarantineLink(w.name, w.quarantined));
    parts.push(queue);
    parts.push(limitNotes(w));
    parts.push(freshnessLine(w));
    parts.push(inFlight(w));
    if (w.shards_note) parts.push(h("p", { class: "shards-note muted" }, w.shards_note));
    if (w.preemption_note) parts.push(h("p", { class: "preemption-note muted" }, w.preemption_note));
    parts.push(lastRun(w.last_finished));
    replace(el, parts);
  }

  /** ` by daemon 0193abcd on host-a`, or nothing for no daemon. */
  function byDaemon(id) {
    if (!id) return null;
    const host = ctx.daemons?.find((d) => d.id === id)?.host;
    return [" by daemon ", shortId(id), host ? ` on ${host}` : null];
  }

  function readinessLine(w) {
    const r = w.readiness;
    const f = readinessFacts(r);
    const line = h("p", { class: "readiness-line", dataset: { ready: f.state, checkedAt: r?.checked_at ?? "" } },
      h("strong", null, "Readiness: "), readinessBadge(r));
    if (f.sentence) append(line, [" ", h("span", { class: `readiness-sentence ${f.state}` }, f.sentence)]);
    if (r) append(line, [ageSpan(" · checked ", r.age_seconds), byDaemon(r.checked_by)]);
    return line;
  }

  function disagreements(w) {
    if (!w.disagreements?.length) return null;
    return h("div", { class: "disagreements", role: "note" },
      h("p", null, h("strong", null, "The catalogue and the worker's code disagree; the code wins:")),
      h("ul", null, w.disagreements.map((sentence) => h("li", null, sentence))));
  }

  function describedLine(w) {
    const d = w.described;
    const line = h("p", { class: "described muted", dataset: { describedAt: d?.described_at ?? "" } });
    if (!d?.described_at) append(line, ["Its code has not described itself yet: the catalogue's declarations apply."]);
    else {
      append(line, ["Code described ", ageSpan("", d.age_seconds ?? 0, "age"), byDaemon(d.described_by),
        d.took_ms != null ? ` in ${duration(d.took_ms)}` : "", "."]);
    }
    if (d?.error) {
      // A failed attempt keeps the last description that succeeded (if any): both are worth saying.
      append(line, [" ", h("span", { class: "describe-error" }, "The last describe failed (", timeEl(d.attempted_at),
        `): ${d.error}`)]);
    }
    return line;
  }

  function inFlight(w) {
    const r = w.in_flight;
    if (!r) return null;
    const label = `Progress of ${w.name}'s run`;
    const box = h("div", { class: "in-flight", dataset: { run: r.id, state: r.state } });
    // A claimed run has no start time until its daemon has started the worker.
    const when = r.state === "running"
      ? ["since ", timeEl(r.started_at ?? r.claimed_at), r.daemon_id ? [" on daemon ", shortId(r.daemon_id)] : null]
      : ["requested ", timeEl(r.requested_at), " by ", r.requested_by];
    const items = runningItems(w);
    box.append(h("p", null, stateBadge(r.state), items ? [" ", items, " ·"] : null, " ", when, " ",
      h("a", { href: `#/runs/${r.id}` }, "Details")));
    if (r.state === "queued") box.append(waitingLine(w.waiting));
    if (r.state === "running") {
      const f = progressFacts(r, ctx.serverNow());
      box.append(h("div", { class: "progress" }, progressBar(f, label),
        h("span", { class: "progress-text" }, progressText(f))));
    }
    if (r.cancel_requested_at) {
      box.append(h("p", { class: "muted" }, `Cancellation requested by ${r.cancel_requested_by}.`));
    } else if (ctx.can("operator")) {
      box.append(h("button", {
        type: "button", class: "cancel", disabled: busy.has(w.name), "aria-label": `Cancel the run of ${w.name}`,
        onclick: () => cancel(w.name, r.id),
      }, "Cancel"));
    }
    return box;
  }

  // Why a queued run waits depends on the daemons: those cards are read again, the others only redrawn.
  const stopDaemons = ctx.onDaemons(() => {
    for (const [name, entry] of workers) {
      if (entry.data.in_flight?.state === "queued") debounce(name, () => loadOne(name));
      else update(name);
    }
  });
  loadAll();

  return {
    onEvent(ev) {
      // Daemon events carry no worker: the daemon list (ctx.onDaemons) redraws the cards for those. Every other
      // event (a run, a queue measurement, an override, a `worker` event for a new description or readiness)
      // names its worker, whose card alone is read again. Schedules are read again on their own event.
      schedules.onEvent(ev);
      history.onEvent(ev);
      if (!ev.worker) return;
      if (workers.has(ev.worker)) debounce(ev.worker, () => loadOne(ev.worker));
      // Before the first list has arrived, it may already be older than the change: read it all again.
      else debounce("*", loadAll);
    },
    refresh: loadAll,
    tick() {
      const now = performance.now();
      for (const entry of workers.values()) {
        tickAges(entry.card.status, (now - entry.fetchedAt) / 1000);
        const r = entry.data.in_flight;
        const text = entry.card.status.querySelector(".progress-text");
        if (r?.state === "running" && text) text.textContent = progressText(progressFacts(r, ctx.serverNow()));
      }
      pollItems([...workers.values()], now);
      tickRows([...workers.values()].map((e) => e.row), ctx.serverNow());
    },
    unmount() {
      closed = true;
      debounce.cancel();
      schedules.unmount();
      history.unmount();
      stopDaemons();
    },
  };
}
