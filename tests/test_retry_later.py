"""A server's Retry-After: my_client hands a refused call back (ProviderError.retry_after) and the
run calls it again after the wait, running other cases meanwhile; a judge's client, which the
run cannot reschedule, sleeps it out itself. Against loopback OpenAI-compatible servers.

The server decides each answer from the prompt and the n-th request carrying it, and logs every
request with the number of requests in flight when it arrived.
"""

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import unittest

import evals
import evals_extras
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


class RetryAfterCase(unittest.TestCase):
    def serve(self, behave):
        server = PromptServer(behave)
        self.addCleanup(server.stop)
        return server

    def client(self, server, sleep=None, **overrides):
        self.sleeps = []
        settings = dict(dict(base_url=server.url, api_key=KEY, max_attempts=4,
                             max_retry_wait=60, timeout=10), **overrides)
        return my_client.make_client("openai", sleep=sleep or self.sleeps.append, **settings)

    def run_suite(self, client, suite, **options):
        """(results in case order, case ids in the order they finished)."""
        finished = []
        results = evals.run_cases(suite, client, evals.RunOptions(**options),
                                  on_result=lambda result: finished.append(result.id))
        return results, finished


class HandedBackTests(RetryAfterCase):
    """A refused call gives its worker back: the run calls other cases and the refused one
    again once the wait it asked for is over; the client sleeps nothing."""

    def test_a_refused_call_in_a_run_is_called_again_after_its_wait(self):
        def behave(prompt, n):
            return too_many(1) if prompt == "limited" and n == 1 else completion()

        server = self.serve(behave)
        others = ["other %d" % i for i in range(4)]
        options = evals.RunOptions(concurrency=2)
        results = evals.run_cases(cases("limited", *others), self.client(server), options)
        self.assertEqual([(r.id, r.status) for r in results],
                         [(case_id, "pass") for case_id in ["limited"] + others])  # case order
        self.assertEqual(server.counts()["limited"], 2)
        self.assertEqual((self.sleeps, options.refusals), ([], 1))

    def test_repeats_go_on_after_a_wait(self):
        server = self.serve(lambda prompt, n: too_many(0.5) if n == 2 else completion())
        results, _ = self.run_suite(self.client(server), cases("limited", "b"), concurrency=2,
                                    repeat=3)
        self.assertEqual([r.status for r in results], ["pass", "pass"])
        self.assertEqual([len(r.attempts) for r in results], [3, 3])
        self.assertEqual(server.counts(), {"limited": 4, "b": 4})

    def test_a_direct_call_hands_the_refusal_back_and_one_that_waits_sleeps(self):
        server = self.serve(lambda prompt, n: too_many(1.5) if n == 1 else completion())
        with self.assertRaises(my_client.ProviderError) as refused:
            self.client(server)("limited")
        self.assertEqual((refused.exception.status, refused.exception.retry_after), (429, 1.5))
        reply = self.client(server, wait_when_refused=True)("limited")
        self.assertEqual((reply.attempts, self.sleeps), (1, []))  # the second request: answered
        server2 = self.serve(lambda prompt, n: too_many(1.5) if n == 1 else completion())
        reply = self.client(server2, wait_when_refused=True)("limited")
        self.assertEqual((reply.attempts, self.sleeps), (2, [1.5]))

    def test_a_judge_sleeps(self):
        server = self.serve(lambda prompt, n: too_many(1.5) if n == 1 else completion(
            json.dumps({"missing_requirements": [], "forbidden_claims_found": [],
                        "unsupported_claims": [], "reason": "It says yes.",
                        "confidence": "high"})))
        judge = self.client(server, wait_when_refused=True)
        case = evals.Case("judged", "q", ({"type": "judge", "rubric": "says yes"},))
        results, _ = self.run_suite(lambda prompt: "yes", [case], concurrency=2,
                                    judge=evals_extras.Judge(judge, name="loopback"))
        self.assertEqual(results[0].status, "pass", results[0])
        self.assertEqual(self.sleeps, [1.5])


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

    def test_a_run_through_ask_sleeps_out_the_wait(self):
        def behave(prompt, n):
            return too_many(1) if prompt == "limited" and n == 1 else completion()

        prompts = ["limited", "other 1", "other 2"]
        server, process = self.start(behave, prompts, "-j", "2")
        out, err = process.communicate(timeout=60)
        self.assertEqual(process.returncode, 0, out + err)
        with open(os.path.join(self.dir, "record.json"), encoding="utf-8") as handle:
            record = json.load(handle)
        self.assertEqual([(e["id"], e["status"]) for e in record["cases"]],
                         [(prompt, "pass") for prompt in prompts])
        log = server.log()
        refused, retried = [t for t, prompt, _ in log if prompt == "limited"]
        self.assertGreaterEqual(retried - refused, 0.9)  # the Retry-After was honoured

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
        self.assertIn("no record written", err)
        self.assertEqual(server.counts()["limited"], 1)


if __name__ == "__main__":
    unittest.main()
