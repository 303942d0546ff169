"""What the harness does around a call serves a team's own client function exactly as it
serves my_client: the journal of a live run (--resume), the call cache, and a refused call
handed back to the run (`retry_after`)."""

import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import unittest

import evals

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EVALS = os.path.join(ROOT, "evals.py")

# A client of the user's own: sleeps 0.25 s an answer and logs each call to calls.log.
CLIENT = textwrap.dedent('''
    import os, time

    def answer(prompt):
        with open(os.path.join(os.path.dirname(__file__), "calls.log"), "a") as log:
            log.write(prompt + "\\n")
        time.sleep(0.25)
        return "Answer to " + prompt + VERSION
    VERSION = ""
''')


class OwnClientCase(unittest.TestCase):
    def setUp(self):
        tmp = tempfile.TemporaryDirectory(prefix="evals-own-client-")
        self.addCleanup(tmp.cleanup)
        self.folder = tmp.name
        with open(self.path("app.py"), "w", encoding="utf-8") as handle:
            handle.write(CLIENT)
        with open(self.path("cases.jsonl"), "w", encoding="utf-8") as handle:
            for i in range(10):
                handle.write(json.dumps({"id": f"case-{i}", "input": f"Question {i}",
                                         "checks": [{"type": "contains_any",
                                                     "values": ["Answer"]}]}) + "\n")

    def path(self, name):
        return os.path.join(self.folder, name)

    def calls(self):
        if not os.path.exists(self.path("calls.log")):
            return []
        with open(self.path("calls.log"), encoding="utf-8") as handle:
            return handle.read().splitlines()

    def evals(self, *args):
        done = subprocess.run(
            [sys.executable, EVALS, "--client", "app:answer", "--no-history", *args],
            cwd=self.folder, capture_output=True, text=True, timeout=120,
            env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"))
        return done.returncode, done.stdout, done.stderr


class ResumeTest(OwnClientCase):
    def test_a_run_stopped_by_sigterm_resumes_with_only_what_it_did_not_answer(self):
        process = subprocess.Popen(
            [sys.executable, EVALS, "--client", "app:answer", "--no-history", "-j", "1"],
            cwd=self.folder, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            for _ in range(200):  # 20 s at most
                if len(self.calls()) >= 5 or process.poll() is not None:
                    break
                time.sleep(0.1)
            process.send_signal(signal.SIGTERM)
            out, err = process.communicate(timeout=60)
        finally:
            if process.poll() is None:
                process.kill()
                process.communicate()
        self.assertEqual(process.returncode, 130, out + err)
        self.assertIn("--resume calls only what this run did not answer", err)
        answered = len(self.calls()) - 1  # the last one was in flight
        self.assertFalse(os.path.exists(self.path("last_run.json")))

        code, out, err = self.evals("--resume")
        self.assertEqual(code, 0, out + err)
        again = len(self.calls()) - answered - 1
        self.assertLessEqual(again, 10 - answered, "at most the unanswered, the one in flight too")
        self.assertIn(f"{10 - again} of 10 answers reused from the interrupted run", out)
        self.assertFalse(os.path.exists(self.path(os.path.join(".evals", "unfinished.jsonl"))))


class CacheTest(OwnClientCase):
    def test_a_second_run_calls_nothing_and_an_edit_of_the_client_misses(self):
        code, out, err = self.evals("--cache", "-j", "4")
        self.assertEqual((code, len(self.calls())), (0, 10), out + err)
        self.assertIn("0 of 10 replies came from the cache", out)
        self.assertIn("known by its name and the content of its file", err)

        code, out, err = self.evals("--cache", "-j", "4")
        self.assertEqual((code, len(self.calls())), (0, 10), out + err)
        self.assertIn("10 of 10 replies came from the cache", out)

        with open(self.path("app.py"), "a", encoding="utf-8") as handle:
            handle.write('VERSION = " (v2)"\n')
        code, out, err = self.evals("--cache", "-j", "4")
        self.assertEqual((code, len(self.calls())), (0, 20), out + err)
        self.assertIn("0 of 10 replies came from the cache", out)

    def test_a_declared_identity_keys_the_cache(self):
        def client(prompt):
            client.calls += 1
            return "Answer"

        client.calls, client.identity = 0, lambda: "model-a"
        self.assertEqual(
            evals_extras_identity(client, "app:answer"), "app:answer model-a")


def evals_extras_identity(call_model, name):
    import evals_extras

    return evals_extras.client_identity(call_model, name)


class RefusalTest(unittest.TestCase):
    """A refusal (an exception with `retry_after`) gives the worker back: other cases are
    called meanwhile, and the refused one again once its wait is over, not as a spent attempt."""

    def cases(self, count):
        return [evals.Case(f"c{i}", f"q{i}", ({"type": "contains_any", "values": ["ok"]},))
                for i in range(count)]

    def test_other_cases_are_called_while_a_refused_one_waits(self):
        order = []

        class Refused(Exception):
            retry_after = 0.3

        def client(prompt):
            order.append(prompt)
            if prompt == "q0" and order.count("q0") == 1:
                raise Refused("HTTP 429")
            return "ok"

        options = evals.RunOptions(concurrency=1)
        results = evals.run_cases(self.cases(3), client, options)
        self.assertEqual([r.status for r in results], ["pass"] * 3)
        self.assertEqual(order, ["q0", "q1", "q2", "q0"])
        self.assertEqual(options.refusals, 1)

    def test_a_case_refused_while_nothing_is_answered_gives_up(self):
        class Refused(Exception):
            retry_after = 0.0

        def client(prompt):
            raise Refused("HTTP 429")

        old = evals.REFUSAL_WAIT
        evals.REFUSAL_WAIT = 0.001
        self.addCleanup(setattr, evals, "REFUSAL_WAIT", old)
        result = evals.run_cases(self.cases(1), client)[0]
        self.assertEqual(result.status, "error")
        self.assertIn("refused 8 times in a row while no call of the run was answered",
                      result.error)

    def test_run_case_tries_a_key_refused_in_an_earlier_run_again(self):
        class Denied(Exception):
            status = 401

        calls = []

        def client(prompt):
            calls.append(prompt)
            if len(calls) == 1:
                raise Denied("bad key")
            return "ok"

        options = evals.RunOptions()
        case = self.cases(1)[0]
        self.assertEqual(evals.run_case(case, client, options).status, "error")
        self.assertEqual(evals.run_case(case, client, options).status, "pass")
        self.assertEqual(len(calls), 2)

    def test_a_wait_longer_than_the_longest_is_an_error_at_once(self):
        class Refused(Exception):
            retry_after = 86400

        calls = []

        def client(prompt):
            calls.append(prompt)
            raise Refused("daily quota")

        result = evals.run_cases(self.cases(1), client)[0]
        self.assertEqual((result.status, len(calls)), ("error", 1))
        self.assertIn("it asks to wait 86400 s, more than 300 s: not waited", result.error)


if __name__ == "__main__":
    unittest.main()
