"""A reply's reasoning and what was sent: kept in the run record, the recordings and the HTML
report, left out by --omit-outputs, and scored only by a check with "on": "reasoning"."""

import json
import os
import unittest
from unittest import mock

import evals
import evals_extras
from tests.test_workflow import Workspace

# answers.json beside the module: {input: answer}; an object {"text", "reasoning", "sent"} is
# returned as a str subclass carrying them, as my_client.Reply does.
CLIENT = '''
import json, os
HERE = os.path.dirname(os.path.abspath(__file__))


class Reply(str):
    def __new__(cls, text, reasoning=None, sent=None):
        self = super().__new__(cls, text)
        self.reasoning, self.sent = reasoning, sent
        return self


def ask(prompt):
    with open(os.path.join(HERE, "answers.json")) as handle:
        answer = json.load(handle)[prompt]
    if isinstance(answer, dict):
        return Reply(answer["text"], answer.get("reasoning"), answer.get("sent"))
    return answer
'''

SENT = {"temperature": None, "max_completion_tokens": 1024}
THOUGHT = "The policy says <b>manager approval</b> & a receipt."
ON_REASONING = {"type": "contains_all", "values": ["manager approval"], "on": "reasoning"}


def case(case_id, *checks):
    return {"id": case_id, "input": case_id + "?", "checks": list(checks)}


class ReasoningTest(Workspace):
    def setUp(self):
        super().setUp()
        with open(self.path("client.py"), "w") as handle:
            handle.write(CLIENT)
        self.write_cases([
            case("thought", ON_REASONING, {"type": "contains_all", "values": ["refund"]}),
            case("answer-only", ON_REASONING),
            case("plain", {"type": "contains_all", "values": ["refund"]}),
        ])
        self.answer({
            "thought?": {"text": "Your refund needs a manager.", "reasoning": THOUGHT,
                         "sent": SENT},
            # The words are in the answer, not in the reasoning: a reasoning check fails.
            "answer-only?": {"text": "manager approval", "reasoning": "I recall a rule.",
                             "sent": SENT},
            "plain?": "A refund is on its way.",
        })

    def entries(self, name="last_run.json"):
        return {e["id"]: e for e in self.load(name)["cases"]}

    def test_the_record_keeps_reasoning_and_sent_and_scores_each_check_on_its_text(self):
        code, out, err = self.run_cli("--no-history")
        self.assertEqual(code, 0, out + err)
        entries = self.entries()
        self.assertEqual(entries["thought"]["reasoning"], THOUGHT)
        self.assertEqual(entries["thought"]["sent"], SENT)
        self.assertEqual(entries["thought"]["output"], "Your refund needs a manager.")
        self.assertEqual(entries["thought"]["status"], "pass")
        self.assertEqual([c["passed"] for c in entries["thought"]["checks"]], [True, True])
        self.assertEqual(entries["answer-only"]["status"], "fail")
        self.assertEqual(entries["answer-only"]["checks"][0]["reason"],
                         "missing: 'manager approval'")
        self.assertNotIn("reasoning", entries["plain"])  # absent, never null
        self.assertNotIn("sent", entries["plain"])
        self.assertIsNone(evals.record_problem(self.load("last_run.json")))

    def test_a_reasoning_check_on_a_reply_with_none_fails_negated_or_not(self):
        self.write_cases([case("plain", ON_REASONING),
                          case("negated", dict(ON_REASONING, negate=True))])
        self.answer({"plain?": "manager approval", "negated?": "no thinking here"})
        self.run_cli("--no-history")
        for entry in self.entries().values():
            self.assertEqual(entry["status"], "fail", entry["id"])
            self.assertEqual(entry["checks"][0]["reason"], "the model gave no reasoning")

    def test_run_check_and_evaluate_take_the_reasoning(self):
        self.assertTrue(evals.run_check(ON_REASONING, "no", reasoning=THOUGHT).passed)
        self.assertFalse(evals.run_check(ON_REASONING, "manager approval").passed)
        negated = dict(ON_REASONING, negate=True)
        self.assertTrue(evals.run_check(negated, "manager approval", reasoning="hm").passed)
        self.assertEqual(evals.run_check(negated, "x", reasoning=" \n").reason,
                         "the model gave no reasoning")
        answer = dict(ON_REASONING, on="answer")
        self.assertFalse(evals.run_check(answer, "no", reasoning=THOUGHT).passed)
        one = evals.Case("c", "q", (ON_REASONING,))
        self.assertEqual(evals.evaluate(one, "no", reasoning=THOUGHT)[0], "pass")
        self.assertEqual(evals.evaluate(one, "no")[0], "fail")

    def test_omit_outputs_drops_the_reasoning_and_keeps_sent(self):
        code, out, err = self.run_cli("--no-history", "--omit-outputs", "--repeat", "2",
                                      "--html", self.path("report.html"))
        self.assertEqual(code, 0, out + err)
        entry = self.entries()["thought"]
        self.assertEqual(entry["sent"], SENT)
        self.assertNotIn("reasoning", entry)
        self.assertEqual([sorted(a) for a in entry["attempts"]],
                         [["checks", "error", "latency_s", "status"]] * 2)
        for name in ("last_run.json", "report.html"):
            self.assertNotIn("receipt", _text(self.path(name)), name)  # from the reasoning

    def test_repeated_calls_keep_each_attempts_reasoning(self):
        self.run_cli("--no-history", "--repeat", "2")
        entries = self.entries()
        self.assertEqual([a["reasoning"] for a in entries["thought"]["attempts"]],
                         [THOUGHT, THOUGHT])
        self.assertEqual([sorted(a) for a in entries["plain"]["attempts"]],
                         [["checks", "error", "latency_s", "output", "status"]] * 2)
        self.assertEqual(entries["thought"]["reasoning"], THOUGHT)

    def test_record_then_rescore_and_replay_give_the_live_verdicts(self):
        recordings = self.path("recordings.jsonl")
        with open(recordings, "w") as handle:  # an older recording's reasoning must not stay
            handle.write(json.dumps({"id": "plain", "output": "x", "reasoning": "stale"}) + "\n")
        code, out, err = self.run_cli("--no-history", "--record", recordings)
        self.assertEqual(code, 0, out + err)
        live = {i: (e["status"], e["checks"]) for i, e in self.entries().items()}
        with open(recordings) as handle:
            rows = {row["id"]: row for row in map(json.loads, handle)}
        self.assertEqual(rows["thought"]["reasoning"], THOUGHT)
        self.assertNotIn("reasoning", rows["plain"])
        for source in (recordings, self.baseline):  # a recordings file, a run record
            code, out, err = self.main("--cases", self.cases, "--baseline", self.baseline,
                                       "--rescore", source, "--out", self.path("re.json"),
                                       "--no-history")
            self.assertEqual(code, 0, out + err)
            rescored = self.entries("re.json")
            self.assertEqual({i: (e["status"], e["checks"]) for i, e in rescored.items()}, live)
            self.assertEqual(rescored["thought"]["reasoning"], THOUGHT)
        # The offline default (my_client's ask, no provider) replays the same file the same.
        environ = {k: v for k, v in os.environ.items() if not k.startswith("EVALS_")}
        with mock.patch.dict(os.environ, dict(environ, EVALS_RECORDINGS=recordings), clear=True):
            code, out, err = self.main("--cases", self.cases, "--baseline", self.baseline,
                                       "--client", "my_client:ask", "--out",
                                       self.path("offline.json"), "--no-history")
        self.assertEqual(code, 0, out + err)
        self.assertIn("replaying recorded outputs from " + recordings, err)
        offline = self.entries("offline.json")
        self.assertEqual({i: (e["status"], e["checks"]) for i, e in offline.items()}, live)
        self.assertEqual(offline["thought"]["reasoning"], THOUGHT)

    def test_the_html_report_shows_the_reasoning_escaped_and_what_was_sent(self):
        self.answer({
            "thought?": {"text": "no", "reasoning": "<script>alert(1)</script> manager approval",
                         "sent": SENT},
            "answer-only?": "x", "plain?": "x",
        })
        self.run_cli("--no-history", "--html", self.path("report.html"))
        page = _text(self.path("report.html"))
        self.assertNotIn("<script>", page)
        self.assertIn("<details class=\"list\"><summary>Reasoning</summary><pre>&lt;script&gt;"
                      "alert(1)&lt;/script&gt; manager approval</pre></details>", page)
        self.assertIn("sent {&quot;temperature&quot;: null, &quot;max_completion_tokens&quot;: "
                      "1024}", page)
        # A record that says it holds no outputs shows no reasoning, whatever it carries.
        hidden = evals_extras.render_html(dict(self.load("last_run.json"), outputs_included=False))
        self.assertNotIn("alert(1)", hidden)

    def test_add_from_run_tries_a_reasoning_check_on_the_runs_reasoning(self):
        self.assertEqual(self.run_cli("--no-history")[0], 0)
        code, out, err = self.main("add", "--cases", self.cases, "--baseline", self.baseline,
                                   "--id", "thought-2", "--from-run", "thought",
                                   "--check", json.dumps(ON_REASONING))
        self.assertEqual(code, 0, out + err)
        self.assertIn("pass contains_all", out)  # the words are in the run's reasoning
        self.assertNotIn("fails on that output", out)

    def test_a_bad_on_value_is_a_file_line_error(self):
        self.write_cases([case("a", {"type": "contains_all", "values": ["x"]}),
                          case("b", dict(ON_REASONING, on="thinking"))])
        code, out, err = self.run_cli("--validate")
        self.assertEqual(code, 2)
        self.assertIn(f"{self.cases}:2: check 1: contains_all: parameter 'on' must be one of "
                      "'answer', 'reasoning'\n", err)  # nothing close to "thinking"
        self.write_cases([case("c", dict(ON_REASONING, on="Reasoning"))])
        code, out, err = self.run_cli("--validate")
        self.assertIn(f"{self.cases}:1: check 1: contains_all: parameter 'on' must be one of "
                      "'answer', 'reasoning'; did you mean 'reasoning'?", err)

    def test_a_record_with_wrong_typed_reasoning_or_sent_is_refused(self):
        self.run_cli("--no-history")
        record = self.load("last_run.json")
        for key, value in (("reasoning", 5), ("sent", "temperature 0")):
            broken = dict(record, cases=[dict(record["cases"][0], **{key: value})])
            self.assertIn(f"'thought': {key!r} must be", evals.record_problem(broken))


def _text(path):
    with open(path, encoding="utf-8") as handle:
        return handle.read()


if __name__ == "__main__":
    unittest.main()
