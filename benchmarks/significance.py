#!/usr/bin/env python3
"""Benchmark for evals.py's significance test on repeated cases, through the real pipeline: how
often a run reports a simulated case as "regressed" against its baseline.

Prints figures and a PASS/MISS summary; it is a script, not a unit test.

    python benchmarks/significance.py                      # 100 trials, 20 calls a run, seed 11
    python benchmarks/significance.py --trials 1000 --seed 1 --repeat 20 --alpha 0.05

Each trial runs one case (a `contains_all` check) twice through evals, as `evals.py --repeat N`
does: `run_cases` with RunOptions(repeat=N) against a seeded simulated client whose answer
passes the check with a fixed probability, then `make_record`. The first run's record is the
baseline (loaded as evals.py loads last_run.json); the second is made against it, and its
entry's `change` is the verdict counted.

1. A real drop: the pass rate is 0.95 in the baseline and 0.4 in the new run.
   Target: "regressed" in >= 95% of trials (95 of 100).
2. No change: the pass rate is 0.8 in both runs.
   Target: "regressed" in <= 5% of trials (5 of 100).
3. No change, run after run: the pass rate is 0.8 in every run, and each run is made against
   the baseline as `python evals.py` keeps last_run.json: rewritten by a run that changes a
   verdict (evals.verdicts_kept), else as it was (10 chains of trials / 10 runs after a first
   one). The counts the baseline keeps must not drift to the luckiest runs. Target:
   "regressed" in <= 5% of the runs.

Beside each simulated rate, the exact probability of "regressed" (every pair of counts weighted
by its binomial probability and decided by evals.decide), which the simulated rate estimates.

Standard library only.
"""

import argparse
import collections
import json
import math
import os
import random
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import evals  # noqa: E402 - after the path to this repository's copy

DROP = (0.95, 0.4)  # pass rate in the baseline, in the new run
STABLE = (0.8, 0.8)
DROP_TARGET = 0.95  # at least this share of trials report "regressed"
STABLE_TARGET = 0.05  # at most this share of trials report "regressed"
CASE = evals.Case("simulated", "Is a refund over $100 approved without a manager?",
                  ({"type": "contains_all", "values": ["manager approval"]},))


def _verdict(ok):
    return "PASS" if ok else "MISS"


def simulated_client(rng, rate):
    """A call_model whose answer passes CASE's check with probability `rate`."""
    def ask(prompt):
        if rng.random() < rate:
            return "Refunds over $100 need manager approval."
        return "Sure, the refund is on its way."
    return ask


def run(rng, rate, baseline, repeat, alpha):
    """The run record of CASE against `baseline` (an evals.Baseline), `repeat` calls."""
    options = evals.RunOptions(repeat=repeat)
    results = evals.run_cases([CASE], simulated_client(rng, rate), options)
    moment = "2026-01-01T00:00:00+00:00"
    return evals.make_record(evals.RunResult(results, moment, moment, "simulated"), baseline,
                             [CASE], options=options, alpha=alpha)


def as_baseline(record):
    """The record as the next run reads it: through JSON, then as load_baseline keeps it."""
    record = json.loads("".join(evals.record_chunks(record)))
    assert evals.record_problem(record) is None
    entries = {entry["id"]: entry for entry in record["cases"]}
    return evals.Baseline(entries, "written", None, record["case_file"]["sha256"])


def simulate(rng, rates, trials, repeat, alpha):
    """Counter of the second run's change (and of its rate test) over `trials` trials."""
    verdicts = collections.Counter()
    for _ in range(trials):
        baseline = as_baseline(run(rng, rates[0], evals.Baseline({}), repeat, alpha))
        entry = run(rng, rates[1], baseline, repeat, alpha)["cases"][0]
        verdicts[entry["change"]] += 1
        verdicts["test: " + entry["rate_test"]["result"]] += 1
    return verdicts


def sequence(rng, rate, trials, repeat, alpha, chains=10):
    """Counter of the changes of `trials` runs at one pass rate, in `chains` chains, each run
    against the baseline as the runs before it in its chain left it."""
    verdicts = collections.Counter()
    for chain in range(chains):
        baseline = as_baseline(run(rng, rate, evals.Baseline({}), repeat, alpha))
        for _ in range(trials // chains + (chain < trials % chains)):
            record = run(rng, rate, baseline, repeat, alpha)
            verdicts[record["cases"][0]["change"]] += 1
            if not evals.verdicts_kept(record, baseline):
                baseline = as_baseline(record)
                verdicts["baseline rewritten"] += 1
    return verdicts


def exact_rate(rates, repeat, alpha):
    """The exact probability that a run reports "regressed" for these pass rates, over every
    pair of counts (evals.decide on the statuses a majority gives)."""
    def pmf(k, rate):
        return math.comb(repeat, k) * rate ** k * (1 - rate) ** (repeat - k)
    needed = evals.RunOptions(repeat=repeat).needed
    total = 0.0
    for k_before in range(repeat + 1):
        before = {"baseline": "pass" if k_before >= needed else "fail",
                  "baseline_passes": k_before, "baseline_calls": repeat}
        for k_now in range(repeat + 1):
            status = "pass" if k_now >= needed else "fail"
            if evals.decide(status, before, counts=(k_now, repeat), alpha=alpha).change \
                    == "regressed":
                total += pmf(k_before, rates[0]) * pmf(k_now, rates[1])
    return total


def part(number, title, rates, target, at_least, args, rng, summary):
    print("\n%d. %s: pass rate %.2f in the baseline, %.2f now, %d calls each, %d trials"
          % (number, title, rates[0], rates[1], args.repeat, args.trials))
    verdicts = simulate(rng, rates, args.trials, args.repeat, args.alpha)
    for name in sorted(verdicts):
        print("   %-30s %6d" % (name, verdicts[name]))
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
    if args.trials < 1 or args.repeat < 2 or not 0 < args.alpha < 1:
        parser.error("--trials must be at least 1, --repeat at least 2, --alpha between 0 and 1")
    rng = random.Random(args.seed)
    summary = []
    started = time.perf_counter()

    print("evals significance benchmark: Python %s, seed %d, alpha %g, %s"
          % (sys.version.split()[0], args.seed, args.alpha, os.path.join(ROOT, "evals.py")))
    if not evals.min_detectable(args.repeat, args.repeat, args.alpha):
        print("   note: with %d calls a run no drop can be significant at alpha %g"
              % (args.repeat, args.alpha))
    part(1, "real drop", DROP, DROP_TARGET, True, args, rng, summary)
    part(2, "no change", STABLE, STABLE_TARGET, False, args, rng, summary)
    print("\n3. no change, run after run: pass rate %.2f, %d calls a run, %d runs, each against "
          "the baseline the runs before left" % (STABLE[0], args.repeat, args.trials))
    verdicts = sequence(rng, STABLE[0], args.trials, args.repeat, args.alpha)
    for name in sorted(verdicts):
        print("   %-30s %6d" % (name, verdicts[name]))
    share = verdicts["regressed"] / args.trials
    name = "no change, run after run: regressed <= %.0f%% of runs" % (100 * STABLE_TARGET)
    summary.append((name, "%d/%d" % (verdicts["regressed"], args.trials),
                    share <= STABLE_TARGET))

    print("\nSummary (%.1f s)" % (time.perf_counter() - started))
    width = max(len(name) for name, _f, _ok in summary)
    for name, figure, ok in summary:
        print("   %-4s %-*s  %s" % (_verdict(ok), width, name, figure))
    return 0 if all(ok for _n, _f, ok in summary) else 1


if __name__ == "__main__":
    sys.exit(main())
