"""The similarity check's edit distance and longest common subsequence, bit-parallel in
evals_extras.py, give what the textbook dynamic programme gives (the oracle: the quadratic
two-row versions evals_extras.py had before, kept in benchmarks/similarity.py, which times them
as its "before"), on Hypothesis-generated
strings and token lists; and texts over the documented size limit are refused or fail.

Without Hypothesis installed the property tests are skipped; the examples still run.

Run from the repository root: python -m unittest tests.test_similarity
"""

import importlib.util
import os
import unittest
from unittest import mock

import evals
import evals_extras
from tests.test_checks import CheckTestCase

try:
    from hypothesis import HealthCheck, example, given, settings, strategies as st

    HYPOTHESIS = True
except ImportError:  # the property tests are skipped (below); the decorators do nothing
    HYPOTHESIS = False
    st = mock.MagicMock()  # the strategies the skipped tests name, never drawn from

    def given(*strategies):
        return lambda test: test

    def example(*values):
        return lambda test: test

    def settings(**options):
        return lambda test: test

    HealthCheck = mock.Mock()


# The oracle: the quadratic versions, as evals_extras.py had them (two rows of the table).
_BENCHMARK = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                          "benchmarks", "similarity.py")
_spec = importlib.util.spec_from_file_location("similarity_benchmark", _BENCHMARK)
_before = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_before)
quadratic_levenshtein, quadratic_lcs_length = _before._levenshtein, _before._lcs_length


PROPERTY = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Strategies (mocks without Hypothesis: the tests that draw from them are skipped)
# Few letters make long common runs and repeats; any Unicode (surrogates, combining
# marks, astral characters) makes distinct ones; long texts make masks of many words.
TEXTS = st.one_of(
    st.text(alphabet="ab", max_size=200),
    st.text(alphabet="abcé😀\u0301 ", max_size=300),
    st.text(max_size=150),
    st.lists(st.sampled_from(["x", "yy", "x", "😀", " "]), max_size=250).map("".join),
)
TOKENS = st.one_of(
    st.lists(st.sampled_from(["the", "cat", "sat", "on", "mat", "é", ""]), max_size=250),
    st.lists(st.text(max_size=3), max_size=120),
)
# A text and a variant of it: the pairs edit distances are made for.
EDITS = st.lists(st.tuples(st.integers(0, 400), TEXTS), max_size=4)
EDITED = st.builds(lambda text, edits: (text, _edited(text, edits)), TEXTS, EDITS)


def _edited(text, edits):
    """`text` with a few parts of 0 to 3 characters replaced by parts of 0 to 3 others."""
    for where, insert in edits:
        where %= len(text) + 1
        text = text[:where] + insert[:3] + text[where + len(insert) % 4 :]
    return text


@unittest.skipUnless(HYPOTHESIS, "Hypothesis is not installed (pip install hypothesis; .ci/run does)")
class AgainstTheQuadraticTest(unittest.TestCase):
    @PROPERTY
    @given(st.one_of(st.tuples(TEXTS, TEXTS), EDITED))
    @example(("", ""))
    @example(("", "abc"))
    @example(("kitten", "sitting"))
    @example(("a" * 70, "a" * 65 + "b"))  # past one machine word
    def test_levenshtein(self, pair):
        a, b = pair
        expected = quadratic_levenshtein(a, b)
        self.assertEqual(evals_extras._levenshtein(a, b), expected)
        self.assertEqual(evals_extras._levenshtein(b, a), expected)

    @PROPERTY
    @given(st.one_of(st.tuples(TEXTS, TEXTS), EDITED))
    def test_lcs_of_characters(self, pair):
        a, b = pair
        expected = quadratic_lcs_length(a, b)
        self.assertEqual(evals_extras._lcs_length(a, b), expected)
        self.assertEqual(evals_extras._lcs_length(b, a), expected)

    @PROPERTY
    @given(TOKENS, TOKENS)
    @example([], [])
    @example([], ["a"])
    @example("police killed the gunman".split(), "the gunman kill police".split())
    def test_lcs_of_tokens(self, a, b):
        self.assertEqual(evals_extras._lcs_length(a, b), quadratic_lcs_length(a, b))

    @settings(max_examples=100, deadline=None)
    @given(st.one_of(st.tuples(TEXTS, TEXTS), EDITED))
    def test_masks_built_again_when_few_are_kept(self, pair):
        # At 100,000 items only some masks stay built; here none stays.
        a, b = pair
        with mock.patch.object(evals_extras, "_MASK_BYTES", 1):
            self.assertEqual(evals_extras._levenshtein(a, b), quadratic_levenshtein(a, b))
            self.assertEqual(evals_extras._lcs_length(a, b), quadratic_lcs_length(a, b))

    @PROPERTY
    @given(TEXTS, TEXTS)
    def test_the_scores(self, a, b):
        longest = max(len(a), len(b))
        if longest:
            expected = 1.0 - quadratic_levenshtein(a, b) / longest
        else:
            expected = 1.0
        self.assertEqual(evals_extras.levenshtein_ratio(a, b), expected)
        produced, reference = a.lower().split(), b.lower().split()
        same = quadratic_lcs_length(produced, reference)
        expected = evals_extras._f_measure(same, len(produced), len(reference))
        self.assertEqual(evals_extras.rouge_l(a, b), expected)


class ExamplesTest(unittest.TestCase):
    def test_long_texts_against_the_quadratic(self):
        a = "The refund policy allows returns within thirty days of purchase. " * 8
        b = a.replace("thirty", "30").replace("purchase", "delivery")[5:] + "Thanks!"
        self.assertEqual(evals_extras._levenshtein(a, b), quadratic_levenshtein(a, b))
        self.assertEqual(
            evals_extras._lcs_length(a.split(), b.split()),
            quadratic_lcs_length(a.split(), b.split()),
        )

    def test_identical_and_disjoint(self):
        text = "abc" * 1000
        self.assertEqual(evals_extras._levenshtein(text, text), 0)
        self.assertEqual(evals_extras._levenshtein(text, "x" * 3000), 3000)
        self.assertEqual(evals_extras._lcs_length(text, text), 3000)
        self.assertEqual(evals_extras._lcs_length(text, "x" * 10), 0)


class SizeLimitTest(CheckTestCase):
    LIMIT = evals_extras._SIMILARITY_LIMIT

    def test_the_limit_is_the_documented_one(self):
        self.assertEqual(self.LIMIT, 100_000)

    def test_an_output_over_the_limit_fails_negated_too(self):
        check = {"type": "similarity", "reference": "abc", "min": 0}
        over = "a" * (self.LIMIT + 1)
        reason = "the output has 100,001 characters, over the 100,000 that levenshtein scores"
        self.assertEqual(self.assertFails(check, over, reason).flag, "unknown")
        self.assertFails(dict(check, negate=True), over, reason)
        # surrounding white space is not scored, so it does not count
        self.assertPasses(check, " " + "a" * self.LIMIT + "\n")

    def test_words_count_for_rouge_l_and_token_f1_has_no_limit(self):
        check = {"type": "similarity", "reference": "a b", "min": 0, "metric": "rouge_l"}
        over = "a " * (self.LIMIT + 1)
        self.assertFails(
            check, over, "the output has 100,001 words, over the 100,000 that rouge_l"
        )
        self.assertPasses(check, "a" * (self.LIMIT + 1))  # one word
        self.assertPasses(dict(check, metric="token_f1"), over)

    def test_a_reference_over_the_limit_is_refused_at_load(self):
        check = {"type": "similarity", "reference": "a" * (self.LIMIT + 1), "min": 0.5}
        self.assertProblem(
            check, "'reference' has 100,001 characters, over the 100,000 that levenshtein scores"
        )
        words = dict(check, reference="a " * (self.LIMIT + 1), metric="rouge_l")
        self.assertProblem(words, "'reference' has 100,001 words, over the 100,000 that rouge_l")
        self.assertEqual(evals.validate_check(dict(check, metric="rouge_l")), [])


if __name__ == "__main__":
    unittest.main()
