"""Masking is for what is written: a credential (the value of a variable named like one) is
masked in every file and stream, whatever its characters and however a writer escapes them
(JSON either way, repr, HTML, XML), my_client's own stderr lines included; and the checks score
the real answer, so a canary kept in a `*_TOKEN` variable fails its check when it leaks."""

import contextlib
import io
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import unittest
from unittest import mock

import evals
import evals_extras
import my_client
from tests.test_live_runs import KEY, MODEL, completion, run_evals, write_cases
from tests._loopback import PromptServer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EVALS = os.path.join(ROOT, "evals.py")

# Credentials in characters a writer escapes: non-ASCII, a quote and a backslash (JSON), a
# quote first (masked inside its JSON escape, not beside it), and HTML's special characters.
# Each ends in a tag no writer changes: a file holding the tag holds the credential.
SECRET = 'tök"\\en-c4n4ry-S3CRET'
QUOTED = '"quoted-Q5ECRET'
MARKUP = "a&b<c'd>-H7MLSECRET"
TAGS = (b"c4n4ry-S3CRET", b"Q5ECRET", b"H7MLSECRET")

# A client of the user's own that says its credentials where a client may: in the request body
# it sent (JSON in a string, ASCII-escaped) and in its model's name; ECHO_TOKEN it says in its
# answer. It raises KeyboardInterrupt (Ctrl-C in the call) on the prompt APP_STOP_AT.
CLIENT = textwrap.dedent('''
    import json, os

    def answer(prompt):
        if prompt == os.environ.get("APP_STOP_AT"):
            raise KeyboardInterrupt
        body = json.dumps({"messages": [prompt], "auth": os.environ["GATEWAY_TOKEN"]})
        text = "Answer to " + prompt + " " + os.environ.get("ECHO_TOKEN", "")
        return {"text": text, "model": "m-" + os.environ["OTHER_SECRET"], "sent": {"body": body}}
''')


def written(folder, skip=("cases.jsonl", "app.py")):
    """{relative path: bytes} of every file under `folder` (SQLite's too) but the inputs."""
    found = {}
    for where, _, names in os.walk(folder):
        for name in names:
            path = os.path.join(where, name)
            if os.path.relpath(path, folder) not in skip:
                with open(path, "rb") as handle:
                    found[os.path.relpath(path, folder)] = handle.read()
    return found


class OwnClientCase(unittest.TestCase):
    def setUp(self):
        tmp = tempfile.TemporaryDirectory(prefix="evals-masking-")
        self.addCleanup(tmp.cleanup)
        self.folder = tmp.name
        with open(os.path.join(self.folder, "app.py"), "w", encoding="utf-8") as handle:
            handle.write(CLIENT)
        self.cases([{"type": "contains_any", "values": ["Answer"]}])

    def cases(self, checks, count=5):
        with open(os.path.join(self.folder, "cases.jsonl"), "w", encoding="utf-8") as handle:
            for i in range(count):
                case = {"id": f"c{i}", "input": f"Q{i}", "checks": checks}
                handle.write(json.dumps(case) + "\n")

    def evals(self, *args, **env):
        environment = {k: v for k, v in os.environ.items() if not k.startswith(("EVALS_", "APP_"))}
        environment.update(PYTHONDONTWRITEBYTECODE="1", GATEWAY_TOKEN=SECRET, OTHER_SECRET=QUOTED,
                           **env)
        done = subprocess.run(
            [sys.executable, EVALS, "--no-history", "--client", "app:answer", *args],
            cwd=self.folder, env=environment, capture_output=True, text=True, timeout=120)
        return done.returncode, done.stdout, done.stderr

    def assertNothingShows(self, *streams):
        for name, data in written(self.folder).items():
            for tag in TAGS:
                self.assertNotIn(tag, data, name)
        for stream in streams:
            for tag in TAGS:
                self.assertNotIn(tag.decode(), stream)


class EscapedCredentialsTest(OwnClientCase):
    def test_the_journal_cache_and_record_hold_no_credential_and_stay_readable(self):
        code, out, err = self.evals("--cache", "--out", "run.json", APP_STOP_AT="Q3")
        self.assertEqual(code, 130, out + err)
        files = written(self.folder)
        self.assertTrue(any("unfinished" in name for name in files), sorted(files))
        self.assertIn(os.path.join(".evals", "cache.sqlite"), files)
        self.assertNothingShows(out, err)

        code, out, err = self.evals("--cache", "--resume", "--out", "run.json")
        self.assertEqual(code, 0, out + err)
        self.assertNotIn("hold no answer", err)  # every journal line is JSON still
        self.assertIn("3 of 5 answers reused from the interrupted run", out)
        self.assertNothingShows(out, err)
        with open(os.path.join(self.folder, "run.json"), encoding="utf-8") as handle:
            entries = {e["id"]: e for e in json.load(handle)["cases"]}
        self.assertEqual(entries["c0"]["model"], "m-[redacted]")
        self.assertEqual(json.loads(entries["c4"]["sent"]["body"])["auth"], "[redacted]")

    def test_reports_escape_no_credential_out_of_its_mask(self):
        self.cases([{"type": "contains_all", "values": ["never said"]}])  # outputs are shown
        code, out, err = self.evals(
            "--out", "run.json", "--html", "report.html", "--junit", "junit.xml", "--markdown",
            "report.md", "--github", ECHO_TOKEN=MARKUP, REPORT_TOKEN=MARKUP)
        self.assertEqual(code, 0, out + err)
        for name in ("report.html", "junit.xml", "report.md", "run.json"):
            self.assertIn(b"[redacted]", written(self.folder)[name], name)
        self.assertNothingShows(out, err)

    def test_a_capture_of_arguments_shown_by_their_repr_holds_no_credential(self):
        class Request:
            def __repr__(self):
                return "Request(auth=%r)" % SECRET

        path = os.path.join(self.folder, "captures.jsonl")
        with mock.patch.dict(os.environ, {"GATEWAY_TOKEN": SECRET}):
            evals._find_secrets()
            self.addCleanup(evals._find_secrets)
            ask = evals_extras.capture(lambda request: {"echo": SECRET}, path=path)
            self.assertEqual(ask(Request()), {"echo": SECRET})  # the app gets the real value
        with open(path, "rb") as handle:
            line = handle.read()
        self.assertNotIn(b"S3CRET", line)
        self.assertEqual(json.loads(line)["output"], {"echo": "[redacted]"})


class ChecksScoreTheRealAnswerTest(OwnClientCase):
    def test_a_leaked_canary_fails_its_check_and_is_masked_where_shown(self):
        canary = "canary-7f3a9b2c-c4n4ry-S3CRET"
        self.cases([{"type": "not_contains", "values": [canary]}], count=2)
        code, out, err = self.evals("--strict", "--out", "run.json", "--html", "report.html",
                                    ECHO_TOKEN=canary, CANARY_TOKEN=canary)
        self.assertEqual(code, 1, out + err)
        self.assertIn("pass rate 0.0% (0/2)", out)
        with open(os.path.join(self.folder, "run.json"), encoding="utf-8") as handle:
            entries = json.load(handle)["cases"]
        self.assertEqual([e["status"] for e in entries], ["fail", "fail"])
        self.assertIn("[redacted]", entries[0]["checks"][0]["reason"])
        self.assertNothingShows(out, err)


class MyClientLinesTest(unittest.TestCase):
    """my_client says on stderr which URL it calls: a gateway whose URL holds a token keeps it
    out of stderr, under evals and alone."""

    TOKEN = "gw-S3CRET-path-77"

    def setUp(self):
        self.server = PromptServer(lambda prompt, n: {"json": completion()})
        self.addCleanup(self.server.stop)
        self.url = self.server.url.replace("/v1", f"/{self.TOKEN}/v1")

    def test_under_evals(self):
        with tempfile.TemporaryDirectory(prefix="evals-masking-") as folder:
            write_cases(folder, [("c0", "Question")])
            code, out, err = run_evals(folder, self.server, EVALS_BASE_URL=self.url,
                                       GATEWAY_TOKEN=self.TOKEN)
        self.assertEqual(code, 0, out + err)
        self.assertIn("my_client: ask calls openai model", err)
        self.assertIn("/[redacted]/v1", err)
        self.assertNotIn("S3CRET", out + err)
        self.assertEqual(self.server.counts(), {"Question": 1})

    def test_alone(self):
        env = {"EVALS_PROVIDER": "openai", "OPENAI_API_KEY": KEY, "EVALS_BASE_URL": self.url,
               "EVALS_MODEL": MODEL, "GATEWAY_TOKEN": self.TOKEN}
        said = io.StringIO()
        with mock.patch.dict(os.environ, env), contextlib.redirect_stderr(said):
            reply = my_client.ask("Question")
        self.assertIn("manager", reply)
        self.assertIn("/[redacted]/v1", said.getvalue())
        self.assertNotIn("S3CRET", said.getvalue())


if __name__ == "__main__":
    unittest.main()
