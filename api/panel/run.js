// One run: its state, times, daemon, its shards (run-shards.js), where it comes from (its retry chain, the schedule or pipeline that
// requested it), resolved configuration with sources (beside what the worker reported it used), progress, result
// counts, error, its items (run-items.js: the outcome counts by class, the failed items 50 at a time, searchable
// by id, and Rerun failures), and its log, followed live while the run is in flight (a streamed fetch of
// /api/runs/{id}/log?follow=true), from its last 500 lines unless the whole log is asked for.

import { ApiError, api, streamText } from "./api.js";
import { debouncer, facts, h, replace } from "./dom.js";
import {
  TERMINAL, count, dateTime, duration, progressBar, progressFacts, progressText, shortId, sourceBadge, stateBadge,
  tagList, timeEl, valueText,
} from "./format.js";
import { createRunItems } from "./run-items.js";
import { shardsSection } from "./run-shards.js";
import { usageTable } from "./run-usage.js";

const LOG_LIMIT = 2_000_000; // characters kept on screen; older output is cut from the top
const LOG_TAIL = 500; // lines read first; the whole log only when asked for
// How a run continues another, in words (the API's `follows_as` otherwise).
const FOLLOWS = { rerun_failed: "rerun of its failed items" };

export function mount(root, [id], ctx) {
  const debounce = debouncer(250);
  let closed = false;
  let run = null;
  let logController = null;
  let logFollowing = false;
  let logDone = false;
  let busy = false;
  let logRetries = 0;
  let logWhole = false;
  let logMore = null;

  const head = h("div", { class: "view-head" });
  const notice = h("div", { class: "notice", role: "status" });
  const alert = h("p", { class: "alert", role: "alert", hidden: true });
  const summary = h("section", { class: "card run-summary", "aria-label": "Summary" });
  const config = h("section", { class: "card", "aria-labelledby": "config-title" });
  const lineage = h("section", {
    class: "card lineage-card", id: "run-lineage", "aria-labelledby": "lineage-title", hidden: true,
  });
  const outcome = h("section", { class: "card", "aria-labelledby": "outcome-title" });
  const logState = h("span", { class: "log-state muted", id: "log-state" });
  const logPre = h("pre", {
    class: "log", id: "run-log", tabindex: "0", "aria-label": "The run's output", "aria-describedby": "log-state",
  });
  const logSection = h("section", { class: "card log-card", "aria-labelledby": "log-title" },
    h("h2", { id: "log-title" }, "Output ", logState), logPre);
  const items = createRunItems(id, ctx, load);
  replace(root, head, notice, alert, lineage, h("div", { class: "run-grid" }, summary, outcome, items.el, config),
    logSection);

  function render() {
    const r = run;
    const crumbs = h("p", { class: "crumbs" }, h("a", { href: "#/runs" }, "Runs"), " / ",
      h("a", { href: `#/runs?worker=${encodeURIComponent(r.worker)}` }, r.worker));
    replace(head, crumbs, h("h1", null, "Run ", h("code", { title: r.id }, r.id), " ", stateBadge(r.state)));
    head.dataset.state = r.state;
    const daemon = r.daemon_id ? ctx.daemons?.find((d) => d.id === r.daemon_id) : null;
    const rows = [
      ["Worker", h("a", { href: `#/overrides/${encodeURIComponent(r.worker)}` }, r.worker)],
      ["Requested", [timeEl(r.requested_at), " by ", r.requested_by]],
      ...(r.tags?.length ? [["Tags", tagList(r.tags)]] : []),
      ["Claimed", timeEl(r.claimed_at)],
      ["Started", timeEl(r.started_at)],
      ["Finished", timeEl(r.finished_at)],
      ["Duration", r.duration_ms != null ? duration(r.duration_ms) : TERMINAL.has(r.state) ? "—" : "in flight"],
      ["Daemon", r.daemon_id
        ? [shortId(r.daemon_id), daemon ? ` on ${daemon.host} (pid ${daemon.pid}, ${daemon.state})` : ""]
        : "—"],
      ["Exit status", r.exit_code ?? "—"],
    ];
    if (r.cancel_requested_at) {
      rows.push(["Cancel requested", [timeEl(r.cancel_requested_at), " by ", r.cancel_requested_by]]);
    }
    if (r.waiting) {
      rows.push(["Waiting", h("span", { class: "waiting", dataset: { code: r.waiting.code } }, r.waiting.message)]);
    }
    if (r.checkpoint_at) {
      rows.push(["Checkpoint", [timeEl(r.checkpoint_at), ` · ${JSON.stringify(r.checkpoint).length} bytes`]]);
    }
    if (r.follows) {
      rows.push(["Continues", [h("a", { href: `#/runs/${r.follows}` }, shortId(r.follows)),
        ` (${FOLLOWS[r.follows_as] ?? r.follows_as})`]]);
    }
    const controls = [];
    if (!TERMINAL.has(r.state) && ctx.can("operator") && !r.cancel_requested_at) {
      controls.push(h("button", { type: "button", class: "cancel", disabled: busy, onclick: cancel },
        "Cancel this run"));
    }
    // A run that ended badly is continued as a new run: from its last checkpoint, or from nothing.
    if ((r.state === "interrupted" || r.state === "failed") && ctx.can("operator")) {
      if (r.checkpoint_at) {
        controls.push(h("button", { type: "button", class: "resume", disabled: busy, onclick: () => carryOn("resume") },
          "Resume from its checkpoint"));
      }
      controls.push(h("button", { type: "button", class: "restart", disabled: busy, onclick: () => carryOn("restart") },
        "Restart from nothing"));
    }
    // Any ended run can be run again as it was asked for, resolved with today's overrides and defaults.
    if (TERMINAL.has(r.state) && ctx.can("operator")) {
      controls.push(h("button", { type: "button", class: "rerun", disabled: busy, onclick: () => carryOn("rerun") },
        "Rerun with today's configuration"));
    }
    replace(summary, facts(rows), controls);

    const f = progressFacts(r, ctx.serverNow());
    const history = r.progress_history;
    const progress = r.progress || r.state === "running"
      ? h("div", { class: "progress" }, progressBar(f, "Progress of this run"),
        h("span", { class: "progress-text" }, TERMINAL.has(r.state) ? progressTextFinal(f) : progressText(f)))
      : null;
    const resultRow = ([k, v]) => h("tr", null,
      h("th", { scope: "row" }, k.replaceAll("_", " ")), h("td", { class: "num" }, cell(v)));
    const report = (p) => h("li", null, dateTime(p.at), " — ",
      progressText(progressFacts({ progress: p.progress }, 0)));
    replace(outcome, h("h2", { id: "outcome-title" }, "Progress and outcome"),
      progress,
      shardsSection(r, ctx.serverNow()),
      r.result ? h("table", { class: "counts" }, h("caption", null, "Result"),
        h("tbody", null, Object.entries(r.result).map(resultRow))) : null,
      r.error ? [h("h3", null, "Error"), h("pre", { class: "error-block" }, r.error)] : null,
      usageTable(r),
      !r.result && !r.error && TERMINAL.has(r.state) ? h("p", { class: "muted" }, "No result was reported.") : null,
      // The detail holds the last reports only (`progress_total` counts them all); the last 200 are listed.
      history.length ? h("details", { class: "history" },
        h("summary", null, `Progress reports (${r.progress_total ?? history.length})`),
        h("ol", null, history.slice(-200).map(report))) : null);

    renderConfig(r);
    renderLineage(r);
    items.render(r);
  }

  // Where the run comes from: its attempts (the whole retry chain, each linked, with when a waiting retry may be
  // claimed), and the schedule's fire or the pipeline run and step that requested it.
  function renderLineage(r) {
    const chain = r.chain ?? [];
    const max = r.config.retry?.value?.max_attempts;
    const retried = chain.length > 1 || r.attempt > 1 || max > 1;
    if (!retried && !r.schedule_id && !r.pipeline_run_id && !r.follows && !r.preempted_for && (r.priority ?? 50) === 50) {
      lineage.hidden = true;
      return;
    }
    const waits = (a) => (a.state === "queued" && a.not_before && Date.parse(a.not_before) > ctx.serverNow()
      ? [" · waits until ", h("span", { class: "not-before" }, timeEl(a.not_before)), " (retry backoff)"]
      : null);
    const attempt = (a) => h("li", { dataset: { run: a.id, state: a.state, attempt: a.attempt } },
      a.id === r.id ? h("strong", null, `Attempt ${a.attempt} (this run)`)
        : h("a", { href: `#/runs/${a.id}` }, `Attempt ${a.attempt}`),
      a.follows_as ? ` (${FOLLOWS[a.follows_as] ?? a.follows_as})` : "", " ", stateBadge(a.state), " ", shortId(a.id), waits(a));
    const rows = [];
    if (retried) rows.push(["Attempt", [`${r.attempt} of ${Math.max(max ?? 1, chain.length, r.attempt)}`,
      r.retry_of ? [" · retries ", h("a", { href: `#/runs/${r.retry_of}` }, shortId(r.retry_of))] : null]]);
    if (r.schedule_id) {
      rows.push(["Schedule", [h("a", { href: r.pipeline_run_id ? "#/pipelines" : "#/workers", class: "schedule-link" },
        r.requested_by.replace(/^schedule:/, "")), r.fire_at ? [", the fire of ", timeEl(r.fire_at)] : null]]);
    }
    if (r.priority != null && r.priority !== 50) rows.push(["Priority", `${r.priority} (0 to 100, higher first)`]);
    if (r.preempted_for) {
      rows.push(["Preempted", ["for run ", h("a", { href: `#/runs/${r.preempted_for}`, class: "preempted-for" },
        shortId(r.preempted_for)), ", which needed its resource; its resume goes on from its checkpoint"]]);
    }
    if (r.pipeline_run_id) {
      const link = h("a", { href: `#/pipelines/runs/${r.pipeline_run_id}`, class: "pipeline-link" },
        "pipeline run ", shortId(r.pipeline_run_id));
      rows.push(["Pipeline", [link, r.pipeline_step != null ? `, step ${r.pipeline_step + 1}` : null]]);
    }
    lineage.hidden = false;
    replace(lineage, h("h2", { id: "lineage-title" }, "Where it comes from"),
      facts(rows),
      chain.length > 1
        ? [h("h3", null, "Retry chain"), h("ol", { class: "chain", id: "run-chain" }, chain.map(attempt))]
        : null);
  }

  // The resolved configuration, and beside it what the worker reported it really used when the run started
  // (its `config` line): an engine taken from elsewhere, or a worker that overrides what it is given, shows up
  // as a difference here, and what the worker reported is what it ran with.
  function renderConfig(r) {
    const cfg = r.config;
    const reported = r.reported_config && typeof r.reported_config === "object" ? r.reported_config : null;
    const resolved = { engine: cfg.engine?.value, preset: cfg.preset?.value, model: cfg.model, endpoint: cfg.endpoint };
    const sources = { engine: cfg.engine?.source, preset: cfg.preset?.source };
    const cfgRows = [];
    const differs = [];
    for (const [k, v] of Object.entries(resolved)) {
      const said = reported?.[k];
      if (v == null && said == null) continue;
      const differ = said !== undefined && valueText(said ?? null) !== valueText(v ?? null);
      if (differ) differs.push(k);
      cfgRows.push({ k, v: v ?? "—", s: sources[k], said, differ });
    }
    // Anything else the worker reported (besides where its engine comes from) is shown too, never dropped.
    for (const [k, said] of Object.entries(reported ?? {})) {
      if (!(k in resolved) && k !== "source") cfgRows.push({ k, v: "—", s: null, said, differ: false, extra: true });
    }
    for (const [k, v] of Object.entries(cfg.options)) cfgRows.push({ k, v: valueText(v.value), s: v.source });
    if (cfg.timeout_seconds) cfgRows.push({ k: "timeout", v: duration(cfg.timeout_seconds * 1000), s: null });
    const reportedCell = (row) => {
      if (row.said === undefined) return h("td", { class: "reported muted" }, reported ? "" : "—");
      const attrs = { class: row.differ ? "reported differs" : "reported", dataset: { differs: String(row.differ) } };
      return h("td", attrs, h("code", null, row.said === null ? "none" : valueText(row.said)),
        row.differ ? [" ", h("span", { class: "badge differs", title: "Not what was resolved" }, "differs")] : null);
    };
    const cfgRow = (row) => h("tr", { dataset: { field: row.k, differs: row.differ ? "true" : null } },
      h("th", { scope: "row" }, row.k),
      h("td", null, h("code", null, String(row.v))),
      h("td", null, sourceBadge(row.s) ?? h("span", { class: "muted" }, row.extra ? "—" : "derived")),
      reported ? reportedCell(row) : null);
    const head = (c) => (c === "Reported"
      ? h("th", { scope: "col", title: "What the worker reported it used when the run started" }, c)
      : h("th", { scope: "col" }, c));
    const columns = ["Field", "Value", "Source", reported ? "Reported" : null].filter(Boolean);
    const notes = [];
    if (differs.length) {
      notes.push(h("p", { class: "warn reported-note", id: "reported-differs" },
        `The worker reported a different ${differs.join(", ")} than the one resolved here; it ran with what it `,
        "reported."));
    } else if (!reported && r.started_at) {
      notes.push(h("p", { class: "muted reported-note" }, "The worker did not report the configuration it used."));
    } else if (!reported) {
      notes.push(h("p", { class: "muted reported-note" },
        "What the worker really uses is shown here once it has started and said so."));
    }
    const source = reported?.source;
    if (source?.description) {
      notes.push(h("p", { class: "muted reported-note", id: "reported-source" }, "The worker took its engine from ",
        source.description, source.reference ? ` (${source.reference})` : " (there was none)", "."));
    }
    const elsewhere = cfg.engine_source
      ? ["The engine of this worker is configured elsewhere: ", cfg.engine_source.description,
        cfg.engine_source.reference ? ` (${cfg.engine_source.reference})` : "", "."]
      : "The engine of this worker is configured elsewhere.";
    config.classList.toggle("wide", !!reported);
    replace(config, h("h2", { id: "config-title" }, "Resolved configuration"),
      cfgRows.length
        ? h("div", { class: "config-wrap" }, h("table", { class: "config-table", id: "run-config" },
          h("thead", null, h("tr", null, columns.map(head))),
          h("tbody", null, cfgRows.map(cfgRow))))
        : h("p", { class: "muted" }, "Nothing to resolve."),
      notes,
      cfg.engine_configurable ? null : h("p", { class: "muted" }, elsewhere),
      renderChanges(r));
  }

  // A rerun's diff against the run it reruns: each changed field, both values and where each came from (an
  // override with who changed it, when and why).
  function renderChanges(r) {
    if (!r.changed_since) return null;
    const title = h("h3", null, "Changed since run ", h("a", { href: `#/runs/${r.follows}` }, shortId(r.follows)));
    if (!r.changed_since.length) {
      return [title, h("p", { class: "muted", id: "run-changes" }, "Nothing: it resolved as the run it reruns.")];
    }
    const side = (value, origin) => h("td", null, h("code", null, value == null ? "none" : valueText(value)), " ",
      origin ? sourceBadge(origin.source) : null,
      origin?.changed_by ? [" by ", h("span", { class: "actor" }, origin.changed_by)] : null,
      origin?.changed_at ? [" ", timeEl(origin.changed_at)] : null,
      origin?.reason ? h("span", { class: "muted" }, ` — ${origin.reason}`) : null);
    const row = (c) => h("tr", { dataset: { field: c.field } }, h("th", { scope: "row" }, c.field),
      side(c.before, c.before_source), side(c.after, c.after_source));
    return [title, h("table", { class: "config-table", id: "run-changes" },
      h("thead", null, h("tr", null, ["Field", "Before", "After"].map((c) => h("th", { scope: "col" }, c)))),
      h("tbody", null, r.changed_since.map(row)))];
  }

  function cell(v) {
    if (typeof v === "number") return count(v);
    if (v && typeof v === "object" && !Array.isArray(v)) {
      return h("ul", { class: "tally" },
        Object.entries(v).map(([k, x]) => h("li", null, `${k}: `, typeof x === "number" ? count(x) : valueText(x))));
    }
    return valueText(v);
  }

  function progressTextFinal(f) {
    return f.total != null ? `${count(f.done)} / ${count(f.total)}` : `${count(f.done)} done`;
  }

  async function load() {
    try {
      run = await api(`/api/runs/${id}`);
      if (closed) return;
      replace(notice);
      render();
      startLog();
    } catch (e) {
      if (!(e instanceof ApiError)) throw e;
      replace(notice, h("p", { class: "error" }, e.message));
    }
  }

  async function carryOn(how) {
    busy = true;
    render();
    alert.hidden = true;
    try {
      const next = await api(`/api/runs/${id}/${how}`, { method: "POST" });
      location.hash = `#/runs/${next.id}`;
    } catch (e) {
      if (!(e instanceof ApiError)) throw e;
      alert.textContent = e.message;
      alert.hidden = false;
      busy = false;
      load();
    }
  }

  async function cancel() {
    busy = true;
    render();
    alert.hidden = true;
    try {
      await api(`/api/runs/${id}/cancel`, { method: "POST" });
    } catch (e) {
      if (!(e instanceof ApiError)) throw e;
      alert.textContent = e.message;
      alert.hidden = false;
    } finally {
      busy = false;
      load();
    }
  }

  function appendLog(text) {
    const atBottom = logPre.scrollTop + logPre.clientHeight >= logPre.scrollHeight - 8;
    logPre.append(text);
    if (logPre.textContent.length > LOG_LIMIT) logPre.textContent = logPre.textContent.slice(-LOG_LIMIT);
    if (atBottom) logPre.scrollTop = logPre.scrollHeight;
  }

  // The log is read once: followed while the run is in flight (the response ends when the run has ended and its
  // last output was sent), or read when it has already ended. Only its last lines are read at first, so that a
  // huge log costs the browser nothing until someone asks for the whole of it.
  function startLog() {
    if (logController || logDone) return;
    const follow = !TERMINAL.has(run.state);
    const controller = new AbortController();
    logController = controller;
    logFollowing = follow;
    logState.textContent = follow ? "(following)" : "";
    logPre.dataset.following = String(follow);
    logPre.textContent = "";
    logMore?.remove();
    const query = new URLSearchParams();
    if (follow) query.set("follow", "true");
    if (!logWhole) query.set("tail", String(LOG_TAIL));
    const current = () => logController === controller;
    streamText(`/api/runs/${id}/log?${query}`, appendLog, controller.signal, (response) => {
      const omitted = Number(response.headers.get("x-log-omitted-bytes") ?? 0);
      if (omitted > 0) offerWholeLog(omitted);
    }).then(() => {
      if (!current()) return;
      logDone = true;
      logState.textContent = logPre.textContent ? "(complete)" : "(no output)";
      logPre.dataset.following = "false";
    }).catch((e) => {
      if (e?.name === "AbortError" || !current()) return;
      logState.textContent = `(${e.message})`;
      logPre.dataset.following = "false";
    }).finally(() => {
      if (!current()) return;
      logController = null;
      // A follow that ended while the ledger still says in flight is re-checked once the state is refetched.
      if (logFollowing && !logDone && logRetries++ < 5) setTimeout(() => !closed && load(), 2000);
    });
  }

  // Above the last lines: how much comes before them, and a link that reads the log from its start.
  function offerWholeLog(omitted) {
    const link = h("a", { href: "#", id: "log-whole" }, "Load the whole log");
    link.addEventListener("click", (ev) => {
      ev.preventDefault();
      logWhole = true;
      logController?.abort();
      logController = null;
      logDone = false;
      startLog();
    });
    logMore = h("p", { class: "log-more muted", id: "log-more" },
      `From the last ${count(LOG_TAIL)} lines on: the ${count(omitted)} bytes before them are not shown. `, link);
    logPre.before(logMore);
  }

  load();

  return {
    onEvent(ev) {
      // A daemon's event may change what is shown of the daemon running this run; a run of the same worker may
      // be a retry of this one (its chain grows).
      if (ev.run === id || (ev.kind === "daemon" && run?.daemon_id)) debounce("run", load);
      else if (ev.kind === "run" && ev.worker === run?.worker && (run?.chain || run?.children?.length)) {
        debounce("run", load);
      }
      items.onEvent(ev);
    },
    refresh: load,
    tick() {
      const text = outcome.querySelector(".progress-text");
      if (run?.state === "running" && text) text.textContent = progressText(progressFacts(run, ctx.serverNow()));
    },
    unmount() {
      closed = true;
      debounce.cancel();
      items.unmount();
      logController?.abort();
    },
  };
}
