"""Tag suggestion, shaped like the archive's worker: ``count_pending`` and ``execute`` take the session first and
share one queue predicate; ``execute`` declares its options, its engine and its preset in its signature. It
commits a batch at a time through the session the adapter gives it (the adapter commits the last one, or rolls it
back if the run fails or is stopped).
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


def _pending(db: Session):
    done = select(Stamp.document_id).where(Stamp.stamp == STAMP)
    return select(Document).where(Document.id.not_in(done)).order_by(Document.id)


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
) -> dict:
    """Tags every pending document with its most frequent long words, ``batch_size`` documents a batch.
    ``fail_after`` > 0 raises after that many documents (of the last, uncommitted batch)."""
    documents = db.scalars(_pending(db)).all()
    done = 0
    for document in documents:
        if fail_after and done == fail_after:
            raise RuntimeError(f"tagging failed after {done} documents, as asked (fail_after)")
        words = sorted({w.lower() for w in document.text.split() if len(w) > 4})[:max_tags]
        db.add(Stamp(document_id=document.id, stamp=STAMP, value=",".join(words)))
        done += 1
        time.sleep(delay_ms / 1000)
        if done % batch_size == 0:
            db.commit()
            if progress is not None:
                progress(done, len(documents), f"{engine_name}/{preset}")
    return {"processed": done, "failed": 0}
