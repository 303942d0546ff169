"""Each report of one run record, compared with its golden file in tests/golden/.

record.json is a run of nine cases against baseline.json (made with --repeat 3 and
--min-pass-rate 0.9): regressions, a significant and a not significant drop, a flaky case, an
error, a new and a removed case, a tool call, an answer cut at the token limit, and output
holding markup, an ANSI escape and a workflow command. After an intended change of a report,
regenerate the files and read their diff before committing it:

    EVALS_UPDATE_GOLDEN=1 python -m unittest tests.test_golden
"""

import json
import os
import unittest

import evals
import evals_extras

GOLDEN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden")


def read(name):
    with open(os.path.join(GOLDEN, name), encoding="utf-8") as handle:
        return handle.read()


class GoldenTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.record = evals.completed(json.loads(read("record.json")))
        baseline = json.loads(read("baseline.json"))
        cls.previous = {entry["id"]: entry for entry in baseline["cases"]}

    def assertGolden(self, name, text):
        if os.environ.get("EVALS_UPDATE_GOLDEN") == "1":
            with open(os.path.join(GOLDEN, name), "w", encoding="utf-8", newline="") as handle:
                handle.write(text)
        self.assertEqual(text, read(name), f"tests/golden/{name} differs (see the module "
                                           "docstring to regenerate it)")

    def test_text_summary(self):
        self.assertGolden("summary.txt", evals.format_summary(self.record))

    def test_github_annotations(self):
        self.assertGolden("annotations.txt", evals.github_annotations(self.record))

    def test_markdown(self):
        self.assertGolden("report.md", evals_extras.render_markdown(self.record))

    def test_junit(self):
        self.assertGolden("junit.xml", evals_extras.render_junit(self.record))

    def test_a_pass_rate_at_its_floor_is_a_passing_gate(self):
        record = dict(self.record, summary=dict(self.record["summary"], min_pass_rate=0.3))
        self.assertNotIn("Pass rate below", evals.github_annotations(record))
        junit = evals_extras.render_junit(record)
        gate = junit[junit.index('<testcase classname="evals.gates"'):]
        self.assertTrue(gate.startswith('<testcase classname="evals.gates" name="min_pass_rate" '
                                        '/>'), gate[:120])
        self.assertIn('tests="10" failures="5"', junit)

    def test_html(self):
        self.assertGolden("report.html", evals_extras.render_html(self.record, self.previous))


if __name__ == "__main__":
    unittest.main()
