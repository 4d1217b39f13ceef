"""Run a Python worker module behind the Scrinalia worker protocol (docs/worker-protocol.md).

A worker module defines plain functions, as the archive's workers already do::

    def execute(db, batch_size: int = 50, engine_name: str = "ollama", preset: str = "fast", progress=None,
                checkpoint=None, resume_from=None): ...
    def count_pending(db, batch_size: int = 50, **_): ...   # an int, or {"unmeasurable": "why", "done": n}
    def describe_config(db, engine_name: str = "ollama", preset: str = "fast", **_): ...   # a dict
    def check(db, **_): ...                                   # True, or a sentence saying what is missing

and the catalogue declares it as::

    command = ["python3", "adapters/python/scrinalia_worker.py", "--session", "archive.db:SessionLocal",
               "--registries", "archive.engines:REGISTRIES", "archive.workers.tag_suggest"]

The daemon appends a verb and flags, one argument each (``run --run-id=ID --engine=E --preset=P --model=M
--endpoint=URL --batch_size=50``; ``--name value`` is read too, by hand). This adapter converts each value to the type the function's annotations or defaults suggest,
passes it by name, gives ``execute`` a ``progress(done, total, message=None)`` callback when it has a parameter
of that name, prints the return value as a protocol line, turns SIGTERM into a clean stop (the ``Stopped``
exception, which ``except Exception`` does not catch) and reports errors with a traceback on stderr.

Checkpoints and resume: ``execute`` gets a ``checkpoint(state)`` callback when it has a parameter of that name; it
commits the verb's session (if any) and prints ``{"checkpoint": state}`` (at most 64 KiB of JSON, else
``ValueError``). When the daemon resumes an earlier run, ``execute`` gets that run's last checkpoint, decoded from
``SCRINALIA_CHECKPOINT``, as ``resume_from``; when it restarts one from nothing, the earlier run's id (from
``SCRINALIA_RESTART_OF``) as ``restart_of``. Each is None otherwise, and passed only to a parameter of its name.
A worker that takes ``checkpoint`` declares the ``yield`` capability: when the daemon asks it to yield (SIGUSR1,
handled during every run), its next ``checkpoint`` call commits and prints as always, then raises ``Yielded``
(a ``BaseException``), which ends the run with status 75 (``scrinalia_checkpoints.py``).

Items (what happened to each document): ``execute`` gets an ``item(id, outcome, error=None, cls=None)`` callback
when it has a parameter named ``item``; it prints ``{"item": {"id": …, "outcome": …, "error": …, "class": …}}``
(``outcome`` one of succeeded, failed, skipped) and raises ``ValueError`` on an id, outcome or class the daemon
would refuse. It gets ``only``, a frozenset of the ids a scoped run must process (read from the file named by
``SCRINALIA_ITEMS_ONLY``; None when the run is not scoped), ``skip``, a frozenset of quarantined ids it must not
process (``SCRINALIA_ITEMS_SKIP``; empty when there are none), and ``shard``, ``(i, n)`` when the run is shard
``i`` of ``n`` (``SCRINALIA_SHARD=i/n``; None otherwise), each only for a parameter of that name. A scoped run of
a worker without ``only``, or a run of one of several shards of a worker without ``shard``, is refused (exit 2):
it would process everything. A worker without ``skip`` is warned on stderr and runs. ``shard_of(id, n)`` is the
shard an item belongs to. ``describe`` reports these as ``"capabilities"``.

Usage (what the run cost, in the worker's own terms): ``execute`` gets a ``usage`` callback (a ``Usage``) when it
has a parameter of that name: ``usage(tokens_in=…, tokens_out=…, gpu_seconds=…, cost=…, currency=…)`` sets the
run's totals so far, ``usage.add(…)`` adds one batch's figures to them; either prints the totals as
``{"usage": {…}}``, the line the daemon keeps the last of. A bad figure raises ``ValueError``.

With ``--session MODULE:CALLABLE``, a function whose first parameter is ``db`` (or ``session``) gets a session of
its own for the verb: the callable returns a session or a context manager yielding one (a SQLAlchemy
``sessionmaker`` works as it is); the session is committed when the function returns, rolled back when it raises
or is stopped, and always closed.

``describe`` also reports what the code declares (``"declared"``): the options of ``execute`` with their types,
defaults, choices (``Literal``) and bounds (``Annotated`` metadata with ``ge``/``le``/``gt``/``lt``, as
annotated-types and pydantic write them), its engine and preset defaults, and each registry's ``PRESETS`` (with
``--registries MODULE:ATTR``, a mapping of engine name to registry), without running the worker.

Exit status: 0 done; 1 the worker raised; 2 a usage error (unknown module, verb or option, a bad value, or an
input of the environment that cannot be read or used); 75 yielded at a checkpoint when asked (SIGUSR1); 143
stopped by SIGTERM (130 by SIGINT). Standard library
only; Python 3.11 or newer.
"""

from __future__ import annotations

import contextlib
import datetime
import importlib
import importlib.util
import inspect
import json
import os
import signal
import sys
import traceback
import types
from pathlib import Path
from typing import Any, Callable, Iterator

from scrinalia_items import (  # noqa: F401 (re-exported: a worker module may import them from here)
    ITEM_CLASS,
    ITEM_OUTCOMES,
    MAX_ITEM_ID_BYTES,
    SHARD_PATTERN,
    InputError,
    UsageError,
    item,
    item_inputs,
    plural,
    read_ids,
    read_shard,
    shard_of,
)
from scrinalia_checkpoints import (  # noqa: F401 (re-exported: a worker module may import them from here)
    MAX_CHECKPOINT_BYTES,
    YIELDED_EXIT_STATUS,
    YieldRequest,
    Yielded,
    checkpoint_callback,
    checkpoint_text,
    continuation,
)
from scrinalia_usage import Usage  # noqa: F401 (re-exported: the adapter passes it as ``usage``)
from scrinalia_signatures import (
    ADAPTER_PARAMETERS,
    PARAMETER_NAMES,
    capabilities,
    declared,
    type_hints,
    option_parameters,
    target_type,
)

USAGE = (
    "usage: scrinalia_worker.py [--session MODULE:CALLABLE] [--registries MODULE:ATTR] <module> "
    "describe|count-pending|check|run [--run-id ID] [--engine E] [--preset P] [--model M] [--endpoint URL] "
    "[--<option>=<value>]..."
)

#: Flags every worker receives besides its options, with their environment fallbacks.
COMMON_FLAGS = {
    "run-id": "SCRINALIA_RUN_ID",
    "engine": "SCRINALIA_ENGINE",
    "preset": "SCRINALIA_PRESET",
    "model": "SCRINALIA_MODEL",
    "endpoint": "SCRINALIA_ENDPOINT",
}

VERBS = {"describe": "describe_config", "count-pending": "count_pending", "check": "check", "run": "execute"}

#: The names the first parameter of a function that wants a session has.
SESSION_PARAMETERS = ("db", "session")

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


def load_module(name: str, what: str = "worker module") -> types.ModuleType:
    """Imports a module by dotted name, or from a path ending in ``.py``; ``what`` names it in errors."""
    if name.endswith(".py"):
        path = Path(name)
        if not path.is_file():
            raise UsageError(f"the {what} file {name} does not exist.")
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
            raise UsageError(f"there is no {what} {name!r} on the Python path.") from error
        raise


def load_attribute(reference: str, flag: str) -> Any:
    """The attribute named by ``MODULE:ATTR`` (for ``--session`` and ``--registries``)."""
    module_name, colon, attribute = reference.partition(":")
    if not colon or not module_name or not attribute:
        raise UsageError(f"{flag} must be MODULE:ATTRIBUTE, not {reference!r}.")
    value: Any = load_module(module_name, f"{flag} module")
    for part in attribute.split("."):
        if not hasattr(value, part):
            raise UsageError(f"{flag} {reference!r}: {module_name} has no attribute {attribute!r}.")
        value = getattr(value, part)
    return value


def parse_flags(args: list[str]) -> dict[str, str]:
    """``--name=value`` and ``--name value`` pairs, in order; values are kept verbatim, so a value may start with
    ``-`` (``--threshold=-1``, or ``--threshold -1``: the word after a bare flag is always its value)."""
    flags: dict[str, str] = {}
    rest = iter(args)
    for flag in rest:
        if not flag.startswith("--"):
            raise UsageError(f"{flag!r} is not a flag; flags look like --name=value (or --name value).")
        name, has_value, value = flag[2:].partition("=")
        if not has_value:
            try:
                value = next(rest)
            except StopIteration:
                raise UsageError(f"the flag --{name} needs a value.") from None
        flags[name] = value
    return flags


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


def wants_session(function: Callable[..., Any]) -> bool:
    """Whether ``function``'s first parameter is the session (``db`` or ``session``)."""
    first = next(iter(inspect.signature(function).parameters.values()), None)
    return first is not None and first.name in SESSION_PARAMETERS


def build_kwargs(
    function: Callable[..., Any], flags: dict[str, str], env: dict[str, str], strict: bool = True
) -> dict[str, Any]:
    """The keyword arguments for ``function``: common flags under the names it uses, then its options.

    A common flag the function does not take is left out; an option it does not take is a usage error (left out
    too when not ``strict``), unless the function has ``**kwargs``. The session parameter is the adapter's, never
    an option.
    """
    hints = type_hints(function)
    parameters = dict(inspect.signature(function).parameters)
    if wants_session(function):
        del parameters[next(iter(parameters))]
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
    kwargs: dict[str, Any] = {}
    for flag, variable in COMMON_FLAGS.items():
        value = flags.get(flag) or env.get(variable) or None
        if value is None:
            continue
        for candidate in PARAMETER_NAMES[flag]:
            if candidate in parameters:
                kwargs[candidate] = convert(candidate, value, target_type(parameters[candidate], hints))
                break
    for name, text in flags.items():
        if name in COMMON_FLAGS:
            continue
        if name in (*ADAPTER_PARAMETERS, *SESSION_PARAMETERS):
            raise UsageError(f"{name!r} is the adapter's to give, not an option.")
        parameter = parameters.get(name)
        if parameter is None or parameter.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            if not takes_any and not strict:
                continue
            if not takes_any:
                known = [p.name for p in option_parameters(parameters.values())]
                raise UsageError(
                    f"{function.__name__}() has no option {name!r}; it accepts: {', '.join(known) or 'none'}."
                )
            kwargs[name] = text
            continue
        kwargs[name] = convert(name, text, target_type(parameter, hints))
    return kwargs


@contextlib.contextmanager
def open_session(factory: Callable[[], Any]) -> Iterator[Any]:
    """One session from ``factory``: committed when the block ends normally, rolled back when it raises (a
    ``Stopped`` included), always closed. ``factory()`` returns a session, or a context manager yielding one."""
    made = factory()
    is_session = hasattr(made, "commit") and hasattr(made, "rollback")
    manager = None if is_session or not hasattr(made, "__enter__") else made
    session = manager.__enter__() if manager is not None else made
    try:
        yield session
        session.commit()
    except BaseException:
        session.rollback()
        raise
    finally:
        if hasattr(session, "close"):
            session.close()
        if manager is not None:
            manager.__exit__(None, None, None)


def call(
    function: Callable[..., Any],
    kwargs: dict[str, Any],
    sessions: Callable[[], Any] | None,
    checkpoint: bool = False,
    yielding: YieldRequest | None = None,
) -> Any:
    """Calls ``function`` with ``kwargs``, and with a session of its own first when it wants one; with
    ``checkpoint``, also with a ``checkpoint`` callback that commits that session (and raises ``Yielded`` after
    it once ``yielding`` is asked)."""
    if not wants_session(function):
        return function(**kwargs, **({"checkpoint": checkpoint_callback(None, yielding)} if checkpoint else {}))
    if sessions is None:
        raise UsageError(f"{function.__name__}() takes a database session first: give the adapter --session.")
    with open_session(sessions) as session:
        given = {"checkpoint": checkpoint_callback(session, yielding)} if checkpoint else {}
        return function(session, **kwargs, **given)


def count_line(value: Any) -> dict[str, Any]:
    """The protocol object for what ``count_pending`` returned."""
    if isinstance(value, bool):
        raise TypeError(f"count_pending must return a number or a dict, not {value!r}")
    if isinstance(value, int):
        return {"pending": value}
    if isinstance(value, dict) and ("pending" in value or "unmeasurable" in value):
        line = dict(value)
        # The oldest pending document's arrival, for freshness targets: a datetime (naive means UTC) or RFC 3339.
        oldest = line.get("oldest_pending_at")
        if isinstance(oldest, datetime.datetime):
            if oldest.tzinfo is None:
                oldest = oldest.replace(tzinfo=datetime.timezone.utc)
            line["oldest_pending_at"] = oldest.astimezone(datetime.timezone.utc).isoformat().replace("+00:00", "Z")
        elif oldest is None:
            line.pop("oldest_pending_at", None)
        return line
    raise TypeError(
        'count_pending must return an int, {"pending": n, "oldest_pending_at": datetime}, or '
        f'{{"unmeasurable": reason, "done": n}}; got {value!r}'
    )


def check_line(value: Any) -> dict[str, Any]:
    """The protocol object for what ``check`` returned: True or None is ready; False, a sentence or a dict with
    ``ready`` and ``reason`` is not (or is, as the dict says)."""
    if value is None or value is True:
        return {"ready": True}
    if value is False:
        return {"ready": False, "reason": "the worker's check said it is not ready"}
    if isinstance(value, str):
        return {"ready": False, "reason": value}
    if isinstance(value, dict) and "ready" in value:
        return {"ready": bool(value["ready"]), "reason": value.get("reason")}
    raise TypeError(f"check must return True, a sentence saying what is missing, or a dict; got {value!r}")


def result_line(value: Any) -> dict[str, Any]:
    """The ``result`` object for what ``execute`` returned (None becomes an empty result)."""
    if value is None:
        return {}
    if isinstance(value, dict):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return {"processed": value}
    return {"value": value}


def config_line(described: Any) -> dict[str, Any]:
    """The engine configuration ``describe_config`` returned, as the protocol reports it (``source``, where the
    engine comes from when it is not chosen here, included)."""
    return {"engine": None, "preset": None, "model": None, "endpoint": None, **dict(described or {})}


def _raise_stopped(signum: int, _frame: Any) -> None:
    raise Stopped(signum)


def parse_adapter_options(argv: list[str]) -> tuple[dict[str, str], list[str]]:
    """The adapter's own options (``--session``, ``--registries``), which come before the worker module."""
    options: dict[str, str] = {}
    while argv:
        name, has_value, value = argv[0].partition("=")
        if name not in ("--session", "--registries"):
            break
        if not has_value:
            if len(argv) < 2:
                raise UsageError(f"{name} needs a MODULE:ATTRIBUTE.")
            value, argv = argv[1], argv[1:]
        options[name[2:]] = value
        argv = argv[1:]
    return options, argv


def main(argv: list[str] | None = None, env: dict[str, str] | None = None) -> int:
    """Runs one verb of one worker module; returns the exit status."""
    argv = sys.argv[1:] if argv is None else argv
    env = dict(os.environ) if env is None else env
    try:
        adapter_options, argv = parse_adapter_options(argv)
        if len(argv) < 2:
            raise UsageError("a worker module and a verb are needed.")
        module_name, verb, rest = argv[0], argv[1], argv[2:]
        if verb not in VERBS:
            raise UsageError(
                f"{verb!r} is not a verb of the worker protocol; use describe, count-pending, check or run."
            )
        flags = parse_flags(rest)
        continues = continuation(env) if verb == "run" else {}
        items: dict[str, Any] = {}
        items_warning = None
        sessions = load_attribute(adapter_options["session"], "--session") if "session" in adapter_options else None
        registries = (
            load_attribute(adapter_options["registries"], "--registries") if "registries" in adapter_options else None
        )
        module = load_module(module_name)
        function = getattr(module, VERBS[verb], None)
        if function is not None and not callable(function):
            raise UsageError(f"{module_name}.{VERBS[verb]} is not a function.")
        if function is None and verb not in ("describe", "check"):
            raise UsageError(f"the module {module_name!r} has no function {VERBS[verb]}().")
        kwargs = build_kwargs(function, flags, env) if function is not None else {}
        if verb == "run":
            items, items_warning = item_inputs(env, inspect.signature(function).parameters)
        describe = getattr(module, "describe_config", None)
        # The run's configuration line: `describe_config` gets the flags it takes, and no others.
        describe_kwargs = build_kwargs(describe, flags, env, strict=False) if callable(describe) else {}
    except UsageError as error:
        usage = "" if isinstance(error, InputError) else f"\n{USAGE}"
        print(f"scrinalia_worker: {error}{usage}", file=sys.stderr)
        return 2
    except Exception:
        traceback.print_exc(file=sys.stderr)
        print(f"scrinalia_worker: the worker module {argv[0]!r} could not be loaded", file=sys.stderr)
        return 1

    name = module_name
    try:
        if verb == "describe":
            if function is None:
                described = {key: flags.get(key) or env.get(COMMON_FLAGS[key]) for key in ("engine", "preset", "model",
                                                                                            "endpoint")}
            else:
                described = call(function, kwargs, sessions)
            emit({
                **config_line(described),
                "declared": declared(module, registries),
                "capabilities": capabilities(module),
            })
        elif verb == "count-pending":
            emit(count_line(call(function, kwargs, sessions)))
        elif verb == "check":
            emit(check_line(call(function, kwargs, sessions) if function is not None else True))
        else:
            signal.signal(signal.SIGTERM, _raise_stopped)
            signal.signal(signal.SIGINT, _raise_stopped)
            # Before the first stdout line: the daemon asks for a yield only after it (docs/worker-protocol.md).
            yielding = YieldRequest()
            yielding.install()
            if callable(describe):
                # What this run really uses, as the worker sees it now (an engine chosen elsewhere included).
                emit({"config": config_line(call(describe, describe_kwargs, sessions))})
            parameters = inspect.signature(function).parameters
            if "progress" in parameters:
                kwargs["progress"] = progress
            if "item" in parameters:
                kwargs["item"] = item
            if "usage" in parameters:
                kwargs["usage"] = Usage()
            kwargs.update({key: value for key, value in continues.items() if key in parameters})
            kwargs.update(items)
            if items_warning is not None:
                print(f"scrinalia_worker: {items_warning}", file=sys.stderr, flush=True)
            run_id = kwargs.get("run_id") or flags.get("run-id") or env.get("SCRINALIA_RUN_ID") or "none"
            print(f"{name}: run {run_id} starts", file=sys.stderr, flush=True)
            emit({"result": result_line(call(function, kwargs, sessions, "checkpoint" in parameters, yielding))})
            print(f"{name}: run {run_id} done", file=sys.stderr, flush=True)
        return 0
    except Yielded as yielded:
        print(f"{name}: {yielded}; a resume goes on from that checkpoint", file=sys.stderr, flush=True)
        return YIELDED_EXIT_STATUS
    except Stopped as stop:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        print(f"{name}: {stop}; stopping cleanly", file=sys.stderr, flush=True)
        return 128 + stop.signum
    except UsageError as error:
        print(f"scrinalia_worker: {error}\n{USAGE}", file=sys.stderr)
        return 2
    except Exception:
        traceback.print_exc(file=sys.stderr)
        print(f"{name}: {verb} failed", file=sys.stderr, flush=True)
        return 1


if __name__ == "__main__":
    sys.exit(main())
