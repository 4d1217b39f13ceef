// The items section of a run's page (run.js), when its worker reported items: the counts by outcome, each with its
// classes ("37 failed: 29 ocr_empty, 8 ctx_overflow"), and under them, when the run resumes earlier runs, the
// failures and skips of the whole resume chain (each id counted once); Rerun failures, for operators, disabled
// with the sentence saying why; and the failed items themselves, 50 at a time, searchable by id. It is built once
// and updated in place, so that the search being typed and the pages read stay while the run's events redraw the
// rest of the page.

import { ApiError, api } from "./api.js";
import { debouncer, h, replace } from "./dom.js";
import { TERMINAL, count } from "./format.js";
import { quarantineHref } from "./quarantine.js";

const ITEMS_PAGE = 50; // failed items read at a time

/**
 * The items section of run `id`'s page: `el` is the section, `render(run)` draws it for the run as last read,
 * `reload()` is the page's own (it reads the run again after a refused rerun).
 */
export function createRunItems(id, ctx, reload) {
  const debounce = debouncer(250);
  let closed = false;
  let run = null;
  let rerunBusy = false;
  // The run's worker as `GET /api/workers/{name}` answers (what its code can do): undefined until read, null
  // when it cannot be read (`workerError` says why).
  let workerInfo;
  let workerError = null;
  let workerAsked = false;
  // The failed items on screen: the pages read so far, the `after` of the next one, and the failed count they
  // were read for (a run in flight reports more; a new count reads the first page again).
  const failures = { items: [], next: null, seq: 0, forCount: null, text: "" };

  const itemCounts = h("ul", { class: "item-counts", id: "item-counts" });
  const chainLine = h("p", { class: "item-chain", id: "item-chain", hidden: true });
  const rerunButton = h("button", {
    type: "button", class: "rerun-failed", id: "rerun-failed", "aria-describedby": "rerun-failed-reason",
    onclick: rerunFailed,
  }, "Rerun failures");
  const rerunReason = h("p", { class: "reason", id: "rerun-failed-reason", hidden: true });
  const rerunAlert = h("p", { class: "alert", role: "alert", id: "rerun-failed-alert", hidden: true });
  const rerunBox = h("div", { class: "rerun-failed-box", hidden: true }, rerunButton, rerunReason, rerunAlert);
  const search = h("input", {
    type: "search", id: "failed-search", name: "search", autocomplete: "off", placeholder: "doc-0024",
    oninput: () => debounce("failures", () => loadFailures(true)),
  });
  const failedBody = h("tbody");
  const failedStatus = h("p", { class: "muted failed-status", id: "failed-status", role: "status" });
  const moreButton = h("button", {
    type: "button", id: "failed-more", hidden: true, onclick: () => loadFailures(false),
  }, `${ITEMS_PAGE} more`);
  const failedBox = h("div", { class: "failed-box", id: "failed-box", hidden: true },
    h("h3", { id: "failed-title" }, "Failed items"),
    h("form", {
      class: "failed-search", role: "search", "aria-label": "Search the failed items",
      onsubmit: (e) => {
        e.preventDefault();
        loadFailures(true);
      },
    }, h("label", { for: "failed-search" }, "Id contains"), search),
    h("div", { class: "table-wrap" }, h("table", { class: "failed-items", id: "failed-items" },
      h("thead", null, h("tr", null, ["Item", "Class", "Error"].map((c) => h("th", { scope: "col" }, c)))),
      failedBody)),
    h("div", { class: "pager" }, failedStatus, moreButton));
  // A row of its own in the page's grid, under the summary and the outcome: the failed items need the width.
  const el = h("section", {
    class: "card items-card wide", id: "run-items", "aria-labelledby": "items-title", hidden: true,
  }, h("h2", { id: "items-title" }, "Items"), itemCounts, chainLine, rerunBox, failedBox);

  /** ` (29 ocr_empty, 12 ctx_overflow)`, the classes of `outcome` among `classes`; empty when none is named. */
  function classesText(classes, outcome, around = ["", ""]) {
    const of = classes.filter((c) => c.outcome === outcome);
    // A class is named only when the worker gave one; "succeeded" usually has none.
    if (!of.some((c) => c.class)) return "";
    return `${around[0]}${of.map((c) => `${count(c.count)} ${c.class || "without a class"}`).join(", ")}${around[1]}`;
  }

  function renderItems(r) {
    const it = r.items;
    el.hidden = !it;
    if (!it) return;
    const line = (outcome, total, words, extra) => h("li", { dataset: { outcome, count: total } },
      h("strong", null, `${count(total)} ${words}`), classesText(it.classes, outcome, [": ", ""]), extra ?? null);
    const quarantined = it.classes.some((c) => c.outcome === "skipped" && c.class === "quarantined");
    const lines = [line("failed", it.failed, "failed")];
    if (it.succeeded) lines.push(line("succeeded", it.succeeded, "succeeded"));
    if (it.skipped) {
      lines.push(line("skipped", it.skipped, "skipped", quarantined
        ? [" (", h("a", { href: quarantineHref(r.worker), class: "quarantine-link" }, "the worker's quarantine"), ")"]
        : null));
    }
    if (it.refused) {
      lines.push(line("refused", it.refused, `malformed item line${it.refused === 1 ? "" : "s"} refused`));
    }
    if (it.cut) {
      lines.push(h("li", { dataset: { outcome: "cut", count: it.cut } },
        `${count(it.cut)} error${it.cut === 1 ? " was" : "s were"} cut to 2,048 bytes`));
    }
    replace(itemCounts, lines);
    renderChain(it.chain);
    renderRerunFailed(r);
    failedBox.hidden = !it.failed;
    if (it.failed && failures.forCount !== it.failed) {
      failures.forCount = it.failed;
      loadFailures(true);
    }
  }

  // A resumed run never sees what the runs it resumes failed before their last checkpoint: the chain's figures
  // (present only for a run that resumes others) say what the whole of it left failed or skipped.
  function renderChain(chain) {
    chainLine.hidden = !chain;
    if (!chain) return;
    chainLine.dataset.runs = String(chain.runs);
    chainLine.dataset.failed = String(chain.failed);
    chainLine.dataset.skipped = String(chain.skipped);
    const classes = classesText(chain.classes, "failed", [" (", ")"]);
    const skipped = chain.skipped ? `, ${count(chain.skipped)} skipped` : "";
    chainLine.textContent =
      `Across the resume chain of ${count(chain.runs)} runs: ${count(chain.failed)} failed${classes}${skipped}`;
  }

  // Rerun failures, for operators: disabled, with the sentence saying why, until the run has ended with failed
  // items and its worker's code says it takes a scope. The API decides in the end (its 409s are shown).
  function renderRerunFailed(r) {
    rerunBox.hidden = !ctx.can("operator");
    if (rerunBox.hidden) return;
    const [code, why] = rerunBlocked(r);
    rerunButton.disabled = rerunBusy || !!code || workerInfo === undefined;
    rerunButton.dataset.blocked = code ?? "";
    rerunButton.title = why ?? "Queue a run of this worker given only the items this run reported failed";
    rerunReason.textContent = why ?? "";
    rerunReason.hidden = !why;
  }

  function rerunBlocked(r) {
    if (!TERMINAL.has(r.state)) {
      return ["in_flight", "The run has not ended: its failed items can be rerun once it has."];
    }
    if (!r.items.failed) return ["no_failures", "This run has no failed items to rerun."];
    if (workerInfo === undefined) return [null, null];
    if (workerInfo === null) {
      return ["unknown", `What ${r.worker} can do cannot be read (${workerError}), so its failures cannot be rerun.`];
    }
    if (!workerInfo.described?.description?.capabilities?.scope) {
      return ["no_scope", `${r.worker}'s code does not say it can take a scope (the "scope" capability of its `
        + "describe), so it cannot be given only the failed items."];
    }
    return [null, null];
  }

  // One page of the failed items (the first again with `reset`), searched by id as the search box says.
  async function loadFailures(reset) {
    const seq = ++failures.seq;
    const text = search.value.trim();
    const query = new URLSearchParams({ outcome: "failed", limit: String(ITEMS_PAGE) });
    if (text) query.set("search", text);
    if (!reset && failures.next) query.set("after", failures.next);
    moreButton.disabled = true;
    failedBox.setAttribute("aria-busy", "true");
    try {
      const page = await api(`/api/runs/${id}/items?${query}`);
      if (closed || seq !== failures.seq) return;
      failures.items = reset ? page.items : failures.items.concat(page.items);
      failures.next = page.next_after ?? null;
      failures.text = text;
      renderFailures();
    } catch (e) {
      if (!(e instanceof ApiError)) throw e;
      if (seq !== failures.seq) return;
      failedStatus.className = "error failed-status";
      failedStatus.textContent = e.message;
    } finally {
      if (seq === failures.seq) {
        moreButton.disabled = false;
        failedBox.setAttribute("aria-busy", "false");
      }
    }
  }

  function renderFailures() {
    const row = (i) => h("tr", { dataset: { item: i.id } },
      h("td", null, h("code", { class: "item-id" }, i.id)),
      h("td", null, i.class ? h("code", { class: "item-class" }, i.class) : h("span", { class: "muted" }, "—")),
      h("td", { class: "item-error" }, i.error ?? h("span", { class: "muted" }, "no error given")));
    replace(failedBody, failures.items.map(row));
    const n = failures.items.length;
    const total = run?.items?.failed ?? n;
    const quoted = JSON.stringify(failures.text);
    let status;
    if (!n) status = failures.text ? `No failed item has ${quoted} in its id.` : "No failed item.";
    else if (failures.text) {
      const more = failures.next ? " so far" : "";
      status = `${count(n)} failed item${n === 1 ? "" : "s"} with ${quoted} in the id${more}.`;
    } else if (failures.next) status = `The first ${count(n)} of ${count(total)} failed items.`;
    else status = n === 1 ? "The one failed item." : `All ${count(n)} failed items.`;
    failedStatus.className = "muted failed-status";
    failedStatus.textContent = status;
    failedBox.dataset.shown = String(n);
    moreButton.hidden = !failures.next;
  }

  async function rerunFailed() {
    rerunBusy = true;
    rerunAlert.hidden = true;
    if (run) renderItems(run);
    try {
      const next = await api(`/api/runs/${id}/rerun-failed`, { method: "POST" });
      location.hash = `#/runs/${next.id}`;
    } catch (e) {
      if (!(e instanceof ApiError)) throw e;
      const other = e.body.run_id && e.body.run_id !== id ? e.body.run_id : null;
      replace(rerunAlert, e.message, other ? [" ", h("a", { href: `#/runs/${other}` }, "Open that run")] : null);
      rerunAlert.dataset.code = e.code;
      rerunAlert.hidden = false;
      rerunBusy = false;
      reload();
    }
  }

  // What the run's worker can do (whether it takes a scope), read once and again on its `worker` event.
  async function loadWorker() {
    try {
      workerInfo = await api(`/api/workers/${encodeURIComponent(run.worker)}`);
      workerError = null;
    } catch (e) {
      if (!(e instanceof ApiError)) throw e;
      workerInfo = null;
      workerError = e.message;
    }
    if (!closed && run) renderItems(run);
  }

  return {
    el,
    render(r) {
      run = r;
      renderItems(r);
      if (!workerAsked && r.items && ctx.can("operator")) {
        workerAsked = true;
        loadWorker();
      }
    },
    onEvent(ev) {
      // A new description may say otherwise about taking a scope.
      if (ev.kind === "worker" && ev.worker === run?.worker && workerAsked) debounce("worker", loadWorker);
    },
    unmount() {
      closed = true;
      debounce.cancel();
    },
  };
}
