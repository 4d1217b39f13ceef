// The run form of a worker card and the override editor ask for the same things (an engine, a preset, values of
// the worker's declared options) and send them in the same shape, so both build their fields and read them back
// here: a value typed into one form is never understood differently by the other.

import { h, replace } from "./dom.js";
import { valueText } from "./format.js";

/** A field of any form (the ledger's filters too): its label, its input, and anything shown beneath. */
export function field(id, label, input, ...beneath) {
  return h("div", { class: "field" }, h("label", { for: id }, label), input, beneath);
}

/**
 * The Engine and Preset fields, `<id>-engine` and `<id>-preset`. The presets offered are those of the engine
 * chosen or, while none is (the select is on one of the form's own values), those of `current`. `word` words a
 * choice; `around(name, chosenEngine)` gives the form's own options, `[before, after]` the choices.
 */
export function engineFields(id, engines, current, word, around) {
  const engine = h("select", { id: `${id}-engine`, name: "engine" });
  const preset = h("select", { id: `${id}-preset`, name: "preset" });
  const chosen = () => (Object.hasOwn(engines, engine.value) ? engine.value : null);
  const fill = (select, name, choices) => {
    const [before, after] = around(name, chosen());
    replace(select, before, choices.map(([value, text]) => h("option", { value }, word(text))), after);
  };
  fill(engine, "engine", Object.keys(engines).map((e) => [e, e]));
  const fillPresets = () => {
    const presets = Object.entries(engines[chosen() ?? current]?.presets ?? {});
    fill(preset, "preset", presets.map(([p, model]) => [p, `${p} (${model})`]));
  };
  engine.addEventListener("change", fillPresets);
  fillPresets();
  return { engine, preset, fields: [field(engine.id, "Engine", engine), field(preset.id, "Preset", preset)] };
}

/**
 * The input of a declared option, `<id>-opt-<name>`: a select of its choices (true and false for a boolean), a
 * number field, or a text field. `hint` says what applies when it is left empty; `word` words a choice.
 */
export function optionInput(spec, id, hint, word) {
  const inputId = `${id}-opt-${spec.name}`;
  const choices = spec.choices?.length ? spec.choices : spec.type === "boolean" ? [true, false] : null;
  if (choices) {
    return h("select", { id: inputId }, h("option", { value: "" }, hint),
      choices.map((c) => h("option", { value: JSON.stringify(c) }, word(valueText(c)))));
  }
  if (spec.type === "integer" || spec.type === "number") {
    const integer = spec.type === "integer";
    // The bounds only guide the field (its arrows, its :invalid look): the form does not block on them, so the
    // API's sentence about a value out of bounds is what a person reads, as for any other refused value.
    return h("input", {
      id: inputId, type: "number", step: integer ? "1" : "any", inputmode: integer ? "numeric" : "decimal",
      min: spec.minimum, max: spec.maximum, placeholder: hint,
    });
  }
  return h("input", { id: inputId, type: "text", placeholder: hint });
}

/** The bounds of a numeric option in words: `0 to 255`, `at least 1`, `at most 8`, or nothing. */
export function boundsText(spec) {
  const [min, max] = [spec.minimum, spec.maximum];
  if (min != null && max != null) return `${min} to ${max}`;
  if (min != null) return `at least ${min}`;
  if (max != null) return `at most ${max}`;
  return "";
}

/** The field of a declared option: its name, type and bounds, its input, and anything shown beneath. */
export function optionField(spec, input, ...beneath) {
  const bounds = boundsText(spec);
  const label = [spec.name, h("span", { class: "type" }, ` ${spec.type}${bounds ? `, ${bounds}` : ""}`)];
  const description = spec.description ? h("small", { class: "muted" }, spec.description) : null;
  return field(input.id, label, input, beneath, description);
}

/**
 * The option values given, by name, each typed as its option declares: `fields` are `{ spec, input, clear }`,
 * `clear` an optional checkbox. An empty input is not given; a checked `clear` gives null, which an override
 * reads as "follow the default again".
 */
export function readOptions(fields) {
  const options = {};
  for (const { spec, input, clear } of fields) {
    const raw = input.value.trim();
    if (clear?.checked) options[spec.name] = null;
    else if (raw === "") continue;
    else if (spec.choices?.length) options[spec.name] = JSON.parse(raw);
    else if (spec.type === "boolean") options[spec.name] = raw === "true";
    else if (spec.type === "integer") options[spec.name] = Number.parseInt(raw, 10);
    else if (spec.type === "number") options[spec.name] = Number(raw);
    else options[spec.name] = raw;
  }
  return options;
}
