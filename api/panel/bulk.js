// The runs view's bulk action (runs.js), "select all N matching": a dry run of the view's filters
// (POST /api/runs/bulk with `dry_run`) shows how many runs match; the operator picks cancel, rerun or resume,
// reads a confirmation naming the action and the count, and gives a reason; the real call sends back the count
// shown and the dry run's snapshot, and a progress line follows the stored job (GET /api/runs/bulk/{id}) until
// the daemons are done with it. A count that changed meanwhile (409) shows the API's sentence and offers a fresh
// dry run. Operators and admins only; a view without a filter cannot act, as the API never acts on every run.

import { ApiError, api } from "./api.js";
import { h, replace } from "./dom.js";
import { field } from "./form.js";
import { count } from "./format.js";

const ACTIONS = { rerun: "Rerun", resume: "Resume", cancel: "Cancel" };
// How often the progress of a job is read while the daemons work it.
const POLL_MS = 1000;

const runsWord = (n) => `${count(n)} run${n === 1 ? "" : "s"}`;

/**
 * The bulk box: `filter` is the API's filter (the ledger query's fields, each a string), `described` the same
 * filters in words ("worker=embed, state=failed"). Returns `{ el, close }`; `close` stops following a job.
 */
export function bulkBox(filter, described) {
  const hasFilter = Object.keys(filter).length > 0;
  let preview = null;
  let asked = 0; // the last dry run sent: an older answer arriving late is dropped
  let timer = null;
  let closed = false;

  const why = h("small", { id: "bulk-why", class: "muted" }, hasFilter
    ? `Acts on every run the filters match (${described}), not only this page.`
    : "Disabled: a bulk action needs a filter.");
  const select = h("button", {
    type: "button", id: "bulk-select", disabled: !hasFilter, "aria-describedby": "bulk-why", onclick: dryRun,
  }, "Select all matching");
  const action = h("select", { id: "bulk-action", name: "action", onchange: dryRun },
    Object.entries(ACTIONS).map(([value, label]) => h("option", { value }, label)));
  const countLine = h("p", { id: "bulk-count", class: "bulk-count" });
  const question = h("p", { id: "bulk-question", class: "bulk-question" });
  const reason = h("textarea", {
    id: "bulk-reason", class: "reason-input", name: "reason", rows: 2,
    placeholder: "Why? Recorded with the bulk action.", oninput: () => hide(alert),
  });
  const confirm = h("button", { type: "submit", class: "primary", id: "bulk-confirm" }, "Confirm");
  const never = h("button", { type: "button", class: "never", onclick: reset }, "Never mind");
  const form = h("form", {
    id: "bulk-form", class: "bulk-form", hidden: true, novalidate: true, "aria-labelledby": "bulk-question", onsubmit,
  }, countLine, field(action.id, "Action", action), question, field(reason.id, "Reason (required)", reason),
  h("div", { class: "buttons" }, confirm, never));
  const alert = h("div", { class: "alert", role: "alert", id: "bulk-alert", hidden: true });
  const progress = h("div", { id: "bulk-progress", class: "bulk-progress", role: "status", hidden: true });
  const el = h("section", { class: "bulk", id: "bulk", "aria-label": "Bulk action" },
    h("div", { class: "bulk-head" }, select, why), form, alert, progress);

  function hide(node) {
    node.hidden = true;
  }

  function say(node, ...children) {
    replace(node, children);
    node.hidden = false;
  }

  function reset() {
    asked += 1;
    preview = null;
    form.hidden = true;
    reason.value = "";
    hide(alert);
    select.hidden = false;
    select.focus();
  }

  /** Asks for the count of the filters, for the action chosen, and shows the confirmation. */
  async function dryRun() {
    const mine = ++asked;
    hide(alert);
    select.disabled = true;
    try {
      const answer = await api("/api/runs/bulk", {
        method: "POST", body: { filter, action: action.value, dry_run: true },
      });
      if (closed || mine !== asked) return;
      preview = answer;
      showPreview();
    } catch (e) {
      if (!(e instanceof ApiError)) throw e;
      if (mine === asked) say(alert, e.message);
    } finally {
      select.disabled = !hasFilter;
    }
  }

  function showPreview() {
    const n = preview.count;
    const label = ACTIONS[preview.action];
    countLine.dataset.count = String(n);
    replace(countLine, h("strong", null, `All ${runsWord(n)} matching selected. `), preview.message);
    replace(question, n ? `${label} ${runsWord(n)} matching ${described}?` : "No run matches these filters.");
    confirm.textContent = `${label} ${runsWord(n)}`;
    confirm.disabled = n === 0;
    form.hidden = false;
    select.hidden = true;
    hide(progress);
  }

  async function onsubmit(event) {
    event.preventDefault();
    if (!preview) return;
    const why = reason.value.trim();
    if (!why) {
      say(alert, "Give a reason: it is recorded with the bulk action.");
      reason.focus();
      return;
    }
    confirm.disabled = true;
    hide(alert);
    const body = {
      filter, action: preview.action, expect_count: preview.count, snapshot: preview.snapshot, reason: why,
    };
    try {
      const job = await api("/api/runs/bulk", { method: "POST", body });
      if (closed) return;
      form.hidden = true;
      select.hidden = false;
      reason.value = "";
      preview = null;
      showJob(job);
      follow(job.id);
    } catch (e) {
      if (!(e instanceof ApiError)) throw e;
      if (e.status === 409) {
        // The set changed since the dry run: what was confirmed no longer holds, so it cannot be sent again.
        preview = null;
        form.hidden = true;
        select.hidden = false;
        const again = h("button", { type: "button", id: "bulk-again", onclick: dryRun }, "Look again");
        say(alert, h("p", null, e.message), again);
        again.focus();
      } else {
        say(alert, e.message);
      }
    } finally {
      confirm.disabled = false;
    }
  }

  function showJob(job) {
    progress.dataset.state = job.state;
    progress.dataset.job = job.id;
    const counts = `${job.done} done, ${job.skipped} skipped, ${job.failed} failed of ${runsWord(job.total)}`;
    const stand = job.state === "done" ? "done." : job.state === "queued" ? "waiting for a daemon…" : "under way…";
    const reasons = (job.reasons ?? []).map((r) => h("li", { dataset: { outcome: r.outcome } },
      `${count(r.count)} ${r.outcome}: ${r.sentence}`));
    say(progress,
      h("p", { class: "bulk-line" }, h("strong", null, `${ACTIONS[job.action]} by ${job.requested_by}: `),
        h("span", { class: "bulk-counts" }, counts), ` — ${stand}`),
      job.error ? h("p", { class: "error-text" }, job.error) : null,
      reasons.length ? h("ul", { class: "bulk-reasons" }, reasons) : null);
  }

  async function follow(id) {
    clearTimeout(timer);
    try {
      const job = await api(`/api/runs/bulk/${id}`);
      if (closed) return;
      showJob(job);
      if (job.state === "done") return;
    } catch (e) {
      if (!(e instanceof ApiError)) throw e;
      if (closed) return;
      say(alert, e.message);
    }
    timer = setTimeout(() => follow(id), POLL_MS);
  }

  return {
    el,
    close() {
      closed = true;
      clearTimeout(timer);
    },
  };
}
