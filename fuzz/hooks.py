"""Schemathesis hooks for fuzz/run-schemathesis (loaded through SCHEMATHESIS_HOOKS).

A purely random worker name answers 404 and a random option name 400, so most generated requests would stop at
the first check. These hooks steer a part of them to the catalogue that fuzz/run-schemathesis configures (the
probe workers, their engines, presets and options) while keeping the values random (any text, NUL and control
characters included, numbers at the edges, wrong types), so that fuzzed values get past the name checks and reach
the validation, the database and, for runs, the daemon and a worker's arguments. The rest stays as generated.
"""

import os

import schemathesis
from hypothesis import strategies as st

# A file that only a shell interpreting a fuzzed value would create; fuzz/run-schemathesis fails if it exists.
CANARY = os.environ.get("FUZZ_CANARY", "/tmp/scrinalia-fuzz-pwned")
# Pieces of SQL, shell and format-string syntax, control characters and argument look-alikes, mixed into text.
HOSTILE = [
    "'; drop table worker_runs; --",
    '" or 1=1 --',
    "\\",
    "\\'",
    f"$(touch {CANARY})",
    f"`touch {CANARY}`",
    f"; touch {CANARY}",
    f"| touch {CANARY}",
    "| cat /etc/passwd",
    "\n",
    "\r\n",
    "\x00",
    "--crash",
    "--exit_code=3",
    "%s%n%x",
    "{{7*7}}",
    "../../etc/passwd",
    "\u202e",
    "\U0001f4a9",
]
TEXT = st.one_of(
    st.text(),
    st.sampled_from(HOSTILE),
    st.lists(st.one_of(st.sampled_from(HOSTILE), st.text(max_size=4)), min_size=1, max_size=5).map("".join),
)

WORKERS = ["probe-1", "probe-2", "probe-3"]
RESOURCES = ["model-server"]
ENGINES = ["local", "spacy"]
PRESETS = ["fast", "big", "small"]
# Bounded where a huge value would only make a probe print for its whole timeout (output_lines, progress_steps).
OPTIONS = {
    "duration_ms": st.one_of(st.integers(-5, 3000), st.sampled_from([2**63 - 1, 2**63, 2**64 - 1, -(2**63)])),
    "exit_code": st.one_of(st.integers(-300, 300), st.sampled_from([2**31, -(2**31) - 1, 2**63 - 1])),
    "crash": st.booleans(),
    "ignore_sigterm": st.booleans(),
    "progress_steps": st.integers(-5, 50),
    "output_lines": st.integers(-5, 50),
    "note": TEXT,
}


def _value(name):
    """The option's own kind of value most of the time, any JSON value otherwise."""
    anything = st.one_of(
        st.none(),
        st.booleans(),
        TEXT,
        st.floats(allow_nan=False, allow_infinity=False),
        st.lists(st.text(), max_size=3),
        st.dictionaries(st.text(), st.text(), max_size=2),
    )
    return st.one_of(OPTIONS[name], OPTIONS[name], anything)


def _options():
    return st.lists(st.sampled_from(list(OPTIONS)), max_size=4, unique=True).flatmap(
        lambda names: st.fixed_dictionaries({name: _value(name) for name in names})
    )


def _name_or_text(names):
    return st.one_of(st.sampled_from(names), TEXT, st.none())


@schemathesis.hook
def flatmap_path_parameters(context, path_parameters):
    if not isinstance(path_parameters, dict) or "name" not in path_parameters:
        return st.just(path_parameters)
    operation = context.operation
    names = RESOURCES if operation is not None and operation.path.startswith("/api/resources/") else WORKERS
    real = st.sampled_from(names).map(lambda name: {**path_parameters, "name": name})
    return st.one_of(st.just(path_parameters), real, real)


@schemathesis.hook
def flatmap_body(context, body):
    operation = context.operation
    if operation is None or not isinstance(body, dict):
        return st.just(body)
    fields = {
        "engine": _name_or_text(ENGINES),
        "preset": _name_or_text(PRESETS),
        "options": _options(),
    }
    if (operation.method.upper(), operation.path) == ("PUT", "/api/workers/{name}/override"):
        # A reason of any text, often hostile (a null one is refused before anything else).
        steered = st.fixed_dictionaries({"reason": TEXT}, optional=fields)
    elif (operation.method.upper(), operation.path) == ("PUT", "/api/resources/{name}"):
        # A capacity at and past its edges (0, the maximum, beyond u32), null (back to the catalogue's), or absent.
        capacity = st.one_of(st.none(), st.integers(-2, 12000), st.sampled_from([10000, 10001, 2**31, 2**32]))
        steered = st.fixed_dictionaries({"reason": TEXT}, optional={"capacity": capacity})
    elif (operation.method.upper(), operation.path) == ("POST", "/api/workers/{name}/runs"):
        steered = st.fixed_dictionaries({}, optional=fields)
    else:
        return st.just(body)
    steered = steered.map(lambda extra: {**body, **extra})
    return st.one_of(st.just(body), steered, steered)


@schemathesis.hook
def flatmap_query(context, query):
    operation = context.operation
    if operation is None or not isinstance(query, dict) or "reason" not in query:
        return st.just(query)
    # DELETE …/override?reason=: any text, NUL and control characters included.
    return st.one_of(st.just(query), TEXT.map(lambda reason: {**query, "reason": reason}))
