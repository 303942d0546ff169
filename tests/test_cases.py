"""Loading and validating the case file: every problem reported at once, as FILE:LINE."""

import json
import os
import tempfile
import unittest

import evals


def write(directory, text, name="cases.jsonl", encoding="utf-8"):
    path = os.path.join(directory, name)
    with open(path, "w", encoding=encoding, newline="") as handle:
        handle.write(text)
    return path


def line(**case):
    return json.dumps(case)


GOOD = {"id": "c1", "input": "hi", "checks": [{"type": "contains_any", "values": ["hello"]}]}


class LoadCasesTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)

    def problems(self, text, **kwargs):
        path = write(self.tmp.name, text, **kwargs)
        with self.assertRaises(evals.CaseFileError) as caught:
            evals.load_cases(path)
        return [p.replace(path, "F") for p in caught.exception.problems]

    def test_valid_file_gives_cases_with_line_numbers_and_digest(self):
        path = write(self.tmp.name, line(**GOOD) + "\n" + line(**{**GOOD, "id": "c2"}) + "\n")
        cases, digest = evals.load_cases(path)
        self.assertEqual([c.id for c in cases], ["c1", "c2"])
        self.assertEqual([c.line for c in cases], [1, 2])
        self.assertEqual(len(digest), 64)

    def test_bom_is_not_part_of_the_first_id(self):
        path = write(self.tmp.name, "\ufeff" + line(**GOOD) + "\n")
        cases, _ = evals.load_cases(path)
        self.assertEqual(cases[0].id, "c1")

    def test_crlf_and_blank_lines_keep_real_line_numbers(self):
        text = "\r\n" + line(**GOOD) + "\r\n\r\n   \r\n" + '{"id": "c2", "input": "x"}\r\n'
        problems = self.problems(text)
        self.assertEqual(problems, ["F:5: missing field 'checks'"])

    def test_invalid_json_names_line_and_column(self):
        problems = self.problems(line(**GOOD) + "\n{\"id\": \"c2\",\n")
        self.assertEqual(len(problems), 1)
        self.assertTrue(problems[0].startswith("F:2: invalid JSON:"), problems[0])
        self.assertIn("column", problems[0])

    def test_nan_in_case_file_is_invalid_json(self):
        bad = '{"id": "c1", "input": "x", "checks": [{"type": "max_words", "n": NaN}]}'
        problems = self.problems(bad + "\n")
        self.assertIn("NaN", problems[0])
        self.assertTrue(problems[0].startswith("F:1: invalid JSON"))

    def test_all_problems_are_reported_at_once(self):
        text = "\n".join([
            line(id="a", input="x", checks=[{"type": "contains_any", "values": []}]),
            line(id="b", input=3, checks=[{"type": "regex", "pattern": "("}]),
            line(id="c", input="x", checks=[]),
            "[1, 2]",
            line(id="d", input="x", checks=[{"type": "max_words", "n": 3}], tag=["x"]),
        ])
        problems = self.problems(text)
        self.assertEqual(problems[0], "F:1: check 1: contains_any: parameter 'values' must be a "
                                      "non-empty list of strings with a visible character each")
        self.assertEqual(problems[1], "F:2: field 'input' must be a string or a list of "
                                      'messages ({"role": ..., "content": ...})')
        self.assertTrue(problems[2].startswith("F:2: check 1: regex: parameter 'pattern' is not a "
                                               "valid regular expression"))
        self.assertEqual(problems[3], "F:3: field 'checks' must be a non-empty list of checks")
        self.assertEqual(problems[4], "F:4: a case must be a JSON object, got array")
        self.assertTrue(problems[5].startswith("F:5: unknown field 'tag'"))
        self.assertEqual(len(problems), 6)

    def test_a_case_spread_over_lines_says_so_once(self):
        spread = json.dumps(GOOD, indent=2) + "\n"
        self.assertEqual(self.problems(spread), [
            "F:1: invalid JSON: Expecting property name enclosed in double quotes (column 2)",
            "F:1: a case is one line of JSON (JSON Lines), not a value spread over lines; the "
            "rest of the file was not read"])
        stray = json.dumps(GOOD) + "\n{\n" + json.dumps(GOOD) + "\n"  # read on: a duplicate
        self.assertEqual(self.problems(stray), [
            "F:2: invalid JSON: Expecting property name enclosed in double quotes (column 2)",
            "F:3: duplicate id 'c1' (first used on line 1)"])
        self.assertEqual(self.problems(json.dumps([GOOD]) + "\n"), [
            "F:1: a case must be a JSON object, got array (one case a line, not an array of "
            "cases)"])

    def test_duplicate_ids_name_both_lines(self):
        text = line(**GOOD) + "\n\n" + line(**GOOD) + "\n"
        self.assertEqual(self.problems(text), ["F:3: duplicate id 'c1' (first used on line 1)"])

    def test_unknown_check_type_is_an_error_listing_known_types(self):
        text = line(id="a", input="x", checks=[{"type": "contain_any", "values": ["y"]}])
        problem = self.problems(text)[0]
        self.assertIn("unknown check type 'contain_any'", problem)
        self.assertIn("did you mean 'contains_any'?", problem)
        self.assertIn("json_schema", problem)

    def test_unknown_and_wrong_typed_parameters(self):
        text = line(id="a", input="x", checks=[
            {"type": "max_words", "n": "25"},
            {"type": "contains_any", "values": ["y"], "case_sensitive": True},
            {"type": "word_count", "min": 10, "max": 5},
            {"type": "word_count"},
            {"type": "max_words", "n": True},
        ])
        problems = self.problems(text)
        self.assertEqual(problems, [
            "F:1: check 1: max_words: parameter 'n' must be a non-negative integer",
            "F:1: check 2: contains_any: unknown parameter 'case_sensitive' (allowed: negate, on, "
            "values, ignore_case, whole_word)",
            "F:1: check 3: word_count: impossible bounds, min 10 > max 5",
            "F:1: check 4: word_count: give 'min', 'max' or both (inclusive bounds)",
            "F:1: check 5: max_words: parameter 'n' must be a non-negative integer",
        ])

    def test_missing_fields_and_wrong_types(self):
        text = "\n".join([
            line(input="x", checks=[{"type": "max_words", "n": 3}]),
            line(id="", input="x", checks=[{"type": "max_words", "n": 3}]),
            line(id="b", checks=[{"type": "max_words", "n": 3}], tags="smoke"),
            line(id="c", input="x", checks=[{"values": ["a"]}], description=5),
        ])
        self.assertEqual(self.problems(text), [
            "F:1: missing field 'id'",
            "F:2: field 'id' must be a non-empty string",
            "F:3: missing field 'input'",
            "F:3: field 'tags' must be a list of strings",
            "F:4: check 1: has no 'type' (a string naming the check)",
            "F:4: field 'description' must be a string",
        ])

    def test_non_utf8_names_the_line(self):
        path = os.path.join(self.tmp.name, "cases.jsonl")
        with open(path, "wb") as handle:
            handle.write(line(**GOOD).encode() + b"\n" + b'{"id": "\xff"}\n')
        with self.assertRaises(evals.CaseFileError) as caught:
            evals.load_cases(path)
        self.assertTrue(caught.exception.problems[0].startswith(f"{path}:2: not UTF-8"))

    def test_a_line_that_is_not_utf8_does_not_hide_the_other_problems(self):
        path = os.path.join(self.tmp.name, "cases.jsonl")
        with open(path, "wb") as handle:
            handle.write(b'{"id": "\xff"}\n' + line(id="b", input="x", checks=[]).encode() + b"\n")
        with self.assertRaises(evals.CaseFileError) as caught:
            evals.load_cases(path)
        self.assertEqual(caught.exception.problems, [
            f"{path}:1: not UTF-8 text",
            f"{path}:2: field 'checks' must be a non-empty list of checks"])

    def test_missing_and_empty_files(self):
        missing = os.path.join(self.tmp.name, "nope.jsonl")
        with self.assertRaises(evals.CaseFileError) as caught:
            evals.load_cases(missing)
        self.assertIn("cannot read the case file", str(caught.exception))
        self.assertEqual(self.problems("\n\n"), ["F: no cases (the file is empty)"])

    def test_line_separator_inside_a_string_does_not_split_the_line(self):
        path = write(self.tmp.name, line(id="a", input="x\u2028y", checks=GOOD["checks"]) + "\n"
                     + line(id="b", input="z", checks=[]) + "\n")
        with self.assertRaises(evals.CaseFileError) as caught:
            evals.load_cases(path)
        self.assertEqual(caught.exception.problems,
                         [f"{path}:2: field 'checks' must be a non-empty list of checks"])

    def test_equal_looking_checks_of_other_types_are_each_validated(self):
        text = "".join(line(id=name, input="x", checks=[{"type": "max_words", "n": n}]) + "\n"
                        for name, n in (("a", 1), ("b", True), ("c", 1.0), ("d", 1)))
        self.assertEqual(self.problems(text), [
            "F:2: check 1: max_words: parameter 'n' must be a non-negative integer",
            "F:3: check 1: max_words: parameter 'n' must be a non-negative integer"])

    def test_shipped_example_suite_is_valid(self):
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        cases, _ = evals.load_cases(os.path.join(root, "cases.jsonl"))
        self.assertGreaterEqual(len(cases), 15)
        self.assertLessEqual(len(cases), 25)


if __name__ == "__main__":
    unittest.main()
