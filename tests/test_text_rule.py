"""docs/checks.md, "How checks read text": one rule wherever a check's value meets the answer,
through the command line on recorded outputs (`evals.py --rescore`).

Run from the repository root: python -m unittest tests.test_text_rule
"""

import io
import json
import os
import tempfile
import unittest

import evals

# The same text two ways: "é" as one character (NFC) and as "e" and a combining accent (NFD).
JOSE_NFC, JOSE_NFD = "Jos\u00e9", "Jose\u0301"


class TextRuleCommandLineTest(unittest.TestCase):
    def setUp(self):
        folder = tempfile.TemporaryDirectory()
        self.addCleanup(folder.cleanup)
        self.dir = folder.name

    def write(self, name, rows):
        path = os.path.join(self.dir, name)
        with open(path, "w", encoding="utf-8") as handle:
            handle.writelines(json.dumps(row) + "\n" for row in rows)
        return path

    def rescore(self, pairs):
        """(exit code, printed text, the record's check dicts, one per pair) of a run with a
        case for each (check, recorded output) pair."""
        cases = self.write("cases.jsonl", [{"id": f"c{n}", "input": "q", "checks": [check]}
                                           for n, (check, _) in enumerate(pairs)])
        outputs = self.write("rec.jsonl", [
            {"id": f"c{n}", "output": output} for n, (_, output) in enumerate(pairs)])
        record = os.path.join(self.dir, "record.json")
        out, err = io.StringIO(), io.StringIO()
        code = evals.main(["--cases", cases, "--rescore", outputs, "--no-save",
                           "--baseline", os.path.join(self.dir, "none.json"),
                           "--json", record], out, err)
        printed = out.getvalue() + err.getvalue()
        if not os.path.exists(record):
            return code, printed, None
        with open(record, encoding="utf-8") as handle:
            entries = json.load(handle)["cases"]
        return code, printed, [entry["checks"][0] for entry in entries]

    def assertVerdicts(self, pairs, expected):
        code, printed, checks = self.rescore(pairs)
        self.assertIsNotNone(checks, printed)
        for (check, output), result, passed in zip(pairs, checks, expected):
            with self.subTest(check=check, output=output):
                self.assertIs(result["passed"], passed, result["reason"])
        return code

    def assertRefused(self, check, fragment):
        code, printed, checks = self.rescore([(check, "anything")])
        self.assertEqual(code, 2, printed)
        self.assertIsNone(checks)
        path = os.path.join(self.dir, "cases.jsonl")
        self.assertIn(f"{path}:1: check 1: {check['type']}: {fragment}", printed)

    def test_strip_takes_white_space_off_the_value_as_off_the_output(self):
        # Inspect's match and DeepEval's exact match strip both sides; this was refused at load.
        self.assertVerdicts([
            ({"type": "equals", "value": "yes "}, "yes"),
            ({"type": "equals", "value": "\tyes\r\n"}, "  yes\n"),
            ({"type": "starts_with", "value": " Dear"}, "Dear Ann,"),
            ({"type": "ends_with", "value": "Regards \n"}, "Kind Regards"),
            ({"type": "equals", "value": "yes ", "strip": False}, "yes"),
            ({"type": "starts_with", "value": "Dear "}, "Dearest Ann"),  # its end meets none
        ], [True, True, True, True, False, False])

    def test_a_value_of_white_space_only_is_refused(self):
        self.assertRefused({"type": "equals", "value": " \t", "strip": False},
                           "parameter 'value': ' \\t' is only white space: no output can equal it")
        self.assertRefused({"type": "starts_with", "value": "\u200b "}, "parameter 'value': "
                           "'\\u200b ' is only white space, which strip removes")

    def test_json_schema_const_and_enum_read_as_the_answer(self):
        answer = json.dumps({"name": JOSE_NFC, "city": "M\u00e1laga"}, ensure_ascii=False)
        escaped = json.dumps({"name": JOSE_NFD, "city": "M\u00e1laga"})  # "Jose\\u0301"
        self.assertVerdicts([
            ({"type": "json_schema", "schema": {"properties": {"name": {"const": JOSE_NFD}}}},
             answer),
            ({"type": "json_schema",
              "schema": {"properties": {"name": {"enum": ["Jo\u200bs\u00e9"]}}}}, answer),
            ({"type": "json_schema", "schema": {"properties": {"name": {"enum": [JOSE_NFC]}}}},
             escaped),
            ({"type": "json_schema",
              "schema": {"const": {"name": JOSE_NFD, "city": "Ma\u0301laga"}}}, answer),
            ({"type": "json_schema", "schema": {
                "required": ["ci\u200bty"], "additionalProperties": False,
                "properties": {"name": {"maxLength": 4, "pattern": f"^{JOSE_NFC}$"},
                               "ci\u00adty": {}}}}, escaped),
            ({"type": "json_schema", "schema": {"properties": {"name": {"enum": ["Jose"]}}}},
             answer),
        ], [True, True, True, True, True, False])

    def test_equals_any_values_read_as_the_answer(self):
        self.assertVerdicts([
            ({"type": "equals_any", "values": ["Ana", JOSE_NFD]}, JOSE_NFC),
            ({"type": "equals_any", "values": ["Jo\u200bs\u00e9"]}, JOSE_NFC),
            ({"type": "equals_any", "values": ["line 1\r\nline 2"]}, "line 1\r\nline 2"),
            ({"type": "equals_any", "values": ["The Jose\u0301!"], "normalize": "squad"},
             JOSE_NFC.lower()),
            ({"type": "equals_any", "values": ["Jose"]}, JOSE_NFC),
        ], [True, True, True, True, False])

    def test_the_similarity_reference_read_as_the_answer(self):
        self.assertVerdicts([
            ({"type": "similarity", "reference": f"{JOSE_NFD} Garci\u0301a", "min": 1},
             f"{JOSE_NFC} Garc\u00eda"),
            ({"type": "similarity", "reference": "re\u200bfund", "min": 1, "metric": "rouge_l"},
             "refund"),
            ({"type": "similarity", "reference": JOSE_NFD, "min": 1, "metric": "token_f1"},
             JOSE_NFC),
            ({"type": "similarity", "reference": "Jose", "min": 1}, JOSE_NFC),
        ], [True, True, True, False])

    def test_json_keys_read_as_the_answer_keys(self):
        answer = json.dumps({JOSE_NFC: 1, "id": 2}, ensure_ascii=False)
        self.assertVerdicts([
            ({"type": "json_keys", "keys": [JOSE_NFD, "id"], "exact": True}, answer),
            ({"type": "json_keys", "keys": ["i\u200bd"]}, answer),
            ({"type": "json_keys", "keys": [JOSE_NFC]}, json.dumps({JOSE_NFD: 1})),
            ({"type": "json_embedded", "keys": [JOSE_NFD]}, f"Here: {answer}"),
            ({"type": "json_embedded", "keys": [JOSE_NFC]}, f"Here: {json.dumps({JOSE_NFD: 1})}"),
            ({"type": "json_keys", "keys": ["Jose"]}, answer),
        ], [True, True, True, True, True, False])

    def test_every_spelling_of_crlf_in_a_pattern_matches_the_line_end(self):
        crlf = ["\r\n", "\\r\\n", "\\x0d\\x0a", "\\x0D\\x0A", "\\u000d\\u000a",
                "\\U0000000d\\U0000000a", "\\015\\012", "\\N{CARRIAGE RETURN}\\N{LINE FEED}",
                "\\r\n", "\r\\n"]
        pairs = [({"type": "regex", "pattern": f"total: 3{line_end}ok"}, "total: 3\r\nok")
                 for line_end in crlf]
        pairs.append(({"type": "regex", "pattern": "3 \\x0d \\x0a o", "flags": "x"}, "3\r\nok"))
        pairs.append(({"type": "regex", "pattern": "(?<=3\\x0d\\x0a)ok"}, "3\r\nok"))
        pairs.append(({"type": "regex", "pattern": "3\\x0d\\x0aok", "negate": True}, "3\r\nok"))
        pairs.append(({"type": "regex", "pattern": "3[\\r\\n]{2}ok"}, "3\r\nok"))  # one "\n"
        self.assertVerdicts(pairs, [True] * (len(crlf) + 2) + [False, False])

    def test_an_escaped_invisible_or_decomposed_character_is_read_as_the_literal_one(self):
        # A negated regex of "re\\u200bfund" passed on an answer that held the word.
        self.assertVerdicts([
            ({"type": "regex", "pattern": "re\\u200bfund", "negate": True}, "Your re\u200bfund"),
            ({"type": "regex", "pattern": "\\bre\\u00adfund\\b"}, "Your re\u200bfund"),
            ({"type": "regex", "pattern": "^Jose\\u0301$"}, JOSE_NFC),
            ({"type": "regex", "pattern": "^Jose\\N{COMBINING ACUTE ACCENT}$", "negate": True},
             JOSE_NFC),
        ], [False, True, True, False])

    def test_a_pattern_the_rule_makes_unmatchable_is_refused_negated_or_not(self):
        why = ("parameter 'pattern' can never match: it needs U+200B (ZERO WIDTH SPACE), which "
               "the text rule removes from every answer")
        self.assertRefused({"type": "regex", "pattern": "[\\u200b\\u2060]", "negate": True}, why)
        self.assertRefused({"type": "regex", "pattern": "x(\\u200b)+y"}, why)
        self.assertRefused({"type": "regex", "pattern": "x(?:\\u200b|\\u2060)y", "negate": True},
                           why)
        self.assertRefused({"type": "json_schema", "schema": {"items": {"pattern": "^\\u200b"}}},
                           "parameter 'schema' schema.items.pattern can never match")
        # optional, or one alternative among others: the pattern can still match
        self.assertVerdicts([
            ({"type": "regex", "pattern": "x\\u200b?y"}, "xy"),
            ({"type": "regex", "pattern": "x(?:\\u200b|-)y"}, "x-y"),
            ({"type": "regex", "pattern": "x(?!\\u200b)y"}, "xy"),
        ], [True, True, True])


if __name__ == "__main__":
    unittest.main()
