// The runs view: the ledger, newest first, with filters (worker, state, dates, a tag), a search (who requested
// it, error text, run id or its start) and keyset pagination. Filters and the page live in the hash
// (#/runs?worker=…&state=…&from=…&to=…&requested_by=…&q=…&id=…&tag=…&after=…), so a view can be linked; a run's
// tags are links to the runs that carry the same tag. An event
// refetches only the run it concerns: a row on screen is replaced, a new run matching the filters is put on top
// of the first page. Operators get the bulk action of bulk.js: "select all matching" the filters.

import { ApiError, api } from "./api.js";
import { bulkBox } from "./bulk.js";
import { debouncer, h, replace } from "./dom.js";
import { field } from "./form.js";
import { STATES, duration, resultSummary, shortId, stateBadge, tagList, timeEl } from "./format.js";

const PAGE_SIZES = [25, 50, 100, 200];
// What the hash keeps, in this order.
const SEARCH_KEYS = ["worker", "state", "from", "to", "requested_by", "q", "id", "tag", "after"];

function parseQuery(text) {
  const q = new URLSearchParams(text ?? "");
  return {
    worker: q.get("worker") ?? "",
    state: q.get("state") ?? "",
    from: q.get("from") ?? "",
    to: q.get("to") ?? "",
    requested_by: q.get("requested_by") ?? "",
    q: q.get("q") ?? "",
    id: q.get("id") ?? "",
    tag: q.get("tag") ?? "",
    limit: PAGE_SIZES.includes(Number(q.get("limit"))) ? Number(q.get("limit")) : 50,
    after: q.get("after") ?? "",
  };
}

function toHash(f) {
  const q = new URLSearchParams();
  for (const key of SEARCH_KEYS) if (f[key]) q.set(key, f[key]);
  if (f.limit !== 50) q.set("limit", f.limit);
  const s = q.toString();
  return s ? `#/runs?${s}` : "#/runs";
}

/** A local calendar day as an RFC 3339 instant: its start, or (for `to`, which is inclusive here) the next day's. */
function dayBound(day, next) {
  const [y, m, d] = day.split("-").map(Number);
  if (!y || !m || !d) return null;
  return new Date(y, m - 1, d + (next ? 1 : 0)).toISOString();
}

/**
 * A run's error as the row shows it: its first 120 characters or, when the search names error text found in it,
 * the words around the first match, the match marked.
 */
function errorExcerpt(error, q) {
  if (!error) return null;
  const at = q ? error.toLowerCase().indexOf(q.toLowerCase()) : -1;
  if (at < 0) return error.length > 120 ? `${error.slice(0, 120)}…` : error;
  const start = Math.max(0, at - 50);
  const end = Math.min(error.length, at + q.length + 50);
  return [start > 0 ? "…" : "", error.slice(start, at), h("mark", null, error.slice(at, at + q.length)),
    error.slice(at + q.length, end), end < error.length ? "…" : ""];
}

/** The view's filters as the API reads them (`GET /api/runs`'s query, a bulk action's filter): days as instants. */
function apiFilter(f) {
  const out = {};
  for (const key of ["worker", "state", "requested_by", "q", "id", "tag"]) if (f[key]) out[key] = f[key];
  const from = f.from && dayBound(f.from, false);
  const to = f.to && dayBound(f.to, true);
  if (from) out.from = from;
  if (to) out.to = to;
  return out;
}

/** The view's filters in words, as the hash has them: `worker=embed, state=failed`. */
function describe(f) {
  return SEARCH_KEYS.filter((k) => k !== "after" && f[k]).map((k) => `${k}=${f[k]}`).join(", ");
}

// The cursors of the pages before the current one, so that "Newer" can go back; kept across re-mounts.
const pageStack = [];

export function mount(root, [queryText], ctx) {
  const filter = parseQuery(queryText);
  const debounce = debouncer(250);
  const rows = new Map(); // id → tr
  let closed = false;
  let next = null;

  const workerSelect = h("select", { id: "filter-worker", name: "worker" }, h("option", { value: "" }, "all workers"));
  if (filter.worker) workerSelect.append(h("option", { value: filter.worker, selected: true }, filter.worker));
  const stateSelect = h("select", { id: "filter-state", name: "state" }, h("option", { value: "" }, "all states"),
    STATES.map((s) => h("option", { value: s, selected: s === filter.state }, s)));
  const fromInput = h("input", { id: "filter-from", name: "from", type: "date", value: filter.from });
  const toInput = h("input", { id: "filter-to", name: "to", type: "date", value: filter.to });
  const byInput = h("input", {
    id: "filter-requested-by", name: "requested_by", type: "text", value: filter.requested_by, autocomplete: "off",
    placeholder: "a token's name",
  });
  const errorInput = h("input", {
    id: "filter-q", name: "q", type: "search", value: filter.q, autocomplete: "off", placeholder: "words of the error",
    maxlength: 200,
  });
  const idInput = h("input", {
    id: "filter-id", name: "id", type: "text", value: filter.id, autocomplete: "off", spellcheck: "false",
    placeholder: "0193ab12…", size: 14,
  });
  const tagInput = h("input", {
    id: "filter-tag", name: "tag", type: "text", value: filter.tag, autocomplete: "off", spellcheck: "false",
    placeholder: "collection:1921-letters", maxlength: 64, size: 18,
  });
  const limitSelect = h("select", { id: "filter-limit", name: "limit" },
    PAGE_SIZES.map((n) => h("option", { value: n, selected: n === filter.limit }, n)));
  const onsubmit = (e) => {
    e.preventDefault();
    pageStack.length = 0;
    ctx.navigate(toHash({
      worker: workerSelect.value, state: stateSelect.value, from: fromInput.value, to: toInput.value,
      requested_by: byInput.value.trim(), q: errorInput.value.trim(), id: idInput.value.trim(),
      tag: tagInput.value.trim(), limit: Number(limitSelect.value), after: "",
    }));
  };
  const reset = () => {
    pageStack.length = 0;
  };
  const form = h("form", { class: "filters", role: "search", "aria-label": "Search and filter the runs", onsubmit },
    field("filter-worker", "Worker", workerSelect),
    field("filter-state", "State", stateSelect),
    field("filter-from", "From (day)", fromInput),
    field("filter-to", "To (day, included)", toInput),
    field("filter-requested-by", "Requested by", byInput),
    field("filter-q", "Error text", errorInput),
    field("filter-id", "Run id (or its start)", idInput),
    field("filter-tag", "Tag", tagInput),
    field("filter-limit", "Per page", limitSelect),
    h("div", { class: "field buttons" }, h("button", { type: "submit", class: "primary" }, "Apply"),
      h("a", { href: "#/runs", class: "button", onclick: reset }, "Reset")));

  const tbody = h("tbody");
  const columns = ["Requested", "Worker", "State", "By", "Duration", "Outcome", "Run"];
  const table = h("table", { class: "ledger", id: "ledger", "aria-busy": "true" },
    h("caption", { class: "visually-hidden" }, "Runs, newest first"),
    h("thead", null, h("tr", null, columns.map((c) => h("th", { scope: "col" }, c)))),
    tbody);
  const notice = h("div", { class: "notice", role: "status" });
  const bulk = ctx.can("operator") ? bulkBox(apiFilter(filter), describe(filter)) : null;
  const go = (after) => ctx.navigate(toHash({ ...filter, after }));
  const toNewest = () => {
    pageStack.length = 0;
    go("");
  };
  const toOlder = () => {
    pageStack.push(filter.after);
    go(next);
  };
  const newer = h("button", { type: "button", onclick: () => go(pageStack.pop() ?? "") }, "← Newer");
  const newest = h("button", { type: "button", onclick: toNewest }, "Newest");
  const older = h("button", { type: "button", onclick: toOlder }, "Older →");
  const pager = h("nav", { class: "pager", "aria-label": "Pages of runs" }, newest, newer, older);
  replace(root, h("div", { class: "view-head" }, h("h1", null, "Runs")), form, bulk?.el, notice,
    h("div", { class: "table-wrap" }, table), pager);

  api("/api/workers").then((data) => {
    if (closed) return;
    for (const w of data.workers) {
      if (w.name !== filter.worker) workerSelect.append(h("option", { value: w.name }, w.name));
    }
  }).catch((e) => {
    if (!(e instanceof ApiError)) throw e;
  });

  function query(after) {
    const q = new URLSearchParams(apiFilter(filter));
    q.set("limit", filter.limit);
    if (after) q.set("after", after);
    return `/api/runs?${q}`;
  }

  function matches(run) {
    if (filter.worker && run.worker !== filter.worker) return false;
    if (filter.state && run.state !== filter.state) return false;
    const t = Date.parse(run.requested_at);
    const from = filter.from && dayBound(filter.from, false);
    const to = filter.to && dayBound(filter.to, true);
    if (from && t < Date.parse(from)) return false;
    if (to && t >= Date.parse(to)) return false;
    if (filter.requested_by && run.requested_by !== filter.requested_by) return false;
    if (filter.q && !run.error?.toLowerCase().includes(filter.q.toLowerCase())) return false;
    const compact = (id) => id.replaceAll("-", "").toLowerCase();
    if (filter.id && !compact(run.id).startsWith(compact(filter.id))) return false;
    if (filter.tag && !(run.tags ?? []).includes(filter.tag)) return false;
    return true;
  }

  function row(r) {
    // A cancellation asked for but not (yet) what ended the run.
    const cancelAsked = r.cancel_requested_at && r.state !== "cancelled";
    const error = errorExcerpt(r.error, filter.q);
    return h("tr", { dataset: { run: r.id, state: r.state, worker: r.worker } },
      h("td", null, timeEl(r.requested_at)),
      h("td", null, h("a", { href: `#/runs?worker=${encodeURIComponent(r.worker)}` }, r.worker), tagList(r.tags)),
      h("td", { class: "state-cell" }, stateBadge(r.state),
        cancelAsked ? h("small", { class: "muted" }, " cancel requested") : null),
      h("td", null, r.requested_by),
      h("td", { class: "num" },
        r.duration_ms != null ? duration(r.duration_ms) : r.state === "running" ? "running" : "—"),
      h("td", { class: "outcome" }, error ? h("span", { class: "error-text" }, error) : resultSummary(r.result)),
      h("td", null, h("a", { href: `#/runs/${r.id}`, "aria-label": `Run ${r.id}` }, shortId(r.id))));
  }

  async function load() {
    table.setAttribute("aria-busy", "true");
    try {
      const page = await api(query(filter.after));
      if (closed) return;
      rows.clear();
      const trs = page.runs.map((r) => {
        const tr = row(r);
        rows.set(r.id, tr);
        return tr;
      });
      replace(tbody, trs.length ? trs : h("tr", { class: "empty" }, h("td", { colspan: 7 }, "No runs match.")));
      next = page.next ?? null;
      older.disabled = !next;
      newer.disabled = !filter.after;
      newest.disabled = !filter.after;
      replace(notice);
    } catch (e) {
      if (!(e instanceof ApiError)) throw e;
      replace(notice, h("p", { class: "error" }, e.message));
    } finally {
      table.setAttribute("aria-busy", "false");
    }
  }

  async function loadRun(id) {
    try {
      const r = await api(`/api/runs/${id}`);
      if (closed) return;
      const old = rows.get(id);
      if (old) {
        const tr = row(r);
        old.replaceWith(tr);
        rows.set(id, tr);
      } else if (!filter.after && matches(r)) {
        const tr = row(r);
        tbody.querySelector("tr.empty")?.remove();
        tbody.prepend(tr);
        rows.set(id, tr);
      }
    } catch (e) {
      if (!(e instanceof ApiError)) throw e;
    }
  }

  load();

  return {
    onEvent(ev) {
      if (ev.kind === "run") debounce(ev.run, () => loadRun(ev.run));
    },
    refresh: load,
    unmount() {
      closed = true;
      debounce.cancel();
      bulk?.close();
    },
  };
}
