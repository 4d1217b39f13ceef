"""Tests of the adapter with a module shaped like the archive's (``examples/archive``): a real SQLAlchemy session
over a SQLite database, given with ``--session``, committed when a verb returns and rolled back when it fails or is
stopped; what ``describe`` derives from the signatures and the registries; ``check`` and the run's configuration
line. Needs SQLAlchemy (``scripts/test`` installs it): ``python3 -m unittest discover -s adapters/python``.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
ADAPTER = HERE / "scrinalia_worker.py"
EXAMPLES = HERE / "examples"
SESSION = ["--session", "archive.db:SessionLocal", "--registries", "archive.engines:REGISTRIES"]


class ArchiveTest(unittest.TestCase):
    def setUp(self):
        self.scratch = tempfile.TemporaryDirectory(prefix="scrinalia-archive-")
        self.database = Path(self.scratch.name) / "archive.sqlite"
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("SCRINALIA_")}
        self.env.update({"PYTHONPATH": str(EXAMPLES), "ARCHIVE_DATABASE_URL": f"sqlite:///{self.database}"})
        setup = "from archive.db import create_schema; create_schema()"
        subprocess.run([sys.executable, "-c", setup], env=self.env, check=True, timeout=60)
        with sqlite3.connect(self.database) as db:
            texts = [f"document {i} about archives, curators and their collections" for i in range(1, 11)]
            db.executemany("insert into documents (id, text) values (?, ?)", enumerate(texts, start=1))

    def tearDown(self):
        self.scratch.cleanup()

    def adapter(self, module: str, *args: str) -> subprocess.CompletedProcess:
        command = [sys.executable, str(ADAPTER), *SESSION, f"archive.workers.{module}", *args]
        return subprocess.run(command, env=self.env, capture_output=True, text=True, timeout=60)

    def lines(self, out: subprocess.CompletedProcess) -> list[dict]:
        return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]

    def stamps(self, stamp: str = "tags_v1") -> int:
        with sqlite3.connect(self.database) as db:
            return db.execute("select count(*) from stamps where stamp = ?", (stamp,)).fetchone()[0]

    def test_a_verb_gets_its_own_session_committed_on_success_and_rolled_back_on_failure(self):
        self.assertEqual(self.lines(self.adapter("tag_suggest", "count-pending")), [{"pending": 10}])
        failed = self.adapter("tag_suggest", "run", "--batch_size", "3", "--fail_after", "5")
        self.assertEqual(failed.returncode, 1, failed.stderr)
        self.assertIn("tagging failed after 5 documents", failed.stderr)
        self.assertEqual(self.stamps(), 3, "the batch the worker committed stays; the rest was rolled back")
        done = self.adapter("tag_suggest", "run", "--batch_size", "4")
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertEqual(self.lines(done)[-1], {"result": {"processed": 7, "failed": 0}})
        self.assertEqual(self.stamps(), 10, "the adapter committed the last batch")
        self.assertEqual(self.lines(self.adapter("tag_suggest", "count-pending")), [{"pending": 0}])

    def test_sigterm_rolls_back_what_was_not_committed(self):
        command = [sys.executable, str(ADAPTER), *SESSION, "archive.workers.tag_suggest", "run", "--batch_size",
                   "4", "--delay_ms", "300"]
        child = subprocess.Popen(command, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            lines = [child.stdout.readline(), child.stdout.readline()]
            self.assertIn('"progress"', lines[1], lines)
            child.send_signal(signal.SIGTERM)
            _, stderr = child.communicate(timeout=30)
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
        self.assertEqual(child.returncode, 143, stderr)
        self.assertEqual(self.stamps() % 4, 0, "only whole committed batches are kept")
        self.assertLess(self.stamps(), 10)

    def test_describe_reports_what_the_code_declares(self):
        [described] = self.lines(self.adapter("tag_suggest", "describe"))
        self.assertEqual((described["engine"], described["preset"], described["model"]),
                         ("ollama", "fast", "llama3.2:1b"))
        declared = described["declared"]
        self.assertEqual((declared["engine"], declared["preset"]), ("ollama", "fast"))
        self.assertEqual(declared["presets"], {"ollama": {"fast": "llama3.2:1b", "balanced": "qwen2.5:7b",
                                                          "thorough": "qwen2.5:14b"}})
        options = {o["name"]: o for o in declared["options"]}
        self.assertEqual(options["batch_size"], {"name": "batch_size", "type": "integer", "default": 20,
                                                 "minimum": 1, "maximum": 500})
        self.assertEqual(options["max_tags"], {"name": "max_tags", "type": "integer", "default": 5,
                                               "choices": [3, 5, 8]})
        self.assertNotIn("db", options)
        self.assertNotIn("engine_name", options)

    def test_an_engine_from_a_cleaning_rule_is_read_checked_and_reported(self):
        [check] = self.lines(self.adapter("quality_validator", "check"))
        self.assertFalse(check["ready"])
        self.assertIn("no active LLM_CHECK cleaning rule", check["reason"])
        with sqlite3.connect(self.database) as db:
            db.execute("insert into cleaning_rules (id, kind, active, engine, preset, model) "
                       "values (7, 'LLM_CHECK', 1, 'ollama', 'thorough', 'qwen2.5:14b')")
        self.assertEqual(self.lines(self.adapter("quality_validator", "check")), [{"ready": True}])
        [described] = self.lines(self.adapter("quality_validator", "describe"))
        self.assertEqual(described["model"], "qwen2.5:14b")
        self.assertEqual(described["source"]["reference"], "LLM_CHECK rule 7")
        self.assertEqual((described["declared"]["engine"], described["declared"]["preset"]), (None, None))
        run = self.adapter("quality_validator", "run")
        self.assertEqual(run.returncode, 0, run.stderr)
        first = self.lines(run)[0]
        self.assertEqual(first["config"]["model"], "qwen2.5:14b", "the run reports the engine it really uses")
        self.assertEqual(self.stamps("quality_v1"), 10)


if __name__ == "__main__":
    unittest.main()
