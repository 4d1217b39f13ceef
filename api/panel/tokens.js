// The tokens view (admins): the service tokens with who created them, their expiry, last use and revocation;
// a form that creates one and shows its secret this once; a button that revokes one (every API process refuses
// it within a second). Tokens of the configuration file are not listed: they change only with the file.

import { ApiError, api } from "./api.js";
import { h, replace } from "./dom.js";
import { timeEl } from "./format.js";

const ROLES = ["viewer", "operator", "admin"];

export function mount(root, _params, ctx) {
  let closed = false;
  let ticks = 0;
  const head = h("div", { class: "view-head" }, h("h1", null, "Tokens"),
    h("p", { class: "muted" }, "Service tokens an admin creates and revokes here take effect without a restart. ",
      "A token's name is recorded as the actor of everything done with it."));
  if (!ctx.can("admin")) {
    replace(root, head, h("p", { class: "muted", id: "tokens-denied" }, "Managing tokens needs the admin role."));
    return { onEvent() {}, refresh() {}, unmount() {} };
  }
  const notice = h("div", { class: "notice", role: "status" });
  const list = h("div", { class: "table-wrap", id: "tokens", "aria-busy": "true" });
  const secret = h("div", { id: "token-secret", "aria-live": "polite" });
  replace(root, head, createForm(), secret, notice, list);

  async function load() {
    try {
      const { tokens } = await api("/api/tokens");
      if (closed) return;
      replace(list, tokens.length ? table(tokens) : h("p", { class: "muted" }, "There are no service tokens yet."));
      replace(notice);
    } catch (e) {
      if (!(e instanceof ApiError)) throw e;
      replace(notice, h("p", { class: "error" }, e.message));
    } finally {
      list.setAttribute("aria-busy", "false");
    }
  }

  function table(tokens) {
    const never = () => h("span", { class: "muted" }, "never");
    const row = (t) => {
      const revoke = h("button", { type: "button", class: "revoke", onclick: () => revokeToken(t, revoke) }, "Revoke");
      const state = t.revoked_at
        ? ["revoked ", timeEl(t.revoked_at), " by ", t.revoked_by]
        : revoke;
      return h("tr", { dataset: { id: t.id, name: t.name } },
        h("td", null, h("strong", null, t.name)), h("td", null, t.role),
        h("td", null, timeEl(t.created_at), " by ", t.created_by),
        h("td", null, t.expires_at ? timeEl(t.expires_at) : never()),
        h("td", { class: "last-used" }, t.last_used_at ? timeEl(t.last_used_at) : never()),
        h("td", { class: "state" }, state));
    };
    return h("table", { class: "audit tokens" },
      h("thead", null, h("tr", null,
        ["Name", "Role", "Created", "Expires", "Last used", ""].map((c) => h("th", { scope: "col" }, c)))),
      h("tbody", null, tokens.map(row)));
  }

  async function revokeToken(t, button) {
    if (!window.confirm(`Revoke the token ${t.name}? Everything using it is refused within a second.`)) return;
    button.disabled = true;
    try {
      await api(`/api/tokens/${encodeURIComponent(t.id)}`, { method: "DELETE" });
      replace(notice, h("p", { class: "ok" }, `The token ${t.name} is revoked.`));
    } catch (e) {
      if (!(e instanceof ApiError)) throw e;
      replace(notice, h("p", { class: "error", role: "alert" }, e.message));
    }
    load();
  }

  function createForm() {
    const name = h("input", { id: "token-name", name: "name", required: true, maxlength: 64, placeholder: "ci-deploy" });
    const role = h("select", { id: "token-role", name: "role" },
      ROLES.map((r) => h("option", { value: r }, r)));
    const expires = h("input", { id: "token-expires", name: "expires", type: "date" });
    const alert = h("p", { class: "alert", role: "alert", hidden: true, id: "token-alert" });
    const save = h("button", { type: "submit", class: "primary" }, "Create the token");
    const onsubmit = async (e) => {
      e.preventDefault();
      alert.hidden = true;
      save.disabled = true;
      const body = { name: name.value.trim(), role: role.value, expires_at: expires.value || null };
      try {
        const created = await api("/api/tokens", { method: "POST", body });
        name.value = "";
        expires.value = "";
        replace(secret, h("div", { class: "card" },
          h("p", null, "The token ", h("strong", null, created.name), " (", created.role, "). Copy its secret now: ",
            "it is not stored and cannot be shown again."),
          h("code", { class: "secret", id: "token-secret-value" }, created.secret)));
        load();
      } catch (err) {
        if (!(err instanceof ApiError)) throw err;
        alert.textContent = err.message;
        alert.hidden = false;
      } finally {
        save.disabled = false;
      }
    };
    return h("form", { class: "override-form card", novalidate: true, "aria-label": "Create a token", onsubmit },
      h("h2", null, "New token"),
      h("div", { class: "field inline" }, h("label", { for: name.id }, "Name"), name),
      h("div", { class: "field inline" }, h("label", { for: role.id }, "Role"), role),
      h("div", { class: "field inline" }, h("label", { for: expires.id }, "Expires (optional)"), expires),
      h("div", { class: "buttons" }, save), alert);
  }

  load();

  return {
    onEvent() {},
    refresh: load,
    // Last uses are recorded about once a second; the list is read again every 10 s while it is on screen.
    tick() {
      if (++ticks % 10 === 0) load();
    },
    unmount() {
      closed = true;
    },
  };
}
