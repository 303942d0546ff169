"""`evals.py matrix`: variants run as normal runs, compared with the reference by McNemar's
exact test with Holm's correction. Every p-value here is computed by hand: d cases worse and
none better give the two-sided p = 2 * 0.5**d (5: 0.0625, 6: 0.03125, 7: 0.015625)."""

import io
import json
import os
import shutil
import tempfile
import unittest

import evals
import evals_extras

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def case_line(number, tags=()):
    return json.dumps(
        {
            "id": f"c{number:02}",
            "input": f"question {number}",
            "tags": list(tags),
            "checks": [{"type": "equals", "value": "yes"}],
        }
    )


class MatrixCase(unittest.TestCase):
    """A temporary folder; `cases(n)` writes n cases answered right by "yes"."""

    def setUp(self):
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.dir = tmp.name

    def write(self, name, lines):
        with open(os.path.join(self.dir, name), "w", encoding="utf-8") as handle:
            handle.write("".join(line + "\n" for line in lines))

    def cases(self, count, tagged=()):
        """`count` cases; those numbered in `tagged` carry the tag "t"."""
        self.write(
            "cases.jsonl", [case_line(n, ["t"] * (n in tagged)) for n in range(1, count + 1)]
        )

    def answers(self, name, count, wrong=()):
        """Recordings NAME.jsonl: "yes" to every case but those numbered in `wrong`."""
        rows = [
            json.dumps({"id": f"c{n:02}", "output": "no" if n in wrong else "yes"})
            for n in range(1, count + 1)
        ]
        self.write(f"{name}.jsonl", rows)
        return json.dumps({"name": name, "recordings": f"{name}.jsonl"})

    def main(self, *argv):
        out, err = io.StringIO(), io.StringIO()
        cwd = os.getcwd()
        os.chdir(self.dir)
        try:
            code = evals.main(["matrix", *argv], out, err)
        finally:
            os.chdir(cwd)
        return code, out.getvalue(), err.getvalue()

    def table(self):
        with open(os.path.join(self.dir, "runs", "matrix.json"), encoding="utf-8") as handle:
            table = json.load(handle)
        return table, {row["name"]: row for row in table["variants"]}


class ExactTestThresholdTest(MatrixCase):
    """One comparison: Holm changes nothing, and 6 cases all worse are the fewest the test
    calls a difference at 0.05."""

    def run_worse_by(self, wrong, count=10):
        self.cases(count)
        self.write("variants.jsonl", [self.answers("ref", count), self.answers("b", count, wrong)])
        return self.main("--variants", "variants.jsonl", "--gate", "b")

    def test_five_cases_worse_is_no_detectable_difference(self):
        code, out, err = self.run_worse_by(range(1, 6))
        self.assertEqual(code, 0, err)
        _, rows = self.table()
        self.assertEqual(rows["b"]["versus"]["p_two_sided"], 0.0625)
        self.assertEqual(rows["b"]["versus"]["p_holm"], 0.0625)
        self.assertEqual(rows["b"]["versus"]["verdict"], "no_difference")
        self.assertEqual(rows["b"]["versus"]["detectable"], 6)
        self.assertIn(
            "b: 5 cases worse, 0 better of 10; McNemar's exact p = 0.0625, Holm-adjusted "
            "0.0625: no detectable difference; these 10 cases detect only a difference of 6 "
            "or more all one way (60.0%)",
            out,
        )

    def test_six_cases_worse_is_significantly_worse(self):
        code, out, err = self.run_worse_by(range(1, 7))
        self.assertEqual(code, 1)
        _, rows = self.table()
        self.assertEqual(rows["b"]["versus"]["p_two_sided"], 0.03125)
        self.assertEqual(rows["b"]["versus"]["verdict"], "worse")
        self.assertEqual((rows["b"]["passed"], rows["b"]["total"]), (4, 10))
        self.assertIn("significantly worse", out)
        self.assertIn("evals: exit 1: b is significantly worse than ref", err)

    def test_a_p_value_equal_to_alpha_is_significant(self):
        # as `compare`: p <= alpha; 6 of 6 gives exactly 0.03125
        self.cases(10)
        self.write("variants.jsonl", [self.answers("ref", 10), self.answers("b", 10, range(1, 7))])
        code, _, _ = self.main("--variants", "variants.jsonl", "--gate", "b", "--alpha", "0.03125")
        self.assertEqual(code, 1)
        code, _, _ = self.main("--variants", "variants.jsonl", "--gate", "b", "--alpha", "0.031")
        self.assertEqual(code, 0)

    def test_cases_better_count_against_the_worse(self):
        # 7 worse, 1 better: p = 2 * (C(8,0) + C(8,1)) / 2**8 = 18/256 = 0.0703125
        self.cases(10)
        self.write(
            "variants.jsonl",
            [self.answers("ref", 10, wrong=[10]), self.answers("b", 10, range(1, 8))],
        )
        code, _, err = self.main("--variants", "variants.jsonl", "--gate", "b")
        self.assertEqual(code, 0, err)
        _, rows = self.table()
        versus = rows["b"]["versus"]
        self.assertEqual((versus["worse"], versus["better"]), (7, 1))
        self.assertEqual(versus["p_two_sided"], 18 / 256)
        self.assertEqual(versus["verdict"], "no_difference")

    def test_five_cases_are_too_few_for_any_difference(self):
        # 5 of 5 all one way: p = 0.0625 > 0.05
        code, out, _ = self.run_worse_by(range(1, 6), count=5)
        self.assertEqual(code, 0)
        _, rows = self.table()
        self.assertIsNone(rows["b"]["versus"]["detectable"])
        self.assertIn("5 cases are too few to detect any difference", out)

    def test_min_pass_rate_gates_the_named_variant(self):
        self.cases(10)
        self.write("variants.jsonl", [self.answers("ref", 10), self.answers("b", 10, [1])])
        code, _, err = self.main(
            "--variants", "variants.jsonl", "--gate", "b", "--min-pass-rate", "95%"
        )
        self.assertEqual(code, 1)
        self.assertIn("evals: exit 1: b's pass rate 90.0% is below --min-pass-rate 95.0%", err)
        code, _, err = self.main(
            "--variants", "variants.jsonl", "--gate", "b", "--min-pass-rate", "90%"
        )
        self.assertEqual(code, 0, err)


class HolmTest(MatrixCase):
    """Two comparisons: the smaller p is held to alpha / 2 = 0.025, then the other to 0.05."""

    def run_three(self, b_wrong, c_wrong):
        self.cases(10)
        self.write(
            "variants.jsonl",
            [
                self.answers("ref", 10),
                self.answers("b", 10, b_wrong),
                self.answers("c", 10, c_wrong),
            ],
        )
        return self.main("--variants", "variants.jsonl", "--gate", "b")

    def test_a_third_variant_makes_six_worse_borderline(self):
        # b: p = 0.03125 alone would be significant; sorted first of two, 2 * 0.03125 = 0.0625
        code, out, err = self.run_three(range(1, 7), ())
        self.assertEqual(code, 0, err)
        _, rows = self.table()
        self.assertEqual(rows["b"]["versus"]["p_holm"], 0.0625)
        self.assertEqual(rows["b"]["versus"]["verdict"], "no_difference")
        self.assertEqual(rows["c"]["versus"]["p_holm"], 1.0)
        # the smallest difference at alpha / 2: 7 of 10 (p = 0.015625 <= 0.025)
        self.assertEqual(rows["b"]["versus"]["detectable"], 7)
        self.assertIn("Holm over 2 comparisons", out)

    def test_the_step_down_rejects_both(self):
        # c: p = 0.015625 <= 0.025 (adjusted 0.03125); then b: 0.03125 <= 0.05
        code, _, err = self.run_three(range(1, 7), range(1, 8))
        self.assertEqual(code, 1)
        _, rows = self.table()
        self.assertEqual(rows["c"]["versus"]["p_holm"], 0.03125)
        self.assertEqual(rows["b"]["versus"]["p_holm"], 0.03125)
        self.assertEqual(rows["b"]["versus"]["verdict"], "worse")
        self.assertEqual(rows["c"]["versus"]["verdict"], "worse")

    def test_the_step_down_stops_at_the_first_that_fails(self):
        # c: p = 0.0625 > 0.025: neither is rejected, b's 0.5 adjusted to max(0.125, 0.5)
        code, _, _ = self.run_three([1, 2], range(1, 6))
        self.assertEqual(code, 0)
        _, rows = self.table()
        self.assertEqual(rows["c"]["versus"]["p_holm"], 0.125)
        self.assertEqual(rows["b"]["versus"]["p_holm"], 0.5)

    def test_holm_adjusted_by_hand(self):
        # sorted 0.01, 0.03, 0.04: 3 * 0.01 = 0.03; 2 * 0.03 = 0.06; max(0.06, 1 * 0.04)
        adjusted = evals_extras.holm_adjusted([0.01, 0.04, 0.03])
        self.assertEqual([round(p, 12) for p in adjusted], [0.03, 0.06, 0.06])
        self.assertEqual(evals_extras.holm_adjusted([0.6, 0.9]), [1.0, 1.0])

    def test_smallest_detectable_by_hand(self):
        self.assertEqual(evals_extras.smallest_detectable(10, 0.05), 6)
        self.assertEqual(evals_extras.smallest_detectable(22, 0.025), 7)
        self.assertIsNone(evals_extras.smallest_detectable(5, 0.05))

    def test_per_tag(self):
        # the tag holds cases 1-6, all six worse in b: p = 0.03125 alone; Holm over b and c
        self.cases(10, tagged=range(1, 7))
        self.write(
            "variants.jsonl",
            [
                self.answers("ref", 10),
                self.answers("b", 10, range(1, 7)),
                self.answers("c", 10, range(1, 8)),
            ],
        )
        code, out, _ = self.main("--variants", "variants.jsonl")
        self.assertEqual(code, 0)
        table, _ = self.table()
        tag = table["tags"]["t"]
        self.assertEqual(tag["variants"]["b"], {"passed": 0, "total": 6})
        self.assertEqual(tag["versus"]["b"]["p_two_sided"], 0.03125)
        self.assertEqual(tag["versus"]["b"]["p_holm"], 0.0625)  # c's is 0.03125 too
        self.assertEqual(tag["versus"]["c"]["verdict"], "no_difference")
        self.assertIn("\nt    6/6  0/6  0/6\n", out)


class RunsTest(MatrixCase):
    def test_each_variant_runs_in_its_own_environment(self):
        self.cases(4)
        self.write(
            "client.py",
            ["import os", "def ask(prompt):", "    return os.environ['ANSWER']"],
        )
        self.write(
            "variants.jsonl",
            [
                json.dumps({"name": "right", "client": "client:ask", "env": {"ANSWER": "yes"}}),
                json.dumps({"name": "wrong", "client": "client:ask", "env": {"ANSWER": "no"}}),
            ],
        )
        code, _, err = self.main("--variants", "variants.jsonl")
        self.assertEqual(code, 0, err)
        _, rows = self.table()
        self.assertEqual((rows["right"]["passed"], rows["wrong"]["passed"]), (4, 0))
        self.assertEqual(rows["wrong"]["versus"]["worse"], 4)
        self.assertEqual(rows["right"]["client"], "client:ask")
        # With --cache, twice: each variant its own answers, never the other's (the cache
        # knows a client by its code; these two differ only in their environment).
        for _ in range(2):
            code, _, err = self.main("--variants", "variants.jsonl", "--cache")
            self.assertEqual(code, 0, err)
            _, rows = self.table()
            self.assertEqual((rows["right"]["passed"], rows["wrong"]["passed"]), (4, 0))

    def test_a_signal_to_the_matrix_alone_stops_its_running_variant(self):
        import signal
        import subprocess
        import sys
        import time

        self.cases(30)
        self.write("client.py", [
            "import os, time",
            "def ask(prompt):",
            "    with open('child.pid', 'w') as handle:",
            "        handle.write(str(os.getpid()))",
            "    time.sleep(0.5)",
            "    return 'yes'",
        ])
        self.write("variants.jsonl", [json.dumps({"name": "slow", "client": "client:ask"}),
                                      json.dumps({"name": "other", "client": "client:ask"})])
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env = {k: v for k, v in os.environ.items() if not k.startswith("EVALS_")}
        process = subprocess.Popen(
            [sys.executable, os.path.join(root, "evals.py"), "matrix", "--variants",
             "variants.jsonl"], cwd=self.dir, env=env, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True)
        self.addCleanup(lambda: process.poll() is None and (process.kill(), process.wait()))
        pid_file = os.path.join(self.dir, "child.pid")
        deadline = time.monotonic() + 30
        while not os.path.exists(pid_file):
            self.assertLess(time.monotonic(), deadline, "the variant never called its client")
            time.sleep(0.05)
        with open(pid_file) as handle:
            child = int(handle.read())
        process.send_signal(signal.SIGINT)  # the matrix's own pid, not its process group
        _, err = process.communicate(timeout=30)
        self.assertEqual(process.returncode, 130, err)
        with self.assertRaises(ProcessLookupError):  # the variant's run ended with it
            os.kill(child, 0)
        self.assertFalse(os.path.exists(os.path.join(self.dir, "runs", "slow.json")))

    def test_repeat_gives_pass_at_k(self):
        self.cases(4)
        self.write(
            "client.py",
            [
                "def ask(prompt, *, attempt=0):",
                "    if prompt == 'question 1' and attempt == 0:",
                "        return 'no'",
                "    return 'yes'",
            ],
        )
        self.write("variants.jsonl", [json.dumps({"name": "b", "client": "client:ask"})])
        code, out, err = self.main(
            "--variants", "variants.jsonl", "--variant", "a=client:ask", "--repeat", "3"
        )
        self.assertEqual(code, 0, err)
        table, rows = self.table()
        self.assertEqual(rows["b"]["passed"], 4)  # c01 passes 2 of 3 calls: a majority
        code, out, err = self.main(
            "--variants",
            "variants.jsonl",
            "--variant",
            "a=client:ask",
            "--repeat",
            "3",
            "--min-pass",
            "3",
        )
        self.assertEqual(code, 0, err)
        _, rows = self.table()
        self.assertEqual(rows["b"]["passed"], 3)
        # c01 passes 2 of 3 calls: pass@1 2/3, pass@3 1, pass^3 0; the others 3 of 3
        self.assertEqual(rows["b"]["pass_at"], {"1": (2 / 3 + 3) / 4, "3": 1.0})
        self.assertEqual(rows["b"]["pass_all"]["3"], 0.75)
        self.assertIn("pass@3 100.0%, pass^3 75.0%", out)

    def test_recordings_cannot_repeat(self):
        self.cases(2)
        self.write("variants.jsonl", [self.answers("ref", 2), self.answers("b", 2)])
        code, out, err = self.main("--variants", "variants.jsonl", "--repeat", "3")
        self.assertEqual(code, 2)
        self.assertIn("variant ref (variants.jsonl:1): ref.jsonl: recordings hold one", err)
        self.assertEqual(out, "")

    def test_an_errored_case_makes_the_matrix_incomplete(self):
        self.cases(3)
        self.write(
            "client.py",
            [
                "def ask(prompt):",
                "    if prompt.endswith('3'):",
                "        raise RuntimeError('upstream 503')",
                "    return 'yes'",
            ],
        )
        self.write("variants.jsonl", [self.answers("ref", 3)])
        code, out, err = self.main("--variants", "variants.jsonl", "--variant", "live=client:ask")
        self.assertEqual(code, 2)
        _, rows = self.table()
        self.assertEqual(rows["live"]["errored"], 1)
        self.assertIn("the matrix is incomplete", err)
        self.assertIn("[live] ", err)  # what its run said, passed on

    def test_a_variant_that_errs_on_every_case(self):
        self.cases(2)
        self.write("client.py", ["def ask(prompt):", "    raise RuntimeError('down')"])
        self.write("variants.jsonl", [self.answers("ref", 2)])
        code, out, err = self.main("--variants", "variants.jsonl", "--variant", "live=client:ask")
        self.assertEqual(code, 2)
        _, rows = self.table()
        self.assertEqual(rows["live"]["errored"], 2)
        self.assertEqual(rows["live"]["versus"]["paired"], 0)
        self.assertEqual(rows["live"]["versus"]["verdict"], "no_difference")
        self.assertIn("live     0.0% (0/2)", out)

    def test_the_reference_need_not_come_first(self):
        self.cases(8, tagged=range(1, 7))
        self.write("variants.jsonl", [self.answers("a", 8, range(1, 7)), self.answers("ref", 8)])
        code, out, err = self.main("--variants", "variants.jsonl", "--reference", "ref")
        self.assertEqual(code, 0, err)
        table, rows = self.table()
        self.assertEqual(table["reference"], "ref")
        self.assertIsNone(rows["ref"]["versus"])
        self.assertEqual(rows["a"]["versus"]["verdict"], "worse")  # 6 of 8: p = 0.03125
        self.assertIn("\ntag  a          ref\nt    0/6 worse  6/6\n", out)

    def test_a_variant_whose_run_refuses_to_start(self):
        # its environment holds a value its run refuses before any call: no record, exit 2
        self.cases(2)
        self.write("client.py", ["def ask(prompt):", "    return 'yes'"])
        self.write(
            "variants.jsonl",
            [
                self.answers("ref", 2),
                json.dumps({"name": "b", "client": "client:ask", "env": {"EVALS_CACHE": "maybe"}}),
            ],
        )
        code, _, err = self.main("--variants", "variants.jsonl")
        self.assertEqual(code, 2)
        self.assertIn("[b] evals: EVALS_CACHE must be 1 (on) or 0 (off), got 'maybe'", err)
        self.assertIn("evals: variant b (variants.jsonl:2) wrote no run record (exit 2;", err)
        self.assertFalse(os.path.exists(os.path.join(self.dir, "runs", "matrix.json")))

    def test_records_are_normal_records(self):
        self.cases(10)
        self.write("variants.jsonl", [self.answers("ref", 10), self.answers("b", 10, range(7))])
        self.main("--variants", "variants.jsonl")
        out, err = io.StringIO(), io.StringIO()
        runs = os.path.join(self.dir, "runs")
        code = evals.main(
            ["compare", os.path.join(runs, "ref.json"), os.path.join(runs, "b.json")], out, err
        )
        self.assertEqual(code, 1, err.getvalue())  # 6 worse: one-sided p = 1/64
        self.assertIn("6 passed in A only, 0 in B only", out.getvalue())

    def test_reports(self):
        self.cases(3)
        self.write(
            "variants.jsonl",
            [
                self.answers("ref", 3),
                json.dumps({"name": "b", "recordings": "b.jsonl"}),
            ],
        )
        self.write(
            "b.jsonl",
            [
                json.dumps({"id": "c01", "output": "yes"}),
                json.dumps({"id": "c02", "output": "yes"}),
                json.dumps({"id": "c03", "output": "<script>x</script>"}),
            ],
        )
        code, _, err = self.main(
            "--variants", "variants.jsonl", "--html", "m.html", "--markdown", "m.md"
        )
        self.assertEqual(code, 0, err)
        with open(os.path.join(self.dir, "m.html"), encoding="utf-8") as handle:
            page = handle.read()
        self.assertNotIn("<script>", page)
        self.assertIn("&lt;script&gt;x&lt;/script&gt;", page)
        grid = page[page.index("<th>case</th>") :]
        self.assertLess(grid.index(">c03<"), grid.index(">c01<"))  # the failing row first
        self.assertEqual(grid.count("<details>"), 6)  # a cell a case and variant
        self.assertIn(
            '<li class="fail">equals: expected &#x27;yes&#x27;, got '
            "&#x27;&lt;script&gt;x&lt;/script&gt;&#x27;</li>",
            grid,
        )
        self.assertIn('<li class="pass">equals: equals &#x27;yes&#x27;</li>', grid)
        with open(os.path.join(self.dir, "m.md"), encoding="utf-8") as handle:
            self.assertTrue(handle.read().startswith("## \u2705 evals: matrix, 2 variants"))
        # run again: the files are this tool's, so they are replaced
        code, _, err = self.main(
            "--variants", "variants.jsonl", "--html", "m.html", "--markdown", "m.md"
        )
        self.assertEqual(code, 0, err)


class ValidationTest(MatrixCase):
    def test_names_that_would_share_a_file_and_text_that_is_not_utf8(self):
        self.cases(2)
        self.answers("ref", 2)
        self.write("variants.jsonl", [
            json.dumps({"name": "Ref", "recordings": "ref.jsonl"}),
            json.dumps({"name": "ref", "recordings": "ref.jsonl"}),
            json.dumps({"name": "matrix", "recordings": "ref.jsonl"}),
        ])
        with open(os.path.join(self.dir, "variants.jsonl"), "ab") as handle:
            handle.write(b'{"name": "caf\xe9", "recordings": "ref.jsonl"}\n')
        code, out, err = self.main("--variants", "variants.jsonl")
        self.assertEqual((code, out), (2, ""))
        for line in ("variants.jsonl:2: name: 'ref' is also line 1's (names that differ only "
                     "in case would share a file)",
                     "variants.jsonl:3: name: 'matrix' names the table's own file",
                     "variants.jsonl:4: not UTF-8 text"):
            self.assertIn(line, err)
        self.assertNotIn("Traceback", err)


    def test_each_problem_is_named_by_file_line_and_field(self):
        self.cases(2)
        self.answers("ref", 2)
        self.write(
            "variants.jsonl",
            [
                json.dumps({"name": "ref", "recordings": "ref.jsonl"}),
                json.dumps({"name": "b", "clinet": "client:ask"}),
                "",
                json.dumps({"name": "ref", "recordings": "missing.jsonl"}),
                json.dumps({"name": "c", "client": "client:ask", "env": {"EVALS_MODLE": "x"}}),
                json.dumps({"name": "d e", "recordings": "ref.jsonl", "env": {"A": "1"}}),
                "{not json",
            ],
        )
        self.write("client.py", ["def ask(prompt):", "    return 'yes'"])
        code, out, err = self.main("--variants", "variants.jsonl")
        self.assertEqual(code, 2)
        self.assertEqual(out, "")
        for line in (
            "variants.jsonl:2: clinet: unknown field; did you mean 'client'?",
            'variants.jsonl:2: client: give either "client" (module:function) or "recordings"',
            "variants.jsonl:4: recordings: ",
            "missing.jsonl: cannot read recorded outputs: No such file or directory",
            "variants.jsonl:4: name: 'ref' is also line 1's",
            "variants.jsonl:5: env.EVALS_MODLE: not a variable evals or my_client reads; "
            "did you mean 'EVALS_MODEL'?",
            "variants.jsonl:6: name: expected letters, digits",
            "variants.jsonl:6: env: a replayed variant calls no client",
            "variants.jsonl:7: not valid JSON",
            "evals: 8 problems in the variants file; no model was called",
        ):
            self.assertIn(line, err)
        self.assertFalse(os.path.exists(os.path.join(self.dir, "runs")))

    def test_options(self):
        self.cases(2)
        self.write("variants.jsonl", [self.answers("ref", 2), self.answers("b", 2)])
        for argv, said in (
            (["--gate", "bb"], "--gate 'bb': no such variant; did you mean 'b'?"),
            (["--gate", "ref"], "--gate ref: it is the reference, compared with itself"),
            (["--reference", "x"], "--reference 'x': no such variant."),
            (["--min-pass-rate", "0.9"], "--min-pass-rate needs --gate NAME"),
            (["--variant", "b=b.jsonl"], "variant 'b' is declared twice"),
            (["--min-pass", "2"], "--min-pass 2 is more than --repeat 1"),
        ):
            with self.subTest(argv=argv):
                code, _, err = self.main("--variants", "variants.jsonl", *argv)
                self.assertEqual(code, 2)
                self.assertIn(said, err)
        code, _, err = self.main("--variant", "only=ref.jsonl")
        self.assertEqual(code, 2)
        self.assertIn("a matrix needs at least two variants", err)

    def test_a_file_not_written_by_this_tool_is_kept(self):
        self.cases(2)
        self.write("variants.jsonl", [self.answers("ref", 2), self.answers("b", 2)])
        os.mkdir(os.path.join(self.dir, "runs"))
        self.write(os.path.join("runs", "b.json"), ["my notes"])
        code, _, err = self.main("--variants", "variants.jsonl")
        self.assertEqual(code, 2)
        self.assertIn("is not one this tool wrote", err)
        self.assertFalse(os.path.exists(os.path.join(self.dir, "runs", "ref.json")))


class ShippedExampleTest(unittest.TestCase):
    """examples/choosing: the shipped cases answered by three variants, two of them worse by
    a known number of cases (2 and 7)."""

    def test_the_example(self):
        with tempfile.TemporaryDirectory() as folder:
            for name in ("cases.jsonl", "last_run.json"):
                shutil.copy(os.path.join(ROOT, name), folder)
            shutil.copytree(os.path.join(ROOT, "examples"), os.path.join(folder, "examples"))
            out, err = io.StringIO(), io.StringIO()
            cwd = os.getcwd()
            os.chdir(folder)
            try:
                code = evals.main(
                    ["matrix", "--variants", "examples/choosing/variants.jsonl"], out, err
                )
            finally:
                os.chdir(cwd)
            self.assertEqual(code, 0, err.getvalue())
            with open(os.path.join(folder, "runs", "matrix.json"), encoding="utf-8") as handle:
                rows = {row["name"]: row for row in json.load(handle)["variants"]}
        self.assertEqual([r["passed"] for r in rows.values()], [22, 20, 15])
        # p: 2 of 2 worse, 2 * 0.25 = 0.5; 7 of 7, 2 * 0.5**7 = 0.015625, Holm 2 * that
        self.assertEqual(rows["shorter-prompt"]["versus"]["p_holm"], 0.5)
        self.assertEqual(rows["small-model"]["versus"]["p_holm"], 0.03125)
        self.assertEqual(rows["small-model"]["versus"]["verdict"], "worse")


if __name__ == "__main__":
    unittest.main()
