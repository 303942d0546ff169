"""The cache of live calls: `python evals.py --cache` against a loopback OpenAI-compatible server
that counts the requests it receives, and my_client's cache functions in process.

The end-to-end tests run evals' command line (evals.main in this process, or `python evals.py`
as a new process where that matters) and count what reaches the server; the client learns of
the cache through EVALS_CACHE, set by evals before loading it.
"""

import contextlib
import io
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import types
import unittest
from unittest import mock

import evals
from tests._loopback import LoopbackServer
from tests.test_live_runs import (BAD_TEXT, CLIENT, EVALS, GOOD_TEXT, KEY, MODEL, RUN_TIMEOUT,
                                  LiveRunCase, completion, run_evals)

CACHE_LINE = "{} of {} replies came from the cache (.evals/cache.sqlite); --no-cache calls the model"


def _by_prompt(prompt, n):
    """A server whose answer depends on the prompt: "Good ..." passes, "Bad ..." fails, "Empty"
    is an empty answer, "Broken" a 500 every time (retry after 10 ms), "Refused" a 400."""
    if prompt.startswith("Broken"):  # retried at once: no backoff's wait (up to 1 s a run)
        return {"status": 500, "headers": {"retry-after-ms": "10"},
                "json": {"error": {"message": "The server had an error"}}}
    if prompt.startswith("Refused"):
        return {"status": 400, "json": {"error": {"message": "Invalid request",
                                                  "type": "invalid_request_error"}}}
    text = {"Good": GOOD_TEXT, "Bad": BAD_TEXT, "Empty": ""}[prompt.split()[0]]
    return {"json": completion(text)}


def _alternating(prompt, n):
    """The n-th request with a prompt passes when n is odd: repeats of a case differ."""
    return {"json": completion(GOOD_TEXT if n % 2 else BAD_TEXT)}


class CacheRunCase(LiveRunCase):
    def setUp(self):
        super().setUp()
        self.server = self.start_server(_by_prompt)

    def run_in_a_process(self, server, *args, **env_extra):
        """`python evals.py` as a new process (run_evals runs evals.main in this one)."""
        code, self.stdout, self.stderr = run_evals(self.dir, server, *args, **env_extra)
        return code

    def cases(self, *prompts):
        self.write_cases([(prompt.lower().replace(" ", "-"), prompt) for prompt in prompts])

    def requests(self):
        return sum(self.server.counts().values())

    def run_cached(self, *args, **env):
        """Run with `args`; returns (exit code, requests the server received)."""
        before = self.requests()
        code = self.run_evals(self.server, *args, **env)
        return code, self.requests() - before

    def verdicts(self):
        return {e["id"]: e["status"] for e in self.record()["cases"]}


class SecondRunTests(CacheRunCase):
    def test_a_second_run_makes_no_request_and_gives_the_same_verdicts(self):
        self.cases("Good one", "Bad one", "Good two", "Empty one")
        code, sent = self.run_cached("--cache")
        self.assertEqual((code, sent), (0, 4), self.describe())
        first = self.record()
        self.assertEqual(first["summary"]["cached"], 0)
        self.assertIn(CACHE_LINE.format(0, 4), self.stdout)

        code, sent = self.run_cached("--cache")
        self.assertEqual((code, sent), (0, 0), self.describe())
        second = self.record()
        self.assertEqual(self.verdicts(), {"good-one": "pass", "bad-one": "fail",
                                           "good-two": "pass", "empty-one": "fail"})
        self.assertEqual([(e["id"], e["status"], e["output"]) for e in second["cases"]],
                         [(e["id"], e["status"], e["output"]) for e in first["cases"]])
        self.assertIn(CACHE_LINE.format(4, 4), self.stdout)
        self.assertEqual(second["summary"]["cached"], 4)
        # Tokens and cost as when the replies were made; no latency: no model time was spent.
        self.assertEqual(second["summary"]["tokens"], first["summary"]["tokens"])
        self.assertEqual(second["summary"]["cost_usd"], first["summary"]["cost_usd"])
        self.assertEqual(second["summary"]["latency_s"], {})
        self.assertTrue(first["summary"]["latency_s"])
        self.assertEqual({e["latency_s"] for e in second["cases"]}, {None})
        # each reply keeps the latency of the call that made it, which its checks see
        for kept, live in zip(second["cases"], first["cases"]):
            self.assertTrue(0 < kept["kept_latency_s"] <= live["latency_s"])
        self.assertNotIn("kept_latency_s", first["cases"][0])
        self.assertEqual([e["sent"] for e in second["cases"]], [e["sent"] for e in first["cases"]])

    def test_the_environment_variable_turns_it_on_and_no_cache_turns_it_off(self):
        self.cases("Good one", "Bad one")
        self.assertEqual(self.run_cached(EVALS_CACHE="1")[1], 2)
        self.assertEqual(self.run_cached(EVALS_CACHE="1")[1], 0)
        code, sent = self.run_cached("--no-cache", EVALS_CACHE="1")
        self.assertEqual(sent, 2, self.describe())
        self.assertNotIn("cached", self.record()["summary"])
        self.assertNotIn("from the cache", self.stdout)
        # --no-cache neither reads nor writes: the entries of the first run are still there.
        self.assertEqual(self.run_cached("--cache")[1], 0)

    def test_a_run_without_the_cache_records_no_count(self):
        self.cases("Good one")
        self.assertEqual(self.run_cached()[1], 1)
        self.assertEqual(self.run_cached()[1], 1)
        self.assertNotIn("cached", self.record()["summary"])
        self.assertFalse(os.path.exists(os.path.join(self.dir, ".evals", "cache.sqlite")))

    def test_a_cached_run_spends_nothing_of_the_budget(self):
        self.cases("Good one", "Good two", "Good three")
        self.assertEqual(self.run_cached("--cache")[1], 3)
        # Below the price of one call: a live run would call once, then refuse the rest.
        code, sent = self.run_cached("--cache", "--budget", "0.000001")
        self.assertEqual((code, sent), (0, 0), self.describe())
        self.assertEqual(set(self.verdicts().values()), {"pass"})


class RepeatTests(CacheRunCase):
    def test_one_reply_is_kept_per_repeat(self):
        self.server = self.start_server(_alternating)
        self.cases("Good one", "Good two")
        code, sent = self.run_cached("--cache", "--repeat", "3")
        self.assertEqual(sent, 6, self.describe())
        first = {e["id"]: [a["output"] for a in e["attempts"]] for e in self.record()["cases"]}
        self.assertEqual(first["good-one"], [GOOD_TEXT, BAD_TEXT, GOOD_TEXT])

        code, sent = self.run_cached("--cache", "--repeat", "3", "-j", "2", "--timeout", "10")
        self.assertEqual(sent, 0, self.describe())
        self.assertIn(CACHE_LINE.format(6, 6), self.stdout)
        again = {e["id"]: [a["output"] for a in e["attempts"]] for e in self.record()["cases"]}
        self.assertEqual(again, first)  # each repeat its own reply, in its place
        self.assertEqual({e["id"]: e["flaky"] for e in self.record()["cases"]},
                         {"good-one": True, "good-two": True})

        # Two more repeats: only those call the model.
        code, sent = self.run_cached("--cache", "--repeat", "5")
        self.assertEqual(sent, 4, self.describe())
        self.assertIn(CACHE_LINE.format(6, 10), self.stdout)


class MissTests(CacheRunCase):
    def test_a_changed_request_parameter_misses(self):
        self.cases("Good one", "Bad one")
        self.assertEqual(self.run_cached("--cache")[1], 2)
        tools = os.path.join(self.dir, "tools.json")
        with open(tools, "w", encoding="utf-8") as handle:
            json.dump([{"name": "lookup_order", "description": "Find an order",
                        "parameters": {"type": "object", "properties": {}}}], handle)
        for name, value in (("EVALS_MODEL", "gpt-4.1-mini"), ("EVALS_TEMPERATURE", "0.5"),
                            ("EVALS_MAX_TOKENS", "64"), ("EVALS_SYSTEM_PROMPT", "Be brief."),
                            ("EVALS_TOOLS", tools)):
            with self.subTest(name=name):
                self.assertEqual(self.run_cached("--cache", **{name: value})[1], 2,
                                 self.describe())
                self.assertEqual(self.run_cached("--cache", **{name: value})[1], 0)
        # What is not part of the request does not matter: another key, a timeout.
        self.assertEqual(self.run_cached("--cache", OPENAI_API_KEY="sk-another-key-0000",
                                         EVALS_TIMEOUT="5")[1], 0, self.describe())

    def test_a_changed_input_misses_for_that_case_only(self):
        self.cases("Good one", "Bad one")
        self.assertEqual(self.run_cached("--cache")[1], 2)
        self.cases("Good one", "Bad one, reworded")
        self.assertEqual(self.server.counts().get("Bad one, reworded"), None)
        self.assertEqual(self.run_cached("--cache")[1], 1)
        self.assertEqual(self.server.counts()["Bad one, reworded"], 1)

    def test_errors_are_not_cached_and_empty_answers_are(self):
        self.cases("Broken one", "Refused one", "Empty one")
        code, sent = self.run_cached("--cache")
        self.assertEqual(code, 2)
        self.assertEqual(self.server.counts(), {"Broken one": 3, "Refused one": 1,
                                                "Empty one": 1})  # EVALS_MAX_ATTEMPTS=3
        self.assertIn("0 of 1 reply came from the cache (.evals/cache.sqlite)", self.stdout)
        code, sent = self.run_cached("--cache")
        self.assertEqual(code, 2)
        self.assertEqual(self.server.counts(), {"Broken one": 6, "Refused one": 2,
                                                "Empty one": 1})
        self.assertEqual(self.verdicts(), {"broken-one": "error", "refused-one": "error",
                                           "empty-one": "fail"})
        self.assertEqual(self.record()["summary"]["cached"], 1)

    def test_a_refused_default_is_dropped_and_the_next_run_still_hits(self):
        # A model that refuses temperature: the first call is sent again without it, and every
        # later call of that run goes without it. The cache keys the request as configured, so
        # a new process (which starts by sending a temperature) finds every reply.
        def refuses_temperature(request):
            if "temperature" in request["json"]:
                return {"status": 400, "json": {"error": {
                    "message": "Unsupported value: 'temperature' does not support 0 with this "
                               "model. Only the default (1) value is supported.",
                    "type": "invalid_request_error", "code": "unsupported_value"}}}
            return {"json": completion()}

        server = LoopbackServer().start()
        self.addCleanup(server.stop)
        server.behave(refuses_temperature)
        at = types.SimpleNamespace(url=server.url + "/v1")
        self.cases("Good one", "Good two", "Good three")
        self.assertEqual(self.run_in_a_process(at, "--cache"), 0, self.describe())
        self.assertEqual(len(server.requests), 4)
        self.assertEqual(self.run_in_a_process(at, "--cache"), 0, self.describe())
        self.assertEqual(len(server.requests), 4)
        self.assertEqual([e["sent"] for e in self.record()["cases"]], [{"temperature": None}] * 3)


class OptionTests(CacheRunCase):
    def test_an_unknown_value_of_the_variable_is_refused_before_any_call(self):
        self.cases("Good one")
        code, sent = self.run_cached(EVALS_CACHE="maybe")
        self.assertEqual((code, sent), (2, 0))
        self.assertIn("EVALS_CACHE must be 1 (on) or 0 (off), got 'maybe'", self.stderr)
        # An explicit choice does not read it.
        self.assertEqual(self.run_cached("--cache", EVALS_CACHE="maybe")[0], 0)

    def test_contradictory_options_are_refused(self):
        self.cases("Good one")
        for args in (("--cache", "--no-cache"), ("--cache", "--rescore", "record.json")):
            with self.subTest(args=args):
                code, sent = self.run_cached(*args)
                self.assertEqual((code, sent), (2, 0))
                self.assertIn("contradict each other", self.stderr)

    def test_omit_outputs_refuses_the_cache_that_would_keep_every_reply_text(self):
        # --omit-outputs leaves output text out of every file written; the cache wrote each
        # reply into .evals/cache.sqlite all the same
        self.cases("Good one")
        for args, env in ((("--cache", "--omit-outputs"), {}),
                          (("--omit-outputs",), {"EVALS_CACHE": "1"})):
            with self.subTest(args=args, env=env):
                code, sent = self.run_cached(*args, **env)
                self.assertEqual((code, sent), (2, 0), self.stderr)
                self.assertIn("--omit-outputs contradict each other", self.stderr)
                self.assertFalse(os.path.exists(os.path.join(self.dir, ".evals", "cache.sqlite")))
        code, sent = self.run_cached("--omit-outputs", "--no-cache", EVALS_CACHE="1")
        self.assertEqual((code, sent), (0, 1), self.stderr)

    def test_help_says_what_keys_the_cache_and_the_environment_is_left_alone(self):
        out = io.StringIO()
        before = dict(os.environ)
        self.assertEqual(evals.main(["--help"], out, io.StringIO()), 0)
        text = " ".join(out.getvalue().split())
        self.assertIn("--no-cache", text)
        self.assertIn("answer each call made before by the same client (as it declares itself, "
                      "else its file's content) with the same input and repeat", text)
        self.assertEqual(dict(os.environ), before)


def _popen_evals(directory, server, out, *args):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("EVALS_") and not k.endswith("_API_KEY")}
    env.update({"EVALS_PROVIDER": "openai", "OPENAI_API_KEY": KEY, "EVALS_BASE_URL": server.url,
                "EVALS_MODEL": MODEL, "EVALS_TIMEOUT": "5", "PYTHONDONTWRITEBYTECODE": "1"})
    return subprocess.Popen([sys.executable, EVALS, "--client", CLIENT, "--out", out,
                             "--no-history", *args], cwd=directory, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


class ConcurrentRunTests(CacheRunCase):
    def test_runs_at_once_share_the_cache_without_corrupting_it(self):
        self.server = self.start_server(lambda prompt, n: {"delay": 0.01, "json": completion()})
        prompts = ["Good %d" % number for number in range(40)]
        self.cases(*prompts)
        runs = [_popen_evals(self.dir, self.server, "run-%d.json" % number, "--cache", "-j", "8")
                for number in range(3)]
        outputs = [run.communicate(timeout=RUN_TIMEOUT) for run in runs]
        for run, (out, err) in zip(runs, outputs):
            self.assertEqual(run.returncode, 0, err.decode())
            self.assertNotIn(b"warning", err)
        # Each case was asked at least once and at most once per run.
        counts = self.server.counts()
        self.assertEqual(set(counts), set(prompts))
        self.assertTrue(all(1 <= n <= 3 for n in counts.values()), counts)
        path = os.path.join(self.dir, ".evals", "cache.sqlite")
        with contextlib.closing(sqlite3.connect(path)) as db:
            self.assertEqual(db.execute("PRAGMA integrity_check").fetchone()[0], "ok")
            self.assertEqual(db.execute("SELECT COUNT(*) FROM answers").fetchone()[0], 40)
        self.assertEqual(self.run_cached("--cache", "-j", "8")[1], 0, self.describe())
        self.assertIn(CACHE_LINE.format(40, 40), self.stdout)


class CurrentAttemptTests(unittest.TestCase):
    CASES = [evals.Case("a", "A", ({"type": "contains_any", "values": ["x"]},)),
             evals.Case("b", "B", ({"type": "contains_any", "values": ["x"]},))]

    def test_each_call_is_told_its_case_and_repeat_in_every_way_a_run_calls(self):
        for concurrency, timeout in ((1, None), (2, None), (1, 5.0), (2, 5.0)):
            seen = []

            def client(text, *, case, attempt):
                seen.append((case.id, attempt))
                return "x"

            with self.subTest(concurrency=concurrency, timeout=timeout):
                evals.run_cases(self.CASES, client, evals.RunOptions(
                    concurrency=concurrency, timeout=timeout, repeat=3))
                self.assertEqual(sorted(seen), [(i, n) for i in "ab" for n in range(3)])

    def test_a_run_counts_the_replies_its_client_says_were_cached(self):
        class Reply(str):
            cached = True

        calls = []

        def client(text):
            calls.append(text)
            return Reply("x") if len(calls) % 2 else "x"

        options = evals.RunOptions(repeat=3)
        evals.run_cases(self.CASES, client, options)
        self.assertEqual((options.replies, options.cached), (6, 3))
        evals.run_cases(self.CASES[:1], lambda text: Reply("x"), options)  # a run starts at 0
        self.assertEqual((options.replies, options.cached), (3, 3))


class MainTests(unittest.TestCase):
    def test_a_replayed_run_says_that_the_cache_was_not_used(self):
        # With no provider evals replays recordings, which the cache never keeps: the run
        # says so rather than "0 of N replies came from the cache; --no-cache calls the model".
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        cases, recordings = (os.path.join(tmp.name, name)
                             for name in ("cases.jsonl", "recordings.jsonl"))
        with open(cases, "w", encoding="utf-8") as handle:
            handle.write(json.dumps({"id": "a", "input": "A", "checks": [
                {"type": "contains_any", "values": ["x"]}]}) + "\n")
        with open(recordings, "w", encoding="utf-8") as handle:
            handle.write(json.dumps({"id": "a", "input": "A", "output": "x"}) + "\n")
        environ = {k: v for k, v in os.environ.items() if not k.startswith("EVALS_")}
        environ["EVALS_RECORDINGS"] = recordings
        with mock.patch.dict(os.environ, environ, clear=True):
            out, err = io.StringIO(), io.StringIO()
            code = evals.main(["--cases", cases, "--client", "my_client:ask", "--no-save",
                               "--cache"], stdout=out, stderr=err)
        self.assertEqual(code, 0, out.getvalue())
        self.assertIn("replaying recorded outputs from " + recordings, err.getvalue())
        self.assertIn("the cache (.evals/cache.sqlite) was not used: every reply was a recorded "
                      "one, replayed, and the cache keeps only live calls\n", out.getvalue())
        self.assertNotIn("came from the cache", out.getvalue())


if __name__ == "__main__":
    unittest.main()
