"""Properties that hold for any input (Hypothesis, a test-only dependency installed by .ci/run):
any line is a case or a FILE:LINE error, any output gives every check a verdict in time, and a
record survives a save and a load.

Without Hypothesis installed these tests are skipped, so `python -m unittest` still runs on a
fresh clone with no install.
"""

import json
import os
import string
import tempfile
import time
import unittest
from unittest import mock

import evals
import evals_extras
from tests.test_checks import VALID_EXAMPLES

try:
    from hypothesis import HealthCheck, given, settings, strategies as st
except ImportError:  # the tests are skipped (below); the decorators do nothing
    st = None

    def given(**strategies):
        return lambda test: test

EXAMPLES_RUN = {}  # test name -> examples run, for the closing figures


def counted(name):
    EXAMPLES_RUN[name] = EXAMPLES_RUN.get(name, 0) + 1


FAST = (lambda test: test) if st is None else settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

if st is not None:
    # Text as models write it: any Unicode (surrogates included), weighted towards the
    # characters the checks care about (letters, digits, punctuation, white space, braces).
    TEXT = st.one_of(
        st.text(max_size=400),
        st.text(alphabet=string.printable + "’“”İıßéअ😀\u2028\ud800", max_size=400),
        st.lists(st.sampled_from(["yes", "No", "{", "}", '"a"', ":", "1", "\n", "\r\n", " ",
                                  "```json", "```", "- item", "1. x", "manager approval",
                                  "NASA", ".", "!", "?", "Mr.", "e.g."]),
                 max_size=60).map("".join),
    )
    JSON_VALUES = st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=20)
        | st.floats(allow_nan=False, allow_infinity=False),
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
            st.sampled_from(["id", "input", "checks", "type", "values", "n", "tags", "x"]),
            inner, max_size=5),
        max_leaves=12)
    LINES = st.one_of(
        st.text(max_size=200),
        JSON_VALUES.map(json.dumps),
        st.builds(lambda case_id, text, checks: json.dumps(
            {"id": case_id, "input": text, "checks": checks}),
            st.text(max_size=10), st.text(max_size=20),
            st.lists(st.sampled_from(list(VALID_EXAMPLES.values())) | JSON_VALUES, max_size=3)),
    )


@unittest.skipIf(st is None, "Hypothesis is not installed (pip install hypothesis; .ci/run does)")
class PropertyTest(unittest.TestCase):
    def setUp(self):
        # Hundreds of examples a test: their files go in one folder of the test, written
        # without a flush to the disk and the record without a `git rev-parse` (what is
        # asserted is what is read back, not durability nor the commit).
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.folder = tmp.name
        for patch in (mock.patch.object(os, "fsync"),
                      mock.patch.object(evals, "_git_commit", return_value=None)):
            patch.start()
            self.addCleanup(patch.stop)

    @FAST
    @given(line=LINES if st else None)
    def test_any_line_is_a_case_or_a_file_line_error(self, line):
        counted("case lines")
        path = os.path.join(self.folder, "cases.jsonl")
        with open(path, "w", encoding="utf-8", errors="surrogatepass") as handle:
            handle.write(line.replace("\n", " ") + "\n")
        try:
            cases, _ = evals.load_cases(path)
        except evals.CaseFileError as exc:
            self.assertTrue(exc.problems)
            for problem in exc.problems:
                self.assertTrue(problem.startswith(f"{path}:"), problem)
        else:
            self.assertEqual(len(cases), 1)
            self.assertEqual(evals.case_problems(json.loads(line)), [])

    @FAST
    @given(output=TEXT if st else None)
    def test_every_check_gives_any_output_a_verdict_with_a_reason_in_time(self, output):
        counted("outputs x every check")
        for name, check in VALID_EXAMPLES.items():
            if name in ("judge", "python"):
                continue
            # a check of the whole reply sees a measured call (a bare text has no latency)
            reply = (evals.Answer(output, latency_s=0.5, cost_usd=0.001)
                     if evals.CHECKS[name].whole else output)
            for negate in (False, True):
                started = time.perf_counter()
                result = evals.run_check(dict(check, negate=negate), reply)
                self.assertLess(time.perf_counter() - started, 1.0, (name, output))
                self.assertIsInstance(result.passed, bool)
                self.assertIsInstance(result.reason, str)
                self.assertTrue(result.reason)

    @FAST
    @given(outputs=st.lists(TEXT, min_size=1, max_size=5) if st else None,
           accept=st.booleans() if st else None)
    def test_a_record_survives_save_and_load(self, outputs, accept):
        counted("records")
        cases = [evals.Case(f"case-{n}", f"question {n}", tuple(VALID_EXAMPLES[name] for name in (
            "contains_any", "equals", "json_keys", "regex"))) for n in range(len(outputs))]
        answers = dict(zip((c.input for c in cases), outputs))
        results = evals.run_cases(cases, lambda prompt: answers[prompt])
        run = evals.RunResult(results, "2026-01-01T00:00:00+00:00",
                              "2026-01-01T00:00:01+00:00", "test")
        record = evals.make_record(run, evals.Baseline({}), cases, accept=accept)
        path = os.path.join(self.folder, "last_run.json")
        evals.write_record(path, record)
        loaded = evals.load_baseline(path)
        again = evals_extras.read_record(path)
        self.assertEqual(list(loaded.entries), [c.id for c in cases])
        for result in results:
            entry = loaded.get(result.id)
            self.assertEqual((entry["status"], entry["baseline"], entry["change"]),
                             (result.status, result.status, "new"))
            self.assertEqual(entry["checks"], json.loads(json.dumps(result.checks)))
            if "\ud800" not in (result.output or ""):  # written as its \\ud800 escape
                self.assertEqual(entry.get("output"), result.output)
        self.assertEqual(again["summary"], json.loads(json.dumps(record["summary"])))


    @FAST
    @given(texts=st.lists(st.tuples(
        st.text(min_size=1, max_size=15).filter(lambda t: t.strip()), st.text(max_size=60),
        st.lists(st.text(max_size=8), max_size=3)), min_size=1, max_size=4,
        unique_by=lambda t: t[0]) if st else None)
    def test_cases_survive_append_and_load(self, texts):
        counted("case files")
        path = os.path.join(self.folder, "cases.jsonl")
        if os.path.exists(path):  # each example starts with no case file
            os.remove(path)
        written = []
        for case_id, text, tags in texts:
            case = {"id": case_id, "input": text, "tags": tags,
                    "checks": [VALID_EXAMPLES["max_words"]]}
            try:
                evals_extras.append_case(path, case)
            except evals.EvalsError as exc:  # refused whole (e.g. half a character)
                self.assertIn("not valid", str(exc))
                continue
            written.append(case)
        if not written:
            return
        cases, _ = evals.load_cases(path)
        self.assertEqual([(c.id, c.input, list(c.tags)) for c in cases],
                         [(c["id"], c["input"], c["tags"]) for c in written])

if __name__ == "__main__":
    unittest.main()
