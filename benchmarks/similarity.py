#!/usr/bin/env python3
"""Benchmark of the similarity check's two quadratic metrics: levenshtein and rouge_l.

Prints, for each size, the time of evals_extras.py's bit-parallel functions (now) and of the
quadratic dynamic programme they replaced (before, copied below), and before / now as a ratio;
then a PASS/MISS line per target. A script, not a unit test: timings need a quiet machine.

    python benchmarks/similarity.py             # 3,500 characters, 4,000 words, 10 KB, 100 KB
    python benchmarks/similarity.py --quick     # a tenth of each size, before capped at 2 s
    python benchmarks/similarity.py --cap 600   # wait up to 10 minutes for a before

The texts are generated prose (seeded): a reference and an answer that rewrites a tenth of its
words, first and last included (a common start or end would be trimmed before either algorithm
runs). KB here is 1,000 characters: 100 KB is 100,000 characters, the limit of levenshtein.
levenshtein_ratio is timed on characters, rouge_l on the lowercased white-space words. `now` is
the fastest of --rounds runs (3); `before` runs once in a child process stopped after --cap
seconds (60), shown then as "> 60 s". Both give the same score, or MISMATCH is printed.

Targets: 3,500 x 3,500 characters under 50 ms; 4,000 x 4,000 words under 0.2 s; 100 KB texts
under 10 s for either metric.
"""

import argparse
import multiprocessing
import os
import random
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import evals_extras  # noqa: E402  (from the repository root)

# ---------------------------------------------------------------------------------------------
# Before: evals_extras.py's quadratic versions (0.3.0), copied as they were
# ---------------------------------------------------------------------------------------------


def _trimmed(a, b):
    shorter, start, tail = min(len(a), len(b)), 0, 0
    while start < shorter and a[start] == b[start]:
        start += 1
    while tail < shorter - start and a[-1 - tail] == b[-1 - tail]:
        tail += 1
    return a[start : len(a) - tail], b[start : len(b) - tail], start + tail


def _levenshtein(a, b):
    a, b, _ = _trimmed(a, b)
    if len(a) < len(b):
        a, b = b, a
    previous = list(range(len(b) + 1))
    for i, char in enumerate(a, 1):
        current = [i]
        left = i
        for j, other in enumerate(b):
            left += 1
            up, diagonal = previous[j + 1] + 1, previous[j] + (char != other)
            left = up if up < left else left
            left = diagonal if diagonal < left else left
            current.append(left)
        previous = current
    return previous[-1]


def _lcs_length(a, b):
    a, b, common = _trimmed(a, b)
    if len(a) < len(b):
        a, b = b, a
    previous = [0] * (len(b) + 1)
    for item in a:
        current = [0]
        left = 0
        for j, other in enumerate(b):
            if item == other:
                left = previous[j] + 1
            elif previous[j + 1] > left:
                left = previous[j + 1]
            current.append(left)
        previous = current
    return common + previous[-1]


def before_levenshtein_ratio(text, reference):
    longest = max(len(text), len(reference))
    if not longest:
        return 1.0
    return 1.0 - _levenshtein(text, reference) / longest


def before_rouge_l(text, reference):
    produced, expected = text.lower().split(), reference.lower().split()
    return evals_extras._f_measure(_lcs_length(produced, expected), len(produced), len(expected))


METRICS = {
    "levenshtein": (evals_extras.levenshtein_ratio, before_levenshtein_ratio),
    "rouge_l": (evals_extras.rouge_l, before_rouge_l),
}

# ---------------------------------------------------------------------------------------------
# Texts and timing
# ---------------------------------------------------------------------------------------------

WORDS = (
    "the a of to and in refund policy order customer days within support account payment "
    "delivery return item received we you your please contact email number thirty business "
    "after before request approved manager shipping address invoice"
).split()


def texts(characters=None, words=None, seed=7):
    """An answer and a reference of exactly `characters` characters or `words` words: the
    answer has one word in ten (first and last included) replaced."""
    rng = random.Random(seed)
    reference = []
    while len(reference) < (words or characters // 2):
        word = rng.choice(WORDS)
        if rng.random() < 0.3:
            word += str(rng.randrange(100))
        reference.append(word)
    answer = list(reference)
    for i in range(0, len(answer), 10):
        answer[i] = rng.choice(WORDS).upper()
    answer[-1] = "END."
    text, reference = " ".join(answer), " ".join(reference)
    if characters:  # cut, ending on a letter
        text, reference = text[: characters - 1] + "s", reference[: characters - 1] + "s"
    return text, reference


def best_time(function, args, rounds):
    """(fastest seconds of `rounds` runs, the result)."""
    best = None
    for _ in range(rounds):
        start = time.perf_counter()
        result = function(*args)
        seconds = time.perf_counter() - start
        if best is None or seconds < best:
            best = seconds
    return best, result


def _before_child(metric, args, connection):
    connection.send(best_time(METRICS[metric][1], args, 1))


def before_time(metric, args, cap):
    """(seconds, score) of the quadratic version in a child process, or (None, None) when it
    has not ended after `cap` seconds."""
    receiving, sending = multiprocessing.Pipe(duplex=False)
    child = multiprocessing.Process(target=_before_child, args=(metric, args, sending))
    child.start()
    if receiving.poll(cap):
        found = receiving.recv()
    else:
        found = (None, None)
    child.terminate()
    child.join()
    return found


def shown(seconds):
    if seconds < 1:
        return f"{seconds * 1000:.1f} ms"
    return f"{seconds:.2f} s"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a tenth of each size, cap 2 s")
    parser.add_argument("--rounds", type=int, default=3, help="runs of `now`; the fastest counts")
    parser.add_argument("--cap", type=float, help="seconds a `before` may take (60)")
    args = parser.parse_args(argv)
    scale, cap = 1, args.cap or 60.0
    if args.quick:
        scale, cap = 10, args.cap or 2.0
    rows = [  # (metric, texts' keyword arguments, the target in seconds or None)
        ("levenshtein", {"characters": 3500 // scale}, 0.05),
        ("rouge_l", {"words": 4000 // scale}, 0.2),
        ("levenshtein", {"characters": 10_000 // scale}, None),
        ("rouge_l", {"characters": 10_000 // scale}, None),
        ("levenshtein", {"characters": 100_000 // scale}, 10.0),
        ("rouge_l", {"characters": 100_000 // scale}, 10.0),
    ]
    if args.quick:
        print("quick: a tenth of each size; the targets are for the full sizes")
    print(f"now: the fastest of {args.rounds} runs; before: one run, stopped after {cap:g} s")
    print(
        f"{'metric':<12} {'texts':<32} {'score':>6} {'now':>10} {'before':>10} {'before/now':>11}"
    )
    verdicts = []
    for metric, size, target in rows:
        pair = texts(**size)
        label = f"{len(pair[1].split()):,} words"
        if "characters" in size:
            label = f"{len(pair[1]):,} characters"
        if metric == "rouge_l" and "characters" in size:
            label += f" ({len(pair[1].split()):,} words)"
        now, score = best_time(METRICS[metric][0], pair, args.rounds)
        before, old_score = before_time(metric, pair, cap)
        if before is None:
            before_text, ratio = f"> {cap:g} s", f"> {cap / now:,.0f} x"
        else:
            before_text, ratio = shown(before), f"{before / now:,.0f} x"
        mismatch = ""
        if old_score is not None and old_score != score:
            mismatch = f"  MISMATCH: before scored {old_score!r}, now {score!r}"
        print(
            f"{metric:<12} {label:<32} {score:>6.3f} {shown(now):>10} {before_text:>10} "
            f"{ratio:>11}{mismatch}"
        )
        if target is not None and not args.quick:
            verdict = "PASS"
            if now >= target:
                verdict = "MISS"
            verdicts.append(f"   {verdict} {metric} at {label}: {shown(now)} < {shown(target)}")
    for line in verdicts:
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
