#!/usr/bin/env python3
"""Benchmark of mask_secrets, which every line evals writes passes through.

Times the masking of JSON lines (a record's entries: 16 MB, two credentials in the environment)
three ways: `now` (evals.py: each credential's pattern, tried only on text holding its longest
run of ASCII letters and digits), `pattern` (the same patterns on every text), and `0.3.0` (its
pattern, copied below, which missed the JSON escapes of non-ASCII characters). Prints seconds
(the fastest of --rounds) and each against `now` as a ratio; with a credential in every tenth
line, and in none. A script, not a unit test: timings need a quiet machine.

    python benchmarks/masking.py
"""

import argparse
import json
import os
import re
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
KEYS = {"OPENAI_API_KEY": "sk-proj-abcdefghijklmnop1234567890", "GH_TOKEN": "ghp_1234567890abcd"}
os.environ.update(KEYS)

import evals  # noqa: E402 - after the keys are in the environment


def pattern_030(values):
    """0.3.0's pattern: each character after an optional backslash."""
    return re.compile(
        "|".join(re.escape(v[0]) + "".join(r"\\?" + re.escape(c) for c in v[1:]) for v in values)
    )


def lines(leaky):
    text = "Sorry it broke! I've refunded the $150 to your card; you'll see it instantly. " * 40
    rows = []
    for i in range(5000):
        output = text
        if leaky and i % 10 == 0:
            output += KEYS["OPENAI_API_KEY"]
        rows.append(json.dumps({"id": f"case-{i}", "output": output}, ensure_ascii=False))
    return rows


def best(function, rows, rounds):
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        for row in rows:
            function(row)
        times.append(time.perf_counter() - started)
    return min(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    rounds = parser.parse_args().rounds
    evals._find_secrets()
    pattern = evals._SECRETS[0]
    old = pattern_030(sorted(KEYS.values(), key=len, reverse=True))
    ways = {
        "now": evals.mask_secrets,
        "pattern": lambda text: pattern.sub("[redacted]", text),
        "0.3.0": lambda text: old.sub("[redacted]", text),
    }
    for leaky in (False, True):
        rows = lines(leaky)
        size = sum(map(len, rows)) / 1e6
        times = {name: best(way, rows, rounds) for name, way in ways.items()}
        shown = ", ".join(
            f"{name} {seconds:.3f} s ({seconds / times['now']:.1f}x)"
            for name, seconds in times.items()
        )
        where = "no line"
        if leaky:
            where = "every tenth line"
        print(f"{size:.0f} MB, a key in {where}: {shown}")


if __name__ == "__main__":
    main()
