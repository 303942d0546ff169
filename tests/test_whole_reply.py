"""Conversations in, the whole reply out, on the harness's side: conversation cases, what a
client may return (a str, a reply object or a dict), the checks of tool calls and of how a reply
ended, the run record, recordings, re-scoring and reports; and end to end through
`python evals.py` against a loopback server of each provider (the fixtures of
tests/test_conversations_tools.py), then offline from what that run recorded.
"""

import contextlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import types
import unittest
import xml.etree.ElementTree as ET
from unittest import mock

import evals
import evals_extras
import my_client
from tests._loopback import LoopbackServer
from tests.test_conversations_tools import (ANTHROPIC_TOOL_USE, CONVERSATION, GEMINI_FUNCTION_CALL,
                                            OLLAMA_TOOL_CALLS, OPENAI_TOOL_CALLS, SYSTEM, TOOLS,
                                            ollama_ok)
from tests.test_my_client import GEMINI_KEY, KEY, anthropic_ok, gemini_ok, openai_ok
from tests.test_reports import HOSTILE

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
A = evals.Answer
LOOKUP = {"name": "lookup_order", "arguments": {"order_id": "A-1001"}}
REFUND = {"name": "issue_refund", "arguments": {"order_id": "A-1001", "amount_usd": 150}}

# A client for in-process runs: it answers each case with answers.json[case id] (a str or a
# reply dict; the harness passes the case, as the signature names it), logs every prompt it gets, and appends to a conversation it was given, as
# agents do with their history. `plain` is the same client without accepts_conversations.
CLIENT = '''
import json, os
HERE = os.path.dirname(os.path.abspath(__file__))


def ask(prompt, *, case):
    with open(os.path.join(HERE, "calls.jsonl"), "a", encoding="utf-8") as handle:
        handle.write(json.dumps(prompt) + "\\n")
    if isinstance(prompt, list):
        prompt.append({"role": "assistant", "content": "appended by the client"})
    with open(os.path.join(HERE, "answers.json"), encoding="utf-8") as handle:
        return json.load(handle)[case.id]


ask.accepts_conversations = True


def plain(prompt, *, case):
    return ask(prompt, case=case)
'''


def line(**case):
    return json.dumps(case)


def case(case_id="c", input="q", *checks):
    return evals.Case(case_id, input, tuple(checks))


class Folder(unittest.TestCase):
    """A temporary folder with the client above, a case file and answers."""

    def setUp(self):
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.dir = tmp.name
        self.write("client.py", CLIENT)

    def path(self, name):
        return os.path.join(self.dir, name)

    def write(self, name, text):
        with open(self.path(name), "w", encoding="utf-8") as handle:
            handle.write(text)
        return self.path(name)

    def cases(self, *rows):
        return self.write("cases.jsonl", "".join(json.dumps(row) + "\n" for row in rows))

    def answers(self, answers):
        self.write("answers.json", json.dumps(answers))

    def read_json(self, name):
        with open(self.path(name), encoding="utf-8") as handle:
            return json.load(handle)

    def read_jsonl(self, name):
        with open(self.path(name), encoding="utf-8") as handle:
            return [json.loads(text) for text in handle if text.strip()]

    def calls(self):
        return self.read_jsonl("calls.jsonl") if os.path.exists(self.path("calls.jsonl")) else []

    def main(self, *args, client="ask"):
        out, err = io.StringIO(), io.StringIO()
        if "--rescore" not in args:
            args = ("--client", self.path("client.py") + ":" + client) + args
        code = evals.main(["--cases", self.path("cases.jsonl"), "--baseline",
                           self.path("last_run.json"), "--no-history", *args], out, err)
        return code, out.getvalue(), err.getvalue()


# ---------------------------------------------------------------------------------------------
# Conversations as input
# ---------------------------------------------------------------------------------------------


class ConversationCaseFileTest(Folder):
    def problems(self, *inputs):
        self.write("cases.jsonl", "".join(
            line(id=f"c{n}", input=value, checks=[{"type": "max_words", "n": 5}]) + "\n"
            for n, value in enumerate(inputs, 1)))
        with self.assertRaises(evals.CaseFileError) as ctx:
            evals.load_cases(self.path("cases.jsonl"))
        return [p.replace(self.path("cases.jsonl"), "F") for p in ctx.exception.problems]

    def test_a_conversation_is_an_input(self):
        self.cases({"id": "talk", "input": CONVERSATION,
                    "checks": [{"type": "max_words", "n": 5}]})
        (loaded,), _ = evals.load_cases(self.path("cases.jsonl"))
        self.assertEqual(loaded.input, CONVERSATION)
        self.assertEqual(evals.case_problems({"id": "one", "input": [
            {"role": "user", "content": "Hi"}], "checks": [{"type": "max_words", "n": 5}]}), [])

    def test_every_problem_names_its_line_and_message(self):
        problems = self.problems(
            [],
            [{"role": "bot", "content": "Hi"}],
            [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}],
            [{"role": "user"}],
            [{"role": "system", "content": "Be brief."}, {"role": "user", "content": 3}],
            [{"role": "user", "content": ""}],
            [{"role": "user", "content": "Hi", "name": "ana"}],
            [{"role": "用户", "content": "Hi"}],
            [{"role": "user\u200b", "content": "Hi"}],
            ["Hi"],
            [{"content": "Hi"}],
            {"role": "user", "content": "Hi"},
        )
        self.assertEqual(problems, [
            "F:1: field 'input' is an empty conversation: give at least one user message",
            'F:2: input[0].role: "bot" not one of ["system", "user", "assistant"]',
            "F:3: input: the last message must be the user's, the one the model answers "
            "(input[1] is from the assistant)",
            "F:4: input[0]: missing required key 'content'",
            "F:5: input[1].content: expected string, got number",
            "F:6: input[0].content: 0 characters, expected at least 1",
            "F:7: input[0]: unexpected key 'name'",
            'F:8: input[0].role: "用户" not one of ["system", "user", "assistant"]',
            'F:9: input[0].role: "user\\u200b" not one of ["system", "user", "assistant"]',
            "F:10: input[0]: expected object, got string",
            "F:11: input[0]: missing required key 'role'",
            "F:12: field 'input' must be a string or a list of messages "
            '({"role": ..., "content": ...})',
        ])

    def test_the_readmes_conversation_case_is_valid(self):
        with open(os.path.join(ROOT, "docs", "checks.md"), encoding="utf-8") as handle:
            readme = handle.read()
        section = readme[readme.index("### Conversations"):readme.index("## Checks")]
        (example,) = re.findall(r"```json\n(.*?)```", section, re.S)
        data = json.loads(example)
        self.assertEqual(evals.case_problems(data), [])
        self.assertEqual(data["input"][-1]["role"], "user")

    def test_add_validates_a_conversation_too(self):
        target = self.path("new.jsonl")
        evals_extras.append_case(target, {"id": "talk", "input": CONVERSATION,
                                   "checks": [{"type": "max_words", "n": 5}]})
        with self.assertRaisesRegex(evals.EvalsError, r'input\[0\].role: "tool" not one of'):
            evals_extras.append_case(target, {"id": "bad", "input": [{"role": "tool", "content": "x"}],
                                       "checks": [{"type": "max_words", "n": 5}]})
        self.assertEqual(len(self.read_jsonl("new.jsonl")), 1)


class ConversationClientTest(Folder):
    CHECKS = [{"type": "contains_any", "values": ["order"]}]

    def setUp(self):
        super().setUp()
        self.cases({"id": "plain", "input": "Where is my order?", "checks": self.CHECKS},
                   {"id": "talk", "input": CONVERSATION, "checks": self.CHECKS})
        self.answers({"plain": "Your order ships today.", "talk": "Order A-1001 ships today."})

    def test_a_client_that_does_not_say_so_is_refused_before_any_call(self):
        code, out, err = self.main(client="plain")
        self.assertEqual(code, 2, out + err)
        self.assertIn(f"{self.path('cases.jsonl')}:2: case 'talk' has a conversation as its "
                      f"input (1 case in all), and the client {self.path('client.py')}:plain "
                      "does not take conversations", err)
        self.assertIn("accepts_conversations = True", err)
        self.assertEqual(self.calls(), [])
        self.assertFalse(os.path.exists(self.path("last_run.json")))

    def test_string_cases_need_no_attribute(self):
        code, out, err = self.main("--id", "plain", client="plain")
        self.assertEqual(code, 0, out + err)
        self.assertEqual(self.calls(), ["Where is my order?"])

    def test_each_call_gets_its_own_copy_of_the_conversation(self):
        code, out, err = self.main("--repeat", "2")
        self.assertEqual(code, 0, out + err)
        self.assertEqual(self.calls(), ["Where is my order?", "Where is my order?",
                                        CONVERSATION, CONVERSATION])
        talk = {e["id"]: e for e in self.read_json("last_run.json")["cases"]}["talk"]
        self.assertEqual((talk["status"], talk["input"]), ("pass", CONVERSATION))

    def test_the_python_api_refuses_too_and_a_replay_takes_conversations(self):
        cases, _ = evals.load_cases(self.path("cases.jsonl"))
        with self.assertRaisesRegex(evals.EvalsError, ":2: case 'talk' has a conversation"):
            evals.run_cases(cases, lambda prompt: "order")
        replay = evals.replay_client({"plain": "order", "talk": "order"})
        self.assertTrue(replay.accepts_conversations)
        self.assertEqual([r.status for r in evals.run_cases(cases, replay)], ["pass", "pass"])

    def test_my_client_takes_conversations(self):
        evals.refuse_conversations([case("talk", CONVERSATION)], my_client.ask)
        evals.refuse_conversations([case("talk", CONVERSATION)],
                                   my_client.make_client("openai", api_key="sk-x", env={}))


# ---------------------------------------------------------------------------------------------
# What a client returns: one function reads it whole
# ---------------------------------------------------------------------------------------------


class Attributes(str):
    """A client's reply object: the text, with the reply's other parts as attributes."""

    def __new__(cls, text, **attributes):
        reply = super().__new__(cls, text)
        reply.__dict__.update(attributes)
        return reply


class WholeReplyTest(unittest.TestCase):
    CASE = case("c", "q", {"type": "tool_called", "name": "lookup_order"},
                {"type": "finish_reason", "values": ["tool_calls"]})

    def run_with(self, reply):
        return evals.run_case(self.CASE, lambda prompt: reply,
                              evals.RunOptions(price=evals_extras.call_cost))

    def test_a_dict_a_reply_object_and_my_client_reply_give_one_result(self):
        usage = {"input_tokens": 80, "output_tokens": 30}
        replies = [
            {"text": "", "tool_calls": [dict(LOOKUP, id="call_1")], "finish_reason": "tool_calls",
             "usage": usage, "model": "gpt-4o-mini"},
            Attributes("", tool_calls=[LOOKUP], finish_reason="tool_calls", usage=usage,
                       model="gpt-4o-mini"),
            my_client.Reply("", usage=usage, model="gpt-4o-mini", finish_reason="tool_calls",
                            tool_calls=[LOOKUP], finish_reason_raw="tool_calls"),
            types.SimpleNamespace(text="", tool_calls=[LOOKUP], finish_reason="tool_calls",
                                  usage=usage, model="gpt-4o-mini"),  # an object with text
        ]
        for reply in replies:
            with self.subTest(reply=type(reply).__name__):
                result = self.run_with(reply)
                self.assertEqual(result.status, "pass", result)
                self.assertEqual((result.output, result.tool_calls, result.finish_reason),
                                 ("", (LOOKUP,), "tool_calls"))  # the call's id is dropped
                self.assertEqual((result.usage, result.model), (usage, "gpt-4o-mini"))
                self.assertAlmostEqual(result.cost_usd, (80 * 0.15 + 30 * 0.60) / 1e6)

    def test_a_plain_string_has_no_tool_calls_and_no_finish_reason(self):
        result = self.run_with("I'll look it up.")
        self.assertEqual((result.tool_calls, result.finish_reason), ((), None))
        self.assertEqual(result.status, "fail")

    def test_what_is_not_a_reply_is_an_error_that_names_the_problem(self):
        bad = {
            "int": (7, "the client returned int, expected str (the answer's text) or a dict"),
            "no text": ({"tool_calls": [LOOKUP]}, "a dict with no string 'text'"),
            "text of a kind": ({"text": 3}, "a dict whose 'text' is int"),
            "calls of a kind": ({"text": "", "tool_calls": "lookup_order"},
                                "malformed reply: 'tool_calls' must be a list, got str"),
            "unknown key": ({"text": "", "toolcalls": []}, "a dict with unknown key 'toolcalls'"),
            "calls not a list": (Attributes("", tool_calls=LOOKUP),
                                 "malformed reply: 'tool_calls' must be a list, got dict"),
            "a call without a name": ({"text": "", "tool_calls": [{"arguments": {}}]},
                                      "tool call 1 must be an object with a non-empty string "
                                      "'name'"),
            "arguments of a kind": ({"text": "", "tool_calls": [{"name": "a", "arguments": 3}]},
                                    "tool call 1 (a): 'arguments' must be a JSON object"),
            "a call's unknown key": ({"text": "", "tool_calls": [{"name": "a", "args": {}}]},
                                     "tool call 1 (a): unknown key 'args'"),
            "a provider's own word": ({"text": "Hi", "finish_reason": "end_turn"},
                                      "the client returned a malformed reply: 'finish_reason' "
                                      "must be one of stop, length, tool_calls, content_filter, "
                                      "refusal or null, got \"end_turn\" (normalise the "
                                      "provider's word, as my_client does)"),
            "an empty dict of tool calls": ({"text": "Hi", "tool_calls": {}},
                                            "'tool_calls' must be a list, got dict"),
            "an empty string of tool calls": ({"text": "Hi", "tool_calls": ""},
                                              "'tool_calls' must be a list, got str"),
            "the attribute's own word": (Attributes("Hi", finish_reason="MAX_TOKENS"),
                                         'got "MAX_TOKENS"'),
            "a malformed attribute": (Attributes("", tool_calls=["lookup_order"]),
                                      "tool call 1 must be an object"),
            "usage in a dict": ({"text": "Hi", "usage": {"input_tokens": -1}},
                                "'usage' without whole numbers"),
            "model of a kind": ({"text": "Hi", "model": 4}, "'model' of type int, expected str"),
        }
        for name, (reply, words) in bad.items():
            with self.subTest(name):
                result = self.run_with(reply)
                self.assertEqual((result.status, result.checks, result.output),
                                 ("error", (), None))
                self.assertIn(words, result.error)

    def test_arguments_that_json_cannot_hold_are_an_error_not_a_crash(self):
        # A client handing over its SDK's objects (a set, a Decimal, bytes) or a NaN: the
        # record, the recordings and every report write arguments as JSON.
        import decimal

        for value in ({1, 2}, decimal.Decimal("1.5"), b"A-1", float("nan")):
            with self.subTest(value=value):
                result = self.run_with({"text": "", "tool_calls": [
                    {"name": "lookup_order", "arguments": {"order_id": value}}]})
                self.assertEqual((result.status, result.checks), ("error", ()))
                self.assertIn("the client returned a malformed reply: tool call 1 "
                              "(lookup_order): 'arguments' is not JSON", result.error)

    def test_a_reply_objects_odd_usage_is_ignored_as_before(self):
        result = self.run_with(Attributes("Hi", usage={"input_tokens": "many"}, model="m"))
        self.assertEqual((result.status, result.usage, result.model), ("fail", None, "m"))

    def test_arguments_that_are_not_an_object_are_the_models_answer(self):
        result = self.run_with({"text": "", "finish_reason": "tool_calls", "tool_calls": [
            {"name": "lookup_order", "arguments": '{"order_id": "A-10'}]})
        self.assertEqual(result.status, "pass")
        self.assertEqual(result.tool_calls[0]["arguments"], '{"order_id": "A-10')


class OnePathTest(Folder):
    """A reply gets one answer from a run and from run_check: the same score, or the same
    refusal (the case's error; run_check's ValueError)."""

    CHECKS = [{"type": "contains_any", "values": ["order"]},
              {"type": "tool_called", "name": "lookup_order"},
              {"type": "finish_reason", "values": ["stop"]},
              {"type": "max_words", "n": 2, "negate": True},
              {"type": "contains_any", "values": ["approval"], "on": "reasoning"}]

    def run_replies(self, replies):
        """Each reply's case from the record of a run whose client returns them."""
        self.cases(*({"id": key, "input": "q", "checks": self.CHECKS} for key in replies))
        self.answers(replies)
        self.main()
        return {entry["id"]: entry for entry in self.read_json("last_run.json")["cases"]}

    def test_a_malformed_reply_is_refused_with_the_same_reason(self):
        # run_check scored finish_reason "STOP" and raised TypeError for an object of calls.
        malformed = {
            "a provider's word": ({"text": "Your order", "finish_reason": "STOP"},
                                  "'finish_reason' must be one of stop, length, tool_calls, "
                                  "content_filter, refusal or null, got \"STOP\""),
            "calls as an object": ({"text": "", "tool_calls": LOOKUP},
                                   "'tool_calls' must be a list, got dict"),
            "calls not objects": ({"text": "", "tool_calls": ["lookup_order", 3]},
                                  "tool call 1 must be an object with a non-empty string 'name'"),
            "an unknown key": ({"text": "Your order", "toolcalls": [LOOKUP]},
                               "a dict with unknown key 'toolcalls'"),
        }
        cases = self.run_replies({key: reply for key, (reply, _) in malformed.items()})
        for key, (reply, words) in malformed.items():
            with self.subTest(key):
                self.assertEqual((cases[key]["status"], cases[key]["checks"]), ("error", []))
                self.assertIn(words, cases[key]["error"])
                for check in self.CHECKS:
                    with self.assertRaises(ValueError) as caught:
                        evals.run_check(check, reply)
                    self.assertEqual(str(caught.exception), cases[key]["error"])
                if "toolcalls" in reply:
                    continue
                answer = A(reply["text"], reply.get("tool_calls", ()), reply.get("finish_reason"))
                with self.assertRaises(ValueError) as caught:  # an Answer is read the same way
                    evals.run_check(self.CHECKS[0], answer)
                self.assertEqual(str(caught.exception), cases[key]["error"])

    def test_a_well_formed_reply_is_scored_the_same(self):
        replies = {
            "text": "Your order ships today.",
            "whole": {"text": "Your order", "tool_calls": [dict(LOOKUP, id="call_1")],
                      "finish_reason": "length", "reasoning": "needs manager approval",
                      "usage": {"input_tokens": 3, "output_tokens": 2}, "model": "m"},
            "calls only": {"text": "", "tool_calls": [{"name": "lookup_order"}],
                           "finish_reason": "tool_calls"},
        }
        cases = self.run_replies(replies)
        for key, reply in replies.items():
            with self.subTest(key):
                scored = [(c["passed"], c["reason"]) for c in cases[key]["checks"]]
                self.assertEqual(len(scored), len(self.CHECKS))
                results = [evals.run_check(check, reply) for check in self.CHECKS]
                self.assertEqual([(r.passed, r.reason) for r in results], scored)


# ---------------------------------------------------------------------------------------------
# The checks of the whole reply
# ---------------------------------------------------------------------------------------------


def verdict(check, reply):
    problems = evals.validate_check(check)
    if problems:
        raise AssertionError(f"{check!r} is invalid: {problems}")
    return evals.run_check(check, reply)


class ToolCalledTest(unittest.TestCase):
    REPLY = A("", ({"name": "lookup_order",
                    "arguments": {"order_id": "A-1001", "options": {"express": True, "n": 2},
                                  "items": [1, 2]}},
                   {"name": "lookup_order", "arguments": {"order_id": "B-2002"}},
                   {"name": "get_policy", "arguments": "refunds"}), "tool_calls")

    def assertVerdict(self, check, passed, reason=None, reply=REPLY):
        result = verdict(dict(check, type="tool_called"), reply)
        self.assertIs(result.passed, passed, result.reason)
        if reason is not None:
            self.assertEqual(result.reason, reason)
        return result

    def test_called_at_least_once_by_default(self):
        self.assertVerdict({"name": "lookup_order"}, True, "2 calls of lookup_order, at least 1")
        self.assertVerdict({"name": "escalate"}, False,
                           "0 calls of escalate, expected at least 1: the reply called "
                           "lookup_order, get_policy")
        self.assertVerdict({"name": "escalate"}, False, "0 calls of escalate, expected at least "
                           "1: the reply called no tool", A("Hello."))

    def test_arguments_are_a_subset_compared_as_json(self):
        self.assertVerdict({"name": "lookup_order", "arguments": {}}, True,
                           "2 calls of lookup_order with matching arguments, at least 1")
        for arguments in ({"order_id": "A-1001"}, {"options": {"n": 2.0}},
                          {"items": [1, 2], "options": {}}):
            with self.subTest(arguments=arguments):
                self.assertVerdict({"name": "lookup_order", "arguments": arguments, "max": 1},
                                   True)
        for arguments in ({"order_id": "C-3003"}, {"options": {"express": 1}},
                          {"items": [1]}, {"order_id": "A-1001", "refund": True}):
            with self.subTest(arguments=arguments):
                self.assertVerdict({"name": "lookup_order", "arguments": arguments}, False)

    def test_a_failure_shows_the_calls_that_did_not_match(self):
        result = self.assertVerdict(
            {"name": "lookup_order", "arguments": {"order_id": "C-3003"}}, False,
            '0 calls of lookup_order with matching arguments, expected at least 1: '
            'lookup_order({"order_id": "A-1001", "options": {"express": true, "n": 2}, '
            '"items": [1, 2]}) does not hold {"order_id": "C-3003"}; '
            'lookup_order({"order_id": "B-2002"}) does not hold {"order_id": "C-3003"}')
        self.assertEqual(result.quoted, (
            'lookup_order({"order_id": "A-1001", "options": {"express": true, "n": 2}, '
            '"items": [1, 2]})', 'lookup_order({"order_id": "B-2002"})'))
        self.assertEqual(evals_extras._check_without_output(result.as_dict("tool_called"))["reason"],
                         "0 calls of lookup_order with matching arguments, expected at least 1: "
                         "'[output omitted]' does not hold {\"order_id\": \"C-3003\"}; "
                         "'[output omitted]' does not hold {\"order_id\": \"C-3003\"}")

    def test_schema(self):
        schema = {"type": "object", "properties": {"order_id": {"type": "string",
                                                                "pattern": "^[A-Z]-\\d{4}$"}},
                  "required": ["order_id"]}
        self.assertVerdict({"name": "lookup_order", "schema": schema, "min": 2}, True)
        closed = dict(schema, additionalProperties=False)
        self.assertVerdict({"name": "lookup_order", "schema": closed}, True,
                           "1 call of lookup_order with matching arguments, at least 1")
        result = self.assertVerdict({"name": "get_policy", "schema": schema}, False)
        self.assertEqual(result.reason, '0 calls of get_policy with matching arguments, expected '
                                        'at least 1: get_policy("refunds"): its arguments are '
                                        'not a JSON object')

    def test_a_schema_failure_names_the_call_it_read(self):
        # The schema's own quotes (an enum's value, a pattern's text) follow the call's, and
        # the reason starts with the call, as for every other miss.
        schema = {"properties": {"order_id": {"enum": ["A-1001"]}}}
        result = self.assertVerdict({"name": "lookup_order", "schema": schema, "min": 2},
                                    False)
        self.assertEqual(result.reason, '1 call of lookup_order with matching arguments, '
                                        'expected at least 2: lookup_order({"order_id": '
                                        '"B-2002"}): $.order_id: "B-2002" not one of '
                                        '["A-1001"]')

    def test_count_bounds(self):
        self.assertVerdict({"name": "lookup_order", "max": 1}, False,
                           "2 calls of lookup_order, expected at most 1")
        self.assertVerdict({"name": "lookup_order", "min": 2, "max": 2}, True,
                           "2 calls of lookup_order, exactly 2")
        self.assertVerdict({"name": "escalate", "min": 0, "max": 0}, True)

    def test_negated_means_not_called(self):
        self.assertVerdict({"name": "issue_refund", "negate": True}, True,
                           "negated: does not hold: 0 calls of issue_refund, expected at least "
                           "1: the reply called lookup_order, get_policy")
        self.assertVerdict({"name": "lookup_order", "negate": True}, False,
                           "negated: holds, but must not: 2 calls of lookup_order, at least 1")
        self.assertVerdict({"name": "lookup_order", "arguments": {"order_id": "C-3003"},
                            "negate": True}, True)

    def test_validation(self):
        problems = {
            '{"max": 0}': "impossible bounds, min 1 > max 0; for a tool that must not be "
                          "called, use negate",
            '{"arguments": ["A-1001"]}': "parameter 'arguments' must be a JSON object",
            '{"schema": {"type": "objet"}}': "parameter 'schema' schema.type must be one of",
            '{"on": "reasoning"}': "unknown parameter 'on'",
            '{"name": ""}': "parameter 'name' must be a string with a visible character",
        }
        for extra, words in problems.items():
            with self.subTest(extra):
                check = dict({"type": "tool_called", "name": "lookup_order"}, **json.loads(extra))
                self.assertIn(words, " ".join(evals.validate_check(check)))


class ToolSequenceTest(unittest.TestCase):
    def reply(self, *names):
        return A("", tuple({"name": name, "arguments": {}} for name in names))

    def test_in_order_with_others_between(self):
        check = {"type": "tool_sequence", "names": ["lookup_order", "issue_refund"]}
        result = verdict(check, self.reply("get_policy", "lookup_order", "notify",
                                           "issue_refund", "notify"))
        self.assertEqual((result.passed, result.reason), (True, (
            "called lookup_order then issue_refund (the calls: get_policy, lookup_order, "
            "notify, issue_refund, notify)")))
        self.assertEqual(verdict(check, self.reply("issue_refund", "lookup_order")).reason,
                         "no call of issue_refund after lookup_order, expected lookup_order then "
                         "issue_refund; the calls: issue_refund, lookup_order")
        self.assertEqual(verdict(check, A("Hi")).reason,
                         "no call of lookup_order, expected lookup_order then issue_refund; the "
                         "calls: none")
        self.assertFalse(verdict(check, self.reply("lookup_order")).passed)

    def test_a_name_twice_needs_two_calls(self):
        check = {"type": "tool_sequence", "names": ["lookup_order", "lookup_order"]}
        self.assertFalse(verdict(check, self.reply("lookup_order")).passed)
        self.assertTrue(verdict(check, self.reply("lookup_order", "x", "lookup_order")).passed)

    def test_exact(self):
        check = {"type": "tool_sequence", "names": ["lookup_order"], "exact": True}
        self.assertEqual(verdict(check, self.reply("lookup_order")).reason,
                         "called exactly lookup_order")
        self.assertEqual(verdict(check, self.reply("lookup_order", "notify")).reason,
                         "expected exactly lookup_order; the calls: lookup_order, notify")

    def test_negated(self):
        check = {"type": "tool_sequence", "names": ["issue_refund", "lookup_order"],
                 "negate": True}
        self.assertTrue(verdict(check, self.reply("lookup_order", "issue_refund")).passed)
        self.assertFalse(verdict(check, self.reply("issue_refund", "lookup_order")).passed)


class FinishReasonTest(unittest.TestCase):
    def test_values(self):
        check = {"type": "finish_reason", "values": ["stop", "tool_calls"]}
        self.assertEqual(verdict(check, A("Hi", (), "stop")), evals.CheckResult(
            True, "ended with stop"))
        self.assertEqual(verdict(check, A("The refund takes", (), "length")).reason,
                         "ended with length, expected stop or tool_calls")
        self.assertTrue(verdict({"type": "finish_reason", "values": ["refusal"]},
                                A("I can't help with that.", (), "refusal")).passed)

    def test_no_finish_reason_is_never_a_pass(self):
        # What a plain str client returns: its ending is not known, so no value of the check
        # holds (it used to count as "stop": a client that reports nothing passed).
        for values in (["stop"], ["length"], ["stop", "length", "refusal"]):
            with self.subTest(values=values):
                result = verdict({"type": "finish_reason", "values": values}, A("Hi", (), None))
                self.assertEqual((result.passed, result.reason),
                                 (False, "the client reported no finish reason"))
        self.assertTrue(verdict({"type": "finish_reason", "values": ["stop"]},
                                A("Hi", (), "stop")).passed)
        # Negated, it still fails: "did not end with length" is not known either.
        result = verdict({"type": "finish_reason", "values": ["length"], "negate": True},
                         A("Hi", (), None))
        self.assertEqual((result.passed, result.reason),
                         (False, "the client reported no finish reason"))

    def test_values_are_the_normalised_words(self):
        self.assertEqual(evals.validate_check({"type": "finish_reason", "values": ["end_turn"]}),
                         ["finish_reason: parameter 'values' must be a non-empty list of stop, "
                          "length, tool_calls, content_filter, refusal"])
        self.assertTrue(evals.validate_check({"type": "finish_reason", "values": []}))


class TextChecksOnTheWholeReplyTest(unittest.TestCase):
    def test_a_reply_that_only_called_tools_fails_text_checks_saying_so(self):
        reply = A("", (LOOKUP, REFUND, LOOKUP), "tool_calls")
        for check in ({"type": "contains_any", "values": ["order"]},
                      {"type": "not_contains", "values": ["refund"]},
                      {"type": "max_words", "n": 10, "negate": True},
                      {"type": "regex", "pattern": "x", "on": "answer"}):
            with self.subTest(check=check):
                self.assertEqual(evals.run_check(check, reply), evals.CheckResult(
                    False, "the reply has no text; it called lookup_order, issue_refund"))

    def test_a_judge_is_not_asked_about_a_reply_without_text(self):
        asked = []
        judged = case("c", CONVERSATION, {"type": "judge", "rubric": "Looks the order up."})
        status, (result,) = evals.evaluate(judged, A("", (LOOKUP,), "tool_calls"), asked.append)
        self.assertEqual((status, result["reason"], asked),
                         ("fail", "the reply has no text; it called lookup_order", []))

    def test_a_judge_reads_the_conversation(self):
        prompts = []

        def judge(prompt):
            prompts.append(prompt)
            return json.dumps({"missing_requirements": [], "forbidden_claims_found": [],
                               "unsupported_claims": [], "reason": "", "confidence": "high"})

        judged = case("c", CONVERSATION, {"type": "judge", "rubric": "Names the order."})
        status, _ = evals.evaluate(judged, A("Order A-1001 ships today."), judge)
        (prompt,) = prompts
        material = json.loads(prompt[prompt.index("{\n"):])
        self.assertEqual((status, material["conversation"], material["answer"]),
                         ("pass", CONVERSATION, "Order A-1001 ships today."))
        self.assertNotIn("user_message", material)

    def test_text_beside_tool_calls_is_scored(self):
        reply = A("I'll look that order up.", (LOOKUP,), "tool_calls")
        self.assertTrue(evals.run_check({"type": "contains_any", "values": ["order"]},
                                        reply).passed)

    def test_a_failure_on_an_answer_that_did_not_end_by_itself_names_the_ending(self):
        endings = {"length": "the answer was cut at the token limit",
                   "content_filter": "the answer was stopped by a content filter",
                   "refusal": "the model refused"}
        for ended, words in endings.items():
            with self.subTest(ended=ended):
                reply = A("Refunds over $100 need", (), ended)
                self.assertEqual(evals.run_check({"type": "contains_any", "values": ["days"]},
                                                 reply).reason,
                                 f"none of 'days' found ({words}: finish_reason {ended})")
                self.assertEqual(evals.run_check({"type": "max_words", "n": 9, "negate": True},
                                                 reply).reason,
                                 "negated: holds, but must not: 4 words, at most 9 "
                                 f"({words}: finish_reason {ended})")
                self.assertEqual(evals.run_check({"type": "char_count", "max": 5},
                                                 A("", (), ended)).reason,
                                 f"the output is empty ({words}: finish_reason {ended})")
        cut = A("Refunds over $100 need", (), "length")
        self.assertEqual(evals.run_check({"type": "contains_any", "values": ["refund"]}, cut),
                         evals.CheckResult(True, "found 'refund'"))
        self.assertEqual(evals.run_check({"type": "finish_reason", "values": ["stop"]},
                                         cut).reason, "ended with length, expected stop")
        self.assertEqual(evals.run_check({"type": "contains_any", "values": ["days"]},
                                         A("Refunds", (), "stop")).reason,
                         "none of 'days' found")

    def test_an_empty_reply_is_scored_on_its_calls_and_ending(self):
        empty = A("", (), "stop")
        self.assertTrue(verdict({"type": "tool_called", "name": "issue_refund", "negate": True},
                                empty).passed)
        self.assertTrue(verdict({"type": "finish_reason", "values": ["stop"]}, empty).passed)
        self.assertEqual(evals.run_check({"type": "not_contains", "values": ["x"]}, empty).reason,
                         "the output is empty")

    def test_list_checks_says_which_checks_see_the_whole_reply(self):
        table = evals._check_table()
        whole = [name for name, spec in evals.CHECKS.items() if spec.whole]
        self.assertEqual(whole[:3], ["tool_called", "tool_sequence", "finish_reason"])
        self.assertIn(f"({', '.join(whole)} see the whole reply)", " ".join(table.split()))
        self.assertIn("  tool_called name [arguments] [schema] [min=1] [max]", table)


# ---------------------------------------------------------------------------------------------
# Records, recordings and re-scoring
# ---------------------------------------------------------------------------------------------


TALK_CHECKS = [{"type": "tool_called", "name": "lookup_order",
                "arguments": {"order_id": "A-1001"}},
               {"type": "tool_called", "name": "issue_refund", "negate": True}]
CUT_CHECKS = [{"type": "contains_any", "values": ["business days"]}]


class RecordAndRecordingsTest(Folder):
    ANSWERS = {
        "talk": {"text": "", "tool_calls": [dict(LOOKUP, id="call_9")],
                 "finish_reason": "tool_calls"},
        "cut": {"text": "Refunds over $100 need", "finish_reason": "length"},
        "plain": {"text": "Refunds take 3-5 business days.", "finish_reason": "stop"},
        "old": "Refunds take 3-5 business days.",
    }

    def setUp(self):
        super().setUp()
        self.cases({"id": "talk", "input": CONVERSATION, "checks": TALK_CHECKS},
                   {"id": "cut", "input": "Explain refunds.", "checks": CUT_CHECKS},
                   {"id": "plain", "input": "How long do refunds take?", "checks": CUT_CHECKS},
                   {"id": "old", "input": "And refunds?", "checks": CUT_CHECKS})
        self.answers(self.ANSWERS)

    def entries(self, name="last_run.json"):
        return {e["id"]: e for e in self.read_json(name)["cases"]}

    def test_the_record_carries_tool_calls_and_finish_reason_when_there_are_some(self):
        code, out, err = self.main("--record", self.path("rec.jsonl"))
        self.assertEqual(code, 0, out + err)
        entries = self.entries()
        self.assertEqual({k: e["status"] for k, e in entries.items()},
                         {"talk": "pass", "cut": "fail", "plain": "pass", "old": "pass"})
        self.assertEqual((entries["talk"]["tool_calls"], entries["talk"]["finish_reason"],
                          entries["talk"]["output"]), ([LOOKUP], "tool_calls", ""))
        self.assertEqual(entries["cut"]["finish_reason"], "length")
        self.assertEqual(entries["cut"]["checks"][0]["reason"],
                         "none of 'business days' found (the answer was cut at the token "
                         "limit: finish_reason length)")
        self.assertNotIn("tool_calls", entries["plain"])
        self.assertEqual(entries["plain"]["finish_reason"], "stop")
        self.assertNotIn("tool_calls", entries["old"])
        self.assertNotIn("finish_reason", entries["old"])
        self.assertIsNone(evals.record_problem(self.read_json("last_run.json")))
        self.assertIn("NEW FAIL: cut\n    contains_any: none of 'business days' found (the "
                      "answer was cut at the token limit: finish_reason length)\n"
                      "    [finish_reason: length]\n", out)

    def test_recordings_keep_a_string_when_the_text_is_all_the_client_said(self):
        self.main("--record", self.path("rec.jsonl"))
        outputs = {row["id"]: row["output"] for row in self.read_jsonl("rec.jsonl")}
        self.assertEqual(outputs, {
            "talk": {"text": "", "finish_reason": "tool_calls", "tool_calls": [LOOKUP]},
            "cut": {"text": "Refunds over $100 need", "finish_reason": "length"},
            "plain": {"text": "Refunds take 3-5 business days.", "finish_reason": "stop"},
            "old": "Refunds take 3-5 business days.",
        })
        # The rule my_client.reply_dict keeps for captures and its own recordings.
        for case_id, answer in self.ANSWERS.items():
            reply = answer if isinstance(answer, str) else my_client.Reply(
                answer["text"], finish_reason=answer.get("finish_reason"),
                tool_calls=[LOOKUP] if answer.get("tool_calls") else [])
            self.assertEqual(outputs[case_id], my_client.reply_dict(reply), case_id)
            self.assertEqual(outputs[case_id], evals.stored_output(
                str(reply), getattr(reply, "tool_calls", ()),
                getattr(reply, "finish_reason", None)), case_id)

    def test_rescoring_the_record_and_the_recordings_gives_the_same_verdicts(self):
        self.main("--record", self.path("rec.jsonl"))
        live = self.entries()
        for source in ("last_run.json", "rec.jsonl"):
            with self.subTest(source=source):
                code, out, err = self.main("--rescore", self.path(source), "--out",
                                           self.path("again.json"))
                self.assertEqual(code, 0, out + err)
                self.assertIn("0 regressed, 0 fixed", out)
                again = self.entries("again.json")
                for case_id, entry in live.items():
                    self.assertEqual(again[case_id]["checks"], entry["checks"], case_id)
                    self.assertEqual(again[case_id].get("tool_calls"), entry.get("tool_calls"))
                self.assertEqual(again["talk"]["finish_reason"], "tool_calls")
                self.assertEqual(again["cut"]["finish_reason"], "length")
        # The offline default (my_client's ask, no provider) replays the same recordings whole.
        with mock.patch.dict(os.environ, {"EVALS_RECORDINGS": self.path("rec.jsonl"),
                                          "EVALS_PROVIDER": ""}):
            out, err = io.StringIO(), io.StringIO()
            code = evals.main(["--cases", self.path("cases.jsonl"), "--client", "my_client:ask",
                               "--baseline", self.path("last_run.json"), "--no-history",
                               "--out", self.path("offline.json")], out, err)
        self.assertEqual(code, 0, out.getvalue() + err.getvalue())
        offline = self.entries("offline.json")
        self.assertEqual([offline[i]["status"] for i in ("talk", "cut", "plain", "old")],
                         ["pass", "fail", "pass", "pass"])
        self.assertEqual(offline["talk"]["tool_calls"], [LOOKUP])

    def test_malformed_whole_outputs_are_refused_naming_the_line(self):
        good = {"id": "plain", "output": "x"}
        bad = {
            "text missing": ({"tool_calls": []}, "'output' must be a string or a whole reply"),
            "an unknown key": ({"text": "", "usage": {}},
                               "'output' has an unknown key 'usage' (a whole reply has text, "
                               "tool_calls and finish_reason)"),
            "a bad call": ({"text": "", "tool_calls": [{"name": ""}]},
                           "tool call 1 must be an object with a non-empty string 'name'"),
            "a raw word": ({"text": "", "finish_reason": "end_turn"},
                           "'finish_reason' must be one of stop, length, tool_calls, "
                           "content_filter, refusal or null, got \"end_turn\""),
            "a list": (["x"], "expected {\"id\": str, \"output\": str or a whole reply}"),
        }
        for name, (output, words) in bad.items():
            with self.subTest(name):
                path = self.write("bad.jsonl", json.dumps(good) + "\n" + json.dumps(
                    {"id": "talk", "output": output}) + "\n")
                code, out, err = self.main("--rescore", path, "--no-save")
                self.assertEqual(code, 2, out + err)
                self.assertIn(f"{path}:2: {words}", err)

    def test_a_run_record_with_a_malformed_tool_call_is_refused(self):
        self.main()
        record = self.read_json("last_run.json")
        record["cases"][0]["tool_calls"] = [{"name": "lookup_order", "arguments": 3}]
        self.assertEqual(evals.record_problem(record),
                         "case 'talk': tool call 1 (lookup_order): 'arguments' "
                         "must be a JSON object (or the string the model wrote), got int")
        evals_extras.write_json_atomic(self.path("broken.json"), record)
        with self.assertRaisesRegex(evals.EvalsError, "broken.json: case 'talk': tool call 1"):
            evals.load_outputs(self.path("broken.json"))
        record["cases"][0].update(tool_calls=[LOOKUP], finish_reason="end_turn")
        self.assertEqual(evals.record_problem(record),
                         "case 'talk': 'finish_reason' must be one of stop, length, tool_calls, "
                         "content_filter, refusal or null, got \"end_turn\"")
        record["cases"][0].update(finish_reason=None, baseline_tool_calls=[{"name": ""}])
        self.assertEqual(evals.record_problem(record),
                         "case 'talk': 'baseline_tool_calls': tool call 1 must be an object "
                         "with a non-empty string 'name'")

    def test_omit_outputs_keeps_the_tool_names_only(self):
        self.answers(dict(self.ANSWERS, talk={"text": "", "finish_reason": "tool_calls",
                                              "tool_calls": [{"name": "lookup_order",
                                                              "arguments": {"order_id": "Z-9"}}]}))
        code, out, err = self.main("--omit-outputs", "--markdown", self.path("r.md"), "--junit",
                                   self.path("r.xml"))
        self.assertEqual(code, 0, out + err)
        talk = self.entries()["talk"]
        self.assertEqual(talk["tool_calls"], [{"name": "lookup_order"}])
        self.assertEqual(talk["checks"][0]["reason"],
                         "0 calls of lookup_order with matching arguments, expected at least 1: "
                         "'[output omitted]' does not hold {\"order_id\": \"A-1001\"}")
        self.assertIn("-> lookup_order([arguments omitted])", out)
        for name in ("last_run.json", "r.md", "r.xml"):
            with open(self.path(name), encoding="utf-8") as handle:
                self.assertNotIn("Z-9", handle.read(), name)
        self.assertIsNone(evals.record_problem(self.read_json("last_run.json")))

    def test_half_an_emoji_in_a_tool_call_is_recorded_in_the_history_too(self):
        # A model's arguments may hold a lone surrogate (half an emoji, as an escape); the
        # tool_called reason quotes them, and the history (SQLite, UTF-8) must take it.
        self.answers(dict(self.ANSWERS, talk={"text": "", "tool_calls": [
            {"name": "lookup_order", "arguments": {"order_id": "A-1001 \ud83d"}}]}))
        history = self.path("history.sqlite")
        out, err = io.StringIO(), io.StringIO()
        code = evals.main(["--cases", self.path("cases.jsonl"), "--baseline",
                           self.path("last_run.json"), "--history", history, "--id", "talk",
                           "--client", self.path("client.py") + ":ask"], out, err)
        self.assertEqual(code, 0, err.getvalue())
        [row] = evals_extras.history_rows(history, "talk")
        self.assertEqual(row["status"], "fail")
        self.assertIn('lookup_order({"order_id": "A-1001 \\ud83d"}) does not hold', row["reasons"])

    def test_a_kept_baseline_keeps_the_tool_calls_that_earned_it(self):
        self.main()
        bad = dict(self.ANSWERS, talk={"text": "", "finish_reason": "tool_calls",
                                       "tool_calls": [REFUND]})
        self.answers(bad)
        for run in (1, 2):  # a regression not accepted stays one, and keeps what passed
            code, out, err = self.main("--html", self.path("r.html"))
            self.assertEqual(code, 1, out + err)
            talk = self.entries()["talk"]
            self.assertEqual((talk["change"], talk["tool_calls"]), ("regressed", [REFUND]))
            self.assertEqual((talk["baseline_output"], talk["baseline_tool_calls"]),
                             ("", [LOOKUP]), run)
        with open(self.path("r.html"), encoding="utf-8") as handle:
            page = handle.read()
        self.assertRegex(page, r"<del>[^<]*lookup_order\(\{&quot;order_id&quot;: "
                               r"&quot;A-1001&quot;\}\)[^<]*</del>")
        self.assertRegex(page, r"<ins>[^<]*issue_refund\(\{&quot;order_id&quot;: "
                               r"&quot;A-1001&quot;, &quot;amount_usd&quot;: 150\}\)[^<]*</ins>")
        self.assertIn("REGRESSED: talk\n    tool_called: 0 calls of lookup_order with matching "
                      "arguments, expected at least 1: the reply called issue_refund\n"
                      "    tool_called: negated: holds, but must not: 1 call of issue_refund, at "
                      "least 1\n    -> issue_refund(", out)

    def test_add_from_run_scores_and_records_the_whole_reply(self):
        self.main()
        out = io.StringIO()
        code = evals.main(["add", "--id", "talk-2", "--from-run", "talk", "--cases",
                           self.path("cases.jsonl"), "--baseline", self.path("last_run.json"),
                           "--recordings", self.path("rec.jsonl"), "--check",
                           json.dumps({"type": "tool_called", "name": "issue_refund"})],
                          out, io.StringIO())
        self.assertEqual(code, 0, out.getvalue())
        self.assertIn("FAIL tool_called: 0 calls of issue_refund, expected at least 1: the "
                      "reply called lookup_order", out.getvalue())
        (row,) = self.read_jsonl("rec.jsonl")
        self.assertEqual((row["input"], row["output"]), (CONVERSATION, {
            "text": "", "finish_reason": "tool_calls", "tool_calls": [LOOKUP]}))


class OldFilesTest(unittest.TestCase):
    """Case files, recordings and baselines written before conversations give the verdicts
    they gave, and a run over them writes what it wrote."""

    def test_the_shipped_suite_and_its_baseline(self):
        with tempfile.TemporaryDirectory() as folder:
            for name in ("cases.jsonl", "recordings.jsonl", "last_run.json"):
                shutil.copy(os.path.join(ROOT, name), folder)
            before = {e["id"]: e for e in evals_extras.read_record(
                os.path.join(folder, "last_run.json"))["cases"]}
            out, err = io.StringIO(), io.StringIO()
            code = evals.main(["--cases", os.path.join(folder, "cases.jsonl"), "--rescore",
                               os.path.join(folder, "recordings.jsonl"), "--baseline",
                               os.path.join(folder, "last_run.json"), "--out",
                               os.path.join(folder, "new.json"), "--record",
                               os.path.join(folder, "again.jsonl"), "--no-history"], out, err)
            self.assertEqual(code, 0, out.getvalue() + err.getvalue())
            after = {e["id"]: e for e in evals_extras.read_record(
                os.path.join(folder, "new.json"))["cases"]}
            with open(os.path.join(folder, "recordings.jsonl"), encoding="utf-8") as handle:
                old_rows = [json.loads(text) for text in handle if text.strip()]
            with open(os.path.join(folder, "again.jsonl"), encoding="utf-8") as handle:
                new_rows = [json.loads(text) for text in handle if text.strip()]
        self.assertEqual({k: e["status"] for k, e in after.items()},
                         {k: e["status"] for k, e in before.items()})
        for case_id, entry in after.items():
            self.assertEqual([(c["type"], c["passed"], c["reason"]) for c in entry["checks"]],
                             [(c["type"], c["passed"], c["reason"])
                              for c in before[case_id]["checks"]], case_id)
            self.assertNotIn("tool_calls", entry)
            self.assertNotIn("finish_reason", entry)
        self.assertEqual([(r["id"], r["output"]) for r in new_rows],
                         [(r["id"], r["output"]) for r in old_rows])
        self.assertTrue(all(isinstance(r["output"], str) for r in new_rows))


# ---------------------------------------------------------------------------------------------
# Reports
# ---------------------------------------------------------------------------------------------


class ReportsTest(unittest.TestCase):
    HOSTILE_CALL = {"name": "lookup_order", "arguments": {"order_id": HOSTILE}}

    def record(self, outputs_included=True):
        talk = {"id": "talk", "input": [{"role": "system", "content": "Be <b>brief</b>."},
                                        {"role": "user", "content": "Where is\nmy order?"}],
                "description": "", "tags": [], "status": "fail", "baseline": "fail",
                "change": "new", "latency_s": 0.5, "output": "Let me check <i>that</i>.",
                "tool_calls": [self.HOSTILE_CALL, REFUND], "finish_reason": "tool_calls",
                "checks": [{"type": "tool_called", "passed": False, "reason": "x"}]}
        cut = {"id": "cut", "input": "Explain.", "description": "", "tags": [],
               "status": "fail", "baseline": "fail", "change": "new", "latency_s": 0.5,
               "output": "Refunds over", "finish_reason": "length",
               "checks": [{"type": "contains_any", "passed": False, "reason": "y"}]}
        entries = [talk, cut] if outputs_included else [evals_extras.without_outputs(e)
                                                        for e in (talk, cut)]
        return {"format": "evals-run", "version": 1, "outputs_included": outputs_included,
                "cases": entries, "summary": evals.summarize(entries), "removed": []}

    def test_the_summary_lists_the_calls_and_the_ending(self):
        text = evals.format_summary(self.record())
        self.assertIn('NEW FAIL: talk\n    tool_called: x\n    -> lookup_order({"order_id": ',
                      text)
        self.assertIn('\n    -> issue_refund({"order_id": "A-1001", "amount_usd": 150})\n'
                      "NEW FAIL: cut\n    contains_any: y\n    [finish_reason: length]\n", text)
        for line in text.splitlines():  # one line each, spelled out: no workflow command
            self.assertFalse(line.startswith("::"), line)
        self.assertNotIn("\x1b", text)

    def test_junit_markdown_and_html_show_them_escaped(self):
        record = self.record()
        root = ET.fromstring(evals_extras.render_junit(record))
        out = {case.get("name"): case.find("system-out").text for case in root.iter("testcase")}
        self.assertTrue(out["talk"].startswith("Let me check <i>that</i>.\n-> lookup_order("))
        self.assertTrue(out["talk"].endswith(
            '\n-> issue_refund({"order_id": "A-1001", "amount_usd": 150})'))
        self.assertEqual(out["cut"], "Refunds over\n[finish_reason: length]")
        markdown = evals_extras.render_markdown(record)
        self.assertIn('```text\nLet me check <i>that</i>.\n-> lookup_order({"order_id": "Sure! ',
                      markdown.replace("````", "```"))
        self.assertIn("```text\nRefunds over\n[finish_reason: length]\n```", markdown)
        page = evals_extras.render_html(record, {})
        self.assertNotIn("<script>", page)
        self.assertNotIn("<i>that", page)
        self.assertIn("<pre>system: Be &lt;b&gt;brief&lt;/b&gt;.\nuser: Where is\n  my order?"
                      "</pre>", page)
        self.assertIn("-&gt; lookup_order({&quot;order_id&quot;: &quot;Sure! &lt;script&gt;",
                      page)
        self.assertIn("finish_reason tool_calls", page)
        self.assertIn("Refunds over\n[finish_reason: length]", page)

    def test_no_arguments_when_outputs_are_omitted(self):
        record = self.record(outputs_included=False)
        self.assertIn("-> lookup_order([arguments omitted])",
                      evals.format_summary(record))
        for text in (evals_extras.render_junit(record), evals_extras.render_markdown(record),
                     evals_extras.render_html(record, {}), evals.format_summary(record)):
            self.assertNotIn("A-1001", text)
            self.assertNotIn("Sure!", text)


# ---------------------------------------------------------------------------------------------
# End to end: python evals.py, my_client and a loopback server of each provider
# ---------------------------------------------------------------------------------------------


TOOL_RESPONSES = {"openai": OPENAI_TOOL_CALLS, "anthropic": ANTHROPIC_TOOL_USE,
                  "gemini": GEMINI_FUNCTION_CALL, "ollama": OLLAMA_TOOL_CALLS}
OK_RESPONSES = {"openai": openai_ok("Hello!"), "anthropic": anthropic_ok("Hi there"),
                "gemini": gemini_ok("Bonjour"), "ollama": ollama_ok("Let me check.")}
CUT_RESPONSES = {"openai": openai_ok("The refund takes", finish="length"),
                 "anthropic": anthropic_ok("The refund takes", stop="max_tokens"),
                 "gemini": gemini_ok("The refund takes", finish="MAX_TOKENS"),
                 "ollama": ollama_ok("The refund takes", done_reason="length")}
KEYS = {"openai": ("OPENAI_API_KEY", KEY), "anthropic": ("ANTHROPIC_API_KEY", KEY),
        "gemini": ("GEMINI_API_KEY", GEMINI_KEY), "ollama": (None, None)}
E2E_CASES = [
    {"id": "order-lookup", "input": CONVERSATION, "checks": [
        {"type": "tool_called", "name": "lookup_order", "arguments": {"order_id": "A-1001"},
         "schema": TOOLS[0]["parameters"]},
        {"type": "finish_reason", "values": ["tool_calls"]},
        {"type": "tool_called", "name": "issue_refund", "negate": True}]},
    {"id": "cut", "input": "Explain refunds.", "checks": [
        {"type": "finish_reason", "values": ["length"]},
        {"type": "contains_any", "values": ["business days"]}]},
    {"id": "plain", "input": "hello", "checks": [
        {"type": "char_count", "min": 1}, {"type": "finish_reason", "values": ["stop"]}]},
]


class ProvidersEndToEndTest(unittest.TestCase):
    """Each provider's adapter, live against its loopback server through evals' command line,
    then the same verdicts offline: --rescore of the record and of the recordings, and
    my_client's replay of the recordings."""

    def run_evals(self, folder, env, *args):
        """`python evals.py --no-history ARGS` in `folder` with `env`, run in this process
        (sixteen runs: a new process each would cost about half a second of start-up)."""
        out, err = io.StringIO(), io.StringIO()
        cwd = os.getcwd()
        os.chdir(folder)
        try:
            with mock.patch.dict(os.environ, env, clear=True), \
                    contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                code = evals.main(["--no-history", *args], stdout=out, stderr=err)
        finally:
            os.chdir(cwd)
        return code, out.getvalue() + err.getvalue()

    def provider_run(self, provider):
        server = LoopbackServer().start()
        self.addCleanup(server.stop)

        def respond(request):
            body = json.dumps(request["json"])
            return (TOOL_RESPONSES if "A-1001" in body else CUT_RESPONSES
                    if "Explain refunds" in body else OK_RESPONSES)[provider]

        server.behave(respond)
        folder = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, folder)
        with open(os.path.join(folder, "cases.jsonl"), "w", encoding="utf-8") as handle:
            handle.write("".join(json.dumps(c) + "\n" for c in E2E_CASES))
        with open(os.path.join(folder, "tools.json"), "w", encoding="utf-8") as handle:
            json.dump(TOOLS, handle)
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("EVALS_") and not k.endswith("_API_KEY")}
        env["PYTHONPATH"] = ROOT
        live = dict(env, EVALS_PROVIDER=provider, EVALS_BASE_URL=server.url + "/v1",
                    EVALS_TOOLS="tools.json", EVALS_MAX_ATTEMPTS="1")
        if KEYS[provider][0]:
            live[KEYS[provider][0]] = KEYS[provider][1]
        code, said = self.run_evals(folder, live, "--client", "my_client:ask", "--out",
                                    "live.json", "--record", "recorded.jsonl")
        self.assertIn(code, (0, 1), said)
        return server, folder, env, said

    def entries(self, folder, name):
        with open(os.path.join(folder, name), encoding="utf-8") as handle:
            return {e["id"]: e for e in json.load(handle)["cases"]}

    def test_each_provider_live_then_offline(self):
        calls = {"openai": [LOOKUP["name"], "issue_refund"]}
        for provider in ("openai", "anthropic", "gemini", "ollama"):
            with self.subTest(provider=provider):
                server, folder, env, said = self.provider_run(provider)
                self.check_requests(provider, server.requests)
                live = self.entries(folder, "live.json")
                order = live["order-lookup"]
                self.assertEqual([c["name"] for c in order["tool_calls"]],
                                 calls.get(provider, ["lookup_order"]))
                self.assertEqual(order["tool_calls"][0], LOOKUP)
                self.assertEqual(order["finish_reason"], "tool_calls")
                # OpenAI's fixture also calls issue_refund: "never issue_refund" catches it.
                self.assertEqual(order["status"], "fail" if provider == "openai" else "pass",
                                 said)
                self.assertEqual(live["cut"]["finish_reason"], "length")
                self.assertEqual(live["cut"]["checks"][1]["reason"],
                                 "none of 'business days' found (the answer was cut at the "
                                 "token limit: finish_reason length)")
                self.assertEqual((live["plain"]["status"], live["plain"]["finish_reason"]),
                                 ("pass", "stop"))
                self.assertEqual(order["sent"]["tools"], ["lookup_order", "issue_refund"])
                with open(os.path.join(folder, "recorded.jsonl"), encoding="utf-8") as handle:
                    recorded = {row["id"]: row for row in map(json.loads, handle)}
                self.assertEqual(recorded["order-lookup"]["input"], CONVERSATION)
                self.assertEqual(recorded["order-lookup"]["output"]["tool_calls"],
                                 order["tool_calls"])
                self.assertEqual(recorded["plain"]["output"]["finish_reason"], "stop")
                self.check_offline(folder, env, live)

    def check_offline(self, folder, env, live):
        verdicts = {k: (e["status"], e["checks"]) for k, e in live.items()}
        for source in ("live.json", "recorded.jsonl"):
            code, said = self.run_evals(folder, env, "--rescore", source, "--out", "again.json")
            self.assertIn(code, (0, 1), said)
            again = self.entries(folder, "again.json")
            self.assertEqual({k: (e["status"], e["checks"]) for k, e in again.items()},
                             verdicts, source)
        replay = dict(env, EVALS_RECORDINGS="recorded.jsonl")
        code, said = self.run_evals(folder, replay, "--client", "my_client:ask", "--out",
                                    "replayed.json")
        self.assertIn("replaying recorded outputs from recorded.jsonl", said)
        again = self.entries(folder, "replayed.json")
        self.assertEqual({k: (e["status"], e["checks"]) for k, e in again.items()}, verdicts)

    def check_requests(self, provider, requests):
        (talk,) = [r["json"] for r in requests if "A-1001" in json.dumps(r["json"])]
        if provider in ("openai", "ollama"):
            self.assertEqual(talk["messages"], CONVERSATION)
            self.assertEqual([t["function"]["name"] for t in talk["tools"]],
                             ["lookup_order", "issue_refund"])
        elif provider == "anthropic":
            self.assertEqual((talk["system"], talk["messages"]), (SYSTEM, CONVERSATION[1:]))
            self.assertEqual(talk["tools"][0]["input_schema"], TOOLS[0]["parameters"])
        else:
            self.assertEqual(talk["systemInstruction"], {"parts": [{"text": SYSTEM}]})
            self.assertEqual([c["role"] for c in talk["contents"]], ["user", "model", "user"])
            self.assertEqual(talk["tools"], [{"functionDeclarations": [
                {"name": t["name"], "description": t["description"],
                 "parametersJsonSchema": t["parameters"]} for t in TOOLS]}])


# ---------------------------------------------------------------------------------------------
# The support-bot example
# ---------------------------------------------------------------------------------------------


EXAMPLE = os.path.join(ROOT, "examples", "support-bot")
EXAMPLE_VERDICTS = {
    "where-is-my-order": "pass", "keeps-the-order-number": "fail",
    "small-refund-after-lookup": "pass", "large-refund-lookup-only": "pass",
    "large-refund-needs-a-manager": "fail", "policy-answer-not-cut": "fail",
    "thanks-no-tools": "pass", "refuses-card-number": "pass",
}


class SupportBotExampleTest(unittest.TestCase):
    """The example runs offline with the commands its README gives, with the verdicts and the
    output it shows."""

    def setUp(self):
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.dir = os.path.join(tmp.name, "examples", "support-bot")
        os.makedirs(self.dir)
        for name in ("evals.py", "evals_extras.py", "my_client.py"):
            shutil.copy(os.path.join(ROOT, name), tmp.name)
        for name in ("cases.jsonl", "recordings.jsonl", "tools.json", "README.md"):
            shutil.copy(os.path.join(EXAMPLE, name), self.dir)
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("EVALS_")}
        with open(os.path.join(EXAMPLE, "README.md"), encoding="utf-8") as handle:
            self.readme = handle.read()

    def run_example(self, command):
        self.assertIn(command, self.readme)
        return subprocess.run([sys.executable, *command.split()[1:]], cwd=self.dir,
                              env=self.env, capture_output=True, text=True, timeout=120)

    def statuses(self, name):
        with open(os.path.join(self.dir, name), encoding="utf-8") as handle:
            return {e["id"]: e["status"] for e in json.load(handle)["cases"]}

    def test_the_documented_commands_give_the_documented_verdicts(self):
        done = self.run_example("python ../../evals.py --client ../../my_client.py:ask")
        self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
        self.assertIn("replaying recorded outputs from recordings.jsonl", done.stderr)
        self.assertIn(done.stdout.strip(), self.readme)  # the README shows this very output
        self.assertEqual(self.statuses("last_run.json"), EXAMPLE_VERDICTS)
        done = self.run_example("python ../../evals.py --rescore recordings.jsonl")
        self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
        self.assertIn("0 regressed, 0 fixed, 3 still failing", done.stdout)
        self.assertEqual(self.statuses("last_run.json"), EXAMPLE_VERDICTS)
        for case_id, status in EXAMPLE_VERDICTS.items():
            self.assertRegex(self.readme, rf"\| `{case_id}` \|.*\| {status} \|\n")

    def test_the_files_fit_together(self):
        cases, _ = evals.load_cases(os.path.join(EXAMPLE, "cases.jsonl"))
        self.assertEqual([c.id for c in cases], list(EXAMPLE_VERDICTS))
        tools = my_client.make_client("openai", env={
            "EVALS_TOOLS": os.path.join(EXAMPLE, "tools.json"), "OPENAI_API_KEY": "k"}
        ).settings.tools
        names = {tool["name"] for tool in tools}
        self.assertEqual(names, {"lookup_order", "issue_refund"})
        with open(os.path.join(EXAMPLE, "recordings.jsonl"), encoding="utf-8") as handle:
            rows = {row["id"]: row for row in map(json.loads, handle)}
        for loaded in cases:
            self.assertEqual(rows[loaded.id]["input"], loaded.input, loaded.id)
            self.assertEqual([m["role"] for m in loaded.input],
                             ["system", "user", "assistant", "user", "assistant", "user"])
            used = {c.get("name") for c in loaded.checks if c["type"] == "tool_called"}
            used |= {n for c in loaded.checks if c["type"] == "tool_sequence" for n in c["names"]}
            self.assertLessEqual(used, names, loaded.id)
        kinds = {c["type"] for loaded in cases for c in loaded.checks}
        self.assertLessEqual({"tool_called", "tool_sequence", "finish_reason", "contains_any",
                              "not_contains"}, kinds)
        self.assertTrue(any(c.get("negate") and c.get("name") == "issue_refund"
                            for loaded in cases for c in loaded.checks))
        self.assertTrue(re.search(r"EVALS_TOOLS=tools\.json", self.readme))


if __name__ == "__main__":
    unittest.main()
