"""The statistics core for repeated cases: Fisher's exact test, the Wilson interval, McNemar's
exact test, and the verdict a repeated case gets from them.

Published values always run. The comparisons with SciPy (pinned, test-only, installed by
.ci/run) are skipped when SciPy is not importable, so `python -m unittest` still runs on a fresh
clone with no install.
"""

import itertools
import math
import random
import unittest
from fractions import Fraction

import evals
import evals_extras

try:
    import scipy.stats as sps
except ImportError:  # the SciPy comparisons are skipped (below)
    sps = None

TOLERANCE = 1e-9
SMALL_NS = (1, 2, 3, 5, 10, 20)
SMALL_COUNTS = [(k, n) for n in SMALL_NS for k in range(n + 1)]


def large_counts(seed, size, top=500):
    """`size` seeded random (k, n) pairs with 1 <= n <= top."""
    rng = random.Random(seed)
    pairs = []
    for _ in range(size):
        n = rng.randint(1, top)
        pairs.append((rng.randint(0, n), n))
    return pairs


class PublishedValuesTest(unittest.TestCase):
    """Values printed in the literature, or small enough to work out by hand."""

    def test_tea_tasting(self):
        # Fisher (1935): 3 of 4 cups right with milk first, 1 of 4 wrongly called milk first.
        p = evals.fisher_one_sided(3, 4, 1, 4)
        self.assertEqual(round(p, 4), 0.2429)
        self.assertAlmostEqual(p, 17 / 70, delta=1e-15)

    def test_wilson_newcombe_1998(self):
        # Newcombe (1998), Statistics in Medicine 17:857-872, Table I, method 3 (score, no
        # continuity correction), 95%.
        published = {(81, 263): (0.2553, 0.3662), (15, 148): (0.0624, 0.1605),
                     (0, 20): (0.0, 0.1611), (1, 29): (0.0061, 0.1718)}
        for (k, n), expected in published.items():
            with self.subTest(k=k, n=n):
                low, high = evals_extras.wilson_interval(k, n)
                self.assertEqual((round(low, 4), round(high, 4)), expected)

    def test_mcnemar_by_hand(self):
        # 0 against 5 discordant pairs: 2 * (1/2)^5; 1 against 4: 2 * 6/32.
        self.assertEqual(evals_extras.mcnemar_exact(0, 5), 2 / 32)
        self.assertEqual(evals_extras.mcnemar_exact(4, 1), 12 / 32)
        self.assertEqual(evals_extras.mcnemar_exact(5, 0, alternative="worse"), 1 / 32)
        self.assertEqual(evals_extras.mcnemar_exact(0, 5, alternative="worse"), 1.0)

    def test_fisher_is_exact_for_large_counts(self):
        # The hypergeometric tail summed in exact fractions, against the float result.
        for k_before, n_before, k_now, n_now in ((950, 1000, 900, 1000), (500, 1000, 480, 1000),
                                                 (1000, 1000, 0, 1000), (3, 1000, 1, 7)):
            passes, calls = k_before + k_now, n_before + n_now
            exact = sum(Fraction(math.comb(passes, x) * math.comb(calls - passes, n_before - x),
                                 math.comb(calls, n_before))
                        for x in range(k_before, min(passes, n_before) + 1))
            with self.subTest(table=(k_before, n_before, k_now, n_now)):
                self.assertEqual(evals.fisher_one_sided(k_before, n_before, k_now, n_now),
                                 float(exact))


class EdgeCasesTest(unittest.TestCase):

    def test_fisher_edges(self):
        self.assertEqual(evals.fisher_one_sided(0, 0, 0, 0), 1.0)
        self.assertEqual(evals.fisher_one_sided(0, 0, 3, 5), 1.0)  # no baseline calls
        self.assertEqual(evals.fisher_one_sided(3, 5, 0, 0), 1.0)  # no calls now
        self.assertEqual(evals.fisher_one_sided(5, 5, 5, 5), 1.0)  # all passed, both runs
        self.assertEqual(evals.fisher_one_sided(0, 5, 0, 5), 1.0)  # all failed, both runs
        self.assertEqual(evals.fisher_one_sided(3, 3, 0, 3), 1 / 20)
        self.assertEqual(evals.fisher_one_sided(0, 3, 3, 3), 1.0)  # better now

    def test_wilson_edges(self):
        self.assertEqual(evals_extras.wilson_interval(0, 0), (0.0, 1.0))
        low, high = evals_extras.wilson_interval(0, 10)
        self.assertEqual(low, 0.0)
        self.assertLess(high, 1.0)
        low, high = evals_extras.wilson_interval(10, 10)
        self.assertEqual(high, 1.0)
        self.assertGreater(low, 0.0)
        narrow, wide = evals_extras.wilson_interval(5, 10, 0.8), evals_extras.wilson_interval(5, 10, 0.99)
        self.assertLess(wide[0], narrow[0])
        self.assertGreater(wide[1], narrow[1])

    def test_mcnemar_edges(self):
        self.assertEqual(evals_extras.mcnemar_exact(0, 0), 1.0)
        self.assertEqual(evals_extras.mcnemar_exact(0, 0, alternative="worse"), 1.0)
        self.assertEqual(evals_extras.mcnemar_exact(7, 7), 1.0)

    def test_min_detectable(self):
        self.assertFalse(evals.min_detectable(2, 2))  # 1 / comb(4, 2) = 1/6
        self.assertTrue(evals.min_detectable(3, 3))  # 1 / comb(6, 3) = 0.05
        self.assertFalse(evals.min_detectable(3, 3, alpha=0.01))
        self.assertFalse(evals.min_detectable(0, 20))
        self.assertFalse(evals.min_detectable(20, 0))
        self.assertTrue(evals.min_detectable(1, 19))  # 1/20

    def test_min_detectable_is_the_smallest_p(self):
        # No table with these numbers of calls has a smaller p than the most extreme drop.
        for n_before, n_now in itertools.product(range(7), repeat=2):
            smallest = min(evals.fisher_one_sided(a, n_before, c, n_now)
                           for a in range(n_before + 1) for c in range(n_now + 1))
            with self.subTest(n_before=n_before, n_now=n_now):
                self.assertEqual(smallest, evals.fisher_one_sided(n_before, n_before, 0, n_now))

    def test_repeat_change(self):
        cases = [
            ((3, 3, 0, 3), "regressed"),  # p = 0.05 exactly: "p <= alpha"
            ((19, 20, 8, 20), "regressed"),
            ((3, 3, 2, 3), "lower_not_significant"),
            ((3, 3, 1, 3), "lower_not_significant"),
            ((2, 2, 0, 2), "too_few_calls"),
            ((1, 1, 0, 1), "too_few_calls"),
            ((1, 3, 2, 3), "not_lower"),
            ((2, 4, 1, 2), "not_lower"),  # the same rate
            ((0, 0, 0, 3), "not_lower"),  # no baseline calls: no rate to drop from
            ((3, 3, 0, 0), "not_lower"),
        ]
        for args, change in cases:
            with self.subTest(args=args):
                result = evals.repeat_change(*args)
                self.assertEqual(result.change, change)
                self.assertIn(result.change, evals.REPEAT_CHANGES)
                self.assertEqual(result.p_value, evals.fisher_one_sided(*args))
        self.assertEqual(evals.repeat_change(3, 3, 1, 3, alpha=0.25).change, "regressed")
        self.assertEqual(evals.repeat_change(3, 3, 0, 3, alpha=0.01).change, "too_few_calls")
        self.assertEqual(evals.DEFAULT_ALPHA, 0.05)


class ValueErrorTest(unittest.TestCase):

    def test_counts_out_of_range(self):
        bad = [(5, 4, 1, 4), (3, 4, 5, 4), (-1, 4, 1, 4), (3, 4, -1, 4), (0, -1, 0, 1),
               (1.0, 4, 1, 4), (3, 4, 1, 4.0), (True, 4, 1, 4), ("3", 4, 1, 4), (None, 4, 1, 4)]
        for args in bad:
            with self.subTest(args=args):
                with self.assertRaises(ValueError):
                    evals.fisher_one_sided(*args)
                with self.assertRaises(ValueError):
                    evals.repeat_change(*args)

    def test_wilson(self):
        for args in ((5, 4), (-1, 4), (1, -1), (1.5, 4), (1, 4, 0), (1, 4, 1), (1, 4, 95),
                     (1, 4, -0.5), (1, 4, "0.95"), (1, 4, True)):
            with self.subTest(args=args):
                with self.assertRaises(ValueError):
                    evals_extras.wilson_interval(*args)

    def test_mcnemar(self):
        for args, kwargs in (((-1, 3), {}), ((3, -1), {}), ((1.0, 3), {}),
                             ((1, 3), {"alternative": "less"}),
                             ((1, 3), {"alternative": "greater"})):
            with self.subTest(args=args, kwargs=kwargs):
                with self.assertRaises(ValueError):
                    evals_extras.mcnemar_exact(*args, **kwargs)

    def test_alpha(self):
        for alpha in (0, 1, 0.0, 1.0, -0.05, 5, "0.05", None):
            with self.subTest(alpha=alpha):
                with self.assertRaises(ValueError):
                    evals.min_detectable(3, 3, alpha)
                with self.assertRaises(ValueError):
                    evals.repeat_change(3, 3, 0, 3, alpha=alpha)
        with self.assertRaises(ValueError):
            evals.min_detectable(-1, 3)


@unittest.skipUnless(sps is not None, "SciPy is not installed (a test-only dependency)")
class SciPyTest(unittest.TestCase):
    """The same p-values and intervals as SciPy (pinned in .ci/run), to 1e-9, over a grid of
    small tables and a seeded sample of larger ones."""

    def assertClose(self, ours, theirs):
        self.assertTrue(math.isclose(ours, float(theirs), rel_tol=TOLERANCE, abs_tol=TOLERANCE),
                        f"{ours!r} != {float(theirs)!r}")

    def test_fisher(self):
        small = list(itertools.product(SMALL_COUNTS, repeat=2))
        rng = random.Random(11)
        large = list(zip(large_counts(1, 400), large_counts(2, 400)))
        mixed = [(rng.choice(SMALL_COUNTS), pair) for pair in large_counts(3, 100)]
        for (k_before, n_before), (k_now, n_now) in small + large + mixed:
            table = [[k_before, n_before - k_before], [k_now, n_now - k_now]]
            with self.subTest(table=table):
                theirs = sps.fisher_exact(table, alternative="greater").pvalue
                self.assertClose(evals.fisher_one_sided(k_before, n_before, k_now, n_now),
                                 theirs)

    def test_wilson(self):
        pairs = [(k, n) for k, n in SMALL_COUNTS] + large_counts(4, 500)
        tests = {}  # one SciPy binomtest a pair (it computes a p-value, unused here, when made)
        for (k, n), confidence in itertools.product(pairs, (0.8, 0.9, 0.95, 0.99)):
            with self.subTest(k=k, n=n, confidence=confidence):
                if (k, n) not in tests:
                    tests[k, n] = sps.binomtest(k, n)
                ci = tests[k, n].proportion_ci(confidence_level=confidence, method="wilson")
                low, high = evals_extras.wilson_interval(k, n, confidence)
                self.assertClose(low, ci.low)
                self.assertClose(high, ci.high)

    def test_mcnemar(self):
        small = [(b, c) for b in range(21) for c in range(21) if b + c]
        rng = random.Random(5)
        large = [(rng.randint(0, 250), rng.randint(0, 250)) for _ in range(400)]
        for b, c in small + [pair for pair in large if sum(pair)]:
            with self.subTest(b=b, c=c):
                self.assertClose(evals_extras.mcnemar_exact(b, c), sps.binomtest(b, b + c, 0.5).pvalue)
                worse = sps.binomtest(b, b + c, 0.5, alternative="greater").pvalue
                self.assertClose(evals_extras.mcnemar_exact(b, c, alternative="worse"), worse)


if __name__ == "__main__":
    unittest.main()
