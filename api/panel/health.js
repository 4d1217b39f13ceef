// The health strip: database, model servers, object store and daemons, each green (ok), amber (degraded) or red
// (down) with its sentence. Refreshed on daemon events, when the tab becomes visible again, and every 30 s (a
// model server or the object store can go down without any event saying so).

import { ApiError, api } from "./api.js";
import { h, replace } from "./dom.js";

const LABELS = { database: "Database", model_server: "Model server", object_store: "Object store", daemons: "Daemons" };

function label(name) {
  const [kind, rest] = String(name).split(/[:/]/, 2);
  const base = LABELS[kind] ?? kind.replaceAll("_", " ");
  return rest ? `${base} ${rest}` : base;
}

export function startHealth(el, ctx) {
  let inFlight = null;
  const render = (data, failure) => {
    if (failure) {
      replace(el, h("ul", { class: "checks" }, h("li", { class: "check check-down", dataset: { check: "api", status: "down" } },
        h("span", { class: "dot", "aria-hidden": "true" }), h("strong", null, "API"), " ", h("span", { class: "sentence" }, failure))));
      return;
    }
    const checks = Array.isArray(data?.checks) ? data.checks : [];
    replace(el, h("ul", { class: "checks" }, checks.map((c) => {
      const status = ["ok", "degraded", "down"].includes(c.status) ? c.status : "degraded";
      return h("li", { class: `check check-${status}`, dataset: { check: c.name, status }, title: c.latency_ms != null ? `${status}, checked in ${Math.round(c.latency_ms)} ms` : status },
        h("span", { class: "dot", "aria-hidden": "true" }),
        h("strong", null, label(c.name)),
        h("span", { class: "visually-hidden" }, `: ${status}`),
        c.error ? [" ", h("span", { class: "sentence" }, c.error)] : null,
        !c.error && c.name === "daemons" && c.details?.alive != null ? [" ", h("span", { class: "sentence muted" }, `${c.details.alive} alive`)] : null,
      );
    })));
    el.dataset.status = data?.status ?? "";
  };
  const refresh = async () => {
    if (inFlight) return inFlight;
    inFlight = (async () => {
      try {
        render(await api("/api/health"));
      } catch (e) {
        if (!(e instanceof ApiError)) throw e;
        // A degraded or down API may answer its health with an error status but the same body.
        if (Array.isArray(e.body?.checks)) render(e.body);
        else render(null, e.message);
      } finally {
        inFlight = null;
      }
    })();
    return inFlight;
  };
  const clear = () => {
    replace(el);
    el.dataset.status = "";
  };
  setInterval(() => {
    if (el.dataset.status) refresh();
  }, 30000);
  document.addEventListener("visibilitychange", () => {
    if (document.visibilityState === "visible" && el.dataset.status) refresh();
  });
  return { refresh, clear };
}
