// A worker's override (admin): partial fields (a field left alone keeps its value; "clear" follows the default
// again), a required reason, and the append-only audit trail beneath. A worker whose engine comes from elsewhere
// says where, and links there, instead of offering the engine.

import { ApiError, api } from "./api.js";
import { debouncer, h, replace } from "./dom.js";
import { engineFields, optionField, optionInput, readOptions } from "./form.js";
import { sourceBadge, timeEl, valueText } from "./format.js";

// The engine and preset selects' own values, beside the engines' and presets' names.
const KEEP = "__keep__";
const CLEAR = "__clear__";

export function mount(root, [name], ctx) {
  const debounce = debouncer(250);
  let closed = false;
  let worker = null;
  let engines = {};
  let names = [];

  const head = h("div", { class: "view-head" });
  const notice = h("div", { class: "notice", role: "status" });
  const current = h("section", { class: "card", "aria-labelledby": "current-title" });
  const editor = h("section", { class: "card", "aria-labelledby": "edit-title" });
  const audit = h("section", { class: "card audit-card", "aria-labelledby": "audit-title" });
  replace(root, head, notice, h("div", { class: "override-grid" }, current, editor), audit);

  async function loadAll() {
    try {
      const data = await api("/api/workers");
      if (closed) return;
      engines = data.engines;
      names = data.workers.map((w) => w.name);
      if (!name) {
        if (names.length) ctx.navigate(`#/overrides/${encodeURIComponent(names[0])}`);
        else replace(notice, h("p", { class: "muted" }, "The catalogue has no workers."));
        return;
      }
      worker = data.workers.find((w) => w.name === name) ?? null;
      if (!worker) {
        replace(notice, h("p", { class: "error" }, `There is no worker ${JSON.stringify(name)}.`));
        return;
      }
      renderHead();
      renderCurrent();
      renderEditor();
      loadAudit();
    } catch (e) {
      if (!(e instanceof ApiError)) throw e;
      replace(notice, h("p", { class: "error" }, e.message));
    }
  }

  async function loadWorker() {
    try {
      worker = await api(`/api/workers/${encodeURIComponent(name)}`);
      if (closed) return;
      renderCurrent();
    } catch (e) {
      if (!(e instanceof ApiError)) throw e;
      replace(notice, h("p", { class: "error" }, e.message));
    }
  }

  function renderHead() {
    const picker = h("select", {
      id: "override-worker", onchange: (e) => ctx.navigate(`#/overrides/${encodeURIComponent(e.target.value)}`),
    }, names.map((n) => h("option", { value: n, selected: n === name }, n)));
    replace(head, h("h1", null, "Override of ", h("code", null, name)),
      h("div", { class: "field inline" }, h("label", { for: "override-worker" }, "Worker"), picker));
  }

  function renderCurrent() {
    const w = worker;
    const eff = w.effective;
    const rows = [];
    if (eff) {
      rows.push(["engine", eff.engine?.value ?? "none", eff.engine?.source]);
      // A preset needs an engine, and a model comes from a preset.
      if (eff.engine) rows.push(["preset", eff.preset?.value ?? "none", eff.preset?.source]);
      if (eff.model) rows.push(["model", eff.model, eff.preset?.source ?? eff.engine?.source]);
      for (const [k, v] of Object.entries(eff.options)) rows.push([k, valueText(v.value), v.source]);
    }
    const row = ([k, v, s]) => h("tr", { dataset: { field: k, source: s ?? "" } },
      h("th", { scope: "row" }, k), h("td", null, h("code", { class: "value" }, v)), h("td", null, sourceBadge(s)));
    const table = rows.length
      ? h("table", { class: "config-table", id: "effective" },
        h("thead", null, h("tr", null, ["Field", "Value", "Source"].map((c) => h("th", { scope: "col" }, c)))),
        h("tbody", null, rows.map(row)))
      : null;
    const link = w.engine_source_url
      ? [" ", h("a", {
        href: w.engine_source_url, rel: "noopener noreferrer", target: "_blank", id: "engine-source-link",
      }, "Where it is configured")]
      : null;
    const elsewhere = w.engine_configurable
      ? null
      : h("p", { class: "engine-source" },
        h("strong", null, "The engine is not editable here. "), w.engine_source, link);
    const stored = w.override;
    const changed = stored
      ? ["Override last changed by ", stored.updated_by, " at ", timeEl(stored.updated_at), "."]
      : "No override: every value follows the catalogue.";
    replace(current, h("h2", { id: "current-title" }, "Effective configuration"),
      table,
      w.effective_error ? h("p", { class: "error" }, w.effective_error) : null,
      elsewhere,
      h("p", { class: "muted" }, changed));
  }

  function renderEditor() {
    const w = worker;
    if (!ctx.can("admin")) {
      replace(editor, h("h2", { id: "edit-title" }, "Change the override"),
        h("p", { class: "muted" }, "Changing an override needs the admin role."));
      return;
    }
    const stored = w.override?.values ?? {};
    const eff = w.effective ?? {};
    const fields = [];
    let picks = null;
    if (w.engine_configurable) {
      const keep = (field) => (stored[field]
        ? `override: ${stored[field]}`
        : `follows the default: ${eff[field]?.value ?? "none"}`);
      picks = engineFields("ov", engines, eff.engine?.value, (text) => `set to ${text}`, (field) => [
        h("option", { value: KEEP }, `keep (${keep(field)})`),
        stored[field] ? h("option", { value: CLEAR }, "clear the override (follow the default)") : null,
      ]);
      fields.push(picks.fields);
    }
    const optionInputs = [];
    for (const o of w.options) {
      const overridden = Object.hasOwn(stored.options ?? {}, o.name);
      const now = eff.options?.[o.name];
      const hint = overridden ? `keep (override: ${valueText(stored.options[o.name])})`
        : `keep (${now ? `${now.source}: ${valueText(now.value)}` : "worker's own default"})`;
      const input = optionInput(o, "ov", hint, (text) => `set to ${text}`);
      const clearId = `${input.id}-clear`;
      const clear = overridden
        ? h("input", { type: "checkbox", id: clearId, onchange: (e) => { input.disabled = e.target.checked; } })
        : null;
      optionInputs.push({ spec: o, input, clear });
      fields.push(optionField(o, input,
        clear ? h("span", { class: "check" }, clear, h("label", { for: clearId }, "clear the override")) : null));
    }
    const reason = h("textarea", {
      id: "ov-reason", name: "reason", required: true, rows: 2, placeholder: "Why? Recorded in the audit trail.",
    });
    const alert = h("p", { class: "alert", role: "alert", hidden: true, id: "override-alert" });
    const status = h("p", { class: "ok", role: "status", id: "override-status" });
    const save = h("button", { type: "submit", class: "primary" }, "Save the override");
    const remove = h("button", {
      type: "button", class: "danger", disabled: !w.override, onclick: () => submit("DELETE"),
    }, "Remove the whole override");
    const onsubmit = (e) => {
      e.preventDefault();
      submit("PUT");
    };
    const label = `Override of ${name}`;
    const attrs = { class: "override-form", id: "override-form", novalidate: true, "aria-label": label, onsubmit };
    const form = h("form", attrs,
      fields.length ? fields : h("p", { class: "muted" }, "This worker has nothing to override."),
      h("div", { class: "field" }, h("label", { for: "ov-reason" }, "Reason (required)"), reason),
      h("div", { class: "buttons" }, save, remove), alert, status);

    async function submit(method) {
      alert.hidden = true;
      status.textContent = "";
      const why = reason.value.trim();
      if (!why) {
        alert.textContent = "Give a reason: it is recorded in the audit trail.";
        alert.hidden = false;
        reason.focus();
        return;
      }
      const body = { reason: why };
      if (method === "PUT") {
        // A select left on "keep" sends nothing; "clear" sends null, which follows the default again.
        for (const select of picks ? [picks.engine, picks.preset] : []) {
          if (select.value !== KEEP) body[select.name] = select.value === CLEAR ? null : select.value;
        }
        const options = readOptions(optionInputs);
        if (Object.keys(options).length) body.options = options;
        if (Object.keys(body).length === 1) {
          alert.textContent = "Nothing to change: set or clear at least one field.";
          alert.hidden = false;
          return;
        }
      }
      save.disabled = true;
      remove.disabled = true;
      try {
        await api(`/api/workers/${encodeURIComponent(name)}/override`, { method, body });
        await loadWorker();
        renderEditor();
        editor.querySelector("#override-status").textContent = method === "PUT" ? "Saved." : "The override is removed.";
        loadAudit();
      } catch (e) {
        if (!(e instanceof ApiError)) throw e;
        alert.textContent = e.message;
        alert.hidden = false;
        save.disabled = false;
        remove.disabled = !w.override;
      }
    }

    replace(editor, h("h2", { id: "edit-title" }, "Change the override"),
      h("p", { class: "muted" }, "Only the fields you set or clear change; the others keep their value."), form);
  }

  async function loadAudit() {
    try {
      const { entries } = await api(`/api/workers/${encodeURIComponent(name)}/audit`);
      if (closed) return;
      const entry = (a) => h("tr", { dataset: { id: a.id, action: a.action } },
        h("td", null, timeEl(a.at)), h("td", null, a.actor), h("td", null, a.action),
        h("td", null, changes(a.before, a.after)), h("td", { class: "reason" }, a.reason));
      replace(audit, h("h2", { id: "audit-title" }, "Audit trail"),
        entries.length
          ? h("div", { class: "table-wrap" }, h("table", { class: "audit", id: "audit" },
            h("thead", null, h("tr", null, ["When", "Who", "Action", "Change", "Reason"].map((c) =>
              h("th", { scope: "col" }, c)))),
            h("tbody", null, entries.map(entry))))
          : h("p", { class: "muted" }, "No change has been recorded."));
    } catch (e) {
      if (!(e instanceof ApiError)) throw e;
      replace(audit, h("h2", { id: "audit-title" }, "Audit trail"), h("p", { class: "error" }, e.message));
    }
  }

  loadAll();

  return {
    onEvent(ev) {
      if (ev.kind === "override" && ev.worker === name) {
        debounce("override", () => {
          loadWorker();
          loadAudit();
        });
      }
      // A new description may change the effective configuration (the code's defaults win over the catalogue's).
      if (ev.kind === "worker" && ev.worker === name) debounce("worker", loadWorker);
    },
    refresh() {
      loadWorker();
      loadAudit();
    },
    unmount() {
      closed = true;
      debounce.cancel();
    },
  };
}

/** The fields that differ between two overrides, as `field: before → after` items. */
function changes(before, after) {
  const flat = (o) => {
    const out = {};
    if (o?.engine != null) out.engine = o.engine;
    if (o?.preset != null) out.preset = o.preset;
    for (const [k, v] of Object.entries(o?.options ?? {})) out[k] = v;
    return out;
  };
  const b = flat(before);
  const a = flat(after);
  const keys = [...new Set([...Object.keys(b), ...Object.keys(a)])];
  if (!keys.length) return h("span", { class: "muted" }, "nothing");
  const side = (o, k) => (k in o ? valueText(o[k]) : h("span", { class: "muted" }, "default"));
  return h("ul", { class: "changes" }, keys.filter((k) => valueText(b[k]) !== valueText(a[k])).map((k) =>
    h("li", null, h("code", null, k), ": ", side(b, k), " → ", side(a, k))));
}
