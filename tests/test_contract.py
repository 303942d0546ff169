"""The client contract runs one way: my_client imports nothing from evals and evals nothing from
it; the harness tells a client (and a judge) the case and the repeat only when its signature asks
for them; with no provider configured the harness replays recorded outputs itself."""

import ast
import contextlib
import io
import json
import os
import tempfile
import unittest
from unittest import mock

import evals
import evals_extras

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHECK = {"type": "contains_any", "values": ["x"]}


def imported_modules(path):
    """The top-level names of every module `path` imports, anywhere in the file."""
    with open(path, encoding="utf-8") as handle:
        tree = ast.parse(handle.read(), path)
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module.split(".")[0])
    return names


class OneWayTest(unittest.TestCase):
    def test_neither_file_imports_the_other(self):
        self.assertNotIn("evals", imported_modules(os.path.join(ROOT, "my_client.py")))
        self.assertNotIn("my_client", imported_modules(os.path.join(ROOT, "evals.py")))

    def test_my_client_reaches_into_no_harness_module(self):
        with open(os.path.join(ROOT, "my_client.py"), encoding="utf-8") as handle:
            source = handle.read()
        for reach in ('sys.modules["__main__"]', "sys.modules['__main__']",
                      'sys.modules.get("evals")', "current_case", "current_attempt",
                      "can_retry_later"):
            self.assertNotIn(reach, source)


class AskBySignatureTest(unittest.TestCase):
    CASES = [evals.Case("a", "A", (CHECK,)), evals.Case("b", "B", (CHECK,))]

    def test_a_client_asking_for_case_and_attempt_gets_them(self):
        for concurrency, timeout in ((1, None), (2, 5.0)):
            seen = []

            def client(prompt, *, case, attempt):
                seen.append((prompt, case.id, attempt))
                return "x"

            with self.subTest(concurrency=concurrency, timeout=timeout):
                results = evals.run_cases(self.CASES, client, evals.RunOptions(
                    concurrency=concurrency, timeout=timeout, repeat=2))
                self.assertEqual([r.status for r in results], ["pass", "pass"])
                self.assertEqual(sorted(seen), [("A", "a", 0), ("A", "a", 1),
                                                ("B", "b", 0), ("B", "b", 1)])

    def test_a_client_asking_for_one_gets_that_one(self):
        seen = []

        def client(prompt, attempt=0):
            seen.append((prompt, attempt))
            return "x"

        evals.run_case(self.CASES[0], client, evals.RunOptions(repeat=2))
        self.assertEqual(seen, [("A", 0), ("A", 1)])

        class Client:
            def __call__(self, prompt, case=None):
                seen.append((prompt, case.id))
                return "x"

        evals.run_case(self.CASES[1], Client())
        self.assertEqual(seen[-1], ("B", "b"))

    def test_a_client_not_asking_gets_only_the_input(self):
        seen = []

        def client(prompt, *args, **kwargs):
            seen.append((prompt, args, kwargs))
            return "x"

        results = evals.run_cases(self.CASES, client, evals.RunOptions(repeat=2))
        self.assertEqual([r.status for r in results], ["pass", "pass"])
        self.assertEqual(seen, [("A", (), {})] * 2 + [("B", (), {})] * 2)
        self.assertEqual(evals.run_case(self.CASES[0], str.lower).output, "a")  # a builtin

    def test_a_judge_asking_for_the_case_gets_it(self):
        verdict = json.dumps({"missing_requirements": [], "forbidden_claims_found": [],
                              "unsupported_claims": [], "reason": "Fine.",
                              "confidence": "high"})
        case = evals.Case("judged", "q", ({"type": "judge", "rubric": "says yes"},))
        seen = []

        def judge(prompt, *, case, attempt):
            seen.append((case.id, attempt))
            return verdict

        results = evals.run_cases([case], lambda prompt: "yes",
                                  evals.RunOptions(repeat=2, judge=evals_extras.Judge(judge, "j")))
        self.assertEqual(results[0].status, "pass")
        self.assertEqual(seen, [("judged", 0), ("judged", 1)])
        self.assertEqual(evals.evaluate(case, "yes", lambda prompt: verdict)[0], "pass")


class OfflineDefaultTest(unittest.TestCase):
    """With no --client and no EVALS_CLIENT (or my_client's ask named), and EVALS_PROVIDER
    unset, empty or "replay", evals replays EVALS_RECORDINGS itself."""

    def setUp(self):
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.dir = tmp.name
        self.cases = self.write("cases.jsonl", [
            {"id": "refund-1", "input": "I want a refund", "checks": [
                {"type": "contains_any", "values": ["refund"]}]},
            {"id": "greet", "input": "hello", "checks": [
                {"type": "contains_any", "values": ["Hi"]}]}])
        self.recordings = self.write("recordings.jsonl", [
            {"id": "refund-1", "input": "another prompt", "output": "Sure, refund issued."},
            {"id": "greet", "input": "hello", "output": "Hi!"}])
        clean = {k: v for k, v in os.environ.items() if not k.startswith("EVALS_")}
        patcher = mock.patch.dict(os.environ, clean, clear=True)
        patcher.start()
        self.addCleanup(patcher.stop)
        cwd = os.getcwd()
        os.chdir(self.dir)  # recordings.jsonl is found in the current folder
        self.addCleanup(os.chdir, cwd)

    def write(self, name, rows):
        path = os.path.join(self.dir, name)
        with open(path, "w", encoding="utf-8") as handle:
            handle.write("".join(json.dumps(row) + "\n" for row in rows))
        return path

    def main(self, *args):
        out, err = io.StringIO(), io.StringIO()
        code = evals.main(["--cases", self.cases, "--no-save", "--no-history", *args], out, err)
        return code, out.getvalue(), err.getvalue()

    def test_replayed_by_case_id_and_said_once(self):
        for provider, client in ((None, ()), ("", ()), ("replay", ()),
                                 (None, ("--client", "my_client:ask")),
                                 (None, ("-j", "8"))):
            with self.subTest(provider=provider, client=client):
                if provider is not None:
                    os.environ["EVALS_PROVIDER"] = provider
                code, out, err = self.main(*client)
                os.environ.pop("EVALS_PROVIDER", None)
                self.assertEqual(code, 0, out + err)
                self.assertIn("pass rate 100.0% (2/2)", out)
                self.assertEqual(err.count("replaying recorded outputs from recordings.jsonl, "
                                           "no model is called"), 1, err)

    def test_a_case_with_no_recording_is_an_error_saying_how_to_record(self):
        self.write("recordings.jsonl", [{"id": "greet", "output": "Hi!"}])
        code, out, err = self.main()
        self.assertEqual(code, 2, out + err)
        self.assertIn("no recorded output for case 'refund-1' in recordings.jsonl (record one "
                      "from a model: set EVALS_PROVIDER, then run python evals.py --record "
                      "recordings.jsonl)", out)

    def test_no_recordings_file_is_exit_2_saying_how_to_get_one(self):
        os.environ["EVALS_RECORDINGS"] = os.path.join(self.dir, "none.jsonl")
        code, out, err = self.main()
        self.assertEqual(code, 2, out + err)
        self.assertIn("EVALS_PROVIDER is not set and there is no recordings file", err)
        self.assertIn("--record", err)

    def test_a_malformed_recordings_file_names_the_line(self):
        with open(self.recordings, "a", encoding="utf-8") as handle:
            handle.write("{not json\n")
        code, out, err = self.main()
        self.assertEqual(code, 2, out + err)
        self.assertIn("recordings.jsonl:3", err)

    def test_repeat_needs_a_live_model(self):
        code, out, err = self.main("--repeat", "3")
        self.assertEqual(code, 2, out + err)
        self.assertIn("--repeat 3", err)

    def test_batch_needs_a_provider(self):
        code, out, err = self.main("--batch")
        self.assertEqual(code, 2, out + err)
        self.assertIn("--batch: EVALS_PROVIDER is not set: a batch needs a provider", err)

    def test_another_client_or_a_provider_is_not_replayed(self):
        os.environ["EVALS_CLIENT"] = "tests.test_contract:echo"
        code, out, err = self.main()
        self.assertNotIn("replaying", err)
        self.assertIn("client tests.test_contract:echo", out)
        del os.environ["EVALS_CLIENT"]
        os.environ.update(EVALS_PROVIDER="openai", OPENAI_API_KEY="")
        with contextlib.redirect_stderr(io.StringIO()):  # my_client says what it calls
            code, out, err = self.main()
        self.assertNotIn("replaying", err)
        self.assertEqual(code, 2, out + err)  # no key: each case is an error, not a replay

    def test_my_client_judge_without_a_provider_is_replayed_by_the_harness(self):
        verdict = json.dumps({"missing_requirements": [], "forbidden_claims_found": [],
                              "unsupported_claims": [], "reason": "Fine.",
                              "confidence": "high"})
        check = {"type": "judge", "rubric": "greets"}
        self.write("cases.jsonl", [{"id": "greet", "input": "hello", "checks": [check]}])
        prompt = evals_extras.judge_prompt("hello", "Hi!", {"rubric": "greets"})
        key = __import__("hashlib").sha256(prompt.encode("utf-8")).hexdigest()
        os.environ["EVALS_JUDGE_RECORDINGS"] = self.write(
            "judged.jsonl", [{"id": "greet", "key": key, "reply": verdict}])
        code, out, err = self.main("--judge", "my_client:judge")
        self.assertEqual(code, 0, out + err)
        self.assertIn("pass rate 100.0% (1/1)", out)
        self.assertIn("replaying recorded judge replies from " + os.environ[
            "EVALS_JUDGE_RECORDINGS"], err)


def echo(prompt):
    return prompt
