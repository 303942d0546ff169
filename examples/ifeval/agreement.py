#!/usr/bin/env python3
"""Agreement between evals' generic checks and IFEval's reference verdicts.

Usage:
    python examples/ifeval/agreement.py [DATA_DIR] [--check] [--verbose]

DATA_DIR holds input_data.jsonl, one responses_*.jsonl (responses_gpt4.jsonl, or
responses_smollm2.jsonl in ../shared/ifeval/smollm2) and reference_strict.jsonl
(default: ../shared/ifeval relative to the repository root).  Every prompt is
imported with import_ifeval.py's mapping, every response is scored with
evals.run_check, and each instruction's verdict is compared with the
reference implementation's strict verdict.

Prints a per-type table, the agreement on the purely textual instruction
types, the agreement on the five types for which the reference uses nltk
punkt or langdetect, and prompt-level strict accuracy (ours vs reference).

--check exits 1 unless every textual verdict agrees and our prompt-level
accuracy is within 1 point of the reference's.
--verbose lists every disagreement.

Standard library only.
"""

import argparse
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parents[1]
DEFAULT_DATA = REPO_ROOT.parent / "shared" / "ifeval"
for _path in (str(REPO_ROOT), str(HERE)):
    if _path not in sys.path:
        sys.path.insert(0, _path)

import evals  # noqa: E402  (the repository-root evals.py)
import import_ifeval  # noqa: E402

# The instruction types whose reference verdicts depend on nltk's punkt model
# or on langdetect; evals approximates those with the standard library.
NON_TEXTUAL_TYPES = (
    "length_constraints:number_sentences",
    "change_case:capital_word_frequency",
    "change_case:english_capital",
    "change_case:english_lowercase",
    "language:response_language",
)
TEXTUAL_THRESHOLD = 100.0    # percent, instruction level: every textual verdict
PROMPT_TOLERANCE = 1.0       # percentage points, prompt level
REFERENCE_FILE = "reference_strict.jsonl"


def _excerpt(text: str, limit: int = 70) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def _rate(agree: int, n: int) -> Optional[float]:
    return 100.0 * agree / n if n else None


def _responses_file(data_dir: Path) -> Path:
    found = sorted(data_dir.glob("responses_*.jsonl"))
    if len(found) != 1:
        raise SystemExit("%s: expected one responses_*.jsonl, found %d"
                         % (data_dir, len(found)))
    return found[0]


def measure(data_dir: Path) -> Dict[str, Any]:
    """Score the responses in data_dir and compare with the reference verdicts."""
    data_dir = Path(data_dir)
    input_rows = import_ifeval.read_jsonl(data_dir / "input_data.jsonl")
    cases, problems = import_ifeval.import_cases(input_rows)
    if problems:
        raise SystemExit("import failed:\n  " + "\n  ".join(problems))
    for case in cases:
        for check in case["checks"]:
            invalid = evals.validate_check(check)
            if invalid:
                raise SystemExit("%s: invalid check %r: %s" % (case["id"], check, "; ".join(invalid)))
    prompts = {row["key"]: row["prompt"] for row in input_rows}
    recordings = import_ifeval.responses_to_recordings(
        import_ifeval.read_jsonl(_responses_file(data_dir)), prompts)
    outputs = {rec["id"]: rec["output"] for rec in recordings}
    reference = {import_ifeval.CASE_PREFIX + str(row["key"]): row
                 for row in import_ifeval.read_jsonl(data_dir / REFERENCE_FILE)}

    per_type: Dict[str, List[int]] = {}
    disagreements = []
    ours_all = ref_all = prompts_scored = 0
    for case in cases:
        ref = reference.get(case["id"])
        output = outputs.get(case["id"])
        if ref is None or output is None:
            raise SystemExit("%s: no %s" % (case["id"], "reference verdict" if ref is None else "response"))
        ids = ref["instruction_id_list"]
        verdicts = ref["follow_instruction_list"]
        if len(ids) != len(case["checks"]):
            raise SystemExit("%s: %d checks but %d reference verdicts"
                             % (case["id"], len(case["checks"]), len(ids)))
        passed_all = True
        for instruction_id, check, ref_verdict in zip(ids, case["checks"], verdicts):
            result = evals.run_check(check, output)
            passed_all = passed_all and result.passed
            stats = per_type.setdefault(instruction_id, [0, 0])
            stats[0] += 1
            if result.passed == bool(ref_verdict):
                stats[1] += 1
            else:
                disagreements.append({
                    "key": case["id"][len(import_ifeval.CASE_PREFIX):],
                    "type": instruction_id, "ours": result.passed,
                    "reference": bool(ref_verdict), "reason": result.reason,
                    "excerpt": _excerpt(output)})
        prompts_scored += 1
        ours_all += passed_all
        ref_all += bool(ref["follow_all_instructions"])

    def total(types):
        n = sum(per_type[t][0] for t in types)
        agree = sum(per_type[t][1] for t in types)
        return {"n": n, "agree": agree, "percent": _rate(agree, n)}

    textual = [t for t in per_type if t not in NON_TEXTUAL_TYPES]
    non_textual = [t for t in per_type if t in NON_TEXTUAL_TYPES]
    return {
        "per_type": {t: {"n": n, "agree": a, "percent": _rate(a, n)}
                     for t, (n, a) in sorted(per_type.items())},
        "textual": total(textual),
        "non_textual": total(non_textual),
        "all": total(list(per_type)),
        "prompts": prompts_scored,
        "prompt_ours": {"passed": ours_all, "percent": _rate(ours_all, prompts_scored)},
        "prompt_reference": {"passed": ref_all, "percent": _rate(ref_all, prompts_scored)},
        "disagreements": disagreements,
    }


def passes_thresholds(result: Dict[str, Any]) -> List[str]:
    """Reasons the result misses the --check thresholds (empty list: it passes)."""
    failures = []
    textual = result["textual"]["percent"]
    if textual is None or textual < TEXTUAL_THRESHOLD:
        failures.append("textual agreement %s < %.1f%%" % (_fmt(textual), TEXTUAL_THRESHOLD))
    ours = result["prompt_ours"]["percent"]
    ref = result["prompt_reference"]["percent"]
    if ours is None or ref is None or abs(ours - ref) > PROMPT_TOLERANCE:
        failures.append("prompt-level accuracy %s is more than %.1f points from the reference's %s"
                        % (_fmt(ours), PROMPT_TOLERANCE, _fmt(ref)))
    return failures


def _fmt(percent: Optional[float]) -> str:
    return "n/a" if percent is None else "%.1f%%" % percent


def format_report(result: Dict[str, Any], verbose: bool = False) -> str:
    lines = []
    width = max(len(t) for t in result["per_type"]) + 2
    lines.append("%-*s %5s %6s %7s" % (width, "instruction type", "n", "agree", "%"))
    for group, title in ((False, "textual"), (True, "needs punkt/langdetect in the reference")):
        lines.append("-- %s" % title)
        for t, s in result["per_type"].items():
            if (t in NON_TEXTUAL_TYPES) == group:
                lines.append("%-*s %5d %6d %7s" % (width, t, s["n"], s["agree"], _fmt(s["percent"])))
    lines.append("")
    for label, key in (("textual types", "textual"), ("punkt/langdetect types", "non_textual"),
                       ("all instructions", "all")):
        s = result[key]
        lines.append("agreement, %-24s %d/%d = %s" % (label + ":", s["agree"], s["n"], _fmt(s["percent"])))
    ours, ref = result["prompt_ours"], result["prompt_reference"]
    lines.append("prompt-level strict accuracy: ours %d/%d = %s, reference %d/%d = %s"
                 % (ours["passed"], result["prompts"], _fmt(ours["percent"]),
                    ref["passed"], result["prompts"], _fmt(ref["percent"])))
    if verbose:
        lines.append("")
        lines.append("disagreements (%d):" % len(result["disagreements"]))
        for d in result["disagreements"]:
            lines.append("  key %s  %s  ours=%s reference=%s  (%s)  %r"
                         % (d["key"], d["type"], d["ours"], d["reference"], d["reason"], d["excerpt"]))
    return "\n".join(lines)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("data_dir", nargs="?", type=Path, default=DEFAULT_DATA,
                        help="folder with the IFEval files (default: %(default)s)")
    parser.add_argument("--check", action="store_true",
                        help="exit 1 unless the agreement thresholds are met")
    parser.add_argument("--verbose", "-v", action="store_true", help="list the disagreements")
    args = parser.parse_args(argv)
    if not args.data_dir.is_dir():
        parser.error("no data folder at %s: pass the folder that holds input_data.jsonl, "
                     "a responses_*.jsonl and reference_strict.jsonl (see "
                     "examples/ifeval/README.md)" % args.data_dir)
    result = measure(args.data_dir)
    print(format_report(result, verbose=args.verbose))
    if args.check:
        failures = passes_thresholds(result)
        if failures:
            for failure in failures:
                print("CHECK FAILED: " + failure, file=sys.stderr)
            return 1
        print("check passed: textual agreement >= %.1f%%, prompt-level within %.1f points"
              % (TEXTUAL_THRESHOLD, PROMPT_TOLERANCE))
    return 0


if __name__ == "__main__":
    sys.exit(main())
