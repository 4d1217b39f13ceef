"""Tests of the Python adapter: flag conversion by signature, the protocol lines of each verb, errors, and a clean
stop on SIGTERM. Standard library only: ``python3 -m unittest discover -s adapters/python``.
"""

from __future__ import annotations

import contextlib
import datetime
import io
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import textwrap
import unittest
from pathlib import Path
from typing import Optional

import scrinalia_worker as adapter

HERE = Path(__file__).resolve().parent
ADAPTER = HERE / "scrinalia_worker.py"


def run_adapter(*args: str, cwd: Path = HERE, env: Optional[dict] = None) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("SCRINALIA_")}
    environment.update(env or {})
    return subprocess.run(
        [sys.executable, str(ADAPTER), *args], cwd=cwd, env=environment, capture_output=True, text=True, timeout=60
    )


def json_lines(stdout: str) -> list[dict]:
    lines = []
    for line in stdout.splitlines():
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            lines.append(value)
    return lines


class ConversionTest(unittest.TestCase):
    def test_values_take_the_type_of_annotations_or_defaults(self):
        def execute(batch_size: int = 5, ratio=0.5, dry_run: bool = False, label="x", limit: Optional[int] = None,
                    engine_name: str = "ollama", progress=None):
            return None

        kwargs = adapter.build_kwargs(
            execute,
            {"batch_size": "7", "ratio": "0.25", "dry_run": "true", "label": "; rm -rf / $(x)", "limit": "3",
             "engine": "ollama", "preset": "fast"},
            {},
        )
        self.assertEqual(
            kwargs,
            {"batch_size": 7, "ratio": 0.25, "dry_run": True, "label": "; rm -rf / $(x)", "limit": 3,
             "engine_name": "ollama"},
        )

    def test_common_flags_fall_back_to_the_environment(self):
        def describe_config(engine: str = "a", preset: str = "b", run_id=None):
            return {}

        kwargs = adapter.build_kwargs(describe_config, {}, {"SCRINALIA_ENGINE": "ollama", "SCRINALIA_RUN_ID": "r"})
        self.assertEqual(kwargs, {"engine": "ollama", "run_id": "r"})

    def test_unknown_options_and_bad_values_are_usage_errors(self):
        def execute(batch_size: int = 5):
            return None

        with self.assertRaisesRegex(adapter.UsageError, "has no option 'colour'; it accepts: batch_size"):
            adapter.build_kwargs(execute, {"colour": "red"}, {})
        with self.assertRaisesRegex(adapter.UsageError, "must be a whole number"):
            adapter.build_kwargs(execute, {"batch_size": "many"}, {})

    def test_var_keyword_functions_take_any_option_as_text(self):
        def count_pending(**options):
            return 0

        self.assertEqual(adapter.build_kwargs(count_pending, {"anything": "1"}, {}), {"anything": "1"})

    def test_flags_parse_both_spellings_and_keep_values_verbatim(self):
        self.assertEqual(
            adapter.parse_flags(["--a", "--not-a-flag", "--b=x=y", "--c", ""]), {"a": "--not-a-flag", "b": "x=y", "c": ""}
        )
        with self.assertRaises(adapter.UsageError):
            adapter.parse_flags(["--a"])
        self.assertEqual(
            adapter.parse_flags(["--threshold=-1", "--label=-x --y", "--offset", "-2"]),
            {"threshold": "-1", "label": "-x --y", "offset": "-2"},
            "a value starting with '-' is a value in both spellings",
        )
        self.assertEqual(
            adapter.parse_adapter_options(["--session=a:b", "--registries", "c:d", "mod", "run"]),
            ({"session": "a:b", "registries": "c:d"}, ["mod", "run"]),
        )
        with self.assertRaises(adapter.UsageError):
            adapter.parse_flags(["value"])

    def test_return_values_become_protocol_objects(self):
        self.assertEqual(adapter.count_line(4), {"pending": 4})
        self.assertEqual(adapter.count_line({"unmeasurable": "why", "done": 3}), {"unmeasurable": "why", "done": 3})
        with self.assertRaises(TypeError):
            adapter.count_line("many")
        oldest = datetime.datetime(2026, 12, 19, 6, 40, tzinfo=datetime.timezone.utc)
        self.assertEqual(
            adapter.count_line({"pending": 62, "oldest_pending_at": oldest}),
            {"pending": 62, "oldest_pending_at": "2026-12-19T06:40:00Z"},
        )
        self.assertEqual(adapter.count_line({"pending": 0, "oldest_pending_at": None}), {"pending": 0})
        self.assertEqual(adapter.result_line(None), {})
        self.assertEqual(adapter.result_line(5), {"processed": 5})
        self.assertEqual(adapter.result_line({"processed": 1, "failed": 0}), {"processed": 1, "failed": 0})


class ProtocolTest(unittest.TestCase):
    def setUp(self):
        self.scratch = tempfile.TemporaryDirectory(prefix="scrinalia-adapter-")
        self.folder = self.scratch.name

    def tearDown(self):
        self.scratch.cleanup()

    def test_describe_prints_the_engine_configuration(self):
        out = run_adapter("example_worker", "describe", "--engine", "ollama", "--preset", "thorough", "--batch_size", "3")
        self.assertEqual(out.returncode, 0, out.stderr)
        [described] = json_lines(out.stdout)
        declared = described.pop("declared")
        capabilities = described.pop("capabilities")
        self.assertEqual(
            described,
            {"engine": "ollama", "preset": "thorough", "model": "qwen2.5:14b", "endpoint": "http://127.0.0.1:11434"},
        )
        self.assertEqual((declared["engine"], declared["preset"]), ("ollama", "fast"), "execute's defaults")
        self.assertEqual(
            capabilities, {"items": True, "scope": True, "shards": False, "checkpoints": False, "yield": False}
        )

    def test_count_pending_falls_after_a_run_that_reports_progress_and_a_result(self):
        out = run_adapter("example_worker", "count-pending", "--folder", self.folder, "--batch_size", "3")
        self.assertEqual(json_lines(out.stdout), [{"pending": 20}], out.stderr)
        out = run_adapter("example_worker", "run", "--run-id", "r-1", "--folder", self.folder, "--batch_size", "8",
                          "--delay_ms", "0", "--engine", "ollama", "--preset", "fast", "--model", "llama3.2:1b")
        self.assertEqual(out.returncode, 0, out.stderr)
        lines = json_lines(out.stdout)
        progress = [line["progress"] for line in lines if "progress" in line]
        self.assertEqual([(p["done"], p["total"]) for p in progress], [(8, 20), (16, 20), (20, 20)])
        self.assertEqual(lines[-1], {"result": {"processed": 20, "failed": 0, "run_id": "r-1"}})
        self.assertIn("reviewed item 1", out.stderr)
        out = run_adapter("example_worker", "count-pending", "--folder", self.folder)
        self.assertEqual(json_lines(out.stdout), [{"pending": 0}])

    def test_a_worker_error_prints_a_traceback_and_exits_1(self):
        out = run_adapter("example_worker", "run", "--folder", self.folder, "--fail", "true", "--delay_ms", "0")
        self.assertEqual(out.returncode, 1)
        self.assertIn("Traceback", out.stderr)
        self.assertIn("RuntimeError: item 20 cannot be reviewed", out.stderr)
        self.assertFalse(any("result" in line for line in json_lines(out.stdout)))

    def test_usage_errors_exit_2_with_a_sentence(self):
        for args, says in [
            (["example_worker", "dance"], "not a verb"),
            (["example_worker", "run", "--colour", "red"], "has no option 'colour'"),
            (["example_worker", "run", "--batch_size", "many"], "must be a whole number"),
            (["no_such_module_here", "run"], "no worker module"),
            (["example_worker"], "a worker module and a verb"),
        ]:
            out = run_adapter(*args)
            self.assertEqual(out.returncode, 2, (args, out.stderr))
            self.assertIn(says, out.stderr)
            self.assertEqual(out.stdout, "")

    def test_option_values_starting_with_a_dash_reach_execute_intact(self):
        module = Path(self.folder) / "signed_worker.py"
        module.write_text(textwrap.dedent("""
            def execute(threshold: int = 0, label: str = "", run_id=None):
                return {"threshold": threshold, "label": label, "run_id": run_id}
        """))
        out = run_adapter(str(module), "run", "--run-id=r-1", "--threshold=-1", "--label=-x --y", cwd=Path(self.folder))
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(json_lines(out.stdout)[-1], {"result": {"threshold": -1, "label": "-x --y", "run_id": "r-1"}})

    def test_a_module_given_by_path_without_describe_config_echoes_its_flags(self):
        module = Path(self.folder) / "bare_worker.py"
        module.write_text(textwrap.dedent("""
            def execute(**options):
                return {"processed": len(options), "failed": 0}

            def count_pending(**options):
                return {"unmeasurable": "Nobody can count this.", "done": 2}
        """))
        out = run_adapter(str(module), "describe", "--engine", "ollama", cwd=Path(self.folder))
        [described] = json_lines(out.stdout)
        declared = described.pop("declared")
        capabilities = described.pop("capabilities")
        self.assertEqual(described, {"engine": "ollama", "preset": None, "model": None, "endpoint": None})
        self.assertEqual(declared, {"options": [], "engine": None, "preset": None, "presets": {}})
        self.assertFalse(any(capabilities.values()), "**options takes none of the adapter's parameters")
        out = run_adapter(str(module), "count-pending", cwd=Path(self.folder))
        self.assertEqual(json_lines(out.stdout), [{"unmeasurable": "Nobody can count this.", "done": 2}])
        out = run_adapter(str(module), "run", "--x", "1", "--y", "2", cwd=Path(self.folder))
        self.assertEqual(json_lines(out.stdout), [{"result": {"processed": 2, "failed": 0}}])

    def test_sigterm_stops_the_run_cleanly_and_keeps_its_work(self):
        environment = {k: v for k, v in os.environ.items() if not k.startswith("SCRINALIA_")}
        child = subprocess.Popen(
            [sys.executable, str(ADAPTER), "example_worker", "run", "--folder", self.folder, "--delay_ms", "300",
             "--batch_size", "1"],
            cwd=HERE, env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        try:
            first = child.stdout.readline()
            self.assertIn('"config"', first, "the run first reports the configuration it uses")
            self.assertIn("progress", child.stdout.readline())
            child.send_signal(signal.SIGTERM)
            _, stderr = child.communicate(timeout=30)
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
        self.assertEqual(child.returncode, 143, stderr)
        self.assertIn("stopped by SIGTERM", stderr)
        out = run_adapter("example_worker", "count-pending", "--folder", self.folder)
        pending = json_lines(out.stdout)[0]["pending"]
        self.assertLess(pending, 20)


CONTINUING_WORKER = """
import json

def execute(batch_size: int = 2, checkpoint=None, resume_from=None, restart_of=None):
    if batch_size == 0:
        for state in ({1, 2}, "x" * 70000):
            try:
                checkpoint(state)
            except ValueError as error:
                print(error)
        return {}
    checkpoint({"after": batch_size, "note": "caf\u00e9"})
    return {"resume_from": resume_from, "restart_of": restart_of}
"""


class CheckpointTest(unittest.TestCase):
    def setUp(self):
        self.scratch = tempfile.TemporaryDirectory(prefix="scrinalia-adapter-")
        self.folder = Path(self.scratch.name)
        (self.folder / "continuing_worker.py").write_text(CONTINUING_WORKER)

    def tearDown(self):
        self.scratch.cleanup()

    def run_worker(self, *args: str, env: Optional[dict] = None) -> subprocess.CompletedProcess:
        return run_adapter("continuing_worker", *args, cwd=self.folder, env=env)

    def test_the_callback_prints_the_compact_json_line_and_flushes_it(self):
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            adapter.checkpoint_callback(None)({"last_id": 7, "name": "caf\u00e9"})
        self.assertEqual(printed.getvalue(), '{"checkpoint":{"last_id":7,"name":"caf\u00e9"}}\n')

    def test_a_state_that_is_not_json_or_over_64_kib_raises_a_sentence_and_prints_nothing(self):
        checkpoint = adapter.checkpoint_callback(None)
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            for state, says in [
                ({"seen": {1, 2}}, "The checkpoint state cannot be written as JSON (Object of type set"),
                ({"ratio": float("nan")}, "The checkpoint state cannot be written as JSON"),
                ("x" * 65535, "is 65537 bytes of JSON, more than the 65536 bytes (64 KiB) the daemon keeps"),
                ("\u00e9" * 32768, "is 65538 bytes of JSON"),
            ]:
                with self.assertRaisesRegex(ValueError, re.escape(says)):
                    checkpoint(state)
            checkpoint("x" * 65534)  # 65,536 bytes with its quotes: the largest the daemon keeps
        self.assertEqual(len(printed.getvalue()), len('{"checkpoint":}\n') + 65536)

    def test_a_run_checkpoints_and_receives_what_it_continues(self):
        fresh = self.run_worker("run", "--batch_size", "3")
        self.assertEqual(fresh.returncode, 0, fresh.stderr)
        self.assertEqual(fresh.stdout.splitlines()[0], '{"checkpoint":{"after":3,"note":"caf\u00e9"}}')
        self.assertEqual(json_lines(fresh.stdout)[-1], {"result": {"resume_from": None, "restart_of": None}})
        resumed = self.run_worker("run", env={"SCRINALIA_CHECKPOINT": '{"after":3,"note":"caf\u00e9"}'})
        self.assertEqual(json_lines(resumed.stdout)[-1],
                         {"result": {"resume_from": {"after": 3, "note": "caf\u00e9"}, "restart_of": None}})
        restarted = self.run_worker("run", env={"SCRINALIA_RESTART_OF": "0190c0de-0000-7000-8000-000000000001"})
        self.assertEqual(json_lines(restarted.stdout)[-1],
                         {"result": {"resume_from": None, "restart_of": "0190c0de-0000-7000-8000-000000000001"}})

    def test_a_refused_checkpoint_reaches_the_worker_as_a_value_error_and_prints_no_line(self):
        out = self.run_worker("run", "--batch_size", "0")
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertFalse(any("checkpoint" in line for line in json_lines(out.stdout)), out.stdout)
        self.assertIn("cannot be written as JSON (Object of type set is not JSON serializable)", out.stdout)
        self.assertIn("is 70002 bytes of JSON, more than the 65536 bytes (64 KiB)", out.stdout)

    def test_the_adapters_parameters_are_not_options(self):
        [described] = json_lines(self.run_worker("describe").stdout)
        self.assertEqual([o["name"] for o in described["declared"]["options"]], ["batch_size"])
        for flag in ("checkpoint", "resume_from", "restart_of"):
            out = self.run_worker("run", f"--{flag}", "{}")
            self.assertEqual(out.returncode, 2, out.stderr)
            self.assertIn(f"{flag!r} is the adapter's to give, not an option", out.stderr)

    def test_an_unreadable_checkpoint_exits_2_before_anything_runs(self):
        out = self.run_worker("run", env={"SCRINALIA_CHECKPOINT": '{"after": 3'})
        self.assertEqual(out.returncode, 2)
        self.assertIn("SCRINALIA_CHECKPOINT is not JSON", out.stderr)
        self.assertIn("so the checkpoint to resume from cannot be read", out.stderr)
        self.assertEqual(out.stdout, "")


if __name__ == "__main__":
    unittest.main()
