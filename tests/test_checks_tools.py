"""Tests of the tool_calls_valid check (evals_extras.py): every tool call names a declared tool
and its arguments satisfy that tool's `parameters` schema; `min` / `max` bound the calls.

Run from the repository root: python -m unittest discover -s tests -t .
"""

import json
import os
import unittest

import evals
import evals_extras  # registers tool_calls_valid

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ORDER = {"type": "object", "required": ["order_id"], "additionalProperties": False,
         "properties": {"order_id": {"type": "string", "pattern": "^[A-Z]-[0-9]+$"}}}
REFUND = {"type": "object", "required": ["order_id", "amount_usd"],
          "properties": {"order_id": {"type": "string"},
                         "amount_usd": {"type": "number", "minimum": 0, "maximum": 100}}}
TOOLS = [{"name": "lookup_order", "description": "Look an order up.", "parameters": ORDER},
         {"name": "issue_refund", "parameters": REFUND},
         {"name": "escalate"}]  # no parameters: any arguments


def reply(*calls, text=""):
    """An Answer with these (name, arguments) tool calls."""
    return evals.Answer(text, tuple({"name": name, "arguments": arguments}
                                    for name, arguments in calls), "tool_calls")


def check(**params):
    return dict({"type": "tool_calls_valid", "tools": TOOLS}, **params)


class ToolCallsValidTest(unittest.TestCase):
    def run_valid(self, check_dict, answer):
        problems = evals.validate_check(check_dict)
        self.assertEqual(problems, [], check_dict)
        return evals.run_check(check_dict, answer)

    def assertPasses(self, check_dict, answer, reason=None):
        result = self.run_valid(check_dict, answer)
        self.assertIs(result.passed, True, result.reason)
        if reason is not None:
            self.assertIn(reason, result.reason)
        return result

    def assertFails(self, check_dict, answer, reason):
        result = self.run_valid(check_dict, answer)
        self.assertIs(result.passed, False, result.reason)
        self.assertIn(reason, result.reason)
        return result

    def assertRefused(self, check_dict, fragment):
        problems = evals.validate_check(check_dict)
        self.assertTrue(any(fragment in p for p in problems), problems)
        return problems

    # ---- scoring ----

    def test_valid_calls_pass(self):
        answer = reply(("lookup_order", {"order_id": "A-1001"}),
                       ("issue_refund", {"order_id": "A-1001", "amount_usd": 25}),
                       ("escalate", {"why": "angry", "n": [1]}))
        self.assertPasses(check(), answer, "3 tool calls, each of a declared tool with valid "
                                           "arguments")

    def test_no_call_passes_without_min(self):
        self.assertPasses(check(), evals.Answer("Your order ships today."), "0 tool calls")

    def test_an_undeclared_tool_fails_naming_the_call(self):
        result = self.assertFails(check(), reply(("cancel_order", {"order_id": "A-1"})),
                                  'cancel_order({"order_id": "A-1"}) names no declared tool '
                                  "(declared: lookup_order, issue_refund, escalate)")
        self.assertIn('cancel_order({"order_id": "A-1"})', result.quoted)

    def test_arguments_against_the_schema(self):
        cases = {
            "missing": ({}, "lookup_order({}): $: missing required key 'order_id'"),
            "type": ({"order_id": 7}, "lookup_order({\"order_id\": 7}): $.order_id: expected "
                                      "string, got"),
            "pattern": ({"order_id": "a1"}, "does not match /^[A-Z]-[0-9]+$/"),
            "extra": ({"order_id": "A-1", "note": "x"}, "$: unexpected key 'note'"),
        }
        for name, (arguments, reason) in cases.items():
            with self.subTest(name):
                self.assertFails(check(), reply(("lookup_order", arguments)), reason)

    def test_the_first_offending_call_is_named_with_its_place(self):
        answer = reply(("lookup_order", {"order_id": "A-1"}),
                       ("issue_refund", {"order_id": "A-1", "amount_usd": 500}),
                       ("lookup_order", {}))
        result = self.assertFails(check(), answer, 'call 2 of 3: issue_refund({"order_id": '
                                                   '"A-1", "amount_usd": 500}): $.amount_usd: '
                                                   "500 is not at most 100")
        self.assertNotIn("call 3", result.reason)

    def test_arguments_the_model_wrote_that_are_not_json(self):
        self.assertFails(check(), reply(("lookup_order", '{"order_id": "A-1"')),
                         'lookup_order("{\\"order_id\\": \\"A-1\\""): its arguments are not '
                         "JSON")

    def test_a_json_string_that_is_not_an_object(self):
        self.assertFails(check(), reply(("escalate", "[1, 2]")),
                         'escalate("[1, 2]"): its arguments are not a JSON object')

    def test_a_string_holding_a_json_object_is_validated(self):
        self.assertPasses(check(), reply(("lookup_order", '{"order_id": "A-1"}')))
        self.assertFails(check(), reply(("lookup_order", '{"id": "A-1"}')),
                         "missing required key 'order_id'")

    def test_min_and_max_bound_the_number_of_calls(self):
        one = reply(("lookup_order", {"order_id": "A-1"}))
        two = reply(("lookup_order", {"order_id": "A-1"}), ("escalate", {}))
        self.assertPasses(check(min=1), one, "1 tool call, at least 1, each valid")
        self.assertFails(check(min=1), evals.Answer("No."), "0 tool calls, expected at least 1")
        self.assertFails(check(max=1), two, "2 tool calls, expected at most 1")
        self.assertPasses(check(min=1, max=2), two, "2 tool calls, between 1 and 2")
        self.assertPasses(check(min=1, max=1), one, "exactly 1")

    def test_an_invalid_call_is_reported_before_the_count(self):
        answer = reply(("nope", {}), ("escalate", {}))
        self.assertFails(check(max=1), answer, "call 1 of 2: nope({}) names no declared tool")

    def test_negated(self):
        negated = check(negate=True)
        self.assertPasses(negated, reply(("nope", {})))
        self.assertFails(negated, reply(("escalate", {})), "")

    def test_the_example_tools_file(self):
        with open(os.path.join(ROOT, "examples", "support-bot", "tools.json"),
                  encoding="utf-8") as handle:
            tools = json.load(handle)
        self.assertEqual(evals.validate_check(check(tools=tools)), [])

    def test_through_a_case(self):
        case = evals.Case(id="refund", input="Refund A-1", checks=(check(min=1),))
        good = reply(("issue_refund", {"order_id": "A-1", "amount_usd": 10}))
        bad = reply(("issue_refund", {"order_id": "A-1"}))
        self.assertEqual(evals.evaluate(case, good)[0], "pass")
        self.assertEqual(evals.evaluate(case, bad)[0], "fail")

    # ---- refused at load ----

    def test_tools_refused_at_load(self):
        refused = {
            "empty": ([], "must be a non-empty list of tools"),
            "not a list": ({"name": "a"}, "must be a non-empty list of tools"),
            "not an object": (["lookup_order"], "tool 1 must be an object, got string"),
            "no name": ([{"description": "x"}], "tool 1 has no 'name'"),
            "blank name": ([{"name": " "}], "tool 1 has no 'name'"),
            "duplicate": ([{"name": "a"}, {"name": "b"}, {"name": "a"}],
                          "tool 3 (a) repeats the name 'a'"),
            "unknown key": ([{"name": "a", "paramaters": {}}], "tool 1: unknown key "
                                                               "'paramaters'"),
            "description": ([{"name": "a", "description": 3}],
                            "tool 1 (a): 'description' must be a string"),
            "parameters": ([{"name": "a", "parameters": "order_id"}],
                           "tool 1 (a): 'parameters' must be a JSON Schema object"),
            "bad schema": ([{"name": "a", "parameters": {"type": "strnig"}}],
                           "tool 1 (a): parameters.type must be one of"),
            "unsupported": ([{"name": "a", "parameters": {"oneOf": []}}],
                            "tool 1 (a): parameters: unsupported keyword 'oneOf'"),
            "bad subschema": ([{"name": "a", "parameters": {"properties": {
                "n": {"minimum": "1"}}}}],
                              "tool 1 (a): parameters.properties.n.minimum must be a number"),
        }
        for name, (tools, fragment) in refused.items():
            with self.subTest(name):
                self.assertRefused(check(tools=tools), "tool_calls_valid: parameter 'tools' "
                                   + fragment)

    def test_the_kind_of_the_tools(self):
        self.assertIsNone(evals_extras.Tools(TOOLS))
        self.assertEqual(evals_extras.Tools([{"name": "a"}, {"name": "a"}]),
                         "tool 2 (a) repeats the name 'a'")

    def test_other_parameters_refused_at_load(self):
        self.assertRefused({"type": "tool_calls_valid"}, "missing required parameter 'tools'")
        self.assertRefused(check(min=-1), "parameter 'min' must be a non-negative integer")
        self.assertRefused(check(min=3, max=1), "impossible bounds, min 3 > max 1")
        self.assertRefused(check(on="reasoning"), "unknown parameter 'on'")


if __name__ == "__main__":
    unittest.main()
