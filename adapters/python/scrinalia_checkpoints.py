"""The adapter's side of checkpoints, resume and yielding (docs/worker-protocol.md, "Checkpoints, resume and
restart" and "Yielding"): the ``checkpoint(state)`` callback handed to ``execute``, what a run continues (from
``SCRINALIA_CHECKPOINT`` and ``SCRINALIA_RESTART_OF``), and the yield the daemon asks for with SIGUSR1, which the
next checkpoint honours by raising ``Yielded`` once the checkpoint is committed and printed.
The adapter (``scrinalia_worker.py``) re-exports all of it. Standard library only.
"""

from __future__ import annotations

import json
import signal
import sys
from typing import Any, Callable

from scrinalia_items import UsageError

#: The largest checkpoint the daemon keeps: the JSON text of its value, in bytes (UTF-8).
MAX_CHECKPOINT_BYTES = 64 * 1024

#: The exit status of a run that yielded when asked: EX_TEMPFAIL, "try again later" (the daemon resumes it).
YIELDED_EXIT_STATUS = 75


class Yielded(BaseException):
    """Raised by the ``checkpoint`` callback, after the checkpoint is committed and printed, when the daemon asked
    the run to yield (SIGUSR1). Like ``Stopped``, not an ``Exception``: a worker's ``except Exception`` must not
    keep the run going; the adapter ends it with ``YIELDED_EXIT_STATUS``."""

    def __init__(self) -> None:
        super().__init__("yielded at a checkpoint, as asked (SIGUSR1)")


class YieldRequest:
    """Whether SIGUSR1 asked this run to yield. The handler only sets a flag: the run goes on to the end of what
    it is doing, and the next checkpoint (where its work is durable) is where it stops."""

    def __init__(self) -> None:
        self.asked = False

    def ask(self, _signum: int = signal.SIGUSR1, _frame: Any = None) -> None:
        """The SIGUSR1 handler."""
        self.asked = True

    def install(self) -> None:
        """Makes SIGUSR1 ask this request. Installed for every run before its first stdout line, as the protocol
        requires: the daemon sends SIGUSR1 only after that line, and only to a worker that declared ``yield``."""
        signal.signal(signal.SIGUSR1, self.ask)


def checkpoint_text(state: Any) -> str:
    """The compact JSON text of a checkpoint's ``state``; ``ValueError`` with a sentence when it is not JSON or
    larger than ``MAX_CHECKPOINT_BYTES``."""
    try:
        text = json.dumps(state, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as error:
        raise ValueError(
            f"The checkpoint state cannot be written as JSON ({error}); use dicts, lists, strings, numbers, "
            "booleans and None."
        ) from None
    size = len(text.encode("utf-8"))
    if size > MAX_CHECKPOINT_BYTES:
        raise ValueError(
            f"The checkpoint state is {size} bytes of JSON, more than the {MAX_CHECKPOINT_BYTES} bytes (64 KiB) "
            "the daemon keeps; checkpoint where the work is (an id, an offset), not the work itself."
        )
    return text


def checkpoint_callback(session: Any, yielding: YieldRequest | None = None) -> Callable[[Any], None]:
    """The ``checkpoint(state)`` callback handed to ``execute``: checks ``state``, commits ``session`` (when the
    verb has one) so that the work done before the checkpoint is durable, then prints ``{"checkpoint": state}``;
    then, if ``yielding`` was asked, raises ``Yielded``, so that the run stops exactly where a resume goes on."""

    def checkpoint(state: Any) -> None:
        text = checkpoint_text(state)
        if session is not None:
            session.commit()
        sys.stdout.write('{"checkpoint":' + text + "}\n")
        sys.stdout.flush()
        if yielding is not None and yielding.asked:
            raise Yielded()

    return checkpoint


def continuation(env: dict[str, str]) -> dict[str, Any]:
    """What a run continues, from the environment: ``resume_from`` (the decoded ``SCRINALIA_CHECKPOINT``) and
    ``restart_of`` (``SCRINALIA_RESTART_OF``), each None when unset or empty."""
    text = env.get("SCRINALIA_CHECKPOINT") or None
    resume_from = None
    if text is not None:
        try:
            resume_from = json.loads(text)
        except ValueError as error:
            raise UsageError(
                f"SCRINALIA_CHECKPOINT is not JSON ({error}), so the checkpoint to resume from cannot be read."
            ) from None
    return {"resume_from": resume_from, "restart_of": env.get("SCRINALIA_RESTART_OF") or None}
