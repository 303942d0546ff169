"""One outcome model: `decide` is the only rule for a case's change against the baseline, and
every summary, report, merge and the history read its result."""

import ast
import io
import json
import os
import re
import subprocess
import sys
import tempfile
import unittest

import evals
import evals_extras

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OK_CASE = evals.Case(id="k", input="q", checks=({"type": "contains_all", "values": ["ok"]},))


def record_for(before_entries, *results):
    """The record of a run of `results` (CaseResult) against a baseline of `before_entries`."""
    run = evals.RunResult(list(results), "2026-01-01T00:00:00+00:00",
                          "2026-01-01T00:00:01+00:00", "test")
    baseline = evals.Baseline({e["id"]: e for e in before_entries})
    return evals.make_record(run, baseline, [OK_CASE])


class DecideTest(unittest.TestCase):
    """The README's outcome table, line by line: (status now, baseline entry) -> (change,
    baseline kept for the next run)."""

    TABLE = [
        ("error", None, "errored", None),
        ("error", {"baseline": "pass", "status": "pass"}, "errored", "pass"),
        ("error", {"baseline": "fail", "status": "fail"}, "errored", "fail"),
        ("pass", None, "new", "pass"),
        ("fail", None, "new", "fail"),
        ("review", None, "new", "review"),
        ("fail", {"baseline": "pass", "status": "pass"}, "regressed", "pass"),
        ("review", {"baseline": "pass", "status": "pass"}, "regressed", "pass"),
        ("fail", {"baseline": "pass", "status": "fail"}, "regressed", "pass"),
        ("fail", {"baseline": "fail", "status": "fail"}, "still_failing", "fail"),
        ("review", {"baseline": "review", "status": "review"}, "still_failing", "review"),
        ("pass", {"baseline": "pass", "status": "pass"}, "passing", "pass"),
        ("pass", {"baseline": "pass", "status": "error", "scored": "pass"}, "passing", "pass"),
        ("pass", {"baseline": "fail", "status": "fail"}, "fixed", "pass"),
        ("pass", {"baseline": "review", "status": "review"}, "fixed", "pass"),
        # An unaccepted regression keeps baseline "pass"; its next pass is a fix, whether the
        # regression was a failure or a review (the drift between the old copies of this rule).
        ("pass", {"baseline": "pass", "status": "fail"}, "fixed", "pass"),
        ("pass", {"baseline": "pass", "status": "review"}, "fixed", "pass"),
        ("pass", {"baseline": "pass", "status": "error", "scored": "fail"}, "fixed", "pass"),
    ]

    def test_table(self):
        for status, before, change, kept in self.TABLE:
            with self.subTest(status=status, before=before):
                self.assertEqual(evals.decide(status, before), (change, kept))

    def test_accept_takes_the_new_status_as_baseline(self):
        before = {"baseline": "pass", "status": "pass"}
        self.assertEqual(evals.decide("fail", before, accept=True), ("regressed", "fail"))

    def test_readme_documents_every_change(self):
        with open(os.path.join(ROOT, "docs", "outcomes.md"), encoding="utf-8") as handle:
            readme = handle.read()
        table = readme[readme.index("| category | meaning |"):]
        table = table[:table.index("\n\n")]
        for change in evals.CHANGES:
            self.assertIn(f"| {change.replace('_', ' ')} |", table)


class OneDecisionEverywhereTest(unittest.TestCase):
    def test_review_regression_then_pass_is_fixed_in_every_view(self):
        before = {"id": "k", "status": "review", "baseline": "pass", "change": "regressed"}
        record = record_for([before], evals.CaseResult("k", "pass", output="ok", checks=[]))
        self.assertEqual(record["cases"][0]["change"], "fixed")
        self.assertEqual(record["summary"]["fixed"], 1)
        self.assertIn("FIXED: k", evals.format_summary(record))
        self.assertIn("### Fixed (1)", evals_extras.render_markdown(record))
        self.assertIn('<span class="badge fixed">fixed</span>', evals_extras.render_html(record))

    def test_pass_rate_counts_errors_as_not_passed_everywhere(self):
        record = record_for([], evals.CaseResult("k", "pass", output="ok", checks=[]),
                            evals.CaseResult("e", "error", error="TimeoutError: slow"))
        self.assertEqual(record["summary"]["pass_rate"], 0.5)
        bare = dict(record)
        del bare["summary"]  # a hand-made record: the reports compute the same summary
        self.assertEqual(evals.completed(bare)["summary"]["pass_rate"], 0.5)
        for text in (evals.format_summary(record), evals_extras.render_markdown(bare),
                     evals_extras.render_html(bare)):
            self.assertIn("50.0%", text)

    def test_merge_recomputes_the_same_summary(self):
        record = record_for([], evals.CaseResult("k", "fail", output="no", checks=[]))
        merged = evals_extras.merge_records([record], ["k"])
        self.assertEqual(merged["summary"], record["summary"])

    def test_merge_takes_any_record_read_record_accepts(self):
        bare = {"format": "evals-run", "version": 1,
                "cases": [{"id": "k", "status": "fail", "baseline": "fail"}]}
        self.assertIsNone(evals.record_problem(bare))  # no summary, no times: still a record
        merged = evals_extras.merge_records([bare], ["k"])
        self.assertEqual((merged["summary"]["failed"], merged["summary"]["previous_total"]),
                         (1, 0))


class StructuredReasonsTest(unittest.TestCase):
    def test_omitting_outputs_replaces_only_the_quoted_output(self):
        case = evals.Case("k", "q", ({"type": "equals", "value": "secret answer"},))
        _, checks = evals.evaluate(case, "my secret answer, leaked")
        self.assertEqual(checks[0]["quoted"], ["'my secret answer, leaked'"])
        entry = evals_extras.without_outputs({"id": "k", "output": "my secret answer, leaked",
                                       "checks": checks})
        self.assertNotIn("output", entry)
        self.assertEqual(entry["checks"][0]["reason"],
                         "expected 'secret answer', got '[output omitted]'")
        self.assertNotIn("quoted", entry["checks"][0])

    def test_a_number_a_schema_error_copies_from_the_output_is_hidden_too(self):
        case = evals.Case("k", "q", ({"type": "json_schema", "schema": {"properties": {
            "n": {"maximum": 5}}}},))
        _, checks = evals.evaluate(case, '{"n": 99}')
        self.assertEqual(checks[0]["reason"], "$.n: 99 is not at most 5")
        self.assertEqual(evals_extras.without_outputs({"id": "k", "checks": checks})["checks"][0]
                         ["reason"], "$.n: '[output omitted]'")

    def test_a_passing_check_quotes_nothing_it_did_not_copy(self):
        case = evals.Case("k", "q", ({"type": "contains_any", "values": ["approval"]},))
        _, checks = evals.evaluate(case, "needs approval")
        self.assertNotIn("quoted", checks[0])
        self.assertEqual(evals_extras.without_outputs({"id": "k", "checks": checks})["checks"][0]
                         ["reason"], "found 'approval'")


    def test_a_user_checks_own_words_are_left_out_with_the_outputs(self):
        # Its reason and its exception's message may quote the output; evals' words stay.
        for function, params, words in (
                ("mentions_order", {"order": "A-1"}, "'[output omitted]'"),
                ("broken", {}, "tests.user_checks:broken raised ValueError: '[output omitted]'"),
                ("not_a_verdict", {}, "tests.user_checks:not_a_verdict returned str, expected a "
                                      "bool or (bool, reason)"),
                ("is_short", {"limit": 3}, "returned False")):
            check = {"type": "python", "function": f"tests.user_checks:{function}", **params}
            result = evals.run_case(evals.Case("k", "q", (check,)), lambda prompt: "SECRET")
            entry = evals_extras.without_outputs({"id": "k", "status": result.status,
                                           "error": result.error, "checks": result.checks})
            self.assertEqual(entry["checks"][0]["reason"], words)
            self.assertEqual(entry["error"], words if result.error else None)


    def test_a_hand_made_errored_check_keeps_the_cases_error(self):
        for reason in (5, None, ""):
            entry = evals_extras.without_outputs({"id": "k", "status": "error", "error": "timed out",
                                           "checks": [{"type": "python", "passed": False,
                                                       "error": True, "reason": reason}]})
            self.assertEqual(entry["error"], "timed out")


class UserCheckTest(unittest.TestCase):
    """{"type": "python", "function": "MODULE:FUNCTION", ...}: the user's own check."""

    def check(self, function, **params):
        return {"type": "python", "function": f"tests.user_checks:{function}", **params}

    def score(self, check, output):
        return evals.evaluate(evals.Case("k", "q", (check,)), output)

    def test_bool_and_reason(self):
        check = self.check("mentions_order", order="A-1")
        self.assertEqual(evals.validate_check(check), [])
        self.assertEqual(self.score(check, "Order A-1 shipped")[1][0]["reason"],
                         "mentions order A-1")
        status, checks = self.score(check, "shipped")
        self.assertEqual((status, checks[0]["reason"]), ("fail", "does not mention order A-1"))
        status, _ = self.score(self.check("is_short", limit=3), "four")
        self.assertEqual(status, "fail")
        self.assertEqual(self.score(self.check("is_short"), "four")[0], "pass")

    def test_negate(self):
        check = self.check("mentions_order", order="A-1", negate=True)
        self.assertEqual(self.score(check, "shipped")[0], "pass")
        status, checks = self.score(check, "Order A-1 shipped")
        self.assertEqual(status, "fail")
        self.assertIn("negated: holds, but must not: mentions order A-1", checks[0]["reason"])

    def test_an_exception_or_a_wrong_return_is_an_error_naming_the_function(self):
        for function, words in (("broken", "tests.user_checks:broken raised ValueError: the "
                                           "check itself is broken"),
                                ("not_a_verdict", "tests.user_checks:not_a_verdict returned "
                                                  "str, expected a bool or (bool, reason)"),
                                ("unprintable_verdict", "tests.user_checks:unprintable_verdict "
                                 "returned _Unprintable, expected a bool or (bool, reason)")):
            for negate in (False, True):
                with self.subTest(function=function, negate=negate):
                    status, checks = self.score(self.check(function, negate=negate), "text")
                    self.assertEqual(status, "error")
                    self.assertEqual(checks[0]["reason"], words)
        result = evals.run_case(evals.Case("k", "q", (self.check("broken"),)),
                                lambda prompt: "text")
        self.assertEqual(result.status, "error")
        self.assertIn("tests.user_checks:broken raised ValueError", result.error)

    def test_unknown_module_or_function_is_a_file_line_error_before_any_call(self):
        lines = [{"id": "a", "input": "q", "checks": [self.check("mentions_order", order="x")]},
                 {"id": "b", "input": "q", "checks": [{"type": "python",
                                                        "function": "no_such_module:f"}]},
                 {"id": "c", "input": "q", "checks": [self.check("missing")]},
                 {"id": "d", "input": "q", "checks": [self.check("NOT_CALLABLE")]},
                 {"id": "e", "input": "q", "checks": [{"type": "python", "function": "nocolon"}]}]
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "cases.jsonl")
            with open(path, "w", encoding="utf-8") as handle:
                handle.writelines(json.dumps(line) + "\n" for line in lines)
            calls, err = [], io.StringIO()
            sys.modules["_user_check_client"] = type(sys)("_user_check_client")
            sys.modules["_user_check_client"].ask = lambda prompt: calls.append(prompt) or "x"
            self.addCleanup(sys.modules.pop, "_user_check_client")
            code = evals.main(["--cases", path, "--no-save", "--client",
                               "_user_check_client:ask"], io.StringIO(), err)
        self.assertEqual((code, calls), (2, []))
        problems = err.getvalue().splitlines()
        self.assertTrue(problems[0].startswith(f"{path}:2: check 1: python: parameter "
                                               "'function' cannot be loaded"), problems)
        self.assertIn("No module named 'no_such_module'", problems[0])
        self.assertTrue(problems[1].startswith(f"{path}:3: "), problems)
        self.assertIn("has no callable 'missing'", problems[1])
        self.assertIn(f"{path}:4: ", problems[2])
        self.assertIn("has no callable 'NOT_CALLABLE'", problems[2])
        self.assertIn(f"{path}:5: ", problems[3])
        self.assertIn("expected module:function", problems[3])

    def test_the_readme_example_runs(self):
        with open(os.path.join(ROOT, "docs", "checks.md"), encoding="utf-8") as handle:
            readme = handle.read()
        section = readme[readme.index("### Your own checks"):]
        module = section[section.index("```python\n") + 10:section.index("```\n\nand name")]
        case = json.loads(section[section.index("```json\n") + 8:].split("\n")[0])
        with tempfile.TemporaryDirectory() as folder:
            with open(os.path.join(folder, "my_checks.py"), "w", encoding="utf-8") as handle:
                handle.write(module)
            cases = [case, dict(case, id="no-order"),
                     {"id": "json-list", "input": "q", "checks": [
                         {"type": "python", "function": "my_checks:lists_at_most",
                          "key": "items", "n": 1}]}]
            outputs = {"order-cited": "Order 4411 left the warehouse.",
                       "no-order": "It left the warehouse.", "json-list": "not json"}
            for name, rows in (("cases.jsonl", cases), ("recordings.jsonl", [
                    {"id": k, "output": v} for k, v in outputs.items()])):
                with open(os.path.join(folder, name), "w", encoding="utf-8") as handle:
                    handle.writelines(json.dumps(row) + "\n" for row in rows)
            done = subprocess.run([sys.executable, os.path.join(ROOT, "evals.py"), "--rescore",
                                   "recordings.jsonl", "--no-save"], cwd=folder, timeout=60,
                                  capture_output=True, text=True)
        self.assertEqual(done.returncode, 2, done.stderr)  # the broken JSON case errored
        self.assertIn("pass rate 33.3% (1/3)", done.stdout)
        self.assertIn("python: does not cite Order 4411", done.stdout)
        self.assertIn("my_checks:lists_at_most raised JSONDecodeError", done.stdout)

    def test_listed_by_list_checks(self):
        out = io.StringIO()
        self.assertEqual(evals.main(["--list-checks"], out, io.StringIO()), 0)
        self.assertIn("  python function [KEY=VALUE...]", out.getvalue())


class StructureTest(unittest.TestCase):
    """evals.py reads top down: a section calls only itself and the sections above it."""

    def test_no_call_into_a_later_section(self):
        with open(os.path.join(ROOT, "evals.py"), encoding="utf-8") as handle:
            source = handle.read()
        banner = re.compile(r"^# -{20,}\n# (\w[^\n]*)\n# -{20,}$", re.M)
        starts = [(source[:m.start()].count("\n") + 1, m.group(1)) for m in banner.finditer(source)]
        self.assertGreaterEqual(len(starts), 8)

        def section(line):
            return sum(1 for start, _ in starts if start <= line)

        tree = ast.parse(source)
        defined = {}
        for node in tree.body:
            names = [node.name] if isinstance(node, (ast.FunctionDef, ast.ClassDef)) else [
                t.id for t in getattr(node, "targets", []) if isinstance(t, ast.Name)]
            defined.update((name, section(node.lineno)) for name in names)
        forward = sorted(
            f"{node.name} -> {use.id}" for node in tree.body
            if isinstance(node, (ast.FunctionDef, ast.ClassDef))
            for use in ast.walk(node)
            if isinstance(use, ast.Name) and defined.get(use.id, 0) > section(node.lineno))
        self.assertEqual(forward, [])


if __name__ == "__main__":
    unittest.main()
