"""The interactive review of captured calls, moved verbatim out of my_client.py (it was
``python my_client.py review``): walk the calls ``my_client.capture`` logged and turn bad answers
into cases. It needs evals.py (load_cases, case_problems, append_case, _visible), so it leaves
my_client, which imports nothing from evals. For the lead to fold into the optional file;
nothing imports this module. The few helpers of my_client it used are copied below.

    python _review_moved.py [--captures FILE] [--cases FILE]
"""

import hashlib
import json
import os
import re
import sys
from typing import Any, Dict, List, Optional, Tuple

# Copied from my_client: where capture writes, what a conversation is, one O_APPEND write.
DEFAULT_CAPTURES = os.path.join(".evals", "captures.jsonl")


def _is_conversation(value: Any) -> bool:
    """A list of {"role": "system" | "user" | "assistant", "content": str}, one at least."""
    return (isinstance(value, list) and bool(value) and all(
        isinstance(m, dict) and m.get("role") in ("system", "user", "assistant")
        and isinstance(m.get("content"), str) for m in value))


def _append_bytes(path: str, data: bytes) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    handle = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        while data:
            data = data[os.write(handle, data):]
    finally:
        os.close(handle)


# ---------------------------------------------------------------------------------------------
# Review: captured calls become cases (python my_client.py review)
# ---------------------------------------------------------------------------------------------

class _EndOfInput(Exception):
    """Standard input ended: the review stops and nothing more is appended."""


def _review_parser() -> Any:
    import argparse

    parser = argparse.ArgumentParser(
        prog="my_client.py review",
        description="Walk the calls captured by my_client.capture that are not reviewed yet and "
                    "turn bad answers into cases. For each call the input and output are shown; "
                    "[a]pprove asks what the answer should have said (the rubric of a `judge` "
                    "check) and, separately, facts it must state and claims it must not make; "
                    "[e]dit takes the case as pasted JSON; [s]kip marks the call reviewed; [q]uit "
                    "stops. A case is shown in full and appended (validated, atomically) only "
                    "after you answer y; end of input is a no. Answers are read from standard "
                    "input, one a line, so the command can be scripted.",
        epilog="Reviewed calls are listed (by hash) in FILE.reviewed next to the captures and "
               "are not shown again.")
    parser.add_argument("--captures", default=DEFAULT_CAPTURES, metavar="FILE",
                        help=f"captured calls, JSONL (default: {DEFAULT_CAPTURES})")
    parser.add_argument("--cases", default="cases.jsonl", metavar="FILE",
                        help="case file to append to (default: cases.jsonl)")
    return parser


def _read_captures(path: str) -> Tuple[List[Tuple[str, Dict[str, Any]]], int]:
    """([(sha256 of the line, capture)] in file order, count of lines that are not captures);
    identical lines count once."""
    import evals

    try:
        with open(path, encoding="utf-8-sig", errors="replace") as handle:
            lines = handle.read().split("\n")
    except FileNotFoundError:
        raise evals.EvalsError(f"{path}: no captures yet (wrap your model call with "
                               "my_client.capture to record them)") from None
    except OSError as exc:
        raise evals.EvalsError(f"{path}: cannot read the captures: {exc.strerror or exc}") from None
    captures: Dict[str, Dict[str, Any]] = {}
    bad = 0
    for line in (line.rstrip("\r") for line in lines if line.strip()):
        try:
            row = json.loads(line)
        except ValueError:
            row = None
        if isinstance(row, dict) and "input" in row and "output" in row:
            captures.setdefault(hashlib.sha256(line.encode("utf-8")).hexdigest(), row)
        else:
            bad += 1
    return list(captures.items()), bad


def _ask(stdout: Any, prompt: str) -> str:
    """One answer line from standard input, without its line end; raises _EndOfInput."""
    stdout.write(prompt)
    stdout.flush()
    line = sys.stdin.readline()
    if not line:
        stdout.write("\n")
        raise _EndOfInput
    if not sys.stdin.isatty():  # a scripted session: echo, so the transcript reads like one
        stdout.write(line if line.endswith("\n") else line + "\n")
    return line.rstrip("\r\n")


def _suggest_id(text: str, cases_path: str) -> str:
    """A case id from the first words of the input, unique in the case file."""
    import evals

    taken = set()
    if os.path.exists(cases_path) and os.path.getsize(cases_path):
        taken = {case.id for case in evals.load_cases(cases_path)[0]}
    base = "-".join(re.findall(r"[a-z0-9]+", text.casefold())[:6])[:48].strip("-") or "captured"
    suggestion, number = base, 2
    while suggestion in taken:
        suggestion, number = f"{base}-{number}", number + 1
    return suggestion


def _capture_text(value: Any) -> Optional[str]:
    """The captured input or output as text, or None when only a hash was stored."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and set(value) == {"sha256", "chars"}:
        return None
    return json.dumps(value, ensure_ascii=False)


def _case_input(value: Any) -> Any:
    """A captured input as a case's input: a conversation stays a list of messages; anything
    else is its text (None when only a hash was stored)."""
    return [dict(m) for m in value] if _is_conversation(value) else _capture_text(value)


def _shown_text(value: Any) -> Optional[str]:
    """A captured input or output as a reviewer reads it: a conversation a message a line
    ("user: ..."), a whole reply its text then its tool calls and finish reason."""
    if _is_conversation(value):
        return "\n".join("%s: %s" % (m["role"], m["content"]) for m in value)
    if isinstance(value, dict) and isinstance(value.get("text"), str) and "tool_calls" in value:
        lines = [value["text"]] + ["tool call: %s %s" % (call.get("name"), json.dumps(
            call.get("arguments"), ensure_ascii=False)) for call in value.get("tool_calls") or []
            if isinstance(call, dict)]
        if value.get("finish_reason"):
            lines.append("finish reason: %s" % value["finish_reason"])
        return "\n".join(lines)
    return _capture_text(value)


def _drafted_case(row: Dict[str, Any], text: str, cases_path: str, stdout: Any) -> Any:
    """A case from the reviewer's answers (dict), or None when nothing is to be checked."""
    def phrases(answer: str) -> List[str]:
        return [part.strip() for part in answer.split(";") if part.strip()]

    correction = _ask(stdout, "What should the answer have said? (the judge's rubric; "
                              "empty for none)\n> ").strip()
    required = phrases(_ask(stdout, "Facts the answer must state, separated by ';' "
                                    "(empty for none)\n> "))
    forbidden = phrases(_ask(stdout, "Claims the answer must not make, separated by ';' "
                                     "(empty for none)\n> "))
    # Each list comes from its own answer: the correction is never mined for phrases, so a
    # correction such as 'Include "manager approval"' cannot become a forbidden claim.
    check = {key: value for key, value in (("rubric", correction), ("must_include", required),
                                           ("must_not_claim", forbidden)) if value}
    if not check:
        stdout.write("nothing to check: give a correction, a fact or a claim\n")
        return None
    suggestion = _suggest_id(text, cases_path)
    case = {"id": _ask(stdout, f"case id [{suggestion}]: ").strip() or suggestion,
            "input": _case_input(row.get("input")), "checks": [{"type": "judge", **check}],
            "description": f"From a call captured {row.get('ts') or '(no time)'}: the answer was "
                           "wrong." + (f" Correction: {correction}" if correction else ""),
            "tags": [t for t in row.get("tags") or [] if isinstance(t, str)] + ["captured"]}
    output = _capture_text(row.get("output"))
    if output is not None:
        case["metadata"] = {"captured_output": output}
    return case


def _pasted_case(row: Dict[str, Any], text: str, cases_path: str, stdout: Any) -> Any:
    """A case pasted as JSON, lines up to an empty one (dict), or None when it is invalid."""
    import evals

    draft = {"id": _suggest_id(text, cases_path), "input": _case_input(row.get("input")),
             "checks": [{"type": "judge", "rubric": "What a correct answer says."}]}
    stdout.write("Paste the case as JSON (it may span lines; end it with an empty line). A "
                 "draft:\n" + json.dumps(draft, ensure_ascii=False) + "\n")
    stdout.flush()
    lines: List[str] = []
    while True:
        line = sys.stdin.readline()
        if not line and not lines:
            raise _EndOfInput
        if not line or (not line.strip() and lines):
            break
        lines += [line] if line.strip() else []
    try:
        case = json.loads("".join(lines))
    except ValueError as exc:
        stdout.write(f"not valid JSON: {exc}\n")
        return None
    problems = evals.case_problems(case)
    if problems:
        stdout.write("the case is not valid:\n  " + "\n  ".join(problems) + "\n")
        return None
    return case


def _show_capture(number: int, total: int, row: Dict[str, Any], stdout: Any) -> None:
    import evals

    def shown(value: Optional[str], absent: str) -> str:
        return absent if value is None else evals._visible(value).replace("\n", "\n  ")

    details = [str(row["ts"])] if row.get("ts") else []
    if row.get("tags"):
        details.append("tags: " + ", ".join(str(t) for t in row["tags"]))
    stdout.write(f"\n--- capture {number} of {total}"
                 + (f" ({'; '.join(details)})" if details else "") + " ---\n")
    stdout.write("input:\n  " + shown(_shown_text(row.get("input")),
                                       "(not stored: store_text=False)") + "\n")
    if row.get("error"):
        stdout.write(f"error: {evals._visible(row['error'])}\n")
    else:
        stdout.write("output:\n  " + shown(_shown_text(row.get("output")), "(not stored)")
                     + "\n")
    if row.get("context"):
        stdout.write("context: " + evals._visible(json.dumps(row["context"], ensure_ascii=False))
                     + "\n")


def _append_case(path: str, case: Dict[str, Any]) -> None:
    """append_case, from the optional file since the reshape moved it there (from evals before)."""
    try:
        from evals_extras import append_case
    except ImportError:
        from evals import append_case
    append_case(path, case)


def _review_one(row: Dict[str, Any], cases_path: str, stdout: Any) -> str:
    """Review one capture: "added" or "skipped"; raises _EndOfInput (and on [q]uit)."""
    import evals

    text = _capture_text(row.get("input"))  # a case id is suggested from it
    if text is not None and _is_conversation(row["input"]):
        text = row["input"][-1]["content"]
    while True:
        choice = _ask(stdout, "[a]pprove / [e]dit / [s]kip / [q]uit? ").strip().lower()
        if choice in ("q", "quit"):
            raise _EndOfInput
        if choice in ("s", "skip"):
            return "skipped"
        if choice not in ("a", "approve", "e", "edit"):
            stdout.write("answer a, e, s or q\n")
            continue
        if text is None:
            stdout.write("this capture has no input text (captured with store_text=False); it "
                         "cannot become a case\n")
            continue
        draft = _drafted_case if choice in ("a", "approve") else _pasted_case
        try:
            case = draft(row, text, cases_path, stdout)
            if case is not None:
                stdout.write(json.dumps(case, ensure_ascii=False, indent=1) + "\n")
                confirmed = _ask(stdout, f"Append this case to {cases_path}? [y/N] ")
        except _EndOfInput:
            stdout.write("end of input: nothing appended\n")
            raise
        if case is None:
            continue
        if confirmed.strip().lower() not in ("y", "yes"):
            stdout.write("not appended\n")
            continue
        try:
            _append_case(cases_path, case)
        except evals.EvalsError as exc:
            stdout.write(f"not appended: {exc}\n")
            continue
        stdout.write(f"added case {case['id']!r} to {cases_path}\n")
        return "added"


def review(argv: Optional[List[str]] = None, stdout: Any = None, stderr: Any = None) -> int:
    """``python my_client.py review``: walk the captured calls not reviewed yet and turn bad
    answers into cases (see --help). Returns the exit code: 0, or 2 for invalid input."""
    import evals

    stdout, stderr = stdout or sys.stdout, stderr or sys.stderr
    args = _review_parser().parse_args(argv)
    try:
        captures, bad = _read_captures(args.captures)
        _suggest_id("", args.cases)  # an invalid case file is reported before any question
    except evals.EvalsError as exc:
        stderr.write(f"{exc}\n")
        return 2
    if bad:
        stderr.write(f"my_client: {args.captures}: {bad} line(s) are not captures; ignored\n")
    reviewed_path = args.captures + ".reviewed"
    try:
        with open(reviewed_path, encoding="utf-8", errors="replace") as handle:
            reviewed = {line.strip() for line in handle if line.strip()}
    except FileNotFoundError:
        reviewed = set()
    pending = [(key, row) for key, row in captures if key not in reviewed]
    if not pending:
        stdout.write(f"nothing to review: {len(captures)} capture(s) in {args.captures}, all "
                     "reviewed\n")
        return 0
    added = done = 0
    try:
        for number, (key, row) in enumerate(pending, 1):
            _show_capture(number, len(pending), row, stdout)
            outcome = _review_one(row, args.cases, stdout)
            _append_bytes(reviewed_path, (key + "\n").encode("ascii"))
            done += 1
            added += outcome == "added"
    except _EndOfInput:
        pass
    stdout.write(f"{added} case(s) added to {args.cases}; {len(pending) - done} capture(s) left "
                 "to review\n")
    return 0


if __name__ == "__main__":
    sys.exit(review(sys.argv[1:]))
