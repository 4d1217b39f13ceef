"""Tests of the adapter's side of items: the ``capabilities`` that ``describe`` derives from ``execute``'s
parameters, the ``item`` callback and its refusals, the scope and skip files (``SCRINALIA_ITEMS_ONLY``,
``SCRINALIA_ITEMS_SKIP``), ``SCRINALIA_SHARD`` and ``shard_of``. Standard library only:
``python3 -m unittest discover -s adapters/python``.

The adapter's ``main`` runs in this process with an environment of the test's own (no worker process per case),
which keeps the suite cheap; ``test_scrinalia_worker.py`` covers the adapter as a separate process.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import re
import signal
import tempfile
import textwrap
import unittest
from pathlib import Path

import scrinalia_worker as adapter

#: A worker that takes every parameter of items, and returns what it was given.
ITEMS_WORKER = """
def execute(batch_size: int = 2, item=None, only=None, skip=None, shard=None, checkpoint=None):
    item("doc-1", "succeeded")
    item("doc-2", "failed", "The OCR text is empty.", "ocr_empty")
    return {
        "only": None if only is None else sorted(only),
        "only_type": type(only).__name__,
        "skip": sorted(skip),
        "skip_type": type(skip).__name__,
        "shard": shard,
    }
"""

#: A worker shaped like the seed's before items: none of their parameters.
PLAIN_WORKER = """
def execute(batch_size: int = 2, progress=None):
    return {"processed": batch_size}
"""

#: A worker that takes any option by ``**kwargs``: that is not taking the adapter's parameters.
ANY_WORKER = """
def execute(**options):
    return {"given": sorted(options)}
"""


def run_main(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """Runs the adapter's ``main`` here: its exit status, stdout and stderr. ``main`` installs handlers of SIGTERM,
    SIGINT and SIGUSR1 for a run; they are put back, so that Ctrl-C still stops the test run."""
    stdout, stderr = io.StringIO(), io.StringIO()
    signals = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)
    handlers = [signal.getsignal(signum) for signum in signals]
    try:
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            status = adapter.main(list(args), dict(env or {}))
    finally:
        for signum, handler in zip(signals, handlers):
            signal.signal(signum, handler)
    return status, stdout.getvalue(), stderr.getvalue()


def json_lines(stdout: str) -> list[dict]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def printed_by(call) -> str:
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        call()
    return printed.getvalue()


class Workers(unittest.TestCase):
    """A scratch folder with the workers above, each a module given by path."""

    def setUp(self):
        self.scratch = tempfile.TemporaryDirectory(prefix="scrinalia-items-")
        self.folder = Path(self.scratch.name)
        self.paths = {}
        for name, source in (("items_worker", ITEMS_WORKER), ("plain_worker", PLAIN_WORKER),
                             ("any_worker", ANY_WORKER)):
            path = self.folder / f"{name}.py"
            path.write_text(textwrap.dedent(source))
            self.paths[name] = str(path)

    def tearDown(self):
        self.scratch.cleanup()

    def ids_file(self, name: str, text: str | bytes) -> str:
        path = self.folder / name
        if isinstance(text, bytes):
            path.write_bytes(text)
        else:
            path.write_bytes(text.encode("utf-8"))
        return str(path)


class CapabilitiesTest(Workers):
    def describe(self, worker: str) -> dict:
        status, stdout, stderr = run_main(self.paths[worker], "describe")
        self.assertEqual(status, 0, stderr)
        [described] = json_lines(stdout)
        return described

    def test_a_worker_with_the_parameters_has_the_capabilities(self):
        described = self.describe("items_worker")
        self.assertEqual(
            described["capabilities"],
            {"items": True, "scope": True, "shards": True, "checkpoints": True, "yield": True},
        )
        self.assertEqual(
            set(described), {"engine", "preset", "model", "endpoint", "declared", "capabilities"},
            "every key describe printed before stays",
        )
        self.assertEqual([o["name"] for o in described["declared"]["options"]], ["batch_size"],
                         "item, only, skip, shard and checkpoint are the adapter's, not options")

    def test_a_worker_without_them_has_none(self):
        for worker in ("plain_worker", "any_worker"):
            self.assertEqual(
                self.describe(worker)["capabilities"],
                {"items": False, "scope": False, "shards": False, "checkpoints": False, "yield": False},
                f"{worker}: **kwargs does not count, since the adapter passes each only by its name",
            )

    def test_a_module_without_execute_has_none(self):
        path = self.folder / "counting_only.py"
        path.write_text("def count_pending():\n    return 3\n")
        status, stdout, stderr = run_main(str(path), "describe")
        self.assertEqual(status, 0, stderr)
        self.assertFalse(any(json_lines(stdout)[0]["capabilities"].values()))

    def test_flags_named_like_the_adapters_parameters_are_refused(self):
        for flag in ("item", "only", "skip", "shard"):
            status, stdout, stderr = run_main(self.paths["items_worker"], "run", f"--{flag}=x")
            self.assertEqual(status, 2, stderr)
            self.assertIn(f"{flag!r} is the adapter's to give, not an option", stderr)
            self.assertEqual(stdout, "")


class ItemLineTest(unittest.TestCase):
    def test_lines_are_compact_json_with_error_and_class_only_when_given(self):
        self.assertEqual(
            printed_by(lambda: adapter.item("doc-0007", "failed", "The OCR text is empty.", "ocr_empty")),
            '{"item":{"id":"doc-0007","outcome":"failed","error":"The OCR text is empty.","class":"ocr_empty"}}\n',
        )
        self.assertEqual(printed_by(lambda: adapter.item("doc-1", "succeeded")),
                         '{"item":{"id":"doc-1","outcome":"succeeded"}}\n')
        self.assertEqual(printed_by(lambda: adapter.item("doc-2", "skipped", cls="quarantined")),
                         '{"item":{"id":"doc-2","outcome":"skipped","class":"quarantined"}}\n')
        self.assertEqual(printed_by(lambda: adapter.item("doc-3", "failed", error="")),
                         '{"item":{"id":"doc-3","outcome":"failed","error":""}}\n')

    def test_text_is_escaped_as_json_and_not_as_ascii(self):
        line = printed_by(lambda: adapter.item('lettre "café"\n\t7', "failed", 'Zeile 3: "ß" \\ \u2028'))
        self.assertEqual(line.count("\n"), 1, "one line, whatever the id and the error hold")
        self.assertIn("café", line)
        self.assertEqual(json.loads(line),
                         {"item": {"id": 'lettre "café"\n\t7', "outcome": "failed", "error": 'Zeile 3: "ß" \\ \u2028'}})

    def test_an_exception_is_written_as_its_sentence(self):
        line = printed_by(lambda: adapter.item("doc-4", "failed", ValueError("The page has no text.")))
        self.assertEqual(json.loads(line)["item"]["error"], "The page has no text.")

    def test_a_long_error_is_passed_whole_for_the_daemon_to_cut(self):
        error = "é" * 3000  # 6,000 bytes, over the 2,048 the daemon keeps
        self.assertEqual(json.loads(printed_by(lambda: adapter.item("doc-5", "failed", error)))["item"]["error"], error)

    def test_an_id_of_512_bytes_is_the_longest(self):
        for id in ("é" * 256, "a" * 512, "\U0001f4c4" * 128):
            self.assertEqual(json.loads(printed_by(lambda: adapter.item(id, "succeeded")))["item"]["id"], id)

    def test_each_refusal_is_a_value_error_with_a_sentence_and_prints_nothing(self):
        cases = [
            (("", "succeeded"), "An item id must be a non-empty string"),
            ((7, "succeeded"), "An item id must be a non-empty string (str(document.id) for a number), not 7."),
            ((None, "succeeded"), "An item id must be a non-empty string"),
            (("é" * 256 + "a", "succeeded"), "is 513 bytes in UTF-8, more than the 512 bytes the daemon keeps"),
            (("a" * 513, "succeeded"), "is 513 bytes in UTF-8"),
            (("doc-1", "done"), "The outcome of item 'doc-1' is 'done'; it must be \"succeeded\", \"failed\" or "
                                "\"skipped\"."),
            (("doc-1", "Failed"), "is 'Failed'; it must be"),
            (("doc-1", None), "is None; it must be"),
            (("doc-1", ["failed"]), "is ['failed']; it must be"),
        ]
        for cls in ("OCR", "1ocr", "ocr-empty", "ocr empty", "a" * 33, "", "ocr_empty\n", "é", 5):
            cases.append((("doc-1", "failed", None, cls), f"The class of item 'doc-1' is {cls!r}; a class is a "
                                                          "lowercase word of at most 32 letters"))
        for arguments, says in cases:
            printed = io.StringIO()
            with self.subTest(arguments=arguments), contextlib.redirect_stdout(printed):
                with self.assertRaisesRegex(ValueError, re.escape(says)):
                    adapter.item(*arguments)
            self.assertEqual(printed.getvalue(), "", arguments)
        self.assertEqual(json.loads(printed_by(lambda: adapter.item("d", "failed", None, "a" + "_9" * 15 + "z"))),
                         {"item": {"id": "d", "outcome": "failed", "class": "a" + "_9" * 15 + "z"}},
                         "32 characters is the longest class")

    def test_each_line_is_one_write_and_is_flushed(self):
        class Recording(io.StringIO):
            def __init__(self):
                super().__init__()
                self.calls = []

            def write(self, text):
                self.calls.append("write")
                return super().write(text)

            def flush(self):
                self.calls.append("flush")

        recording = Recording()
        with contextlib.redirect_stdout(recording):
            adapter.item("doc-1", "failed", "No text.", "ocr_empty")
            adapter.item("doc-2", "succeeded")
        self.assertEqual(recording.calls, ["write", "flush", "write", "flush"])

    def test_a_million_items_are_all_printed(self):
        printed = io.StringIO()
        item = adapter.item
        with contextlib.redirect_stdout(printed):
            for number in range(1_000_000):
                if number % 1000 == 999:
                    item(f"doc-{number}", "failed", "The OCR text is empty.", "ocr_empty")
                else:
                    item(f"doc-{number}", "succeeded")
        text = printed.getvalue()
        self.assertEqual(text.count("\n"), 1_000_000)
        self.assertEqual(text.count('"outcome":"failed"'), 1000)
        self.assertTrue(text.startswith('{"item":{"id":"doc-0","outcome":"succeeded"}}\n'))
        self.assertTrue(text.endswith('{"item":{"id":"doc-999999","outcome":"failed","error":"The OCR text is '
                                      'empty.","class":"ocr_empty"}}\n'))


class ScopeAndSkipTest(Workers):
    def result(self, worker: str, env: dict[str, str]) -> tuple[dict, str]:
        status, stdout, stderr = run_main(self.paths[worker], "run", env=env)
        self.assertEqual(status, 0, stderr)
        return json_lines(stdout)[-1]["result"], stderr

    def test_without_the_variables_only_is_none_skip_is_empty_and_shard_is_none(self):
        result, _ = self.result("items_worker", {})
        self.assertEqual(result, {"only": None, "only_type": "NoneType", "skip": [], "skip_type": "frozenset",
                                  "shard": None})
        self.assertEqual(self.result("items_worker", {"SCRINALIA_ITEMS_ONLY": "", "SCRINALIA_SHARD": ""})[0]["only"],
                         None, "an empty variable counts as unset")

    def test_the_run_prints_its_items(self):
        status, stdout, stderr = run_main(self.paths["items_worker"], "run")
        self.assertEqual(status, 0, stderr)
        self.assertEqual(stdout.splitlines()[:2], [
            '{"item":{"id":"doc-1","outcome":"succeeded"}}',
            '{"item":{"id":"doc-2","outcome":"failed","error":"The OCR text is empty.","class":"ocr_empty"}}',
        ])

    def test_the_files_are_read_one_id_a_line(self):
        only = self.ids_file("only.txt", "doc-1\r\n\r\n\ndoc-2\n doc 3 \ndoc-4\r\rx\n\ndoc-é")
        skip = self.ids_file("skip.txt", "doc-9\r\n")
        result, stderr = self.result("items_worker", {"SCRINALIA_ITEMS_ONLY": only, "SCRINALIA_ITEMS_SKIP": skip})
        self.assertEqual(result["only"], sorted(["doc-1", "doc-2", " doc 3 ", "doc-4\r\rx", "doc-é"]),
                         "a line's ending goes, empty lines go, and nothing else does")
        self.assertEqual((result["only_type"], result["skip_type"]), ("frozenset", "frozenset"))
        self.assertEqual(result["skip"], ["doc-9"])
        self.assertNotIn("warning", stderr)

    def test_an_empty_scope_file_is_a_scope_of_nothing(self):
        result, _ = self.result("items_worker", {"SCRINALIA_ITEMS_ONLY": self.ids_file("only.txt", "\n\n")})
        self.assertEqual(result["only"], [])

    def test_a_file_that_cannot_be_read_exits_2_naming_the_variable_and_the_path(self):
        missing = str(self.folder / "no-such-file.txt")
        latin = self.ids_file("latin.txt", "doc-\xe9\n".encode("latin-1"))
        for variable, path, reason in [
            ("SCRINALIA_ITEMS_ONLY", missing, " (No such file or directory)."),
            ("SCRINALIA_ITEMS_SKIP", missing, " (No such file or directory)."),
            ("SCRINALIA_ITEMS_SKIP", str(self.folder), " (Is a directory)."),
            ("SCRINALIA_ITEMS_ONLY", latin, ": it is not UTF-8 text."),
        ]:
            for worker in ("items_worker", "plain_worker"):
                with self.subTest(variable=variable, path=path, worker=worker):
                    status, stdout, stderr = run_main(self.paths[worker], "run", env={variable: path})
                    self.assertEqual(status, 2, stderr)
                    self.assertIn(f"{variable} names the file {path}, which cannot be read{reason}", stderr)
                    self.assertNotIn("usage:", stderr, "the command line was right")
                    self.assertEqual(stdout, "", "nothing runs")

    def test_a_scope_given_to_a_worker_without_only_exits_2_before_anything_runs(self):
        only = self.ids_file("only.txt", "doc-1\ndoc-2\n")
        for worker in ("plain_worker", "any_worker"):
            status, stdout, stderr = run_main(self.paths[worker], "run", env={"SCRINALIA_ITEMS_ONLY": only})
            self.assertEqual(status, 2, stderr)
            self.assertIn("This run is scoped to 2 items (SCRINALIA_ITEMS_ONLY), but execute() has no parameter "
                          "`only` and so cannot take a scope: running it would process everything.", stderr)
            self.assertEqual(stdout, "")
        status, _, stderr = run_main(self.paths["plain_worker"], "run",
                                     env={"SCRINALIA_ITEMS_ONLY": self.ids_file("one.txt", "doc-1")})
        self.assertIn("scoped to 1 item (", stderr)

    def test_a_skip_list_given_to_a_worker_without_skip_warns_and_runs(self):
        skip = self.ids_file("skip.txt", "doc-1\r\ndoc-2\r\ndoc-3\r\n")
        result, stderr = self.result("plain_worker", {"SCRINALIA_ITEMS_SKIP": skip})
        self.assertEqual(result, {"processed": 2})
        self.assertIn("scrinalia_worker: warning: this run was asked to skip 3 quarantined items "
                      "(SCRINALIA_ITEMS_SKIP), but execute() has no parameter `skip`, so it will not skip them; "
                      "running anyway.", stderr)
        _, stderr = self.result("plain_worker", {"SCRINALIA_ITEMS_SKIP": self.ids_file("none.txt", "")})
        self.assertNotIn("warning", stderr, "an empty skip list asks nothing")

    def test_the_example_worker_reviews_its_scope_and_skips_quarantined_items(self):
        state = str(self.folder / "example-state")
        env = {"SCRINALIA_ITEMS_ONLY": self.ids_file("only.txt", "item-3\nitem-5\nitem-8\n"),
               "SCRINALIA_ITEMS_SKIP": self.ids_file("skip.txt", "item-5\n")}
        status, stdout, stderr = run_main("example_worker", "run", f"--folder={state}", "--delay_ms=0", env=env)
        self.assertEqual(status, 0, stderr)
        items = [line["item"] for line in json_lines(stdout) if "item" in line]
        self.assertEqual(items, [{"id": "item-5", "outcome": "skipped", "class": "quarantined"},
                                 {"id": "item-3", "outcome": "succeeded"}, {"id": "item-8", "outcome": "succeeded"}])
        self.assertEqual(json_lines(stdout)[-1]["result"]["processed"], 2)
        status, stdout, _ = run_main("example_worker", "count-pending", f"--folder={state}")
        self.assertEqual(json_lines(stdout), [{"pending": 18}], "only the two in scope and not skipped were reviewed")


#: (id, N, its shard): the same table as ``VECTORS`` in wire/src/shard.rs (the daemon's and the demo workers'
#: ``shard_of``), so the two implementations are checked against one table. Change both or neither.
SHARD_VECTORS = (
    ("doc-0007", 7, 3),
    ("doc-0000", 4, 0),
    ("doc-0001", 4, 2),
    ("doc-0004", 4, 3),
    ("caf\u00e9", 5, 4),
    ("", 1, 0),
    ("", 3, 1),
    ("item-000001", 3, 0),
    ("item-000002", 3, 1),
    ("item-000003", 3, 1),
    ("日本語の文書", 16, 2),
    ("doc-0024", 64, 40),
    ("doc-0027", 64, 55),
    (" doc 0002 ", 10, 6),
    ("doc-0001", 1_000_003, 889_524),
    ("doc-0001", 4_294_967_295, 3_846_161_928),
)


class ShardTest(Workers):
    def test_a_shard_is_given_as_two_whole_numbers(self):
        for text, shard in (("0/1", [0, 1]), ("3/4", [3, 4]), ("0/16", [0, 16]), ("10/11", [10, 11])):
            status, stdout, stderr = run_main(self.paths["items_worker"], "run", env={"SCRINALIA_SHARD": text})
            self.assertEqual(status, 0, stderr)
            self.assertEqual(json_lines(stdout)[-1]["result"]["shard"], shard, text)
        self.assertEqual(adapter.read_shard({"SCRINALIA_SHARD": "3/4"}), (3, 4))

    def test_a_shard_that_is_not_i_of_n_exits_2(self):
        for text in ("4/4", "5/4", "0/0", "1/0", "1", "a/b", "-1/4", "+1/4", " 1/4", "1/4 ", "1_0/20", "1/4/8",
                     "\u0661/4"):
            with self.subTest(text=text):
                status, stdout, stderr = run_main(self.paths["items_worker"], "run", env={"SCRINALIA_SHARD": text})
                self.assertEqual(status, 2, stderr)
                self.assertIn(f"SCRINALIA_SHARD is {text!r}; it must be i/N with whole numbers 0 <= i < N", stderr)
                self.assertEqual(stdout, "")

    def test_one_of_several_shards_given_to_a_worker_without_shard_exits_2(self):
        status, stdout, stderr = run_main(self.paths["plain_worker"], "run", env={"SCRINALIA_SHARD": "1/4"})
        self.assertEqual(status, 2, stderr)
        self.assertIn("This run is shard 1 of 4 (SCRINALIA_SHARD=1/4), but execute() has no parameter `shard`",
                      stderr)
        self.assertEqual(stdout, "")
        status, stdout, stderr = run_main(self.paths["plain_worker"], "run", env={"SCRINALIA_SHARD": "0/1"})
        self.assertEqual(status, 0, "the only shard of one is the whole run: " + stderr)

    def test_shard_of_is_the_first_eight_bytes_of_sha256_modulo_n(self):
        # Computed another way than the adapter does: from the hexadecimal digest.
        expected = int(hashlib.sha256(b"doc-0007").hexdigest()[:16], 16) % 7
        self.assertEqual(adapter.shard_of("doc-0007", 7), expected)
        self.assertEqual(expected, 3, "the rule itself has not changed")
        self.assertEqual(adapter.shard_of("café", 5), int(hashlib.sha256("café".encode()).hexdigest()[:16], 16) % 5)
        self.assertEqual([adapter.shard_of(f"doc-{n:04d}", 4) for n in range(12)], [0, 2, 0, 0, 3, 3, 0, 3, 0, 2, 0, 3])
        self.assertEqual({adapter.shard_of(f"doc-{n}", 1) for n in range(100)}, {0})
        for n in (0, -1, 1.5, True, None):
            with self.assertRaisesRegex(ValueError, "The number of shards must be a whole number of at least 1"):
                adapter.shard_of("doc-1", n)

    def test_shard_of_agrees_with_the_rust_table(self):
        for item_id, n, shard in SHARD_VECTORS:
            with self.subTest(item_id=item_id, n=n):
                self.assertEqual(adapter.shard_of(item_id, n), shard)


if __name__ == "__main__":
    unittest.main()
