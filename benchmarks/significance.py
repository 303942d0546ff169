#!/usr/bin/env python3
"""Benchmark for evals.py's significance test on repeated cases: how often `repeat_change`
reports "regressed" for a simulated model.

Prints figures and a PASS/MISS summary; it is a script, not a unit test.

    python benchmarks/significance.py                      # 100 trials, 20 calls a run, seed 11
    python benchmarks/significance.py --trials 10000 --seed 1 --repeat 20 --alpha 0.05

Each trial draws a baseline run and a new run of one case, `--repeat` calls each, every call
passing with a fixed probability (random.Random(seed)), and asks repeat_change(k_before,
n_before, k_now, n_now, alpha) for its verdict.

1. A real drop: the pass rate is 0.95 in the baseline and 0.4 in the new run.
   Target: "regressed" in >= 95% of trials (95 of 100).
2. No change: the pass rate is 0.8 in both runs.
   Target: "regressed" in <= 5% of trials (5 of 100).

Beside each simulated rate, the exact probability of "regressed" (every pair of counts weighted
by its binomial probability), which the simulated rate estimates.

Standard library only.
"""

import argparse
import collections
import math
import os
import random
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import evals  # noqa: E402 - after the path to this repository's copy

DROP = (0.95, 0.4)  # pass rate in the baseline, in the new run
STABLE = (0.8, 0.8)
DROP_TARGET = 0.95  # at least this share of trials report "regressed"
STABLE_TARGET = 0.05  # at most this share of trials report "regressed"


def _verdict(ok):
    return "PASS" if ok else "MISS"


def simulate(rng, rates, trials, repeat, alpha):
    """Counter of repeat_change verdicts over `trials` seeded trials of `repeat` calls a run."""
    verdicts = collections.Counter()
    for _ in range(trials):
        k_before, k_now = (sum(rng.random() < rate for _ in range(repeat)) for rate in rates)
        verdicts[evals.repeat_change(k_before, repeat, k_now, repeat, alpha).change] += 1
    return verdicts


def exact_rate(rates, repeat, alpha):
    """The exact probability that repeat_change reports "regressed" for these pass rates."""
    def pmf(k, rate):
        return math.comb(repeat, k) * rate ** k * (1 - rate) ** (repeat - k)
    return sum(pmf(k_before, rates[0]) * pmf(k_now, rates[1])
               for k_before in range(repeat + 1) for k_now in range(repeat + 1)
               if evals.repeat_change(k_before, repeat, k_now, repeat, alpha).change
               == "regressed")


def part(number, title, rates, target, at_least, args, rng, summary):
    print("\n%d. %s: pass rate %.2f in the baseline, %.2f now, %d calls each, %d trials"
          % (number, title, rates[0], rates[1], args.repeat, args.trials))
    verdicts = simulate(rng, rates, args.trials, args.repeat, args.alpha)
    for change in evals.REPEAT_CHANGES:
        print("   %-22s %6d" % (change, verdicts[change]))
    regressed = verdicts["regressed"]
    share = regressed / args.trials
    print("   regressed: %d of %d (%.1f%%); exact probability %.2f%%"
          % (regressed, args.trials, 100 * share,
             100 * exact_rate(rates, args.repeat, args.alpha)))
    ok = share >= target if at_least else share <= target
    name = "%s: regressed %s %.0f%% of trials" % (title, ">=" if at_least else "<=", 100 * target)
    summary.append((name, "%d/%d" % (regressed, args.trials), ok))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=11, help="random seed (11)")
    parser.add_argument("--trials", type=int, default=100, help="trials per scenario (100)")
    parser.add_argument("--repeat", type=int, default=20, help="calls per run (20)")
    parser.add_argument("--alpha", type=float, default=evals.DEFAULT_ALPHA,
                        help="significance level (evals.DEFAULT_ALPHA, %g)" % evals.DEFAULT_ALPHA)
    args = parser.parse_args(argv)
    if args.trials < 1 or args.repeat < 1 or not 0 < args.alpha < 1:
        parser.error("--trials and --repeat must be at least 1, --alpha between 0 and 1")
    rng = random.Random(args.seed)
    summary = []

    print("evals significance benchmark: Python %s, seed %d, alpha %g, %s"
          % (sys.version.split()[0], args.seed, args.alpha, os.path.join(ROOT, "evals.py")))
    if not evals.min_detectable(args.repeat, args.repeat, args.alpha):
        print("   note: with %d calls a run no drop can be significant at alpha %g"
              % (args.repeat, args.alpha))
    part(1, "real drop", DROP, DROP_TARGET, True, args, rng, summary)
    part(2, "no change", STABLE, STABLE_TARGET, False, args, rng, summary)

    print("\nSummary")
    width = max(len(name) for name, _f, _ok in summary)
    for name, figure, ok in summary:
        print("   %-4s %-*s  %s" % (_verdict(ok), width, name, figure))
    return 0 if all(ok for _n, _f, ok in summary) else 1


if __name__ == "__main__":
    sys.exit(main())
