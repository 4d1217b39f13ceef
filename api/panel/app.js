// The panel's shell: the session (token and role), hash routing between the views, the health strip, the daemon
// list that every view may need, and the one live event stream whose events are handed to the current view.

import { ApiError, api, connectEvents, setToken, token } from "./api.js";
import * as daemons from "./daemons.js";
import { debouncer, h, replace } from "./dom.js";
import { startHealth } from "./health.js";
import * as overrides from "./overrides.js";
import * as pipelineRun from "./pipeline-run.js";
import * as pipelines from "./pipelines.js";
import * as quarantine from "./quarantine.js";
import * as resources from "./resources.js";
import * as run from "./run.js";
import * as runs from "./runs.js";
import { completeSignIn, signInOptions, startSignIn } from "./signin.js";
import * as tokens from "./tokens.js";
import * as workers from "./workers.js";

const ROLES = { viewer: 1, operator: 2, admin: 3 };

const ROUTES = [
  { pattern: /^#\/workers\/?$/, view: workers, nav: "workers" },
  { pattern: /^#\/workers\/([A-Za-z0-9_-]+)\/quarantine\/?$/, view: { mount: quarantine.mountQuarantine }, nav: "workers" },
  { pattern: /^#\/runs\/?(?:\?(.*))?$/, view: runs, nav: "runs" },
  { pattern: /^#\/runs\/([0-9A-Fa-f-]{36})\/?$/, view: run, nav: "runs" },
  { pattern: /^#\/overrides(?:\/([A-Za-z0-9_-]+))?\/?$/, view: overrides, nav: "overrides" },
  { pattern: /^#\/pipelines\/?$/, view: pipelines, nav: "pipelines" },
  { pattern: /^#\/pipelines\/runs\/([0-9A-Fa-f-]{36})\/?$/, view: pipelineRun, nav: "pipelines" },
  { pattern: /^#\/resources\/?$/, view: resources, nav: "resources" },
  { pattern: /^#\/daemons\/?$/, view: daemons, nav: "daemons" },
  { pattern: /^#\/tokens\/?$/, view: tokens, nav: "tokens" },
];

const listeners = { daemons: new Set() };

/** What every view shares. */
const ctx = {
  session: null,
  sessionError: null,
  /** The identity provider the panel signs people in with (`GET /api/signin`), or null. */
  oidc: null,
  /** Why the last return from the identity provider did not sign the person in. */
  signInError: null,
  daemons: null,
  serverOffsetMs: 0,
  /** Whether the caller has at least `role`. */
  can(role) {
    return ROLES[this.session?.role] >= ROLES[role];
  },
  /** The database clock, estimated from the last answer that carried it. */
  serverNow() {
    return Date.now() + this.serverOffsetMs;
  },
  /** Records the database clock of an answer. */
  sawServerTime(iso) {
    const t = Date.parse(iso);
    if (!Number.isNaN(t)) this.serverOffsetMs = t - Date.now();
  },
  /** Calls `fn` whenever the daemon list changes; returns a function that stops it. */
  onDaemons(fn) {
    listeners.daemons.add(fn);
    return () => listeners.daemons.delete(fn);
  },
  /** The daemons alive that take `worker` (active, not draining or gone). */
  daemonsFor(worker) {
    if (!Array.isArray(this.daemons)) return null;
    // A daemon that names no workers takes them all.
    return this.daemons.filter((d) => d.state === "active" && (!d.workers.length || d.workers.includes(worker)));
  },
  /** Goes to another view. */
  navigate(hash) {
    if (location.hash === hash) route();
    else location.hash = hash;
  },
};

let current = null; // { view, instance }
let health = null;

async function loadDaemons() {
  try {
    ctx.daemons = (await api("/api/daemons")).daemons;
  } catch (e) {
    if (!(e instanceof ApiError)) throw e;
    ctx.daemons = null;
  }
  for (const fn of listeners.daemons) fn(ctx.daemons);
}

async function loadSession() {
  try {
    ctx.session = await api("/api/me");
    ctx.sessionError = null;
  } catch (e) {
    if (!(e instanceof ApiError)) throw e;
    ctx.session = null;
    ctx.sessionError = e.message;
  }
  renderSession();
}

function renderSession() {
  const el = document.getElementById("session");
  const s = ctx.session;
  const input = h("input", {
    id: "token-input", name: "token", type: "password", autocomplete: "off", required: true, placeholder: "scr_…",
  });
  const attrs = { class: "signin", id: "signin-form", hidden: !!s, "aria-label": "Sign in with a token" };
  const form = h("form", { ...attrs, onsubmit: signIn },
    h("label", { for: "token-input" }, "Token"), input, h("button", { type: "submit" }, "Sign in"));
  const who = h("span", { class: "who", id: "who", dataset: { role: s?.role ?? "none" } },
    s ? ["Signed in as ", h("strong", null, s.name), ` (${s.role})`] : "Not signed in");
  const buttons = [];
  if (!s && ctx.oidc) {
    // People sign in with the identity provider; the token form stays for scripts' tokens.
    buttons.push(h("button", { type: "button", id: "oidc-signin", onclick: () => startSignIn(ctx.oidc) },
      "Sign in with your identity provider"));
  }
  if (token()) buttons.push(h("button", { type: "button", class: "link", onclick: signOut }, "Sign out"));
  else if (s) {
    const toggle = (e) => {
      form.hidden = !form.hidden;
      e.target.setAttribute("aria-expanded", String(!form.hidden));
      if (!form.hidden) input.focus();
    };
    buttons.push(h("button", {
      type: "button", class: "link", "aria-controls": "signin-form", "aria-expanded": "false", onclick: toggle,
    }, "Use a token"));
  }
  // A token given but refused says why; signed out without one, the view says what to do.
  const refused = !s && token() ? h("p", { class: "error", role: "alert" }, ctx.sessionError) : null;
  const failed = ctx.signInError ? h("p", { class: "error", role: "alert", id: "signin-error" }, ctx.signInError)
    : null;
  replace(el, who, buttons, form, refused, failed);
}

async function signIn(event) {
  event.preventDefault();
  const value = new FormData(event.target).get("token").trim();
  if (!value) return;
  setToken(value);
  await restart();
  if (!ctx.session) {
    // A token the API refuses is not kept (the panel goes back to what it showed without one); the sentence
    // saying why stays on screen.
    const error = ctx.sessionError;
    setToken(null);
    await restart();
    document.getElementById("session").append(h("p", { class: "error", role: "alert", id: "signin-error" }, error));
  }
}

async function signOut() {
  setToken(null);
  await restart();
}

let closeEvents = null;
const eventDebounce = debouncer(300);

/** Reads again everything on screen: the daemons, the health strip and the current view. */
function refetch() {
  loadDaemons();
  health.refresh();
  current?.instance.refresh();
}

function startEvents() {
  closeEvents?.();
  let wasDown = false;
  closeEvents = connectEvents({
    onEvent(ev) {
      if (ev.kind === "resync") {
        // The API says changes may have been missed: read everything on screen again.
        eventDebounce("resync", refetch);
        return;
      }
      if (ev.kind === "daemon") {
        eventDebounce("daemons", () => {
          loadDaemons();
          health.refresh();
        });
      }
      // A worker's new readiness or description changes its health check too.
      if (ev.kind === "worker") eventDebounce("health", () => health.refresh());
      current?.instance.onEvent(ev);
    },
    onOpen() {
      document.body.dataset.live = "on";
      if (wasDown) {
        // Events may have been missed while disconnected: refetch what is on screen, once.
        wasDown = false;
        refetch();
      }
    },
    onDown() {
      document.body.dataset.live = "off";
      wasDown = true;
    },
  });
}

function route() {
  const hash = location.hash || "#/workers";
  if (!ctx.session) {
    // Signed out: nothing is read until a token is given, so the API is not asked for what it would refuse.
    current?.instance.unmount();
    current = null;
    const main = document.getElementById("view");
    replace(main, h("h1", null, "Sign in"),
      ctx.oidc ? h("p", null, "Sign in with your identity provider (the button at the top) to see the workers and ",
        "the runs; scripts and tools use a token in the Token field.")
        : h("p", null, "This API needs a token to show the workers and the runs. Enter yours in the Token field at ",
          "the top; it is kept only in this tab (session storage) and sent as a bearer token."),
      ctx.sessionError ? h("p", { class: "muted" }, `The API said: ${ctx.sessionError}`) : null);
    document.getElementById("token-input").focus();
    return;
  }
  const found = ROUTES.map((r) => ({ r, m: hash.match(r.pattern) })).find((x) => x.m);
  current?.instance.unmount();
  current = null;
  for (const a of document.querySelectorAll("nav.views a")) {
    if (found && a.dataset.nav === found.r.nav) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
  const main = document.getElementById("view");
  if (!found) {
    replace(main, h("h1", null, "Not found"),
      h("p", null, "There is no such view. ", h("a", { href: "#/workers" }, "Go to the workers.")));
    return;
  }
  replace(main);
  const instance = found.r.view.mount(main, found.m.slice(1), ctx);
  current = { view: found.r.view, instance };
}

async function restart() {
  await loadSession();
  if (ctx.session) {
    await loadDaemons();
    health.refresh();
    startEvents();
  } else {
    closeEvents?.();
    closeEvents = null;
    health.clear();
  }
  route();
}

async function main() {
  health = startHealth(document.getElementById("health"));
  window.addEventListener("hashchange", route);
  // Back from the identity provider: the code becomes this tab's token before anything is read.
  try {
    const signedIn = await completeSignIn();
    if (signedIn) setToken(signedIn);
  } catch (e) {
    ctx.signInError = e.message;
  }
  ctx.oidc = await signInOptions();
  if (!location.hash) history.replaceState(null, "", "#/workers");
  // Relative times ("3 min ago") and run progress are redrawn locally each second; nothing is fetched.
  setInterval(() => current?.instance.tick?.(), 1000);
  await restart();
}

main();
