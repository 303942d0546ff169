"""End-to-end runs of the command line against a loopback OpenAI-compatible server.

Each test starts a threaded HTTP server on 127.0.0.1 that decides what to do from the prompt
text (fault injection per case), writes a case file into a temporary directory and runs
`python evals.py` there in a subprocess with my_client configured through the environment
(FaultInjectionTests), or evals.main there in this process with the same environment.
Every wait is bounded: subprocess timeouts, server-side delays, EVALS_TIMEOUT,
EVALS_MAX_ATTEMPTS and EVALS_MAX_RETRY_WAIT.
"""

import contextlib
import io
import glob
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import unittest
from unittest import mock

import evals
import evals_extras
from tests._loopback import PromptServer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EVALS = os.path.join(ROOT, "evals.py")
CLIENT = os.path.join(ROOT, "my_client.py") + ":ask"
KEY = "sk-livetest-SECRET-9f8e7d6c5b4a39281706"
MODEL = "gpt-4o-mini"
RUN_TIMEOUT = 60  # seconds, per subprocess
MAX_SERVER_DELAY = 3.0  # seconds; no handler sleeps longer

GOOD_TEXT = "Approved: a manager will review your refund within 3 days."
BAD_TEXT = "Sorry, I cannot help with that."


def completion(text=GOOD_TEXT, finish="stop", usage=(12, 8), choices=True):
    body = {"id": "chatcmpl-live", "object": "chat.completion", "model": MODEL,
            "choices": [], "usage": {"prompt_tokens": usage[0], "completion_tokens": usage[1],
                                     "total_tokens": usage[0] + usage[1]}}
    if choices:
        body["choices"] = [{"index": 0, "finish_reason": finish,
                            "message": {"role": "assistant", "content": text}}]
    return body


# The fault of each case, chosen by its prompt: (case id, prompt, behaviour, expected status,
# expected requests at the server, words the error reason must contain).
def _ok(prompt, n):
    return {"json": completion()}


def _rate_limited_once(prompt, n):
    if n == 1:
        return {"status": 429, "headers": {"Retry-After": "0"},
                "json": {"error": {"message": "Rate limit reached, retry shortly",
                                   "type": "requests", "code": "rate_limit_exceeded"}}}
    return {"json": completion()}


def _busy_twice(prompt, n):
    if n <= 2:
        return {"status": 503, "body": b"<html><body>Service Unavailable</body></html>"}
    return {"json": completion()}


def _always_500(prompt, n):
    return {"status": 500, "json": {"error": {"message": "The server had an error",
                                              "type": "server_error"}}}


def _slow(prompt, n):
    return {"delay": 2.0, "json": completion()}


def _reset(prompt, n):
    return {"reset": True}


def _not_json(prompt, n):
    # Echoes the key, as some misconfigured proxies do: it must be scrubbed from the error.
    return {"status": 200, "body": ("<html>gateway page for Bearer %s</html>" % KEY).encode()}


def _empty_choices(prompt, n):
    return {"json": completion(choices=False)}


TRUNCATED_TEXT = "Approved: a manager will"


def _truncated(prompt, n):
    return {"json": completion(text=TRUNCATED_TEXT, finish="length")}


def _unauthorized(prompt, n):
    return {"status": 401, "json": {"error": {
        "message": "Incorrect API key provided: %s. You can find your API key at "
                   "https://platform.openai.com/account/api-keys." % KEY,
        "type": "invalid_request_error", "code": "invalid_api_key"}}}


FAULTS = [
    ("plain-ok", "Plain question", _ok, "pass", 1, ()),
    ("rate-limited-once", "Rate limited once", _rate_limited_once, "pass", 2, ()),
    ("busy-twice", "Busy twice", _busy_twice, "pass", 3, ()),
    ("always-500", "Always 500", _always_500, "error", 3, ("HTTP 500", "3 attempts")),
    ("too-slow", "Too slow", _slow, "error", 3, ("no response within", "EVALS_TIMEOUT")),
    ("connection-reset", "Connection reset", _reset, "error", 3, ("connection",)),
    ("not-json", "Not JSON", _not_json, "error", 1, ("non-JSON",)),
    ("empty-choices", "Empty choices", _empty_choices, "error", 1, ("no choices",)),
    # An answer cut at the token limit is the model's answer: scored (it says "manager"), not
    # an error; its finish_reason says how it ended.
    ("truncated", "Truncated", _truncated, "pass", 1, ()),
]


def write_cases(directory, cases):
    """cases.jsonl in `directory`: one case per (id, prompt), passing when "manager" is said."""
    with open(os.path.join(directory, "cases.jsonl"), "w", encoding="utf-8") as handle:
        for case_id, prompt in cases:
            handle.write(json.dumps({
                "id": case_id, "input": prompt,
                "checks": [{"type": "contains_any", "values": ["manager"]}],
            }) + "\n")


def _environment(server, env_extra):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("EVALS_") and not k.endswith("_API_KEY")}
    env.update({
        "EVALS_PROVIDER": "openai", "OPENAI_API_KEY": KEY, "EVALS_BASE_URL": server.url,
        "EVALS_MODEL": MODEL, "EVALS_TIMEOUT": "0.75", "EVALS_MAX_ATTEMPTS": "3",
        "EVALS_MAX_RETRY_WAIT": "1", "PYTHONDONTWRITEBYTECODE": "1",
    })
    env.update(env_extra)
    return env


def run_evals_in_process(directory, server, *args, **env_extra):
    """run_evals's command line, environment and folder, run by evals.main in this process
    (a new process costs about half a second of start-up a run); my_client's lines on stderr
    included. Returns (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    cwd = os.getcwd()
    os.chdir(directory)
    try:
        with mock.patch.dict(os.environ, _environment(server, env_extra), clear=True), \
                contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = evals.main(["--client", CLIENT, "--out", "record.json", *args], out, err)
    finally:
        os.chdir(cwd)
    return code, out.getvalue(), err.getvalue()


def run_evals(directory, server, *args, **env_extra):
    """Run evals.py in `directory` against `server`; returns (exit code, stdout, stderr)."""
    env = _environment(server, env_extra)
    done = subprocess.run(
        [sys.executable, EVALS, "--client", CLIENT, "--out", "record.json", *args],
        cwd=directory, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        timeout=RUN_TIMEOUT)
    return (done.returncode, done.stdout.decode("utf-8", "replace"),
            done.stderr.decode("utf-8", "replace"))


def read_record(directory, name="record.json"):
    with open(os.path.join(directory, name), encoding="utf-8") as handle:
        return json.load(handle)


class LiveRunCase(unittest.TestCase):
    """Temp directory, loopback server and a helper that runs evals' command line (in this
    process: FaultInjectionTests runs `python evals.py` as a process)."""

    def setUp(self):
        tmp = tempfile.TemporaryDirectory(prefix="evals-live-")
        self.addCleanup(tmp.cleanup)
        self.dir = tmp.name

    def start_server(self, behave):
        server = PromptServer(behave, MAX_SERVER_DELAY)
        self.addCleanup(server.stop)
        return server

    def write_cases(self, cases):
        write_cases(self.dir, cases)

    def run_evals(self, server, *args, **env_extra):
        code, self.stdout, self.stderr = run_evals_in_process(self.dir, server, *args,
                                                              **env_extra)
        return code

    def record(self):
        return read_record(self.dir)

    def entries(self):
        return {e["id"]: e for e in self.record()["cases"]}

    def describe(self):
        return "\nstdout:\n%s\nstderr:\n%s" % (self.stdout[-3000:], self.stderr[-3000:])


class FaultInjectionTests(unittest.TestCase):
    """One run, -j 4, one fault per case: statuses, reasons, retries, order, no key leaked."""

    @classmethod
    def setUpClass(cls):
        tmp = tempfile.TemporaryDirectory(prefix="evals-live-")
        cls.addClassCleanup(tmp.cleanup)
        cls.dir = tmp.name
        behaviours = {prompt: behave for _id, prompt, behave, *_ in FAULTS}
        cls.server = PromptServer(lambda prompt, n: behaviours[prompt](prompt, n),
                                  MAX_SERVER_DELAY)
        cls.addClassCleanup(cls.server.stop)
        write_cases(cls.dir, [(case_id, prompt) for case_id, prompt, *_ in FAULTS])
        cls.code, cls.stdout, cls.stderr = run_evals(
            cls.dir, cls.server, "-j", "4", "--junit", "report.xml", "--markdown", "report.md",
            "--html", "report.html", "--json", "copy.json", "--record", "recorded.jsonl")

    def record(self):
        return read_record(self.dir)

    def entries(self):
        return {e["id"]: e for e in self.record()["cases"]}

    def describe(self):
        return "\nstdout:\n%s\nstderr:\n%s" % (self.stdout[-3000:], self.stderr[-3000:])

    def test_the_run_says_once_which_provider_model_and_url_it_calls(self):
        notice = f"my_client: ask calls openai model {MODEL} at {self.server.url}\n"
        self.assertEqual(self.stderr.count(notice), 1, self.describe())

    def test_exit_code_is_2_for_errored_cases(self):
        self.assertEqual(self.code, 2, self.describe())
        summary = self.record()["summary"]
        self.assertEqual(summary["total"], len(FAULTS))
        self.assertEqual(summary["passed"], 4)
        self.assertEqual(summary["errored"], len(FAULTS) - 4)
        self.assertIn("errored", self.stdout)

    def test_statuses_and_reasons(self):
        entries = self.entries()
        for case_id, _prompt, _behave, status, _count, words in FAULTS:
            with self.subTest(case=case_id):
                entry = entries[case_id]
                self.assertEqual(entry["status"], status, entry)
                if status == "pass":
                    self.assertNotIn("error", entry)
                    self.assertEqual((entry["output"], entry["finish_reason"]),
                                     (TRUNCATED_TEXT, "length") if case_id == "truncated"
                                     else (GOOD_TEXT, "stop"))
                    self.assertEqual(entry["usage"], {"input_tokens": 12, "output_tokens": 8})
                    self.assertEqual(entry["model"], MODEL)
                else:
                    self.assertEqual(entry["checks"], [], "an error is never scored")
                    self.assertNotIn("output", entry)
                    self.assertTrue(entry["error"].startswith("ProviderError: openai: "), entry)
                    self.assertNotIn("\n", entry["error"])
                    for word in words:
                        self.assertIn(word.lower(), entry["error"].lower(), entry["error"])

    def test_requests_per_prompt_count_the_retries(self):
        counts = self.server.counts()
        expected = {prompt: count for _id, prompt, _b, _s, count, _w in FAULTS}
        self.assertEqual(counts, expected)
        self.assertEqual({r["headers"].get("authorization", "") for r in self.server.requests},
                         {"Bearer " + KEY})

    def test_one_result_per_case_in_case_file_order(self):
        ids = [case_id for case_id, *_ in FAULTS]
        for name in ("record.json", "copy.json"):
            with open(os.path.join(self.dir, name), encoding="utf-8") as handle:
                self.assertEqual([e["id"] for e in json.load(handle)["cases"]], ids, name)
        self.assertEqual(self.record()["options"]["concurrency"], 4)

    def test_reports_and_recordings_are_written(self):
        for name in ("report.xml", "report.md", "report.html", "recorded.jsonl"):
            self.assertTrue(os.path.getsize(os.path.join(self.dir, name)) > 0, name)
        with open(os.path.join(self.dir, "recorded.jsonl"), encoding="utf-8") as handle:
            recorded = {row["id"]: row["output"] for row in map(json.loads, handle)}
        self.assertEqual(set(recorded), {i for i, _p, _b, status, *_ in FAULTS
                                         if status == "pass"},
                         "errored calls must not be recorded as outputs")
        # A reply is recorded with its finish reason, "stop" too: a replay must see what the
        # live call saw (a finish_reason check fails on a reply whose ending is unknown).
        self.assertEqual(recorded["plain-ok"], {"text": GOOD_TEXT, "finish_reason": "stop"})
        self.assertEqual(recorded["truncated"], {"text": TRUNCATED_TEXT, "finish_reason": "length"})

    def test_api_key_appears_nowhere(self):
        self.assertNotIn(KEY, self.stdout)
        self.assertNotIn(KEY, self.stderr)
        key = KEY.encode("utf-8")
        seen = []
        for folder, _dirs, files in os.walk(self.dir):
            for name in files:
                path = os.path.join(folder, name)
                seen.append(os.path.relpath(path, self.dir))
                with open(path, "rb") as handle:
                    self.assertNotIn(key, handle.read(), path)
        self.assertIn("record.json", seen)
        self.assertIn("report.html", seen)


class BudgetTests(LiveRunCase):
    # gpt-4o-mini: $0.15 in / $0.60 out per million tokens. 1000 in + 500 out per call:
    # 1000 * 0.15e-6 + 500 * 0.60e-6 = $0.00045 a call. With a $0.002 budget the first call
    # goes out unestimated, then each next call is estimated at $0.00045 and allowed while
    # spent + 0.00045 <= 0.002: calls 2, 3, 4 (spent 0.00135 + 0.00045 = 0.0018) go out, call 5
    # (0.0018 + 0.00045 = 0.00225) does not. So exactly 4 calls, 6 cases errored.
    PRICE_IN, PRICE_OUT = evals_extras.PRICES[MODEL]
    CALL_COST = (1000 * PRICE_IN + 500 * PRICE_OUT) / 1_000_000
    BUDGET = 0.002
    EXPECTED_CALLS = 4

    def setUp(self):
        super().setUp()
        self.assertAlmostEqual(self.CALL_COST, 0.00045)
        self.server = self.start_server(
            lambda prompt, n: {"json": completion(usage=(1000, 500))})
        self.ids = ["case-%02d" % i for i in range(10)]
        self.write_cases([(i, "Question %s" % i) for i in self.ids])

    def check_budget_run(self, concurrency):
        code = self.run_evals(self.server, "--budget", str(self.BUDGET), "-j", str(concurrency))
        self.assertEqual(code, 2, self.describe())
        self.assertEqual(sum(self.server.counts().values()), self.EXPECTED_CALLS)
        entries = self.entries()
        called = [i for i in self.ids if entries[i]["status"] == "pass"]
        skipped = [i for i in self.ids if entries[i]["status"] == "error"]
        self.assertEqual(len(called), self.EXPECTED_CALLS)
        self.assertEqual(len(skipped), len(self.ids) - self.EXPECTED_CALLS)
        for case_id in skipped:
            self.assertIn("budget", entries[case_id]["error"])
            self.assertNotIn("output", entries[case_id])
        summary = self.record()["summary"]
        self.assertAlmostEqual(summary["cost_usd"], self.EXPECTED_CALLS * self.CALL_COST)
        self.assertLessEqual(summary["cost_usd"], self.BUDGET)
        return called

    def test_budget_stops_calling_serial(self):
        called = self.check_budget_run(1)
        self.assertEqual(called, self.ids[:self.EXPECTED_CALLS])

    def test_budget_stops_calling_concurrent(self):
        self.check_budget_run(4)


class RefusedKeyTests(LiveRunCase):
    def test_after_the_key_is_refused_no_other_case_is_sent(self):
        self.server = self.start_server(_unauthorized)
        ids = ["case-%02d" % i for i in range(6)]
        self.write_cases([(i, "Question %s" % i) for i in ids])
        code = self.run_evals(self.server, "-j", "1")
        self.assertEqual(code, 2, self.describe())
        self.assertEqual(sum(self.server.counts().values()), 1)
        entries = self.entries()
        self.assertIn("HTTP 401", entries["case-00"]["error"])
        self.assertIn("invalid_api_key", entries["case-00"]["error"])
        for case_id in ids[1:]:
            self.assertEqual(entries[case_id]["error"],
                             "not called: the provider refused the credentials (HTTP 401) on "
                             "case 'case-00'; fix the key and run again")
        self.assertIn("ERROR: 5 cases: case-01", self.stdout)
        self.assertNotIn(KEY, self.stdout + self.stderr)


class EmptyAnswerTests(LiveRunCase):
    def test_an_empty_answer_is_scored_not_an_error(self):
        """One rule for an answer with nothing in it: the model finished and said nothing, so
        it is scored, and every check fails ("the output is empty"); it is not an error."""
        self.server = self.start_server(lambda prompt, n: {"json": completion(text="  \n")})
        self.write_cases([("said-nothing", "Question")])
        code = self.run_evals(self.server)
        self.assertEqual(code, 0, self.describe())  # a new failing case is not a regression
        entry = self.entries()["said-nothing"]
        self.assertEqual(entry["status"], "fail")
        self.assertEqual(entry["checks"][0]["reason"], "the output is empty")
        self.assertNotIn("error", entry)


class RepeatTests(LiveRunCase):
    def test_alternating_answers_mark_the_case_flaky(self):
        def behave(prompt, n):
            if prompt == "Flip":
                return {"json": completion(GOOD_TEXT if n % 2 else BAD_TEXT)}
            return {"json": completion()}

        server = self.start_server(behave)
        self.write_cases([("steady", "Steady"), ("flip", "Flip")])
        code = self.run_evals(server, "--repeat", "3")
        self.assertEqual(code, 0, self.describe())
        self.assertEqual(server.counts(), {"Steady": 3, "Flip": 3})
        record = self.record()
        self.assertEqual(record["summary"]["flaky"], [{"id": "flip", "passes": 2, "calls": 3}])
        entries = self.entries()
        # pass, fail, pass: 2 of 3 passes is the default majority
        self.assertEqual(entries["flip"]["status"], "pass")
        self.assertTrue(entries["flip"]["flaky"])
        self.assertEqual([a["status"] for a in entries["flip"]["attempts"]],
                         ["pass", "fail", "pass"])
        self.assertEqual(entries["steady"]["status"], "pass")
        self.assertNotIn("flaky", entries["steady"])

    def test_min_pass_3_of_3_fails_the_flaky_case(self):
        def behave(prompt, n):
            return {"json": completion(GOOD_TEXT if n % 2 else BAD_TEXT)}

        server = self.start_server(behave)
        self.write_cases([("flip", "Flip")])
        code = self.run_evals(server, "--repeat", "3", "--min-pass", "3")
        self.assertEqual(code, 0, self.describe())  # no baseline: a new failure, not a regression
        entry = self.entries()["flip"]
        self.assertEqual(entry["status"], "fail")
        self.assertEqual(self.record()["summary"]["flaky"],
                         [{"id": "flip", "passes": 2, "calls": 3}])


class RateLimitTests(LiveRunCase):
    def test_rate_limit_spaces_the_calls(self):
        server = self.start_server(lambda prompt, n: {"json": completion()})
        self.write_cases([("case-%d" % i, "Question %d" % i) for i in range(10)])
        code = self.run_evals(server, "--rate-limit", "20", "-j", "4")
        self.assertEqual(code, 0, self.describe())
        arrivals = sorted(t for t, _prompt, _in_flight in server.log())
        self.assertEqual(len(arrivals), 10)
        # 20 a second: starts at 0, 0.05, ..., 0.45 s. Allow a little scheduling jitter.
        self.assertGreaterEqual(arrivals[-1] - arrivals[0], 0.40)
        # Never a burst: any 5 consecutive calls span at least two intervals. (They are
        # started 4 intervals apart, but a worker's first call also opens its connection, so
        # arrivals measured at the server can be tens of ms closer on a busy machine: 3 calls
        # started 0.10 s apart arrived 0.043 s apart once. Unlimited, all 10 arrive at once.)
        for first, fifth in zip(arrivals, arrivals[4:]):
            self.assertGreaterEqual(fifth - first, 0.10)

    def test_without_rate_limit_calls_overlap(self):
        server = self.start_server(lambda prompt, n: {"delay": 0.2, "json": completion()})
        self.write_cases([("case-%d" % i, "Question %d" % i) for i in range(8)])
        code = self.run_evals(server, "-j", "4")
        self.assertEqual(code, 0, self.describe())
        arrivals = sorted(t for t, _prompt, _in_flight in server.log())
        self.assertEqual(len(arrivals), 8)
        # 4 in flight: the first 4 arrive together, well inside one 0.2 s answer.
        self.assertLess(arrivals[3] - arrivals[0], 0.15)


class ErroredTests(LiveRunCase):
    def test_errored_reruns_only_the_cases_whose_call_failed(self):
        broken = {"Question 1"}

        def behave(prompt, n):
            if prompt in broken:
                return _always_500(prompt, n)
            return {"json": completion(GOOD_TEXT if prompt != "Question 2" else BAD_TEXT)}

        server = self.start_server(behave)
        self.write_cases([("case-%d" % i, "Question %d" % i) for i in range(3)])
        self.assertEqual(self.run_evals(server), 2, self.describe())  # into record.json
        broken.clear()
        before = server.counts()
        code = self.run_evals(server, "--errored", "--baseline", "record.json", "--out", "rerun.json")
        self.assertEqual(code, 0, self.describe())
        after = server.counts()
        self.assertEqual({p: after[p] - before.get(p, 0) for p in after
                          if after[p] != before.get(p, 0)}, {"Question 1": 1})
        entries = {e["id"]: e for e in read_record(self.dir, "rerun.json")["cases"]}
        self.assertEqual(entries["case-1"]["status"], "pass")
        self.assertEqual(entries["case-2"]["change"], "not_run")  # failed, not errored: kept
        # Nothing errored is nothing to rerun, as for --failed: exit 0, no call.
        before = server.counts()
        code = self.run_evals(server, "--errored", "--baseline", "rerun.json", "--out", "x.json")
        self.assertEqual(code, 0, self.describe())
        self.assertIn("nothing to rerun: no selected case errored in rerun.json", self.stdout)
        self.assertEqual(server.counts(), before)


class ResumeTests(unittest.TestCase):
    """A live run stopped after some answers (SIGTERM, as a CI timeout sends) keeps them; the
    next run with --resume calls only the rest and ends with the record an uninterrupted run
    writes."""

    PROMPTS = ["Question %d" % i for i in range(8)]

    def setUp(self):
        self.slow = True  # the first run: from the 5th case on, answers take their time
        self.server = PromptServer(self.behave, MAX_SERVER_DELAY)
        self.addCleanup(self.server.stop)
        self.dirs = []
        for _ in range(2):
            tmp = tempfile.TemporaryDirectory(prefix="evals-resume-")
            self.addCleanup(tmp.cleanup)
            write_cases(tmp.name, [("case-%d" % i, p) for i, p in enumerate(self.PROMPTS)])
            self.dirs.append(tmp.name)

    def behave(self, prompt, n):
        late = self.slow and self.PROMPTS.index(prompt) >= 4
        return {"delay": MAX_SERVER_DELAY if late else 0, "json": completion()}

    def interrupted_run(self, directory):
        """evals.py -j 1 stopped by SIGTERM once the 5th case was sent (4 answered)."""
        process = subprocess.Popen(
            [sys.executable, EVALS, "--client", CLIENT, "--out", "record.json", "-j", "1"],
            cwd=directory, env=_environment(self.server, {}), stdout=subprocess.PIPE,
            stderr=subprocess.PIPE)
        try:
            for _ in range(400):  # 20 s at most
                if self.server.counts().get(self.PROMPTS[4]) or process.poll() is not None:
                    break
                time.sleep(0.05)
            process.send_signal(signal.SIGTERM)
            out, err = process.communicate(timeout=RUN_TIMEOUT)
        finally:
            if process.poll() is None:
                process.kill()
                process.communicate()
        return process.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")

    @staticmethod
    def comparable(record):
        """A record without what differs between any two runs: times and latencies (a reused
        answer's kept one too)."""
        summary = {k: v for k, v in record["summary"].items() if k not in ("latency_s", "reused")}
        cases = [{k: v for k, v in e.items() if k not in ("latency_s", "kept_latency_s")}
                 for e in record["cases"]]
        return summary, cases

    def test_resume_calls_only_the_cases_without_an_answer(self):
        interrupted, finished = self.dirs
        code, out, err = self.interrupted_run(interrupted)
        self.assertEqual(code, 130, out + err)
        self.assertIn("interrupted after 4 of 8 cases", err)
        journals = glob.glob(os.path.join(interrupted, ".evals", "unfinished-record-*.jsonl"))
        self.assertEqual(len(journals), 1, err)
        journal = journals[0]
        self.assertFalse(os.path.exists(os.path.join(interrupted, "record.json")))

        self.slow, before = False, self.server.counts()
        code, out, err = run_evals(interrupted, self.server, "-j", "2", "--resume")
        self.assertEqual(code, 0, out + err)
        called = {p: n - before.get(p, 0) for p, n in self.server.counts().items()
                  if n - before.get(p, 0)}
        self.assertEqual(called, {p: 1 for p in self.PROMPTS[4:]})
        self.assertIn("4 of 8 answers reused from the interrupted run", out)
        self.assertFalse(os.path.exists(journal), "a finished run deletes the journal")
        resumed = read_record(interrupted)
        self.assertEqual(resumed["summary"]["reused"], 4)

        code, out, err = run_evals(finished, self.server, "-j", "2")
        self.assertEqual(code, 0, out + err)
        self.assertEqual(self.comparable(resumed), self.comparable(read_record(finished)))
        self.assertEqual(resumed["summary"]["passed"], 8)

    def test_a_resume_with_nothing_kept_calls_every_case_and_says_so(self):
        directory = self.dirs[0]
        self.slow = False
        code, out, err = run_evals(directory, self.server, "--resume")
        self.assertEqual(code, 0, out + err)
        self.assertIn("--resume: no interrupted run to resume", err)
        self.assertIn("0 of 8 answers reused", out)
        self.assertEqual(self.server.counts(), {p: 1 for p in self.PROMPTS})
        self.assertEqual([n for n in os.listdir(os.path.join(directory, ".evals"))
                          if n.startswith("unfinished-")], [])


if __name__ == "__main__":
    unittest.main()
