"""What a worker's code declares, read from its signatures without running it: the options of ``execute`` (types,
defaults, ``Literal`` choices, ``Annotated`` bounds), its engine and preset defaults, its registries' presets, and
its capabilities (which of the adapter's parameters ``execute`` takes).
The adapter (``scrinalia_worker.py``) uses it for ``describe`` and to convert flags to the types a parameter wants.
"""

from __future__ import annotations

import inspect
import types
import typing
from typing import Any, Callable

#: The parameter names a common flag may arrive under, in order of preference.
PARAMETER_NAMES = {
    "run-id": ("run_id",),
    "engine": ("engine_name", "engine"),
    "preset": ("preset",),
    "model": ("model", "model_name"),
    "endpoint": ("endpoint", "base_url"),
}

#: Parameters of ``execute`` the adapter gives (callbacks, what the run continues, its items' scope, skip list and
#: shard, the usage it reports), never options.
ADAPTER_PARAMETERS = (
    "progress", "checkpoint", "resume_from", "restart_of", "item", "only", "skip", "shard", "usage",
)

#: What ``describe`` reports a worker can do, each from the parameter of ``execute`` that makes it possible.
#: ``yield`` comes with ``checkpoint``: the adapter yields at the worker's next checkpoint when asked.
CAPABILITY_PARAMETERS = {
    "items": "item", "scope": "only", "shards": "shard", "checkpoints": "checkpoint", "yield": "checkpoint",
}

#: Parameters that are never options: the session, the adapter's parameters, the common flags.
NOT_OPTIONS = {"db", "session", *ADAPTER_PARAMETERS, *(name for names in PARAMETER_NAMES.values() for name in names)}

#: Option types of the catalogue, by Python type.
TYPE_NAMES = {bool: "boolean", int: "integer", float: "number", str: "string"}


def type_hints(function: Callable[..., Any]) -> dict[str, Any]:
    try:
        return typing.get_type_hints(function, include_extras=True)
    except Exception:  # unresolvable annotations: fall back to the defaults' types
        return {}


def unwrap(hint: Any) -> tuple[Any, list[Any]]:
    """A hint without ``Optional`` and ``Annotated``: the bare type and the ``Annotated`` metadata."""
    metadata: list[Any] = []
    while True:
        origin = typing.get_origin(hint)
        if origin is typing.Annotated:
            hint, *extra = typing.get_args(hint)
            metadata.extend(extra)
        elif origin in (typing.Union, types.UnionType):
            concrete = [a for a in typing.get_args(hint) if a is not type(None)]
            if len(concrete) != 1:
                return None, metadata
            hint = concrete[0]
        else:
            return hint, metadata


def target_type(parameter: inspect.Parameter, hints: dict[str, Any]) -> Any:
    """The type a parameter's value should have: its annotation, else the type of its default, else None."""
    hint, _ = unwrap(hints.get(parameter.name, inspect.Parameter.empty))
    if typing.get_origin(hint) is typing.Literal:
        kinds = {type(choice) for choice in typing.get_args(hint)}
        hint = kinds.pop() if len(kinds) == 1 else None
    if hint in TYPE_NAMES:
        return hint
    default = parameter.default
    if default is not inspect.Parameter.empty and default is not None and type(default) in TYPE_NAMES:
        return type(default)
    return None


def option_parameters(parameters: Any) -> list[inspect.Parameter]:
    named = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return [p for p in parameters if p.kind in named and p.name not in NOT_OPTIONS]


def bounds(metadata: list[Any], integer: bool) -> dict[str, Any]:
    """``minimum``/``maximum`` from ``Annotated`` metadata: objects with ``ge``/``gt``/``le``/``lt`` (an exclusive
    bound of a whole number moves by one; of a float it is kept as it is, inclusive)."""
    bounds: dict[str, Any] = {}
    for item in metadata:
        for attribute, key, step in (("ge", "minimum", 0), ("gt", "minimum", 1), ("le", "maximum", 0),
                                     ("lt", "maximum", -1)):
            value = item.get(attribute) if isinstance(item, dict) else getattr(item, attribute, None)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                bounds[key] = value + step if integer else value
    return bounds


def declared_options(function: Callable[..., Any]) -> list[dict[str, Any]]:
    """The options of ``function`` as its signature declares them."""
    hints = type_hints(function)
    options = []
    for parameter in option_parameters(inspect.signature(function).parameters.values()):
        hint, metadata = unwrap(hints.get(parameter.name, inspect.Parameter.empty))
        choices = list(typing.get_args(hint)) if typing.get_origin(hint) is typing.Literal else None
        target = target_type(parameter, hints)
        option: dict[str, Any] = {"name": parameter.name, "type": TYPE_NAMES.get(target, "string")}
        default = parameter.default
        if default is not inspect.Parameter.empty and default is not None:
            option["default"] = default
        if choices:
            option["choices"] = choices
        option.update(bounds(metadata, target is int))
        options.append(option)
    return options


def presets(registry: Any) -> dict[str, str]:
    """A registry's ``PRESETS`` as preset → model (a model may be a name, or an object or dict with ``model``)."""
    presets = registry.get("PRESETS", registry) if isinstance(registry, dict) else getattr(registry, "PRESETS", {})
    models = {}
    for name, model in dict(presets).items():
        if isinstance(model, dict):
            model = model.get("model")
        elif not isinstance(model, str):
            model = getattr(model, "model", None)
        if isinstance(model, str):
            models[str(name)] = model
    return models


def declared(module: types.ModuleType, registries: dict[str, Any] | None) -> dict[str, Any]:
    """What the code declares: ``execute``'s options and engine defaults, and each registry's presets."""
    execute = getattr(module, "execute", None)
    section: dict[str, Any] = {"options": [], "engine": None, "preset": None, "presets": {}}
    if callable(execute):
        section["options"] = declared_options(execute)
        parameters = inspect.signature(execute).parameters
        for key, names in (("engine", PARAMETER_NAMES["engine"]), ("preset", PARAMETER_NAMES["preset"])):
            default = next((parameters[n].default for n in names if n in parameters), inspect.Parameter.empty)
            if isinstance(default, str):
                section[key] = default
    section["presets"] = {str(engine): presets(registry) for engine, registry in (registries or {}).items()}
    return section


def capabilities(module: types.ModuleType) -> dict[str, bool]:
    """What ``execute`` can do, by its parameter names alone: ``items`` (it has ``item``), ``scope`` (``only``),
    ``shards`` (``shard``), ``checkpoints`` and ``yield`` (``checkpoint``).
    A ``**kwargs`` parameter does not count: the adapter passes its parameters only to parameters of their name."""
    execute = getattr(module, "execute", None)
    names = inspect.signature(execute).parameters if callable(execute) else {}
    return {key: parameter is not None and parameter in names for key, parameter in CAPABILITY_PARAMETERS.items()}
