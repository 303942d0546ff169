"""Hostile input: files the user had are never overwritten, bad names are refused."""

import io
import json
import os
import shutil
import sys
import tempfile
import unittest
import unittest.mock

import evals
import evals_extras
from tests._folder import FolderCase

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class NothingTheUserHadIsOverwrittenTest(FolderCase):
    def setUp(self):
        super().setUp()
        self.before = {name: self.read(name) for name in os.listdir(self.dir)}

    def read(self, name):
        with open(os.path.join(self.dir, name), "rb") as handle:
            return handle.read()

    def test_outputs_pointed_at_inputs_are_refused_before_any_work(self):
        rescore = ("--rescore", "recordings.jsonl", "--no-history")
        for argv, words in (
                (("--out", ""), "--out: the file name is empty"),
                (("--html", "cases.jsonl"), "--html cases.jsonl is also --cases"),
                (("--junit", "./cases.jsonl"), "--junit ./cases.jsonl is also --cases"),
                (("--markdown", "last_run.json", "--no-save"), "is also --baseline"),
                (("--json", "recordings.jsonl"), "--json recordings.jsonl is also --rescore"),
                (("--record", "recordings.jsonl"), "is also --rescore"),
                (("--out", "cases.jsonl"), "--out cases.jsonl is also --cases"),
                (("--html", "r.html", "--markdown", "r.html"), "--html r.html is also --markdown")):
            with self.subTest(argv=argv):
                code, _, err = self.main(*rescore, *argv)
                self.assertEqual(code, 2, err)
                self.assertIn(words, err)
                self.assertIn("refusing to overwrite" if "empty" not in words else "empty", err)
        for command in (("report", "last_run.json", "--html", "last_run.json"),
                        ("merge", "last_run.json", "--out", "last_run.json"),
                        ("merge", "last_run.json", "--out", "cases.jsonl")):
            with self.subTest(command=command):
                code, _, err = self.main(*command)
                self.assertEqual(code, 2, err)
                self.assertIn("refusing to overwrite", err)
        self.assertEqual({name: self.read(name) for name in os.listdir(self.dir)}, self.before)

    def test_a_file_this_tool_did_not_write_is_never_overwritten(self):
        shutil.copy(os.path.join(ROOT, "evals.py"), self.dir)
        shutil.copy(os.path.join(ROOT, "README.md"), self.dir)
        with open(os.path.join(self.dir, "my_checks.py"), "w") as handle:
            handle.write("def ok(output):\n    return True\n")
        self.before = {name: self.read(name) for name in os.listdir(self.dir)}
        rescore = ("--rescore", "recordings.jsonl", "--no-save")
        for argv in (("--html", "evals.py"), ("--out", "my_checks.py"),
                     ("--markdown", "README.md"), ("--json", "evals.py"),
                     ("--junit", "my_checks.py"), ("--record", "README.md")):
            with self.subTest(argv=argv):
                code, _, err = self.main(*rescore[:2], *argv)
                self.assertEqual(code, 2, err)
                self.assertIn("the file exists and is not one this tool wrote", err)
        code, _, err = self.main("--cases", "cases.jsonl", "--html", ".")
        self.assertIn("--html . is a folder; name a file", err)
        self.assertEqual({name: self.read(name) for name in os.listdir(self.dir)}, self.before)
        # What it wrote itself it writes again.
        for _ in range(2):
            code, _, err = self.main(*rescore, "--html", "r.html", "--markdown", "r.md",
                                  "--junit", "r.xml", "--json", "r.json")
            self.assertEqual(code, 0, err)

    def test_a_malformed_recordings_file_to_update_is_refused_before_any_call(self):
        with open(os.path.join(self.dir, "mine.jsonl"), "w") as handle:
            handle.write('{"id": "a"}\n')
        calls = []
        module = type(sys)("_calls_client")
        module.ask = lambda prompt: calls.append(prompt) or "x"
        sys.modules["_calls_client"] = module
        self.addCleanup(sys.modules.pop, "_calls_client")
        code, _, err = self.main("--client", "_calls_client:ask", "--record", "mine.jsonl",
                              "--no-save")
        self.assertEqual((code, calls), (2, []))
        self.assertIn("mine.jsonl:1: expected", err)

    def test_a_link_to_an_input_is_the_same_file(self):
        os.symlink("cases.jsonl", os.path.join(self.dir, "link.html"))
        code, _, err = self.main("--rescore", "recordings.jsonl", "--html", "link.html")
        self.assertEqual(code, 2)
        self.assertIn("--html link.html is also --cases", err)
        self.assertEqual(self.read("cases.jsonl"), self.before["cases.jsonl"])


class IdsAndReasonsStayOnTheirLineTest(unittest.TestCase):
    IDS = ["y\n::error::INJECTED", "esc\x1b[31mred", "cr\rover", "sep\u2028line"]

    def test_the_text_summary_escapes_ids_and_reasons(self):
        cases = [evals.Case(case_id, "q", ({"type": "equals", "value": "a"},))
                 for case_id in self.IDS]
        results = evals.run_cases(cases, lambda prompt: "b\n::warning::x\x1b[0m")
        run = evals.RunResult(results, "2026-01-01T00:00:00+00:00",
                              "2026-01-01T00:00:01+00:00", "test")
        text = evals.format_summary(evals.make_record(run, evals.Baseline({}), cases))
        for line in text.splitlines():
            self.assertFalse(line.lstrip().startswith("::"), line)
            self.assertNotIn("\x1b", line)
            self.assertNotIn("\r", line)
            self.assertNotIn("\u2028", line)
        self.assertIn("NEW FAIL: y\\n::error::INJECTED", text)
        self.assertIn("NEW FAIL: esc\\x1b[31mred", text)
        self.assertIn("got 'b\\n::warning::x\\x1b[0m'", text)


class EveryCommandTakesQuietTest(unittest.TestCase):
    def test_report_merge_and_run_take_q(self):
        for argv in (["report", os.path.join(ROOT, "last_run.json"), "-q"],
                     ["--cases", os.path.join(ROOT, "cases.jsonl"), "--rescore",
                      os.path.join(ROOT, "recordings.jsonl"), "--no-save", "-q"]):
            with self.subTest(argv=argv):
                out, err = io.StringIO(), io.StringIO()
                self.assertEqual(evals.main(argv, out, err), 0, err.getvalue())
                self.assertTrue(out.getvalue().startswith("pass rate"), out.getvalue())


class NewcomerTest(unittest.TestCase):
    def help_of(self, *argv):
        out = io.StringIO()
        self.assertEqual(evals.main([*argv, "--help"], out, io.StringIO()), 0)
        return out.getvalue()

    def test_help_examples_paste_as_they_are(self):
        """An example is printed as written: no case id or option is broken across lines."""
        for command, example in (("add", "python evals.py add --id refund-approval-2 --from-run "
                                         "refund-over-100-needs-approval \\\n    --contains-any "
                                         "'manager approval' --not-contains 'instant refund'"),
                                 ("check", "echo 'Refunds need manager approval.' | python evals.py "
                                           "check refund-contradiction")):
            with self.subTest(command=command):
                self.assertIn(example, self.help_of(command))

    def test_a_misnamed_parameter_is_caught_when_the_file_is_loaded(self):
        problems = evals.validate_check({"type": "contains_any", "value": ["a"]})
        self.assertIn("unknown parameter 'value'; did you mean 'values'?", problems[0])
        problems = evals.validate_check({"type": "python", "function":
                                         "tests.user_checks:is_short", "limt": 3})
        self.assertEqual(problems, ["python: tests.user_checks:is_short does not take these "
                                    "parameters: got an unexpected keyword argument 'limt'"])

    def test_a_case_file_missing_from_the_current_folder_says_where_it_looked(self):
        with tempfile.TemporaryDirectory() as folder:
            cwd = os.getcwd()
            os.chdir(folder)
            try:
                err = io.StringIO()
                self.assertEqual(evals.main([], io.StringIO(), err), 2)
            finally:
                os.chdir(cwd)
        self.assertIn(f"No such file or directory in {os.path.realpath(folder)}", err.getvalue()
                      .replace(folder, os.path.realpath(folder)))
        self.assertIn("run from the folder that holds the case file, or pass --cases",
                      err.getvalue())

    def test_the_workflow_runs_the_ci_script_and_names_the_shard_count_once(self):
        with open(os.path.join(ROOT, ".github", "workflows", "evals.yml"), encoding="utf-8") as f:
            workflow = f.read()
        self.assertIn("run: bash .ci/run", workflow)
        self.assertIn("--shard ${{ matrix.shard }}/${{ strategy.job-total }}", workflow)
        self.assertNotIn("SHARDS", workflow)


class TextAsModelsWriteItTest(unittest.TestCase):
    """Loose matching (ignore_case) takes text as a reader does; exact matching does not."""

    def run_check(self, check, output):
        self.assertEqual(evals.validate_check(check), [])
        return evals.run_check(check, output)

    def test_typographic_apostrophes_and_quotes_match_typed_ones(self):
        forbidden = {"type": "not_contains", "values": ["can't help"]}
        self.assertFalse(self.run_check(forbidden, "Sorry, I can\u2019t help with that.").passed)
        quoted = {"type": "contains_any", "values": ['"refund"']}
        self.assertTrue(self.run_check(quoted, "the word \u201crefund\u201d").passed)
        exact = {"type": "equals", "value": "It's done"}
        self.assertFalse(self.run_check(exact, "It\u2019s done").passed)
        self.assertTrue(self.run_check(dict(exact, ignore_case=True), "It\u2019s done").passed)

    def test_windows_line_ends_are_lines(self):
        check = {"type": "regex", "pattern": "^Yes$", "flags": "m"}
        self.assertTrue(self.run_check(check, "No\r\nYes\r\n").passed)
        lines = {"type": "line_count", "max": 2}
        self.assertTrue(self.run_check(lines, "a\r\nb\r\n").passed)

    def test_a_short_type_name_suggests_what_it_is_short_for(self):
        problem = evals.validate_check({"type": "contains", "values": ["a"]})[0]
        self.assertIn("did you mean 'contains_any' or 'contains_all'?", problem)
        self.assertNotIn("did you mean 'not_contains'", problem)

    def test_dotted_capital_i_folds_to_i(self):
        check = {"type": "contains_all", "values": ["istanbul"]}
        self.assertTrue(self.run_check(check, "\u0130STANBUL is large").passed)
        check = {"type": "contains_all", "values": ["\u0130stanbul"], "whole_word": True}
        self.assertTrue(self.run_check(check, "I live in istanbul.").passed)


class CaseFileTest(unittest.TestCase):
    def problems(self, *lines):
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "cases.jsonl")
            with open(path, "w", encoding="utf-8") as handle:
                handle.write("".join(line + "\n" for line in lines))
            with self.assertRaises(evals.CaseFileError) as caught:
                evals.load_cases(path)
        return [p.replace(path, "F") for p in caught.exception.problems]

    def test_a_lone_surrogate_in_an_id_or_a_tag_is_refused(self):
        check = '"checks": [{"type": "max_words", "n": 5}]'
        self.assertEqual(self.problems(
            '{"id": "a\\ud800", "input": "q", %s}' % check,
            '{"id": "b", "input": "q", "tags": ["ok", "\\udfff"], %s}' % check,
            '{"id": "c\\ud83d\\ude00", "input": "\\ud800 is fine in text", %s}' % check), [
            "F:1: field 'id' holds a lone surrogate (half of a \\uXXXX pair); use whole "
            "characters",
            "F:2: field 'tags' holds a lone surrogate (half of a \\uXXXX pair); use whole "
            "characters"])

    def test_a_repeated_key_is_refused_at_any_depth(self):
        self.assertEqual(self.problems(
            '{"id": "a", "id": "b", "input": "q", "checks": [{"type": "max_words", "n": 5}]}',
            '{"id": "c", "input": "q", "checks": [{"type": "max_words", "n": 5, "n": 50}]}'), [
            "F:1: invalid JSON: duplicate key 'id' (the last would silently win)",
            "F:2: invalid JSON: duplicate key 'n' (the last would silently win)"])

    def test_a_baseline_holding_a_lone_surrogate_id_still_prints(self):
        record = evals.completed({"cases": [], "removed": ["old\ud800"]})
        text = evals.format_summary(record)
        self.assertIn("removed from the case file: old\\ud800", text)
        text.encode("utf-8")


class LongRunningChecksTest(unittest.TestCase):
    def test_a_users_check_over_its_time_limit_errs_and_the_run_goes_on(self):
        original = evals.USER_CHECK_SECONDS
        evals.USER_CHECK_SECONDS = 0.2
        self.addCleanup(setattr, evals, "USER_CHECK_SECONDS", original)
        slow = {"type": "python", "function": "tests.user_checks:slow", "seconds": 3}
        cases = [evals.Case("slow", "q", (slow,)),
                 evals.Case("fast", "q", ({"type": "max_words", "n": 5},))]
        results = evals.run_cases(cases, lambda prompt: "an answer")
        self.assertEqual([r.status for r in results], ["error", "pass"])
        self.assertIn("tests.user_checks:slow raised TimeoutError: no answer within 0.2 s",
                      results[0].error)


class DuplicateKeysTest(unittest.TestCase):
    def test_a_check_given_to_add_may_not_repeat_a_key(self):
        with tempfile.TemporaryDirectory() as folder:
            cases = os.path.join(folder, "cases.jsonl")
            err = io.StringIO()
            code = evals.main(["add", "--cases", cases, "--id", "x", "--input", "q", "--check",
                               '{"type": "max_words", "n": 5, "n": 500}'], io.StringIO(), err)
            self.assertEqual(code, 2)
            self.assertIn("--check 1: not valid JSON: duplicate key 'n'", err.getvalue())
            self.assertFalse(os.path.exists(cases))


if __name__ == "__main__":
    unittest.main()


class StopsAndRacesTest(unittest.TestCase):
    """A signal while saving, a provider that stalls, another run writing the same baseline."""

    def setUp(self):
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.dir = tmp.name
        self.cases = os.path.join(self.dir, "cases.jsonl")
        self.baseline = os.path.join(self.dir, "last_run.json")
        with open(self.cases, "w", encoding="utf-8") as handle:
            for case_id in ("a", "b"):
                handle.write(json.dumps({"id": case_id, "input": case_id,
                                         "checks": [{"type": "max_words", "n": 3}]}) + "\n")

    def main(self, client, *argv):
        module = type(sys)("_race_client")
        module.ask = client
        sys.modules["_race_client"] = module
        self.addCleanup(sys.modules.pop, "_race_client", None)
        err = io.StringIO()
        code = evals.main(["--cases", self.cases, "--baseline", self.baseline, "--client",
                           "_race_client:ask", *argv], io.StringIO(), err)
        return code, err.getvalue()

    def history_runs(self):
        path = os.path.join(self.dir, ".evals", "history.sqlite")
        return len(evals_extras.history_rows(path)) if os.path.exists(path) else 0

    def test_an_interrupt_while_the_record_is_written_leaves_every_file_as_it_was(self):
        self.assertEqual(self.main(lambda prompt: "fine")[0], 0)
        with open(self.baseline, "rb") as handle:
            before = handle.read()
        chunks = evals.record_chunks

        def interrupted(record):
            for number, chunk in enumerate(chunks(record)):
                if number == 3:
                    raise KeyboardInterrupt
                yield chunk

        with unittest.mock.patch.object(evals, "record_chunks", interrupted):
            code, err = self.main(lambda prompt: "a changed answer now")
        self.assertEqual(code, 130, err)
        self.assertIn("interrupted", err)
        with open(self.baseline, "rb") as handle:
            self.assertEqual(handle.read(), before)
        self.assertEqual([n for n in os.listdir(self.dir) if n.endswith(".tmp")], [])
        self.assertEqual(self.history_runs(), 1)  # the interrupted run is not in the history

    def test_a_run_does_not_overwrite_a_baseline_another_run_wrote_meanwhile(self):
        self.assertEqual(self.main(lambda prompt: "fine")[0], 0)

        def accept_elsewhere(prompt):  # another run's --accept lands while this one runs
            if prompt == "b":
                other = evals_extras.read_record(self.baseline)
                evals.write_record(self.baseline, dict(other, accepted=True))
            return "far too many words now"  # every verdict changes: this run would write

        code, err = self.main(accept_elsewhere)
        self.assertEqual(code, 2, err)
        self.assertIn("was written by another run while this one ran; it is not overwritten",
                      err)
        self.assertTrue(evals_extras.read_record(self.baseline)["accepted"])
        beside = [n for n in os.listdir(self.dir) if n.startswith("last_run.") and
                  n != "last_run.json"]
        self.assertEqual(len(beside), 1, os.listdir(self.dir))
        self.assertIn(beside[0], err)


class StalledProviderTest(unittest.TestCase):
    def test_a_provider_that_stalls_mid_body_ends_as_errors_and_exit_2(self):
        """The calls are abandoned at --timeout while their threads still read the socket;
        the process must still end normally (it used to abort, exit 134)."""
        import socket
        import subprocess
        import threading
        import time

        server = socket.socket()
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        server.settimeout(0.2)
        stop = threading.Event()
        self.addCleanup(stop.set)

        def drip():
            connections = []
            deadline = time.monotonic() + 30
            while not stop.is_set() and time.monotonic() < deadline:
                try:
                    connection, _ = server.accept()
                except socket.timeout:
                    continue
                connection.recv(65536)
                connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                                   b"Content-Length: 500\r\n\r\n{")
                connections.append(connection)
            for connection in connections:
                connection.close()
            server.close()

        threading.Thread(target=drip, daemon=True).start()
        with tempfile.TemporaryDirectory() as folder:
            with open(os.path.join(folder, "cases.jsonl"), "w", encoding="utf-8") as handle:
                for case_id in ("a", "b", "c"):
                    handle.write(json.dumps({"id": case_id, "input": case_id, "checks": [
                        {"type": "max_words", "n": 3}]}) + "\n")
            env = {k: v for k, v in os.environ.items() if not k.startswith("EVALS_")}
            env.update(EVALS_PROVIDER="openai", OPENAI_API_KEY="k", EVALS_MAX_ATTEMPTS="1",
                       EVALS_BASE_URL="http://127.0.0.1:%d/v1" % server.getsockname()[1])
            done = subprocess.run(
                [sys.executable, os.path.join(ROOT, "evals.py"), "--client",
                 os.path.join(ROOT, "my_client.py") + ":ask", "--no-save", "--timeout", "0.5",
                 "-j", "3"], cwd=folder, env=env, capture_output=True, text=True, timeout=60)
        self.assertEqual(done.returncode, 2, done.stderr)
        self.assertNotIn("Fatal Python error", done.stderr)
        self.assertIn("ERROR: 3 cases: a, b, c\n    TimeoutError: no answer within 0.5 s",
                      done.stdout)


class AttackFindingsTest(unittest.TestCase):
    """What trying to break it found; each was a traceback, a hang or a silent wrong answer."""

    def test_sys_exit_in_a_check_is_that_cases_error(self):
        check = {"type": "python", "function": "tests.user_checks:exits"}
        status, checks = evals.evaluate(evals.Case("k", "q", (check,)), "text")
        self.assertEqual((status, checks[0]["reason"]),
                         ("error", "tests.user_checks:exits raised SystemExit: 0"))

    def test_a_malformed_usage_is_not_counted_and_the_run_goes_on(self):
        class Reply(str):
            usage = {"input_tokens": "lots", "output_tokens": 2}
            model = "gpt-4o"

        class Raising(str):
            @property
            def usage(self):
                raise RuntimeError("boom")

        cases = [evals.Case(i, i, ({"type": "max_words", "n": 5},)) for i in ("a", "b")]
        answers = {"a": Reply("fine"), "b": Raising("fine")}
        results = evals.run_cases(cases, lambda prompt: answers[prompt])
        self.assertEqual([(r.status, r.usage, r.cost_usd) for r in results],
                         [("pass", None, None), ("pass", None, None)])

    def test_a_symlinked_output_is_written_through(self):
        with tempfile.TemporaryDirectory() as folder:
            target = os.path.join(folder, "real.json")
            link = os.path.join(folder, "link.json")
            evals_extras.write_json_atomic(target, {"old": True})
            os.symlink(target, link)
            evals_extras.write_json_atomic(link, {"new": True})
            self.assertTrue(os.path.islink(link))
            with open(target) as handle:
                self.assertEqual(json.load(handle), {"new": True})

    def test_merge_refuses_records_with_mistyped_fields(self):
        entry = {"id": "b", "status": "pass", "baseline": "pass", "change": "new"}
        for bad, words in (({"latency_s": "fast"}, "'latency_s' must be a number"),
                           ({"usage": {"input_tokens": "x"}}, "'usage' must hold whole"),
                           ({"cost_usd": float("inf")}, "'cost_usd' must be a number"),
                           ({"traceback": ["line"]}, "'traceback' must be a string")):
            record = {"format": "evals-run", "version": 1, "summary": {}, "case_file": {},
                      "cases": [dict(entry, **bad)]}
            with self.subTest(bad=bad):
                self.assertIn(words, evals.record_problem(record))
        record = {"format": "evals-run", "version": 1, "cases": [entry], "removed": [1, None]}
        self.assertEqual(evals.record_problem(record), "'removed' must be a list of case ids")

    def test_a_tiny_rate_limit_is_an_option_error(self):
        err = io.StringIO()
        self.assertEqual(evals.main(["--rate-limit", "1e-12"], io.StringIO(), err), 2)
        self.assertIn("must be 0.001 or more", err.getvalue())

    def test_a_refused_key_stops_that_run_only(self):
        class Refused(Exception):
            status = 401

        def refuse(prompt):
            raise Refused("bad key")

        options = evals.RunOptions()
        cases = [evals.Case(i, i, ({"type": "max_words", "n": 5},)) for i in ("a", "b")]
        first = evals.run_cases(cases, refuse, options)
        self.assertIn("not called", first[1].error)
        again = evals.run_cases(cases, lambda prompt: "fine", options)
        self.assertEqual([r.status for r in again], ["pass", "pass"])

    def test_a_second_judge_check_is_not_skipped_for_the_first(self):
        def judge(prompt):  # the first judge check finds a violation, the second none
            missing = ["x"] if '"rubric": "first"' in prompt else []
            return json.dumps({"missing_requirements": missing, "forbidden_claims_found": [],
                               "unsupported_claims": [], "reason": "", "confidence": "high"})

        case = evals.Case("k", "q", ({"type": "judge", "rubric": "first"},
                                     {"type": "judge", "rubric": "second"}))
        status, checks = evals.evaluate(case, "an answer", judge)
        self.assertEqual([c["passed"] for c in checks], [False, True])


class RescoreFromARecordTest(unittest.TestCase):
    def test_a_record_without_outputs_or_with_odd_entries(self):
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "run.json")
            base = {"format": "evals-run", "version": 1}
            evals_extras.write_json_atomic(path, dict(base, outputs_included=False, cases=[]))
            with self.assertRaisesRegex(evals.EvalsError, "saved with --omit-outputs"):
                evals.load_outputs(path)
            evals_extras.write_json_atomic(path, dict(base, cases=[1, {"id": "a", "output": "x"}]))
            self.assertEqual(evals.load_outputs(path), {"a": "x"})


class ReplayedAnswersTest(unittest.TestCase):
    def test_a_replayed_answer_has_no_latency_even_when_its_model_is_recorded(self):
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "recordings.jsonl")
            with open(path, "w", encoding="utf-8") as handle:
                handle.write(json.dumps({"id": "a", "output": "fine", "model": "gpt-4o"}) + "\n")
            client = evals.replay_client(evals.load_outputs(path), path)
            case = evals.Case("a", "q", ({"type": "max_words", "n": 5},))
            [result] = evals.run_cases([case], client)
        self.assertEqual((result.status, result.model, result.latency_s), ("pass", "gpt-4o", None))


class FileModulesTest(unittest.TestCase):
    def test_a_file_named_twice_runs_once_and_its_dataclasses_work(self):
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "evals_test_filemod.py")
            with open(path, "w", encoding="utf-8") as handle:
                handle.write("import dataclasses\nRUNS = []\nRUNS.append(1)\n\n"
                             "@dataclasses.dataclass\nclass Verdict:\n    ok: bool\n\n"
                             "def ask(prompt):\n    return 'x'\n\n"
                             "def judge(prompt):\n    return str(Verdict(True))\n")
            self.addCleanup(sys.modules.pop, "evals_test_filemod", None)
            ask = evals.load_callable(path + ":ask")
            judge = evals.load_callable(path + ":judge", "--judge")
        self.assertIs(ask.__globals__, judge.__globals__)
        self.assertEqual(ask.__globals__["RUNS"], [1])
        self.assertEqual(judge("p"), "Verdict(ok=True)")


class NothingInventedTest(unittest.TestCase):
    """Issue 21: what the report counts was measured, once."""

    def setUp(self):
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.dir = tmp.name

    def path(self, name):
        return os.path.join(self.dir, name)

    def write_cases(self, *cases):
        with open(self.path("cases.jsonl"), "w", encoding="utf-8") as handle:
            handle.writelines(json.dumps(case) + "\n" for case in cases)

    def main(self, *argv, client=None):
        if client:
            module = type(sys)("_hostile_client")
            module.ask = client
            sys.modules["_hostile_client"] = module
            self.addCleanup(sys.modules.pop, "_hostile_client", None)
            argv = ("--client", "_hostile_client:ask", *argv)
        out, err = io.StringIO(), io.StringIO()
        code = evals.main(["--cases", self.path("cases.jsonl"), "--baseline",
                           self.path("last_run.json"), "--no-history", *argv], out, err)
        return code, out.getvalue(), err.getvalue()

    def test_rescoring_more_calls_than_were_recorded_is_refused(self):
        self.write_cases({"id": "k", "input": "q", "checks": [
            {"type": "contains_all", "values": ["yes"]}]})
        answers = iter(["yes", "yes", "no"])
        code, _, err = self.main("--repeat", "3", "--out", self.path("run.json"),
                                 client=lambda prompt: next(answers))
        self.assertEqual(code, 0, err)
        # calls 1-2 were replayed again as calls 4-5: "4/5 calls passed", two answers invented
        code, out, err = self.main("--rescore", self.path("run.json"), "--repeat", "5",
                                   "--no-save")
        self.assertEqual((code, out), (2, ""), err)
        self.assertIn("run.json: case 'k' was called 3 times in that run, so --repeat 5 would "
                      "score its recorded calls again as new answers; re-score with --repeat 3 "
                      "or fewer", err)
        code, out, err = self.main("--rescore", self.path("run.json"), "--repeat", "3",
                                   "--no-save")
        self.assertEqual(code, 0, err)
        self.assertIn("(2/3 calls passed)", out)


class ChecksThatRaiseTest(unittest.TestCase):
    """Issue 21: whatever a `python` check raises is its case's error; Ctrl-C still stops."""

    def test_a_base_exception_or_keyboard_interrupt_from_a_check_is_that_cases_error(self):
        with tempfile.TemporaryDirectory() as folder:
            cases = os.path.join(folder, "cases.jsonl")
            with open(cases, "w", encoding="utf-8") as handle:
                for case_id, function in (("a", "fails_like_pytest"), ("b", "interrupts"),
                                          ("c", "is_short")):
                    handle.write(json.dumps({"id": case_id, "input": "q", "checks": [
                        {"type": "python", "function": "tests.user_checks:" + function}]}) + "\n")
            module = type(sys)("_hostile_client")
            module.ask = lambda prompt: "short"
            sys.modules["_hostile_client"] = module
            self.addCleanup(sys.modules.pop, "_hostile_client", None)
            out, err = io.StringIO(), io.StringIO()
            code = evals.main(["--cases", cases, "--baseline", os.path.join(folder, "b.json"),
                               "--client", "_hostile_client:ask", "--no-save"], out, err)
        self.assertEqual(code, 2, err.getvalue())
        self.assertNotIn("Traceback", err.getvalue())
        self.assertIn("pass rate 33.3% (1/3)", out.getvalue())
        self.assertIn("ERROR: a\n    tests.user_checks:fails_like_pytest raised Failed: the "
                      "answer is wrong\nERROR: b\n    tests.user_checks:interrupts raised "
                      "KeyboardInterrupt\n", out.getvalue())

    def test_ctrl_c_while_a_check_runs_still_interrupts_the_run(self):
        import signal
        import subprocess
        import time

        with tempfile.TemporaryDirectory() as folder:
            with open(os.path.join(folder, "mine.py"), "w") as handle:
                handle.write("import os, time\n"
                             "def ask(prompt):\n    return 'fine'\n"
                             "def slow(output):\n"
                             "    open(os.path.join(os.path.dirname(__file__), 'started'), 'w')"
                             ".close()\n    time.sleep(30)\n    return True\n")
            with open(os.path.join(folder, "cases.jsonl"), "w") as handle:
                handle.write(json.dumps({"id": "a", "input": "q", "checks": [
                    {"type": "python", "function": "mine:slow"}]}) + "\n")
            process = subprocess.Popen(
                [sys.executable, os.path.join(ROOT, "evals.py"), "--client", "mine:ask"],
                cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
            try:
                deadline = time.monotonic() + 20
                while not os.path.exists(os.path.join(folder, "started")):
                    self.assertIsNone(process.poll(), "evals.py exited early")
                    self.assertLess(time.monotonic(), deadline, "the check never started")
                    time.sleep(0.05)
                process.send_signal(signal.SIGINT)
                out, err = process.communicate(timeout=20)
            finally:
                if process.poll() is None:
                    process.kill()
                    process.communicate()
            self.assertEqual(process.returncode, 130, err)
            self.assertIn("interrupted", err)
            self.assertFalse(os.path.exists(os.path.join(folder, "last_run.json")))


class ChecksKeepToThemselvesTest(unittest.TestCase):
    """Issue 21: a `python` check's side effects stay in its call."""

    def setUp(self):
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.dir = os.path.realpath(tmp.name)
        self.addCleanup(os.chdir, os.getcwd())
        module = type(sys)("_hostile_client")
        module.ask = lambda prompt: "fine"
        sys.modules["_hostile_client"] = module
        self.addCleanup(sys.modules.pop, "_hostile_client", None)

    def main(self, checks, *argv):
        with open(os.path.join(self.dir, "cases.jsonl"), "w", encoding="utf-8") as handle:
            for case_id in ("a", "b"):  # equal check lists: load_cases shares them
                handle.write(json.dumps({"id": case_id, "input": "q", "checks": checks}) + "\n")
        out, err = io.StringIO(), io.StringIO()
        os.chdir(self.dir)
        code = evals.main(["--client", "_hostile_client:ask", "--no-history", *argv], out, err)
        return code, out.getvalue(), err.getvalue()

    def test_a_check_that_changes_its_list_parameter_changes_it_for_no_other_call(self):
        code, out, err = self.main([{"type": "python", "function":
                                     "tests.user_checks:takes_its_values", "values": ["a", "b"]}],
                                   "--repeat", "3", "--no-save")
        self.assertEqual(code, 0, out + err)
        self.assertIn("pass rate 100.0% (2/2)", out)
        self.assertNotIn("calls passed", out)  # 3/3 each, not flaky

    def test_a_check_that_changes_folder_leaves_the_record_where_the_run_says(self):
        os.mkdir(os.path.join(self.dir, "elsewhere"))
        code, out, err = self.main([{"type": "python", "function": "tests.user_checks:moves_away",
                                     "folder": os.path.join(self.dir, "elsewhere")}])
        self.assertEqual(code, 0, out + err)
        self.assertEqual(os.getcwd(), self.dir)
        self.assertTrue(os.path.exists(os.path.join(self.dir, "last_run.json")))
        self.assertEqual(os.listdir(os.path.join(self.dir, "elsewhere")), [])


class BoundedTest(FolderCase):
    """Issue 21: no option, file or reason the user gives grows without end or crashes."""

    FILES = ("cases.jsonl", "recordings.jsonl")

    def setUp(self):
        super().setUp()
        deep = "[" * 100_000 + "]" * 100_000
        self.write("deep.json", '{"format": "evals-run", "version": 1, "cases": %s}' % deep)
        self.write("deep.jsonl", '{"id": "a", "output": %s}\n' % deep)

    def write(self, name, text):
        with open(os.path.join(self.dir, name), "w", encoding="utf-8") as handle:
            handle.write(text)


    def test_a_repeat_past_any_use_is_refused(self):
        code, _, err = self.main("--rescore", "recordings.jsonl", "--no-save",
                                 "--repeat", "9223372036854775808")
        self.assertEqual(code, 2)
        self.assertIn("argument --repeat: must be at most 1000, got 9223372036854775808", err)

    def test_json_nested_too_deeply_is_an_error_naming_the_file(self):
        for argv, words in (
                (("--baseline", "deep.json", "--rescore", "recordings.jsonl", "--no-save"),
                 "deep.json: the baseline is not valid JSON (maximum recursion depth"),
                (("--rescore", "deep.json", "--no-save"), "deep.json:1: invalid JSON: maximum "),
                (("--rescore", "deep.jsonl", "--no-save"), "deep.jsonl:1: invalid JSON: maximum"),
                (("--rescore", "recordings.jsonl", "--no-save", "--prices", "deep.json"),
                 "--prices deep.json: cannot read a JSON price table: maximum recursion depth"),
                (("report", "deep.json"), "deep.json: cannot read the run record: maximum"),
                (("merge", "deep.json", "--out", "m.json"), "deep.json: cannot read the run")):
            with self.subTest(argv=argv):
                code, _, err = self.main(*argv)
                self.assertEqual(code, 2, err)
                self.assertNotIn("Traceback", err)
                self.assertIn(words, err)

    def test_a_tools_file_nested_too_deeply_names_the_file(self):
        environ = {k: v for k, v in os.environ.items() if not k.startswith("EVALS_")}
        environ.update(EVALS_PROVIDER="openai", OPENAI_API_KEY="k", EVALS_TOOLS="deep.json",
                       EVALS_BASE_URL="http://127.0.0.1:9/v1", EVALS_MAX_ATTEMPTS="1")
        with unittest.mock.patch.dict(os.environ, environ, clear=True):
            code, out, err = self.main("--client", os.path.join(ROOT, "my_client.py") + ":ask",
                                       "--no-save", "--no-history", "--id", "refund-under-limit")
        self.assertEqual(code, 2, err)
        self.assertIn("ConfigError: EVALS_TOOLS file deep.json: not valid JSON (maximum "
                      "recursion depth", out)

    def test_a_huge_reason_is_cut_in_the_summary_and_kept_in_the_record(self):
        self.write("cases.jsonl", json.dumps({"id": "a", "input": "q", "checks": [
            {"type": "python", "function": "tests.user_checks:says_a_lot"}]}) + "\n")
        self.write("recordings.jsonl", json.dumps({"id": "a", "output": "fine"}) + "\n")
        code, out, err = self.main("--rescore", "recordings.jsonl", "--no-history")
        self.assertEqual(code, 0, err)
        self.assertLess(len(out), 5000)
        self.assertIn("why why ", out)
        self.assertIn("... (4,999,008 more characters)", out)
        with open(os.path.join(self.dir, "last_run.json"), encoding="utf-8") as handle:
            reason = json.load(handle)["cases"][0]["checks"][0]["reason"]
        self.assertEqual(len(reason), 5_000_000)


class IdsAsTheyAreTest(unittest.TestCase):
    """Issue 21: one rule for how ids are shown, in every report."""

    def test_an_invisible_character_in_an_id_is_spelled_out_everywhere(self):
        import xml.etree.ElementTree as ET

        ids = ["b", "b\ufffe", "zw\u200bsp", "\ufeffbom", "rlo\u202e"]
        with tempfile.TemporaryDirectory() as folder:
            with open(os.path.join(folder, "cases.jsonl"), "w", encoding="utf-8") as handle:
                handle.writelines(json.dumps({"id": i, "input": "q", "checks": [
                    {"type": "equals", "value": "a"}]}) + "\n" for i in ids)
            with open(os.path.join(folder, "rec.jsonl"), "w", encoding="utf-8") as handle:
                handle.writelines(json.dumps({"id": i, "output": "b"}) + "\n" for i in ids)
            out, err = io.StringIO(), io.StringIO()
            junit = os.path.join(folder, "junit.xml")
            code = evals.main(["--cases", os.path.join(folder, "cases.jsonl"), "--baseline",
                               os.path.join(folder, "last_run.json"), "--rescore",
                               os.path.join(folder, "rec.jsonl"), "--no-save", "--junit", junit],
                              out, err)
            self.assertEqual(code, 0, err.getvalue())
            names = [case.get("name") for case in ET.parse(junit).iter("testcase")]
        shown = ["b", "b\\ufffe", "zw\\u200bsp", "\\ufeffbom", "rlo\\u202e"]
        for name in shown:
            self.assertIn(f"NEW FAIL: {name}\n", out.getvalue())
        self.assertEqual(names, shown)  # two ids, two test names

    def test_a_bare_tool_call_object_is_an_error_naming_its_shape(self):
        from tests._loopback import LoopbackServer

        server = LoopbackServer().start()
        self.addCleanup(server.stop)
        call = {"id": "c1", "type": "function",
                "function": {"name": "lookup_order", "arguments": "{}"}}
        server.add({"json": {"model": "m", "choices": [{"finish_reason": "tool_calls", "message": {
            "content": "", "tool_calls": call}}]}})
        with tempfile.TemporaryDirectory() as folder:
            with open(os.path.join(folder, "cases.jsonl"), "w", encoding="utf-8") as handle:
                handle.write(json.dumps({"id": "k", "input": "q", "checks": [
                    {"type": "tool_called", "name": "lookup_order"}]}) + "\n")
            environ = {k: v for k, v in os.environ.items() if not k.startswith("EVALS_")}
            environ.update(EVALS_PROVIDER="openai", OPENAI_API_KEY="k", EVALS_MAX_ATTEMPTS="1",
                           EVALS_BASE_URL=server.url + "/v1")
            out, err = io.StringIO(), io.StringIO()
            with unittest.mock.patch.dict(os.environ, environ, clear=True):
                code = evals.main(["--cases", os.path.join(folder, "cases.jsonl"), "--baseline",
                                   os.path.join(folder, "last_run.json"), "--no-save",
                                   "--client", os.path.join(ROOT, "my_client.py") + ":ask"],
                                  out, err)
        self.assertEqual(code, 2, out.getvalue() + err.getvalue())  # not "called no tool"
        self.assertIn("ERROR: k\n    ProviderError: openai: response's message.tool_calls is an "
                      "object, not an array of calls", out.getvalue())
