"""The command line end to end: baseline diff, exit codes, errors, files written."""

import io
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import unittest.mock

import evals
import evals_extras

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EVALS = os.path.join(ROOT, "evals.py")

# A client whose answers come from answers.json next to it: {input: output}. Special answers
# make it misbehave the way providers do.
CLIENT = '''
import json, os, time
HERE = os.path.dirname(os.path.abspath(__file__))

def ask(prompt):
    with open(os.path.join(HERE, "calls.log"), "a") as log:
        log.write(prompt + "\\n")
    with open(os.path.join(HERE, "answers.json")) as handle:
        answer = json.load(handle)[prompt]
    if answer == "!raise":
        raise RuntimeError("HTTP 500 from provider: Internal error, please retry")
    if answer == "!int":
        return 42
    if answer.startswith("!sleep:"):
        time.sleep(float(answer.split(":")[1]))
        return "slept"
    return answer
'''

CASES = [
    {"id": "refund", "input": "refund?", "checks": [
        {"type": "contains_all", "values": ["manager approval"]}]},
    {"id": "json", "input": "json?", "checks": [{"type": "json_keys", "keys": ["name"]}]},
    {"id": "short", "input": "short?", "checks": [{"type": "max_words", "n": 5}]},
]
GOOD = {"refund?": "Refunds over $100 need manager approval.", "json?": '{"name": "Ana"}',
        "short?": "Friday."}


class CliTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.dir = self.tmp.name
        self.cases = self.path("cases.jsonl")
        self.baseline = self.path("last_run.json")
        with open(self.path("client.py"), "w") as handle:
            handle.write(CLIENT)
        self.write_cases(CASES)
        self.answer(GOOD)

    def path(self, name):
        return os.path.join(self.dir, name)

    def write_cases(self, cases):
        with open(self.cases, "w") as handle:
            handle.write("\n".join(json.dumps(c) for c in cases) + "\n")

    def answer(self, answers):
        with open(self.path("answers.json"), "w") as handle:
            json.dump(answers, handle)

    def run_cli(self, *args):
        out, err = io.StringIO(), io.StringIO()
        code = evals.main(["--cases", self.cases, "--baseline", self.baseline,
                           "--client", self.path("client.py") + ":ask", *args], out, err)
        return code, out.getvalue(), err.getvalue()

    def record(self):
        with open(self.baseline) as handle:
            return json.load(handle)

    def calls(self):
        try:
            with open(self.path("calls.log")) as handle:
                return handle.read().splitlines()
        except FileNotFoundError:
            return []

    def test_failed_with_no_baseline_says_it_runs_every_case(self):
        code, _, err = self.run_cli("--failed", "--no-save")
        self.assertEqual((code, len(self.calls())), (0, 3))
        self.assertIn("holds no run yet, so --failed runs every case", err)
        self.run_cli()
        code, out, err = self.run_cli("--failed")
        self.assertEqual((code, len(self.calls()), err), (0, 6, ""))
        self.assertIn("nothing to rerun", out)

    def test_recording_a_replay_names_no_model(self):
        # as my_client's offline replay answers: a recorded output, model "replay"
        with open(self.path("replayer.py"), "w") as handle:
            handle.write("class Reply(str):\n    model = 'replay'\n\n"
                         "def ask(prompt):\n    return Reply('Friday.')\n")
        code = evals.main(["--cases", self.cases, "--baseline", self.baseline, "--client",
                           self.path("replayer.py") + ":ask", "--record", self.path("rec.jsonl")],
                          io.StringIO(), io.StringIO())
        with open(self.path("rec.jsonl")) as handle:
            rows = [json.loads(line) for line in handle]
        self.assertEqual((code, len(rows)), (0, 3))
        self.assertFalse(any("model" in row for row in rows), rows)

    def test_first_run_passes_and_writes_a_record_with_provenance(self):
        code, out, _ = self.run_cli()
        self.assertEqual(code, 0, out)
        self.assertIn("pass rate 100.0% (3/3)", out)
        self.assertIn("3 new", out)
        record = self.record()
        self.assertEqual(record["format"], "evals-run")
        self.assertEqual(record["harness_version"], evals.__version__)
        with open(self.cases, "rb") as handle:
            import hashlib
            self.assertEqual(record["case_file"]["sha256"], hashlib.sha256(handle.read()).hexdigest())
        self.assertTrue(record["client"].endswith("client.py:ask"))
        self.assertEqual(record["python"].split(".")[0], "3")
        self.assertIn("git_commit", record)
        self.assertIn("started_at", record)
        self.assertEqual([c["id"] for c in record["cases"]], ["refund", "json", "short"])
        first = record["cases"][0]
        self.assertEqual(first["status"], "pass")
        self.assertEqual(first["output"], GOOD["refund?"])
        self.assertEqual(first["checks"][0]["type"], "contains_all")
        self.assertIsInstance(first["latency_s"], float)

    def test_regression_is_reported_until_fixed_or_accepted(self):
        self.assertEqual(self.run_cli()[0], 0)
        self.answer({**GOOD, "refund?": "Refunds are instant, no approval needed."})
        code, out, _ = self.run_cli()
        self.assertEqual(code, 1)
        self.assertIn("1 regressed", out)
        self.assertIn("REGRESSED: refund\n    contains_all: missing: 'manager approval'", out)
        self.assertIn("pass rate 66.7% (2/3), last run 100.0%\n", out)
        # Re-running must not make the regression disappear; the summary says that the last
        # run already failed it while the baseline still counts it as passed.
        code, out, _ = self.run_cli()
        self.assertEqual(code, 1)
        self.assertIn("REGRESSED: refund", out)
        self.assertIn("pass rate 66.7% (2/3), last run 66.7%, baseline 100.0%\n", out)
        # Accepting takes it into the baseline; afterwards it is a known failure.
        code, out, _ = self.run_cli("--accept")
        self.assertEqual(code, 0)
        code, out, _ = self.run_cli()
        self.assertEqual(code, 0)
        self.assertIn("STILL FAILING: refund", out)
        self.answer(GOOD)
        code, out, _ = self.run_cli()
        self.assertEqual(code, 0)
        self.assertIn("FIXED: refund", out)

    def test_a_regression_keeps_the_output_that_passed_for_the_reports(self):
        self.run_cli()
        bad = "Refunds are instant, no approval needed."
        self.answer({**GOOD, "refund?": bad})
        self.assertEqual(self.run_cli()[0], 1)
        entry = self.record()["cases"][0]
        self.assertEqual((entry["output"], entry["baseline_output"]), (bad, GOOD["refund?"]))
        # A second run against that record still shows the passing output beside the new one.
        code, _, _ = self.run_cli("--html", self.path("r.html"), "--markdown", self.path("r.md"))
        self.assertEqual(code, 1)
        with open(self.path("r.html"), encoding="utf-8") as handle:
            html = handle.read()
        self.assertIn("need manager approval", html)  # the baseline's words (marked removed)
        self.assertIn("instant", html)
        self.assertEqual(self.record()["cases"][0]["baseline_output"], GOOD["refund?"])
        # Without outputs, neither is written.
        self.run_cli("--omit-outputs")
        with open(self.baseline, encoding="utf-8") as handle:
            self.assertNotIn("manager approval.", handle.read())

    def test_regression_then_fix_without_accept_is_fixed(self):
        self.run_cli()
        self.answer({**GOOD, "short?": "one two three four five six"})
        self.assertEqual(self.run_cli()[0], 1)
        self.answer(GOOD)
        code, out, _ = self.run_cli()
        self.assertEqual(code, 0)
        self.assertIn("FIXED: short", out)
        code, out, _ = self.run_cli()
        self.assertIn("0 regressed, 0 fixed", out)

    def test_error_is_never_a_pass_and_keeps_the_baseline_entry(self):
        self.run_cli()
        self.answer({**GOOD, "refund?": "!raise"})
        kept = self.record()
        code, out, _ = self.run_cli("--json", self.path("run.json"))
        self.assertEqual(code, 2)
        self.assertIn("ERROR: refund\n    RuntimeError: HTTP 500 from provider", out)
        self.assertIn("pass rate 66.7% (2/3)", out)
        self.assertEqual(self.record(), kept)  # an error scores nothing: the baseline as it was
        with open(self.path("run.json")) as handle:
            entry = json.load(handle)["cases"][0]
        self.assertEqual(entry["status"], "error")
        self.assertEqual(entry["baseline"], "pass")
        self.assertEqual(entry["checks"], [])
        self.assertNotIn("output", entry)
        # The error text was not scored: when the provider recovers with a bad answer, that is
        # still a regression against the kept "pass".
        self.answer({**GOOD, "refund?": "no."})
        self.assertEqual(self.run_cli()[0], 1)

    def test_pass_fail_error_pass_is_reported_as_fixed(self):
        self.run_cli()
        self.answer({**GOOD, "short?": "one two three four five six seven"})
        self.assertEqual(self.run_cli()[0], 1)
        self.answer({**GOOD, "short?": "!raise"})
        self.assertEqual(self.run_cli()[0], 2)
        self.answer(GOOD)
        code, out, _ = self.run_cli()
        self.assertEqual(code, 0)
        self.assertIn("FIXED: short", out)

    def test_record_keeps_the_other_rows_whole(self):
        recordings = self.path("rec.jsonl")
        with open(recordings, "w") as handle:
            handle.write(json.dumps({"id": "other", "input": "what is other?", "output": "o",
                                     "model": "gpt-x", "note": "kept"}) + "\n")
            handle.write(json.dumps({"id": "short", "input": "short?", "output": "old",
                                     "note": "mine"}) + "\n")
        self.run_cli("--record", recordings)
        with open(recordings) as handle:
            rows = {row["id"]: row for row in map(json.loads, handle)}
        # each output recorded with the seconds its call took
        self.assertGreaterEqual(rows["short"].pop("latency_s"), 0)
        self.assertEqual(rows["other"], {"id": "other", "input": "what is other?", "output": "o",
                                         "model": "gpt-x", "note": "kept"})
        self.assertEqual(rows["short"], {"id": "short", "input": "short?", "output": "Friday.",
                                         "note": "mine"})
        self.assertEqual(rows["refund"]["output"], GOOD["refund?"])

    def test_provider_error_text_is_not_scored_as_output(self):
        # "manager approval" in an error message must not make the case pass.
        self.write_cases([{"id": "e", "input": "refund?", "checks": [
            {"type": "contains_any", "values": ["retry"]}]}])
        self.answer({"refund?": "!raise"})
        code, out, _ = self.run_cli()
        self.assertEqual(code, 2)
        self.assertIn("0/1", out)

    def test_one_error_shared_by_many_cases_is_printed_once(self):
        self.answer({"refund?": "!raise", "json?": "!raise", "short?": "!raise"})
        code, out, _ = self.run_cli()
        self.assertEqual(code, 2)
        self.assertIn("ERROR: 3 cases: refund, json, short\n    RuntimeError: HTTP 500", out)
        self.assertEqual(out.count("RuntimeError"), 1)
        self.answer({**GOOD, "refund?": "!raise", "json?": "!raise"})
        code, out, _ = self.run_cli()
        self.assertEqual(out.count("RuntimeError"), 2)  # two are listed one by one

    def test_non_string_answer_is_an_error(self):
        self.answer({**GOOD, "json?": "!int"})
        code, out, _ = self.run_cli()
        self.assertEqual(code, 2)
        self.assertIn("the client returned int, expected str", out)

    def test_timeout_is_an_error(self):
        self.answer({**GOOD, "short?": "!sleep:3"})
        started = time.monotonic()
        code, out, _ = self.run_cli("--timeout", "0.3")
        self.assertLess(time.monotonic() - started, 2.5)
        self.assertEqual(code, 2)
        self.assertIn("ERROR: short\n    TimeoutError: no answer within 0.3 s", out)

    def test_calls_with_a_time_limit_reuse_their_threads(self):
        # Adapters keep connections per thread: a timeout must not mean a new thread per call.
        threads = []

        def ask(prompt):
            threads.append(threading.get_ident())
            return "fine"

        cases, _ = evals.load_cases(self.cases)
        many = [evals.Case(id=f"c{i}", input="x", checks=cases[2].checks) for i in range(12)]
        results = evals.run_cases(many, ask, evals.RunOptions(concurrency=2, timeout=5))
        self.assertEqual([r.status for r in results], ["pass"] * 12)
        self.assertLessEqual(len(set(threads)), 2)
        # After a call overruns, the next one gets a fresh thread and still works.
        slow = {"c0"}

        def sometimes_slow(prompt, case):
            if case.id in slow:
                slow.clear()
                time.sleep(1)
            return "fine"

        results = evals.run_cases(many[:3], sometimes_slow, evals.RunOptions(timeout=0.2))
        self.assertEqual([r.status for r in results], ["error", "pass", "pass"])

    def test_empty_output_fails_negative_checks(self):
        self.write_cases([{"id": "e", "input": "short?", "checks": [
            {"type": "not_contains", "values": ["SYSTEM PROMPT"]}, {"type": "max_words", "n": 5}]}])
        self.answer({"short?": "  \n"})
        code, out, _ = self.run_cli("--strict")
        self.assertEqual(code, 1)
        self.assertIn("not_contains: the output is empty", out)

    def test_invalid_case_file_calls_no_model_and_writes_nothing(self):
        self.run_cli()
        with open(self.baseline) as handle:
            before = handle.read()
        os.remove(self.path("calls.log"))
        self.write_cases(CASES + [{"id": "bad", "input": "x", "checks": [{"type": "nope"}]}])
        code, out, err = self.run_cli()
        self.assertEqual(code, 2)
        self.assertIn(f"{self.cases}:4: check 1: unknown check type 'nope'", err)
        self.assertIn("evals: 1 problem in the case file; no model was called", err)
        self.assertEqual(self.calls(), [])
        with open(self.baseline) as handle:
            self.assertEqual(handle.read(), before)

    def test_unreadable_baseline_is_an_error_and_is_not_overwritten(self):
        with open(self.baseline, "w") as handle:
            handle.write("{not json")
        code, _, err = self.run_cli()
        self.assertEqual(code, 2)
        self.assertIn("the baseline is not valid JSON", err)
        self.assertEqual(self.calls(), [])
        with open(self.baseline) as handle:
            self.assertEqual(handle.read(), "{not json")

    def test_original_harness_baseline_format_is_read(self):
        with open(self.baseline, "w") as handle:
            json.dump({"rate": 2 / 3, "results": {"refund": True, "json": True, "short": False},
                       "ts": 1700000000.0}, handle)
        self.answer({**GOOD, "json?": "not json"})
        code, out, _ = self.run_cli()
        self.assertEqual(code, 1)
        self.assertIn("last run 66.7%", out)
        self.assertIn("REGRESSED: json", out)
        self.assertIn("FIXED: short", out)

    def test_removed_and_new_cases(self):
        self.run_cli()
        self.write_cases(CASES[1:] + [{"id": "new", "input": "short?", "checks": [
            {"type": "max_words", "n": 1}]}])
        code, out, _ = self.run_cli()
        self.assertEqual(code, 0)
        self.assertIn("1 new, 0 errored, 1 removed", out)
        self.assertIn("removed from the case file: refund", out)
        self.assertEqual([c["id"] for c in self.record()["cases"]], ["json", "short", "new"])

    def test_omit_outputs_keeps_output_text_out_of_files(self):
        code, _, _ = self.run_cli("--omit-outputs", "--json", self.path("report.json"))
        self.assertEqual(code, 0)
        with open(self.path("report.json")) as handle:
            self.assertNotIn("manager approval.", handle.read())
        with open(self.baseline) as handle:
            text = handle.read()
        self.assertNotIn("manager approval.", text)
        self.assertFalse(self.record()["outputs_included"])

    def test_omit_outputs_also_keeps_quoted_output_out_of_reasons_and_reports(self):
        secret = "SECRET-CUSTOMER-SSN 123-45-6789"
        self.write_cases([
            {"id": "eq", "input": "refund?", "checks": [{"type": "equals", "value": "OK"}]},
            {"id": "rx", "input": "json?", "checks": [
                {"type": "regex", "pattern": "SSN [0-9-]+"},
                {"type": "not_contains", "values": ["SECRET"]}], "tags": ["t"]},
        ])
        self.answer({"refund?": secret, "json?": secret})
        files = {name: self.path(name) for name in ("r.json", "r.xml", "r.md", "r.html")}
        code, out, _ = self.run_cli("--omit-outputs", "--repeat", "2", "--json", files["r.json"],
                                    "--junit", files["r.xml"], "--markdown", files["r.md"],
                                    "--html", files["r.html"])
        self.assertEqual(code, 0)
        self.assertIn("equals: expected 'OK', got '[output omitted]'", out)
        # A filtered run carries the other case's entry: still without its text.
        self.run_cli("--omit-outputs", "--tag", "t")
        import sqlite3
        connection = sqlite3.connect(self.path(os.path.join(".evals", "history.sqlite")))
        self.addCleanup(connection.close)
        history = " ".join(r[0] for r in connection.execute("SELECT reasons FROM results"))
        for name in list(files.values()) + [self.baseline]:
            with open(name, encoding="utf-8") as handle:
                text = handle.read()
            self.assertNotIn("123-45-6789", text, name)
        self.assertNotIn("123-45-6789", history)
        # The check's own phrases are not output: they stay.
        self.assertIn("found forbidden: 'SECRET'", history)

    def test_record_then_rescore_calls_no_model(self):
        self.run_cli("--record", self.path("rec.jsonl"))
        with open(self.path("rec.jsonl")) as handle:
            rows = [json.loads(line) for line in handle]
        self.assertGreaterEqual(rows[0].pop("latency_s"), 0)  # the seconds its call took
        self.assertEqual(rows[0], {"id": "refund", "input": "refund?", "output": GOOD["refund?"]})
        os.remove(self.path("calls.log"))
        out, err = io.StringIO(), io.StringIO()
        code = evals.main(["--cases", self.cases, "--baseline", self.baseline,
                           "--rescore", self.path("rec.jsonl")], out, err)
        self.assertEqual(code, 0, err.getvalue())
        self.assertIn("3/3", out.getvalue())
        self.assertEqual(self.calls(), [])
        # A case with no recording is an error, not a pass.
        self.write_cases(CASES + [{"id": "later", "input": "x", "checks": CASES[2]["checks"]}])
        out = io.StringIO()
        code = evals.main(["--cases", self.cases, "--baseline", self.baseline, "--no-save",
                           "--rescore", self.path("rec.jsonl")], out, io.StringIO())
        self.assertEqual(code, 2)
        self.assertIn("ERROR: later\n    LookupError: no recorded output for case 'later'",
                      out.getvalue())

    def test_rescore_from_a_run_record(self):
        self.run_cli()
        out = io.StringIO()
        code = evals.main(["--cases", self.cases, "--baseline", self.baseline, "--no-save",
                           "--rescore", self.baseline], out, io.StringIO())
        self.assertEqual(code, 0)
        self.assertIn("3/3", out.getvalue())
        record = self.record()  # a case that errored in that run has no output to re-score
        record["cases"][0].update(status="error", output=None, error="timed out")
        evals_extras.write_json_atomic(self.path("errored.json"), record)
        out = io.StringIO()
        code = evals.main(["--cases", self.cases, "--baseline", self.baseline, "--no-save",
                           "--rescore", self.path("errored.json")], out, io.StringIO())
        self.assertEqual(code, 2)
        self.assertIn("LookupError: case 'refund' errored in %s: no output to re-score"
                      % self.path("errored.json"), out.getvalue())
        record["cases"][0].update(status="pass", error=None)  # no output, yet it did not err
        del record["cases"][0]["output"]
        evals_extras.write_json_atomic(self.path("errored.json"), record)
        out = io.StringIO()
        evals.main(["--cases", self.cases, "--baseline", self.baseline, "--no-save",
                    "--rescore", self.path("errored.json")], out, io.StringIO())
        self.assertIn("LookupError: no recorded output for case 'refund'", out.getvalue())

    def test_concurrency_keeps_case_file_order(self):
        cases = [{"id": f"c{i}", "input": f"q{i}", "checks": [{"type": "max_words", "n": 3}]}
                 for i in range(20)]
        self.write_cases(cases)
        self.answer({f"q{i}": f"!sleep:{0.01 * (20 - i)}" for i in range(20)})
        code, _, _ = self.run_cli("-j", "8")
        self.assertEqual(code, 0)
        self.assertEqual([c["id"] for c in self.record()["cases"]], [c["id"] for c in cases])

    def test_contradictory_options_are_refused_before_any_call(self):
        for options, words in ((("--accept", "--no-save"),
                                "--accept and --no-save contradict each other"),
                               (("--accept", "--out", self.path("x.json")),
                                "--accept and --out contradict each other"),
                               (("--record", self.path("r.jsonl"), "--omit-outputs"),
                                "--record and --omit-outputs contradict each other")):
            code, _, err = self.run_cli(*options)
            self.assertEqual(code, 2, options)
            self.assertIn(words, err)
        self.assertEqual(self.calls(), [])
        self.assertFalse(os.path.exists(self.baseline))

    def test_report_with_a_missing_baseline_file_is_an_error(self):
        self.run_cli()
        out, err = io.StringIO(), io.StringIO()
        code = evals.main(["report", self.baseline, "--baseline", self.path("nope.json"),
                           "--html", self.path("r.html")], out, err)
        self.assertEqual(code, 2)
        self.assertIn("nope.json: no such file", err.getvalue())
        self.assertFalse(os.path.exists(self.path("r.html")))

    def test_no_save_leaves_the_baseline_alone(self):
        self.run_cli("--no-save")
        self.assertFalse(os.path.exists(self.baseline))
        self.assertFalse(os.path.exists(self.path(".evals")))  # nor the history

    def test_strict_fails_on_known_failures(self):
        self.answer({**GOOD, "json?": "nope"})
        self.assertEqual(self.run_cli()[0], 0)
        self.assertEqual(self.run_cli("--strict")[0], 1)

    def test_bad_client_and_options(self):
        code, _, err = self.run_cli("--client", "no_such_module_xyz:ask")
        self.assertEqual(code, 2)
        self.assertIn("cannot import no_such_module_xyz", err)
        code, _, err = self.run_cli("-j", "0")
        self.assertEqual(code, 2)

    def test_github_prints_one_annotation_per_regression_and_writes_the_job_summary(self):
        self.run_cli()
        self.answer({**GOOD, "refund?": "no", "short?": "one two three four five six"})
        summary = self.path("step_summary.md")
        with open(summary, "w") as handle:
            handle.write("earlier step\n")
        with unittest.mock.patch.dict(os.environ, {"GITHUB_STEP_SUMMARY": summary}):
            code, out, _ = self.run_cli("--github", "--no-save")
        self.assertEqual(code, 1)
        annotations = [line for line in out.splitlines() if line.startswith("::")]
        self.assertEqual(len(annotations), 2)
        self.assertTrue(annotations[0].startswith("::error title=Regression%3A refund::"))
        with open(summary) as handle:
            text = handle.read()
        self.assertTrue(text.startswith("earlier step\n"))
        self.assertIn("refund", text[len("earlier step\n"):])

    def test_quiet_prints_counts_regressions_and_errors_only(self):
        self.run_cli()
        self.answer({**GOOD, "refund?": "no", "json?": "!raise"})
        self.write_cases(CASES + [{"id": "known", "input": "short?", "checks": [
            {"type": "max_words", "n": 0}]}])
        code, out, _ = self.run_cli("-q", "--no-save")
        self.assertEqual(code, 2)
        self.assertNotIn("evals 0.1.0", out)
        self.assertIn("REGRESSED: refund", out)
        self.assertIn("ERROR: json", out)
        self.assertNotIn("NEW FAIL", out)
        self.assertTrue(out.startswith("pass rate "))

    def test_validate_list_checks_and_version_call_no_model(self):
        out = io.StringIO()
        self.assertEqual(evals.main(["--cases", self.cases, "--validate"], out), 0)
        self.assertEqual(out.getvalue(), f"{self.cases}: 3 cases, all valid\n")
        out = io.StringIO()
        self.assertEqual(evals.main(["--list-checks"], out), 0)
        for name in evals.CHECKS:
            self.assertIn(f"  {name} ", out.getvalue())
        out = io.StringIO()
        self.assertEqual(evals.main(["--version"], out), 0)
        self.assertEqual(out.getvalue().strip(), f"evals {evals.__version__}")
        self.assertEqual(self.calls(), [])

    def test_help_documents_exit_codes(self):
        out = io.StringIO()
        old, sys.stdout = sys.stdout, out
        try:
            code = evals.main(["--help"])
        finally:
            sys.stdout = old
        self.assertEqual(code, 0)
        self.assertIn("exit codes: 0 nothing regressed", out.getvalue())

    def test_a_usage_error_is_one_line_and_exit_2(self):
        for argv, words in ((["--shard", "3/2"], "evals.py: error: argument --shard: expected "
                             "K/N with 1 <= K <= N, e.g. 2/4, got '3/2'"),
                            (["merge"], "evals.py merge: error: the following arguments are "
                             "required: RECORD")):
            err = io.StringIO()
            self.assertEqual(evals.main(argv, io.StringIO(), err), 2)
            self.assertEqual(err.getvalue(), f"{words} (--help lists the options)\n")
        self.assertEqual(self.calls(), [])

    def help_of(self, *command):
        out = io.StringIO()
        old, sys.stdout = sys.stdout, out
        try:
            self.assertEqual(evals.main([*command, "--help"]), 0)
        finally:
            sys.stdout = old
        return " ".join(out.getvalue().split())

    def test_each_command_says_what_its_options_do_there(self):
        # add and history read --baseline and never update it; add's --output is not stdin's.
        add, history = self.help_of("add"), self.help_of("history")
        self.assertIn("--baseline FILE the run record --from-run reads", add)
        self.assertIn("--output TEXT the model output to score the new checks on", add)
        self.assertIn("--baseline FILE the baseline whose folder holds the default history",
                      history)
        for text in (add, history):
            self.assertNotIn("compares with and updates", text)
            self.assertNotIn("standard input", text)


class AtomicWriteTest(unittest.TestCase):
    def test_a_write_that_fails_midway_leaves_the_old_file_whole(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "last_run.json")
            evals_extras.write_json_atomic(path, {"cases": [1, 2, 3]})
            # json.dump has written the big list to the temporary file when it meets the object
            # it cannot encode, as a Ctrl-C in the middle of a write would stop it.
            with self.assertRaises(TypeError):
                evals_extras.write_json_atomic(path, {"big": ["x" * 1000] * 100, "bad": object()})
            with open(path) as handle:
                self.assertEqual(json.load(handle), {"cases": [1, 2, 3]})
            self.assertEqual(os.listdir(tmp), ["last_run.json"])


class InterruptTest(unittest.TestCase):
    """Ctrl-C and SIGTERM in a real process: partial summary, exit 130, baseline untouched."""

    def run_until_signal(self, sig):
        with tempfile.TemporaryDirectory() as tmp:
            with open(os.path.join(tmp, "client.py"), "w") as handle:
                handle.write(
                    "import time, os\n"
                    "def ask(prompt):\n"
                    "    if prompt == 'slow':\n"
                    "        open(os.path.join(os.path.dirname(__file__), 'started'), 'w').close()\n"
                    "        time.sleep(30)\n"
                    "    return 'fine answer'\n")
            with open(os.path.join(tmp, "cases.jsonl"), "w") as handle:
                for name in ("fast", "slow", "never"):
                    handle.write(json.dumps({"id": name, "input": name, "checks": [
                        {"type": "max_words", "n": 5}]}) + "\n")
            baseline = os.path.join(tmp, "last_run.json")
            with open(baseline, "w") as handle:
                handle.write('{"rate": 1.0, "results": {"fast": true}, "ts": 0}')
            # A shell's background job starts with SIGINT ignored, and Python keeps it so:
            # give the child the default disposition, as a terminal's foreground job has.
            process = subprocess.Popen(
                [sys.executable, EVALS, "--client", "client:ask"], cwd=tmp,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
            try:
                deadline = time.monotonic() + 20
                while not os.path.exists(os.path.join(tmp, "started")):
                    self.assertIsNone(process.poll(), "evals.py exited early")
                    self.assertLess(time.monotonic(), deadline, "the slow call never started")
                    time.sleep(0.05)
                process.send_signal(sig)
                out, err = process.communicate(timeout=20)
            finally:
                if process.poll() is None:
                    process.kill()
                    process.communicate()
            with open(baseline) as handle:
                kept = handle.read()
            return process.returncode, out, err, kept

    def test_ctrl_c(self):
        code, out, err, kept = self.run_until_signal(signal.SIGINT)
        self.assertEqual(code, 130, err)
        self.assertIn("(1/1)", out)
        self.assertIn("interrupted after 1 of 3 cases; no record written", err)
        self.assertEqual(kept, '{"rate": 1.0, "results": {"fast": true}, "ts": 0}')

    def test_sigterm(self):
        code, _, err, kept = self.run_until_signal(signal.SIGTERM)
        self.assertEqual(code, 130, err)
        self.assertIn('"fast": true', kept)


class ShippedSuiteTest(unittest.TestCase):
    def test_recorded_outputs_pass_the_shipped_suite(self):
        with tempfile.TemporaryDirectory() as tmp:
            out = io.StringIO()
            code = evals.main(["--cases", os.path.join(ROOT, "cases.jsonl"),
                               "--baseline", os.path.join(tmp, "last_run.json"),
                               "--rescore", os.path.join(ROOT, "recordings.jsonl")],
                              out, io.StringIO())
            self.assertEqual(code, 0, out.getvalue())
            self.assertIn("pass rate 100.0%", out.getvalue())


if __name__ == "__main__":
    unittest.main()
