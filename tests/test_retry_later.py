"""A case waiting out a server's Retry-After gives its worker to other cases (my_client's
RetryLater, evals' can_retry_later), against loopback OpenAI-compatible servers.

The server decides each answer from the prompt and the n-th request carrying it, and logs every
request with the number of requests in flight when it arrived. Timing bounds are generous: a
case is retried after a Retry-After of seconds, the others take tenths of one.
"""

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest

import evals
import my_client
from tests._loopback import PromptServer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EVALS = os.path.join(ROOT, "evals.py")
KEY = "sk-retrylater-0123456789"


def completion(text="Approved: a manager will review it."):
    return {"json": {"id": "chatcmpl-1", "object": "chat.completion", "model": "gpt-4o-mini",
                     "choices": [{"index": 0, "finish_reason": "stop",
                                  "message": {"role": "assistant", "content": text}}],
                     "usage": {"prompt_tokens": 5, "completion_tokens": 7}}}


def too_many(retry_after):
    return {"status": 429, "headers": {"Retry-After": str(retry_after)},
            "json": {"error": {"message": "Rate limit reached", "type": "requests",
                               "code": "rate_limit_exceeded"}}}


def cases(*prompts):
    return [evals.Case(prompt, prompt, ({"type": "contains_any", "values": ["manager"]},))
            for prompt in prompts]


class RetryLaterCase(unittest.TestCase):
    def serve(self, behave):
        server = PromptServer(behave)
        self.addCleanup(server.stop)
        return server

    def client(self, server, **overrides):
        self.sleeps = []
        settings = dict(dict(base_url=server.url, api_key=KEY, max_attempts=4,
                             max_retry_wait=60, timeout=10), **overrides)
        return my_client.make_client("openai", sleep=self.sleeps.append, **settings)

    def run_suite(self, client, suite, **options):
        """(results in case order, case ids in the order they finished)."""
        finished = []
        results = evals.run_cases(suite, client, evals.RunOptions(**options),
                                  on_result=lambda result: finished.append(result.id))
        return results, finished


class FreedSlotTests(RetryLaterCase):
    def test_the_other_cases_run_on_both_workers_while_one_waits(self):
        def behave(prompt, n):
            if prompt == "limited" and n == 1:
                return too_many(3)
            return dict(completion(), delay=0.2)

        server = self.serve(behave)
        others = ["other %d" % i for i in range(10)]
        results, finished = self.run_suite(self.client(server), cases("limited", *others),
                                           concurrency=2)
        self.assertEqual([(r.id, r.status) for r in results],
                         [(case_id, "pass") for case_id in ["limited"] + others])  # case order
        # Ten calls of 0.2 s on two workers take 1 s: done long before the 3 s wait is over
        # (a margin for a slow machine); what shows the slot freed is the count in flight below.
        self.assertEqual(finished[-1], "limited")
        self.assertEqual(server.counts()["limited"], 2)
        log = server.log()
        refused, retried = [t for t, prompt, _ in log if prompt == "limited"]
        during = [in_flight for t, prompt, in_flight in log if refused < t < retried]
        self.assertEqual(max(during), 2, log)  # both workers busy while the case waited
        self.assertGreaterEqual(retried - refused, 2.9)  # the Retry-After was honoured
        self.assertEqual(self.sleeps, [])  # the runner waited, not the client
        self.assertGreaterEqual(results[0].latency_s, 3.0)  # the wait is time in the call

    def test_one_worker_runs_the_next_cases_too(self):
        def behave(prompt, n):
            return too_many(1) if prompt == "limited" and n == 1 else completion()

        server = self.serve(behave)
        results, finished = self.run_suite(self.client(server), cases("limited", "b", "c"))
        self.assertEqual([r.status for r in results], ["pass"] * 3)
        self.assertEqual(finished, ["b", "c", "limited"])
        self.assertEqual(self.sleeps, [])

    def test_the_attempt_limit_holds(self):
        server = self.serve(lambda prompt, n: too_many(0.2) if prompt == "limited"
                            else completion())
        results, _ = self.run_suite(self.client(server, max_attempts=3),
                                    cases("limited", "b"), concurrency=2)
        self.assertEqual(results[0].status, "error")
        self.assertIn("HTTP 429", results[0].error)
        self.assertIn("gave up after 3 attempts (EVALS_MAX_ATTEMPTS)", results[0].error)
        self.assertEqual(server.counts(), {"limited": 3, "b": 1})
        self.assertEqual(results[1].status, "pass")

    def test_the_retry_budget_counts_the_waits_asked(self):
        server = self.serve(lambda prompt, n: too_many(0.3))
        results, _ = self.run_suite(self.client(server, max_retry_wait=0.5), cases("limited"),
                                    concurrency=2)
        self.assertEqual(results[0].status, "error")
        self.assertIn("more than the 0.2s left of the retry budget (EVALS_MAX_RETRY_WAIT)",
                      results[0].error)
        self.assertEqual(server.counts(), {"limited": 2})

    def test_a_wait_past_the_timeout_is_a_timeout(self):
        server = self.serve(lambda prompt, n: too_many(5) if prompt == "limited"
                            else completion())
        started = time.monotonic()
        results, _ = self.run_suite(self.client(server), cases("limited", "b"), concurrency=2,
                                    timeout=2)
        self.assertEqual([r.status for r in results], ["error", "pass"])
        self.assertIn("TimeoutError: no answer within 2 s", results[0].error)
        self.assertIn("HTTP 429", results[0].error)
        self.assertEqual(server.counts(), {"limited": 1, "b": 1})
        self.assertLess(time.monotonic() - started, 4.5)  # not waited out: it cannot fit

    def test_an_attempt_after_a_wait_that_overruns_names_the_whole_timeout(self):
        # The attempt after the wait has what is left of --timeout; its error says --timeout's
        # seconds, not what was left of them.
        server = self.serve(lambda prompt, n: too_many(1) if n == 1
                            else dict(completion(), delay=2))
        results, _ = self.run_suite(self.client(server), cases("limited"), concurrency=2,
                                    timeout=1.5)
        self.assertEqual(results[0].status, "error")
        self.assertEqual(results[0].error, "TimeoutError: no answer within 1.5 s")

    def test_a_wait_within_the_timeout_is_retried(self):
        server = self.serve(lambda prompt, n: too_many(1) if n == 1 else completion())
        results, _ = self.run_suite(self.client(server), cases("limited"), concurrency=2,
                                    timeout=3)
        self.assertEqual(results[0].status, "pass")
        self.assertEqual(server.counts(), {"limited": 2})

    def test_repeats_go_on_after_a_wait(self):
        server = self.serve(lambda prompt, n: too_many(0.5) if n == 2 else completion())
        results, _ = self.run_suite(self.client(server), cases("limited", "b"), concurrency=2,
                                    repeat=3)
        self.assertEqual([r.status for r in results], ["pass", "pass"])
        self.assertEqual([len(r.attempts) for r in results], [3, 3])
        self.assertEqual(server.counts(), {"limited": 4, "b": 4})

    def test_run_case_alone_waits_and_answers(self):
        server = self.serve(lambda prompt, n: too_many(0.5) if n == 1 else completion())
        result = evals.run_case(cases("limited")[0], self.client(server))
        self.assertEqual((result.status, server.counts()), ("pass", {"limited": 2}))
        self.assertEqual(self.sleeps, [])


class SleepingRetriesTests(RetryLaterCase):
    """Where the harness cannot take the call back, the client sleeps, as it always did."""

    def test_a_direct_call_sleeps_out_the_wait(self):
        server = self.serve(lambda prompt, n: too_many(1.5) if n == 1 else completion())
        reply = self.client(server)("limited")
        self.assertEqual((reply.attempts, self.sleeps), (2, [1.5]))

    def test_a_client_called_by_another_function_sleeps(self):
        # The runner could not resume the function around the client: what it does with the
        # answer would be skipped.
        server = self.serve(lambda prompt, n: too_many(1.5) if n == 1 else completion())
        client = self.client(server)
        results, _ = self.run_suite(lambda prompt: client(prompt).upper(), cases("limited"),
                                    concurrency=2)
        self.assertEqual((results[0].status, results[0].output),
                         ("pass", "APPROVED: A MANAGER WILL REVIEW IT."))
        self.assertEqual(self.sleeps, [1.5])

    def test_a_judge_sleeps(self):
        server = self.serve(lambda prompt, n: too_many(1.5) if n == 1 else completion(
            json.dumps({"missing_requirements": [], "forbidden_claims_found": [],
                        "unsupported_claims": [], "reason": "It says yes.",
                        "confidence": "high"})))
        judge = self.client(server)
        case = evals.Case("judged", "q", ({"type": "judge", "rubric": "says yes"},))
        results, _ = self.run_suite(lambda prompt: "yes", [case], concurrency=2,
                                    judge=evals.Judge(judge, name="loopback"))
        self.assertEqual(results[0].status, "pass", results[0])
        self.assertEqual(self.sleeps, [1.5])

    def test_a_wait_that_is_no_number_of_seconds_is_the_calls_error(self):
        # A client's own exception with `resume` and a retry_after of infinity (or NaN, or
        # true) asks for no wait a run can keep: it is the case's error, not a case queued
        # for ever.
        class Odd(Exception):
            def __init__(self, wait):
                super().__init__(f"odd wait {wait}")
                self.retry_after, self.resume = wait, lambda: "never asked"

        for wait in (float("inf"), float("nan"), True):
            def client(prompt, wait=wait):
                raise Odd(wait)

            results = []
            worker = threading.Thread(target=lambda: results.append(evals.run_case(
                cases("odd")[0], client)), daemon=True)
            worker.start()
            worker.join(30)  # a guard, not a measurement: a queued case would never end
            self.assertEqual([(r.status, r.error) for r in results],
                             [("error", f"Odd: odd wait {wait}")])

    def test_can_retry_later_is_false_outside_a_run(self):
        self.assertFalse(evals.can_retry_later(my_client.ask))
        self.assertFalse(evals.can_retry_later(None))


class CommandLineTests(unittest.TestCase):
    def setUp(self):
        tmp = tempfile.TemporaryDirectory(prefix="evals-429-")
        self.addCleanup(tmp.cleanup)
        self.dir = tmp.name

    def start(self, behave, prompts, *args):
        server = PromptServer(behave)
        self.addCleanup(server.stop)
        with open(os.path.join(self.dir, "cases.jsonl"), "w", encoding="utf-8") as handle:
            for prompt in prompts:
                handle.write(json.dumps({"id": prompt, "input": prompt, "checks": [
                    {"type": "contains_any", "values": ["manager"]}]}) + "\n")
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("EVALS_") and not k.endswith("_API_KEY")}
        env.update(EVALS_PROVIDER="openai", OPENAI_API_KEY=KEY, EVALS_BASE_URL=server.url,
                   EVALS_MAX_ATTEMPTS="20", PYTHONDONTWRITEBYTECODE="1")
        process = subprocess.Popen(
            [sys.executable, EVALS, "--client", "my_client:ask", "--out", "record.json",
             "--no-history", *args], cwd=self.dir, env=dict(env, PYTHONPATH=ROOT),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        self.addCleanup(lambda: process.poll() is None and (process.kill(), process.wait()))
        return server, process

    def test_a_run_through_ask_frees_the_slot(self):
        def behave(prompt, n):
            return too_many(2) if prompt == "limited" and n == 1 else dict(completion(),
                                                                            delay=0.3)

        prompts = ["limited"] + ["other %d" % i for i in range(8)]
        server, process = self.start(behave, prompts, "-j", "2")
        out, err = process.communicate(timeout=60)
        self.assertEqual(process.returncode, 0, out + err)
        with open(os.path.join(self.dir, "record.json"), encoding="utf-8") as handle:
            record = json.load(handle)
        self.assertEqual([(e["id"], e["status"]) for e in record["cases"]],
                         [(prompt, "pass") for prompt in prompts])
        log = server.log()
        refused, retried = [t for t, prompt, _ in log if prompt == "limited"]
        self.assertEqual(max(n for t, _p, n in log if refused < t < retried), 2, log)

    def test_ctrl_c_while_a_case_waits(self):
        server, process = self.start(lambda prompt, n: too_many(30), ["limited", "b"],
                                     "-j", "2")
        deadline = time.monotonic() + 20
        while server.counts().get("limited") is None:
            self.assertIsNone(process.poll(), "evals.py exited early")
            self.assertLess(time.monotonic(), deadline, "no request arrived")
            time.sleep(0.05)
        time.sleep(0.3)
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=20)
        self.assertEqual(process.returncode, 130, out + err)
        self.assertIn("nothing was written", err)
        self.assertEqual(server.counts()["limited"], 1)


if __name__ == "__main__":
    unittest.main()
