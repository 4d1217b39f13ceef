"""Items for the Scrinalia worker adapter (docs/worker-protocol.md, "Items"): the ``item`` callback a worker reports
each document's outcome with, the shard of an item, and the inputs the daemon gives a run in its environment (the
scope in ``SCRINALIA_ITEMS_ONLY``, the quarantined items in ``SCRINALIA_ITEMS_SKIP``, the shard in
``SCRINALIA_SHARD``), read into ``execute``'s ``only``, ``skip`` and ``shard`` parameters. Also the adapter's usage
errors, which both modules raise. Standard library only.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from typing import Any

#: The longest item id the daemon keeps, in bytes (UTF-8).
MAX_ITEM_ID_BYTES = 512

#: What may have happened to an item.
ITEM_OUTCOMES = frozenset(("succeeded", "failed", "skipped"))

#: An item's class: a short machine word, which the daemon counts by (used with ``fullmatch``, so that a trailing
#: newline cannot slip through as ``$`` would let it).
ITEM_CLASS = re.compile(r"[a-z][a-z0-9_]{0,31}")

#: ``SCRINALIA_SHARD``: ``i/N``, plain decimal digits only (``int()`` would also take " 1", "+1" and "1_0").
SHARD_PATTERN = re.compile(r"([0-9]+)/([0-9]+)")

# One encoder made once: ``json.dumps`` with options builds a new encoder on every call, too slow for a worker
# that reports a million items.
_encode_json = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode



class UsageError(Exception):
    """A mistake in the command line or the module; exit status 2."""


class InputError(UsageError):
    """An input the daemon gives in the environment cannot be read or used; exit status 2, without the usage line
    (the command line itself was right)."""


def item(id: str, outcome: str, error: Any = None, cls: str | None = None) -> None:
    """The callback handed to ``execute``: prints ``{"item": {"id": id, "outcome": outcome, "error": error,
    "class": cls}}`` (``error`` and ``class`` left out when None) as one compact line, flushed.

    ``id`` is a non-empty string of at most 512 bytes in UTF-8 (``str(document.id)`` for a number); ``outcome`` is
    ``"succeeded"``, ``"failed"`` or ``"skipped"``; ``cls`` is a short machine word matching
    ``^[a-z][a-z0-9_]{0,31}$`` (``"ocr_empty"``) that the daemon counts failures by; ``error`` is a sentence (any
    other value is written as its ``str``, so an exception may be passed as it is). Anything else raises
    ``ValueError`` with a sentence, and nothing is printed. An error over 2,048 bytes is printed whole: the daemon
    cuts it (with "…") and counts it as cut.

    Cheap enough to call a million times: no inspection, one encoder, one write.
    """
    if not isinstance(id, str) or not id:
        raise ValueError(f"An item id must be a non-empty string (str(document.id) for a number), not {id!r}.")
    # A character is at most four bytes of UTF-8, so only an id longer than 128 characters needs measuring.
    if len(id) > MAX_ITEM_ID_BYTES // 4 and len(id.encode("utf-8", "surrogatepass")) > MAX_ITEM_ID_BYTES:
        raise ValueError(
            f"The item id {id[:40]!r}… is {len(id.encode('utf-8', 'surrogatepass'))} bytes in UTF-8, more than the "
            f"{MAX_ITEM_ID_BYTES} bytes the daemon keeps; report a shorter key of the item."
        )
    if not isinstance(outcome, str) or outcome not in ITEM_OUTCOMES:
        raise ValueError(
            f"The outcome of item {id!r} is {outcome!r}; it must be \"succeeded\", \"failed\" or \"skipped\"."
        )
    if cls is not None and (not isinstance(cls, str) or ITEM_CLASS.fullmatch(cls) is None):
        raise ValueError(
            f"The class of item {id!r} is {cls!r}; a class is a lowercase word of at most 32 letters, digits and "
            "underscores, starting with a letter (like ocr_empty)."
        )
    # The outcome and the class were checked above, so they need no escaping.
    line = '{"item":{"id":' + _encode_json(id) + ',"outcome":"' + outcome + '"'
    if error is not None:
        line += ',"error":' + _encode_json(error if isinstance(error, str) else str(error))
    if cls is not None:
        line += ',"class":"' + cls + '"'
    sys.stdout.write(line + "}}\n")
    sys.stdout.flush()


def shard_of(item_id: str, n: int) -> int:
    """The shard (0 to ``n`` - 1) that the item ``item_id`` belongs to among ``n``: the first eight bytes of the
    SHA-256 of its id in UTF-8, read as a big-endian number, modulo ``n``. Every process on every machine computes
    the same shard; never use Python's ``hash()`` for this, which is salted per process (``PYTHONHASHSEED``), so
    two shards of one run would each skip and each process different items."""
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"The number of shards must be a whole number of at least 1, not {n!r}.")
    return int.from_bytes(hashlib.sha256(item_id.encode("utf-8")).digest()[:8], "big") % n


def read_ids(variable: str, env: dict[str, str]) -> frozenset[str] | None:
    """The item ids in the file named by the environment variable ``variable``, one a line: a line's ending
    (``\\n`` or ``\\r\\n``) is removed and nothing else, so an id keeps its spaces; empty lines are ignored. None when
    the variable is unset or empty; ``InputError`` naming the variable and the path when the file cannot be read."""
    path = env.get(variable) or None
    if path is None:
        return None
    try:
        # newline="" keeps "\r" as it is, so only a "\r" right before "\n" is taken for a line ending.
        with open(path, encoding="utf-8", newline="") as file:
            text = file.read()
    except OSError as error:
        reason = error.strerror or error
        raise InputError(f"{variable} names the file {path}, which cannot be read ({reason}).") from None
    except UnicodeDecodeError:
        raise InputError(f"{variable} names the file {path}, which cannot be read: it is not UTF-8 text.") from None
    lines = (line.removesuffix("\r") for line in text.split("\n"))
    return frozenset(line for line in lines if line)


def read_shard(env: dict[str, str]) -> tuple[int, int] | None:
    """``(i, n)`` from ``SCRINALIA_SHARD=i/n`` (0 <= i < n); None when unset or empty; ``InputError`` otherwise."""
    text = env.get("SCRINALIA_SHARD") or None
    if text is None:
        return None
    match = SHARD_PATTERN.fullmatch(text)
    if match is None or int(match[1]) >= int(match[2]):
        raise InputError(
            f"SCRINALIA_SHARD is {text!r}; it must be i/N with whole numbers 0 <= i < N (0/4 is the first of four "
            "shards), so this run's share of the items cannot be known."
        )
    return int(match[1]), int(match[2])


def plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def item_inputs(env: dict[str, str], parameters: Any) -> tuple[dict[str, Any], str | None]:
    """The run's ``only``, ``skip`` and ``shard`` arguments, for the parameters of ``execute`` that take them, and
    a warning to print, if any. Refuses (``InputError``) a scope or one of several shards that ``execute`` cannot
    take, since running it would process every item; a skip list it cannot take only warns, since processing a
    quarantined item again costs time and repeats a failure the operator already sees, but changes no result."""
    only = read_ids("SCRINALIA_ITEMS_ONLY", env)
    skip = read_ids("SCRINALIA_ITEMS_SKIP", env) or frozenset()
    shard = read_shard(env)
    if only is not None and "only" not in parameters:
        raise InputError(
            f"This run is scoped to {plural(len(only), 'item')} (SCRINALIA_ITEMS_ONLY), but execute() has no "
            "parameter `only` and so cannot take a scope: running it would process everything. Not running it."
        )
    if shard is not None and shard[1] > 1 and "shard" not in parameters:
        raise InputError(
            f"This run is shard {shard[0]} of {shard[1]} (SCRINALIA_SHARD={shard[0]}/{shard[1]}), but execute() has "
            "no parameter `shard` and so cannot take its share: running it would process every item in every "
            "shard. Not running it."
        )
    warning = None
    if skip and "skip" not in parameters:
        warning = (
            f"warning: this run was asked to skip {plural(len(skip), 'quarantined item')} (SCRINALIA_ITEMS_SKIP), "
            "but execute() has no parameter `skip`, so it will not skip them; running anyway."
        )
    given = {"only": only, "skip": skip, "shard": shard}
    return {name: value for name, value in given.items() if name in parameters}, warning
