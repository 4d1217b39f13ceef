"""What a run cost, by the worker's own count: the ``usage`` callback the adapter passes to a parameter of
``execute`` named ``usage``. It prints the cumulative ``{"usage": {...}}`` protocol line (docs/worker-protocol.md,
"Usage"); the daemon measures CPU and memory itself. Beside ``scrinalia_worker.py``, which re-exports it.
"""

from __future__ import annotations

import json
import math
import re
import sys
from typing import Any

#: A ``usage`` line's currency: an ISO 4217 code, three capital letters.
CURRENCY = re.compile(r"[A-Z]{3}")

#: The keys of a ``usage`` line, in the order they are printed.
USAGE_KEYS = ("tokens_in", "tokens_out", "gpu_seconds", "cost", "currency")


class Usage:
    """The ``usage`` callback handed to ``execute``: what the run cost so far, printed as one protocol line
    ``{"usage": {"tokens_in": …, "tokens_out": …, "gpu_seconds": …, "cost": …, "currency": …}}`` on every call.

    The daemon keeps the last line it accepts, so each line carries the run's totals. Two ways to keep them:

    - ``usage(tokens_in=12000, tokens_out=3000, cost=0.042, currency="EUR")`` sets the totals given (a worker that
      counts itself, or reads its engine's own running total); a key left out keeps its last value.
    - ``usage.add(tokens_in=1200, tokens_out=300, cost=0.0042, currency="EUR")`` adds one batch's figures to the
      totals (a worker that knows what each call cost); ``currency`` must then stay the same for the run.

    Tokens are whole numbers, ``gpu_seconds`` and ``cost`` numbers, all at least 0; ``currency`` is three capital
    letters and is needed with a cost (once: it is kept). Anything else raises ``ValueError`` with a sentence, and
    nothing is printed or changed. The figures are the worker's own: the daemon measures CPU and memory itself.
    """

    def __init__(self) -> None:
        self.totals: dict[str, Any] = {}

    def __call__(
        self,
        tokens_in: int | None = None,
        tokens_out: int | None = None,
        gpu_seconds: float | None = None,
        cost: float | None = None,
        currency: str | None = None,
    ) -> None:
        """Sets the run's totals so far for the figures given and prints the totals (see the class)."""
        given = self._checked(tokens_in=tokens_in, tokens_out=tokens_out, gpu_seconds=gpu_seconds, cost=cost,
                              currency=currency)
        totals = {**self.totals, **given}
        if "cost" in totals and "currency" not in totals:
            raise ValueError('A cost needs its currency: usage(cost=0.04, currency="EUR").')
        self._print(totals)

    def add(
        self,
        tokens_in: int | None = None,
        tokens_out: int | None = None,
        gpu_seconds: float | None = None,
        cost: float | None = None,
        currency: str | None = None,
    ) -> None:
        """Adds these figures to the run's totals and prints the totals (see the class)."""
        given = self._checked(tokens_in=tokens_in, tokens_out=tokens_out, gpu_seconds=gpu_seconds, cost=cost,
                              currency=currency)
        known = self.totals.get("currency")
        if currency is not None and known is not None and currency != known:
            raise ValueError(
                f"This run's cost is counted in {known}; usage.add() cannot add a cost in {currency} to it "
                "(convert it first)."
            )
        totals = dict(self.totals)
        for key in ("tokens_in", "tokens_out", "gpu_seconds", "cost"):
            if key in given:
                totals[key] = totals.get(key, 0) + given[key]
        if currency is not None:
            totals["currency"] = currency
        if "cost" in totals and "currency" not in totals:
            raise ValueError('A cost needs its currency: usage.add(cost=0.04, currency="EUR").')
        self._print(totals)

    @staticmethod
    def _checked(**figures: Any) -> dict[str, Any]:
        """The figures given (None left out), each checked."""
        given = {key: value for key, value in figures.items() if value is not None}
        for key in ("tokens_in", "tokens_out"):
            value = given.get(key)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
                raise ValueError(f"usage: {key} must be a whole number of at least 0, not {value!r}.")
        for key in ("gpu_seconds", "cost"):
            value = given.get(key)
            if value is not None and (
                not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) or value < 0
            ):
                raise ValueError(f"usage: {key} must be a number of at least 0, not {value!r}.")
        currency = given.get("currency")
        if currency is not None and (not isinstance(currency, str) or CURRENCY.fullmatch(currency) is None):
            raise ValueError(f"usage: currency must be a three-letter code such as EUR, not {currency!r}.")
        return given

    def _print(self, totals: dict[str, Any]) -> None:
        self.totals = totals
        line = {"usage": {key: totals[key] for key in USAGE_KEYS if key in totals}}
        sys.stdout.write(json.dumps(line, ensure_ascii=False) + "\n")
        sys.stdout.flush()
