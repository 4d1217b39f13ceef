// The workers view: every worker in catalogue order with its effective configuration (each value marked with
// where it comes from), whether it is ready, where its catalogue entry and its code disagree, when its code was
// last described, its queue, its run in flight with live progress (or, while it is queued, why it waits: the
// API's sentence), its last outcome, its schedules (schedules.js), and the Run, Cancel and chore (describe, count,
// check) controls. An event refetches only the worker it concerns. A card whose worker has documents in quarantine
// says how many and links to the quarantine view (`mountQuarantine`, below): the documents, their last errors,
// Release with a reason, and the releases.

import { ApiError, api } from "./api.js";
import { append, debouncer, h, idFor, replace } from "./dom.js";
import { engineFields, optionField, optionInput, readOptions } from "./form.js";
import { createHistory } from "./history.js";
import { createSchedules } from "./schedules.js";
import {
  ageSpan, count, duration, progressBar, progressFacts, progressText, readinessBadge, readinessFacts, resultSummary,
  shortId, sourceBadge, stateBadge, tickAges, timeEl, valueText,
} from "./format.js";

// The chores an operator may ask for now: the endpoint's verb and the button's words.
const CHORES = [
  { verb: "describe", label: "Describe again", title: "Run the worker's describe again (after its code changed)" },
  { verb: "count", label: "Count now", title: "Measure the worker's queue now" },
  { verb: "check", label: "Check now", title: "Ask the worker whether it has what it needs" },
];

export function mount(root, _params, ctx) {
  const workers = new Map(); // name → { data, fetchedAt, card }
  let engines = {};
  const alerts = new Map(); // name → { message, runId }
  const busy = new Set();
  const choresBusy = new Set(); // `${name} ${verb}` while that request is out
  const debounce = debouncer(250);
  const schedules = createSchedules(ctx);
  const history = createHistory();
  let closed = false;

  const list = h("div", { class: "worker-grid", id: "workers", "aria-busy": "true" });
  const notice = h("div", { class: "notice", role: "status" });
  const sources = ["explicit", "override", "default", "external"].map((s, i) => [i ? " " : "", sourceBadge(s)]);
  replace(root, h("div", { class: "view-head" }, h("h1", null, "Workers"),
    h("p", { class: "muted" }, "In catalogue order. Badges say where each value comes from: ", sources, ".")),
  notice, list);

  async function loadAll() {
    schedules.load();
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
      schedules.section("worker", w.name, () => workers.get(w.name)?.data.options ?? w.options),
      history.section(w.name),
      h("div", { class: "actions" }, controls, reason, alert, chores, overrideLink));
    return { article, status, alert, reason, runButton, controls, form: null, formKey: null, chores, choreButtons,
      choreMessage };
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
    if (!operator) reason = "Running and cancelling need the operator role.";
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
    card.article.dataset.inFlight = w.in_flight ? w.in_flight.state : "";
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
    parts.push(inFlight(w));
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

  function queueLine(q) {
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

  function inFlight(w) {
    const r = w.in_flight;
    if (!r) return null;
    const label = `Progress of ${w.name}'s run`;
    const box = h("div", { class: "in-flight", dataset: { run: r.id, state: r.state } });
    // A claimed run has no start time until its daemon has started the worker.
    const when = r.state === "running"
      ? ["since ", timeEl(r.started_at ?? r.claimed_at), r.daemon_id ? [" on daemon ", shortId(r.daemon_id)] : null]
      : ["requested ", timeEl(r.requested_at), " by ", r.requested_by];
    box.append(h("p", null, stateBadge(r.state), " ", when, " ", h("a", { href: `#/runs/${r.id}` }, "Details")));
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

  // Why the queued run waits, as the API said when the card was read (the same reason as on the run's page),
  // with a link to each run it names (those holding the capacity or the resource, or the run a step waits for).
  function waitingLine(waiting) {
    if (!waiting) return h("p", { class: "waiting muted" }, "Waiting for a daemon to claim it.");
    const runs = waiting.runs ?? [];
    const links = runs.map((id, i) => [i ? ", " : "", h("a", { href: `#/runs/${id}` }, shortId(id))]);
    return h("p", { class: `waiting warn waiting-${waiting.code}`, dataset: { code: waiting.code } },
      h("span", { class: "waiting-message" }, waiting.message),
      runs.length ? [" ", h("span", { class: "waiting-runs muted" }, "(see ", links, ")")] : null);
  }

  function lastRun(r) {
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

/** Where a worker's quarantine is shown. */
function quarantineHref(worker) {
  return `#/workers/${encodeURIComponent(worker)}/quarantine`;
}

/** `N documents quarantined`, linking to the worker's quarantine. */
function quarantineLink(worker, n) {
  return h("a", {
    href: quarantineHref(worker), class: "quarantined-link", dataset: { quarantined: n },
    title: "Documents that failed in too many runs in a row: its runs skip them until they are released",
  }, `${count(n)} document${n === 1 ? "" : "s"} quarantined`);
}

/**
 * A button that asks for a reason before it acts, as the override form does: `label` opens a small form with a
 * required reason, `confirm` (its submit button's words) calls `send(reason)`; the API's refusal is shown in its
 * sentence. The form is kept across redraws, so a reason being typed is never lost.
 */
function askReason(idBase, label, confirmLabel, send, buttonClass = "release") {
  const alert = h("p", { class: "alert", role: "alert", hidden: true });
  const reason = h("textarea", {
    id: `${idBase}-reason`, class: "reason-input", name: "reason", rows: 2,
    placeholder: "Why? Recorded with the release.", oninput: () => { alert.hidden = true; },
  });
  const confirm = h("button", { type: "submit", class: "primary" }, confirmLabel);
  const button = h("button", { type: "button", class: buttonClass, onclick: open }, label);
  const never = h("button", { type: "button", class: "never", onclick: close }, "Never mind");
  const attrs = { class: "release-form", hidden: true, novalidate: true, "aria-label": confirmLabel, onsubmit };
  const form = h("form", attrs,
    h("div", { class: "field" }, h("label", { for: reason.id }, "Reason (required)"), reason),
    h("div", { class: "buttons" }, confirm, never));
  const el = h("div", { class: "release-ask" }, button, form, alert);

  function open() {
    form.hidden = false;
    button.hidden = true;
    alert.hidden = true;
    reason.focus();
  }

  function close() {
    form.hidden = true;
    button.hidden = false;
    reason.value = "";
  }

  async function onsubmit(event) {
    event.preventDefault();
    const why = reason.value.trim();
    if (!why) {
      alert.textContent = "Give a reason: it is recorded with the release.";
      alert.hidden = false;
      reason.focus();
      return;
    }
    confirm.disabled = true;
    alert.hidden = true;
    try {
      await send(why);
      close();
    } catch (e) {
      if (!(e instanceof ApiError)) throw e;
      alert.textContent = e.message;
      alert.hidden = false;
    } finally {
      confirm.disabled = false;
    }
  }

  return { el, button, form, close };
}

/**
 * `#/workers/<name>/quarantine`: a worker's quarantine. The documents that failed in `quarantine_after` runs in a
 * row (its runs skip them), each with its streak, when it last failed and its last three errors (each linked to
 * its run); Release per document and Release all, each with a required reason (operators and admins); and the
 * releases, newest first, with who and why. A run of the worker ending may quarantine more: its event reads the
 * view again (a release being typed stays).
 */
export function mountQuarantine(root, [name], ctx) {
  const debounce = debouncer(250);
  const path = `/api/workers/${encodeURIComponent(name)}/quarantine`;
  const entries = new Map(); // item id → { li, update }
  let closed = false;
  let view = null;

  const head = h("div", { class: "view-head" },
    h("p", { class: "crumbs" }, h("a", { href: "#/workers" }, "Workers"), " / ", name),
    h("h1", null, "Quarantine of ", h("code", null, name)));
  const notice = h("div", { class: "notice", role: "status" });
  const summary = h("p", { class: "quarantine-summary", id: "quarantine-summary" });
  const status = h("p", { class: "ok", role: "status", id: "quarantine-status" });
  const list = h("ul", { class: "quarantine-list", id: "quarantine" });
  const all = askReason("release-all", "Release all", "Release every quarantined document", (why) => release(null, why),
    "release-all");
  all.el.id = "release-all";
  const card = h("section", { class: "card quarantine-card", "aria-labelledby": "quarantine-title" },
    h("h2", { id: "quarantine-title" }, "Quarantined documents"), summary, all.el, status, list);
  const releases = h("section", {
    class: "card audit-card", id: "quarantine-releases", "aria-labelledby": "releases-title",
  });
  replace(root, head, notice, card, releases);

  async function load() {
    try {
      const v = await api(path);
      if (closed) return;
      view = v;
      replace(notice);
      render();
    } catch (e) {
      if (!(e instanceof ApiError)) throw e;
      replace(notice, h("p", { class: "error" }, e.message));
    }
  }

  async function release(item, why) {
    const body = item ? { item, reason: why } : { reason: why };
    status.textContent = "";
    const answer = await api(`${path}/release`, { method: "POST", body });
    const n = answer.released;
    status.textContent = item ? `${item} is released: the next run processes it again.`
      : `${count(n)} document${n === 1 ? " is" : "s are"} released: the next run processes them again.`;
    await load();
  }

  function buildEntry(id) {
    const ask = askReason(idFor("release", id), "Release", `Release ${id}`, (why) => release(id, why));
    const about = h("div", { class: "quarantined-facts" });
    const li = h("li", { class: "quarantined", dataset: { item: id } }, about, ask.el);
    const update = (q) => {
      const error = (e) => h("li", null,
        e.class ? [h("code", { class: "item-class" }, e.class), " "] : null,
        e.error ?? h("span", { class: "muted" }, "no error given"), " ",
        h("span", { class: "muted" }, "(run ", h("a", { href: `#/runs/${e.run_id}` }, shortId(e.run_id)), ")"));
      li.dataset.failures = q.failures;
      replace(about,
        h("p", null, h("code", { class: "item-id" }, q.id), " · ",
          `failed in ${count(q.failures)} run${q.failures === 1 ? "" : "s"} in a row`, " · last failed ",
          timeEl(q.last_failed_at)),
        q.errors.length
          ? h("ol", { class: "item-errors", "aria-label": `Last errors of ${q.id}, newest first` }, q.errors.map(error))
          : null);
      ask.el.hidden = !ctx.can("operator");
    };
    return { li, update };
  }

  function render() {
    const v = view;
    const n = v.quarantined;
    const after = v.quarantine_after;
    const docs = (k) => `${count(k)} document${k === 1 ? "" : "s"}`;
    if (after == null) {
      replace(summary, `${name} has no quarantine: its catalogue entry sets no quarantine_after, so its runs skip `,
        "nothing.");
    } else {
      replace(summary, `${name} quarantines a document after ${count(after)} failing run${after === 1 ? "" : "s"} `,
        "in a row: its runs skip it until it is released. ",
        h("strong", { id: "quarantined-count", dataset: { count: n } },
          n ? `${docs(n)} ${n === 1 ? "is" : "are"} quarantined.` : "No document is quarantined."),
        v.items.length < n ? ` The first ${count(v.items.length)} are listed.` : "",
        ctx.can("operator") ? "" : " Releasing needs the operator role.");
    }
    summary.dataset.after = after ?? "";
    all.el.hidden = !ctx.can("operator") || after == null || n === 0;
    if (all.el.hidden) all.close();
    const seen = new Set();
    const lis = v.items.map((q) => {
      seen.add(q.id);
      let entry = entries.get(q.id);
      if (!entry) {
        entry = buildEntry(q.id);
        entries.set(q.id, entry);
      }
      entry.update(q);
      return entry.li;
    });
    for (const k of [...entries.keys()]) if (!seen.has(k)) entries.delete(k);
    // Entries are kept across redraws (a reason being typed stays); only the list's order is set again.
    if (lis.length !== list.children.length || lis.some((li, i) => list.children[i] !== li)) replace(list, lis);
    list.hidden = !lis.length;

    const row = (r) => h("tr", { dataset: { item: r.item ?? "", actor: r.actor } },
      h("td", null, timeEl(r.at)), h("td", { class: "actor" }, r.actor),
      h("td", null, r.item ? h("code", null, r.item) : `all (${docs(r.released)})`),
      h("td", { class: "reason" }, r.reason));
    replace(releases, h("h2", { id: "releases-title" }, "Releases"),
      v.releases.length
        ? h("div", { class: "table-wrap" }, h("table", { class: "audit releases", id: "releases" },
          h("thead", null, h("tr", null, ["When", "Who", "Released", "Reason"].map((c) =>
            h("th", { scope: "col" }, c)))),
          h("tbody", null, v.releases.map(row))))
        : h("p", { class: "muted" }, "Nothing has been released."));
  }

  load();

  return {
    onEvent(ev) {
      // A run of the worker that ends may quarantine documents (or, succeeding, end a streak).
      if (ev.kind === "run" && ev.worker === name) debounce("quarantine", load);
    },
    refresh: load,
    unmount() {
      closed = true;
      debounce.cancel();
    },
  };
}
