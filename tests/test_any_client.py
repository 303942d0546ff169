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
        self.assertEqual([n for n in os.listdir(self.path(".evals")) if "unfinished" in n], [])


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


class HostileTest(OwnClientCase):
    """What a new user's first hour ran into, each a case of its own."""

    def test_resume_and_no_save_contradict_each_other(self):
        code, out, err = self.evals("--resume", "--no-save")
        self.assertEqual((code, self.calls()), (2, []), out + err)
        self.assertIn("--resume and --no-save contradict each other", err)

    def test_a_callable_object_is_known_by_the_file_of_its_class(self):
        with open(self.path("bot.py"), "w", encoding="utf-8") as handle:
            handle.write("class Bot:\n    def __call__(self, p):\n        return 'Answer'\n"
                         "answer = Bot()\n")
        run = ("--client", "bot:answer", "--cache", "--no-save")
        first = self.evals_with(*run)
        with open(self.path("bot.py"), "a", encoding="utf-8") as handle:
            handle.write("# edited\n")
        second = self.evals_with(*run)
        self.assertIn("known by its name and the content of its file", first[2])
        self.assertIn("0 of 10 replies came from the cache", second[1])

    def test_an_identity_that_raises_falls_back_to_the_file(self):
        with open(self.path("app.py"), "a", encoding="utf-8") as handle:
            handle.write("def broken():\n    raise RuntimeError('no')\nanswer.identity = broken\n")
        code, out, err = self.evals("--cache", "--no-save")
        self.assertEqual(code, 0, out + err)
        self.assertIn("known by its name and the content of its file", err)

    def test_a_sent_that_is_not_json_is_the_case_s_error_not_a_crash(self):
        with open(self.path("odd.py"), "w", encoding="utf-8") as handle:
            handle.write("def answer(p):\n    return {'text': 'Answer', 'sent': {'x': object()}}\n")
        code, out, err = self.evals_with("--client", "odd:answer", "--no-save", "--id", "case-1")
        self.assertEqual(code, 2, out + err)
        self.assertIn("the client returned a 'sent' that is not JSON", out)
        self.assertNotIn("internal error", err)

    def test_records_of_one_name_in_two_folders_keep_two_journals(self):
        import argparse

        import evals_extras

        def journal(out):
            args = argparse.Namespace(out=out, shard=None, baseline="last_run.json")
            return evals_extras.journal_path(args)

        self.assertNotEqual(journal("a/run.json"), journal("b/run.json"))
        self.assertEqual(journal("a/run.json"), journal("a/run.json"))

    def test_a_journal_line_that_holds_no_answer_is_skipped_and_said(self):
        os.makedirs(self.path(".evals"))
        with open(self.path(os.path.join(".evals", "unfinished.jsonl")), "w") as handle:
            handle.write('not json\n{"key": 5}\n[1, 2]\n')
        code, out, err = self.evals("--resume", "-j", "4")
        self.assertEqual(code, 0, out + err)
        self.assertIn("--resume: 3 lines of", err)

    def evals_with(self, *args):
        done = subprocess.run(
            [sys.executable, EVALS, "--no-history", *args],
            cwd=self.folder, capture_output=True, text=True, timeout=120,
            env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"))
        return done.returncode, done.stdout, done.stderr


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

    def test_once_a_case_gives_up_on_a_provider_that_answers_nothing_the_rest_are_not_called(self):
        # Each of 20 cases waiting out 8 refusals of its own took over a minute a case.
        class Refused(Exception):
            retry_after = 0.0

        calls = []

        def client(prompt):
            calls.append(prompt)
            raise Refused("HTTP 429")

        old = evals.REFUSAL_WAIT
        evals.REFUSAL_WAIT = 0.001
        self.addCleanup(setattr, evals, "REFUSAL_WAIT", old)
        results = evals.run_cases(self.cases(20), client, evals.RunOptions(concurrency=4))
        self.assertEqual({r.status for r in results}, {"error"})
        self.assertLessEqual(len(calls), 8 * 4 + 4)  # 8 for each of the 4 workers, not 20 x 9
        not_called = [r for r in results if r.error.startswith("not called: the provider refused")]
        self.assertGreaterEqual(len(not_called), 1)
        self.assertRegex(not_called[0].error, r"refused the run's last \d+ calls, none answered")

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

    def test_a_wait_too_large_for_a_float_is_an_error_too(self):
        class Refused(Exception):
            retry_after = 10**400

        result = evals.run_cases(self.cases(1), lambda prompt: (_ for _ in ()).throw(Refused()))
        self.assertEqual(result[0].status, "error")
        self.assertIn("more than 300 s: not waited", result[0].error)

    def test_a_wait_longer_than_the_longest_is_an_error_at_once(self):
        class Refused(Exception):
            retry_after = 86400

        calls = []

        def client(prompt):
            calls.append(prompt)
            raise Refused("daily quota")

        result = evals.run_cases(self.cases(1), client)[0]
        self.assertEqual((result.status, len(calls)), ("error", 1))
        self.assertRegex(result.error, r"it asks to wait until \d{4}-\d\d-\d\d \d\d:\d\d UTC, "
                                       r"in 24\.0 h, more than 300 s: not waited")


# A client whose helper, two calls deep in another file, raises with the key in its message.
BOT = "import transport\n\ndef answer(prompt):\n    return transport.send(prompt)\n"
TRANSPORT = textwrap.dedent('''
    import os

    def send(prompt):
        return _post(prompt)

    def _post(prompt):
        key = os.environ["GATEWAY_API_KEY"]
        raise RuntimeError("upstream 503 from model gateway, key " + key)
''')
KEY = "gw-4f8a9b1c2d3e"


class RaisingClientTest(OwnClientCase):
    def setUp(self):
        super().setUp()
        for name, text in (("bot.py", BOT), ("transport.py", TRANSPORT)):
            with open(self.path(name), "w", encoding="utf-8") as handle:
                handle.write(text)

    def run_raising(self, client, *args):
        """(exit code, stdout, the record's entry of case-0) of a run of case-0 by `client`."""
        done = subprocess.run(
            [sys.executable, EVALS, "--client", client, "--no-history", "--id", "case-0",
             "--out", "record.json", *args],
            cwd=self.folder, capture_output=True, text=True, timeout=120,
            env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1", GATEWAY_API_KEY=KEY))
        with open(self.path("record.json"), encoding="utf-8") as handle:
            return done.returncode, done.stdout, json.load(handle)["cases"][0]

    def test_the_error_names_the_line_of_the_user_s_code_and_the_record_its_traceback(self):
        code, out, entry = self.run_raising("bot:answer")
        reason = ("RuntimeError: upstream 503 from model gateway, key [redacted] "
                  "(transport.py:9 in _post)")
        self.assertEqual((code, entry["error"]), (2, reason), out)
        self.assertIn(reason, out)
        trace = entry["traceback"]
        self.assertTrue(trace.startswith("Traceback (most recent call last):\n"), trace)
        for words in ('bot.py", line 4, in answer', 'transport.py", line 5, in send',
                      'transport.py", line 9, in _post', "key [redacted]"):
            self.assertIn(words, trace)
        self.assertNotIn(KEY, trace)
        self.assertNotIn("evals.py", trace)  # the harness's frames that called the client

    def test_a_repeated_case_keeps_the_traceback_of_the_call_shown(self):
        code, out, entry = self.run_raising("bot:answer", "--repeat", "2")
        self.assertEqual(code, 2, out)
        self.assertIn("(transport.py:9 in _post)", entry["error"])
        self.assertIn('transport.py", line 9, in _post', entry["traceback"])

    def test_an_error_in_the_standard_library_names_no_line_but_keeps_its_traceback(self):
        code, out, entry = self.run_raising("json:loads")
        self.assertEqual(entry["error"], "JSONDecodeError: Expecting value: line 1 column 1 (char 0)")
        self.assertIn('decoder.py", line', entry["traceback"])

    def test_the_traceback_kept_is_the_innermost_frames_and_the_last_characters(self):
        def deep(n, message):
            if n:
                return deep(n - 1, message)
            raise RuntimeError(message)

        case = evals.Case("a", "Question", ({"type": "contains_any", "values": ["x"]},))
        short = evals.run_cases([case], lambda prompt: deep(50, "no"))[0].traceback
        self.assertIn(", in deep\n", short)
        self.assertNotIn("<lambda>", short)  # the outermost frames, past the innermost 20
        long = evals.run_cases([case], lambda prompt: deep(0, "x" * 50000))[0].traceback
        self.assertRegex(long, r"^\[[0-9,]+ characters cut\]\n")
        self.assertTrue(long.endswith("x" * 9000 + "\n"))
        self.assertLess(len(long), evals.TRACEBACK_CHARS + 40)

    def test_evals_own_timeout_is_unchanged(self):
        with open(self.path("slow.py"), "w", encoding="utf-8") as handle:
            handle.write("import time\n\ndef answer(prompt):\n    time.sleep(5)\n")
        code, out, entry = self.run_raising("slow:answer", "--timeout", "0.2")
        self.assertEqual(entry["error"], "TimeoutError: no answer within 0.2 s")
        self.assertNotIn("traceback", entry)


if __name__ == "__main__":
    unittest.main()
