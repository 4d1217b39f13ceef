// The health strip: database, model servers, object store, daemons and each worker (its readiness, and whether
// its catalogue entry agrees with its code), each green (ok), amber (degraded) or red (down) with its sentence.
// Refreshed on daemon and worker events, when the tab becomes visible again, and every 30 s (a model server or
// the object store can go down without any event saying so).

import { ApiError, api } from "./api.js";
import { h, replace } from "./dom.js";

const LABELS = {
  database: "Database", model_server: "Model server", object_store: "Object store", daemons: "Daemons",
  worker: "Worker",
};

/** A check's name for people: `model_server:local` is `Model server local`, `worker:embed` `Worker embed`. */
function label(name) {
  const [kind, rest] = name.split(":", 2);
  // A kind of check this panel does not know yet is shown by its own name.
  const word = LABELS[kind] ?? kind;
  return rest ? `${word} ${rest}` : word;
}

export function startHealth(el) {
  let inFlight = null;
  // The API could not say how it is (unreachable, or the token refused): one red check with the reason.
  const failed = (sentence) => {
    const check = h("li", { class: "check check-down", dataset: { check: "api", status: "down" } },
      h("span", { class: "dot", "aria-hidden": "true" }), h("strong", null, "API"), " ",
      h("span", { class: "sentence" }, sentence));
    replace(el, h("ul", { class: "checks" }, check));
  };
  const render = (data) => {
    // One check per worker would crowd the strip: the workers that are fine make one "Workers N ok" check, and
    // each worker that is not is shown by itself, with what is wrong.
    const fine = data.checks.filter((c) => c.name.startsWith("worker:") && c.status === "ok");
    const shown = data.checks.filter((c) => !fine.includes(c));
    const workers = fine.length
      ? h("li", {
        class: "check check-ok", dataset: { check: "workers", status: "ok" },
        title: fine.map((c) => c.name.slice("worker:".length)).join(", "),
      }, h("span", { class: "dot", "aria-hidden": "true" }), h("strong", null, "Workers"),
      h("span", { class: "visually-hidden" }, ": ok"), " ", h("span", { class: "sentence muted" }, `${fine.length} ok`))
      : null;
    replace(el, h("ul", { class: "checks" }, shown.map((c) => {
      const title = `${c.status}, checked in ${Math.round(c.latency_ms)} ms`;
      // An unhealthy check says what is wrong; the daemons' healthy one says how many are alive.
      const sentence = c.error ? h("span", { class: "sentence" }, c.error)
        : c.name === "daemons" ? h("span", { class: "sentence muted" }, `${c.details.alive} alive`) : null;
      return h("li", { class: `check check-${c.status}`, dataset: { check: c.name, status: c.status }, title },
        h("span", { class: "dot", "aria-hidden": "true" }),
        h("strong", null, label(c.name)),
        h("span", { class: "visually-hidden" }, `: ${c.status}`),
        sentence ? [" ", sentence] : null);
    }), workers));
    el.dataset.status = data.status;
  };
  const refresh = async () => {
    if (inFlight) return inFlight;
    inFlight = (async () => {
      try {
        render(await api("/api/health"));
      } catch (e) {
        if (!(e instanceof ApiError)) throw e;
        failed(e.message);
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
