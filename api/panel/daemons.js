// The daemons view: every daemon alive or stopped within the last day (host, version, labels, state, runs in
// flight, heartbeat age on the database clock), and, for an admin, Drain with a confirmation. A draining daemon
// shows who asked and how many runs it still has in flight until it is gone. The list is read again on a
// `daemon` event and (debounced) on a run's, since runs in flight change with them; while a daemon drains it is
// also read every 2 s, because a daemon that falls silent goes without any event saying so.

import { ApiError, api } from "./api.js";
import { debouncer, h, replace } from "./dom.js";
import { TERMINAL, ageSpan, count, shortId, tickAges, timeEl } from "./format.js";

const WATCH_MS = 2000;

function stateBadge(state) {
  return h("span", { class: `badge daemon-state daemon-${state}`, dataset: { state } }, state);
}

export function mount(root, _params, ctx) {
  const debounce = debouncer(300);
  const asking = new Set(); // ids whose confirmation is open
  const busy = new Set(); // ids whose drain request is out
  const alerts = new Map(); // id → sentence
  const runStates = new Map(); // run → the state its last event said
  let daemons = [];
  let fetchedAt = performance.now();
  let closed = false;
  let watch = null;

  const tbody = h("tbody");
  const columns = ["Host", "Version", "Labels", "State", "In flight", "Heartbeat", "Started", ""];
  const table = h("table", { class: "daemons", id: "daemons", "aria-busy": "true" },
    h("caption", { class: "visually-hidden" }, "Daemons, newest first"),
    h("thead", null, h("tr", null, columns.map((c, i) =>
      h("th", { scope: "col" }, i === columns.length - 1 ? h("span", { class: "visually-hidden" }, "Actions") : c)))),
    tbody);
  const notice = h("div", { class: "notice", role: "status" });
  replace(root, h("div", { class: "view-head" }, h("h1", null, "Daemons"),
    h("p", { class: "muted" }, "Alive, or stopped within the last day. Ages are measured on the database clock.")),
  notice, h("div", { class: "table-wrap" }, table));

  async function load() {
    try {
      const data = await api("/api/daemons");
      if (closed) return;
      daemons = data.daemons;
      fetchedAt = performance.now();
      render();
      replace(notice);
    } catch (e) {
      if (!(e instanceof ApiError)) throw e;
      replace(notice, h("p", { class: "error" }, e.message));
    } finally {
      table.setAttribute("aria-busy", "false");
    }
  }

  async function drain(d) {
    busy.add(d.id);
    alerts.delete(d.id);
    render();
    try {
      const after = await api(`/api/daemons/${d.id}/drain`, { method: "POST" });
      asking.delete(d.id);
      daemons = daemons.map((x) => (x.id === d.id ? after : x));
    } catch (e) {
      if (!(e instanceof ApiError)) throw e;
      alerts.set(d.id, e.message);
    } finally {
      busy.delete(d.id);
      render();
      load();
    }
  }

  function actions(d) {
    if (d.state === "gone") return d.stopped_at ? ["stopped ", timeEl(d.stopped_at)] : null;
    const drainFacts = d.drain_requested_at
      ? h("span", { class: "drain-by muted" }, `drain asked by ${d.drain_requested_by ?? "someone"} `,
        timeEl(d.drain_requested_at))
      : null;
    if (!ctx.can("admin") || d.state !== "active") return drainFacts;
    const label = `${d.host} (daemon ${d.id.slice(0, 8)})`;
    if (!asking.has(d.id)) {
      return h("button", {
        type: "button", class: "drain danger", "aria-label": `Drain ${label}`,
        onclick: () => {
          asking.add(d.id);
          render();
          root.querySelector(`tr[data-daemon="${d.id}"] .drain-confirm`)?.focus();
        },
      }, "Drain");
    }
    const runs = d.runs_in_flight === 1 ? "its run in flight" : `its ${count(d.runs_in_flight)} runs in flight`;
    return h("div", { class: "drain-ask", role: "group", "aria-label": `Confirm the drain of ${label}` },
      h("p", null, `Drain ${label}? It finishes ${runs}, claims no more, then stops.`),
      h("div", { class: "buttons" },
        h("button", { type: "button", class: "drain-confirm danger", disabled: busy.has(d.id), onclick: () => drain(d) },
          "Drain it"),
        h("button", {
          type: "button", class: "drain-never", onclick: () => {
            asking.delete(d.id);
            render();
          },
        }, "Never mind")));
  }

  function row(d) {
    const labels = d.labels?.length
      ? h("ul", { class: "labels" }, d.labels.map((l) => h("li", { class: "tag" }, l)))
      : h("span", { class: "muted" }, "none");
    const takes = d.workers.length ? `takes ${d.workers.join(", ")}` : "takes every worker";
    const inFlight = d.state === "draining"
      ? [h("strong", null, count(d.runs_in_flight)), d.runs_in_flight ? " still running" : " — stopping"]
      : [count(d.runs_in_flight), h("span", { class: "muted" }, ` of ${count(d.capacity)}`)];
    const alert = alerts.get(d.id);
    return h("tr", { dataset: { daemon: d.id, state: d.state, inFlight: d.runs_in_flight } },
      h("td", null, h("strong", null, d.host), h("br"), h("small", { class: "muted" }, "pid ", d.pid, " · ", shortId(d.id)),
        h("br"), h("small", { class: "muted" }, takes)),
      h("td", null, h("code", null, d.version)),
      h("td", null, labels),
      h("td", { class: "state-cell" }, stateBadge(d.state)),
      h("td", { class: "num in-flight-cell" }, inFlight),
      h("td", { class: "num" }, ageSpan("", d.heartbeat_age_seconds, "age")),
      h("td", null, timeEl(d.started_at)),
      h("td", { class: "daemon-actions" }, actions(d),
        alert ? h("p", { class: "alert", role: "alert" }, alert) : null));
  }

  function render() {
    // A redraw keeps the focus on the same control of the same row (a confirmation being answered, say).
    const focused = document.activeElement;
    const again = tbody.contains(focused) && focused.className
      ? `tr[data-daemon="${focused.closest("tr")?.dataset.daemon}"] .${focused.className.split(" ")[0]}`
      : null;
    replace(tbody, daemons.length
      ? daemons.map(row)
      : h("tr", { class: "empty" }, h("td", { colspan: columns.length }, "No daemon has run within the last day.")));
    tickAges(tbody, (performance.now() - fetchedAt) / 1000);
    if (again) tbody.querySelector(again)?.focus();
    // Watch a drain to its end.
    const draining = daemons.some((d) => d.state === "draining");
    if (draining && !watch) watch = setInterval(load, WATCH_MS);
    if (!draining && watch) {
      clearInterval(watch);
      watch = null;
    }
  }

  load();

  return {
    onEvent(ev) {
      // A run's progress changes nothing here; its claim and its end change a daemon's runs in flight.
      if (ev.kind === "run") {
        if (runStates.get(ev.run) === ev.state) return;
        runStates.set(ev.run, ev.state);
        if (TERMINAL.has(ev.state)) runStates.delete(ev.run);
      }
      if (ev.kind === "daemon" || ev.kind === "run") debounce("daemons", load);
    },
    refresh: load,
    tick() {
      tickAges(tbody, (performance.now() - fetchedAt) / 1000);
    },
    unmount() {
      closed = true;
      debounce.cancel();
      if (watch) clearInterval(watch);
    },
  };
}
