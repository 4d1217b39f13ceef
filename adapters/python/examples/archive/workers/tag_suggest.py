"""Tag suggestion, shaped like the archive's worker: ``count_pending`` and ``execute`` take the session first and
share one queue predicate; ``execute`` declares its options, its engine and its preset in its signature. It works
in batches over the documents in id order and checkpoints after each full one (``{"last_id": …, "done": …}``):
the adapter commits the batch, then reports the checkpoint (and commits the last, partial batch when ``execute``
returns); a run stopped or failed in a batch loses only that batch (rolled back). A run resumed from a checkpoint
(``resume_from``) continues after its ``last_id``, counting on from its ``done``.

It reports each document's outcome (``item``): a document whose text is empty fails (class ``ocr_empty``) and
stays pending; it skips the quarantined documents the daemon names (``skip``), untouched, and a rerun of a run's
failures processes only those (``only``).
"""

from __future__ import annotations

import time
from typing import Annotated, Callable, Literal, Optional

from sqlalchemy import select
from sqlalchemy.orm import Session

from archive.db import Document, Stamp
from archive.engines import REGISTRIES

STAMP = "tags_v1"


class Range:
    """Bounds of a whole-number option (``Annotated[int, Range(1, 500)]``), read by the adapter."""

    def __init__(self, ge: int, le: int) -> None:
        self.ge, self.le = ge, le


def _pending(db: Session, after: int = 0):
    done = select(Stamp.document_id).where(Stamp.stamp == STAMP)
    return select(Document).where(Document.id.not_in(done), Document.id > after).order_by(Document.id)


def count_pending(db: Session, batch_size: int = 50, **_options) -> int:
    """How many documents have no tags yet."""
    return len(db.scalars(_pending(db)).all())


def describe_config(db: Session, engine_name: str = "ollama", preset: str = "fast", **_options) -> dict:
    """The engine ``execute`` would use, without starting it."""
    registry = REGISTRIES[engine_name]
    return {"engine": engine_name, "preset": preset, "model": registry.PRESETS[preset], "endpoint": registry.URL}


def execute(
    db: Session,
    batch_size: Annotated[int, Range(1, 500)] = 20,
    max_tags: Literal[3, 5, 8] = 5,
    delay_ms: int = 0,
    fail_after: int = 0,
    engine_name: str = "ollama",
    preset: str = "fast",
    progress: Optional[Callable[..., None]] = None,
    checkpoint: Optional[Callable[[dict], None]] = None,
    resume_from: Optional[dict] = None,
    item: Optional[Callable[..., None]] = None,
    only: Optional[frozenset] = None,
    skip: frozenset = frozenset(),
) -> dict:
    """Tags every pending document with its most frequent long words, ``batch_size`` documents a batch, and
    checkpoints after each full batch. ``fail_after`` > 0 raises after that many documents of this run (in a batch not
    committed yet)."""
    start = {"last_id": 0, "done": 0, **(resume_from or {})}
    documents = db.scalars(_pending(db, after=start["last_id"])).all()
    if only is not None:
        documents = [d for d in documents if str(d.id) in only]
    done, failed = 0, 0
    # Successes are reported once their batch is committed: a run cut before that did not tag them.
    kept: list[str] = []

    def report_kept() -> None:
        for id_ in kept if item is not None else ():
            item(id_, "succeeded")
        kept.clear()

    for document in documents:
        if fail_after and done == fail_after:
            raise RuntimeError(f"tagging failed after {done} documents, as asked (fail_after)")
        if str(document.id) in skip:
            if item is not None:
                item(str(document.id), "skipped", cls="quarantined")
            continue
        if not document.text.strip():
            failed += 1
            if item is not None:
                item(str(document.id), "failed", error="The document's OCR text is empty.", cls="ocr_empty")
            continue
        words = sorted({w.lower() for w in document.text.split() if len(w) > 4})[:max_tags]
        db.add(Stamp(document_id=document.id, stamp=STAMP, value=",".join(words)))
        done += 1
        kept.append(str(document.id))
        time.sleep(delay_ms / 1000)
        if done % batch_size == 0:
            state = {"last_id": document.id, "done": start["done"] + done}
            # The batch is committed, its items reported, then the checkpoint: a resume from it lacks none of them.
            db.commit()
            report_kept()
            if checkpoint is not None:
                checkpoint(state)
            if progress is not None:
                progress(state["done"], start["done"] + len(documents), f"{engine_name}/{preset}")
    db.commit()
    report_kept()
    return {"processed": done, "failed": failed}
