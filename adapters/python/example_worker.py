"""An example worker for the Python adapter: it "reviews" twenty numbered items, keeping what it did in a JSON
state file, so that ``count_pending`` falls after ``execute``. Run it through the adapter::

    python3 adapters/python/scrinalia_worker.py example_worker count-pending --folder /tmp/example
    python3 adapters/python/scrinalia_worker.py example_worker run --run-id r1 --folder /tmp/example --delay_ms 50

Its functions have the shape of the archive's workers: plain keyword arguments with defaults, the engine as
``engine_name`` and ``preset``, and a ``progress`` callback the adapter provides. It reports each item it reviews
(``item``), reviews only the items of a scoped run (``only``) and skips quarantined ones (``skip``); an item's id
is ``item-<n>``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Callable, FrozenSet, Optional

#: Preset → model, as a worker's registry declares them.
PRESETS = {"fast": "llama3.2:1b", "balanced": "qwen2.5:7b", "thorough": "qwen2.5:14b"}

#: How many items the example has to review.
ITEMS = 20


def _state_file(folder: str) -> Path:
    return Path(folder) / "example-worker.json"


def _reviewed(folder: str) -> list[int]:
    try:
        return json.loads(_state_file(folder).read_text())["reviewed"]
    except FileNotFoundError:
        return []


def _save(folder: str, reviewed: list[int]) -> None:
    path = _state_file(folder)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_text(json.dumps({"reviewed": sorted(reviewed)}))
    temporary.replace(path)


def describe_config(engine_name: str = "ollama", preset: str = "fast", model: Optional[str] = None,
                    endpoint: Optional[str] = None, **_options) -> dict:
    """The engine configuration ``execute`` would use, without starting anything."""
    return {
        "engine": engine_name,
        "preset": preset,
        "model": model or PRESETS.get(preset),
        "endpoint": endpoint or "http://127.0.0.1:11434",
    }


def item_id(number: int) -> str:
    """The id an item is reported under, and named by in the scope and skip files."""
    return f"item-{number}"


def count_pending(folder: str = "data/example-worker", **_options) -> int:
    """How many items are not reviewed yet."""
    return ITEMS - len(_reviewed(folder))


def execute(batch_size: int = 5, delay_ms: int = 20, folder: str = "data/example-worker", fail: bool = False,
            engine_name: str = "ollama", preset: str = "fast", run_id: Optional[str] = None,
            progress: Optional[Callable[..., None]] = None, item: Optional[Callable[..., None]] = None,
            only: Optional[FrozenSet[str]] = None, skip: FrozenSet[str] = frozenset()) -> dict:
    """Reviews every pending item (only those of ``only`` in a scoped run, none of ``skip``), ``batch_size`` at a
    time, saving after each batch and when stopped."""
    reviewed = _reviewed(folder)
    pending = [n for n in range(1, ITEMS + 1) if n not in reviewed and (only is None or item_id(n) in only)]
    if item is not None:
        for number in pending:
            if item_id(number) in skip:
                item(item_id(number), "skipped", cls="quarantined")
    pending = [n for n in pending if item_id(n) not in skip]
    model = PRESETS.get(preset)
    done = 0
    step = max(1, batch_size)
    try:
        for start in range(0, len(pending), step):
            for number in pending[start:start + step]:
                if fail and number == pending[-1]:
                    raise RuntimeError(f"item {number} cannot be reviewed (fail=true)")
                time.sleep(delay_ms / 1000)
                reviewed.append(number)
                done += 1
                print(f"reviewed item {number} with {engine_name}/{model}", file=sys.stderr, flush=True)
            _save(folder, reviewed)
            if progress is not None:
                progress(done, len(pending), f"batch {start // step + 1}")
            if item is not None:
                # After the batch is saved: an item reported as succeeded is one that is kept.
                for number in pending[start:start + step]:
                    item(item_id(number), "succeeded")
    finally:
        # On SIGTERM the adapter raises Stopped here: what was reviewed so far is kept.
        _save(folder, reviewed)
    return {"processed": done, "failed": 0, "run_id": run_id}
