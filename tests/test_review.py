"""`python evals.py review`: captured calls (evals_extras.capture) become cases. Each test runs
the command on captures evals_extras.capture wrote."""

import io
import json
import os
import re
import subprocess
import sys
import tempfile
import unittest
from unittest import mock

import evals
import evals_extras
import my_client
from tests.test_conversations_tools import ARGUMENTS, CONVERSATION, SYSTEM

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EVALS = os.path.join(ROOT, "evals.py")


def read_lines(path):
    with open(path, encoding="utf-8") as handle:
        return handle.read().splitlines()


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
        bot = evals_extras.capture(lambda question: BAD_ANSWER, path=self.captures,
                                tags=["support"])
        bot(QUESTION)
        bot("Where is my parcel?")

    def review(self, answers, *extra):
        """`python evals.py review` with `answers` on its input, run in this process (the test
        of conversations below runs it as a process); (exit code, stdout, stderr)."""
        out, err, cwd = io.StringIO(), io.StringIO(), os.getcwd()
        os.chdir(self.dir)
        try:
            with mock.patch("sys.stdin", io.StringIO(answers)):
                code = evals.main(["review", "--captures", self.captures, "--cases", self.cases,
                                   *extra], out, err)
        finally:
            os.chdir(cwd)
        return code, out.getvalue(), err.getvalue()

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
        evals_extras.capture(lambda q: "a", path=self.captures, store_text=False)("private")
        code, out, err = self.review("a\ns\n")
        self.assertIn("(not stored: store_text=False)", out)
        self.assertIn("cannot become a case", out)
        self.assertNotIn("private", out)

    def test_no_captures_is_exit_2(self):
        os.remove(self.captures)
        code, out, err = self.review("")
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
        evals_extras.capture(lambda q: "red \x1b[31mtext", path=self.captures)("q")
        code, out, err = self.review("q\n")
        self.assertNotIn("\x1b", out)
        self.assertIn("\\x1b[31m", out)



class ConversationReviewTest(unittest.TestCase):
    def setUp(self):
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.dir = tmp.name
        self.captures = os.path.join(self.dir, ".evals", "captures.jsonl")

    def test_review_shows_the_conversation_and_drafts_a_conversation_case(self):
        calls = [{"name": "issue_refund", "arguments": ARGUMENTS}]
        evals_extras.capture(lambda messages: my_client.Reply(
            "", finish_reason="tool_calls", tool_calls=calls), path=self.captures)(CONVERSATION)
        cases = os.path.join(self.dir, "cases.jsonl")
        done = subprocess.run(
            [sys.executable, EVALS, "review", "--captures", self.captures, "--cases", cases],
            input="a\nLook the order up; never refund it.\n\n\n\nn\nq\n", capture_output=True,
            text=True, timeout=60, cwd=self.dir)
        self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
        self.assertIn("input:\n  system: %s\n  user: My order has not arrived." % SYSTEM,
                      done.stdout)
        self.assertIn('tool call: issue_refund {"order_id": "A-1001"}', done.stdout)
        self.assertIn("case id [it-is-a-1001]", done.stdout)
        drafted = json.loads(re.search(r"^\{\n.*?^\}$", done.stdout, re.M | re.S).group(0))
        self.assertEqual(drafted["input"], CONVERSATION)
        self.assertEqual(json.loads(drafted["metadata"]["captured_output"])["tool_calls"], calls)


if __name__ == "__main__":
    unittest.main()
