"""evals.py copied alone into an empty folder, with a case file and a client module, does the
whole job of the core; what needs evals_extras.py is refused before any call, naming it."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CASES = [
    {"id": "refund", "input": "Can I get a $150 refund?", "tags": ["smoke"],
     "checks": [{"type": "contains_any", "values": ["manager approval"]},
                {"type": "max_words", "n": 30}]},
    {"id": "hours", "input": "When are you open?",
     "checks": [{"type": "regex", "pattern": r"\b9\s*(am|a\.m\.)", "flags": "i"}]},
    {"id": "order", "input": "Where is order A-1?",
     "checks": [{"type": "json_keys", "keys": ["order_id", "status"]}]},
]
ANSWERS = {"Can I get a $150 refund?": "Refunds over $100 need manager approval.",
           "When are you open?": "We open at 9am, Monday to Friday.",
           "Where is order A-1?": '{"order_id": "A-1", "status": "shipped"}'}
# The team's own client: any module with a function str -> str.
APP = '''import json

def ask(prompt):
    with open("answers.json", encoding="utf-8") as handle:
        return json.load(handle)[prompt]
'''


class CoreAloneTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.dir)
        shutil.copy(os.path.join(ROOT, "evals.py"), self.dir)
        self.write("cases.jsonl", "".join(json.dumps(c) + "\n" for c in CASES))
        self.write("app.py", APP)
        self.answer(ANSWERS)

    def write(self, name, text):
        with open(os.path.join(self.dir, name), "w", encoding="utf-8") as handle:
            handle.write(text)

    def answer(self, answers):
        self.write("answers.json", json.dumps(answers))

    def evals(self, *argv):
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("EVALS_", "GITHUB_"))}
        env["EVALS_CLIENT"] = "app:ask"
        done = subprocess.run([sys.executable, "evals.py", *argv], cwd=self.dir, env=env,
                              capture_output=True, text=True, timeout=60)
        return done.returncode, done.stdout + done.stderr

    def test_the_walkthrough_with_no_other_file(self):
        code, out = self.evals()
        self.assertEqual(code, 0, out)
        self.assertIn("pass rate 100.0% (3/3)", out)
        self.assertEqual(sorted(os.listdir(self.dir)),
                         ["answers.json", "app.py", "cases.jsonl", "evals.py", "last_run.json"])

        self.answer(dict(ANSWERS, **{"Can I get a $150 refund?": "Refunded instantly!"}))
        code, out = self.evals()
        self.assertEqual(code, 1, out)
        self.assertIn("REGRESSED: refund", out)

        code, out = self.evals("--no-save", "--github")
        self.assertEqual(code, 1, out)
        self.assertIn("::error title=Regression%3A refund::", out)

        code, out = self.evals("--tag", "smoke", "--no-save")
        self.assertEqual(code, 1, out)
        self.assertIn("1 of 3 cases", out)

        code, out = self.evals("--repeat", "3", "--no-save")
        self.assertEqual(code, 1, out)
        self.assertIn("0/3", out)

        code, out = self.evals("--accept")
        self.assertEqual(code, 0, out)
        code, out = self.evals()
        self.assertEqual(code, 0, out)
        self.assertIn("STILL FAILING: refund", out)

        code, out = self.evals("--rescore", "last_run.json", "--no-save")
        self.assertEqual(code, 0, out)
        self.assertIn("pass rate 66.7% (2/3)", out)

    def test_what_needs_the_optional_file_is_refused_naming_it(self):
        self.write("judged.jsonl", json.dumps(
            {"id": "j", "input": "Hi", "checks": [{"type": "judge", "rubric": "polite"}]}) + "\n")
        for argv in (("--cases", "judged.jsonl"), ("--html", "report.html"), ("--omit-outputs",),
                     ("--budget", "1"), ("merge", "a.json"), ("compare", "a.json", "b.json")):
            with self.subTest(argv=argv):
                code, out = self.evals(*argv)
                self.assertEqual(code, 2, out)
                self.assertIn("evals_extras.py", out)  # named, with what it adds or is needed for
                self.assertNotIn("Traceback", out)
        self.assertFalse(os.path.exists(os.path.join(self.dir, "last_run.json")))

    def test_a_check_of_the_missing_file_says_the_file_before_any_guess(self):
        # json_schema is close to json_keys, but the likely cause is the missing file: said first.
        self.write("schema.jsonl", json.dumps(
            {"id": "s", "input": "Hi", "checks": [{"type": "json_schema", "schema": {}}]}) + "\n")
        code, out = self.evals("--cases", "schema.jsonl")
        self.assertEqual(code, 2, out)
        message = out[out.index("unknown check type 'json_schema'"):]
        self.assertLess(message.index("evals_extras.py"), message.index("did you mean 'json_keys'"))

    def test_turning_off_what_is_not_there_does_nothing(self):
        # A CI job that passes --no-history or --no-cache must not go red for a missing file.
        code, out = self.evals("--no-history", "--no-cache", "--no-judge", "--no-save")
        self.assertEqual(code, 0, out)
        self.assertIn("pass rate 100.0% (3/3)", out)
        self.assertIn("--no-history, --no-cache, --no-judge ignored", out)

    def test_a_typo_of_a_core_flag_is_no_flag_of_the_missing_file(self):
        code, out = self.evals("--no-svae")
        self.assertEqual(code, 2, out)
        self.assertIn("unrecognized arguments: --no-svae", out)
        self.assertFalse(os.path.exists(os.path.join(self.dir, "last_run.json")))

    def test_a_missing_client_module_says_to_copy_it(self):
        env = {k: v for k, v in os.environ.items() if not k.startswith(("EVALS_", "GITHUB_"))}
        env["EVALS_PROVIDER"] = "openai"  # a live run of the default client, not beside it
        done = subprocess.run([sys.executable, "evals.py"], cwd=self.dir, env=env,
                              capture_output=True, text=True, timeout=60)
        self.assertEqual(done.returncode, 2, done.stderr)
        self.assertIn("copy my_client.py beside evals.py", done.stderr)


if __name__ == "__main__":
    unittest.main()
