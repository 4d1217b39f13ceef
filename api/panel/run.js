// One run: its state, times, daemon, resolved configuration with sources, progress, result counts, error, and
// its log, followed live while the run is in flight (a streamed fetch of /api/runs/{id}/log?follow=true).

import { ApiError, api, streamText } from "./api.js";
import { debouncer, h, replace } from "./dom.js";
import {
  TERMINAL, count, dateTime, duration, progressBar, progressFacts, progressText, shortId, sourceBadge, stateBadge,
  timeEl, valueText,
} from "./format.js";

const LOG_LIMIT = 2_000_000; // characters kept on screen; older output is cut from the top

export function mount(root, [id], ctx) {
  const debounce = debouncer(250);
  let closed = false;
  let run = null;
  let logController = null;
  let logFollowing = false;
  let logDone = false;
  let busy = false;
  let logRetries = 0;

  const head = h("div", { class: "view-head" });
  const notice = h("div", { class: "notice", role: "status" });
  const alert = h("p", { class: "alert", role: "alert", hidden: true });
  const summary = h("section", { class: "card run-summary", "aria-label": "Summary" });
  const config = h("section", { class: "card", "aria-labelledby": "config-title" });
  const outcome = h("section", { class: "card", "aria-labelledby": "outcome-title" });
  const logState = h("span", { class: "log-state muted", id: "log-state" });
  const logPre = h("pre", {
    class: "log", id: "run-log", tabindex: "0", "aria-label": "The run's output", "aria-describedby": "log-state",
  });
  const logSection = h("section", { class: "card log-card", "aria-labelledby": "log-title" },
    h("h2", { id: "log-title" }, "Output ", logState), logPre);
  replace(root, head, notice, alert, h("div", { class: "run-grid" }, summary, outcome, config), logSection);

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
    const controls = [];
    if (!TERMINAL.has(r.state) && ctx.can("operator") && !r.cancel_requested_at) {
      controls.push(h("button", { type: "button", class: "cancel", disabled: busy, onclick: cancel },
        "Cancel this run"));
    }
    replace(summary, h("dl", { class: "facts" }, rows.map(([k, v]) => [h("dt", null, k), h("dd", null, v)])), controls);

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
      r.result ? h("table", { class: "counts" }, h("caption", null, "Result"),
        h("tbody", null, Object.entries(r.result).map(resultRow))) : null,
      r.error ? [h("h3", null, "Error"), h("pre", { class: "error-block" }, r.error)] : null,
      !r.result && !r.error && TERMINAL.has(r.state) ? h("p", { class: "muted" }, "No result was reported.") : null,
      history.length ? h("details", { class: "history" }, h("summary", null, `Progress reports (${history.length})`),
        h("ol", null, history.slice(-200).map(report))) : null);

    const cfg = r.config;
    const cfgRows = [];
    if (cfg.engine) cfgRows.push(["engine", cfg.engine.value, cfg.engine.source]);
    if (cfg.preset) cfgRows.push(["preset", cfg.preset.value, cfg.preset.source]);
    if (cfg.model) cfgRows.push(["model", cfg.model, null]);
    if (cfg.endpoint) cfgRows.push(["endpoint", cfg.endpoint, null]);
    for (const [k, v] of Object.entries(cfg.options)) cfgRows.push([k, valueText(v.value), v.source]);
    if (cfg.timeout_seconds) cfgRows.push(["timeout", duration(cfg.timeout_seconds * 1000), null]);
    const cfgRow = ([k, v, s]) => h("tr", { dataset: { field: k } }, h("th", { scope: "row" }, k),
      h("td", null, h("code", null, String(v))),
      h("td", null, sourceBadge(s) ?? h("span", { class: "muted" }, "derived")));
    replace(config, h("h2", { id: "config-title" }, "Resolved configuration"),
      cfgRows.length
        ? h("table", { class: "config-table" },
          h("thead", null, h("tr", null, ["Field", "Value", "Source"].map((c) => h("th", { scope: "col" }, c)))),
          h("tbody", null, cfgRows.map(cfgRow)))
        : h("p", { class: "muted" }, "Nothing to resolve."),
      cfg.engine_configurable
        ? null
        : h("p", { class: "muted" }, "The engine of this worker is configured elsewhere."));
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
  // last output was sent), or read whole when it has already ended.
  function startLog() {
    if (logController || logDone) return;
    const follow = !TERMINAL.has(run.state);
    logController = new AbortController();
    logFollowing = follow;
    logState.textContent = follow ? "(following)" : "";
    logPre.dataset.following = String(follow);
    streamText(`/api/runs/${id}/log${follow ? "?follow=true" : ""}`, appendLog, logController.signal).then(() => {
      logDone = true;
      logState.textContent = logPre.textContent ? "(complete)" : "(no output)";
      logPre.dataset.following = "false";
    }).catch((e) => {
      if (e?.name === "AbortError") return;
      logState.textContent = `(${e.message})`;
      logPre.dataset.following = "false";
    }).finally(() => {
      logController = null;
      // A follow that ended while the ledger still says in flight is re-checked once the state is refetched.
      if (logFollowing && !logDone && logRetries++ < 5) setTimeout(() => !closed && load(), 2000);
    });
  }

  load();

  return {
    onEvent(ev) {
      // A daemon's event may change what is shown of the daemon running this run.
      if (ev.run === id || (ev.kind === "daemon" && run?.daemon_id)) debounce("run", load);
    },
    refresh: load,
    tick() {
      const text = outcome.querySelector(".progress-text");
      if (run?.state === "running" && text) text.textContent = progressText(progressFacts(run, ctx.serverNow()));
    },
    unmount() {
      closed = true;
      debounce.cancel();
      logController?.abort();
    },
  };
}
