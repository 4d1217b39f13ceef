"""Tests of the adapter's ``usage`` callback: the totals it prints as ``{"usage": …}`` lines, set as given or added
batch by batch, its refusals, and how a run's ``execute`` receives it. Standard library only:
``python3 -m unittest discover -s adapters/python``.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import tempfile
import textwrap
import unittest
from pathlib import Path

import scrinalia_worker as adapter
from test_items import json_lines, run_main

#: A worker that reports its cost per batch with ``usage.add``, and once as totals at the end.
USAGE_WORKER = """
def execute(batches: int = 3, usage=None, progress=None):
    for batch in range(batches):
        usage.add(tokens_in=1000, tokens_out=250, cost=0.002, currency="EUR")
    usage(gpu_seconds=1.5)
    return {"processed": batches}
"""


def lines_of(call) -> list[dict]:
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        call()
    return [json.loads(line) for line in printed.getvalue().splitlines()]


class UsageCallbackTest(unittest.TestCase):
    def test_totals_as_given_keep_the_keys_left_out(self):
        usage = adapter.Usage()
        self.assertEqual(lines_of(lambda: usage(tokens_in=600, tokens_out=150)),
                         [{"usage": {"tokens_in": 600, "tokens_out": 150}}])
        self.assertEqual(lines_of(lambda: usage(tokens_in=1200, cost=0.0042, currency="EUR")),
                         [{"usage": {"tokens_in": 1200, "tokens_out": 150, "cost": 0.0042, "currency": "EUR"}}],
                         "tokens_out keeps its last total")
        self.assertEqual(lines_of(lambda: usage(tokens_out=300))[0]["usage"]["currency"], "EUR",
                         "the currency is kept too")

    def test_increments_add_up_to_the_totals_printed(self):
        usage = adapter.Usage()
        self.assertEqual(lines_of(lambda: usage.add(tokens_in=100)), [{"usage": {"tokens_in": 100}}],
                         "only what was given: no zeros, and no cost without one")
        usage.totals = {"tokens_in": 100}
        lines = lines_of(lambda: [usage.add(tokens_in=100, tokens_out=30, cost=0.25, currency="USD"),
                                  usage.add(tokens_in=50, cost=0.5),
                                  usage.add(gpu_seconds=2)])
        self.assertEqual([line["usage"] for line in lines], [
            {"tokens_in": 200, "tokens_out": 30, "cost": 0.25, "currency": "USD"},
            {"tokens_in": 250, "tokens_out": 30, "cost": 0.75, "currency": "USD"},
            {"tokens_in": 250, "tokens_out": 30, "gpu_seconds": 2, "cost": 0.75, "currency": "USD"},
        ])
        free = adapter.Usage()
        self.assertEqual(lines_of(lambda: free.add(cost=0, currency="EUR")),
                         [{"usage": {"cost": 0, "currency": "EUR"}}], "a free call may say it was free")

    def test_each_refusal_is_a_value_error_with_a_sentence_and_changes_nothing(self):
        cases = [
            ({"tokens_in": -1}, "usage: tokens_in must be a whole number of at least 0, not -1."),
            ({"tokens_out": 2.5}, "usage: tokens_out must be a whole number of at least 0, not 2.5."),
            ({"tokens_in": True}, "tokens_in must be a whole number"),
            ({"tokens_in": "12"}, "tokens_in must be a whole number"),
            ({"gpu_seconds": float("nan")}, "usage: gpu_seconds must be a number of at least 0, not nan."),
            ({"cost": float("inf"), "currency": "EUR"}, "cost must be a number of at least 0"),
            ({"cost": -0.01, "currency": "EUR"}, "cost must be a number of at least 0"),
            ({"cost": 0.01, "currency": "eur"}, "usage: currency must be a three-letter code such as EUR, not 'eur'."),
            ({"cost": 0.01, "currency": "EURO"}, "three-letter code"),
            ({"cost": 0.01}, "A cost needs its currency"),
        ]
        for figures, says in cases:
            for how in ("totals", "add"):
                usage = adapter.Usage()
                call = usage if how == "totals" else usage.add
                printed = io.StringIO()
                with self.subTest(figures=figures, how=how), contextlib.redirect_stdout(printed):
                    with self.assertRaisesRegex(ValueError, re.escape(says)):
                        call(**figures)
                self.assertEqual((printed.getvalue(), usage.totals), ("", {}), figures)

    def test_adding_a_cost_in_another_currency_is_refused(self):
        usage = adapter.Usage()
        lines_of(lambda: usage.add(cost=1.0, currency="EUR"))
        with self.assertRaisesRegex(ValueError, "counted in EUR; usage.add\\(\\) cannot add a cost in USD"):
            usage.add(cost=1.0, currency="USD")
        self.assertEqual(usage.totals, {"cost": 1.0, "currency": "EUR"})
        self.assertEqual(lines_of(lambda: usage.add(cost=0.5))[0]["usage"], {"cost": 1.5, "currency": "EUR"})
        # As totals, a worker may say the whole run was counted in another currency.
        self.assertEqual(lines_of(lambda: usage(cost=1.6, currency="USD"))[0]["usage"],
                         {"cost": 1.6, "currency": "USD"})


class UsageRunTest(unittest.TestCase):
    def setUp(self):
        self.scratch = tempfile.TemporaryDirectory(prefix="scrinalia-usage-")
        self.path = Path(self.scratch.name) / "usage_worker.py"
        self.path.write_text(textwrap.dedent(USAGE_WORKER))

    def tearDown(self):
        self.scratch.cleanup()

    def test_a_run_reports_cumulative_lines_the_last_of_which_is_the_runs_total(self):
        status, stdout, stderr = run_main(str(self.path), "run", "--batches=2")
        self.assertEqual(status, 0, stderr)
        usages = [line["usage"] for line in json_lines(stdout) if "usage" in line]
        self.assertEqual(usages, [
            {"tokens_in": 1000, "tokens_out": 250, "cost": 0.002, "currency": "EUR"},
            {"tokens_in": 2000, "tokens_out": 500, "cost": 0.004, "currency": "EUR"},
            {"tokens_in": 2000, "tokens_out": 500, "gpu_seconds": 1.5, "cost": 0.004, "currency": "EUR"},
        ])
        self.assertEqual(json_lines(stdout)[-1], {"result": {"processed": 2}})

    def test_usage_is_the_adapters_to_give_not_an_option(self):
        status, stdout, stderr = run_main(str(self.path), "run", "--usage=x")
        self.assertEqual(status, 2, stderr)
        self.assertIn("'usage' is the adapter's to give, not an option", stderr)
        status, stdout, stderr = run_main(str(self.path), "describe")
        self.assertEqual(status, 0, stderr)
        self.assertEqual([o["name"] for o in json_lines(stdout)[0]["declared"]["options"]], ["batches"])


if __name__ == "__main__":
    unittest.main()
