"""Tests of the adapter with a module shaped like the archive's (``examples/archive``): a real SQLAlchemy session
over a SQLite database, given with ``--session``, committed when a verb returns and rolled back when it fails or is
stopped, and committed by each checkpoint; what ``describe`` derives from the signatures and the registries;
``check`` and the run's configuration line; a run resumed from a checkpoint, and one that yielded at a checkpoint
when asked (SIGUSR1). Needs SQLAlchemy (``scripts/test``
installs it): ``python3 -m unittest discover -s adapters/python``.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
ADAPTER = HERE / "scrinalia_worker.py"
EXAMPLES = HERE / "examples"
SESSION = ["--session", "archive.db:SessionLocal", "--registries", "archive.engines:REGISTRIES"]

#: A worker that stamps document 1, checkpoints, stamps document 2 in the same session, then returns, raises or
#: waits to be stopped.
CHECKPOINTING_WORKER = textwrap.dedent("""
    import time

    from archive.db import Stamp

    def execute(db, then: str = "return", checkpoint=None):
        db.add(Stamp(document_id=1, stamp="before"))
        checkpoint({"stamped": 1})
        db.add(Stamp(document_id=2, stamp="after"))
        db.flush()
        if then == "raise":
            raise RuntimeError("failing after the checkpoint, as asked")
        if then == "wait":
            print("waiting", flush=True)
            time.sleep(30)
        return {"processed": 2}
""")


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

    def run_module(self, module: str, *args: str) -> subprocess.CompletedProcess:
        command = [sys.executable, str(ADAPTER), *SESSION, module, "run", *args]
        return subprocess.run(command, env=self.env, capture_output=True, text=True, timeout=60)

    def clear_stamps(self) -> None:
        with sqlite3.connect(self.database) as db:
            db.execute("delete from stamps")

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

    def start(self, module: str, *args: str) -> subprocess.Popen:
        command = [sys.executable, str(ADAPTER), *SESSION, module, "run", *args]
        return subprocess.Popen(command, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def stop_after(
        self, child: subprocess.Popen, says: str, signum: signal.Signals = signal.SIGTERM
    ) -> tuple[list[str], str]:
        """Reads ``child``'s lines until one contains ``says``, sends ``signum``; every line read, and stderr."""
        lines: list[str] = []
        try:
            while not lines or says not in lines[-1]:
                line = child.stdout.readline()
                self.assertTrue(line, f"the worker ended before printing {says!r}: {lines}")
                lines.append(line)
            child.send_signal(signum)
            stdout, stderr = child.communicate(timeout=30)
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
        return lines + stdout.splitlines(keepends=True), stderr

    def test_sigusr1_yields_at_the_next_checkpoint_and_a_resume_tags_each_document_once(self):
        child = self.start("archive.workers.tag_suggest", "--batch_size", "2", "--delay_ms", "150")
        lines, stderr = self.stop_after(child, '"checkpoint"', signal.SIGUSR1)
        self.assertEqual(child.returncode, 75, stderr)
        self.assertIn("yielded at a checkpoint, as asked (SIGUSR1)", stderr)
        self.assertTrue(lines[-1].startswith('{"checkpoint":'), f"the last line is the checkpoint: {lines}")
        self.assertFalse(any('"result"' in line for line in lines), "a yielded run has no result")
        state = json.loads(lines[-1])["checkpoint"]
        self.assertEqual(self.stamps(), state["done"], "the checkpoint names exactly what was committed")
        self.assertLess(state["done"], 10)

        self.env["SCRINALIA_CHECKPOINT"] = json.dumps(state)
        resumed = self.adapter("tag_suggest", "run", "--batch_size", "2")
        self.assertEqual(resumed.returncode, 0, resumed.stderr)
        self.assertEqual(self.lines(resumed)[-1], {"result": {"processed": 10 - state["done"], "failed": 0}})
        with sqlite3.connect(self.database) as db:
            rows = [row[0] for row in db.execute("select document_id from stamps where stamp = 'tags_v1'")]
        self.assertEqual(sorted(rows), list(range(1, 11)), "every document tagged, each once")

    def test_sigterm_rolls_back_what_was_not_committed(self):
        child = self.start("archive.workers.tag_suggest", "--batch_size", "4", "--delay_ms", "300")
        lines, stderr = self.stop_after(child, '"checkpoint"')
        self.assertEqual(child.returncode, 143, stderr)
        self.assertEqual(self.stamps() % 4, 0, "only whole committed batches are kept")
        self.assertLess(self.stamps(), 10)

    def test_a_checkpoint_commits_the_session_and_the_session_stays_usable(self):
        (Path(self.scratch.name) / "checkpointing_worker.py").write_text(CHECKPOINTING_WORKER)
        self.env["PYTHONPATH"] += os.pathsep + self.scratch.name
        child = self.start("checkpointing_worker", "--then", "wait")
        lines, stderr = self.stop_after(child, "waiting")
        self.assertEqual(child.returncode, 143, stderr)
        self.assertEqual(lines[0], '{"checkpoint":{"stamped":1}}\n', "printed once the commit is done")
        self.assertEqual((self.stamps("before"), self.stamps("after")), (1, 0),
                         "what came before the checkpoint is kept; what came after is rolled back")
        self.clear_stamps()
        failed = self.run_module("checkpointing_worker", "--then", "raise")
        self.assertEqual(failed.returncode, 1, failed.stderr)
        self.assertIn("failing after the checkpoint", failed.stderr)
        self.assertEqual((self.stamps("before"), self.stamps("after")), (1, 0), "a failure rolls back the same way")
        self.clear_stamps()
        done = self.run_module("checkpointing_worker")
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertEqual((self.stamps("before"), self.stamps("after")), (1, 1), "committed on return, as before")

    def test_a_run_resumed_from_a_checkpoint_tags_each_document_once(self):
        child = self.start("archive.workers.tag_suggest", "--batch_size", "4", "--delay_ms", "300")
        lines, stderr = self.stop_after(child, '"checkpoint"')
        self.assertEqual(child.returncode, 143, stderr)
        prefix = '{"checkpoint":'
        last = [line.strip()[len(prefix):-1] for line in lines if line.startswith(prefix)][-1]
        state = json.loads(last)
        self.assertEqual(self.stamps(), state["done"], "the checkpoint names exactly what was committed")
        self.assertLess(state["done"], 10)
        with sqlite3.connect(self.database) as db:
            first = {row[0] for row in db.execute("select document_id from stamps")}

        self.env["SCRINALIA_CHECKPOINT"] = last  # the JSON text, as the daemon hands it back
        resumed = self.adapter("tag_suggest", "run", "--batch_size", "2")  # what is left is a whole number of 2s
        self.assertEqual(resumed.returncode, 0, resumed.stderr)
        out = self.lines(resumed)
        self.assertEqual(out[-1], {"result": {"processed": 10 - state["done"], "failed": 0}})
        checkpoints = [line["checkpoint"] for line in out if "checkpoint" in line]
        self.assertEqual(checkpoints[0], {"last_id": state["last_id"] + 2, "done": state["done"] + 2},
                         "it continues after the checkpoint and counts on from it")
        self.assertEqual(checkpoints[-1], {"last_id": 10, "done": 10})
        with sqlite3.connect(self.database) as db:
            rows = [row[0] for row in db.execute("select document_id from stamps where stamp = 'tags_v1'")]
        self.assertEqual(sorted(rows), list(range(1, 11)), "every document tagged, each once")
        self.assertTrue(first < set(rows))

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
