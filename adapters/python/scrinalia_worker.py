"""Run a Python worker module behind the Scrinalia worker protocol (docs/worker-protocol.md).

A worker module defines plain functions, as the archive's workers already do::

    def execute(batch_size: int = 50, engine_name: str = "ollama", preset: str = "fast", progress=None): ...
    def count_pending(batch_size: int = 50, **_): ...      # an int, or {"unmeasurable": "why", "done": n}
    def describe_config(engine_name: str = "ollama", preset: str = "fast", **_): ...   # a dict

and the catalogue declares it as::

    command = ["python3", "adapters/python/scrinalia_worker.py", "example_worker"]

The daemon appends a verb and flags (``run --run-id ID --engine E --preset P --model M --endpoint URL
--batch_size 50``). This adapter converts each value to the type the function's annotations or defaults suggest,
passes it by name, gives ``execute`` a ``progress(done, total, message=None)`` callback when it has a parameter
of that name, prints the return value as a protocol line, turns SIGTERM into a clean stop (the ``Stopped``
exception, which ``except Exception`` does not catch) and reports errors with a traceback on stderr.

Exit status: 0 done; 1 the worker raised; 2 a usage error (unknown module, verb or option, or a bad value);
143 stopped by SIGTERM (130 by SIGINT). Standard library only; Python 3.11 or newer.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import json
import os
import signal
import sys
import traceback
import types
import typing
from pathlib import Path
from typing import Any, Callable

USAGE = (
    "usage: scrinalia_worker.py <module> describe|count-pending|run [--run-id ID] [--engine E] [--preset P] "
    "[--model M] [--endpoint URL] [--<option> <value>]..."
)

#: Flags every worker receives besides its options, with their environment fallbacks.
COMMON_FLAGS = {
    "run-id": "SCRINALIA_RUN_ID",
    "engine": "SCRINALIA_ENGINE",
    "preset": "SCRINALIA_PRESET",
    "model": "SCRINALIA_MODEL",
    "endpoint": "SCRINALIA_ENDPOINT",
}

#: The parameter names a common flag may arrive under, in order of preference.
PARAMETER_NAMES = {
    "run-id": ("run_id",),
    "engine": ("engine_name", "engine"),
    "preset": ("preset",),
    "model": ("model", "model_name"),
    "endpoint": ("endpoint", "base_url"),
}

VERBS = {"describe": "describe_config", "count-pending": "count_pending", "run": "execute"}


class UsageError(Exception):
    """A mistake in the command line or the module; exit status 2."""


class Stopped(BaseException):
    """Raised in the worker when SIGTERM (or SIGINT) arrives; like KeyboardInterrupt, not an ``Exception``."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"stopped by {signal.Signals(signum).name}")
        self.signum = signum


def emit(obj: Any) -> None:
    """Writes one protocol line to stdout and flushes it."""
    sys.stdout.write(json.dumps(obj, default=str, ensure_ascii=False) + "\n")
    sys.stdout.flush()


def progress(done: int, total: int | None = None, message: str | None = None) -> None:
    """The callback handed to ``execute``: prints ``{"progress": {"done": d, "total": t, "message": m}}``."""
    body: dict[str, Any] = {"done": done, "total": total}
    if message is not None:
        body["message"] = str(message)
    emit({"progress": body})


def load_module(name: str) -> types.ModuleType:
    """Imports a module by dotted name, or from a path ending in ``.py``."""
    if name.endswith(".py"):
        path = Path(name)
        if not path.is_file():
            raise UsageError(f"the worker module file {name} does not exist.")
        spec = importlib.util.spec_from_file_location(path.stem, path)
        if spec is None or spec.loader is None:
            raise UsageError(f"{name} cannot be loaded as a Python module.")
        module = importlib.util.module_from_spec(spec)
        sys.modules[path.stem] = module
        spec.loader.exec_module(module)
        return module
    if os.getcwd() not in sys.path:
        sys.path.append(os.getcwd())
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as error:
        if error.name and name.startswith(error.name):
            raise UsageError(f"there is no worker module {name!r} on the Python path.") from error
        raise


def parse_flags(args: list[str]) -> dict[str, str]:
    """``--name value`` and ``--name=value`` pairs, in order; values are kept verbatim."""
    flags: dict[str, str] = {}
    rest = iter(args)
    for flag in rest:
        if not flag.startswith("--"):
            raise UsageError(f"{flag!r} is not a flag; flags look like --name value.")
        name, has_value, value = flag[2:].partition("=")
        if not has_value:
            try:
                value = next(rest)
            except StopIteration:
                raise UsageError(f"the flag --{name} needs a value.") from None
        flags[name] = value
    return flags


def _target_type(parameter: inspect.Parameter, hints: dict[str, Any]) -> Any:
    """The type a parameter's value should have: its annotation, else the type of its default, else None."""
    hint = hints.get(parameter.name, inspect.Parameter.empty)
    if hint is not inspect.Parameter.empty:
        origin = typing.get_origin(hint)
        if origin in (typing.Union, types.UnionType):
            concrete = [a for a in typing.get_args(hint) if a is not type(None)]
            hint = concrete[0] if len(concrete) == 1 else None
        if hint in (bool, int, float, str):
            return hint
    default = parameter.default
    if default is not inspect.Parameter.empty and default is not None and type(default) in (bool, int, float, str):
        return type(default)
    return None


def convert(name: str, text: str, target: Any) -> Any:
    """Reads the text of option ``name`` as ``target`` (bool, int, float, str or None for 'keep the text')."""
    if target is bool:
        lowered = text.strip().lower()
        if lowered in ("true", "1", "yes"):
            return True
        if lowered in ("false", "0", "no"):
            return False
        raise UsageError(f"option {name!r} must be true or false, not {text!r}.")
    if target is int:
        try:
            return int(text.strip())
        except ValueError:
            raise UsageError(f"option {name!r} must be a whole number, not {text!r}.") from None
    if target is float:
        try:
            return float(text.strip())
        except ValueError:
            raise UsageError(f"option {name!r} must be a number, not {text!r}.") from None
    return text


def build_kwargs(function: Callable[..., Any], flags: dict[str, str], env: dict[str, str]) -> dict[str, Any]:
    """The keyword arguments for ``function``: common flags under the names it uses, then its options.

    A common flag the function does not take is left out; an option it does not take is a usage error, unless
    the function has ``**kwargs``.
    """
    signature = inspect.signature(function)
    try:
        hints = typing.get_type_hints(function)
    except Exception:  # unresolvable annotations: fall back to the defaults' types
        hints = {}
    parameters = signature.parameters
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
    kwargs: dict[str, Any] = {}
    for flag, variable in COMMON_FLAGS.items():
        value = flags.get(flag) or env.get(variable) or None
        if value is None:
            continue
        for candidate in PARAMETER_NAMES[flag]:
            if candidate in parameters:
                kwargs[candidate] = convert(candidate, value, _target_type(parameters[candidate], hints))
                break
    for name, text in flags.items():
        if name in COMMON_FLAGS:
            continue
        if name == "progress":
            raise UsageError("'progress' is the adapter's callback, not an option.")
        parameter = parameters.get(name)
        if parameter is None or parameter.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            if not takes_any:
                known = [
                    p.name
                    for p in parameters.values()
                    if p.name != "progress"
                    and p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
                ]
                raise UsageError(
                    f"{function.__name__}() has no option {name!r}; it accepts: {', '.join(known) or 'none'}."
                )
            kwargs[name] = text
            continue
        kwargs[name] = convert(name, text, _target_type(parameter, hints))
    return kwargs


def count_line(value: Any) -> dict[str, Any]:
    """The protocol object for what ``count_pending`` returned."""
    if isinstance(value, bool):
        raise TypeError(f"count_pending must return a number or a dict, not {value!r}")
    if isinstance(value, int):
        return {"pending": value}
    if isinstance(value, dict) and ("pending" in value or "unmeasurable" in value):
        return value
    raise TypeError(f'count_pending must return an int, or {{"unmeasurable": reason, "done": n}}; got {value!r}')


def result_line(value: Any) -> dict[str, Any]:
    """The ``result`` object for what ``execute`` returned (None becomes an empty result)."""
    if value is None:
        return {}
    if isinstance(value, dict):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return {"processed": value}
    return {"value": value}


def _raise_stopped(signum: int, _frame: Any) -> None:
    raise Stopped(signum)


def main(argv: list[str] | None = None, env: dict[str, str] | None = None) -> int:
    """Runs one verb of one worker module; returns the exit status."""
    argv = sys.argv[1:] if argv is None else argv
    env = dict(os.environ) if env is None else env
    try:
        if len(argv) < 2:
            raise UsageError("a worker module and a verb are needed.")
        module_name, verb, rest = argv[0], argv[1], argv[2:]
        if verb not in VERBS:
            raise UsageError(f"{verb!r} is not a verb of the worker protocol; use describe, count-pending or run.")
        flags = parse_flags(rest)
        module = load_module(module_name)
        function = getattr(module, VERBS[verb], None)
        if verb == "describe" and function is None:
            emit({key: flags.get(key) or env.get(COMMON_FLAGS[key]) for key in ("engine", "preset", "model", "endpoint")})
            return 0
        if not callable(function):
            raise UsageError(f"the module {module_name!r} has no function {VERBS[verb]}().")
        kwargs = build_kwargs(function, flags, env)
    except UsageError as error:
        print(f"scrinalia_worker: {error}\n{USAGE}", file=sys.stderr)
        return 2
    except Exception:
        traceback.print_exc(file=sys.stderr)
        print(f"scrinalia_worker: the worker module {argv[0]!r} could not be loaded", file=sys.stderr)
        return 1

    name = module_name
    try:
        if verb == "describe":
            described = function(**kwargs)
            emit({"engine": None, "preset": None, "model": None, "endpoint": None, **dict(described or {})})
        elif verb == "count-pending":
            emit(count_line(function(**kwargs)))
        else:
            signal.signal(signal.SIGTERM, _raise_stopped)
            signal.signal(signal.SIGINT, _raise_stopped)
            if "progress" in inspect.signature(function).parameters:
                kwargs["progress"] = progress
            run_id = kwargs.get("run_id") or flags.get("run-id") or env.get("SCRINALIA_RUN_ID") or "none"
            print(f"{name}: run {run_id} starts", file=sys.stderr, flush=True)
            emit({"result": result_line(function(**kwargs))})
            print(f"{name}: run {run_id} done", file=sys.stderr, flush=True)
        return 0
    except Stopped as stop:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        print(f"{name}: {stop}; stopping cleanly", file=sys.stderr, flush=True)
        return 128 + stop.signum
    except Exception:
        traceback.print_exc(file=sys.stderr)
        print(f"{name}: {verb} failed", file=sys.stderr, flush=True)
        return 1


if __name__ == "__main__":
    sys.exit(main())
