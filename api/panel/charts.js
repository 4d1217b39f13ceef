// Small charts as inline SVG, built like the rest of the panel (no library, no build step, no inline style: the
// colours come from insights.css through classes). Each chart is a <figure> whose <svg> has role="img" and a
// <title>, each bar its own <title> (a tooltip), and a visually hidden table with the same figures for screen
// readers and for anyone who wants the numbers.

import { h } from "./dom.js";

const SVG = "http://www.w3.org/2000/svg";

/** Creates an SVG element: attributes as given (`class` too), children as in `h`. */
export function svg(tag, attrs, ...children) {
  const el = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attrs ?? {})) {
    if (value == null || value === false) continue;
    if (key === "dataset") for (const [k, v] of Object.entries(value)) el.dataset[k] = v;
    else el.setAttribute(key, String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child == null || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

let serial = 0;
const nextId = (prefix) => `${prefix}-${++serial}`;

/** The figures of a chart as a table only screen readers see. */
function dataTable(caption, headers, rows) {
  return h("table", { class: "visually-hidden" }, h("caption", null, caption),
    h("thead", null, h("tr", null, headers.map((c) => h("th", { scope: "col" }, c)))),
    h("tbody", null, rows.map((r) => h("tr", null, r.map((v, i) => (i ? h("td", null, v) : h("th", { scope: "row" }, v)))))));
}

const WIDTH = 300;

/** The first and last labels under a chart of bars (the table and the bars' titles have every one). */
function axisLabels(values) {
  if (!values.length) return null;
  return h("div", { class: "chart-axis", "aria-hidden": "true" },
    h("span", null, values[0].label), h("span", null, values[values.length - 1].label));
}

/**
 * Vertical bars, one per entry of `values` (`{ key, label, value, text }`: `text` says the value in words),
 * scaled to the largest. `title` names the chart; `kind` goes into its class and `data-chart`.
 */
export function barChart({ kind, title, values, height = 80, headers }) {
  const max = Math.max(1, ...values.map((v) => v.value));
  const step = WIDTH / Math.max(1, values.length);
  const gap = Math.min(2, step * 0.2);
  const titleId = nextId(`chart-${kind}`);
  const bars = values.map((v, i) => {
    const barHeight = (v.value / max) * (height - 2);
    return svg("rect", {
      class: "bar", x: (i * step + gap / 2).toFixed(2), y: (height - barHeight).toFixed(2),
      width: Math.max(0.5, step - gap).toFixed(2), height: Math.max(0, barHeight).toFixed(2),
      dataset: { key: v.key, value: v.value },
    }, svg("title", null, `${v.label}: ${v.text}`));
  });
  const chart = svg("svg", {
    class: "chart-svg", viewBox: `0 0 ${WIDTH} ${height}`, preserveAspectRatio: "none", role: "img",
    "aria-labelledby": titleId, width: "100%", height,
  }, svg("title", { id: titleId }, title), svg("g", { class: "bars" }, bars),
  svg("line", { class: "axis", x1: 0, y1: height - 0.5, x2: WIDTH, y2: height - 0.5 }));
  return h("figure", { class: `chart chart-${kind}`, dataset: { chart: kind } }, chart, axisLabels(values),
    h("figcaption", null, title, h("span", { class: "muted" }, ` · highest ${values.length ? maxText(values) : "—"}`)),
    dataTable(title, headers, values.map((v) => [v.label, v.text])));
}

function maxText(values) {
  return values.reduce((a, b) => (b.value > a.value ? b : a)).text;
}

/**
 * Stacked vertical bars, one per entry of `values` (`{ key, label, parts: { name: number } }`), one segment per
 * name of `series` (`[{ name, label }]`, drawn bottom up), scaled to the tallest stack.
 */
export function stackedChart({ kind, title, values, series, height = 80 }) {
  const total = (v) => series.reduce((sum, s) => sum + (v.parts[s.name] ?? 0), 0);
  const max = Math.max(1, ...values.map(total));
  const step = WIDTH / Math.max(1, values.length);
  const gap = Math.min(2, step * 0.2);
  const titleId = nextId(`chart-${kind}`);
  const stacks = values.map((v, i) => {
    let y = height;
    const segments = series.filter((s) => v.parts[s.name]).map((s) => {
      const segment = (v.parts[s.name] / max) * (height - 2);
      y -= segment;
      return svg("rect", {
        class: `segment segment-${s.name}`, x: (i * step + gap / 2).toFixed(2), y: y.toFixed(2),
        width: Math.max(0.5, step - gap).toFixed(2), height: segment.toFixed(2), dataset: { part: s.name },
      }, svg("title", null, `${v.label}: ${v.parts[s.name]} ${s.label}`));
    });
    return svg("g", { class: "stack", dataset: { key: v.key, total: total(v) } }, segments);
  });
  const chart = svg("svg", {
    class: "chart-svg", viewBox: `0 0 ${WIDTH} ${height}`, preserveAspectRatio: "none", role: "img",
    "aria-labelledby": titleId, width: "100%", height,
  }, svg("title", { id: titleId }, title), svg("g", { class: "stacks" }, stacks),
  svg("line", { class: "axis", x1: 0, y1: height - 0.5, x2: WIDTH, y2: height - 0.5 }));
  const legend = h("ul", { class: "legend" }, series.map((s) =>
    h("li", null, h("span", { class: `swatch segment-${s.name}`, "aria-hidden": "true" }), s.label)));
  return h("figure", { class: `chart chart-${kind}`, dataset: { chart: kind } }, chart, axisLabels(values),
    h("figcaption", null, title), legend,
    dataTable(title, ["Day", ...series.map((s) => s.label)],
      values.map((v) => [v.label, ...series.map((s) => v.parts[s.name] ?? 0)])));
}

/**
 * Horizontal bars, one per entry of `values` (`{ key, label, value, text }`) scaled to `max` (or the largest),
 * each with its label and its text beside it.
 */
export function meterChart({ kind, title, values, max }) {
  const top = Math.max(1e-9, max ?? Math.max(0, ...values.map((v) => v.value ?? 0)));
  const rowHeight = 22;
  const height = values.length * rowHeight;
  const titleId = nextId(`chart-${kind}`);
  const labelWidth = 40;
  const rows = values.map((v, i) => {
    const y = i * rowHeight;
    const width = v.value == null ? 0 : (Math.min(v.value, top) / top) * (WIDTH - labelWidth - 90);
    return svg("g", { class: "meter", dataset: { key: v.key, value: v.value ?? "" } },
      svg("text", { class: "meter-label", x: 0, y: y + 15 }, v.label),
      svg("rect", { class: "track", x: labelWidth, y: y + 4, width: WIDTH - labelWidth - 90, height: 14, rx: 3 }),
      svg("rect", { class: "bar", x: labelWidth, y: y + 4, width: width.toFixed(2), height: 14, rx: 3 },
        svg("title", null, `${v.label}: ${v.text}`)),
      svg("text", { class: "meter-value", x: WIDTH - 84, y: y + 15 }, v.text));
  });
  const chart = svg("svg", {
    class: "chart-svg meter-svg", viewBox: `0 0 ${WIDTH} ${height}`, role: "img", "aria-labelledby": titleId,
    width: "100%",
  }, svg("title", { id: titleId }, title), rows);
  return h("figure", { class: `chart chart-${kind}`, dataset: { chart: kind } }, chart,
    h("figcaption", null, title), dataTable(title, ["", "Value"], values.map((v) => [v.label, v.text])));
}
