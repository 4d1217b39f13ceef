"""The archive's database: documents, the stamps workers leave on them, and the cleaning rules. A SQLAlchemy
``sessionmaker``, as the archive's code has one; the adapter is given it with ``--session archive.db:SessionLocal``.

The URL comes from ``ARCHIVE_DATABASE_URL`` (a SQLite file by default).
"""

from __future__ import annotations

import os

from sqlalchemy import Boolean, ForeignKey, Integer, String, Text, create_engine
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, sessionmaker


class Base(DeclarativeBase):
    pass


class Document(Base):
    __tablename__ = "documents"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    text: Mapped[str] = mapped_column(Text)


class Stamp(Base):
    """That a worker processed a document (the archive's ``execution_log``)."""

    __tablename__ = "stamps"

    document_id: Mapped[int] = mapped_column(ForeignKey("documents.id"), primary_key=True)
    stamp: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[str] = mapped_column(Text, default="")


class CleaningRule(Base):
    """A cleaning rule; the active ``LLM_CHECK`` rule says which engine the quality validator uses."""

    __tablename__ = "cleaning_rules"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    kind: Mapped[str] = mapped_column(String(32))
    active: Mapped[bool] = mapped_column(Boolean, default=True)
    engine: Mapped[str] = mapped_column(String(64))
    preset: Mapped[str] = mapped_column(String(64))
    model: Mapped[str] = mapped_column(String(128))


engine = create_engine(os.environ.get("ARCHIVE_DATABASE_URL", "sqlite:///data/example-archive.sqlite"))
SessionLocal = sessionmaker(bind=engine)


def create_schema() -> None:
    """Creates the tables (the archive has its own migrations; the example needs only this)."""
    Base.metadata.create_all(engine)
