#!/usr/bin/env python3
"""Import IFEval prompts (and optionally model responses) as evals cases.

Usage:
    python examples/ifeval/import_ifeval.py INPUT_DATA [--responses RESPONSES]
        --cases OUT_CASES [--recordings OUT_RECORDINGS] [--skip-unsupported]

Every IFEval prompt becomes one case whose checks list holds exactly one check
per instruction, in the order of ``instruction_id_list``, written in the
harness's generic check vocabulary (no IFEval-specific check type).  IFEval's
relation "less than N" becomes ``max: N-1`` and "at least N" becomes
``min: N`` (bounds are inclusive).

An instruction that has no mapping is never dropped silently: it is reported
on stderr and the whole prompt is left out; the exit status is 1 unless
``--skip-unsupported`` is given.

Standard library only.
"""

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Tuple

CASE_PREFIX = "ifeval-"


class UnsupportedInstruction(Exception):
    """Raised when an IFEval instruction has no generic-check equivalent."""


def _bounds(relation: str, n: int) -> Dict[str, int]:
    """IFEval's relations as inclusive bounds."""
    if relation == "less than":
        return {"max": int(n) - 1}
    if relation == "at least":
        return {"min": int(n)}
    raise UnsupportedInstruction("unknown relation %r" % (relation,))


def _arg(kwargs: Dict[str, Any], name: str) -> Any:
    value = kwargs.get(name)
    if value is None:
        raise UnsupportedInstruction("missing argument %r" % name)
    return value


def _evals():
    """The harness these checks are written for: evals.py at the repository root."""
    root = str(Path(__file__).resolve().parents[2])
    if root not in sys.path:
        sys.path.insert(0, root)
    import evals
    return evals


# Each mapper takes the instruction's kwargs and returns one check dict.

def _no_comma(kw):
    return {"type": "not_contains", "values": [","], "ignore_case": False}


def _highlighted_sections(kw):
    # IFEval counts *text* and **text** spans on one line with some
    # non-blank text inside.
    return {"type": "regex", "pattern": r"\*[^\n*]*[^\s*][^\n*]*\*",
            "min_matches": int(_arg(kw, "num_highlights"))}


def _number_words(kw):
    check = {"type": "word_count", "split": "alphanumeric"}
    check.update(_bounds(_arg(kw, "relation"), _arg(kw, "num_words")))
    return check


def _repeat_prompt(kw):
    return {"type": "starts_with", "value": _arg(kw, "prompt_to_repeat").strip(),
            "ignore_case": True, "strip": True}


def _title(kw):
    # A title is <<...>> on one line with some text inside.
    return {"type": "regex", "pattern": r"<<[^\n]*[^\s<>][^\n]*>>"}


def _keywords_existence(kw):
    return {"type": "contains_all", "values": list(_arg(kw, "keywords")),
            "ignore_case": True, "whole_word": False}


def _forbidden_words(kw):
    return {"type": "not_contains", "values": list(_arg(kw, "forbidden_words")),
            "ignore_case": True, "whole_word": True}


def _keyword_frequency(kw):
    check = {"type": "phrase_count", "phrase": _arg(kw, "keyword").strip(),
             "ignore_case": True, "whole_word": False}
    check.update(_bounds(_arg(kw, "relation"), _arg(kw, "frequency")))
    return check


def _letter_frequency(kw):
    letter = _arg(kw, "letter").strip().lower()
    if len(letter) != 1:
        raise UnsupportedInstruction("letter must be one character, got %r" % letter)
    check = {"type": "phrase_count", "phrase": letter,
             "ignore_case": True, "whole_word": False}
    check.update(_bounds(_arg(kw, "let_relation"), _arg(kw, "let_frequency")))
    return check


def _capital_word_frequency(kw):
    check = {"type": "uppercase_word_count"}
    check.update(_bounds(_arg(kw, "capital_relation"), _arg(kw, "capital_frequency")))
    return check


def _english_capital(kw):
    # IFEval also requires the text to be detected as English; one generic
    # check cannot say both (see README, "Differences").
    return {"type": "letter_case", "style": "upper"}


def _english_lowercase(kw):
    return {"type": "letter_case", "style": "lower"}


def _response_language(kw):
    # A code the harness cannot detect would make evals refuse the whole case file: report
    # it here instead, so only its prompt is left out.
    check = {"type": "language", "code": _arg(kw, "language")}
    problems = _evals().validate_check(check)
    if problems:
        raise UnsupportedInstruction("; ".join(problems))
    return check


def _number_sentences(kw):
    check = {"type": "sentence_count"}
    check.update(_bounds(_arg(kw, "relation"), _arg(kw, "num_sentences")))
    return check


def _placeholders(kw):
    return {"type": "regex", "pattern": r"\[.*?\]",
            "min_matches": int(_arg(kw, "num_placeholders"))}


def _postscript(kw):
    marker = _arg(kw, "postscript_marker").strip()
    if marker == "P.P.S":
        pattern = r"p\.\s?p\.\s?s"
    elif marker == "P.S.":
        pattern = r"p\.\s?s\."
    else:
        pattern = re.escape(marker)
    return {"type": "regex", "pattern": pattern, "flags": "i"}


def _bullet_lists(kw):
    n = int(_arg(kw, "num_bullets"))
    return {"type": "bullet_count", "min": n, "max": n}


def _constrained_response(kw):
    return {"type": "contains_any", "ignore_case": False,
            "values": ["My answer is yes.", "My answer is no.", "My answer is maybe."]}


def _json_format(kw):
    return {"type": "json_valid", "allow_fence": True}


def _multiple_sections(kw):
    splitter = _arg(kw, "section_spliter").strip()
    return {"type": "regex", "pattern": re.escape(splitter) + r"\s?\d+",
            "min_matches": int(_arg(kw, "num_sections"))}


def _nth_paragraph_first_word(kw):
    # IFEval: the text split on "\n\n" has exactly num_paragraphs non-blank
    # pieces, and piece nth_paragraph starts with first_word (case-insensitive,
    # leading quotes skipped, the word ends at whitespace or . , ? ! ' ").
    # Two conditions in one check: a single anchored regex (flags "i").
    n = int(_arg(kw, "num_paragraphs"))
    nth = int(_arg(kw, "nth_paragraph"))
    word = str(_arg(kw, "first_word")).strip().lower()
    if n < 1 or not 1 <= nth <= n or not word:
        raise UnsupportedInstruction("paragraph %d of %d starting with %r" % (nth, n, word))
    piece = r"(?:(?!\n\n)[\s\S])*"          # one "\n\n"-separated piece
    blank = r"(?:(?!\n\n)\s)*"               # a piece with no text
    full = r"(?:(?!\n\n)\s)*\S" + piece      # a piece with text
    first = (r"(?:(?!\n\n)\s)*'*\"*" + re.escape(word)
             + r"(?=[.,?!'\"]|\s|\Z)")
    count = (r"(?:" + blank + r"\n\n)*" + full
             + (r"(?:\n\n(?:" + blank + r"\n\n)*" + full + r")" + "{%d}" % (n - 1) if n > 1 else "")
             + r"(?:\n\n" + blank + r")*\Z")
    nth_piece = r"(?=(?:" + piece + r"\n\n)" + "{%d}" % (nth - 1) + first + r")"
    return {"type": "regex", "pattern": r"\A" + nth_piece + count, "flags": "i"}


def _number_paragraphs(kw):
    n = int(_arg(kw, "num_paragraphs"))
    return {"type": "paragraph_count", "min": n, "max": n, "separator": "***"}


def _two_responses(kw):
    return {"type": "paragraph_count", "min": 2, "max": 2, "separator": "******"}


def _end_checker(kw):
    return {"type": "ends_with", "value": _arg(kw, "end_phrase").strip(),
            "ignore_case": True, "strip": True}


def _quotation(kw):
    return {"type": "regex", "pattern": r'\A\s*".*"\s*\Z', "flags": "s"}


# Instructions whose mapping leaves part of the reference's rule out, and what.
PARTIAL = {
    "change_case:english_capital": "the response is not checked to be in English",
    "change_case:english_lowercase": "the response is not checked to be in English",
}

MAPPERS = {
    "punctuation:no_comma": _no_comma,
    "detectable_format:number_highlighted_sections": _highlighted_sections,
    "length_constraints:number_words": _number_words,
    "combination:repeat_prompt": _repeat_prompt,
    "detectable_format:title": _title,
    "keywords:existence": _keywords_existence,
    "keywords:forbidden_words": _forbidden_words,
    "keywords:frequency": _keyword_frequency,
    "keywords:letter_frequency": _letter_frequency,
    "change_case:capital_word_frequency": _capital_word_frequency,
    "change_case:english_capital": _english_capital,
    "change_case:english_lowercase": _english_lowercase,
    "language:response_language": _response_language,
    "length_constraints:number_sentences": _number_sentences,
    "detectable_content:number_placeholders": _placeholders,
    "detectable_content:postscript": _postscript,
    "detectable_format:number_bullet_lists": _bullet_lists,
    "detectable_format:constrained_response": _constrained_response,
    "detectable_format:json_format": _json_format,
    "detectable_format:multiple_sections": _multiple_sections,
    "length_constraints:nth_paragraph_first_word": _nth_paragraph_first_word,
    "length_constraints:number_paragraphs": _number_paragraphs,
    "combination:two_responses": _two_responses,
    "startend:end_checker": _end_checker,
    "startend:quotation": _quotation,
}


def instruction_to_check(instruction_id: str, kwargs: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    """Map one IFEval instruction to one generic check dict.

    Raises UnsupportedInstruction when there is no mapping.
    """
    mapper = MAPPERS.get(instruction_id)
    if mapper is None:
        raise UnsupportedInstruction("no mapping for instruction type %r" % instruction_id)
    # The published data sometimes carries null-valued keys; ignore them.
    kw = {k: v for k, v in (kwargs or {}).items() if v is not None}
    return mapper(kw)


def prompt_to_case(row: Dict[str, Any]) -> Tuple[Optional[Dict[str, Any]], List[str]]:
    """Turn one input_data row into (case, problems).

    When problems is non-empty the case is None: a prompt is imported with all
    of its instructions or not at all.
    """
    key = row["key"]
    ids = list(row["instruction_id_list"])
    kwargs_list = list(row.get("kwargs") or [{}] * len(ids))
    problems = []
    checks = []
    if len(kwargs_list) != len(ids):
        problems.append("key %s: %d instructions but %d kwargs" % (key, len(ids), len(kwargs_list)))
    else:
        for instruction_id, kwargs in zip(ids, kwargs_list):
            try:
                checks.append(instruction_to_check(instruction_id, kwargs))
            except UnsupportedInstruction as exc:
                problems.append("key %s: instruction %s cannot be expressed: %s"
                                % (key, instruction_id, exc))
    if problems:
        return None, problems
    case = {
        "id": "%s%s" % (CASE_PREFIX, key),
        "input": row["prompt"],
        "checks": checks,
        "tags": ["ifeval"],
        "description": "IFEval prompt %s: %s" % (key, ", ".join(ids)),
    }
    return case, []


def read_jsonl(path: Path) -> List[Dict[str, Any]]:
    rows = []
    with open(path, encoding="utf-8") as fh:
        for number, line in enumerate(fh, 1):
            line = line.strip()
            if not line:
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise SystemExit("%s:%d: invalid JSON: %s" % (path, number, exc))
    return rows


def write_jsonl(path: Path, rows: Iterable[Dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")


def import_cases(input_rows: List[Dict[str, Any]]) -> Tuple[List[Dict[str, Any]], List[str]]:
    cases, problems = [], []
    for row in input_rows:
        case, row_problems = prompt_to_case(row)
        problems.extend(row_problems)
        if case is not None:
            cases.append(case)
    return cases, problems


def responses_to_recordings(response_rows: List[Dict[str, Any]],
                            prompts_by_key: Dict[Any, str]) -> List[Dict[str, Any]]:
    recordings = []
    for row in response_rows:
        key = row.get("key")
        prompt = row.get("prompt")
        if key is None:
            # Published response files are sometimes keyed by prompt only.
            key = next((k for k, p in prompts_by_key.items() if p == prompt), None)
            if key is None:
                raise SystemExit("response without key for an unknown prompt: %.60r" % prompt)
        recordings.append({"id": "%s%s" % (CASE_PREFIX, key),
                           "input": prompt if prompt is not None else prompts_by_key.get(key, ""),
                           "output": row["response"]})
    return recordings


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("input_data", type=Path, help="IFEval input_data.jsonl")
    parser.add_argument("--responses", type=Path, help="responses jsonl (key, prompt, response)")
    parser.add_argument("--cases", type=Path, required=True, help="where to write the cases (jsonl)")
    parser.add_argument("--recordings", type=Path, help="where to write the recordings (jsonl)")
    parser.add_argument("--skip-unsupported", action="store_true",
                        help="exit 0 even if some prompts could not be imported")
    args = parser.parse_args(argv)
    if args.recordings and not args.responses:
        parser.error("--recordings needs --responses")

    input_rows = read_jsonl(args.input_data)
    cases, problems = import_cases(input_rows)
    write_jsonl(args.cases, cases)
    n_checks = sum(len(c["checks"]) for c in cases)
    print("wrote %d cases (%d checks) to %s" % (len(cases), n_checks, args.cases), file=sys.stderr)
    if args.responses:
        prompts = {row["key"]: row["prompt"] for row in input_rows}
        recordings = responses_to_recordings(read_jsonl(args.responses), prompts)
        if args.recordings:
            write_jsonl(args.recordings, recordings)
            print("wrote %d recordings to %s" % (len(recordings), args.recordings), file=sys.stderr)
    partial = {}
    for row in input_rows:
        for instruction_id in row["instruction_id_list"]:
            if instruction_id in PARTIAL:
                partial[instruction_id] = partial.get(instruction_id, 0) + 1
    for instruction_id, count in sorted(partial.items()):
        print("note: %d x %s imported in part: %s"
              % (count, instruction_id, PARTIAL[instruction_id]), file=sys.stderr)
    if problems:
        print("NOT IMPORTED (%d instruction(s) cannot be expressed; their prompts were left out):"
              % len(problems), file=sys.stderr)
        for problem in problems:
            print("  " + problem, file=sys.stderr)
        return 0 if args.skip_unsupported else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
