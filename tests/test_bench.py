"""benchmarks/bench.py's own logic, quickly: --evals copies (a path, a git revision) become
scratch folders with the right files, the plain thread-pool loop sends its N requests, a
command's CPU time is measured apart from its wall time, and the matrix part's bound and run."""

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _load_bench():
    spec = importlib.util.spec_from_file_location(
        "evals_bench", os.path.join(ROOT, "benchmarks", "bench.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


bench = _load_bench()


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise ValueError(message)


def _in_git():
    try:
        return subprocess.run(["git", "-C", ROOT, "rev-parse", "--verify", "--quiet",
                               "HEAD^{commit}"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, timeout=10).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


class CopiesTest(unittest.TestCase):
    def test_a_path_copy_takes_its_folder_files_and_this_repository_client(self):
        with tempfile.TemporaryDirectory() as folder:
            old = os.path.join(folder, "old_evals.py")
            with open(old, "w", encoding="utf-8") as handle:
                handle.write("print('old')\n")
            with open(os.path.join(folder, "evals_extras.py"), "w", encoding="utf-8") as handle:
                handle.write("# extras\n")
            (copy,) = bench.parse_copies(["before=" + old], _Parser())
            self.assertEqual(copy.label, "before")
            copy.prepare(folder, 0)
            self.assertEqual(sorted(os.listdir(copy.folder)),
                             ["evals.py", "evals_extras.py", "my_client.py"])
            with open(copy.path, encoding="utf-8") as handle:
                self.assertEqual(handle.read(), "print('old')\n")
            self.assertEqual(copy.files["my_client.py"],
                             ("path", os.path.join(ROOT, "my_client.py")))

    def test_labels_stay_distinct_and_a_missing_file_is_refused(self):
        copies = bench.parse_copies([bench.EVALS, bench.EVALS], _Parser())
        self.assertEqual([c.label for c in copies], ["evals.py", "evals.py (2)"])
        with self.assertRaisesRegex(ValueError, "no such file"):
            bench.parse_copies(["x=/no/such/evals.py"], _Parser())

    @unittest.skipUnless(_in_git(), "not a git checkout")
    def test_a_git_revision_is_extracted_with_git_show(self):
        (copy,) = bench.parse_copies(["head=git:HEAD"], _Parser())
        self.assertEqual(copy.files["evals.py"][0], "git")
        with tempfile.TemporaryDirectory() as folder:
            copy.prepare(folder, 0)
            self.assertIn("evals.py", os.listdir(copy.folder))
            self.assertIn("my_client.py", os.listdir(copy.folder))
        with self.assertRaisesRegex(ValueError, "no such git revision"):
            bench.parse_copies(["git:no-such-revision-xyz"], _Parser())


class PlainLoopTest(unittest.TestCase):
    def test_the_loop_sends_n_requests_with_c_in_flight(self):
        with tempfile.TemporaryDirectory() as folder, bench.ChatServer(0.02) as server:
            cases = os.path.join(folder, "cases.jsonl")
            bench.write_simple_cases(cases, 12)
            script = os.path.join(folder, "plain_loop.py")
            with open(script, "w", encoding="utf-8") as handle:
                handle.write(bench.PLAIN_LOOP)
            done = subprocess.run([sys.executable, script, cases, server.url, "4"],
                                  env=bench._base_env(OPENAI_API_KEY="k"),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=30)
            self.assertEqual(done.returncode, 0, done.stderr)
            self.assertEqual(json.loads(done.stdout), {"total": 12, "passed": 12, "errors": 0})
            count, peak = server.stats()
            self.assertEqual(count, 12)
            self.assertTrue(1 <= peak <= 4, peak)  # never more than C in flight


class MeasureTest(unittest.TestCase):
    def test_the_cpu_time_is_the_commands_own_not_its_wall_time(self):
        # a child that sleeps 1 s uses next to no CPU; one that spins until its own process
        # time reaches 0.3 s uses at least that, however busy the machine is
        sleeper = bench.measure([sys.executable, "-c", "import time; time.sleep(1)"], ROOT, 60)
        spinner = bench.measure([sys.executable, "-c", "import time\n"
                                 "while time.process_time() < 0.3: pass"], ROOT, 60)
        self.assertEqual((sleeper["exit"], spinner["exit"]), (0, 0))
        self.assertGreaterEqual(sleeper["wall_s"], 1.0)
        self.assertLess(sleeper["cpu_s"], 0.5)
        self.assertGreaterEqual(spinner["cpu_s"], 0.3)


class MatrixTest(unittest.TestCase):
    def test_the_bound_is_the_runs_one_after_another_or_the_shared_limit(self):
        # 3 runs x ceil(200 / 16) = 13 waves x 0.05 s, one after another: 1.95 s (600
        # requests 16 at a time would be 38 waves, 1.90 s: the runs do not overlap)
        self.assertAlmostEqual(bench.matrix_bound({}, {}, 3, 200, 16, 0.05, 6.0), 1.95)
        # 120 requests a 6 s window, full at the start: the 600th admitted after
        # (600 - 120) / 20 = 24 s, answered 0.05 s later
        limits, costs = {"requests": 120}, {"requests": 1}
        self.assertAlmostEqual(bench.matrix_bound(limits, costs, 3, 200, 16, 0.05, 6.0), 24.05)
        # a limit no run reaches leaves the runs' own bound
        self.assertAlmostEqual(
            bench.matrix_bound({"requests": 1000}, costs, 3, 200, 16, 0.05, 6.0), 1.95)

    def test_the_matrix_calls_the_server_for_every_variant_and_case(self):
        with tempfile.TemporaryDirectory() as folder:
            (copy,) = bench.parse_copies(["now=" + bench.EVALS], _Parser())
            copy.prepare(folder, 0)
            self.assertTrue(bench.has_matrix(copy))
            cases = os.path.join(folder, "cases.jsonl")
            bench.write_simple_cases(cases, 5)
            run = bench.bench_matrix_once(copy, {}, cases, folder, 1)
            self.assertEqual((run["exit"], run["answered"], run["refused"]), (0, 15, 0),
                             run["stderr"])
            with open(os.path.join(folder, "matrix-1", "matrix.json"), encoding="utf-8") as f:
                table = json.load(f)
            self.assertEqual([(v["name"], v["passed"], v["total"]) for v in table["variants"]],
                             [("model-a", 5, 5), ("model-b", 5, 5), ("model-c", 5, 5)])
            os.remove(os.path.join(copy.folder, "evals_extras.py"))
            self.assertFalse(bench.has_matrix(copy))  # as an older copy: no matrix command


if __name__ == "__main__":
    unittest.main()
