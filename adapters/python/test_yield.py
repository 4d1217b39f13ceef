"""Tests of the adapter's side of yielding (docs/worker-protocol.md, "Yielding"): ``describe`` declares ``yield``
for an ``execute`` that takes ``checkpoint``; SIGUSR1 during a run makes the next checkpoint commit, print its line
and raise ``Yielded``, which ends the run with status 75 and no result; a run that ends before another checkpoint
exits 0 as usual. Standard library only: ``python3 -m unittest discover -s adapters/python``. (The archive
example yielding with a real SQLAlchemy session and resuming is in ``test_sessions.py``.)
"""

from __future__ import annotations

import contextlib
import io
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

import scrinalia_worker as adapter
from test_items import run_main

HERE = Path(__file__).resolve().parent
ADAPTER = HERE / "scrinalia_worker.py"

#: A worker that prints a line when each batch is done and checkpoints after it, for as long as it is let.
BATCHING_WORKER = textwrap.dedent("""
    import time

    def execute(batches: int = 1000, pause_ms: int = 20, checkpoint=None):
        for batch in range(1, batches + 1):
            time.sleep(pause_ms / 1000)
            print(f"batch {batch} done", flush=True)
            checkpoint({"batch": batch})
        return {"batches": batches}
""")

#: A worker that checkpoints once, then waits for the file ``go`` and ends without another checkpoint.
FINISHING_WORKER = textwrap.dedent("""
    import os
    import time

    def execute(go: str = "", checkpoint=None):
        checkpoint({"batch": 1})
        print("waiting", flush=True)
        while not os.path.exists(go):
            time.sleep(0.01)
        return {"processed": 1}
""")

#: A worker without checkpoints.
PLAIN_WORKER = textwrap.dedent("""
    def execute(batch_size: int = 2, progress=None):
        return {"processed": batch_size}
""")


class YieldTest(unittest.TestCase):
    def setUp(self):
        self.scratch = tempfile.TemporaryDirectory(prefix="scrinalia-yield-")
        self.folder = Path(self.scratch.name)
        for name, text in (("batching_worker", BATCHING_WORKER), ("finishing_worker", FINISHING_WORKER),
                           ("plain_worker", PLAIN_WORKER)):
            (self.folder / f"{name}.py").write_text(text)
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("SCRINALIA_")}

    def tearDown(self):
        self.scratch.cleanup()

    def start(self, module: str, *args: str) -> subprocess.Popen:
        return subprocess.Popen(
            [sys.executable, str(ADAPTER), str(self.folder / f"{module}.py"), "run", *args],
            cwd=self.folder, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )

    def signal_after(self, child: subprocess.Popen, says: str, then=None) -> tuple[list[str], str]:
        """Reads ``child``'s stdout until a line contains ``says``, sends SIGUSR1, calls ``then`` (if any) and
        waits for the end; every stdout line, and stderr."""
        lines: list[str] = []
        try:
            while not lines or says not in lines[-1]:
                line = child.stdout.readline()
                self.assertTrue(line, f"the worker ended before printing {says!r}: {lines}")
                lines.append(line)
            child.send_signal(signal.SIGUSR1)
            if then is not None:
                then()
            stdout, stderr = child.communicate(timeout=30)
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
        return [line.rstrip("\n") for line in lines + stdout.splitlines()], stderr

    def test_a_worker_that_checkpoints_declares_yield_and_one_that_does_not_does_not(self):
        for module, yields in (("batching_worker", True), ("plain_worker", False)):
            status, stdout, _ = run_main(str(self.folder / f"{module}.py"), "describe")
            self.assertEqual(status, 0)
            capabilities = json.loads(stdout)["capabilities"]
            self.assertEqual((capabilities["yield"], capabilities["checkpoints"]), (yields, yields), module)

    def test_sigusr1_ends_the_run_at_its_next_checkpoint_with_status_75(self):
        child = self.start("batching_worker")
        lines, stderr = self.signal_after(child, '"checkpoint"')
        self.assertEqual(child.returncode, adapter.YIELDED_EXIT_STATUS, stderr)
        self.assertEqual(child.returncode, 75)
        self.assertIn("yielded at a checkpoint, as asked (SIGUSR1); a resume goes on from that checkpoint", stderr)
        self.assertFalse(any('"result"' in line for line in lines), "a yielded run prints no result")
        checkpoints = [json.loads(line)["checkpoint"]["batch"] for line in lines if line.startswith('{"checkpoint"')]
        done = [int(line.split()[1]) for line in lines if line.startswith("batch ")]
        self.assertTrue(lines[-1].startswith('{"checkpoint"'), f"it stops right after a checkpoint: {lines[-3:]}")
        self.assertEqual(checkpoints, done, "each batch it finished is checkpointed, and nothing comes after")
        self.assertLess(len(checkpoints), 1000, "it did not run to its end")

    def test_a_run_that_ends_before_another_checkpoint_exits_0_as_usual(self):
        go = self.folder / "go"
        child = self.start("finishing_worker", f"--go={go}")
        lines, stderr = self.signal_after(child, "waiting", then=go.touch)
        self.assertEqual(child.returncode, 0, stderr)
        self.assertEqual(json.loads(lines[-1]), {"result": {"processed": 1}})

    def test_the_checkpoint_commits_prints_then_raises_yielded(self):
        database = self.folder / "work.sqlite"
        with contextlib.closing(sqlite3.connect(database)) as session:
            session.execute("create table done (batch integer)")
            session.commit()
            session.execute("insert into done values (1)")
            asked = adapter.YieldRequest()
            checkpoint = adapter.checkpoint_callback(session, asked)
            printed = io.StringIO()
            with contextlib.redirect_stdout(printed):
                checkpoint({"batch": 1})
            self.assertEqual(printed.getvalue(), '{"checkpoint":{"batch":1}}\n', "not asked: an ordinary checkpoint")
            session.execute("insert into done values (2)")
            asked.ask()
            with contextlib.redirect_stdout(printed), self.assertRaises(adapter.Yielded):
                checkpoint({"batch": 2})
            self.assertTrue(printed.getvalue().endswith('{"checkpoint":{"batch":2}}\n'), "printed before raising")
            self.assertFalse(issubclass(adapter.Yielded, Exception), "except Exception must not keep the run going")
        with contextlib.closing(sqlite3.connect(database)) as other:
            self.assertEqual(other.execute("select count(*) from done").fetchone()[0], 2, "committed before")


if __name__ == "__main__":
    unittest.main()
