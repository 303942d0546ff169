"""Nothing leaked, nothing lost, nothing green by accident: the configured key reaches no file
and no stream, a malformed batch row costs one case, a doubled id is refused, a misspelled
variable or a replay is said, and each case file keeps its own baseline."""

import io
import json
import os
import shutil
import tempfile
import unittest
from unittest import mock

import evals
import evals_extras
from tests._folder import FolderCase
from tests import test_batch
from tests.test_live_runs import KEY, LiveRunCase, completion

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def every_file(directory):
    """{relative path: bytes} of every file under `directory` (SQLite files too)."""
    found = {}
    for folder, _, names in os.walk(directory):
        for name in names:
            with open(os.path.join(folder, name), "rb") as handle:
                found[os.path.relpath(os.path.join(folder, name), directory)] = handle.read()
    return found


class TheKeyReachesNoFileTest(LiveRunCase):
    def test_a_reply_echoing_the_key_is_masked_in_every_file_and_stream(self):
        """The provider echoes the key in the text, the model name and a tool call's arguments:
        the record, --json, JUnit, --record, HTML, Markdown, the step summary, the history, the
        call cache and the summary on stdout all show [redacted] instead."""
        def behave(prompt, n):
            body = completion(text="Your key is %s, a manager said." % KEY)
            body["model"] = "gpt-" + KEY
            body["choices"][0]["message"]["tool_calls"] = [{
                "id": "c1", "type": "function",
                "function": {"name": "lookup", "arguments": json.dumps({"key": KEY})}}]
            body["choices"][0]["finish_reason"] = "tool_calls"
            return {"json": body}

        server = self.start_server(behave)
        with open(os.path.join(self.dir, "cases.jsonl"), "w") as handle:
            handle.write(json.dumps({"id": "echo", "input": "Question", "checks": [
                {"type": "contains_all", "values": ["never said"]}]}) + "\n")
        summary = os.path.join(self.dir, "step_summary.md")
        code = self.run_evals(server, "--json", "run.json", "--junit", "junit.xml", "--html",
                              "report.html", "--markdown", "report.md", "--record",
                              "recordings.jsonl", "--github", "--cache", GITHUB_STEP_SUMMARY=summary,
                              EVALS_CACHE_PATH=os.path.join(self.dir, "cache.sqlite"))
        self.assertEqual(code, 0, self.describe())
        files = every_file(self.dir)
        for name in ("record.json", "run.json", "junit.xml", "report.html", "report.md",
                     "recordings.jsonl", "step_summary.md"):
            self.assertIn(b"[redacted]", files[name], name)
        for name, data in files.items():
            self.assertFalse(KEY.encode() in data, name)  # not the bytes: a database is long
        self.assertNotIn(KEY, self.stdout + self.stderr)
        self.assertIn('-> lookup({"key": "[redacted]"})', self.stdout)
        self.assertEqual(self.entries()["echo"]["model"], "gpt-[redacted]")


try:
    from hypothesis import HealthCheck, given, settings, strategies as st
except ImportError:  # the property test is skipped (below); the decorators do nothing
    st = None

    def given(**strategies):
        return lambda test: test

    def settings(**options):
        return lambda test: test

    HealthCheck = mock.Mock()

if st is not None:
    # Keys as providers issue them ("-" and "_" are Markdown punctuation, escaped there).
    KEYS = st.from_regex(r"\A(sk-|AIza|ghp_)[A-Za-z0-9_\-]{16,40}\Z")
    # Text as models write it, with invisible and control characters: what a writer drops or
    # spells out must not join two halves of a key into the key.
    PIECES = st.one_of(st.text(max_size=30), st.sampled_from(
        ["\x00", "\x1b[31m", "\u200b", "\u202e", "\ufeff", "\r\n", "\r", "\ufffe", "\ud800",
         "\\", "`", "_", "-", "*", "|", "<", "&", "%", "\n", "::error::", "]]>"]))
    DRAWN = dict(key=KEYS, pieces=st.lists(PIECES, max_size=12), data=st.data())
else:
    DRAWN = {}  # Python without Hypothesis (the oldest in CI): the test is skipped


@unittest.skipIf(st is None, "Hypothesis is not installed (pip install hypothesis; .ci/run does)")
class NoReportShowsTheKeyPropertyTest(unittest.TestCase):
    def setUp(self):
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.dir = tmp.name
        with open(os.path.join(self.dir, "cases.jsonl"), "w") as handle:
            handle.write(json.dumps({"id": "a", "input": "Question", "checks": [
                {"type": "contains_all", "values": ["absent"]},
                {"type": "regex", "pattern": "^nothing$"}]}) + "\n")
        for patch in (mock.patch.object(os, "fsync"),
                      mock.patch.object(evals, "_git_commit", return_value=None)):
            patch.start()
            self.addCleanup(patch.stop)

    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(**DRAWN)
    def test_random_text_around_and_inside_the_key_never_shows_it(self, key, pieces, data):
        """The key, whole or cut by a control or invisible character, among random text, in
        the output, the reasoning, the model name and a tool call: every report format, the
        summary and the annotations show no key."""
        cut = data.draw(st.integers(0, len(key)))
        inside = data.draw(st.sampled_from(["", "\x00", "\x1b", "\u200b", "\ufffe", "\x0b"]))
        text = "".join(pieces[:3]) + key[:cut] + inside + key[cut:] + "".join(pieces[3:]) + key
        reply = {"text": text, "finish_reason": "tool_calls",
                 "tool_calls": [{"name": "lookup", "arguments": {"q": text}}]}
        with open(os.path.join(self.dir, "recordings.jsonl"), "w", encoding="utf-8",
                  errors="surrogatepass") as handle:
            handle.write(json.dumps({"id": "a", "input": "Question", "output": reply,
                                     "reasoning": text, "model": "m-" + text}) + "\n")
        out, err = io.StringIO(), io.StringIO()
        summary = os.path.join(self.dir, "summary.md")
        env = {"GITHUB_STEP_SUMMARY": summary, "OPENAI_API_KEY": key}
        cwd = os.getcwd()
        os.chdir(self.dir)
        try:
            with mock.patch.dict(os.environ, env):
                code = evals.main(["--rescore", "recordings.jsonl", "--no-history", "--json",
                                   "run.json", "--junit", "junit.xml", "--html", "report.html",
                                   "--markdown", "report.md", "--record", "recorded.jsonl",
                                   "--github"], out, err)
        finally:
            os.chdir(cwd)
        self.assertEqual(code, 0, err.getvalue())
        for name, content in every_file(self.dir).items():
            if name not in ("recordings.jsonl", "cases.jsonl"):  # the inputs, as given
                self.assertNotIn(key.encode(), content, name)
        self.assertNotIn(key, out.getvalue() + err.getvalue())
        os.remove(summary)

class MalformedBatchRowsTest(test_batch.BatchCase):
    """A batch whose results hold a malformed row (a custom_id that is not a string, a line
    that is not JSON), a request answered twice, and progress counts of the wrong type: each
    bad row costs its own case at most, the others are collected, and --batch-resume too."""

    def serve(self):
        server = super().serve()
        state, files = server.state, server.openai_files

        def bad_state(batch_id):
            found = state(batch_id)
            found["request_counts"] = {"total": "4", "completed": None, "failed": [1]}
            return found

        def bad_files(batch_id, batch):
            names = files(batch_id, batch)
            output = names["output_file_id"]
            rows = [json.loads(line) for line in server.files[output].splitlines()]
            twice = next(r for r in rows if "help" in json.dumps(r))  # the "hours" case's
            other = json.loads(json.dumps(twice))
            other["response"]["body"]["choices"][0]["message"]["content"] = "Open 9am to 5pm."
            extra = [dict(twice, custom_id=["not", "a", "string"]), {"custom_id": {"a": 1}},
                     other]
            server.files[output] += b"not JSON at all\n" + b"".join(
                json.dumps(r).encode() + b"\n" for r in extra)
            return names

        server.state, server.openai_files = bad_state, bad_files
        return server

    def test_a_bad_row_is_its_case_error_and_the_rest_are_collected(self):
        server = self.serve()
        for args in (("--batch",), ("--batch-resume", "batch_1")):
            with self.subTest(args=args):
                code = self.run_evals(server, *args)
                self.assertEqual(code, 2, self.describe())
                entries = {e["id"]: e for e in self.record()["cases"]}
                self.assertEqual({i: e["status"] for i, e in entries.items()},
                                 {"refund": "pass", "refund-chat": "pass", "hours": "error",
                                  "broken": "error"}, self.describe())
                self.assertIn("answered this request twice", entries["hours"]["error"])
        self.assertEqual(server.created(), ["/v1/batches"])


class ContentFilterNotCachedTest(LiveRunCase):
    def test_a_reply_the_content_filter_stopped_is_asked_again_next_run(self):
        def behave(prompt, n):
            return {"json": completion(text="", finish="content_filter") if n == 1
                    else completion(text="A manager will call.")}

        server = self.start_server(behave)
        self.write_cases([("filtered", "Question")])
        cache = os.path.join(self.dir, "cache.sqlite")
        self.run_evals(server, "--cache", EVALS_CACHE_PATH=cache)
        self.assertEqual(self.entries()["filtered"]["finish_reason"], "content_filter")
        self.run_evals(server, "--cache", EVALS_CACHE_PATH=cache)
        self.assertEqual(server.counts(), {"Question": 2}, self.describe())
        self.assertEqual(self.entries()["filtered"]["status"], "pass")
        self.run_evals(server, "--cache", EVALS_CACHE_PATH=cache)  # an answer is kept
        self.assertEqual(server.counts(), {"Question": 2}, self.describe())


class ACaseListedTwiceTest(FolderCase):
    def test_a_record_listing_a_case_twice_is_refused_as_baseline_and_by_compare(self):
        path = os.path.join(self.dir, "last_run.json")
        with open(path, encoding="utf-8") as handle:
            record = json.load(handle)
        first = record["cases"][0]
        shutil.copy(path, os.path.join(self.dir, "good.json"))
        record["cases"].append(dict(first, status="fail", baseline="fail"))
        with open(os.path.join(self.dir, "twice.json"), "w", encoding="utf-8") as handle:
            json.dump(record, handle)
        said = "twice.json: case %r: listed twice" % first["id"]
        for argv in (("--baseline", "twice.json", "--no-save"),
                     ("compare", "good.json", "twice.json"),
                     ("compare", "twice.json", "good.json"),
                     ("report", "twice.json", "--html", "r.html")):
            with self.subTest(argv=argv):
                code, _, err = self.main(*argv)
                self.assertEqual(code, 2, err)
                self.assertIn(said, err)


class AMisspelledVariableIsSaidTest(FolderCase):
    def test_a_misspelled_provider_warns_and_the_replay_says_so_in_the_summary(self):
        env = {k: v for k, v in os.environ.items() if not k.startswith(("EVALS_", "EVAL_"))}
        env["EVAL_PROVIDER"] = "openai"
        out, err = io.StringIO(), io.StringIO()
        cwd = os.getcwd()
        os.chdir(self.dir)
        try:
            with mock.patch.dict(os.environ, env, clear=True):
                code = evals.main(["--no-save", "--github", "-q"], out, err)
        finally:
            os.chdir(cwd)
        self.assertEqual(code, 0, err.getvalue())
        self.assertIn("evals: warning: EVAL_PROVIDER is not a variable evals or my_client reads;"
                      " did you mean 'EVALS_PROVIDER'?", err.getvalue())
        lines = out.getvalue().splitlines()
        self.assertEqual(lines[0], "pass rate 100.0% (22/22), last run 100.0%, replayed "
                                   "recordings.jsonl: no model was called")
        self.assertIn("::warning title=Recorded outputs::replayed recordings.jsonl: no model was "
                      "called", lines)

    def test_every_variable_the_runtime_files_read_is_known(self):
        import re
        names = set()
        for name in ("evals.py", "evals_extras.py", "my_client.py"):
            with open(os.path.join(ROOT, name), encoding="utf-8") as handle:
                names |= set(re.findall(r"\bEVALS_[A-Z0-9_]*[A-Z0-9]\b", handle.read()))
        self.assertEqual(sorted(names - set(evals_extras.VARIABLES)), [])


class OnlyCredentialsAreMaskedTest(unittest.TestCase):
    def test_a_name_ending_in_key_or_token_is_a_credential_one_holding_it_is_not(self):
        # CACHE_KEY_PREFIX=business masked "business" in every answer and failed two cases.
        self.addCleanup(evals._find_secrets)
        with mock.patch.dict(os.environ, {
                "CACHE_KEY_PREFIX": "business", "TOKEN_TYPE_NAME": "bearer-ish",
                "MY_API_KEY": "sk-abcdefgh123", "GH_TOKEN": "ghp_12345678"}):
            evals._find_secrets()
            self.assertEqual(evals.mask_secrets("3-5 business days, bearer-ish, sk-abcdefgh123, "
                                                "ghp_12345678"),
                             "3-5 business days, bearer-ish, [redacted], [redacted]")


class EachCaseFileHasItsOwnBaselineTest(FolderCase):
    def test_a_case_file_has_the_same_baseline_from_any_folder(self):
        # Run from its folder, cases.jsonl wrote sub/last_run.json; run from the parent it was
        # compared with sub/cases.last_run.json, found no run, and a regression exited 0.
        sub = os.path.join(self.dir, "sub")
        os.mkdir(sub)
        for name in ("cases.jsonl", "recordings.jsonl"):
            os.rename(os.path.join(self.dir, name), os.path.join(sub, name))
        os.remove(os.path.join(self.dir, "last_run.json"))
        env = {"EVALS_RECORDINGS": os.path.join(sub, "recordings.jsonl")}
        with mock.patch.dict(os.environ, env):
            code, _, err = self.main("--cases", os.path.join("sub", "cases.jsonl"))
        self.assertEqual(code, 0, err)
        self.assertEqual(sorted(n for n in os.listdir(sub) if n.endswith(".json")),
                         ["last_run.json"])

    def test_a_second_case_file_keeps_its_own_baseline_history_and_failed_list(self):
        with open(os.path.join(self.dir, "cases.jsonl"), encoding="utf-8") as handle:
            lines = handle.readlines()
        with open(os.path.join(self.dir, "other.jsonl"), "w", encoding="utf-8") as handle:
            handle.writelines(lines[:3])
        before = every_file(self.dir)["last_run.json"]
        code, _, err = self.main("--cases", "other.jsonl")
        self.assertEqual(code, 0, err)
        self.assertNotIn("warning", err)
        files = every_file(self.dir)
        self.assertEqual(files["last_run.json"], before)  # the main suite's, untouched
        record = json.loads(files["other.last_run.json"])
        self.assertEqual(len(record["cases"]), 3)
        self.assertIn(os.path.join(".evals", "other.history.sqlite"), files)
        self.assertNotIn(os.path.join(".evals", "history.sqlite"), files)
        code, _, err = self.main("--cases", "other.jsonl", "--failed")  # reads its own baseline
        self.assertEqual(code, 0, err)
        code, _, err = self.main("--cases", "other.jsonl", "--accept")
        self.assertEqual((code, every_file(self.dir)["last_run.json"]), (0, before))
        # The default case file keeps last_run.json; an explicit --baseline still wins.
        code, _, err = self.main("--cases", "other.jsonl", "--baseline", "mine.json")
        self.assertEqual(code, 0, err)
        self.assertIn("mine.json", every_file(self.dir))
        self.assertIn(os.path.join(".evals", "mine.history.sqlite"), every_file(self.dir))
        code, _, err = self.main("--accept")
        self.assertEqual(code, 0, err)
        self.assertNotEqual(every_file(self.dir)["last_run.json"], before)
