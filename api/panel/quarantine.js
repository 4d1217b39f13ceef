// A worker's quarantine: the documents that failed in `quarantine_after` runs in a row, which its runs skip, each
// with its failures in a row, when it last failed and its last errors (linked to their runs); Release (one) and
// Release all, each asking for a reason; and the releases, with who and why. The workers view's cards link here.

import { ApiError, api } from "./api.js";
import { debouncer, h, idFor, replace } from "./dom.js";
import { count, shortId, timeEl } from "./format.js";

/** Where a worker's quarantine is shown. */
export function quarantineHref(worker) {
  return `#/workers/${encodeURIComponent(worker)}/quarantine`;
}

/** `N documents quarantined`, linking to the worker's quarantine. */
export function quarantineLink(worker, n) {
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
export function askReason(idBase, label, confirmLabel, send, buttonClass = "release", noun = "release") {
  const alert = h("p", { class: "alert", role: "alert", hidden: true });
  const reason = h("textarea", {
    id: `${idBase}-reason`, class: "reason-input", name: "reason", rows: 2,
    placeholder: `Why? Recorded with the ${noun}.`, oninput: () => { alert.hidden = true; },
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
      alert.textContent = `Give a reason: it is recorded with the ${noun}.`;
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
