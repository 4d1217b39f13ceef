// The schedules of one target (a worker or a pipeline), as a section of its card: each schedule's cron and zone,
// whether it is enabled, its policies, the next three fire times as the server computed them, and its last fire's
// outcome (the run it requested, or why it was skipped or missed). For operators: a form to create or edit one,
// with a live preview of its next fires (or the API's sentence under the field at fault), and Pause, Resume and
// Delete buttons that ask for a reason, as the override form does. Every section of a view shares one list,
// read again on a `schedule` event.

import { ApiError, api } from "./api.js";
import { debouncer, h, idFor, replace } from "./dom.js";
import { field, optionField, optionInput, readOptions } from "./form.js";
import { timeEl, valueText } from "./format.js";

const OVERLAP = { skip: "skip the fire", queue: "let it wait for the run to end" };
const MISSED = { skip: "record them as missed", once: "run the latest once on recovery" };
const ASK = { pause: "Pause", resume: "Resume", delete: "Delete" };

/** `03:00 Europe/Berlin`: the instant as a wall clock of `zone`, or nothing when that is the browser's zone. */
function zoneTime(iso, zone) {
  try {
    if (!zone || zone === Intl.DateTimeFormat().resolvedOptions().timeZone) return null;
    const text = new Intl.DateTimeFormat("en-GB", {
      timeZone: zone, weekday: "short", hour: "2-digit", minute: "2-digit", second: "2-digit",
    }).format(new Date(iso));
    return h("span", { class: "zone-time muted" }, ` (${text} ${zone})`);
  } catch {
    return null;
  }
}

/** The fire times as a list: local, and in the schedule's zone. */
export function fireList(times, zone, attrs = {}) {
  return h("ol", { class: "upcoming", ...attrs },
    times.map((t) => h("li", { dataset: { at: t } }, timeEl(t), zoneTime(t, zone))));
}

/** The badge of a fire's outcome. */
export function outcomeBadge(outcome) {
  return h("span", { class: `badge fire fire-${outcome}`, dataset: { outcome } }, outcome);
}

/** A schedule's last fire: what it did, and the run it led to or why it did not. */
function lastFire(f) {
  if (!f) return h("p", { class: "last-fire muted", dataset: { outcome: "none" } }, "Not fired yet.");
  const led = [];
  if (f.run_id) led.push(" — ", h("a", { href: `#/runs/${f.run_id}` }, "its run"));
  if (f.pipeline_run_id) led.push(" — ", h("a", { href: `#/pipelines/runs/${f.pipeline_run_id}` }, "its pipeline run"));
  if (f.reason) led.push(": ", h("span", { class: "fire-reason" }, f.reason));
  if (f.blocked_by) led.push(" (", h("a", { href: `#/runs/${f.blocked_by}` }, "the run in flight"), ")");
  return h("p", { class: "last-fire", dataset: { outcome: f.outcome } },
    h("strong", null, "Last fire: "), timeEl(f.fire_at), " ", outcomeBadge(f.outcome), led);
}

/** A run's arguments as `name=value` words (options lifted beside engine and preset). */
function argumentsText(args) {
  if (!args || typeof args !== "object") return "";
  const words = [];
  for (const [k, v] of Object.entries(args)) {
    if (k === "options" && v && typeof v === "object") {
      for (const [o, x] of Object.entries(v)) words.push(`${o}=${valueText(x)}`);
    } else if (v && typeof v === "object" && !Array.isArray(v) && (v.options || v.engine || v.preset)) {
      words.push(`${k}: ${argumentsText(v)}`);
    } else words.push(`${k}=${valueText(v)}`);
  }
  return words.join(" ");
}

/** The browser's IANA zones, once, as the datalist of every time-zone field. */
function zoneList() {
  if (document.getElementById("time-zones")) return;
  let zones = [];
  try {
    zones = Intl.supportedValuesOf("timeZone");
  } catch {
    zones = [];
  }
  document.body.append(h("datalist", { id: "time-zones" },
    ["UTC", ...zones.filter((z) => z !== "UTC")].map((z) => h("option", { value: z }))));
}

function select(id, choices) {
  const option = ([value, text]) => h("option", { value }, `${value}: ${text}`);
  return h("select", { id }, Object.entries(choices).map(option));
}

/** The schedules of a view: `section(kind, target, optionsOf)` gives a target's section, `load` reads them all. */
export function createSchedules(ctx) {
  let views = null;
  let error = null;
  let closed = false;
  const sections = new Map(); // `${kind}:${target}` → { el, render }
  const debounce = debouncer(250);

  async function load() {
    try {
      const data = await api("/api/schedules");
      if (closed) return;
      views = data;
      error = null;
    } catch (e) {
      if (!(e instanceof ApiError)) throw e;
      error = e.message;
    }
    for (const s of sections.values()) s.render();
  }

  function section(kind, target, optionsOf = () => []) {
    const key = `${kind}:${target}`;
    if (sections.has(key)) return sections.get(key).el;
    const prefix = idFor(kind, target);
    const id = `${prefix}-schedules`;
    const status = h("p", { class: "muted" });
    const list = h("ul", { class: "schedule-list" });
    const el = h("section", { class: "schedules", id, dataset: { kind, target }, "aria-labelledby": `${id}-title` },
      h("h3", { id: `${id}-title` }, "Schedules"), status, list);
    const items = new Map(); // schedule id → item
    let editor = null;

    function render() {
      const operator = ctx.can("operator");
      if (operator && !editor) {
        editor = buildEditor(kind, target, prefix, optionsOf);
        el.append(editor.el);
      } else if (!operator && editor) {
        editor.el.remove();
        editor = null;
      }
      const mine = (views ?? []).filter((v) => v.target_kind === kind && v.target === target);
      status.className = error ? "error" : "muted";
      status.textContent = error ?? (views === null ? "Loading the schedules…" : mine.length ? "" : "No schedule.");
      status.hidden = !status.textContent;
      const seen = new Set();
      const lis = mine.map((v) => {
        seen.add(v.id);
        let item = items.get(v.id);
        if (!item) {
          item = buildItem(v, prefix, () => editor);
          items.set(v.id, item);
        }
        item.update(v);
        return item.li;
      });
      for (const k of [...items.keys()]) if (!seen.has(k)) items.delete(k);
      // Items are kept across redraws (a reason being typed stays); only their order is set again.
      if (lis.length !== list.children.length || lis.some((li, i) => list.children[i] !== li)) replace(list, lis);
    }

    sections.set(key, { el, render });
    render();
    return el;
  }

  /** One schedule: its facts (redrawn), and its buttons and reason form (kept). */
  function buildItem(first, prefix, editorOf) {
    let v = first;
    let action = null;
    const rid = `${idFor(`${prefix}-schedule`, first.name)}-reason`;
    const facts = h("div", { class: "schedule-facts" });
    const alert = h("p", { class: "alert", role: "alert", hidden: true });
    const button = (cls, label, onclick) => h("button", { type: "button", class: cls, onclick }, label);
    const pause = button("schedule-pause", "Pause", () => ask("pause"));
    const resume = button("schedule-resume", "Resume", () => ask("resume"));
    const edit = button("schedule-edit", "Edit", () => editorOf()?.edit(v));
    const remove = button("schedule-delete danger", "Delete", () => ask("delete"));
    const controls = h("div", { class: "buttons schedule-controls" }, edit, pause, resume, remove);
    const reason = h("textarea", {
      id: rid, class: "reason-input", rows: 2, placeholder: "Why? Recorded in the audit trail.",
    });
    const confirm = h("button", { type: "submit", class: "primary" });
    const never = button("", "Never mind", () => close());
    const askForm = h("form", { class: "schedule-reason", hidden: true, novalidate: true, onsubmit: submit },
      field(rid, "Reason (required)", reason), h("div", { class: "buttons" }, confirm, never));
    const li = h("li", { class: "schedule", dataset: { schedule: first.name, id: first.id } },
      facts, controls, askForm, alert);

    function ask(which) {
      action = which;
      confirm.textContent = `${ASK[which]} ${v.name}`;
      confirm.className = which === "delete" ? "danger" : "primary";
      askForm.dataset.action = which;
      askForm.hidden = false;
      alert.hidden = true;
      reason.focus();
    }

    function close() {
      action = null;
      askForm.hidden = true;
      reason.value = "";
    }

    async function submit(event) {
      event.preventDefault();
      const why = reason.value.trim();
      if (!why) {
        alert.textContent = "Give a reason: it is recorded in the audit trail.";
        alert.hidden = false;
        reason.focus();
        return;
      }
      confirm.disabled = true;
      try {
        const path = `/api/schedules/${v.id}`;
        if (action === "delete") await api(path, { method: "DELETE", body: { reason: why } });
        else await api(`${path}/${action}`, { method: "POST", body: { reason: why } });
        close();
        await load();
      } catch (e) {
        if (!(e instanceof ApiError)) throw e;
        alert.textContent = e.message;
        alert.hidden = false;
      } finally {
        confirm.disabled = false;
      }
    }

    function update(next) {
      v = next;
      li.dataset.schedule = v.name;
      li.dataset.enabled = String(v.enabled);
      const state = v.enabled
        ? h("span", { class: "badge enabled" }, "enabled")
        : h("span", { class: "badge paused" }, "paused");
      const args = argumentsText(v.arguments);
      const upcoming = v.upcoming.length
        ? [h("p", null, h("strong", null, "Next fires:")), fireList(v.upcoming, v.time_zone)]
        : h("p", { class: "muted" }, v.enabled ? "It has no fire to come." : "Paused: nothing fires until resumed.");
      replace(facts,
        h("p", { class: "schedule-head" }, h("strong", { class: "schedule-name" }, v.name), " ",
          h("code", { class: "cron" }, v.cron), " in ", h("span", { class: "zone" }, v.time_zone), " ", state),
        h("p", { class: "policies muted" }, `overlap ${v.overlap} · missed ${v.missed}`, args ? ` · ${args}` : ""),
        upcoming,
        v.waiting_fire_at ? h("p", { class: "warn" }, "The fire of ", timeEl(v.waiting_fire_at),
          " waits for the run in flight.") : null,
        lastFire(v.last_fire));
      const operator = ctx.can("operator");
      controls.hidden = !operator;
      if (!operator) close();
      pause.hidden = !v.enabled;
      resume.hidden = v.enabled;
    }

    return { li, update };
  }

  /** The form that creates a schedule of the target, or edits one (`edit(view)`), with a live preview. */
  function buildEditor(kind, target, prefix, optionsOf) {
    zoneList();
    const p = `${prefix}-sched`;
    let editing = null;
    let seq = 0;
    const soon = debouncer(300);
    const name = h("input", { id: `${p}-name`, autocomplete: "off", spellcheck: "false", placeholder: "nightly" });
    const cron = h("input", {
      id: `${p}-cron`, autocomplete: "off", spellcheck: "false", placeholder: "0 3 * * *",
      "aria-describedby": `${p}-cron-error ${p}-preview`,
    });
    const zone = h("input", { id: `${p}-zone`, list: "time-zones", autocomplete: "off", value: "UTC" });
    const cronError = h("p", { class: "field-error", id: `${p}-cron-error`, hidden: true });
    const zoneError = h("p", { class: "field-error", id: `${p}-zone-error`, hidden: true });
    const preview = h("div", { class: "preview", id: `${p}-preview`, "aria-live": "polite" });
    const overlap = select(`${p}-overlap`, OVERLAP);
    const missed = select(`${p}-missed`, MISSED);
    const paused = h("input", { type: "checkbox", id: `${p}-paused` });
    const reason = h("textarea", { id: `${p}-reason`, rows: 2, placeholder: "Why? Recorded in the audit trail." });
    const optionFields = optionsOf().map((spec) => {
      const input = optionInput(spec, p, "the worker's configured value", (text) => text);
      return { spec, input };
    });
    const alert = h("p", { class: "alert", role: "alert", hidden: true, id: `${p}-alert` });
    const done = h("p", { class: "ok", role: "status", id: `${p}-status` });
    const save = h("button", { type: "submit", class: "primary" }, "Create the schedule");
    const stop = h("button", { type: "button", hidden: true, onclick: () => reset() }, "Stop editing");
    const title = h("summary", null, "New schedule…");
    const form = h("form", { class: "schedule-form", novalidate: true, onsubmit: submit,
      "aria-label": `A schedule of ${target}` },
    field(name.id, "Name", name),
    field(cron.id, "Cron expression", cron, cronError, preview,
      h("small", { class: "muted" }, "Five fields (minute hour day month weekday), six with seconds, or @daily.")),
    field(zone.id, "Time zone", zone, zoneError),
    field(overlap.id, "While a run is in flight", overlap),
    field(missed.id, "Fires missed while no daemon ran", missed),
    h("span", { class: "check" }, paused, h("label", { for: paused.id }, "Paused")),
    optionFields.map(({ spec, input }) => optionField(spec, input)),
    field(reason.id, "Reason (required)", reason),
    h("div", { class: "buttons" }, save, stop), alert, done);
    const details = h("details", { class: "schedule-new" }, title, form);
    for (const input of [cron, zone]) input.addEventListener("input", () => soon("preview", runPreview));

    function fieldError(e) {
      const cronBad = e?.code === "invalid_cron";
      const zoneBad = e?.code === "invalid_time_zone";
      cronError.textContent = cronBad ? e.message : "";
      cronError.hidden = !cronBad;
      zoneError.textContent = zoneBad ? e.message : "";
      zoneError.hidden = !zoneBad;
      cron.setAttribute("aria-invalid", String(cronBad));
      zone.setAttribute("aria-invalid", String(zoneBad));
      return cronBad || zoneBad;
    }

    async function runPreview() {
      const mine = ++seq;
      const expr = cron.value.trim();
      if (!expr) {
        fieldError(null);
        replace(preview);
        return;
      }
      try {
        const body = { cron: expr, time_zone: zone.value.trim() || "UTC" };
        const answer = await api("/api/schedules/preview", { method: "POST", body });
        if (mine !== seq) return;
        fieldError(null);
        preview.dataset.state = "ok";
        replace(preview, h("span", { class: "muted" }, "Next fires:"), fireList(answer.upcoming, answer.time_zone));
      } catch (e) {
        if (!(e instanceof ApiError)) throw e;
        if (mine !== seq) return;
        preview.dataset.state = "error";
        replace(preview);
        if (!fieldError(e)) replace(preview, h("p", { class: "error" }, e.message));
      }
    }

    function fill(v) {
      name.value = v?.name ?? "";
      cron.value = v?.cron ?? "";
      zone.value = v?.time_zone ?? "UTC";
      overlap.value = v?.overlap ?? "skip";
      missed.value = v?.missed ?? "skip";
      paused.checked = v ? !v.enabled : false;
      reason.value = "";
      const options = v?.arguments?.options ?? {};
      for (const { spec, input } of optionFields) {
        input.value = Object.hasOwn(options, spec.name) ? (input.tagName === "SELECT"
          ? JSON.stringify(options[spec.name]) : valueText(options[spec.name])) : "";
      }
    }

    function reset() {
      editing = null;
      fill(null);
      title.textContent = "New schedule…";
      save.textContent = "Create the schedule";
      stop.hidden = true;
      alert.hidden = true;
      fieldError(null);
      replace(preview);
    }

    function edit(v) {
      editing = v;
      fill(v);
      title.textContent = `Edit schedule ${v.name}`;
      save.textContent = "Save the schedule";
      stop.hidden = false;
      done.textContent = "";
      details.open = true;
      runPreview();
      cron.focus();
    }

    async function submit(event) {
      event.preventDefault();
      alert.hidden = true;
      done.textContent = "";
      const why = reason.value.trim();
      if (!why) {
        alert.textContent = "Give a reason: it is recorded in the audit trail.";
        alert.hidden = false;
        reason.focus();
        return;
      }
      const body = {
        name: name.value.trim(), cron: cron.value.trim(), time_zone: zone.value.trim() || "UTC",
        overlap: overlap.value, missed: missed.value, enabled: !paused.checked, reason: why,
      };
      body[kind] = target;
      const args = editing ? { ...(editing.arguments ?? {}) } : {};
      if (kind === "worker") {
        const options = readOptions(optionFields);
        delete args.options;
        if (Object.keys(options).length) args.options = options;
      }
      body.arguments = args;
      save.disabled = true;
      try {
        const saved = editing
          ? await api(`/api/schedules/${editing.id}`, { method: "PUT", body })
          : await api("/api/schedules", { method: "POST", body });
        reset();
        details.open = false;
        done.textContent = `Saved schedule ${saved.name}.`;
        await load();
      } catch (e) {
        if (!(e instanceof ApiError)) throw e;
        if (!fieldError(e)) {
          alert.textContent = e.message;
          alert.hidden = false;
        }
      } finally {
        save.disabled = false;
      }
    }

    return { el: h("div", { class: "schedule-editor" }, details, done), edit };
  }

  return {
    section,
    load,
    onEvent(ev) {
      if (ev.kind === "schedule") debounce("schedules", load);
    },
    unmount() {
      closed = true;
      debounce.cancel();
    },
  };
}
