"""my_client.capture in a running app, and `my_client.py review` turning captures into cases."""

import contextlib
import io
import json
import os
import subprocess
import sys
import tempfile
import threading
import unittest
from unittest import mock

import evals
import my_client

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EVALS = os.path.join(ROOT, "evals.py")
MY_CLIENT = os.path.join(ROOT, "my_client.py")


def read_lines(path):
    with open(path, encoding="utf-8") as handle:
        return handle.read().splitlines()


class CaptureTest(unittest.TestCase):
    def setUp(self):
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.dir = tmp.name
        self.path = os.path.join(self.dir, ".evals", "captures.jsonl")

    def rows(self):
        return [json.loads(line) for line in read_lines(self.path)]

    def test_decorator_forms_and_fields(self):
        @my_client.capture(path=self.path, tags=["support"], context={"release": "v2"})
        def bot(question, temperature=0):
            return "answer to " + question

        def plain(prompt):
            return my_client.Reply("reply", model="m")

        wrapped = my_client.capture(plain, path=self.path)
        self.assertEqual(bot("q1"), "answer to q1")
        self.assertEqual(wrapped("q2").model, "m")  # the return value is passed through as is
        self.assertEqual(bot.__name__, "bot")
        first, second = self.rows()
        self.assertEqual(set(first), {"ts", "input", "output", "tags", "context", "latency_s",
                                      "error"})
        self.assertEqual((first["input"], first["output"], first["tags"], first["context"]),
                         ("q1", "answer to q1", ["support"], {"release": "v2"}))
        self.assertIsNone(first["error"])
        self.assertGreaterEqual(first["latency_s"], 0)
        self.assertEqual((second["input"], second["output"], second["tags"]), ("q2", "reply", []))

    def test_input_found_in_methods_and_keywords(self):
        class App:
            @my_client.capture(path=self.path)
            def ask(self, prompt):
                return prompt.upper()

        App().ask("hi")
        my_client.capture(lambda **kw: "x", path=self.path)(prompt="by keyword")
        my_client.capture(lambda messages: "x", path=self.path)([{"role": "user"}])
        inputs = [row["input"] for row in self.rows()]
        self.assertEqual(inputs[:2], ["hi", "by keyword"])
        self.assertEqual(inputs[2], {"args": [[{"role": "user"}]], "kwargs": {}})

    def test_error_is_captured_and_reraised(self):
        @my_client.capture(path=self.path)
        def bot(question):
            raise TimeoutError("provider took too long")

        with self.assertRaises(TimeoutError):
            bot("q")
        row = self.rows()[0]
        self.assertEqual(row["error"], "TimeoutError: provider took too long")
        self.assertIsNone(row["output"])

    def test_redaction(self):
        calls = []

        @my_client.capture(path=self.path, redact=[r"\b\d{16}\b", r"[\w.]+@\w+\.\w+"],
                           context=lambda: {"user": "ana@example.com", "n": len(calls)})
        def bot(question):
            calls.append(question)
            if "fail" in question:
                raise ValueError("bad card 4111111111111111")
            return "Card 4111111111111111 on file for ana@example.com."

        bot("My card is 4111111111111111, mail ana@example.com")
        with self.assertRaises(ValueError):
            bot("fail 4111111111111111")
        text = "\n".join(read_lines(self.path))
        self.assertNotIn("4111111111111111", text)
        self.assertNotIn("ana@example.com", text)
        first, second = self.rows()
        self.assertEqual(first["input"], "My card is [REDACTED], mail [REDACTED]")
        self.assertEqual(first["output"], "Card [REDACTED] on file for [REDACTED].")
        self.assertEqual(first["context"], {"user": "[REDACTED]", "n": 0})
        self.assertEqual(second["error"], "ValueError: bad card [REDACTED]")
        self.assertEqual(calls[0], "My card is 4111111111111111, mail ana@example.com")

    def test_store_text_false_keeps_only_hashes_and_lengths(self):
        @my_client.capture(path=self.path, store_text=False)
        def bot(question):
            if question == "boom":
                raise RuntimeError("secret detail")
            return "secret answer"

        bot("secret question")
        with self.assertRaises(RuntimeError):
            bot("boom")
        text = "\n".join(read_lines(self.path))
        self.assertNotIn("secret", text)
        first, second = self.rows()
        self.assertEqual(first["input"]["chars"], len("secret question"))
        self.assertEqual(len(first["input"]["sha256"]), 64)
        self.assertEqual(first["output"]["chars"], len("secret answer"))
        self.assertEqual(second["error"], "RuntimeError")

    def test_eight_threads_lose_no_line(self):
        @my_client.capture(path=self.path, tags=["load"])
        def bot(question):
            return question + " " + "x" * 20000  # lines far longer than a pipe buffer

        def worker(number):
            for call in range(40):
                bot(f"t{number}-c{call}")

        threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        lines = read_lines(self.path)
        self.assertEqual(len(lines), 8 * 40)
        inputs = {json.loads(line)["input"] for line in lines}  # every line valid JSON
        self.assertEqual(inputs, {f"t{n}-c{c}" for n in range(8) for c in range(40)})

    def test_a_capture_that_cannot_be_written_does_not_break_the_app(self):
        os.makedirs(self.path)  # a directory where the file should be
        my_client._capture_warned.clear()
        self.addCleanup(my_client._capture_warned.clear)
        bot = my_client.capture(lambda q: "fine", path=self.path)
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            self.assertEqual(bot("a"), "fine")
            self.assertEqual(bot("b"), "fine")
        self.assertEqual(err.getvalue().count("capture to"), 1)


BAD_ANSWER = "Refunds are instant and no approval is needed."
QUESTION = "I paid $150 for a blender, can I get a refund today?"


class ReviewTest(unittest.TestCase):
    def setUp(self):
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.dir = tmp.name
        self.captures = os.path.join(self.dir, ".evals", "captures.jsonl")
        self.cases = os.path.join(self.dir, "cases.jsonl")
        with open(self.cases, "w", encoding="utf-8") as handle:
            handle.write(json.dumps({"id": "existing", "input": "q", "checks": [
                {"type": "max_words", "n": 5}]}) + "\n")
        bot = my_client.capture(lambda question: BAD_ANSWER, path=self.captures,
                                tags=["support"])
        bot(QUESTION)
        bot("Where is my parcel?")

    def review(self, answers, *extra):
        """`python my_client.py review` with `answers` on its input, run in this process (a
        new process a session costs about half a second); (exit code, stdout, stderr)."""
        out, err = io.StringIO(), io.StringIO()
        cwd = os.getcwd()
        os.chdir(self.dir)
        try:
            with mock.patch("sys.stdin", io.StringIO(answers)), \
                    contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                code = my_client.review(["--captures", self.captures, "--cases", self.cases,
                                         *extra], out, err)
        finally:
            os.chdir(cwd)
        return code, out.getvalue(), err.getvalue()

    def review_in_a_process(self, answers, *extra):
        done = subprocess.run(
            [sys.executable, MY_CLIENT, "review", "--captures", self.captures, "--cases", self.cases,
             *extra], input=answers, capture_output=True, text=True, timeout=60, cwd=self.dir)
        return done.returncode, done.stdout, done.stderr

    def added(self):
        cases, _ = evals.load_cases(self.cases)  # the file stays valid
        return [c for c in cases if c.id != "existing"]

    def test_approve_with_correction_appends_a_valid_case_without_contradiction(self):
        answers = ('a\nInclude "manager approval"\n\nthe refund is instant\n\ny\nq\n')
        code, out, err = self.review(answers)
        self.assertEqual(code, 0, out + err)
        self.assertIn(BAD_ANSWER, out)
        self.assertIn("added case 'i-paid-150-for-a-blender'", out)
        (case,) = self.added()
        self.assertEqual(case.input, QUESTION)
        self.assertEqual(case.tags, ("support", "captured"))
        (check,) = case.checks
        self.assertEqual(check["type"], "judge")
        self.assertEqual(check["rubric"], 'Include "manager approval"')
        self.assertEqual(check["must_not_claim"], ["the refund is instant"])
        self.assertNotIn("must_include", check)
        required = set(check.get("must_include", []))
        forbidden = set(check.get("must_not_claim", []))
        self.assertEqual(required & forbidden, set())
        self.assertFalse(any("manager approval" in claim for claim in forbidden))
        self.assertEqual(case.metadata, {"captured_output": BAD_ANSWER})
        self.assertIn("1 case(s) added", out)
        # Reviewed captures are not shown again; the one left is.
        code, out, err = self.review("q\n")
        self.assertNotIn("blender", out)
        self.assertIn("Where is my parcel?", out)

    def test_required_and_forbidden_come_from_separate_answers(self):
        answers = ("a\nSay that a manager approves refunds over $100.\n"
                   "manager approval; 3-5 business days\nno approval is needed\nrefund-approval\n"
                   "y\nq\n")
        self.assertEqual(self.review(answers)[0], 0)
        (case,) = self.added()
        self.assertEqual(case.id, "refund-approval")
        self.assertEqual(case.checks[0]["must_include"], ["manager approval", "3-5 business days"])
        self.assertEqual(case.checks[0]["must_not_claim"], ["no approval is needed"])

    def test_skip_marks_reviewed_and_appends_nothing(self):
        code, out, err = self.review("s\ns\n")
        self.assertEqual(code, 0, out + err)
        self.assertEqual(self.added(), [])
        self.assertEqual(len(read_lines(self.captures + ".reviewed")), 2)
        code, out, err = self.review("")
        self.assertIn("nothing to review: 2 capture(s)", out)

    def test_eof_at_confirmation_appends_nothing(self):
        with open(self.cases, "rb") as handle:
            before = handle.read()
        code, out, err = self.review('a\nInclude "manager approval"\n\n\n\n')
        self.assertEqual(code, 0, out + err)
        self.assertIn("Append this case", out)
        self.assertIn("end of input: nothing appended", out)
        with open(self.cases, "rb") as handle:
            self.assertEqual(handle.read(), before)
        self.assertFalse(os.path.exists(self.captures + ".reviewed"))

    def test_anything_but_yes_is_no(self):
        code, out, err = self.review('a\nSay it needs approval\n\n\n\nok\nq\n')
        self.assertIn("not appended", out)
        self.assertEqual(self.added(), [])

    def test_nothing_to_check_asks_again(self):
        code, out, err = self.review("a\n\n\n\nq\n")
        self.assertIn("nothing to check", out)
        self.assertEqual(self.added(), [])

    def test_edit_pastes_the_case_json(self):
        case = {"id": "pasted", "input": QUESTION, "checks": [
            {"type": "contains_any", "values": ["manager approval"]},
            {"type": "judge", "must_not_claim": ["refunds are instant"]}]}
        text = json.dumps(case, indent=1)
        code, out, err = self.review(f"e\n{text}\n\ny\nq\n")
        self.assertEqual(code, 0, out + err)
        self.assertEqual([c.id for c in self.added()], ["pasted"])

    def test_edit_with_invalid_case_appends_nothing(self):
        bad = json.dumps({"id": "x", "input": QUESTION, "checks": [{"type": "judge"}]})
        code, out, err = self.review(f"e\n{{not json\n\ne\n{bad}\n\nq\n")
        self.assertIn("not valid JSON", out)
        self.assertIn("give at least one of 'rubric'", out)
        self.assertEqual(self.added(), [])

    def test_existing_id_is_refused(self):
        code, out, err = self.review("a\nSay it needs approval\n\n\nexisting\ny\nq\n")
        self.assertIn("not appended: ", out)
        self.assertIn("id 'existing' exists already", out)
        self.assertEqual(self.added(), [])

    def test_hashed_capture_cannot_become_a_case(self):
        os.remove(self.captures)
        my_client.capture(lambda q: "a", path=self.captures, store_text=False)("private")
        code, out, err = self.review("a\ns\n")
        self.assertIn("(not stored: store_text=False)", out)
        self.assertIn("cannot become a case", out)
        self.assertNotIn("private", out)

    def test_no_captures_is_exit_2(self):
        os.remove(self.captures)
        code, out, err = self.review_in_a_process("")  # the exit code of the command
        self.assertEqual(code, 2)
        self.assertIn("no captures yet", err)

    def test_corrupted_lines_are_ignored(self):
        with open(self.captures, "a", encoding="utf-8") as handle:
            handle.write('{"input": "half\n')
        code, out, err = self.review("q\n")
        self.assertEqual(code, 0)
        self.assertIn("1 line(s) are not captures", err)

    def test_control_characters_are_shown_not_sent_to_the_terminal(self):
        os.remove(self.captures)
        my_client.capture(lambda q: "red \x1b[31mtext", path=self.captures)("q")
        code, out, err = self.review("q\n")
        self.assertNotIn("\x1b", out)
        self.assertIn("\\x1b[31m", out)


if __name__ == "__main__":
    unittest.main()
