"""pass@k and pass^k of repeated cases (--pass-at), and the pass rate per tag in the reports.

Hand-computed values: with c passing calls of n, pass@k = 1 - C(n-c, k) / C(n, k) and
pass^k = C(c, k) / C(n, k). n=5, c=2: pass@1 = 2/5, pass@3 = 1 - 1/10, pass^1 = 2/5,
pass^2 = 1/10. The command line runs in process with a client that passes on chosen attempts.
"""

import io
import json
import os
import tempfile
import unittest

import evals
import evals_extras

# Each input's passing attempts (0-based); an attempt in RAISE errs.
CLIENT = """
PASSES = {"two?": {1, 3}, "none?": set(), "all?": {0, 1, 2, 3, 4}, "one?": {4}}
RAISE = {"flaky?": {0, 1, 2}}


def ask(prompt, attempt=0):
    if attempt in RAISE.get(prompt, ()):
        raise ConnectionError("reset by peer")
    if attempt in PASSES.get(prompt, ()):
        return "ok"
    return "no"
"""

OK = {"type": "contains_all", "values": ["ok"]}


class Estimators(unittest.TestCase):
    def test_hand_computed_values(self):
        self.assertAlmostEqual(evals_extras.pass_at_k(2, 5, 1), 0.4)
        self.assertAlmostEqual(evals_extras.pass_at_k(2, 5, 3), 0.9)
        self.assertAlmostEqual(evals_extras.pass_all_k(2, 5, 1), 0.4)
        self.assertAlmostEqual(evals_extras.pass_all_k(2, 5, 2), 0.1)
        self.assertAlmostEqual(evals_extras.pass_all_k(2, 5, 3), 0.0)
        self.assertAlmostEqual(evals_extras.pass_at_k(1, 5, 3), 0.6)  # 1 - C(4,3)/C(5,3)
        self.assertAlmostEqual(evals_extras.pass_all_k(4, 5, 3), 0.4)  # C(4,3)/C(5,3)

    def test_no_pass_all_pass_and_k_equal_to_n(self):
        for k in (1, 3, 5):
            with self.subTest(k=k):
                self.assertEqual(evals_extras.pass_at_k(0, 5, k), 0.0)
                self.assertEqual(evals_extras.pass_all_k(0, 5, k), 0.0)
                self.assertEqual(evals_extras.pass_at_k(5, 5, k), 1.0)
                self.assertEqual(evals_extras.pass_all_k(5, 5, k), 1.0)
        # k = n: pass@n is 1 with any pass, pass^n only when every call passed
        self.assertEqual(evals_extras.pass_at_k(1, 5, 5), 1.0)
        self.assertEqual(evals_extras.pass_all_k(4, 5, 5), 0.0)
        self.assertEqual(evals_extras.pass_at_k(1, 1, 1), 1.0)
        self.assertEqual(evals_extras.pass_at_k(0, 1, 1), 0.0)

    def test_exact_for_many_calls(self):
        # one division of exact integers: C(1000, 500) overflows a float
        self.assertAlmostEqual(evals_extras.pass_at_k(500, 1000, 500), 1.0)
        self.assertAlmostEqual(evals_extras.pass_all_k(999, 1000, 500), 0.5)

    def test_out_of_range_refused(self):
        for c, n, k in ((2, 5, 0), (2, 5, 6), (6, 5, 1), (-1, 5, 1), (2, 5, 1.0), (2, 5, True)):
            for estimate in (evals_extras.pass_at_k, evals_extras.pass_all_k):
                with self.subTest(c=c, n=n, k=k, estimate=estimate.__name__):
                    with self.assertRaises(ValueError):
                        estimate(c, n, k)

    def test_summary_is_the_mean_over_the_cases_with_enough_calls(self):
        entries = [
            evals_extras.with_pass_at({"status": "fail", "passes": 2, "calls": 5}, (1, 3)),
            evals_extras.with_pass_at({"status": "pass", "passes": 5, "calls": 5}, (1, 3)),
            evals_extras.with_pass_at({"status": "error", "passes": 0, "calls": 2}, (1, 3)),
        ]
        self.assertNotIn("pass_at", entries[2])
        summary = evals_extras.pass_at_summary(entries, (1, 3))
        self.assertEqual(summary["pass_at_cases"], 2)
        self.assertAlmostEqual(summary["pass_at"]["1"], 0.7)
        self.assertAlmostEqual(summary["pass_at"]["3"], 0.95)
        self.assertAlmostEqual(summary["pass_all"]["3"], 0.5)
        self.assertEqual(
            evals_extras.pass_at_summary([], (2,)),
            {"pass_at_cases": 0, "pass_at": {"2": None}, "pass_all": {"2": None}},
        )
        self.assertEqual(
            evals_extras.pass_at_line(summary),
            "pass@1 70.0%, pass@3 95.0%; pass^1 70.0%, pass^3 50.0% (mean over 2 cases)",
        )
        self.assertEqual(evals_extras.pass_at_line({"pass_at": "x"}), "")


class CommandLine(unittest.TestCase):
    def setUp(self):
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.dir = tmp.name
        with open(self.path("client.py"), "w") as handle:
            handle.write(CLIENT)
        self.write_cases(
            ("two", ["smoke", "billing"]), ("none", ["smoke"]), ("all", []), ("one", ["billing"])
        )

    def path(self, name):
        return os.path.join(self.dir, name)

    def write_cases(self, *cases):
        with open(self.path("cases.jsonl"), "w") as handle:
            for case_id, tags in cases:
                case = {"id": case_id, "input": case_id + "?", "tags": tags, "checks": [OK]}
                handle.write(json.dumps(case) + "\n")

    def run_cli(self, *args):
        out, err = io.StringIO(), io.StringIO()
        argv = ["--cases", self.path("cases.jsonl"), "--baseline", self.path("last_run.json")]
        argv += ["--client", self.path("client.py") + ":ask", "--no-history", *args]
        return evals.main(argv, out, err), out.getvalue(), err.getvalue()

    def load(self, name):
        with open(self.path(name)) as handle:
            return json.load(handle)

    def test_per_case_and_for_the_suite(self):
        code, out, err = self.run_cli(
            "--repeat", "5", "--pass-at", "3,1,3", "--markdown", self.path("r.md"),
            "--html", self.path("r.html"),
        )
        self.assertEqual(code, 0, err)
        record = self.load("last_run.json")
        cases = {e["id"]: e for e in record["cases"]}
        expected = {  # c of 5: pass@1, pass@3, pass^1, pass^3
            "two": (0.4, 0.9, 0.4, 0.0),
            "none": (0.0, 0.0, 0.0, 0.0),
            "all": (1.0, 1.0, 1.0, 1.0),
            "one": (0.2, 0.6, 0.2, 0.0),
        }
        for case_id, values in expected.items():
            with self.subTest(case=case_id):
                entry = cases[case_id]
                got = (entry["pass_at"]["1"], entry["pass_at"]["3"])
                got += (entry["pass_all"]["1"], entry["pass_all"]["3"])
                for a, b in zip(got, values):
                    self.assertAlmostEqual(a, b)
        summary = record["summary"]
        self.assertEqual(summary["pass_at_cases"], 4)
        self.assertEqual(list(summary["pass_at"]), ["1", "3"])
        self.assertAlmostEqual(summary["pass_at"]["1"], 0.4)
        self.assertAlmostEqual(summary["pass_at"]["3"], 0.625)
        self.assertAlmostEqual(summary["pass_all"]["1"], 0.4)
        self.assertAlmostEqual(summary["pass_all"]["3"], 0.25)
        self.assertIs(record["outputs_included"], True)
        line = "pass@1 40.0%, pass@3 62.5%; pass^1 40.0%, pass^3 25.0% (mean over 4 cases)"
        self.assertEqual(out.count(line + "\n"), 1, out)
        with open(self.path("r.md"), encoding="utf-8") as handle:
            markdown = handle.read()
        self.assertIn(evals_extras._md_inline(line, 300), markdown)
        self.assertIn(
            "| tag | passed/total | rate |\n|---|---:|---:|\n"
            "| billing | 0/2 | 0.0% |\n| smoke | 0/2 | 0.0% |\n",
            markdown,
        )
        with open(self.path("r.html"), encoding="utf-8") as handle:
            html = handle.read()
        self.assertIn(line, html)
        self.assertIn('<td class="id">billing</td><td>0/2</td><td>0.0%</td>', html)

    def test_a_k_above_the_repeat_is_refused_before_any_call(self):
        with open(self.path("client.py"), "a") as handle:
            handle.write("\nraise SystemExit('the client was loaded')\n")
        for args in (("--repeat", "5", "--pass-at", "1,6"), ("--pass-at", "2")):
            with self.subTest(args=args):
                code, out, err = self.run_cli(*args)
                self.assertEqual(code, 2)
                repeat = args[1] if len(args) > 2 else "1"
                self.assertIn(f"--pass-at {args[-1][-1]} is more than --repeat {repeat}", err)
                self.assertEqual(out, "")
                self.assertFalse(os.path.exists(self.path("last_run.json")))
        code, out, err = self.run_cli("--repeat", "5", "--pass-at", "0")
        self.assertEqual(code, 2)
        self.assertIn("--pass-at: expected whole numbers from 1", err)

    def test_without_repeat_k_1_is_the_pass_rate(self):
        code, out, err = self.run_cli("--pass-at", "1")
        self.assertEqual(code, 0, err)
        summary = self.load("last_run.json")["summary"]
        self.assertAlmostEqual(summary["pass_at"]["1"], 0.25)  # "all" passes its one call
        self.assertIn("pass@1 25.0%; pass^1 25.0% (mean over 4 cases)\n", out)

    def test_a_case_with_fewer_scored_calls_than_k_is_left_out(self):
        self.write_cases(("two", []), ("flaky", []))
        code, out, err = self.run_cli("--repeat", "5", "--pass-at", "1,3")
        self.assertEqual(code, 2, err)  # flaky errs: 2 scored calls of 5, none passed
        record = self.load("last_run.json")
        cases = {e["id"]: e for e in record["cases"]}
        self.assertEqual(cases["flaky"]["calls"], 2)
        self.assertNotIn("pass_at", cases["flaky"])
        self.assertEqual(record["summary"]["pass_at_cases"], 1)
        self.assertAlmostEqual(record["summary"]["pass_at"]["3"], 0.9)
        self.assertIn("(mean over 1 case)\n", out)

    def test_with_omit_outputs_and_a_case_not_run(self):
        code, _, err = self.run_cli("--repeat", "5", "--pass-at", "2")
        self.assertEqual(code, 0, err)
        kept = {e["id"]: e for e in self.load("last_run.json")["cases"]}["one"]
        code, _, err = self.run_cli(
            "--repeat", "5", "--pass-at", "1", "--id", "two", "--omit-outputs"
        )
        self.assertEqual(code, 0, err)
        record = self.load("last_run.json")
        self.assertIs(record["outputs_included"], False)
        cases = {e["id"]: e for e in record["cases"]}
        self.assertNotIn("output", cases["two"])
        self.assertAlmostEqual(cases["two"]["pass_at"]["1"], 0.4)
        self.assertEqual(cases["one"]["change"], "not_run")  # kept as its run left it
        self.assertEqual(cases["one"]["pass_at"], kept["pass_at"])
        self.assertEqual(record["summary"]["pass_at_cases"], 1)

    def test_merged_shards_keep_the_suite_figures(self):
        shards = []
        for number in (1, 2):
            shards.append(self.path(f"shard{number}.json"))
            code, _, err = self.run_cli(
                "--repeat", "5", "--pass-at", "1,3", "--shard", f"{number}/2", "--out", shards[-1]
            )
            self.assertEqual(code, 0, err)
        out, err = io.StringIO(), io.StringIO()
        argv = ["merge", *shards, "--cases", self.path("cases.jsonl")]
        argv += ["--out", self.path("merged.json")]
        self.assertEqual(evals.main(argv, out, err), 0, err.getvalue())
        summary = self.load("merged.json")["summary"]
        self.assertEqual(summary["pass_at_cases"], 4)
        self.assertAlmostEqual(summary["pass_at"]["3"], 0.625)
        self.assertAlmostEqual(summary["pass_all"]["3"], 0.25)

    def test_no_figures_without_the_option(self):
        code, out, err = self.run_cli("--repeat", "3")
        self.assertEqual(code, 0, err)
        record = self.load("last_run.json")
        self.assertNotIn("pass_at", record["summary"])
        self.assertFalse(any("pass_at" in e for e in record["cases"]))
        self.assertNotIn("pass@", out)


class TagRates(unittest.TestCase):
    def test_counts_by_tag(self):
        record = {
            "cases": [
                {"id": "a", "status": "pass", "change": "new", "tags": ["x", "y", "x"]},
                {"id": "b", "status": "error", "change": "new", "tags": ["x"]},
                {"id": "c", "status": "pass", "change": "not_run", "tags": ["x"]},
                {"id": "d", "status": "fail", "change": "new", "tags": "x"},
                {"id": "e", "status": "pass", "change": "new"},
            ]
        }
        self.assertEqual(evals_extras.tag_rates(record), [("x", 1, 2), ("y", 1, 1)])
        self.assertNotIn("| tag |", evals_extras.render_markdown({"cases": record["cases"][4:]}))


if __name__ == "__main__":
    unittest.main()
