"""Tests of the check vocabulary: every check type, parameter validation, run_check and
equivalence with the original harness's `check` function.

Run from the repository root: python -m unittest discover -s tests -t .
"""

import io
import json
import os
import re
import tempfile
import unittest
from pathlib import Path

import evals

evals._extras()  # the optional file's checks are in the registry the tests walk

IFEVAL_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "ifeval"


def run(check, output):
    """Validate `check` (it must be valid) and score it on `output`."""
    problems = evals.validate_check(check)
    if problems:
        raise AssertionError(f"test check {check!r} is invalid: {problems}")
    return evals.run_check(check, output)


class CheckTestCase(unittest.TestCase):
    def assertPasses(self, check, output, reason=None):
        result = run(check, output)
        self.assertTrue(result.passed, f"{check!r} on {output!r}: {result.reason}")
        if reason is not None:
            self.assertIn(reason, result.reason)
        return result

    def assertFails(self, check, output, reason=None):
        result = run(check, output)
        self.assertFalse(result.passed, f"{check!r} on {output!r} passed: {result.reason}")
        if reason is not None:
            self.assertIn(reason, result.reason)
        return result

    def assertProblem(self, check, fragment):
        problems = evals.validate_check(check)
        self.assertTrue(problems, f"{check!r} validated without problems")
        self.assertTrue(any(fragment in p for p in problems),
                        f"{fragment!r} not in problems of {check!r}: {problems}")
        return problems

    def command(self, check, output):
        """`python evals.py check case --cases FILE --output OUTPUT` on one case holding `check`:
        (exit code, what it printed)."""
        with tempfile.TemporaryDirectory() as folder:
            cases = os.path.join(folder, "cases.jsonl")
            with open(cases, "w", encoding="utf-8") as handle:
                handle.write(json.dumps({"id": "case", "input": "x", "checks": [check]}) + "\n")
            out, err = io.StringIO(), io.StringIO()
            code = evals.main(["check", "case", "--cases", cases, "--output", output], out, err)
        return code, out.getvalue() + err.getvalue()


# Every check type with a valid check, an output it passes and one it fails. RegistryTest walks
# the registry, so a check type added without an example here fails the suite.
EXAMPLES = {
    "contains_any": ({"type": "contains_any", "values": ["a"]}, "a cat", "the dog"),
    "contains_all": ({"type": "contains_all", "values": ["a", "b"]}, "a b", "a c"),
    "not_contains": ({"type": "not_contains", "values": ["forbidden"]}, "fine", "forbidden"),
    "equals": ({"type": "equals", "value": "yes"}, " yes ", "yes!"),
    "equals_any": ({"type": "equals_any", "values": ["yes", "yeah"]}, " yeah ", "no"),
    "number_match": ({"type": "number_match", "value": 42}, "It is 42.", "It is 41."),
    "similarity": ({"type": "similarity", "reference": "kitten", "min": 0.5}, "sitting", "dog"),
    "starts_with": ({"type": "starts_with", "value": "Yes"}, "Yes, sure", "No"),
    "ends_with": ({"type": "ends_with", "value": "."}, "Done.", "Done"),
    "regex": ({"type": "regex", "pattern": "x+"}, "axb", "abc"),
    "phrase_count": ({"type": "phrase_count", "phrase": "ai", "max": 1}, "AI", "ai ai"),
    "max_words": ({"type": "max_words", "n": 2}, "two words", "three words here"),
    "word_count": ({"type": "word_count", "max": 2}, "two words", "three words here"),
    "char_count": ({"type": "char_count", "max": 3}, "abc", "abcd"),
    "sentence_count": ({"type": "sentence_count", "max": 1}, "One.", "One. Two."),
    "paragraph_count": ({"type": "paragraph_count", "max": 1}, "a", "a\n\nb"),
    "line_count": ({"type": "line_count", "max": 1}, "a", "a\nb"),
    "bullet_count": ({"type": "bullet_count", "min": 1}, "- a", "a"),
    "letter_case": ({"type": "letter_case", "style": "lower"}, "quiet", "Loud"),
    "uppercase_word_count": ({"type": "uppercase_word_count", "max": 0}, "calm", "NOT calm"),
    "language": ({"type": "language", "code": "en"}, "This is the answer and it is in English.",
                 "Das ist die Antwort und sie ist nicht auf Englisch."),
    "json_valid": ({"type": "json_valid"}, '{"a": 1}', "{a: 1}"),
    "json_keys": ({"type": "json_keys", "keys": ["a"]}, '{"a": 1}', '{"b": 1}'),
    "json_schema": ({"type": "json_schema", "schema": {"type": "object"}}, "{}", "[]"),
    "json_embedded": ({"type": "json_embedded", "keys": ["a"]}, 'Here: {"a": 1}.', "None."),
    "xml_valid": ({"type": "xml_valid"}, "<a><b/></a>", "<a><b></a>"),
    # Checks of the whole reply score an Answer: its tool calls and how it ended.
    "tool_called": ({"type": "tool_called", "name": "lookup_order",
                     "arguments": {"order_id": "A-1"}},
                    evals.Answer("", ({"name": "lookup_order", "arguments": {"order_id": "A-1"}},),
                                 "tool_calls"),
                    evals.Answer("", ({"name": "lookup_order", "arguments": {"order_id": "B-2"}},),
                                 "tool_calls")),
    "tool_sequence": ({"type": "tool_sequence", "names": ["lookup_order", "issue_refund"]},
                      evals.Answer("", ({"name": "lookup_order", "arguments": {}},
                                        {"name": "issue_refund", "arguments": {}})),
                      evals.Answer("", ({"name": "issue_refund", "arguments": {}},
                                        {"name": "lookup_order", "arguments": {}}))),
    "tool_calls_valid": ({"type": "tool_calls_valid", "tools": [
                             {"name": "lookup_order", "parameters": {
                                 "type": "object", "required": ["order_id"],
                                 "properties": {"order_id": {"type": "string"}}}}]},
                         evals.Answer("", ({"name": "lookup_order",
                                            "arguments": {"order_id": "B-2"}},), "tool_calls"),
                         evals.Answer("", ({"name": "lookup_order", "arguments": {}},),
                                      "tool_calls")),
    "finish_reason": ({"type": "finish_reason", "values": ["stop"]},
                      evals.Answer("Done.", finish_reason="stop"),
                      evals.Answer("Done, and then", finish_reason="length")),
    "judge": ({"type": "judge", "must_include": ["manager approval is needed"]},
              "Manager approval is needed.", "No approval is needed."),
    "python": ({"type": "python", "function": "tests.user_checks:mentions_order",
                "order": "A-1"}, "Order A-1 shipped.", "Your order shipped."),
    "max_latency_s": ({"type": "max_latency_s", "seconds": 2},
                      evals.Answer("fast", latency_s=0.4), evals.Answer("slow", latency_s=2.5)),
    "max_cost_usd": ({"type": "max_cost_usd", "usd": 0.01},
                     evals.Answer("cheap", cost_usd=0.0004), evals.Answer("dear", cost_usd=0.02)),
}
VALID_EXAMPLES = {name: example[0] for name, example in EXAMPLES.items()}


def example_judge(prompt):
    """Finds the required fact only in an answer that does not negate it (for EXAMPLES)."""
    answer = json.loads(prompt[prompt.index("{\n"):])["answer"]
    missing = [] if answer.startswith("Manager") else ["manager approval is needed"]
    return json.dumps({"missing_requirements": missing, "forbidden_claims_found": [],
                       "unsupported_claims": [], "reason": "", "confidence": "high"})


class RegistryTest(CheckTestCase):
    def test_every_check_type_has_examples_that_pass_and_fail(self):
        self.assertEqual(set(EXAMPLES), set(evals.CHECKS))
        for name, (check, good, bad) in EXAMPLES.items():
            with self.subTest(name):
                self.assertEqual(evals.validate_check(check), [])
                case = evals.Case(id=name, input="question", checks=(check,))
                self.assertEqual(evals.evaluate(case, good, example_judge)[0], "pass")
                self.assertEqual(evals.evaluate(case, bad, example_judge)[0], "fail")
                if name != "judge":  # a judge check cannot be negated
                    negated = evals.Case(id=name, input="q", checks=(dict(check, negate=True),))
                    self.assertEqual(evals.evaluate(negated, bad)[0], "pass")

    def test_parameters_come_from_the_signature(self):
        spec = evals.CHECKS["starts_with"]
        self.assertEqual(list(spec.params), ["value", "ignore_case", "strip", "whole_word",
                                             "paragraph"])
        self.assertTrue(spec.params["value"].required)
        self.assertEqual((spec.params["strip"].required, spec.params["strip"].default),
                         (False, True))
        self.assertIs(spec.params["paragraph"].kind, evals.Position)
        self.assertTrue(evals.CHECKS["python"].open)
        self.assertEqual([n for n, s in evals.CHECKS.items() if s.needs_judge], ["judge"])

    def test_check_table_lists_every_type(self):
        table = evals._check_table()
        for name in evals.CHECKS:
            self.assertIn(f"  {name} ", table)
        self.assertIn("  python function [KEY=VALUE...]", table)

    def test_readme_table_is_the_registry(self):
        """The README's check table is generated from the registry: regenerate it with
        `python -c "import tests.test_checks as t; print(t.readme_table())"`."""
        readme = (Path(__file__).resolve().parents[1] / "docs" / "checks.md").read_text(encoding="utf-8")
        self.assertIn(readme_table(), readme)

    def test_adding_a_check_is_one_function(self):
        @evals.register
        def check_shouts(output, min: evals.Count = 1):
            """At least `min` exclamation marks."""
            count = output.count("!")
            return evals.CheckResult(count >= min, f"{count} exclamation marks")

        self.addCleanup(evals.CHECKS.pop, "shouts")
        self.assertEqual(evals.validate_check({"type": "shouts", "min": "2"}),
                         ["shouts: parameter 'min' must be a non-negative integer"])
        self.assertTrue(run({"type": "shouts"}, "Hi!").passed)
        self.assertTrue(run({"type": "shouts", "min": 2, "negate": True}, "Hi!").passed)
        self.assertIn("  shouts [min=1]\n      At least `min` exclamation marks.",
                      evals._check_table())


def readme_table():
    """The checks table of docs/checks.md, from the registry (the optional file's checks too):
    type, parameters with defaults, summary."""
    evals._extras()
    def shown(name, param):
        if param.required or param.default is None:
            return f"`{name}`"
        return f"`{name}` ({json.dumps(param.default)})"

    rows = ["| type | parameters (defaults) | passes when |", "| --- | --- | --- |"]
    for name, spec in evals.CHECKS.items():
        params = [shown(key, param) for key, param in spec.params.items()]
        params += ["any other key, passed to it"] if spec.open else []
        rows.append(f"| `{name}` | {', '.join(params)} | {spec.summary} |")
    return "\n".join(rows) + "\n"


# ---------------------------------------------------------------------------------------------
# Phrase checks
# ---------------------------------------------------------------------------------------------


class ContainsAnyTest(CheckTestCase):
    def test_pass_and_fail(self):
        check = {"type": "contains_any", "values": ["manager approval", "approved by a manager"]}
        self.assertPasses(check, "This needs Manager Approval first.", "found 'manager approval'")
        self.assertFails(check, "Refunded right away.",
                         "none of 'manager approval', 'approved by a manager' found")

    def test_reason_lists_every_value_found(self):
        check = {"type": "contains_any", "values": ["cat", "dog", "bird"]}
        self.assertPasses(check, "a dog and a cat", "found 'cat', 'dog'")

    def test_casefold_matches_sharp_s(self):
        check = {"type": "contains_any", "values": ["Straße"]}
        self.assertPasses(check, "Die STRASSE ist gesperrt.", "found 'Straße'")
        check = {"type": "contains_any", "values": ["STRASSE"]}
        self.assertPasses(check, "Die Straße ist gesperrt.")

    def test_ignore_case_false(self):
        check = {"type": "contains_any", "values": ["NASA"], "ignore_case": False}
        self.assertFails(check, "nasa launched", "none of 'NASA' found")
        self.assertPasses(check, "NASA launched")

    def test_whole_word(self):
        check = {"type": "contains_any", "values": ["ai"], "whole_word": True}
        self.assertFails(check, "The airline was late.", "none of 'ai' found")
        self.assertFails(check, "Said the maid.")
        self.assertPasses(check, "Ask the AI.", "found 'ai'")
        self.assertPasses(check, "Models (AI) help.")
        self.assertPasses(check, "AI")
        # without whole_word the substring counts
        self.assertPasses({"type": "contains_any", "values": ["ai"]}, "The airline was late.")

    def test_whole_word_phrase_with_non_word_ends(self):
        check = {"type": "contains_any", "values": ["$100"], "whole_word": True}
        self.assertPasses(check, "The fee is $100.", "found '$100'")
        self.assertPasses(check, "The fee is US$100 today")
        self.assertFails(check, "The fee is $1000.")
        check = {"type": "contains_any", "values": ["e.g."], "whole_word": True}
        self.assertPasses(check, "Fruit, e.g. apples")
        check = {"type": "contains_any", "values": ["C++"], "whole_word": True}
        self.assertPasses(check, "I write C++, mostly.")
        self.assertFails(check, "I write ObjC++ mostly.")

    def test_whole_word_multiword_phrase(self):
        check = {"type": "contains_any", "values": ["new york"], "whole_word": True}
        self.assertPasses(check, "I love New York!")
        self.assertFails(check, "I love New Yorkers")

    def test_regex_metacharacters_are_literal(self):
        check = {"type": "contains_any", "values": ["a.b"]}
        self.assertFails(check, "axb")
        self.assertPasses(check, "see a.b here")


class ContainsAllTest(CheckTestCase):
    def test_pass_and_fail(self):
        check = {"type": "contains_all", "values": ["manager approval", "5 business days"]}
        self.assertPasses(check, "After manager approval, allow 5 business days.",
                          "found all of 'manager approval', '5 business days'")
        self.assertFails(check, "Allow 5 business days.", "missing: 'manager approval'")

    def test_reason_lists_only_missing_values(self):
        check = {"type": "contains_all", "values": ["a1", "b2", "c3"]}
        result = self.assertFails(check, "only b2 here", "missing: 'a1', 'c3'")
        self.assertNotIn("b2", result.reason)

    def test_whole_word_and_case(self):
        check = {"type": "contains_all", "values": ["cat", "dog"], "whole_word": True}
        self.assertFails(check, "category dog", "missing: 'cat'")
        self.assertPasses(check, "CAT and DOG")
        check = {"type": "contains_all", "values": ["Cat"], "ignore_case": False}
        self.assertFails(check, "cat", "missing: 'Cat'")


class NotContainsTest(CheckTestCase):
    def test_pass_and_fail(self):
        check = {"type": "not_contains", "values": ["refund is instant", "guarantee"]}
        self.assertPasses(check, "Refunds take 5 days.",
                          "none of 'refund is instant', 'guarantee' found")
        self.assertFails(check, "We GUARANTEE it.", "found forbidden: 'guarantee'")

    def test_casefold(self):
        check = {"type": "not_contains", "values": ["strasse"]}
        self.assertFails(check, "Hauptstraße 5", "found forbidden: 'strasse'")

    def test_whole_word(self):
        check = {"type": "not_contains", "values": ["ai"], "whole_word": True}
        self.assertPasses(check, "The airline said so.")
        self.assertFails(check, "As an AI, I cannot.", "found forbidden: 'ai'")


# ---------------------------------------------------------------------------------------------
# Exact checks
# ---------------------------------------------------------------------------------------------


class EqualsTest(CheckTestCase):
    def test_strip_by_default(self):
        check = {"type": "equals", "value": "Yes"}
        self.assertPasses(check, "  Yes \n", "equals 'Yes'")
        self.assertFails(check, "Yes.", "expected 'Yes', got 'Yes.'")

    def test_strip_false(self):
        check = {"type": "equals", "value": "Yes", "strip": False}
        self.assertFails(check, "Yes\n", "got 'Yes\\n'")
        self.assertPasses(check, "Yes")

    def test_case_sensitive_by_default(self):
        self.assertFails({"type": "equals", "value": "yes"}, "YES", "expected 'yes', got 'YES'")
        self.assertPasses({"type": "equals", "value": "yes", "ignore_case": True}, "YES")
        self.assertPasses({"type": "equals", "value": "straße", "ignore_case": True}, "STRASSE")


class StartsWithTest(CheckTestCase):
    def test_pass_and_fail(self):
        check = {"type": "starts_with", "value": "Dear customer"}
        self.assertPasses(check, "\n  Dear customer, thanks.", "output starts with 'Dear customer'")
        self.assertFails(check, "Hello there, dear customer", "expected 'Dear customer'")

    def test_case_and_strip(self):
        self.assertFails({"type": "starts_with", "value": "yes"}, "Yes, sure")
        self.assertPasses({"type": "starts_with", "value": "yes", "ignore_case": True}, "Yes, sure")
        self.assertFails({"type": "starts_with", "value": "Yes", "strip": False}, " Yes")

    def test_whole_word(self):
        check = {"type": "starts_with", "value": "Yes", "whole_word": True}
        self.assertFails(check, "Yesterday was fine")
        self.assertPasses(check, "Yes, it was")
        self.assertPasses({"type": "starts_with", "value": "Yes"}, "Yesterday was fine")

    def test_whole_word_treats_combining_marks_as_part_of_the_word(self):
        check = {"type": "contains_any", "values": ["नमस"], "whole_word": True}
        self.assertFails(check, "नमस्ते दोस्त")  # the virama joins the next letter
        self.assertPasses(check, "नमस दोस्त")
        self.assertFails({"type": "ends_with", "value": "te", "whole_word": True},
                         "cafe\u0301te")

    def test_canonically_equal_text_matches_nfc(self):
        decomposed = "Cafe\u0301 au lait"  # "e" + combining acute, as some keyboards type it
        self.assertPasses({"type": "contains_any", "values": ["café"]}, decomposed)
        self.assertPasses({"type": "starts_with", "value": "Café"}, decomposed)
        self.assertFails({"type": "not_contains", "values": ["CAFÉ"]}, decomposed)
        self.assertPasses({"type": "equals", "value": "cafe\u0301"}, "café")

    def test_whole_word_counts_underscore_as_a_word_character_like_contains(self):
        self.assertFails({"type": "starts_with", "value": "foo", "whole_word": True}, "foo_bar")
        self.assertFails({"type": "ends_with", "value": "bar", "whole_word": True}, "x_bar")
        self.assertFails({"type": "contains_any", "values": ["foo"], "whole_word": True},
                         "foo_bar")
        self.assertPasses({"type": "ends_with", "value": "bar", "whole_word": True}, "x-bar")

    def test_paragraph(self):
        output = "Intro line here.\n\n  Summary: all good.\n\nBye."
        self.assertPasses({"type": "starts_with", "value": "Summary:", "paragraph": 2}, output,
                          "paragraph 2 starts with 'Summary:'")
        self.assertFails({"type": "starts_with", "value": "Summary:", "paragraph": 1}, output,
                         "paragraph 1 starts with 'Intro line here.'")
        self.assertPasses({"type": "starts_with", "value": "Bye", "paragraph": 3}, output)
        self.assertFails({"type": "starts_with", "value": "Bye", "paragraph": 4}, output,
                         "no paragraph 4: the output has 3")


class EndsWithTest(CheckTestCase):
    def test_strip(self):
        check = {"type": "ends_with", "value": "Any other questions?"}
        self.assertPasses(check, "Done. Any other questions?\n\n", "ends with 'Any other questions?'")
        self.assertFails({**check, "strip": False}, "Done. Any other questions?\n\n",
                         "expected 'Any other questions?'")

    def test_fail_reason_shows_the_end(self):
        self.assertFails({"type": "ends_with", "value": "P.S."}, "The end.",
                         "ends with 'The end.', expected 'P.S.'")

    def test_whole_word_and_case(self):
        self.assertFails({"type": "ends_with", "value": "day", "whole_word": True}, "Have a Sunday")
        self.assertPasses({"type": "ends_with", "value": "day", "whole_word": True}, "Good day")
        self.assertPasses({"type": "ends_with", "value": "day"}, "Have a Sunday")
        self.assertFails({"type": "ends_with", "value": "DAY"}, "good day")
        self.assertPasses({"type": "ends_with", "value": "DAY", "ignore_case": True}, "good day")


# ---------------------------------------------------------------------------------------------
# Regex and counts
# ---------------------------------------------------------------------------------------------


class RegexTest(CheckTestCase):
    def test_search_anywhere(self):
        check = {"type": "regex", "pattern": r"\b\d{3}-\d{4}\b"}
        self.assertPasses(check, "Call 555-1234 now", "matched '555-1234'")
        self.assertFails(check, "Call 5551234 now", r"no match for /\b\d{3}-\d{4}\b/")

    def test_case_sensitive_without_flags(self):
        self.assertFails({"type": "regex", "pattern": "hello"}, "HELLO")
        self.assertPasses({"type": "regex", "pattern": "hello", "flags": "i"}, "HELLO")

    def test_flags(self):
        self.assertFails({"type": "regex", "pattern": "^b"}, "a\nb")
        self.assertPasses({"type": "regex", "pattern": "^b", "flags": "m"}, "a\nb")
        self.assertFails({"type": "regex", "pattern": "a.b"}, "a\nb")
        self.assertPasses({"type": "regex", "pattern": "a.b", "flags": "s"}, "a\nb")
        self.assertPasses({"type": "regex", "pattern": r"\d+  # digits", "flags": "x"}, "abc 42",
                          "matched '42'")
        self.assertFails({"type": "regex", "pattern": r"\d+  # digits"}, "abc 42")
        self.assertPasses({"type": "regex", "pattern": "^B", "flags": "im"}, "a\nb")

    def test_fail_reason_names_flags(self):
        self.assertFails({"type": "regex", "pattern": "zzz", "flags": "i"}, "abc",
                         "no match for /zzz/i")

    def test_min_and_max_matches(self):
        output = "a1 b2 c3"  # three digits
        self.assertPasses({"type": "regex", "pattern": r"\d", "min_matches": 3}, output)
        self.assertFails({"type": "regex", "pattern": r"\d", "min_matches": 4}, output,
                         "expected at least 4")
        self.assertFails({"type": "regex", "pattern": r"\d", "max_matches": 2}, output,
                         "expected at most 2")
        self.assertPasses({"type": "regex", "pattern": r"\d", "max_matches": 3}, output)
        self.assertPasses({"type": "regex", "pattern": r"\d", "min_matches": 3,
                           "max_matches": 3}, output, "exactly 3")

    def test_count_reason_is_readable(self):
        result = self.assertFails({"type": "regex", "pattern": r"\d", "max_matches": 2}, "1 2 3")
        self.assertIn(r"3 matches of /\d/", result.reason)
        result = self.assertPasses({"type": "regex", "pattern": r"\d", "min_matches": 1,
                                    "max_matches": 1}, "only 1")
        self.assertIn(r"1 match of /\d/", result.reason)

    def test_zero_matches_allowed(self):
        check = {"type": "regex", "pattern": "sorry", "flags": "i", "min_matches": 0,
                 "max_matches": 0}
        self.assertPasses(check, "Here is your answer.", "exactly 0")
        self.assertFails(check, "Sorry, no.", "expected at most 0")

    def test_matches_do_not_overlap(self):
        self.assertFails({"type": "regex", "pattern": "aa", "min_matches": 2}, "aaa")
        self.assertPasses({"type": "regex", "pattern": "aa", "min_matches": 2}, "aaaa")


class PhraseCountTest(CheckTestCase):
    def test_whole_word_case_insensitive_by_default(self):
        output = "AI, ai and Ai. Airline."
        self.assertPasses({"type": "phrase_count", "phrase": "ai", "min": 3, "max": 3}, output,
                          "exactly 3")
        self.assertFails({"type": "phrase_count", "phrase": "ai", "max": 2}, output,
                         "expected at most 2")
        self.assertPasses({"type": "phrase_count", "phrase": "ai", "min": 4,
                           "whole_word": False}, output)
        self.assertPasses({"type": "phrase_count", "phrase": "ai", "min": 1, "max": 1,
                           "ignore_case": False}, output)

    def test_reason_names_the_phrase(self):
        result = self.assertFails({"type": "phrase_count", "phrase": "ai", "min": 3}, "ai ai")
        self.assertIn("2 occurrences of 'ai'", result.reason)
        self.assertIn("expected at least 3", result.reason)

    def test_zero_occurrences(self):
        self.assertPasses({"type": "phrase_count", "phrase": "refund", "max": 0}, "No money back.",
                          "0 occurrences")
        self.assertFails({"type": "phrase_count", "phrase": "refund", "min": 1}, "No money back.")


class WordCountTest(CheckTestCase):
    FIVE = "one two three four five"

    def test_bounds_are_inclusive(self):
        # "fewer than 5 words" is written as max 4
        self.assertFails({"type": "word_count", "max": 4}, self.FIVE, "5 words, expected at most 4")
        self.assertPasses({"type": "word_count", "max": 5}, self.FIVE, "5 words, at most 5")
        self.assertPasses({"type": "word_count", "min": 5}, self.FIVE, "at least 5")
        self.assertFails({"type": "word_count", "min": 6}, self.FIVE, "expected at least 6")
        self.assertPasses({"type": "word_count", "min": 5, "max": 5}, self.FIVE, "exactly 5")
        self.assertPasses({"type": "word_count", "min": 4, "max": 6}, self.FIVE,
                          "between 4 and 6")

    def test_punctuation_is_not_a_word(self):
        self.assertPasses({"type": "word_count", "min": 2, "max": 2}, "Cats run.", "2 words")
        self.assertPasses({"type": "word_count", "min": 2, "max": 2, "split": "alphanumeric"},
                          "Cats run.")

    def test_singular(self):
        self.assertPasses({"type": "word_count", "max": 1}, "Hello", "1 word, at most 1")

    def test_split_modes(self):
        output = "don't stop\u2014now"
        self.assertPasses({"type": "word_count", "min": 2, "max": 2}, output)
        self.assertPasses({"type": "word_count", "min": 4, "max": 4, "split": "alphanumeric"},
                          output)
        # a lone dash is a whitespace word but not an alphanumeric one
        self.assertPasses({"type": "word_count", "min": 3, "max": 3}, "a - b")
        self.assertPasses({"type": "word_count", "min": 2, "max": 2, "split": "alphanumeric"},
                          "a - b")


class MaxWordsTest(CheckTestCase):
    def test_inclusive(self):
        self.assertFails({"type": "max_words", "n": 4}, "one two three four five",
                         "5 words, expected at most 4")
        self.assertPasses({"type": "max_words", "n": 5}, "one two three four five",
                          "5 words, at most 5")

    def test_whitespace_kinds(self):
        self.assertPasses({"type": "max_words", "n": 3}, "a\tb\n\nc   ")
        self.assertFails({"type": "max_words", "n": 2}, "a\u00a0b c")  # NBSP splits too


class CharCountTest(CheckTestCase):
    def test_code_points(self):
        output = "Straße \U0001F44D"  # 6 letters, a space and one emoji: 8 code points
        self.assertPasses({"type": "char_count", "min": 8, "max": 8}, output, "8 characters")
        self.assertFails({"type": "char_count", "max": 7}, output, "expected at most 7")
        self.assertEqual(len(output.encode("utf-8")), 12)

    def test_code_points_of_the_text_as_checks_read_it(self):
        # docs/checks.md, "How checks read text": NFC, CRLF as one line end, no invisible
        # characters; a combining mark with no precomposed form stays a code point of its own.
        for text, count in (("e\u0301", 1), ("q\u0301", 2), ("a\r\nb", 3), ("a\u200bb", 2)):
            with self.subTest(text=text):
                self.assertPasses({"type": "char_count", "min": count, "max": count}, text)

    def test_whitespace_counts(self):
        self.assertPasses({"type": "char_count", "min": 5, "max": 5}, " a b ")
        self.assertFails({"type": "char_count", "min": 6}, " a b ", "5 characters, expected at least 6")


class OneRuleForBothSidesTest(CheckTestCase):
    """docs/checks.md, "How checks read text": what a check does to the output it does to its
    values and patterns; a value no output can match is refused when the file loads."""

    def test_crlf_in_a_value_is_the_line_end_it_stands_for(self):
        output = "Step 1: unplug it.\r\nStep 2: wait."
        for value in ("unplug it.\r\nStep 2", "unplug it.\nStep 2"):
            with self.subTest(value=value):  # not_contains passed on the verbatim CRLF text
                self.assertFails({"type": "not_contains", "values": [value]}, output)
                self.assertPasses({"type": "contains_all", "values": [value]}, output)
        self.assertPasses({"type": "equals", "value": output}, output)  # byte-identical
        self.assertPasses({"type": "starts_with", "value": "Step 1: unplug it.\r\n",
                           "strip": False}, output)

    def test_a_patterns_crlf_matches_the_line_end(self):
        output = "total: 3\r\nok"
        self.assertPasses({"type": "regex", "pattern": "3\\r\\nok"}, output)
        self.assertPasses({"type": "regex", "pattern": "3\r\nok"}, output)
        self.assertPasses({"type": "regex", "pattern": "^total: 3$", "flags": "m"}, output)
        # an escaped backslash before "r" is a literal backslash, not a carriage return
        self.assertFails({"type": "regex", "pattern": "\\\\r\\nok"}, output)

    def test_invisible_characters_do_not_split_words(self):
        output = "Your re\u200bfund was appro\u00adved."
        self.assertPasses({"type": "contains_all", "values": ["refund", "approved"]}, output)
        self.assertPasses({"type": "regex", "pattern": r"\brefund\b"}, output)
        self.assertPasses({"type": "equals", "value": "Your refund was approved."}, output)
        self.assertFails({"type": "contains_any", "values": ["x"]}, "\u200b", "the output is empty")

    def test_unicode_forms_match_in_patterns_too(self):
        self.assertPasses({"type": "regex", "pattern": "caf\u00e9"}, "cafe\u0301 au lait")
        self.assertPasses({"type": "regex", "pattern": "cafe\u0301"}, "caf\u00e9 au lait")

    def test_strip_takes_white_space_off_the_value_as_off_the_output(self):
        for check, output in (({"type": "equals", "value": " yes"}, "yes"),
                              ({"type": "equals", "value": "yes\n"}, " yes "),
                              ({"type": "starts_with", "value": " Dear"}, "Dear Ann"),
                              ({"type": "ends_with", "value": "Regards \t"}, "Kind Regards")):
            with self.subTest(check=check):
                self.assertEqual(evals.validate_check(check), [])
                self.assertPasses(check, output)
                self.assertFails(dict(check, strip=False), output)
        # the end that meets no end of the output keeps its white space
        self.assertFails({"type": "starts_with", "value": "Dear "}, "Dearest Ann")
        self.assertPasses({"type": "starts_with", "value": "Dear "}, "Dear Ann")
        self.assertEqual(evals.validate_check({"type": "contains_any", "values": [" a "]}), [])

    def test_a_value_of_white_space_only_is_refused(self):
        for check in ({"type": "equals", "value": " "}, {"type": "equals", "value": "\n",
                                                        "strip": False},
                      {"type": "starts_with", "value": " \u200b"},
                      {"type": "ends_with", "value": "\t"}):
            with self.subTest(check=check):
                self.assertProblem(check, f"parameter 'value': {check['value']!r} is only "
                                          "white space")
        self.assertEqual(evals.validate_check({"type": "ends_with", "value": "\t",
                                               "strip": False}), [])

    def test_a_value_of_invisible_characters_only_is_refused(self):
        # Once the invisible characters are removed it is "", which every output contains.
        self.assertProblem({"type": "not_contains", "values": ["ok", "\u200b"]},
                           "parameter 'values' must be a non-empty list of strings with a "
                           "visible character each")
        self.assertProblem({"type": "phrase_count", "phrase": "\u2060", "min": 1},
                           "parameter 'phrase' must be a string with a visible character")
        self.assertProblem({"type": "regex", "pattern": "\u00ad"}, "parameter 'pattern'")

    def test_a_zero_width_space_in_an_answer_on_the_command_line(self):
        # A zero-width space inside "refund" failed contains_all and regex (issue 21, item 8).
        import io, os, tempfile
        with tempfile.TemporaryDirectory() as folder:
            def write(name, row):
                with open(os.path.join(folder, name), "w", encoding="utf-8") as handle:
                    handle.write(json.dumps(row) + "\n")
            write("cases.jsonl", {"id": "zw", "input": "q", "checks": [
                {"type": "contains_all", "values": ["refund approved"]},
                {"type": "regex", "pattern": "\\brefund\\b"}]})
            write("rec.jsonl", {"id": "zw", "output": "Your re\u200bfund approved."})
            out, err = io.StringIO(), io.StringIO()
            code = evals.main(["--cases", os.path.join(folder, "cases.jsonl"), "--rescore",
                               os.path.join(folder, "rec.jsonl"), "--no-save"], out, err)
        self.assertEqual(code, 0, out.getvalue() + err.getvalue())
        self.assertIn("pass rate 100.0% (1/1)", out.getvalue())

    def test_the_case_file_names_line_and_parameter(self):
        import tempfile, os
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "cases.jsonl")
            with open(path, "w", encoding="utf-8") as handle:
                handle.write(json.dumps({"id": "a", "input": "q", "checks": [
                    {"type": "equals", "value": "  "}]}) + "\n")
            with self.assertRaises(evals.CaseFileError) as caught:
                evals.load_cases(path)
        self.assertIn(f"{path}:1: check 1: equals: parameter 'value': '  ' is only white space",
                      str(caught.exception))


class SentenceCountTest(CheckTestCase):
    def test_simple(self):
        output = "Cats run. Dogs bark! Why?"
        self.assertPasses({"type": "sentence_count", "min": 3, "max": 3}, output, "3 sentences")
        self.assertFails({"type": "sentence_count", "max": 2}, output,
                         "3 sentences, expected at most 2")

    def test_single_sentence_without_end_mark(self):
        self.assertPasses({"type": "sentence_count", "min": 1, "max": 1}, "just words",
                          "1 sentence,")

    def test_abbreviation_does_not_end_a_sentence(self):
        self.assertPasses({"type": "sentence_count", "min": 2, "max": 2},
                          "Dr. Smith arrived. He sat down.")

    def test_decimal_and_domain_are_not_boundaries(self):
        self.assertPasses({"type": "sentence_count", "min": 1, "max": 1},
                          "Version 3.5 is on example.com now.")

    def test_question_and_exclamation_end_sentences(self):
        self.assertPasses({"type": "sentence_count", "min": 3, "max": 3}, "Really? Yes! Good.")


class ParagraphCountTest(CheckTestCase):
    def test_blank_lines(self):
        output = "First para.\nStill first.\n\nSecond.\n \t\nThird.\n\n\n\n"
        self.assertPasses({"type": "paragraph_count", "min": 3, "max": 3}, output, "3 paragraphs")
        self.assertFails({"type": "paragraph_count", "min": 4}, output,
                         "3 paragraphs, expected at least 4")

    def test_crlf(self):
        self.assertPasses({"type": "paragraph_count", "min": 2, "max": 2}, "a\r\n\r\nb")

    def test_separator(self):
        output = "One\n\nstill one* * *Two* * *\n* * *"
        self.assertPasses({"type": "paragraph_count", "min": 2, "max": 2, "separator": "* * *"},
                          output)
        self.assertPasses({"type": "paragraph_count", "min": 1, "max": 1}, "no blank lines\nhere")


class LineCountTest(CheckTestCase):
    def test_non_blank_lines(self):
        output = "a\n\n   \nb\r\nc\n"
        self.assertPasses({"type": "line_count", "min": 3, "max": 3}, output, "3 non-blank lines")
        self.assertFails({"type": "line_count", "max": 2}, output, "expected at most 2")


class BulletCountTest(CheckTestCase):
    OUTPUT = ("Intro\n- one\n* two\n  + three\n1. four\n2) five\n**bold** line\n-not a bullet\n"
              "---\n- \n")

    def test_bullets(self):
        self.assertPasses({"type": "bullet_count", "min": 3, "max": 3}, self.OUTPUT,
                          "3 bullet items")
        self.assertFails({"type": "bullet_count", "min": 4}, self.OUTPUT, "expected at least 4")

    def test_numbered(self):
        self.assertPasses({"type": "bullet_count", "min": 5, "max": 5, "numbered": True},
                          self.OUTPUT)

    def test_no_bullets(self):
        self.assertPasses({"type": "bullet_count", "max": 0}, "plain text", "0 bullet items")


class LetterCaseTest(CheckTestCase):
    def test_upper(self):
        check = {"type": "letter_case", "style": "upper"}
        self.assertPasses(check, "HELLO, WORLD 123!", "all letters are upper case")
        self.assertFails(check, "HELLo", "1 letter not upper case: 'o'")
        self.assertFails(check, "Hello", "4 letters not upper case: 'e', 'l', 'o'")

    def test_lower(self):
        check = {"type": "letter_case", "style": "lower"}
        self.assertPasses(check, "hello, world 42", "all letters are lower case")
        self.assertPasses(check, "straße café")
        self.assertFails(check, "hello World", "1 letter not lower case: 'W'")

    def test_no_letters_fails_both_styles(self):
        for style in ("upper", "lower"):
            with self.subTest(style):
                self.assertFails({"type": "letter_case", "style": style}, "123 -- !!",
                                 "the output has no letters")


class UppercaseWordCountTest(CheckTestCase):
    def test_count(self):
        output = "NASA and the FBI said NO."
        self.assertPasses({"type": "uppercase_word_count", "min": 3, "max": 3}, output,
                          "3 all-capitals words")
        self.assertFails({"type": "uppercase_word_count", "max": 2}, output, "expected at most 2")

    def test_digits_are_not_capitals(self):
        # words: NASA, 2024, rocks; only NASA is all capitals
        self.assertPasses({"type": "uppercase_word_count", "min": 1, "max": 1}, "NASA-2024 rocks")

    def test_none(self):
        self.assertPasses({"type": "uppercase_word_count", "max": 0}, "all quiet here",
                          "0 all-capitals words")
        self.assertFails({"type": "uppercase_word_count", "min": 1}, "Mixed Case Only")


class LanguageTest(CheckTestCase):
    ENGLISH = "The quick brown fox jumps over the lazy dog and then it runs back home."
    GREEK = "Καλημέρα σας, πώς είστε σήμερα; Ο καιρός είναι πολύ ωραίος."

    def test_english(self):
        self.assertPasses({"type": "language", "code": "en"}, self.ENGLISH, "language is 'en'")

    def test_other_script(self):
        self.assertPasses({"type": "language", "code": "el"}, self.GREEK)
        self.assertFails({"type": "language", "code": "en"}, self.GREEK,
                         "language looks like 'el', expected 'en'")

    def test_no_letters(self):
        self.assertFails({"type": "language", "code": "en"}, "12345 !!!",
                         "language looks like 'und'")


# ---------------------------------------------------------------------------------------------
# negate
# ---------------------------------------------------------------------------------------------


class NegateTest(CheckTestCase):
    def test_contains_any(self):
        check = {"type": "contains_any", "values": ["guarantee"], "negate": True}
        self.assertPasses(check, "No promises.", "negated: does not hold: none of 'guarantee' found")
        self.assertFails(check, "We guarantee it.", "negated: holds, but must not: found 'guarantee'")

    def test_regex(self):
        check = {"type": "regex", "pattern": r"refund(ed)? instantly", "negate": True}
        self.assertPasses(check, "Refunds take five days.", "no match for /refund(ed)? instantly/")
        self.assertFails(check, "You will be refunded instantly.",
                         "holds, but must not: matched 'refunded instantly'")

    def test_bounds(self):
        check = {"type": "word_count", "max": 3, "negate": True}
        self.assertPasses(check, "one two three four", "negated: does not hold: 4 words")
        self.assertFails(check, "one two", "negated: holds, but must not: 2 words")

    def test_json_valid(self):
        check = {"type": "json_valid", "negate": True}
        self.assertPasses(check, "plain prose", "not valid JSON")
        self.assertFails(check, '{"a": 1}', "valid JSON (dict)")

    def test_negate_false_is_identity(self):
        check = {"type": "contains_any", "values": ["x"], "negate": False}
        self.assertEqual(run(check, "x"), run({"type": "contains_any", "values": ["x"]}, "x"))


# ---------------------------------------------------------------------------------------------
# JSON
# ---------------------------------------------------------------------------------------------


class JsonValidTest(CheckTestCase):
    CHECK = {"type": "json_valid"}

    def test_valid_values(self):
        self.assertPasses(self.CHECK, '{"a": 1, "b": [true, null]}', "valid JSON (dict)")
        self.assertPasses(self.CHECK, "[1, 2]", "valid JSON (list)")
        self.assertPasses(self.CHECK, '"text"', "valid JSON (str)")

    def test_nan_and_infinity_rejected(self):
        for constant in ("NaN", "Infinity", "-Infinity"):
            with self.subTest(constant):
                self.assertFails(self.CHECK, '{"a": %s}' % constant,
                                 f"{constant} is not a JSON value")
                self.assertFails(self.CHECK, constant, "not valid JSON")

    def test_not_json(self):
        self.assertFails(self.CHECK, "Sure! Here is the data.", "not valid JSON")
        self.assertFails(self.CHECK, "{'a': 1}", "not valid JSON")  # single quotes
        self.assertFails(self.CHECK, '{"a": 1,}', "not valid JSON")  # trailing comma

    def test_trailing_garbage(self):
        self.assertFails(self.CHECK, '{"a": 1} Hope this helps!', "Extra data")
        self.assertFails(self.CHECK, '{"a": 1}{"b": 2}', "Extra data")

    def test_surrounding_whitespace_is_allowed(self):
        self.assertPasses(self.CHECK, ' \n\t{"a": 1}\r\n ')

    def test_byte_order_mark_rejected(self):
        # RFC 8259 8.1: a BOM must not be added; parsers may reject it. We do, with a reason.
        self.assertFails(self.CHECK, '\ufeff{"a": 1}', "BOM")

    def test_fence_wrapping_the_whole_output(self):
        fenced = '```json\n{"a": 1}\n```'
        self.assertFails(self.CHECK, fenced, "a ``` fence around the JSON; set allow_fence")
        self.assertPasses({"type": "json_valid", "allow_fence": True}, fenced)
        self.assertPasses({"type": "json_valid", "allow_fence": True}, '\n```\n[1, 2]\n```\n')
        self.assertPasses({"type": "json_valid", "allow_fence": True}, '```JSON\n"x"\n```')

    def test_a_lone_fence_as_ifeval_strips_it(self):
        # IFEval's JsonFormat strips an opening and a closing fence each on its own: a model that
        # drops one of the two still answered with JSON only.
        allowed = {"type": "json_valid", "allow_fence": True}
        for output in ('{"a": 1}\n```', '[1, 2]```', '```json\n{"a": 1}', '```{"a": 1}```'):
            with self.subTest(output):
                self.assertPasses(allowed, output)
                self.assertFails(self.CHECK, output, "set allow_fence")
        for output in ('{"a": 1}\n```\nMore', '```python\n{"a": 1}\n```', '```\n```'):
            with self.subTest(output):
                self.assertFails(allowed, output, "not valid JSON")
                self.assertNotIn("allow_fence", self.assertFails(self.CHECK, output).reason)

    def test_multiline_fence(self):
        fenced = '```json\n{\n  "a": 1,\n  "b": [\n    2\n  ]\n}\n```'
        self.assertFails(self.CHECK, fenced, "set allow_fence")
        self.assertPasses({"type": "json_valid", "allow_fence": True}, fenced)
        self.assertPasses({"type": "json_valid", "allow_fence": True},
                          fenced.replace("\n", "\r\n"))

    def test_allow_fence_accepts_unfenced_json(self):
        self.assertPasses({"type": "json_valid", "allow_fence": True}, '{"a": 1}')

    def test_fence_inside_prose_rejected(self):
        output = 'Here you go:\n```json\n{"a": 1}\n```'
        for allow in (False, True):
            with self.subTest(allow_fence=allow):
                result = self.assertFails({"type": "json_valid", "allow_fence": allow}, output,
                                          "not valid JSON")
                self.assertNotIn("allow_fence", result.reason)
        self.assertFails({"type": "json_valid", "allow_fence": True},
                         '```json\n{"a": 1}\n```\nLet me know!')

    def test_fenced_invalid_json_still_fails(self):
        self.assertFails({"type": "json_valid", "allow_fence": True}, '```json\n{a: 1}\n```',
                         "not valid JSON")

    def test_deeply_nested_input_is_a_failure_not_a_crash(self):
        deep = "[" * 100000 + "]" * 100000
        result = run(self.CHECK, deep)
        self.assertFalse(result.passed)
        self.assertIn("nested too deeply", result.reason)
        self.assertFalse(run({"type": "json_schema", "schema": {"type": "array"}}, deep).passed)


class JsonKeysTest(CheckTestCase):
    def test_subset(self):
        check = {"type": "json_keys", "keys": ["name", "age"]}
        self.assertPasses(check, '{"name": "Ann", "age": 3, "city": "Oslo"}',
                          "has keys 'name', 'age'")
        self.assertFails(check, '{"name": "Ann"}', "missing keys: 'age'")

    def test_exact(self):
        check = {"type": "json_keys", "keys": ["name", "age"], "exact": True}
        self.assertPasses(check, '{"age": 3, "name": "Ann"}')
        self.assertFails(check, '{"name": "Ann", "age": 3, "city": "Oslo"}',
                         "unexpected keys: 'city'")
        self.assertFails(check, '{"name": "Ann"}', "missing keys: 'age'")

    def test_not_an_object(self):
        check = {"type": "json_keys", "keys": ["name"]}
        self.assertFails(check, '["name", "age"]', "JSON is an array, expected an object")
        result = self.assertFails(check, '"my name is Ann"', "expected an object")
        self.assertIn("string", result.reason)
        self.assertFails(check, "42", "expected an object")
        self.assertFails(check, "null", "expected an object")

    def test_article_in_reason(self):
        self.assertIn("JSON is a string", run({"type": "json_keys", "keys": ["k"]}, '"k"').reason)
        self.assertIn("JSON is a number", run({"type": "json_keys", "keys": ["k"]}, "7").reason)
        self.assertIn("JSON is an array", run({"type": "json_keys", "keys": ["k"]}, "[]").reason)
        self.assertIn("JSON is null", run({"type": "json_keys", "keys": ["k"]}, "null").reason)

    def test_nested_keys_do_not_count(self):
        self.assertFails({"type": "json_keys", "keys": ["age"]}, '{"person": {"age": 3}}',
                         "missing keys: 'age'")

    def test_invalid_json(self):
        self.assertFails({"type": "json_keys", "keys": ["a"]}, '{"a": NaN}', "NaN")
        self.assertFails({"type": "json_keys", "keys": ["a"]}, '{"a": 1} trailing', "Extra data")

    def test_fence(self):
        fenced = '```json\n{"a": 1}\n```'
        self.assertFails({"type": "json_keys", "keys": ["a"]}, fenced, "set allow_fence")
        self.assertPasses({"type": "json_keys", "keys": ["a"], "allow_fence": True}, fenced)


class JsonSchemaTest(CheckTestCase):
    def schema(self, schema, output):
        return run({"type": "json_schema", "schema": schema}, output)

    def assertSchemaPasses(self, schema, output):
        result = self.schema(schema, output)
        self.assertTrue(result.passed, f"{schema} on {output}: {result.reason}")
        self.assertEqual(result.reason, "matches the schema")

    def assertSchemaFails(self, schema, output, reason):
        result = self.schema(schema, output)
        self.assertFalse(result.passed, f"{schema} on {output} passed")
        self.assertIn(reason, result.reason)
        return result

    def test_an_integer_too_large_for_a_float_is_a_number(self):
        schema = {"type": "integer", "minimum": 10 ** 400}
        self.assertEqual(evals.validate_check({"type": "json_schema", "schema": schema}), [])
        self.assertSchemaPasses(schema, "1" + "0" * 400)
        self.assertSchemaFails(schema, "5", "$: 5 is not at least 1000")

    def test_type(self):
        self.assertSchemaPasses({"type": "object"}, "{}")
        self.assertSchemaFails({"type": "object"}, "[]", "$: expected object, got array")
        self.assertSchemaPasses({"type": "string"}, '"x"')
        self.assertSchemaPasses({"type": "null"}, "null")
        self.assertSchemaPasses({"type": "boolean"}, "false")
        self.assertSchemaPasses({"type": ["string", "null"]}, "null")
        self.assertSchemaFails({"type": ["string", "null"]}, "3",
                               "$: expected string or null, got number")

    def test_integer_and_number(self):
        self.assertSchemaPasses({"type": "integer"}, "1")
        self.assertSchemaPasses({"type": "integer"}, "1.0")
        self.assertSchemaPasses({"type": "integer"}, "-2e3")
        self.assertSchemaFails({"type": "integer"}, "1.5", "$: expected integer, got number")
        self.assertSchemaPasses({"type": "number"}, "1.5")
        self.assertSchemaPasses({"type": "number"}, "7")
        self.assertSchemaFails({"type": "number"}, "true", "$: expected number, got boolean")
        self.assertSchemaFails({"type": "integer"}, "true", "expected integer, got boolean")
        self.assertSchemaFails({"type": "integer"}, '"1"', "expected integer, got string")

    def test_huge_integer(self):
        big = "1" + "0" * 400  # larger than any float
        self.assertSchemaPasses({"type": "integer"}, big)
        self.assertSchemaFails({"type": "integer", "maximum": 10}, big, "is not at most 10")

    def test_properties_and_nested_paths(self):
        schema = {"type": "object", "properties": {
            "user": {"type": "object", "properties": {"age": {"type": "integer"}}},
            "tags": {"type": "array", "items": {"type": "string"}},
        }}
        self.assertSchemaPasses(schema, '{"user": {"age": 3}, "tags": ["a"]}')
        self.assertSchemaFails(schema, '{"user": {"age": "x"}}',
                               "$.user.age: expected integer, got string")
        self.assertSchemaFails(schema, '{"tags": ["a", 2]}', "$.tags[1]: expected string, got number")

    def test_required(self):
        schema = {"type": "object", "required": ["id", "name"]}
        self.assertSchemaPasses(schema, '{"id": 1, "name": "x"}')
        result = self.assertSchemaFails(schema, '{"name": "x"}', "$: missing required key 'id'")
        self.assertNotIn("'name'", result.reason)

    def test_additional_properties_false(self):
        schema = {"type": "object", "properties": {"a": {}}, "additionalProperties": False}
        self.assertSchemaPasses(schema, '{"a": 1}')
        self.assertSchemaFails(schema, '{"a": 1, "extra": 2}', "$: unexpected key 'extra'")

    def test_additional_properties_schema(self):
        schema = {"properties": {"a": {"type": "integer"}},
                  "additionalProperties": {"type": "string"}}
        self.assertSchemaPasses(schema, '{"a": 1, "b": "x"}')
        self.assertSchemaFails(schema, '{"a": 1, "b": 2}', "$.b: expected string, got number")

    def test_items(self):
        schema = {"type": "array", "items": {"type": "integer", "minimum": 0}}
        self.assertSchemaPasses(schema, "[0, 1, 2]")
        self.assertSchemaPasses(schema, "[]")
        self.assertSchemaFails(schema, "[0, -1]", "$[1]: -1 is not at least 0")

    def test_enum(self):
        schema = {"enum": ["red", "green", 1]}
        self.assertSchemaPasses(schema, '"red"')
        self.assertSchemaPasses(schema, "1.0")
        self.assertSchemaFails(schema, '"blue"', '$: "blue" not one of ["red", "green", 1]')
        self.assertSchemaFails(schema, "true", "not one of")

    def test_const(self):
        self.assertSchemaPasses({"const": {"a": [1, 2]}}, '{"a": [1, 2.0]}')
        self.assertSchemaFails({"const": {"a": [1, 2]}}, '{"a": [2, 1]}', '$: expected {"a": [1, 2]}')
        self.assertSchemaFails({"const": 0}, "false", "$: expected 0")
        self.assertSchemaFails({"const": None}, "0", "$: expected null")

    def test_minimum_maximum_inclusive(self):
        schema = {"minimum": 5, "maximum": 10}
        self.assertSchemaPasses(schema, "5")
        self.assertSchemaPasses(schema, "10")
        self.assertSchemaFails(schema, "4.99", "$: 4.99 is not at least 5")
        self.assertSchemaFails(schema, "11", "$: 11 is not at most 10")
        # numeric bounds do not apply to other types
        self.assertSchemaPasses(schema, '"3"')

    def test_exclusive_bounds(self):
        schema = {"exclusiveMinimum": 5, "exclusiveMaximum": 10}
        self.assertSchemaPasses(schema, "6")
        self.assertSchemaFails(schema, "5", "$: 5 is not more than 5")
        self.assertSchemaFails(schema, "10", "$: 10 is not less than 10")

    def test_string_length_in_code_points(self):
        schema = {"minLength": 2, "maxLength": 3}
        self.assertSchemaPasses(schema, '"\u00dfe"')
        self.assertSchemaPasses(schema, '"\U0001F44D\U0001F44D\U0001F44D"')
        self.assertSchemaFails(schema, '"abcd"', "$: 4 characters, expected at most 3")
        self.assertSchemaFails(schema, '"a"', "$: 1 character, expected at least 2")

    def test_pattern_is_unanchored_search(self):
        self.assertSchemaPasses({"pattern": r"\d"}, '"x1y"')
        self.assertSchemaPasses({"pattern": "^[A-Z]{3}$"}, '"ABC"')
        self.assertSchemaFails({"pattern": "^[A-Z]{3}$"}, '"ABCD"',
                               "$: 'ABCD' does not match /^[A-Z]{3}$/")

    def test_min_max_items(self):
        schema = {"minItems": 1, "maxItems": 2}
        self.assertSchemaPasses(schema, "[1]")
        self.assertSchemaFails(schema, "[]", "$: 0 items, expected at least 1")
        self.assertSchemaFails(schema, "[1, 2, 3]", "$: 3 items, expected at most 2")

    def test_boolean_subschemas(self):
        self.assertSchemaPasses({"properties": {"a": True}}, '{"a": 1}')
        self.assertSchemaFails({"properties": {"a": False}}, '{"a": 1}', "$.a: not allowed")

    def test_annotations_are_ignored(self):
        self.assertSchemaPasses({"$schema": "https://json-schema.org/draft/2020-12/schema",
                                 "title": "T", "description": "D", "default": 1,
                                 "examples": [1], "type": "integer"}, "1")

    def test_many_errors_are_summarised(self):
        schema = {"type": "object", "required": ["a", "b", "c", "d", "e"]}
        result = self.assertSchemaFails(schema, "{}", "(+2 more)")
        self.assertEqual(result.reason.count("missing required key"), 3)

    def test_invalid_json_and_fence(self):
        self.assertSchemaFails({"type": "object"}, '{"a": NaN}', "NaN is not a JSON value")
        fenced = '```json\n{"a": 1}\n```'
        self.assertSchemaFails({"type": "object"}, fenced, "set allow_fence")
        self.assertPasses({"type": "json_schema", "schema": {"type": "object"},
                           "allow_fence": True}, fenced)

    # schema definition errors, reported by validate_check

    def test_unsupported_keyword_is_named(self):
        problems = self.assertProblem({"type": "json_schema", "schema": {"patternProperties": {}}},
                                      "schema: unsupported keyword 'patternProperties'")
        self.assertIn("supported:", problems[0])
        self.assertProblem({"type": "json_schema",
                            "schema": {"properties": {"a": {"minProperties": 1}}}},
                           "schema.properties.a: unsupported keyword 'minProperties'")
        self.assertProblem({"type": "json_schema", "schema": {"items": {"oneOf": []}}},
                           "schema.items: unsupported keyword 'oneOf'")

    def test_bad_pattern(self):
        self.assertProblem({"type": "json_schema", "schema": {"pattern": "(unclosed"}},
                           "schema.pattern is not a valid regular expression")

    def test_impossible_bounds(self):
        self.assertProblem({"type": "json_schema", "schema": {"minLength": 5, "maxLength": 2}},
                           "impossible bounds, minLength 5 > maxLength 2")
        self.assertProblem({"type": "json_schema", "schema": {"minItems": 3, "maxItems": 1}},
                           "impossible bounds, minItems 3 > maxItems 1")
        self.assertProblem({"type": "json_schema", "schema": {"minimum": 3, "maximum": 1}},
                           "impossible bounds, minimum 3 > maximum 1")
        self.assertEqual(evals.validate_check({"type": "json_schema",
                                               "schema": {"minLength": 2, "maxLength": 2}}), [])

    def test_bad_keyword_values(self):
        self.assertProblem({"type": "json_schema", "schema": {"type": "int"}},
                           "schema.type must be one of")
        self.assertProblem({"type": "json_schema", "schema": {"type": []}},
                           "schema.type must be one of")
        self.assertProblem({"type": "json_schema", "schema": {"minLength": -1}},
                           "schema.minLength must be a non-negative integer")
        self.assertProblem({"type": "json_schema", "schema": {"maxItems": True}},
                           "schema.maxItems must be a non-negative integer")
        self.assertProblem({"type": "json_schema", "schema": {"minimum": "3"}},
                           "schema.minimum must be a number")
        self.assertProblem({"type": "json_schema", "schema": {"enum": []}},
                           "schema.enum must be a non-empty list")
        self.assertProblem({"type": "json_schema", "schema": {"required": "id"}},
                           "schema.required must be a list of strings")
        self.assertProblem({"type": "json_schema", "schema": {"properties": []}},
                           "schema.properties must be an object")
        self.assertProblem({"type": "json_schema", "schema": "object"},
                           "schema must be an object or a boolean")


# ---------------------------------------------------------------------------------------------
# validate_check
# ---------------------------------------------------------------------------------------------


class ValidateCheckTest(CheckTestCase):
    def test_unknown_type_suggests_and_lists(self):
        problems = self.assertProblem({"type": "contain_any", "values": ["a"]},
                                      "unknown check type 'contain_any'")
        self.assertIn("did you mean 'contains_any'?", problems[0])
        for name in evals.CHECKS:
            self.assertIn(name, problems[0])

    def test_unknown_type_without_close_name(self):
        problems = self.assertProblem({"type": "qqqqqqqq"},
                                      "unknown check type 'qqqqqqqq'. Known types: ")
        self.assertNotIn("did you mean", problems[0])
        self.assertIn("json_schema", problems[0])

    def test_missing_or_bad_type(self):
        self.assertProblem({"values": ["a"]}, "has no 'type'")
        self.assertProblem({"type": 3}, "has no 'type'")

    def test_not_a_dict(self):
        self.assertProblem(["contains_any"], "must be an object, got array")
        self.assertProblem("contains_any", "must be an object, got string")
        self.assertProblem(None, "must be an object, got null")

    def test_unknown_parameter(self):
        problems = self.assertProblem({"type": "max_words", "n": 5, "max": 3},
                                      "max_words: unknown parameter 'max'")
        self.assertIn("allowed: negate, on, n", problems[0])
        self.assertProblem({"type": "contains_any", "values": ["a"], "case_sensitive": True},
                           "unknown parameter 'case_sensitive'")

    def test_missing_required(self):
        self.assertProblem({"type": "contains_any"}, "contains_any: missing required parameter 'values'")
        self.assertProblem({"type": "regex"}, "missing required parameter 'pattern'")
        self.assertProblem({"type": "json_schema"}, "missing required parameter 'schema'")
        self.assertProblem({"type": "letter_case"}, "missing required parameter 'style'")

    def test_wrong_typed_parameters(self):
        self.assertProblem({"type": "contains_any", "values": "refund"},
                           "parameter 'values' must be a non-empty list of strings with a visible character each")
        self.assertProblem({"type": "contains_any", "values": []}, "parameter 'values' must be")
        self.assertProblem({"type": "contains_any", "values": [""]}, "parameter 'values' must be")
        self.assertProblem({"type": "contains_any", "values": ["a", 1]}, "parameter 'values' must be")
        self.assertProblem({"type": "equals", "value": ""}, "parameter 'value' must be a string with a visible character")
        self.assertProblem({"type": "contains_any", "values": ["a"], "ignore_case": "yes"},
                           "parameter 'ignore_case' must be true or false")
        self.assertProblem({"type": "contains_any", "values": ["a"], "negate": 1},
                           "parameter 'negate' must be true or false")
        self.assertProblem({"type": "letter_case", "style": "title"},
                           "parameter 'style' must be one of 'upper', 'lower'")
        self.assertProblem({"type": "word_count", "max": 3, "split": "tokens"},
                           "parameter 'split' must be one of")
        self.assertProblem({"type": "language", "code": "english"},
                           "parameter 'code' must be an ISO 639-1 code")
        self.assertProblem({"type": "starts_with", "value": "a", "paragraph": 0},
                           "parameter 'paragraph' must be an integer of 1 or more")

    def test_counts(self):
        for bad in (-1, 2.5, 3.0, "3", None):
            with self.subTest(n=bad):
                self.assertProblem({"type": "max_words", "n": bad},
                                   "parameter 'n' must be a non-negative integer")
        self.assertEqual(evals.validate_check({"type": "max_words", "n": 0}), [])

    def test_bool_is_not_a_count(self):
        self.assertProblem({"type": "max_words", "n": True}, "parameter 'n' must be a non-negative integer")
        self.assertProblem({"type": "word_count", "max": False}, "parameter 'max' must be")
        self.assertProblem({"type": "regex", "pattern": "a", "min_matches": True},
                           "parameter 'min_matches' must be")
        self.assertProblem({"type": "starts_with", "value": "a", "paragraph": True},
                           "parameter 'paragraph' must be")

    def test_invalid_regex(self):
        self.assertProblem({"type": "regex", "pattern": "(unclosed"},
                           "regex: parameter 'pattern' is not a valid regular expression")
        self.assertProblem({"type": "regex", "pattern": ""}, "must be a string with a visible character")
        self.assertProblem({"type": "regex", "pattern": ["a"]}, "must be a string with a visible character")

    def test_pattern_is_validated_with_its_flags(self):
        # In verbose mode "#" starts a comment, so the "(" is not part of the pattern.
        check = {"type": "regex", "pattern": r"\d+ # a number (any length", "flags": "x"}
        self.assertEqual(evals.validate_check(check), [])
        self.assertTrue(run(check, "abc 42").passed)
        self.assertProblem({"type": "regex", "pattern": r"\d+ # a number (any length"},
                           "not a valid regular expression")

    def test_bad_flags(self):
        for flags in ("g", "iu", 1, ["i"]):
            with self.subTest(flags=flags):
                self.assertProblem({"type": "regex", "pattern": "a", "flags": flags},
                                   "parameter 'flags' must be a string of regex flag letters")
        self.assertEqual(evals.validate_check({"type": "regex", "pattern": "a", "flags": "imsx"}), [])

    def test_impossible_bounds(self):
        self.assertProblem({"type": "word_count", "min": 5, "max": 3},
                           "word_count: impossible bounds, min 5 > max 3")
        self.assertProblem({"type": "phrase_count", "phrase": "a", "min": 2, "max": 1},
                           "impossible bounds, min 2 > max 1")
        self.assertEqual(evals.validate_check({"type": "word_count", "min": 3, "max": 3}), [])
        self.assertProblem({"type": "regex", "pattern": "a", "min_matches": 3, "max_matches": 1},
                           "regex: impossible bounds, min_matches 3 > max_matches 1")
        problems = self.assertProblem({"type": "regex", "pattern": "a", "max_matches": 0},
                                      "min_matches 1 > max_matches 0")
        self.assertIn("set min_matches to 0", problems[0])

    def test_no_bounds(self):
        for name in ("word_count", "char_count", "sentence_count", "paragraph_count",
                     "line_count", "bullet_count", "uppercase_word_count"):
            with self.subTest(name):
                self.assertProblem({"type": name}, f"{name}: give 'min', 'max' or both")
        self.assertProblem({"type": "phrase_count", "phrase": "a"}, "give 'min', 'max' or both")

    def test_all_problems_reported_together(self):
        problems = evals.validate_check({"type": "contains_any", "values": "x", "colour": 1,
                                         "negate": "no"})
        self.assertEqual(len(problems), 3, problems)

    def test_load_cases_reports_check_problems(self):
        import os
        import tempfile
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "cases.jsonl")
            with open(path, "w", encoding="utf-8") as handle:
                handle.write(json.dumps({"id": "a", "input": "x", "checks": [
                    {"type": "max_words", "n": True}]}) + "\n")
            with self.assertRaises(evals.CaseFileError) as caught:
                evals.load_cases(path)
        self.assertIn(":1: check 1: max_words: parameter 'n'", str(caught.exception))


# ---------------------------------------------------------------------------------------------
# run_check and evaluate
# ---------------------------------------------------------------------------------------------


class EmptyOutputTest(CheckTestCase):
    def test_empty_and_whitespace_fail_every_check(self):
        for output in ("", " ", "\n\t \r\n"):
            for name, check in VALID_EXAMPLES.items():
                if name in ("judge", "python") or evals.CHECKS[name].whole:
                    # judge: tests/test_judge.py; python: UserCheckTest; the checks of the
                    # whole reply score the call (tool calls, ending: tests/test_whole_reply.py;
                    # latency, cost: tests/test_rates.py), which an empty text has too
                    continue
                for negate in (False, True):
                    with self.subTest(output=output, check=name, negate=negate):
                        result = run({**check, "negate": negate}, output)
                        self.assertFalse(result.passed)
                        self.assertEqual(result.reason, "the output is empty")

    def test_a_budget_scores_the_call_of_an_empty_answer(self):
        self.assertTrue(run({"type": "max_latency_s", "seconds": 1},
                            evals.Answer("", latency_s=0.2)).passed)
        self.assertFalse(run({"type": "max_cost_usd", "usd": 0.001},
                             evals.Answer(" ", cost_usd=0.01)).passed)

    def test_checks_that_an_empty_output_would_satisfy(self):
        for check in ({"type": "not_contains", "values": ["refund"]},
                      {"type": "max_words", "n": 5},
                      {"type": "word_count", "max": 5},
                      {"type": "regex", "pattern": "x", "min_matches": 0},
                      {"type": "contains_any", "values": ["x"], "negate": True}):
            with self.subTest(check=check):
                self.assertFalse(run(check, "").passed)
                self.assertFalse(run(check, "  \n").passed)
                self.assertTrue(run(check, "ok").passed)

    def test_an_invalid_check_raises_what_the_case_file_would_say(self):
        # One validation for the command line and the API: run_check scored "STOP" and
        # unknown types were a bare KeyError.
        for check in ({"type": "nope"}, {"type": "finish_reason", "values": ["STOP"]},
                      {"type": "contains_any", "values": ["a"], "ignore_case": "yes"}):
            with self.subTest(check=check), self.assertRaises(ValueError) as caught:
                evals.run_check(check, "text")
            self.assertEqual(str(caught.exception), "; ".join(evals.validate_check(check)))


class EvaluateTest(CheckTestCase):
    def test_status_and_check_dicts(self):
        case = evals.Case(id="c", input="q", checks=(
            {"type": "contains_all", "values": ["manager approval"]},
            {"type": "max_words", "n": 3},
        ))
        status, checks = evals.evaluate(case, "manager approval needed")
        self.assertEqual(status, "pass")
        self.assertEqual([c["type"] for c in checks], ["contains_all", "max_words"])
        status, checks = evals.evaluate(case, "a refund is on its way")
        self.assertEqual(status, "fail")
        self.assertEqual(checks[0], {"type": "contains_all", "passed": False,
                                     "reason": "missing: 'manager approval'"})
        self.assertEqual(checks[1]["reason"], "6 words, expected at most 3")
        self.assertFalse(checks[1]["passed"])

    def test_one_failing_check_fails_the_case(self):
        case = evals.Case(id="c", input="q", checks=(
            {"type": "contains_any", "values": ["a"]}, {"type": "equals", "value": "b"}))
        self.assertEqual(evals.evaluate(case, "a")[0], "fail")


# ---------------------------------------------------------------------------------------------
# Equivalence with the original 50-line harness
# ---------------------------------------------------------------------------------------------


def check(output: str, c: dict) -> bool:
    """The original harness's check function, verbatim: the oracle."""
    t = c["type"]
    low = output.lower()
    if t == "contains_any":
        return any(v.lower() in low for v in c["values"])
    if t == "not_contains":
        return not any(v.lower() in low for v in c["values"])
    if t == "max_words":
        return len(output.split()) <= c["n"]
    if t == "regex":
        return re.search(c["pattern"], output) is not None
    if t == "json_keys":
        try:
            obj = json.loads(output)
        except ValueError:
            return False
        return all(k in obj for k in c["keys"])
    raise ValueError(f"unknown check {t}")


SEED_CHECKS = [
    {"type": "contains_any", "values": ["the"]},
    {"type": "contains_any", "values": ["Paris", "London", "tokyo"]},
    {"type": "contains_any", "values": ["P.S.", "p.p.s"]},
    {"type": "contains_any", "values": ["STRASSE", "straße"]},
    {"type": "contains_any", "values": ["\u00c9t\u00e9", "ÜBER"]},
    {"type": "contains_any", "values": ["*", "#"]},
    {"type": "not_contains", "values": [","]},
    {"type": "not_contains", "values": ["I'm sorry", "as an AI", "cannot"]},
    {"type": "not_contains", "values": ["JSON", "```"]},
    {"type": "not_contains", "values": ["ß"]},
    {"type": "max_words", "n": 0},
    {"type": "max_words", "n": 1},
    {"type": "max_words", "n": 40},
    {"type": "max_words", "n": 100},
    {"type": "max_words", "n": 300},
    {"type": "max_words", "n": 1000},
    {"type": "regex", "pattern": r"\d"},
    {"type": "regex", "pattern": r"^#"},
    {"type": "regex", "pattern": r"(?m)^\* "},
    {"type": "regex", "pattern": r"[A-Z]{3,}"},
    {"type": "regex", "pattern": r"\bthe\b"},
    {"type": "regex", "pattern": r"(?i)p\.s\."},
    {"type": "regex", "pattern": r"<<[^>]+>>"},
    {"type": "regex", "pattern": r"\?$"},
    {"type": "json_keys", "keys": ["name"]},
    {"type": "json_keys", "keys": ["name", "age"]},
    {"type": "json_keys", "keys": ["a"]},
]

EDGE_OUTPUTS = [
    "x", "The end.", "THE END", "Die Straße ist lang.", "DIE STRASSE IST LANG", "strasse",
    "\u00e9t\u00e9 \u00fcber alles", "Open the \ufb01le", "\u03a3\u039f\u03a6\u039f\u03a3",
    "one\u00a0two three", "line1\u2028line2", "  padded  ", "tab\tseparated\nlines",
    "P.S. see you", "PS: no", "<<Title>>\nbody", "Is it?", "Is it?\n", "#heading",
    "* item\n* item", "I'm sorry, as an AI I cannot.", "```json\n{\"name\": 1}\n```",
    '{"name": "Ann", "age": 3}', '{"name": "Ann"}', '{"a": 1, "name": null}', '{}',
    '{"name": 1} trailing', '  {"name": 1, "age": 2}\n', '\ufeff{"name": 1}',
    '["name", "age"]', '"name and age"', "42", "null", "true", "[]", '""',
    '{"name": NaN, "age": 1}', '{"a": Infinity}', '{"a": -Infinity}', "NaN",
    '{"name": "x", "name": "y"}', '{"nested": {"name": 1}}', "word " * 40, "word " * 41,
]


def _casefold_oracle(output, c):
    """The oracle with casefold in place of lower: the documented difference for phrases."""
    folded = output.casefold()
    found = any(v.casefold() in folded for v in c["values"])
    return found if c["type"] == "contains_any" else not found


def _oracle_json_difference(output):
    """Why our json_keys may differ from the oracle's on `output`, or None if it must not."""
    try:
        value = json.loads(output)
    except ValueError:
        return None  # both reject
    if not isinstance(value, dict):
        return "not an object"
    try:
        json.loads(output, parse_constant=evals._reject_constant)
    except ValueError:
        return "NaN/Infinity"
    return None


def load_corpus():
    outputs = list(EDGE_OUTPUTS)
    path = IFEVAL_DIR / "responses_gpt4.jsonl"
    if path.exists():
        with open(path, encoding="utf-8") as handle:
            outputs.extend(json.loads(line)["response"] for line in handle if line.strip())
    return outputs


class OracleEquivalenceTest(unittest.TestCase):
    def test_seed_checks_are_valid(self):
        for c in SEED_CHECKS:
            self.assertEqual(evals.validate_check(c), [], c)

    def assert_equivalent(self, outputs):
        exact = explained = 0
        for output in outputs:
            if not output.strip():
                continue
            for c in SEED_CHECKS:
                ours = evals.run_check(c, output).passed
                kind = c["type"]
                if kind in ("contains_any", "not_contains"):
                    texts = [output, *c["values"]]
                    if all(t.lower() == t.casefold() for t in texts):
                        self.assertEqual(ours, check(output, c), (output[:80], c))
                        exact += 1
                    else:
                        # documented: casefold, not lower
                        self.assertEqual(ours, _casefold_oracle(output, c), (output[:80], c))
                        explained += ours != check(output, c)
                elif kind == "json_keys":
                    difference = _oracle_json_difference(output)
                    if difference is None:
                        self.assertEqual(ours, check(output, c), (output[:80], c))
                        exact += 1
                    else:
                        # documented: a JSON object is required and NaN/Infinity are rejected
                        self.assertFalse(ours, (output[:80], c))
                        explained += 1
                else:
                    self.assertEqual(ours, check(output, c), (output[:80], c))
                    exact += 1
        return exact, explained

    def test_edge_outputs(self):
        exact, explained = self.assert_equivalent(EDGE_OUTPUTS)
        self.assertGreater(exact, len(EDGE_OUTPUTS) * len(SEED_CHECKS) * 0.8)
        self.assertGreater(explained, 0)
        json_verdicts = {evals.run_check({"type": "json_keys", "keys": ["name", "age"]}, o).passed
                         for o in EDGE_OUTPUTS if o.strip()}
        self.assertEqual(json_verdicts, {True, False})

    def test_ifeval_gpt4_responses(self):
        path = IFEVAL_DIR / "responses_gpt4.jsonl"
        if not path.exists():
            self.skipTest(f"{path} not present")
        with open(path, encoding="utf-8") as handle:
            outputs = [json.loads(line)["response"] for line in handle if line.strip()]
        self.assertGreaterEqual(len(outputs), 242)
        exact, _ = self.assert_equivalent(outputs)
        # nearly every comparison is a plain one (only the two sharp-s checks and the few
        # outputs with casefold-sensitive text take the casefold oracle), so it is not vacuous
        self.assertGreater(exact, len(outputs) * len(SEED_CHECKS) * 0.9)
        # and the corpus gives both verdicts for at least one check of every seed type
        # (no GPT-4 response is a JSON object; json_keys is covered by the edge outputs)
        for kind in ("contains_any", "not_contains", "max_words", "regex"):
            with self.subTest(kind):
                self.assertTrue(any(
                    {evals.run_check(c, o).passed for o in outputs} == {True, False}
                    for c in SEED_CHECKS if c["type"] == kind))


class OracleDifferenceTest(unittest.TestCase):
    """The documented differences from the original harness, each asserted explicitly."""

    def both(self, c, output):
        return check(output, c), evals.run_check(c, output).passed

    def test_casefold_sharp_s(self):
        self.assertEqual(self.both({"type": "contains_any", "values": ["STRASSE"]}, "Die Straße"),
                         (False, True))
        self.assertEqual(self.both({"type": "not_contains", "values": ["strasse"]}, "Die Straße"),
                         (True, False))

    def test_casefold_ligature(self):
        self.assertEqual(self.both({"type": "contains_any", "values": ["file"]}, "Open the \ufb01le"),
                         (False, True))

    def test_nan_and_infinity_rejected(self):
        c = {"type": "json_keys", "keys": ["name"]}
        for output in ('{"name": NaN}', '{"name": Infinity}', '{"name": -Infinity}'):
            with self.subTest(output):
                self.assertEqual(self.both(c, output), (True, False))

    def test_json_keys_requires_an_object(self):
        c = {"type": "json_keys", "keys": ["name"]}
        # the oracle's `k in obj` is list membership or a substring test
        self.assertEqual(self.both(c, '["name"]'), (True, False))
        self.assertEqual(self.both(c, '"my name is Ann"'), (True, False))
        self.assertIn("expected an object", evals.run_check(c, '"my name is Ann"').reason)

    def test_json_keys_on_a_number(self):
        c = {"type": "json_keys", "keys": ["name"]}
        with self.assertRaises(TypeError):
            check("42", c)  # the oracle crashed the run
        self.assertFalse(evals.run_check(c, "42").passed)

    def test_empty_output(self):
        for c in ({"type": "not_contains", "values": ["refund"]}, {"type": "max_words", "n": 10}):
            for output in ("", "   "):
                with self.subTest(check=c, output=output):
                    self.assertEqual(self.both(c, output), (True, False))


if __name__ == "__main__":
    unittest.main()
