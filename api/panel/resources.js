// The resources view: each shared resource of the catalogue with the capacity claims count against now (for a
// daemon-scoped one, such as a GPU of a host, each daemon's slots and their holders), where it
// comes from (the catalogue, or an override with who and when), and the runs holding it (linked to each run).
// Admins change the capacity with a required reason, or put it back to the catalogue's; each card's audit trail
// opens beneath it. Runs starting and ending change the holders, so a `run` event reads the list again.

import { ApiError, api } from "./api.js";
import { debouncer, h, idFor, replace } from "./dom.js";
import { shortId, sourceBadge, timeEl } from "./format.js";

// As the API's `MAX_CAPACITY`: the form refuses what the API would.
const MAX_CAPACITY = 10000;

export function mount(root, _params, ctx) {
  const debounce = debouncer(300);
  const cards = new Map(); // name → card
  let closed = false;

  const list = h("div", { class: "override-grid", id: "resources", "aria-busy": "true" });
  const notice = h("div", { class: "notice", role: "status" });
  replace(root, h("div", { class: "view-head" }, h("h1", null, "Resources"),
    h("p", { class: "muted" }, "A run holds one slot of each resource its worker names, from its claim to its end.")),
  notice, list);

  async function load() {
    try {
      const { resources } = await api("/api/resources");
      if (closed) return;
      const articles = resources.map((r) => {
        let card = cards.get(r.name);
        if (!card) {
          card = buildCard(r.name);
          cards.set(r.name, card);
        }
        card.data = r;
        update(card);
        return card.article;
      });
      replace(list, articles.length ? articles
        : h("p", { class: "muted" }, "The catalogue has no shared resources ([[resources]] in the configuration)."));
      replace(notice);
    } catch (e) {
      if (!(e instanceof ApiError)) throw e;
      replace(notice, h("p", { class: "error" }, e.message));
    } finally {
      list.setAttribute("aria-busy", "false");
    }
  }

  function buildCard(name) {
    const id = idFor("resource", name);
    const summary = h("div", { class: "resource-summary" });
    const editor = h("div", { class: "resource-editor" });
    const trail = h("div", { class: "table-wrap" });
    const details = h("details", { class: "resource-audit", ontoggle: (e) => { if (e.target.open) loadAudit(card); } },
      h("summary", null, "Audit trail"), trail);
    const article = h("article", { class: "card resource", id, dataset: { resource: name },
      "aria-labelledby": `${id}-title` },
    h("h2", { id: `${id}-title` }, name), summary, editor, details);
    const card = { name, id, article, summary, editor, trail, details, data: null, form: null };
    return card;
  }

  function update(card) {
    const r = card.data;
    const held = r.holders.length;
    const perDaemon = r.scope === "daemon";
    const source = perDaemon ? "each daemon's daemon.resources (the sum over the running daemons)"
      : r.source === "override"
        ? ["override by ", r.updated_by, " at ", timeEl(r.updated_at), ` (the catalogue says ${r.catalogue_capacity})`]
        : "the catalogue's";
    // A daemon-scoped resource (a GPU of a host): each daemon's slots, numbered as its workers are told them.
    const daemons = perDaemon
      ? h("ul", { class: "resource-daemons" }, (r.daemons ?? []).map((d) => h("li", { dataset: { daemon: d.daemon } },
        `${d.host} (`, shortId(d.daemon), `): ${d.holders.length} of ${d.capacity} held`,
        d.holders.map(({ slot, run_id: run }) => [` · slot ${slot}: `, h("a", { href: `#/runs/${run}` }, shortId(run))]))))
      : null;
    const holders = held
      ? h("ul", { class: "holders" }, r.holders.map((run) =>
        h("li", null, h("a", { href: `#/runs/${run}` }, shortId(run)))))
      : h("span", { class: "muted" }, "none");
    replace(card.summary,
      r.description ? h("p", { class: "description" }, r.description) : null,
      h("dl", { class: "facts" },
        h("dt", null, "Capacity"),
        h("dd", { class: "capacity", dataset: { capacity: r.capacity } }, String(r.capacity),
          perDaemon ? null : [" ", sourceBadge(r.source)]),
        h("dt", null, "Source"), h("dd", null, source),
        h("dt", null, "Held"), h("dd", { class: "held" }, `${held} of ${r.capacity}`),
        h("dt", null, "Holders"), h("dd", null, holders),
        perDaemon ? [h("dt", null, "Per daemon"), h("dd", null, daemons.childNodes.length ? daemons
          : h("span", { class: "muted" }, "no running daemon offers it"))] : null));
    if (perDaemon) {
      replace(card.editor, h("p", { class: "muted" },
        "Its capacity is each daemon's daemon.resources (one daemon per GPU host), set in that daemon's settings."));
      card.form = { reset: {} };
      return;
    }
    // The form is built once and kept, so a refresh while someone types does not lose the reason.
    if (!card.form) renderEditor(card);
    else card.form.reset.disabled = r.source !== "override";
    if (card.details.open) loadAudit(card);
  }

  function renderEditor(card) {
    if (!ctx.can("admin")) {
      replace(card.editor, h("p", { class: "muted" }, "Changing a capacity needs the admin role."));
      card.form = { reset: {} };
      return;
    }
    const capacity = h("input", {
      id: `${card.id}-capacity`, name: "capacity", type: "number", min: 1, max: MAX_CAPACITY, step: 1,
      required: true, value: String(card.data.capacity),
    });
    const reason = h("textarea", {
      id: `${card.id}-reason`, name: "reason", required: true, rows: 2, placeholder: "Why? Recorded in the audit trail.",
    });
    const alert = h("p", { class: "alert", role: "alert", hidden: true, id: `${card.id}-alert` });
    const status = h("p", { class: "ok", role: "status", id: `${card.id}-status` });
    const save = h("button", { type: "submit", class: "primary save" }, "Set the capacity");
    const reset = h("button", {
      type: "button", class: "reset", disabled: card.data.source !== "override", onclick: () => submit(null),
    }, "Back to the catalogue's");
    const onsubmit = (e) => {
      e.preventDefault();
      const n = Number(capacity.value);
      if (!Number.isInteger(n) || n < 1 || n > MAX_CAPACITY) {
        show(`Give a whole number from 1 to ${MAX_CAPACITY}.`);
        capacity.focus();
        return;
      }
      submit(n);
    };
    const form = h("form", {
      class: "override-form", novalidate: true, "aria-label": `Capacity of ${card.name}`, onsubmit,
    },
    h("div", { class: "field inline" }, h("label", { for: capacity.id }, "Capacity"), capacity),
    h("div", { class: "field" }, h("label", { for: reason.id }, "Reason (required)"), reason),
    h("div", { class: "buttons" }, save, reset), alert, status);

    function show(message) {
      alert.textContent = message;
      alert.hidden = !message;
    }

    async function submit(value) {
      show("");
      status.textContent = "";
      const why = reason.value.trim();
      if (!why) {
        show("Give a reason: it is recorded in the audit trail.");
        reason.focus();
        return;
      }
      save.disabled = true;
      reset.disabled = true;
      try {
        const r = await api(`/api/resources/${encodeURIComponent(card.name)}`, {
          method: "PUT", body: { capacity: value, reason: why },
        });
        card.data = r;
        reason.value = "";
        capacity.value = String(r.capacity);
        update(card);
        status.textContent = value === null
          ? `Back to the catalogue's capacity, ${r.capacity}.`
          : `Capacity set to ${r.capacity}; the next claim counts against it.`;
        if (card.details.open) loadAudit(card);
      } catch (e) {
        if (!(e instanceof ApiError)) throw e;
        show(e.message);
      } finally {
        save.disabled = false;
        reset.disabled = card.data.source !== "override";
      }
    }

    card.form = { reset };
    replace(card.editor, form);
  }

  async function loadAudit(card) {
    try {
      const { entries } = await api(`/api/resources/${encodeURIComponent(card.name)}/audit`);
      if (closed) return;
      const side = (c) => (c == null ? h("span", { class: "muted" }, "catalogue") : String(c));
      const entry = (a) => h("tr", { dataset: { id: a.id } },
        h("td", null, timeEl(a.at)), h("td", null, a.actor), h("td", null, side(a.before), " → ", side(a.after)),
        h("td", { class: "reason" }, a.reason));
      replace(card.trail, entries.length
        ? h("table", { class: "audit" },
          h("thead", null, h("tr", null, ["When", "Who", "Change", "Reason"].map((c) => h("th", { scope: "col" }, c)))),
          h("tbody", null, entries.map(entry)))
        : h("p", { class: "muted" }, "The capacity was never changed: the catalogue's applies."));
    } catch (e) {
      if (!(e instanceof ApiError)) throw e;
      replace(card.trail, h("p", { class: "error" }, e.message));
    }
  }

  load();

  return {
    onEvent(ev) {
      // Holders change when runs are claimed and end; another admin's change is picked up on the next one.
      if (ev.kind === "run") debounce("resources", load);
    },
    refresh: load,
    unmount() {
      closed = true;
      debounce.cancel();
    },
  };
}
