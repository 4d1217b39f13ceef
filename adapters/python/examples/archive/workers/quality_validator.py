"""The quality validator, shaped like the archive's: its engine is not chosen here but comes from the active
``LLM_CHECK`` cleaning rule, so ``execute`` declares no engine; ``describe_config`` reads the rule (and says where
the engine comes from), and ``check`` says when there is no such rule.
"""

from __future__ import annotations

from typing import Callable, Optional

from sqlalchemy import select
from sqlalchemy.orm import Session

from archive.db import CleaningRule, Document, Stamp

STAMP = "quality_v1"


def _rule(db: Session) -> Optional[CleaningRule]:
    query = select(CleaningRule).where(CleaningRule.kind == "LLM_CHECK", CleaningRule.active.is_(True))
    return db.scalars(query.order_by(CleaningRule.id.desc())).first()


def describe_config(db: Session, **_options) -> dict:
    """The engine of the active LLM_CHECK rule, and which rule it is."""
    rule = _rule(db)
    if rule is None:
        return {"source": {"description": "the active LLM_CHECK cleaning rule", "reference": None}}
    return {
        "engine": rule.engine,
        "preset": rule.preset,
        "model": rule.model,
        "source": {"description": "the active LLM_CHECK cleaning rule", "reference": f"LLM_CHECK rule {rule.id}"},
    }


def check(db: Session, **_options):
    """Ready when an LLM_CHECK rule is active."""
    if _rule(db) is None:
        return "There is no active LLM_CHECK cleaning rule, so the quality validator has no engine to use."
    return True


def count_pending(db: Session, **_options) -> int:
    done = select(Stamp.document_id).where(Stamp.stamp == STAMP)
    return len(db.scalars(select(Document.id).where(Document.id.not_in(done))).all())


def execute(db: Session, min_words: int = 3, progress: Optional[Callable[..., None]] = None) -> dict:
    """Stamps each document with whether it has at least ``min_words`` words, judged with the rule's engine."""
    rule = _rule(db)
    if rule is None:
        raise RuntimeError("there is no active LLM_CHECK cleaning rule")
    done = select(Stamp.document_id).where(Stamp.stamp == STAMP)
    documents = db.scalars(select(Document).where(Document.id.not_in(done))).all()
    for document in documents:
        verdict = "ok" if len(document.text.split()) >= min_words else "too short"
        db.add(Stamp(document_id=document.id, stamp=STAMP, value=f"{verdict} ({rule.model})"))
    return {"processed": len(documents), "failed": 0}
