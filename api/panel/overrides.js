// A worker's override (admin): partial fields (a field left alone keeps its value; "clear" follows the default
// again), a required reason, and the append-only audit trail beneath. A worker whose engine comes from elsewhere
// says where, and links there, instead of offering the engine.

import { ApiError, api } from "./api.js";
import { debouncer, h, replace } from "./dom.js";
import { sourceBadge, timeEl, valueText } from "./format.js";

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
      engines = data?.engines ?? {};
      names = (data?.workers ?? []).map((w) => w.name);
      if (!name) {
        if (names.length) ctx.navigate(`#/overrides/${encodeURIComponent(names[0])}`);
        else replace(notice, h("p", { class: "muted" }, "The catalogue has no workers."));
        return;
      }
      worker = (data?.workers ?? []).find((w) => w.name === name) ?? null;
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
    const picker = h("select", { id: "override-worker", onchange: (e) => ctx.navigate(`#/overrides/${encodeURIComponent(e.target.value)}`) },
      names.map((n) => h("option", { value: n, selected: n === name }, n)));
    replace(head, h("h1", null, "Override of ", h("code", null, name)),
      h("div", { class: "field inline" }, h("label", { for: "override-worker" }, "Worker"), picker));
  }

  function renderCurrent() {
    const w = worker;
    const eff = w.effective;
    const rows = [];
    if (eff) {
      rows.push(["engine", eff.engine?.value ?? "none", eff.engine?.source]);
      if (eff.engine || eff.preset) rows.push(["preset", eff.preset?.value ?? "none", eff.preset?.source]);
      if (eff.model) rows.push(["model", eff.model, eff.preset?.source ?? eff.engine?.source]);
      for (const [k, v] of Object.entries(eff.options ?? {})) rows.push([k, valueText(v.value), v.source]);
    }
    const stored = w.override;
    replace(current, h("h2", { id: "current-title" }, "Effective configuration"),
      rows.length ? h("table", { class: "config-table", id: "effective" }, h("thead", null, h("tr", null, h("th", { scope: "col" }, "Field"), h("th", { scope: "col" }, "Value"), h("th", { scope: "col" }, "Source"))),
        h("tbody", null, rows.map(([k, v, s]) => h("tr", { dataset: { field: k, source: s ?? "" } }, h("th", { scope: "row" }, k), h("td", null, h("code", { class: "value" }, v)), h("td", null, sourceBadge(s)))))) : null,
      w.effective_error ? h("p", { class: "error" }, w.effective_error) : null,
      !w.engine_configurable ? h("p", { class: "engine-source" }, h("strong", null, "The engine is not editable here. "), w.engine_source ?? "It is configured elsewhere.",
        w.engine_source_url ? [" ", h("a", { href: w.engine_source_url, rel: "noopener noreferrer", target: "_blank", id: "engine-source-link" }, "Where it is configured")] : null) : null,
      stored ? h("p", { class: "muted" }, "Override last changed by ", stored.updated_by, " at ", timeEl(stored.updated_at), ".") : h("p", { class: "muted" }, "No override: every value follows the catalogue."));
  }

  function renderEditor() {
    const w = worker;
    if (!ctx.can("admin")) {
      replace(editor, h("h2", { id: "edit-title" }, "Change the override"), h("p", { class: "muted" }, "Changing an override needs the admin role."));
      return;
    }
    const stored = w.override?.values ?? {};
    const eff = w.effective ?? {};
    const fields = [];
    let engineSelect = null;
    let presetSelect = null;
    if (w.engine_configurable) {
      engineSelect = h("select", { id: "ov-engine", name: "engine" },
        h("option", { value: KEEP }, `keep (${stored.engine ? `override: ${stored.engine}` : `follows the default: ${eff.engine?.value ?? "none"}`})`),
        Object.keys(engines).map((e) => h("option", { value: e }, `set to ${e}`)),
        stored.engine ? h("option", { value: CLEAR }, "clear the override (follow the default)") : null);
      presetSelect = h("select", { id: "ov-preset", name: "preset" });
      const fill = () => {
        const engine = engineSelect.value !== KEEP && engineSelect.value !== CLEAR ? engineSelect.value : eff.engine?.value;
        replace(presetSelect,
          h("option", { value: KEEP }, `keep (${stored.preset ? `override: ${stored.preset}` : `follows the default: ${eff.preset?.value ?? "none"}`})`),
          Object.entries(engines[engine]?.presets ?? {}).map(([p, model]) => h("option", { value: p }, `set to ${p} (${model})`)),
          stored.preset ? h("option", { value: CLEAR }, "clear the override (follow the default)") : null);
      };
      engineSelect.addEventListener("change", fill);
      fill();
      fields.push(h("div", { class: "field" }, h("label", { for: "ov-engine" }, "Engine"), engineSelect));
      fields.push(h("div", { class: "field" }, h("label", { for: "ov-preset" }, "Preset"), presetSelect));
    }
    const optionInputs = [];
    for (const o of w.options ?? []) {
      const id = `ov-opt-${o.name}`;
      const overridden = Object.hasOwn(stored.options ?? {}, o.name);
      const now = eff.options?.[o.name];
      const hint = overridden ? `keep (override: ${valueText(stored.options[o.name])})` : `keep (${now ? `${now.source}: ${valueText(now.value)}` : "worker's own default"})`;
      let input;
      if (Array.isArray(o.choices) && o.choices.length) {
        input = h("select", { id }, h("option", { value: "" }, hint), o.choices.map((c) => h("option", { value: JSON.stringify(c) }, `set to ${valueText(c)}`)));
      } else if (o.type === "boolean") {
        input = h("select", { id }, h("option", { value: "" }, hint), h("option", { value: "true" }, "set to true"), h("option", { value: "false" }, "set to false"));
      } else if (o.type === "integer" || o.type === "number") {
        input = h("input", { id, type: "number", step: o.type === "integer" ? "1" : "any", placeholder: hint });
      } else {
        input = h("input", { id, type: "text", placeholder: hint });
      }
      const clear = overridden ? h("input", { type: "checkbox", id: `${id}-clear`, onchange: (e) => { input.disabled = e.target.checked; } }) : null;
      optionInputs.push({ spec: o, input, clear });
      fields.push(h("div", { class: "field" },
        h("label", { for: id }, o.name, h("span", { class: "type" }, ` ${o.type}`)), input,
        clear ? h("span", { class: "check" }, clear, h("label", { for: `${id}-clear` }, "clear the override")) : null,
        o.description ? h("small", { class: "muted" }, o.description) : null));
    }
    const reason = h("textarea", { id: "ov-reason", name: "reason", required: true, rows: 2, placeholder: "Why? Recorded in the audit trail." });
    const alert = h("p", { class: "alert", role: "alert", hidden: true, id: "override-alert" });
    const status = h("p", { class: "ok", role: "status", id: "override-status" });
    const save = h("button", { type: "submit", class: "primary" }, "Save the override");
    const remove = h("button", { type: "button", class: "danger", disabled: !w.override, onclick: () => submit("DELETE") }, "Remove the whole override");
    const form = h("form", { class: "override-form", id: "override-form", novalidate: true, "aria-label": `Override of ${name}`, onsubmit: (e) => { e.preventDefault(); submit("PUT"); } },
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
        const pick = (select, key) => {
          if (!select || select.value === KEEP) return;
          body[key] = select.value === CLEAR ? null : select.value;
        };
        pick(engineSelect, "engine");
        pick(presetSelect, "preset");
        const options = {};
        for (const { spec, input, clear } of optionInputs) {
          if (clear?.checked) {
            options[spec.name] = null;
            continue;
          }
          const raw = input.value.trim();
          if (raw === "") continue;
          if (input.tagName === "SELECT" && spec.type !== "boolean") options[spec.name] = JSON.parse(raw);
          else if (spec.type === "boolean") options[spec.name] = raw === "true";
          else if (spec.type === "integer") options[spec.name] = Number.parseInt(raw, 10);
          else if (spec.type === "number") options[spec.name] = Number(raw);
          else options[spec.name] = raw;
        }
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
      const data = await api(`/api/workers/${encodeURIComponent(name)}/audit`);
      if (closed) return;
      const entries = Array.isArray(data) ? data : data?.entries ?? data?.audit ?? [];
      replace(audit, h("h2", { id: "audit-title" }, "Audit trail"),
        entries.length ? h("div", { class: "table-wrap" }, h("table", { class: "audit", id: "audit" },
          h("thead", null, h("tr", null, ["When", "Who", "Action", "Change", "Reason"].map((c) => h("th", { scope: "col" }, c)))),
          h("tbody", null, entries.map((a) => h("tr", { dataset: { id: a.id, action: a.action } },
            h("td", null, timeEl(a.at)), h("td", null, a.actor), h("td", null, a.action),
            h("td", null, changes(a.before, a.after)), h("td", { class: "reason" }, a.reason))))))
          : h("p", { class: "muted" }, "No change has been recorded."));
    } catch (e) {
      if (!(e instanceof ApiError)) throw e;
      replace(audit, h("h2", { id: "audit-title" }, "Audit trail"), h("p", { class: "error" }, e.message));
    }
  }

  loadAll();

  return {
    onEvent(ev) {
      if (ev?.worker === name && (ev.kind === "override" || ev.kind === "worker")) debounce("override", () => { loadWorker(); loadAudit(); });
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
  return h("ul", { class: "changes" }, keys.filter((k) => valueText(b[k]) !== valueText(a[k])).map((k) =>
    h("li", null, h("code", null, k), ": ", k in b ? valueText(b[k]) : h("span", { class: "muted" }, "default"), " → ", k in a ? valueText(a[k]) : h("span", { class: "muted" }, "default"))));
}
