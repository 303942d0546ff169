"""Tests of the reference-answer checks of evals_extras.py: equals_any (with SQuAD v1.1's
answer normalisation), number_match and similarity (Levenshtein ratio, SQuAD token F1,
ROUGE-L), on the published examples where there are some.

Run from the repository root: python -m unittest tests.test_checks_match
"""

import unittest

import evals
import evals_extras  # noqa: F401  (registers the checks)
from tests.test_checks import CheckTestCase as MatchTestCase


class SquadNormalizeTest(unittest.TestCase):
    # evaluate-v1.1.py normalize_answer: lower, remove punctuation, remove articles, fix spaces
    def test_the_official_steps(self):
        normalize = evals_extras.squad_normalize
        self.assertEqual(normalize("The Cat!"), "cat")
        self.assertEqual(normalize("  An apple,   a PEAR and the plum. "), "apple pear and plum")
        self.assertEqual(normalize("Denver Broncos"), "denver broncos")
        self.assertEqual(normalize("the"), "")

    def test_articles_only_as_whole_words(self):
        self.assertEqual(evals_extras.squad_normalize("Theatre and banana"), "theatre and banana")
        self.assertEqual(evals_extras.squad_normalize("an-the"), "anthe")  # "-" goes first

    def test_punctuation_is_string_punctuation_only(self):
        # like the script: ASCII punctuation goes, other marks ("«", "’") stay
        self.assertEqual(evals_extras.squad_normalize("«Paris»"), "«paris»")
        self.assertEqual(evals_extras.squad_normalize("U.S.A."), "usa")


class EqualsAnyTest(MatchTestCase):
    def test_any_value_whole_output(self):
        check = {"type": "equals_any", "values": ["Paris", "Paris, France"]}
        self.assertPasses(check, "Paris, France\n", "equals 'Paris, France'")
        self.assertFails(check, "paris", "expected one of 'Paris', 'Paris, France', got 'paris'")
        self.assertFails(check, "It is Paris")

    def test_squad_normalisation(self):
        check = {"type": "equals_any", "values": ["Denver Broncos"], "normalize": "squad"}
        self.assertPasses(check, "The Denver Broncos.", "after squad normalisation")
        result = self.assertFails(check, "Broncos", "(normalised 'broncos')")
        self.assertEqual(result.quoted, ("'Broncos'", "'broncos'"))

    def test_a_value_normalised_to_nothing_is_refused(self):
        self.assertProblem({"type": "equals_any", "values": ["ok", "The."], "normalize": "squad"},
                           "'The.' normalises to an empty string under 'squad'")
        self.assertEqual(evals.validate_check({"type": "equals_any", "values": ["The."]}), [])

    def test_parameters(self):
        self.assertProblem({"type": "equals_any", "values": []}, "parameter 'values' must be")
        self.assertProblem({"type": "equals_any", "values": ["a"], "normalize": "squd"},
                           "did you mean 'squad'?")


class NumbersInTest(unittest.TestCase):
    def test_syntax(self):
        found = evals_extras.numbers_in(
            "$1,000.50, -5%, 1e3, 2.5E-3, +7, -$3, €4, £1,234, ¥5, .5 and 50% of 10")
        self.assertEqual([v for v, _ in found],
                         [1000.5, -5, 1000.0, 0.0025, 7, -3, 4, 1234, 5, 0.5, 50, 10])
        self.assertEqual(found[0], (1000.5, "$1,000.50"))

    def test_not_inside_words_or_other_numbers(self):
        self.assertEqual(evals_extras.numbers_in("H2O, v2, version 1.2.3, 1e999"), [])
        self.assertEqual([v for v, _ in evals_extras.numbers_in("1-2, 1,2,3, page 5.")],
                         [1, 2, 1, 2, 3, 5])


class NumberMatchTest(MatchTestCase):
    def test_last_by_default(self):
        check = {"type": "number_match", "value": 42}
        result = self.assertPasses(check, "6 times 7 is 42.", "last number '42' equals 42")
        self.assertEqual(result.quoted, ("'42'",))
        self.assertFails(check, "42 minus 1 is 41", "last number '41', expected 42")
        self.assertFails(check, "forty-two", "no number in the output")

    def test_first_and_only(self):
        self.assertPasses({"type": "number_match", "value": 6, "which": "first"}, "6 times 7")
        only = {"type": "number_match", "value": 42, "which": "only"}
        self.assertPasses(only, "42, yes: 42.")
        self.assertFails(only, "41 or 42", "2 distinct numbers, expected only one: '41', '42'")

    def test_percent_reads_as_its_number_and_currency_is_dropped(self):
        self.assertPasses({"type": "number_match", "value": 50}, "Half: 50%")
        self.assertPasses({"type": "number_match", "value": 1234.5}, "Total: $1,234.50")

    def test_tolerances(self):
        self.assertFails({"type": "number_match", "value": 3.14}, "pi is 3.14159")
        self.assertPasses({"type": "number_match", "value": 3.14, "abs_tol": 0.01},
                          "pi is 3.14159", "(±0.01)")
        self.assertPasses({"type": "number_match", "value": 1000, "rel_tol": 0.01}, "1,009")
        self.assertFails({"type": "number_match", "value": 1000, "rel_tol": 0.01}, "1,011")
        self.assertPasses({"type": "number_match", "value": 0.3}, "0.3")

    def test_minus_signs(self):
        # U+2212 MINUS SIGN, U+FE63 SMALL HYPHEN-MINUS, U+FF0D FULLWIDTH HYPHEN-MINUS
        for minus in ("\u2212", "\ufe63", "\uff0d", "-"):
            with self.subTest(minus=minus):
                output = f"It fell to {minus}3 °C."
                self.assertPasses({"type": "number_match", "value": -3}, output,
                                  f"last number '{minus}3' equals -3")
                self.assertFails({"type": "number_match", "value": 3}, output)
        self.assertEqual(self.command({"type": "number_match", "value": -3}, "fell to \u22123 °C"),
                         (0, "pass number_match: last number '\u22123' equals -3\ncase: pass\n"))
        self.assertPasses({"type": "number_match", "value": -2.5e-3}, "\u22122.5e\u22123")
        # dashes join ranges and phone numbers: U+2012 FIGURE DASH, U+2013 EN DASH
        self.assertPasses({"type": "number_match", "value": 1234}, "555\u20121234")
        self.assertPasses({"type": "number_match", "value": 7}, "5\u20137 days")

    def test_dimensions_are_two_numbers(self):
        for output in ("the grid is 2x3", "the grid is 2X3", "the grid is 2\u00d73"):
            with self.subTest(output=output):
                self.assertPasses({"type": "number_match", "value": 3}, output, "'3' equals 3")
                self.assertPasses({"type": "number_match", "value": 2, "which": "first"}, output)
        self.assertEqual(self.command({"type": "number_match", "value": 3}, "2x3"),
                         (0, "pass number_match: last number '3' equals 3\ncase: pass\n"))
        self.assertPasses({"type": "number_match", "value": 0}, "0x1F")  # hex, not 0 by 1

    def test_a_number_longer_than_python_reads_is_skipped_not_a_crash(self):
        # int() refuses more than 4,300 digits on Python 3.11+; such a number is beyond any
        # float, so it is skipped like "1e999", and the run goes on.
        huge = "9" * 5000
        self.assertEqual(self.command({"type": "number_match", "value": 3}, f"{huge} then 3"),
                         (0, "pass number_match: last number '3' equals 3\ncase: pass\n"))
        self.assertFails({"type": "number_match", "value": 3}, huge, "no number")
        longest = "9" * evals_extras.LONGEST_WHOLE_NUMBER  # still read exactly, as an int
        self.assertPasses({"type": "number_match", "value": 3, "which": "first"}, f"3 {longest}")
        self.assertEqual(evals_extras.numbers_in(longest), [(int(longest), longest)])

    def test_numbers_in_markdown_emphasis(self):
        for output in ("_20_", "*20*", "**20**", "__20__", "It is _\u221220_."):
            with self.subTest(output=output):
                value = -20 if "\u2212" in output else 20
                self.assertPasses({"type": "number_match", "value": value}, output)
        self.assertEqual(self.command({"type": "number_match", "value": 20}, "about _20_"),
                         (0, "pass number_match: last number '20' equals 20\ncase: pass\n"))
        self.assertFails({"type": "number_match", "value": 20}, "var_20", "no number")

    def test_digits_and_separators_of_other_scripts(self):
        # Arabic-Indic digits, U+066B ARABIC DECIMAL SEPARATOR, U+066C ARABIC THOUSANDS SEPARATOR
        five_and_a_half = "\u0665\u066b\u0665"
        self.assertPasses({"type": "number_match", "value": 5.5}, five_and_a_half)
        self.assertFails({"type": "number_match", "value": 5}, five_and_a_half, "expected 5")
        self.assertEqual(self.command({"type": "number_match", "value": 5.5}, five_and_a_half),
                         (0, f"pass number_match: last number '{five_and_a_half}' equals 5.5\n"
                             "case: pass\n"))
        self.assertPasses({"type": "number_match", "value": 1234567, "which": "only"},
                          "\u0661\u066c\u0662\u0663\u0664\u066c\u0665\u0666\u0667")
        self.assertPasses({"type": "number_match", "value": 12}, "\u06f1\u06f2")  # Persian
        self.assertPasses({"type": "number_match", "value": 42}, "\uff14\uff12")  # fullwidth
        self.assertPasses({"type": "number_match", "value": 7}, "\u096d")  # Devanagari seven

    def test_parameters(self):
        self.assertProblem({"type": "number_match"}, "missing required parameter 'value'")
        self.assertProblem({"type": "number_match", "value": "42"}, "must be a number")
        self.assertProblem({"type": "number_match", "value": 1, "abs_tol": -1},
                           "must be a number of 0 or more")
        self.assertProblem({"type": "number_match", "value": 1, "which": "middle"},
                           "must be one of 'first', 'last', 'only'")


class SimilarityTest(MatchTestCase):
    def test_levenshtein(self):
        # kitten -> sitting: k->s, e->i, +g: distance 3; ratio 1 - 3/7 = 0.5714...
        self.assertEqual(evals_extras._levenshtein("kitten", "sitting"), 3)
        self.assertEqual(evals_extras._levenshtein("", "abc"), 3)
        self.assertAlmostEqual(evals_extras.levenshtein_ratio("kitten", "sitting"), 1 - 3 / 7)
        check = {"type": "similarity", "reference": "kitten", "min": 0.571}
        self.assertPasses(check, "sitting\n", "levenshtein 0.571, expected at least 0.571")
        self.assertFails(dict(check, min=0.58), "sitting", "levenshtein 0.571")
        self.assertPasses(dict(check, min=1), "kitten")

    def test_token_f1(self):
        # normalised: [denver, broncos] against [denver, broncos, team]: 2 in common,
        # precision 2/2, recall 2/3, F1 = 2 * 1 * 2/3 / (1 + 2/3) = 0.8
        self.assertAlmostEqual(evals_extras.token_f1("Denver Broncos",
                                                     "The Denver Broncos team."), 0.8)
        self.assertEqual(evals_extras.token_f1("nothing alike", "Denver"), 0.0)
        check = {"type": "similarity", "metric": "token_f1", "reference": "The Denver Broncos "
                 "team.", "min": 0.8}
        self.assertPasses(check, "Denver Broncos", "token_f1 0.800")
        self.assertFails(check, "Broncos", "token_f1 0.500")  # P 1, R 1/3: 2/3 / (4/3)

    def test_rouge_l_lin_2004(self):
        # Lin 2004, section 3.1: reference S1 "police killed the gunman".
        # S2 "police kill the gunman": LCS "police the gunman" = 3, P = R = 3/4, F = 0.75.
        # S3 "the gunman kill police": LCS "the gunman" = 2, P = R = 2/4, F = 0.5.
        reference = "police killed the gunman"
        self.assertEqual(evals_extras.rouge_l("police kill the gunman", reference), 0.75)
        self.assertEqual(evals_extras.rouge_l("the gunman kill police", reference), 0.5)
        # Unequal lengths: "the cat was found under the bed" against "the cat was under the
        # bed": LCS 6, P = 6/7, R = 6/6, F = 2 * 6/7 / (6/7 + 1) = 12/13 = 0.923
        self.assertAlmostEqual(evals_extras.rouge_l("The cat was found under the bed",
                                                    "the cat was under the bed"), 12 / 13)
        check = {"type": "similarity", "metric": "rouge_l", "reference": reference, "min": 0.7}
        self.assertPasses(check, "Police kill the gunman", "rouge_l 0.750, expected at least 0.7")
        self.assertFails(check, "the gunman kill police", "rouge_l 0.500")

    def test_parameters(self):
        self.assertProblem({"type": "similarity", "reference": "a", "min": 1.5},
                           "parameter 'min' must be a number from 0 to 1")
        self.assertProblem({"type": "similarity", "reference": "a", "min": True},
                           "parameter 'min' must be a number from 0 to 1")
        self.assertProblem({"type": "similarity", "reference": "a"},
                           "missing required parameter 'min'")
        self.assertProblem({"type": "similarity", "reference": "a", "min": 0.5,
                            "metric": "bleu"}, "must be one of 'levenshtein'")
        self.assertProblem({"type": "similarity", "reference": "The!", "min": 0.5,
                            "metric": "token_f1"}, "'reference' normalises to an empty string")
        self.assertEqual(evals.validate_check({"type": "similarity", "reference": "The!",
                                               "min": 0.5}), [])


if __name__ == "__main__":
    unittest.main()
