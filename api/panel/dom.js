// Small DOM helpers. Text always goes in as text nodes: nothing the API returns is ever parsed as HTML.

/**
 * Creates an element. `props`: `class`, `dataset`, `on<event>` listeners, `value` (set as the property, which is
 * what a form reads), booleans (present when true) and anything else as an attribute. Children: nodes, strings,
 * numbers, arrays; null, undefined and false are skipped.
 */
export function h(tag, props, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(props ?? {})) {
    if (value == null || value === false) continue;
    if (key === "class") el.className = value;
    else if (key === "dataset") Object.assign(el.dataset, value);
    else if (key.startsWith("on") && typeof value === "function") el.addEventListener(key.slice(2), value);
    else if (key === "value") el.value = value;
    else el.setAttribute(key, value === true ? "" : String(value));
  }
  append(el, children);
  return el;
}

/** Appends children (see `h`). */
export function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child == null || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

/** Replaces every child of `el`. */
export function replace(el, ...children) {
  el.replaceChildren();
  return append(el, children);
}

/**
 * A `<dl class="facts">` of `[label, value]` rows, a value being anything `h` takes as children: the summaries of
 * a run and of a pipeline run read alike because both are built here.
 */
export function facts(rows) {
  return h("dl", { class: "facts" }, rows.map(([k, v]) => [h("dt", null, k), h("dd", null, v)]));
}

/** An id that is safe in attributes, derived from a name. */
export function idFor(prefix, name) {
  return `${prefix}-${String(name).replace(/[^A-Za-z0-9_-]/g, "_")}`;
}

/** Calls `fn` once, `ms` after the last of a burst of calls with the same key. */
export function debouncer(ms) {
  const timers = new Map();
  const debounced = (key, fn) => {
    clearTimeout(timers.get(key));
    timers.set(key, setTimeout(() => {
      timers.delete(key);
      fn();
    }, ms));
  };
  debounced.cancel = () => {
    for (const t of timers.values()) clearTimeout(t);
    timers.clear();
  };
  return debounced;
}
