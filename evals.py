#!/usr/bin/env python3
"""evals: regression tests for prompts and model upgrades, in one standard-library file.

Copy this file into your repository, write cases from real failures, and run it in CI:

    python evals.py                        # run cases.jsonl, compare with last_run.json
    python evals.py --client app.llm:ask   # any callable str -> str answers each input
    python evals.py --rescore recordings.jsonl   # score recorded outputs, call no model
    python evals.py --accept               # take this run as the new baseline
    python evals.py --list-checks          # the check vocabulary

Case file (JSONL, one case a line; blank lines, CRLF and a UTF-8 BOM are accepted):

    {"id": "refund-limit", "input": "Can I get a $150 refund today?", "tags": ["smoke"],
     "checks": [{"type": "contains_all", "values": ["manager approval"]}]}

A case ends `pass`, `fail`, `review` (a judge was unsure) or `error` (the call failed: never
scored, never a pass). One that passed in the baseline (`last_run.json`) and does not pass now
is a regression until it passes again or `--accept`; a repeated case regresses when its pass
rate dropped significantly (Fisher's exact test). `decide` holds the rules (docs/outcomes.md).

Exit codes: 0 nothing regressed; 1 a regression (with --strict, any failing case), or a pass
rate below --min-pass-rate; 2 invalid input (case file, baseline, options, client) or an errored
case, which wins over 1 because the run is incomplete; 130 interrupted (Ctrl-C or SIGTERM; no
baseline written).

The client contract: `call_model(input)` (a str, or a list of {"role", "content"}) gets `case=`
and `attempt=` only when its signature names them, and returns a str, or a mapping or object
with `text` and any of `tool_calls`, `finish_reason`, `usage`, `reasoning`, `model`; attributes
declare the rest (`accepts_conversations = True`, a `batch` method). It imports nothing from here.

The optional parts live in evals_extras.py beside this file, a plugin: its checks register in
CHECKS as it is imported, and the command line reaches it through five names (OPTIONS,
COMMANDS, and the hooks before_run, around_call and finish, handed a `Run`); `_extras` imports
it. What happens around a call (the journal, the cache, the rate limits) is there, for every
client; a refused call (an exception with `retry_after`) goes back to the run here.

Sections, in pipeline order, each calling only those above it: errors and data (Case, Answer,
CheckResult, atomic writes, loading callables, `_extras`, a client's reply read by
`read_reply`); text units (folding, words, JSON); checks (`register`, a function a check,
`evaluate`); cases (`load_cases`, selection); runner (calling the client: -j, timeouts,
repeats; the replay of recorded outputs); outcomes (`decide`, the baseline, the run record);
reports (the summary, annotations); command line (options, `main`).

evals 0.4.0, MIT licence (see LICENSE). Python 3.9 or newer, standard library only.
"""

import argparse
import collections
import collections.abc
import contextlib
import functools
import heapq
import json
import marshal
import math
import os
import queue
import re
import sys
import threading
import time
import unicodedata
import warnings

# Python's own parser and compiler of regular expressions: compile_pattern reads a pattern's
# literal characters however they are written, _backtracking_problem its repeats (re._parser
# from 3.11, sre_parse before).
try:
    from re import _compiler as _regex_compiler
    from re import _parser as _regex_parser
except ImportError:  # Python 3.9 and 3.10
    import sre_compile as _regex_compiler
    import sre_parse as _regex_parser

__version__ = "0.4.0"

__all__ = [  # each check_* function is public too
    "EvalsError",
    "CaseFileError",
    "BaselineError",
    "ClientError",
    "Case",
    "CheckResult",
    "CaseResult",
    "Answer",
    "FINISH_REASONS",
    "load_callable",
    "CHECKS",
    "register",
    "validate_check",
    "run_check",
    "evaluate",
    "NO_JUDGE",
    "load_cases",
    "case_problems",
    "conversation_problems",
    "select_cases",
    "shard_of",
    "run_case",
    "run_cases",
    "each_result",
    "RunOptions",
    "BudgetExceeded",
    "Interrupted",
    "latency_percentiles",
    "load_outputs",
    "replay_client",
    "refuse_conversations",
    "asking",
    "read_reply",
    "refuse_overwriting",
    "refuse_pairs",
    "OWN_FILES",
    "LONGEST_WAIT",
    "wait_text",
    "Run",
    "stored_output",
    "decide",
    "Baseline",
    "RunResult",
    "load_baseline",
    "completed",
    "make_record",
    "summarize",
    "case_status",
    "JudgeRequired",
    "record_problem",
    "case_reasons",
    "record_chunks",
    "write_record",
    "verdicts_kept",
    "write_atomic",
    "write_jsonl_atomic",
    "Decision",
    "fisher_one_sided",
    "min_detectable",
    "repeat_change",
    "RepeatChange",
    "REPEAT_CHANGES",
    "DEFAULT_ALPHA",
    "POOLED_RUNS",
    "format_summary",
    "github_annotations",
    "mask_secrets",
    "main",
    # for writing checks: parameter kinds and rules, text units, results and their reasons
    "Bool",
    "Count",
    "Amount",
    "Text",
    "Texts",
    "Choice",
    "Regex",
    "param_kind",
    "bounds_rule",
    "is_json_number",
    "is_string_list",
    "split_words",
    "split_paragraphs",
    "compile_pattern",
    "as_checks_read",
    "count_result",
    "short_repr",
    "short_reprs",
    "plural",
    "join_truncated",
    "did_you_mean",
    # for JSON: strict parsing (no NaN or Infinity; a repeated key if asked), comparing, writing
    "NotJsonError",
    "STRICT_JSON_DECODER",
    "strict_json_loads",
    "parse_json",
    "strip_fence",
    "json_equal",
    "json_type_name",
    "to_json",
    "json_line_bytes",
    # for calling models and judges, and reading what they answered
    "callable_name",
    "call_within",
    "describe_raised",
    "normal_tool_calls",
    "tool_call_text",
    "recording_rows",
    "unconfigured_my_client",
    "utc_now",
    # for statistics: arguments checked as fisher_one_sided checks them
    "validate_counts",
    "validate_level",
    # for reports: text safe to show, and a run's figures as every report words them
    "shown_id",
    "shown_text",
    "visible_text",
    "one_line",
    "as_percent",
    "ran_entries",
    "report_reasons",
    "reply_lines",
    "rate_change_text",
    "calls_passed_note",
    "earlier_rates",
    "flaky_items",
    "below_min_pass_rate",
    "gate_percents",
    "pass_rate_percent",
    "min_pass_rate_lines",
    # for commands: defaults, exit codes, option types
    "DEFAULT_BASELINE",
    "EXIT_OK",
    "EXIT_REGRESSION",
    "EXIT_INVALID",
    "EXIT_INTERRUPTED",
    "EXIT_CODES_HELP",
    "exit_code",
    "bounded_number",
    "significance_level",
]

DEFAULT_CASES = "cases.jsonl"
DEFAULT_BASELINE = "last_run.json"
DEFAULT_CLIENT = "my_client:ask"
RECORD_FORMAT = "evals-run"
RECORD_VERSION = 1


# ---------------------------------------------------------------------------------------------
# Errors, data and files
# ---------------------------------------------------------------------------------------------


class EvalsError(Exception):
    """Base class of the errors the command line reports as invalid input (exit code 2)."""


class CaseFileError(EvalsError):
    """A case file with problems. `problems` is a list of "FILE:LINE: message" strings."""

    def __init__(self, problems):
        self.problems = list(problems)
        super().__init__("\n".join(self.problems))


class BaselineError(EvalsError):
    """The baseline (previous run record) exists but cannot be read or understood."""


class ClientError(EvalsError):
    """A `module:function` (client, judge or check) cannot be imported or is not callable."""


# Named tuples, not dataclasses: importing dataclasses costs more start-up than --help needs.


class CheckResult(
    collections.namedtuple(
        "CheckResult", "passed reason quoted flag judge", defaults=((), None, None)
    )
):
    """One check's verdict. passed: True, False or None (skipped); reason: for passes too;
    quoted: the parts of `reason` copied from the output (so they can be hidden); flag: None,
    "review" (a judge was unsure), "error", "skipped" or "unknown" (a fact the client did not
    report: a fail that negate keeps); judge: a `judge` check's exchange."""

    __slots__ = ()

    def as_dict(self, kind):
        """The run record's dict: type, passed, reason; the flag, quoted and judge if set."""
        record = {"type": kind, "passed": self.passed, "reason": self.reason}
        if self.flag:
            record[self.flag] = True
        if self.quoted:
            record["quoted"] = list(self.quoted)
        if self.judge is not None:
            record["judge"] = self.judge
        return record


class Case(
    collections.namedtuple(
        "Case",
        "id input checks description tags metadata path line",
        defaults=("", (), None, "", 0),
    )
):
    """One line of the case file: id, input (str, or a list of {"role": one of ROLES, "content":
    str}, the last the user's), checks (tuple of dicts), description, tags (tuple of str),
    metadata (dict or None), and where it came from: `path` and the 1-based `line`."""

    __slots__ = ()


_RESULT_FIELDS = (
    "id status output checks error latency_s usage model cost_usd attempts flaky sent "
    "reasoning tool_calls finish_reason passes calls traceback kept_latency_s"
)
_RESULT_DEFAULTS = {"checks": (), "flaky": False, "tool_calls": ()}  # the others: None


class CaseResult(
    collections.namedtuple(
        "CaseResult",
        _RESULT_FIELDS,
        defaults=[_RESULT_DEFAULTS.get(name) for name in _RESULT_FIELDS.split()[2:]],
    )
):
    """One case's outcome; unknown parts are None. status: see `case_status`; output: the text
    (None when the call failed); checks: CheckResult.as_dict dicts; error: "Type: message";
    latency_s: the seconds its call took in this run (None: no call was made for the reply now:
    a recording, the cache), kept_latency_s: the seconds the call that made such a reply took,
    kept with it; usage: {"input_tokens", "output_tokens"}; sent: what the adapter says it
    sent; tool_calls and finish_reason: as in Answer. With --repeat: attempts (a dict per
    call), flaky, and passes of calls scored (errors are neither), which each check dict then
    carries too. traceback: where the client raised the error (_raised_where)."""

    __slots__ = ()

    @property
    def reasons(self):
        """Why the case did not pass: the error text, or the failing checks' reasons."""
        return case_reasons(self.status, self.error, self.checks)

    def parts(self, keys):
        """(key, value) of each of `keys` that is set, as a record keeps it: not None (flaky and
        tool calls: true), tool calls as a list."""
        for key in keys:
            value = getattr(self, key)
            if value is not None and (value or key not in ("flaky", "tool_calls")):
                yield key, list(value) if key == "tool_calls" else value


class Answer(
    collections.namedtuple(
        "Answer",
        "text tool_calls finish_reason latency_s cost_usd",
        defaults=((), None, None, None),
    )
):
    """The whole reply a check whose first parameter is `reply` sees (others see the text):
    tool_calls (tuple of {"name": str, "arguments": dict, or the str the model wrote}),
    finish_reason (FINISH_REASONS or None), latency_s (a replayed answer's: the one kept with
    it) and cost_usd, None when not known (a replayed answer kept without its latency, a reply
    without usage, an unpriced model)."""

    __slots__ = ()


# Why an answer ended, as my_client normalises each provider's word (its docstring has the
# table). Each is an answer, scored; only what is not an answer is an error.
FINISH_REASONS = ("stop", "length", "tool_calls", "content_filter", "refusal")


def _tool_calls_problem(calls):
    """What is wrong with a reply's tool calls (a list or tuple of {"name": non-empty str,
    "arguments": dict or str, "id": optional}), as a message, or None."""
    if not isinstance(calls, (list, tuple)):
        return f"'tool_calls' must be a list, got {type(calls).__name__}"
    for number, call in enumerate(calls, 1):
        if not (isinstance(call, dict) and isinstance(call.get("name"), str) and call["name"]):
            return f"tool call {number} must be an object with a non-empty string 'name'"
        where, arguments = f"tool call {number} ({call['name']})", call.get("arguments", {})
        extra = [key for key in call if key not in ("name", "arguments", "id")]
        if not isinstance(arguments, (dict, str)):
            return (
                f"{where}: 'arguments' must be a JSON object (or the string the model "
                f"wrote), got {type(arguments).__name__}"
            )
        try:  # records, recordings and reports write them as JSON
            json.dumps(arguments, allow_nan=False)
        except (TypeError, ValueError) as exc:
            return f"{where}: 'arguments' is not JSON: {exc}"
        if extra:
            return f"{where}: unknown key {extra[0]!r} (allowed: name, arguments, id)"
    return None


def normal_tool_calls(calls):
    """Valid tool calls as an Answer holds them: {"name", "arguments"} ({} if none; no id)."""
    return tuple({"name": c["name"], "arguments": c.get("arguments", {})} for c in calls or ())


def case_status(checks):
    """A case's status from its check dicts: "error" if one could not be scored, else "fail"
    if one failed, else "review" if a judge was unsure, else "pass" (skipped ones count not)."""
    status = "pass"
    for check in checks:
        if check.get("error"):
            return "error"
        if check["passed"] is not False:
            continue
        if not check.get("review"):
            status = "fail"
        elif status != "fail":  # a failed check outweighs a judge that was not sure
            status = "review"
    return status


def case_reasons(status, error, checks):
    """Why a case did not pass (list of str): its error, or "type: reason" for each check that
    failed or needs review; [] for a pass. The one source of reasons for every report."""
    if status == "error":
        return [error or "the call failed"]
    if status == "pass":
        return []
    reasons = [
        f"{c.get('type')}: {c.get('reason')}{calls_passed_note(c)}"
        for c in checks or ()
        if isinstance(c, dict) and c.get("passed") is False
    ]
    if reasons:
        return reasons
    if status == "review":
        return ["needs review: the judge was not sure"]
    return ["failed"]


def calls_passed_note(check):
    """ " (1/3 calls passed)" for a check of a repeated case, else ""."""
    passes, calls = check.get("passes"), check.get("calls")
    if type(calls) is int and calls > 1:
        return f" ({passes}/{calls} calls passed)"
    return ""


def utc_now():
    """The current time in UTC, ISO 8601 to the second (str)."""
    return time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime())


def wait_text(seconds):
    """A wait of `seconds` (float, inf allowed) for a message: "45 s", or until when in UTC for
    a longer one ("until 2026-12-07 08:00 UTC, in 23.9 h"), "more than a year" beyond one."""
    if seconds < 60:
        return f"{seconds:.0f} s"
    if not seconds <= 366 * 86400:  # inf too
        return "more than a year"
    until = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(time.time() + seconds))
    if seconds < 3600:
        return f"until {until}, in {seconds / 60:.0f} min"
    return f"until {until}, in {seconds / 3600:.1f} h"


def _describe_error(exc):
    text = str(exc).strip()
    if not text:
        return type(exc).__name__
    return f"{type(exc).__name__}: {text}"


def describe_raised(exc):
    """(_describe_error(exc), its message as a quoted part, as it may quote the output; evals'
    own time-out, `abandoned`, quotes nothing)."""
    text = str(exc).strip()
    if getattr(exc, "abandoned", False) or not text:
        return _describe_error(exc), ()
    return _describe_error(exc), (text,)


@functools.lru_cache(maxsize=None)  # a client and a judge from one file share its module
def _module_from_file(real):
    """The module of the .py file at the real path `real`; raises what the import raises."""
    import importlib.util

    name = os.path.splitext(os.path.basename(real))[0]
    spec = importlib.util.spec_from_file_location(name, real)
    if spec is None:  # a link to a file whose name does not end in .py
        raise ImportError(f"cannot load {real}")
    module = importlib.util.module_from_spec(spec)
    # In sys.modules unless the name is taken: dataclasses and pickle look modules up there.
    registered = sys.modules.setdefault(name, module) is module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        if registered:
            del sys.modules[name]
        raise
    return module


_HERE = os.path.dirname(os.path.abspath(__file__))  # where the optional file belongs


def _extras(needed_for=None):
    """The module evals_extras, the core's one way to it; when the file is missing: None, or
    with `needed_for` (e.g. "--html", "check 'judge'"), EvalsError (exit 2) naming it."""
    try:
        import evals_extras
    except ModuleNotFoundError as exc:
        if exc.name != "evals_extras":
            raise
        if needed_for:
            raise EvalsError(
                f"{needed_for} needs evals_extras.py: copy it beside evals.py ({_HERE})"
            ) from None
        return None
    return evals_extras


def load_callable(spec, option="--client"):
    """The callable "module:function" or "path/to/file.py:function" (the current folder is
    importable); raises ClientError naming `option` when it cannot be imported or called."""
    import importlib

    module_name, _, attr = spec.rpartition(":")
    if not module_name or not attr:
        raise ClientError(f"{option} {spec!r}: expected module:function, e.g. my_client:ask")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = (
            _module_from_file(os.path.realpath(module_name))
            if module_name.endswith(".py")
            else importlib.import_module(module_name)
        )
    except Exception as exc:
        hint = (
            " (the default client: copy my_client.py beside evals.py, or pass --client "
            "MODULE:FUNCTION or set EVALS_CLIENT)"
            if spec == DEFAULT_CLIENT and option == "--client"
            else ""
        )
        raise ClientError(
            f"{option} {spec!r}: cannot import {module_name}{hint}: {_describe_error(exc)}"
        ) from None
    func = getattr(module, attr, None)
    if not callable(func):
        raise ClientError(f"{option} {spec!r}: {module_name} has no callable {attr!r}")
    return func


def asking(func):
    """`func` (a client or a judge) as call(arg, case, attempt), passing `case=` and `attempt=`
    (the 0-based repeat) only when its signature names such a parameter."""
    import inspect

    try:
        params = inspect.signature(func).parameters
    except (TypeError, ValueError):  # no signature to read (a builtin): called with arg alone
        params = {}
    named = [
        name
        for name in ("case", "attempt")
        if name in params
        and params[name].kind
        in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    ]

    def call(arg, case, attempt):
        given = {"case": case, "attempt": attempt}
        return func(arg, **{name: given[name] for name in named})

    call.replays = getattr(func, "model", None) == "replay"  # recorded answers: see _attempt
    return call


_CALLERS = threading.local()  # a worker thread's `caller`: the (jobs, answers) of its timed calls


def _start_caller():
    """A daemon thread making one worker's timed calls: its (jobs, answers) queues; a job of
    None ends it. A call that overruns cannot be killed, so it is abandoned with its thread;
    until then the thread is reused and connections an adapter keeps per thread stay open."""
    jobs, answers = queue.Queue(), queue.Queue()

    def serve():
        for func in iter(jobs.get, None):
            try:
                answers.put(("output", func()))
            except BaseException as exc:  # noqa: B902 - reported as the case's error
                answers.put(("error", exc))

    threading.Thread(target=serve, name="evals-caller", daemon=True).start()
    return jobs, answers


def _release_caller():
    """End the calling thread's caller, if any (its kept-alive connections close with it)."""
    caller, _CALLERS.caller = getattr(_CALLERS, "caller", None), None
    if caller is not None:
        caller[0].put(None)


def call_within(func, timeout):
    """func() within `timeout` s (None: no limit, called here), or TimeoutError.abandoned."""
    if timeout is None:
        return func()
    jobs, answers = getattr(_CALLERS, "caller", None) or _start_caller()
    _CALLERS.caller = None  # a caller whose call times out is not used again
    jobs.put(func)
    try:
        kind, value = answers.get(timeout=timeout)
    except queue.Empty:
        jobs.put(None)  # the thread ends once the overrunning call returns
        overrun = TimeoutError(f"no answer within {timeout:g} s")
        overrun.abandoned = True  # the call goes on in its thread
        raise overrun from None
    _CALLERS.caller = jobs, answers
    if kind == "error":  # raised by func itself: a signal (Ctrl-C) reaches the main thread only
        value.by_call = True
        raise value
    return value


# Values (8 characters or more) of variables named like a credential (OPENAI_API_KEY) reach no
# file or stream, whatever carries them: matched in every form a writer spells them, so that one
# function serves every writer (JSON text, a report, a stream).
# A credential's name ends so (OPENAI_API_KEY, GITHUB_TOKEN); CACHE_KEY_PREFIX is no credential.
_SECRET_NAME = re.compile(r"(^|_)(KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIALS?)$", re.I)
_SECRETS = []  # [their pattern, anchors], found as main() starts (reading the environment: 0.1 ms)
# A character as HTML and XML escape it (html.escape, ElementTree), and as GitHub's workflow
# commands percent-encode it (an annotation's title and message).
_SPELLED = {
    "&": ("&amp;",),
    "<": ("&lt;",),
    ">": ("&gt;",),
    '"': ("&quot;", "&#34;"),
    "'": ("&#x27;", "&#39;", "&apos;"),
    "%": ("%25",),
    ":": ("%3A",),
    ",": ("%2C",),
    "\r": ("%0D",),
    "\n": ("%0A",),
}
_SHORT_ESCAPES = {"\b": "b", "\t": "t", "\n": "n", "\f": "f", "\r": "r"}  # JSON's and repr's


def _char_pattern(char):
    r"""A regex matching `char` as any writer spells it: itself after any number of backslashes
    (Markdown, JSON's \" and \\, JSON inside JSON), a JSON or repr escape (\u00e9 in either
    case, a surrogate pair, \n, \x1b) or a form of _SPELLED."""
    if char.isascii() and char.isalnum():
        return r"\\*" + char
    code = ord(char)
    units = [code]
    if code > 0xFFFF:  # JSON writes a surrogate pair
        units = [0xD800 + ((code - 0x10000) >> 10), 0xDC00 + ((code - 0x10000) & 0x3FF)]
    forms = [
        r"\\*" + re.escape(char),
        "".join(r"\\+(?i:u%04x)" % unit for unit in units),
    ]
    if char in _SHORT_ESCAPES:
        forms.append(r"\\+" + _SHORT_ESCAPES[char])
    if code < 0x100 and not char.isprintable():
        forms.append(r"\\+(?i:x%02x)" % code)
    forms.extend(re.escape(form) for form in _SPELLED.get(char, ()))
    return "(?:" + "|".join(forms) + ")"


def _find_secrets():
    values = sorted(
        {v for k, v in os.environ.items() if len(v) >= 8 and _SECRET_NAME.search(k)},
        key=len,
        reverse=True,
    )
    pattern = None
    if values:
        pattern = re.compile("|".join("".join(map(_char_pattern, value)) for value in values))
    # Every form of a secret holds its ASCII letters and digits as they are: a text without its
    # longest run of them cannot hold it. `in` rules that out first (benchmarks/masking.py, 16 MB
    # of JSON lines, two keys: 0.04 s, the pattern alone 1.1 s, 0.3.0's pattern 0.3 s).
    anchors = [max(re.findall("[A-Za-z0-9]*", value), key=len) for value in values]
    _SECRETS[:] = [pattern, anchors]


def mask_secrets(value):
    """`value` (str, or lists, tuples and dicts of them) with each secret said [redacted],
    in any form a writer spells it (see _char_pattern): every file and stream evals writes
    passes through here, never what a check scores."""
    if not _SECRETS:
        _find_secrets()
    pattern, anchors = _SECRETS
    if not pattern:  # no credential in the environment
        return value
    if isinstance(value, str):
        if any(anchor in value for anchor in anchors):
            return pattern.sub("[redacted]", value)
        return value
    if isinstance(value, dict):
        return {key: mask_secrets(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):  # a named tuple stays one
        return getattr(value, "_make", type(value))(map(mask_secrets, value))
    return value


class _Masking(collections.namedtuple("_Masking", "stream")):
    """A stream writing what it is given with the secrets masked (mask_secrets)."""

    def write(self, text):
        return self.stream.write(mask_secrets(text))

    def __getattr__(self, name):
        return getattr(self.stream, name)


def write_atomic(path, data):
    """Write `data` (bytes, or an iterable of str chunks written as UTF-8) to `path` atomically
    (a new file beside it, fsync, os.replace): an interrupted write never leaves a truncated
    file. A symbolic link is written through and stays."""
    path = os.path.realpath(path)
    directory = os.path.dirname(path)
    if not os.path.isdir(directory):
        raise EvalsError(f"cannot write {path}: there is no folder {directory}")
    temporary = f"{path}.{os.urandom(6).hex()}.tmp"
    try:
        with open(temporary, "xb") as handle:  # "x": never through a link; the mode open() gives
            # A lone surrogate cannot be UTF-8; in a JSON string its \uXXXX escape is the same.
            if isinstance(data, bytes):
                handle.write(data)
            else:  # json_line_bytes masks
                handle.writelines(
                    mask_secrets(chunk).encode("utf-8", "backslashreplace") for chunk in data
                )
            handle.flush()
            os.fsync(handle.fileno())
        with contextlib.suppress(FileNotFoundError):  # keep the mode of the file it replaces
            os.chmod(temporary, os.stat(path).st_mode & 0o7777)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


to_json = json.JSONEncoder(ensure_ascii=False).encode  # made once: dumps() makes one a call


def write_jsonl_atomic(path, rows):
    """Write `rows` (dicts) as JSON Lines to `path` atomically (see write_atomic)."""
    write_atomic(path, (to_json(row) + "\n" for row in rows))


def json_line_bytes(value):
    """`value` as a line of JSON, UTF-8 bytes (a lone surrogate escaped, as write_atomic does)."""
    return mask_secrets(to_json(value) + "\n").encode("utf-8", "backslashreplace")


def _attribute(value, name, kind):
    """value.name when it is a `kind`, else None (an adapter's property that raises too)."""
    try:
        found = getattr(value, name, None)
    except Exception:
        return None
    if isinstance(found, kind):
        return found
    return None


# The one reply shape: a str, or a mapping or an object (like my_client.Reply) with "text" and
# these parts, each of its kind or None. `rate_limits` holds the provider's rate-limit headers
# (the harness paces by them); `cached` and `replayed` say that no model was called for it now,
# and `latency_s` how many seconds its call took when it was made (read for such a reply only: a
# live reply's latency is the one the harness measures).
_REPLY_PARTS = {
    "text": str,
    "tool_calls": object,
    "finish_reason": object,
    "usage": dict,
    "model": str,
    "reasoning": str,
    "sent": dict,
    "rate_limits": collections.abc.Mapping,
    "cached": bool,
    "replayed": bool,
    "latency_s": object,  # a number of seconds, 0 or more: read_reply checks it
}
_NO_REPLY = (
    "the client returned {}, expected str (the answer's text) or a dict "
    '{{"text", "tool_calls", "finish_reason", "usage", "model"}} (see docs/clients.md)'
)


def _reply_problem(whole, hint=""):
    """What is wrong with the tool calls or finish reason of a dict (a reply, a recorded output,
    a record entry), or None; `hint` follows a finish reason's problem."""
    calls = whole.get("tool_calls")
    problem = _tool_calls_problem([] if calls is None else calls)
    if problem:
        return problem
    if whole.get("finish_reason") in FINISH_REASONS + (None,):
        return None
    return (
        f"'finish_reason' must be one of {', '.join(FINISH_REASONS)} or null, got "
        f"{json.dumps(whole['finish_reason'], default=repr)}{hint}"
    )


def _mapping_problem(output):
    """What makes a mapping no reply (an unknown key, a part of another kind), or None."""
    unknown = [key for key in output if key not in _REPLY_PARTS]
    text = output.get("text")
    if unknown:
        return _NO_REPLY.format(f"a dict with unknown key {unknown[0]!r}")
    if text is None:
        return _NO_REPLY.format("a dict with no string 'text'")
    if not isinstance(text, str):
        return _NO_REPLY.format(f"a dict whose 'text' is {type(text).__name__}")
    for key, kind in _REPLY_PARTS.items():
        if output.get(key) is not None and not isinstance(output[key], kind):
            return (
                f"the client returned {key!r} of type {type(output[key]).__name__}, expected "
                f"{kind.__name__} or null"
            )
    return None


def _whole_usage(usage):
    """A reply's usage (a dict) as {"input_tokens", "output_tokens"}, each a whole number of 0
    or more or None (not reported); None when one is something else."""
    usage = {key: usage.get(key) for key in ("input_tokens", "output_tokens")}
    if all(v is None or type(v) is int and v >= 0 for v in usage.values()):
        return usage
    return None


def _seconds(value):
    """`value` as a number of seconds (float), or None when it is not a number from 0 to the
    largest float (a bool is no number)."""
    if type(value) not in (int, float) or not 0 <= value <= sys.float_info.max:
        return None
    return float(value)


def read_reply(output):
    """What a client returned, read whole: (Answer, {part: value or None} for every part of
    the reply shape but the text, `cached` and `replayed` as bools, `latency_s` a float).
    Raises TypeError naming what is wrong: a mapping's unknown key or part of another kind (an
    object's is ignored, but for tool calls and finish reason)."""
    if type(output) is str:  # the plain answer, nothing else to read: 1 us a call, not 12
        parts = dict.fromkeys(_REPLY_PARTS)
        parts.update(text=output, cached=False, replayed=False)
        return Answer(output), parts
    mapping = isinstance(output, collections.abc.Mapping)
    if mapping:
        problem = _mapping_problem(output)
        if problem:
            raise TypeError(problem)
        parts = {key: output.get(key) for key in _REPLY_PARTS}
    elif isinstance(output, str) or _attribute(output, "text", str) is not None:
        parts = {key: _attribute(output, key, kind) for key, kind in _REPLY_PARTS.items()}
    else:
        raise TypeError(_NO_REPLY.format(type(output).__name__))
    if isinstance(output, str):
        parts["text"] = str(output)
    problem = _reply_problem(parts, " (normalise the provider's word, as my_client does)")
    if problem:
        raise TypeError(f"the client returned a malformed reply: {problem}")
    if parts["sent"] is not None:  # kept in the record, which is JSON
        try:
            to_json(parts["sent"])
        except (TypeError, ValueError) as exc:
            if mapping:
                raise TypeError(f"the client returned a 'sent' that is not JSON: {exc}") from None
            parts["sent"] = None  # an object's odd part is not read, as its other odd parts
    usage = parts["usage"]
    if usage:
        usage = _whole_usage(usage)
    if usage is None and parts["usage"] and mapping:
        raise TypeError(
            "the client returned 'usage' without whole numbers of input_tokens and output_tokens"
        )
    latency = _seconds(parts["latency_s"])
    if parts["latency_s"] is not None and latency is None and mapping:
        raise TypeError(
            "the client returned a 'latency_s' that is no number of seconds (0 or more)"
        )
    # an object's odd usage or latency is not read, as its other odd parts
    answer = Answer(parts["text"], normal_tool_calls(parts["tool_calls"]), parts["finish_reason"])
    parts.update(usage=usage, latency_s=latency)
    parts.update(cached=bool(parts["cached"]), replayed=bool(parts["replayed"]))
    return answer, parts


# ---------------------------------------------------------------------------------------------
# Text units: the definitions every check shares (words, sentences, paragraphs, matching)
# ---------------------------------------------------------------------------------------------


# Typographic quotes and apostrophes as the ASCII ones people type ("can’t" is "can't").
_QUOTES = str.maketrans("\u2018\u2019\u201a\u201b\u201c\u201d\u201e\u201f", "''''\"\"\"\"")
# Characters that show as nothing: a zero-width space, word joiner and soft hyphen.
_SHOW_NOTHING = dict.fromkeys(map(ord, "\u200b\u2060\u00ad"))


def _normal(text):
    """`text` as every check reads it, the output and a check's values and patterns alike
    (docs/checks.md, "How checks read text"): CRLF line ends as LF, no invisible character, NFC."""
    if "\r" in text:
        text = text.replace("\r\n", "\n")
    if text.isascii():
        return text
    return unicodedata.normalize("NFC", text.translate(_SHOW_NOTHING))


def _read_shallow(value):
    """`value` with its own text read by the text rule: a str, a copy of a list, a copy of a
    dict with its keys read; anything else as it is."""
    if isinstance(value, str):
        return _normal(value)
    if isinstance(value, list):
        return list(value)
    if isinstance(value, dict):
        return {_normal(key): item for key, item in value.items()}
    return value


def as_checks_read(value):
    """`value` as checks read the answer (docs/checks.md, "How checks read text"): a str by the
    text rule (CRLF as LF, no invisible character, NFC), a JSON value with each of its strings
    and object keys so read (a copy), anything else as it is."""
    read = _read_shallow(value)
    pending = []  # a loop, not recursion: from Python 3.12 json parses 10,000 levels deep
    if isinstance(read, (list, dict)):
        pending.append(read)
    while pending:
        container = pending.pop()
        places = range(len(container))
        if isinstance(container, dict):
            places = list(container)
        for place in places:
            item = _read_shallow(container[place])
            container[place] = item
            if isinstance(item, (list, dict)):
                pending.append(item)
    return read


# Cached: a case's checks fold its output again and again (10 phrase checks on a 21,900-character
# answer: 134 us a case, not 255).
@functools.lru_cache(maxsize=256)
def _fold(text, ignore_case):
    """`text` as matching compares it: _normal, and with ignore_case casefolded, ASCII quotes."""
    if ignore_case:  # "İ" casefolds to "i" and a combining dot no typed "i" has
        text = text.casefold().replace("i\u0307", "i")
        if not text.isascii():
            text = text.translate(_QUOTES)
    return _normal(text)


def _is_word_char(char):
    """A letter, digit, "_" or combining mark ("नमस" is not a word in "नमस्ते"); "" is not."""
    return bool(char) and (
        char.isalnum() or char == "_" or unicodedata.category(char).startswith("M")
    )


def _count_phrase(text, phrase, whole_word=False, first=False):
    """Non-overlapping occurrences of `phrase` in `text` (both _fold-ed), or with `first` whether
    there is one; whole_word: no word character joined to an end that is one ("$100.", "e.g.")."""
    if not whole_word and first:
        return phrase in text
    if not whole_word:
        return text.count(phrase)
    guard_start, guard_end = _is_word_char(phrase[:1]), _is_word_char(phrase[-1:])
    count, at = 0, text.find(phrase)
    while at >= 0 and not (first and count):
        end = at + len(phrase)
        if (
            guard_start
            and _is_word_char(text[at - 1 : at])
            or guard_end
            and _is_word_char(text[end : end + 1])
        ):
            at = text.find(phrase, at + 1)
        else:
            count += 1
            at = text.find(phrase, end)
    return count


def split_words(text, split="whitespace"):
    """Words of `text`: whitespace-separated tokens, or runs of word characters (\\w+)."""
    if split == "alphanumeric":
        return re.findall(r"\w+", text)
    return text.split()


def split_paragraphs(text, separator=None):
    """Non-empty paragraphs: pieces between blank lines, or between `separator` strings."""
    if separator:
        pieces = text.split(separator)
    else:  # blank lines
        pieces = re.split(r"\n[ \t\r]*\n", text)
    return [piece.strip() for piece in pieces if piece.strip()]


def strip_fence(text):
    """The stripped `text` less a ```json (or ```) fence at its start and a ``` at its end, each
    optional as IFEval's JsonFormat strips them; None when it has neither."""
    opening = re.match(r"```[ \t]*(?i:json)?\s*", text)
    closing = text.endswith("```")
    if not opening and not closing:
        return None
    if opening:
        text = text[opening.end() :]
    if closing:
        text = text[:-3]
    return text


class NotJsonError(ValueError):
    pass


def _reject_constant(name):
    raise NotJsonError(f"{name} is not a JSON value (RFC 8259 has no NaN or Infinity)")


def _unique_keys(pairs):
    value = dict(pairs)
    if len(value) < len(pairs):
        duplicate = next(key for i, (key, _) in enumerate(pairs) if key in dict(pairs[:i]))
        raise NotJsonError(f"duplicate key {duplicate!r} (the last would silently win)")
    return value


# Decoders made once: json.loads with arguments builds a new one per call. RFC 8259 only says
# names SHOULD be unique, so a model's output may repeat one; a case file the user wrote may not.
STRICT_JSON_DECODER = json.JSONDecoder(parse_constant=_reject_constant)
_UNIQUE_KEYS_DECODER = json.JSONDecoder(
    parse_constant=_reject_constant, object_pairs_hook=_unique_keys
)


def strict_json_loads(text, unique_keys=False):
    """json.loads(text) but NaN, Infinity (and with unique_keys, a key twice) raise ValueError."""
    if text.startswith("\ufeff"):
        raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", text, 0)
    if unique_keys:
        return _UNIQUE_KEYS_DECODER.decode(text)
    return STRICT_JSON_DECODER.decode(text)


def parse_json(output, allow_fence=False):
    """(value, None) or (None, reason) for `output` (text as checks read it) as one RFC 8259
    JSON text, with allow_fence less a ``` fence before or after it (a fence inside prose: that
    is not JSON). The value's strings and keys are read by the text rule too (as_checks_read),
    escapes such as \\u0301 decoded."""
    body = None
    if allow_fence:
        body = strip_fence(output.strip())
    if body is None:
        body = output
    try:
        value = strict_json_loads(body)
        # Only an escape brings back what the rule took out of the text: a string between two
        # quotes of a text so read is so read (13.5 KB of JSON: 290 us parsed, 1,140 walked).
        if "\\" in body:
            value = as_checks_read(value)
    except RecursionError:
        return None, "cannot parse the JSON: nested too deeply"
    except ValueError as exc:  # the hint only where allow_fence would make it pass
        hint = ""
        if not allow_fence and parse_json(output, True)[1] is None:
            hint = " (the output has a ``` fence around the JSON; set allow_fence to accept that)"
        return None, f"not valid JSON: {exc}{hint}"
    return value, None


# ---------------------------------------------------------------------------------------------
# Checks: each one function, declared by its signature, (output, **params) -> CheckResult
# ---------------------------------------------------------------------------------------------
#
# A check's parameters are its function's: the annotation is the kind (a function of a value:
# what is wrong with it, or None), a default makes it optional, **params takes any other key.
# Validation, --list-checks, `negate` and the docs' table all come from this registry.

Param = collections.namedtuple("Param", "kind required default")
# open: it takes any other key; rule(check) -> problems across parameters; whole: it sees the
# Answer (its first parameter is named `reply`), not only a text; figure: the Answer's figure it
# scores ("latency_s", "cost_usd"), which a reply may lack (see _kept_fail).
CheckSpec = collections.namedtuple(
    "CheckSpec", "name func params open rule needs_judge summary whole figure"
)
CHECKS = {}
# What a copy without evals_extras.py says of the check types only that file registers.
_NO_EXTRAS = (
    "evals_extras.py, which adds the judge, JSON Schema, cost, reference-answer, "
    "embedded JSON, XML, tool-call and IFEval-style text checks, is not beside evals.py"
)


def param_kind(test, message):
    """A parameter kind (a check's annotation): a function of a value returning None when
    test(value) is true, else `message` ("must be ...")."""

    def problem(value):
        if test(value):
            return None
        return message

    problem.__doc__ = f"None for a valid value, else {message!r}."
    return problem


def is_string_list(value, allow_empty=False):
    """Whether `value` is a list of non-empty strings, not empty (with allow_empty: any list of
    strings)."""
    return (
        isinstance(value, list)
        and (allow_empty or bool(value))
        and all(isinstance(v, str) and (allow_empty or v) for v in value)
    )


def is_json_number(value):
    """A JSON number: an int (any size: 10**400 has no float) or a finite float, not a bool."""
    return (
        isinstance(value, int)
        and not isinstance(value, bool)
        or isinstance(value, float)
        and math.isfinite(value)
    )


def Choice(*choices):
    """A parameter kind: one of `choices`; the problem names them (and the closest one)."""
    listed = "must be one of " + ", ".join(map(repr, choices))

    def problem(v):
        if v in choices:
            return None
        if not isinstance(v, str):
            return listed
        return listed + did_you_mean(v.lower(), choices).rstrip(".")

    return problem


Bool = param_kind(lambda v: isinstance(v, bool), "must be true or false")
Count = param_kind(
    lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0,
    "must be a non-negative integer",
)
Position = param_kind(lambda v: not Count(v) and v >= 1, "must be an integer of 1 or more")
# Invisible characters do not count: every check removes them (_normal), and "" matches anywhere.
Text = param_kind(
    lambda v: isinstance(v, str) and _normal(v), "must be a string with a visible character"
)
Texts = param_kind(
    lambda v: is_string_list(v) and all(map(_normal, v)),
    "must be a non-empty list of strings with a visible character each",
)
_REGEX_FLAGS = {"i": re.IGNORECASE, "m": re.MULTILINE, "s": re.DOTALL, "x": re.VERBOSE}
Flags = param_kind(
    lambda v: isinstance(v, str) and set(v) <= set(_REGEX_FLAGS),
    "must be a string of regex flag letters from 'imsx'",
)
Split = Choice("whitespace", "alphanumeric")
_NEGATE = Param(Bool, False, False)
_ON = Param(Choice("answer", "reasoning"), False, "answer")


def register(func=None, *, rule=None, needs_judge=False, figure=None):
    """Register `check_NAME(output, ...)` as the check type NAME; returns it unchanged.
    needs_judge: it takes keyword-only `ask` (prompt -> reply) and `case_input`; figure: the
    field of the Answer it scores ("latency_s", "cost_usd"): when that is None (not known), the
    check says so (passed None, "skipped"), and a run keeps a fail its baseline had instead."""
    if func is None:
        return lambda f: register(f, rule=rule, needs_judge=needs_judge, figure=figure)
    code = func.__code__
    names = code.co_varnames[1 : code.co_argcount]
    defaults = dict(zip(reversed(names), reversed(func.__defaults__ or ())))
    params = {
        name: Param(func.__annotations__[name], name not in defaults, defaults.get(name))
        for name in names
    }
    name = func.__name__[len("check_") :]
    summary = " ".join((func.__doc__ or "").split("\n\n")[0].split())
    CHECKS[name] = CheckSpec(
        name,
        func,
        params,
        bool(code.co_flags & 0x08),  # CO_VARKEYWORDS
        rule,
        needs_judge,
        summary,
        code.co_varnames[0] == "reply",
        figure,
    )
    return func


def bounds_rule(low="min", high="max", needed=True, hint=""):
    """A rule: bounds `low` <= `high` (inclusive), at least one of them given when `needed`."""

    def rule(check):  # on a valid check: a bound is absent, or a count
        lower, upper = check.get(low, CHECKS[check["type"]].params[low].default), check.get(high)
        if lower is None and upper is None and needed:
            return [f"give {low!r}, {high!r} or both (inclusive bounds)"]
        if lower is not None and upper is not None and lower > upper:
            return [f"impossible bounds, {low} {lower} > {high} {upper}{hint}"]
        return []

    return rule


def short_repr(text, limit=80):
    """repr(text), `text` (str) cut to `limit` characters with "..." if longer."""
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return repr(text)


def short_reprs(values):
    """The short_repr of each of `values` (str), joined with ", "."""
    return ", ".join(short_repr(v) for v in values)


def plural(n, word):
    """ "1 case", "2 cases": `n` and `word`, with an "s" unless n is 1."""
    if n == 1:
        return f"{n} {word}"
    return f"{n} {word}s"


def join_truncated(items, limit, sep="; "):
    """The first `limit` of `items` (str) joined with `sep`, then " (+N more)" if there are more."""
    if len(items) <= limit:
        return sep.join(items)
    return sep.join(items[:limit]) + f" (+{len(items) - limit} more)"


def count_result(count, unit, min=None, max=None, of=""):
    """Pass when min <= count <= max (inclusive); `unit` is a str or (singular, plural)."""
    if isinstance(unit, str):
        unit = (unit, unit + "s")
    measured = f"{count} {unit[1]}{of}"
    if count == 1:
        measured = f"{count} {unit[0]}{of}"
    if min is not None and count < min:
        return CheckResult(False, f"{measured}, expected at least {min}")
    if max is not None and count > max:
        return CheckResult(False, f"{measured}, expected at most {max}")
    if min == max:
        return CheckResult(True, f"{measured}, exactly {min}")
    if min is not None and max is not None:
        return CheckResult(True, f"{measured}, between {min} and {max}")
    if min is not None:
        return CheckResult(True, f"{measured}, at least {min}")
    return CheckResult(True, f"{measured}, at most {max}")


# ---- phrases and exact text ----


def _found(output, values, ignore_case, whole_word):
    folded = _fold(output, ignore_case)
    return [v for v in values if _count_phrase(folded, _fold(v, ignore_case), whole_word, True)]


@register
def check_contains_any(output, values: Texts, ignore_case: Bool = True, whole_word: Bool = False):
    """At least one of `values` occurs (case-insensitive by default)."""
    found = _found(output, values, ignore_case, whole_word)
    if found:
        return CheckResult(True, f"found {short_reprs(found)}")
    return CheckResult(False, f"none of {short_reprs(values)} found")


@register
def check_contains_all(output, values: Texts, ignore_case: Bool = True, whole_word: Bool = False):
    """Every one of `values` occurs; the reason lists the missing ones."""
    found = _found(output, values, ignore_case, whole_word)
    missing = [v for v in values if v not in found]
    if missing:
        return CheckResult(False, f"missing: {short_reprs(missing)}")
    return CheckResult(True, f"found all of {short_reprs(values)}")


@register
def check_not_contains(output, values: Texts, ignore_case: Bool = True, whole_word: Bool = False):
    """None of `values` occurs; the reason lists the ones found."""
    found = _found(output, values, ignore_case, whole_word)
    if found:
        return CheckResult(False, f"found forbidden: {short_reprs(found)}")
    return CheckResult(True, f"none of {short_reprs(values)} found")


def _white_space_rule(strip):
    """A rule: a `value` of white space only is refused where `strip` (str.strip, lstrip or
    rstrip), taking it off the value as off the output when the check's `strip` is on, leaves
    "", which every output starts and ends with; an `equals` one (str.strip) even unstripped,
    as a blank output fails every check."""

    def rule(check):
        if strip(_normal(check["value"])):
            return []
        shown = short_repr(check["value"])
        if strip is str.strip:  # equals: even unstripped, a blank output is never scored
            return [
                f"parameter 'value': {shown} is only white space: no output can equal it (a "
                "blank output fails every check); give the text the output must equal"
            ]
        if check.get("strip", True):
            return [
                f"parameter 'value': {shown} is only white space, which strip removes from it "
                "as from the output: it would match every output (set strip to false to "
                "compare white space)"
            ]
        return []

    return rule


@register(rule=_white_space_rule(str.strip))
def check_equals(output, value: Text, ignore_case: Bool = False, strip: Bool = True):
    """The whole output equals `value` (surrounding white space stripped by default)."""
    wanted = value
    if strip:  # both sides, as Inspect's match and DeepEval's exact match compare them
        output = output.strip()
        wanted = _normal(value).strip()
    if _fold(output, ignore_case) == _fold(wanted, ignore_case):
        return CheckResult(True, f"equals {short_repr(value)}")
    got = short_repr(output)
    return CheckResult(False, f"expected {short_repr(value)}, got {got}", (got,))


def _edge(text, value, ignore_case, strip, whole_word, at_start, where=""):
    """starts_with, or ends_with (not `at_start`), on `text`, named `where` in the reason."""
    wanted = value
    if strip:  # and off the value's end that meets the output's stripped one
        text = text.strip()
        wanted = _normal(value)
    if strip and at_start:
        wanted = wanted.lstrip()
    elif strip:
        wanted = wanted.rstrip()
    folded, wanted = _fold(text, ignore_case), _fold(wanted, ignore_case)
    if at_start:
        verb, got, matched = "starts", text[: len(value) + 20], folded.startswith(wanted)
        outside, inside = folded[len(wanted) : len(wanted) + 1], wanted[-1]
    else:
        verb, got, matched = "ends", text[-(len(value) + 20) :], folded.endswith(wanted)
        outside, inside = folded[-len(wanted) - 1 : -len(wanted)], wanted[0]
    if matched and not (whole_word and _is_word_char(outside) and _is_word_char(inside)):
        return CheckResult(True, f"{where}{verb} with {short_repr(value)}")
    got = short_repr(got)
    return CheckResult(False, f"{where}{verb} with {got}, expected {short_repr(value)}", (got,))


@register(rule=_white_space_rule(str.lstrip))
def check_starts_with(
    output,
    value: Text,
    ignore_case: Bool = False,
    strip: Bool = True,
    whole_word: Bool = False,
    paragraph: Position = None,
):
    """The output, or its Nth `paragraph` (1-based), starts with `value`."""
    where = "output "
    if paragraph is not None:
        paragraphs = split_paragraphs(output)
        if paragraph > len(paragraphs):
            return CheckResult(
                False, f"no paragraph {paragraph}: the output has {len(paragraphs)}"
            )
        output, where = paragraphs[paragraph - 1], f"paragraph {paragraph} "
    return _edge(output, value, ignore_case, strip, whole_word, True, where)


@register(rule=_white_space_rule(str.rstrip))
def check_ends_with(
    output, value: Text, ignore_case: Bool = False, strip: Bool = True, whole_word: Bool = False
):
    """The output ends with `value` (surrounding white space stripped by default)."""
    return _edge(output, value, ignore_case, strip, whole_word, False)


def _literal_run(chars):
    """The parsed literals of the characters `chars` read by the text rule, or as they are when
    that leaves nothing (invisible characters only: _needed_invisible refuses them)."""
    text = "".join(chars)
    read = _normal(text) or text
    return [(_regex_parser.LITERAL, ord(char)) for char in read]


def _parts(argument):
    """The parsed subpatterns in a parsed node's argument: a group's, a repeat's, a branch's."""
    if isinstance(argument, _regex_parser.SubPattern):
        yield argument
    elif isinstance(argument, (tuple, list)):
        for item in argument:
            yield from _parts(item)


def _read_literals(parsed):
    """Read each run of literal characters of the parsed pattern `parsed` (changed in place, its
    subpatterns too) by the text rule."""
    items, run = [], []
    for op, argument in parsed.data:
        if op == _regex_parser.LITERAL:
            run.append(chr(argument))
            continue
        items += _literal_run(run)
        run = []
        items.append((op, argument))
        for part in _parts(argument):
            _read_literals(part)
    parsed.data[:] = items + _literal_run(run)
    parsed.width = None  # measured again: a look-behind's width may have changed


def _read_pattern(pattern, flags):
    """(parsed pattern, flag bits) of `pattern` with `flags` (letters of "imsx"), its literal
    text read by the text rule; raises re.error.

    Parsed, not rewritten: the answer has no CRLF, invisible character or decomposed accent,
    and a pattern spells the same characters many ways (a CR LF as itself, \\r\\n, \\x0d\\x0a,
    \\u000d\\u000a, \\015\\012, \\N{...}, across (?x) white space). Python's parser gives each
    literal character once, whatever its spelling, where rewriting the text would mean
    re-implementing re's escapes, character classes and verbose mode. A class lists single
    characters and is taken as written."""
    bits = sum(_REGEX_FLAGS[letter] for letter in set(flags))
    parsed = _regex_parser.parse(pattern, bits)
    _read_literals(parsed)
    return parsed, bits


# Cached: re.compile's own cache is bypassed, and a check compiles its pattern for every case.
@functools.lru_cache(maxsize=512)
def compile_pattern(pattern, flags=""):
    """`pattern` (str) compiled as checks match it, with `flags` (letters of "imsx"), its
    literal text read as the answer is (docs/checks.md, "How checks read text"): \\x0d\\x0a
    matches the line end "\\n" as \\r\\n does; raises re.error."""
    parsed, bits = _read_pattern(pattern, flags)
    return _regex_compiler.compile(parsed, bits)


_REPEATS = tuple(
    getattr(_regex_parser, name, None)
    for name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT")
)


def _node_needs(op, argument):
    """The invisible character (_SHOW_NOTHING) every match of one parsed node needs, or None."""
    if op == _regex_parser.LITERAL and argument in _SHOW_NOTHING:
        return chr(argument)
    if op == _regex_parser.IN:  # a class of invisible characters only
        chars = [a for o, a in argument if o == _regex_parser.LITERAL and a in _SHOW_NOTHING]
        if len(chars) == len(argument):
            return chr(chars[0])
        return None
    if op == _regex_parser.BRANCH:  # every alternative
        needed = [_needed_invisible(branch) for branch in argument[1]]
        if all(needed):
            return needed[0]
        return None
    if op == _regex_parser.GROUPREF_EXISTS:  # (?(1)yes|no): both, and "no" may be absent
        needed = [_needed_invisible(part) for part in argument[1:] if part is not None]
        if len(needed) == 2 and all(needed):
            return needed[0]
        return None
    if op in _REPEATS and argument[0] == 0:  # may match no time
        return None
    if op == _regex_parser.ASSERT_NOT:
        return None
    for part in _parts(argument):  # a group, a repeat at least once, a look-around that holds
        needed = _needed_invisible(part)
        if needed:
            return needed
    return None


def _needed_invisible(parsed):
    """An invisible character that every match of the parsed pattern needs, or None: the text
    rule removes it from every answer, so such a pattern can never match."""
    for op, argument in parsed.data:
        needed = _node_needs(op, argument)
        if needed:
            return needed
    return None


def Regex(pattern, flags=""):
    """A parameter kind: None for a valid regular expression (compile_pattern) that can match
    an answer as checks read it, else its problem (str)."""
    if not isinstance(pattern, str) or not pattern:
        return "must be a non-empty string"
    try:
        compiled = compile_pattern(pattern, flags)
    except re.error as exc:
        return f"is not a valid regular expression: {exc}"
    needed = _needed_invisible(_read_pattern(pattern, flags)[0])
    if needed:
        name = unicodedata.name(needed)
        return (
            f"can never match: it needs U+{ord(needed):04X} ({name}), which the text rule "
            'removes from every answer (docs/checks.md, "How checks read text"); remove it '
            "from the pattern"
        )
    return _backtracking_problem(pattern, compiled.flags)


def _regex_rule(check):
    # The pattern is compiled with its flags: in verbose mode ("x") "#" starts a comment.
    problem = Regex(check["pattern"], check.get("flags", ""))
    bounds = bounds_rule(
        "min_matches",
        "max_matches",
        needed=False,
        hint=" (set min_matches to 0 to allow no match)",
    )
    if problem:
        return [f"parameter 'pattern' {problem}"] + bounds(check)
    return bounds(check)


@register(rule=_regex_rule)
def check_regex(
    output, pattern: Text, flags: Flags = "", min_matches: Count = 1, max_matches: Count = None
):
    """Python `re` `pattern` (`flags`: letters of `imsx`) has between `min_matches` and
    `max_matches` non-overlapping matches."""
    compiled = compile_pattern(pattern, flags)
    if min_matches == 1 and max_matches is None:
        match = compiled.search(output)
        if match:
            got = short_repr(match.group())
            return CheckResult(True, f"matched {got}", (got,))
        return CheckResult(False, f"no match for /{pattern}/{flags}")
    count = sum(1 for _ in compiled.finditer(output))
    return count_result(
        count, ("match", "matches"), min_matches, max_matches, f" of /{pattern}/{flags}"
    )


# ---- regex patterns that may backtrack catastrophically ----
# Python's re has no time limit, so a pattern that can backtrack exponentially is refused when
# it is loaded. The analysis reads re's own parse of the pattern and follows runs of one
# character, the idea of regexploit (Doyensec, 2021: a character that several repeats can all
# take); safe-regex's star height (substack) is a cruder form of it. It runs once per distinct
# pattern (functools.cache: 0.1 to 80 ms a pattern), not once per case as 0.1.0's did:
# re-scoring bench.py's 20,000 cases runs it twice, in 0.96-1.01x the CPU time of 0.3.0.

_BACKTRACKING_REPEATS = (
    _regex_parser.MAX_REPEAT,
    _regex_parser.MIN_REPEAT,
)  # a possessive one never backtracks
_ONE_CHARACTER = (
    _regex_parser.LITERAL,
    _regex_parser.NOT_LITERAL,
    _regex_parser.ANY,
    _regex_parser.IN,
)
_LONG_REPEAT = 10  # more rounds count as unbounded: OWASP's ReDoS page, "(.*a){x} for x > 10"
# Characters that stand for the classes; _probes adds those the pattern names.
_PROBES = "aAzZ09_ \t\n\r\x0b\x00!-.,@/\xa0\xe9\xdf\u0663\u4e2d\uffff"
_CATEGORIES = {
    _regex_parser.CATEGORY_DIGIT: r"\d",
    _regex_parser.CATEGORY_NOT_DIGIT: r"\D",
    _regex_parser.CATEGORY_SPACE: r"\s",
    _regex_parser.CATEGORY_NOT_SPACE: r"\S",
    _regex_parser.CATEGORY_WORD: r"\w",
    _regex_parser.CATEGORY_NOT_WORD: r"\W",
}
_NESTED = "a repeat inside a repeat can match the same text in exponentially many ways"
_ALTERNATIVES = (
    "alternatives that can match the same text, repeated, can match it in exponentially many ways"
)
_GENERAL_HINT = (
    r"rewrite it so that each character has one way to match, as `(\w+\s?)+` is "
    r"`\w+(\s\w+)*\s?`; on Python 3.11+ a possessive outer repeat (`++`, `*+`) also stops "
    "the backtracking"
)


class _Shape(collections.namedtuple("_Shape", "runs first empty ambiguous")):
    """What a part of a pattern matches. runs: probe character -> the (up to 3) smallest
    lengths of the strings of only that character the part matches inside a long run of it;
    first: the probe characters a non-empty match can start with; empty: it matches "";
    ambiguous: it matches some string in two ways."""


DEEPEST_PATTERN = 100  # levels of groups, repeats and branches; the same on every Python


def _nesting(parsed):
    """How many levels of subpatterns (groups, repeats, branches) a parsed pattern nests,
    walked without recursion."""
    deepest, stack = 0, [(parsed, 0)]
    while stack:
        items, depth = stack.pop()
        deepest = max(deepest, depth)
        for _op, argument in items:
            stack.extend((part, depth + 1) for part in _parts(argument))
    return deepest


@functools.lru_cache(maxsize=None)
def _backtracking_problem(pattern, flags):
    """Why the `pattern` (str) compiled with `flags` (int) may backtrack catastrophically
    (str), or None: a repeat of more than _LONG_REPEAT rounds whose part matches a run of one
    character in two lengths (`(a+)+`, `(a|aa)+`, `(\\w+\\s?)*`, `(.*a){12}`), matches a string in
    two ways (`(a|a?)+`), or is an alternation two of whose branches start alike (`(ab|a|b)*`).
    A required item the inner repeat cannot match keeps it safe: `(\\d+,)*`, `(\\w+\\s)*`."""
    parsed = _regex_parser.parse(pattern, flags)
    flags = parsed.state.flags
    if _nesting(parsed) > DEEPEST_PATTERN:  # the walk below recurses once a level
        return (
            f"nests groups more than {DEEPEST_PATTERN} deep, too deep to check whether it may "
            "backtrack catastrophically"
        )
    found = _risky_repeat(parsed, flags, _probes(parsed))
    if found is None:
        return None
    node, reason = found
    span = _source_span(pattern, flags, node)
    part = pattern
    if span:
        part = pattern[span[0] : span[1]]
    hint = _rewrite_hint(pattern, flags, node, span)
    return (
        f"may backtrack catastrophically: in `{part}`, {reason}, so a failing answer may "
        f"take hours; {hint}"
    )


def _risky_repeat(items, flags, probes):
    """The innermost repeat of more than _LONG_REPEAT rounds in `items` that may backtrack
    exponentially, as ((op, value), reason), or None."""
    for op, value in items:
        for part, part_flags in _flagged_parts(op, value, flags):
            found = _risky_repeat(part, part_flags, probes)
            if found:
                return found
        if op in _BACKTRACKING_REPEATS and value[1] > _LONG_REPEAT:
            reason = _loop_risk(value[2], flags, probes)
            if reason:
                return (op, value), reason
    return None


def _ungrouped(items):
    """`items` (a parsed pattern) without the groups that hold nothing else: ((x)) is x."""
    while len(items) == 1 and items[0][0] == _regex_parser.SUBPATTERN:
        items = items[0][1][3]
    return items


def _loop_risk(body, flags, probes):
    """Why repeating `body` without limit may backtrack exponentially (str), or None."""
    shape = _shape(body, flags, probes)
    if _pumps(shape.runs) and _has_repeat(body, flags):
        return _NESTED
    inner = _ungrouped(body)  # ((ab)*)*: every split of a run of "ab"s into rounds
    if len(inner) == 1 and inner[0][0] in _REPEATS and inner[0][1][1] > max(1, inner[0][1][0]):
        return _NESTED
    if _pumps(shape.runs) or shape.ambiguous or _branches_overlap(body, flags, probes):
        return _ALTERNATIVES
    return None


def _flagged_parts(op, value, flags):
    """The item lists inside one parsed item, each with the flags it is read with."""
    if op == _regex_parser.SUBPATTERN:
        return [(value[3], (flags | value[1]) & ~value[2])]
    if op in _REPEATS:
        return [(value[2], flags)]
    if op == _regex_parser.BRANCH:
        return [(branch, flags) for branch in value[1]]
    if op == _regex_parser.GROUPREF_EXISTS:
        return [(branch or [], flags) for branch in value[1:]]
    if op in (_regex_parser.ASSERT, _regex_parser.ASSERT_NOT):
        return [(value[1], flags)]
    if op == getattr(_regex_parser, "ATOMIC_GROUP", None):
        return [(value, flags)]
    return []


def _has_repeat(items, flags):
    for op, value in items:
        if op in _BACKTRACKING_REPEATS or any(
            _has_repeat(*part) for part in _flagged_parts(op, value, flags)
        ):
            return True
    return False


def _branches_overlap(items, flags, probes):
    """Whether `items` is one alternation (in groups) two of whose branches can start alike."""
    while len(items) == 1 and items[0][0] == _regex_parser.SUBPATTERN:
        ((items, flags),) = _flagged_parts(*items[0], flags)
    if len(items) != 1 or items[0][0] != _regex_parser.BRANCH:
        return False
    starts = collections.Counter()
    for branch in items[0][1][1]:
        starts.update(_shape(branch, flags, probes).first)
    return any(count > 1 for count in starts.values())


def _probes(items):
    """_PROBES and the characters `items` names, in both cases, with those just outside each
    range: two classes that overlap then share one of them."""
    chars = set(_PROBES)
    for op, value in items:
        if op in (_regex_parser.LITERAL, _regex_parser.NOT_LITERAL):
            chars.add(chr(value))
        elif op == _regex_parser.IN:
            for kind, item in value:
                if kind == _regex_parser.LITERAL:
                    chars.add(chr(item))
                elif kind == _regex_parser.RANGE:
                    ends = (item[0] - 1, item[0], item[1], item[1] + 1)
                    chars.update(chr(n) for n in ends if 0 <= n <= sys.maxunicode)
        for part, _ in _flagged_parts(op, value, 0):
            chars.update(_probes(part))
    cased = {form for c in chars for form in (c.lower(), c.upper()) if len(form) == 1}
    return "".join(sorted(chars | cased))


def _shape(items, flags, probes):
    """The _Shape of a sequence of parsed items."""
    shape = _Shape(dict.fromkeys(probes, (0,)), frozenset(), True, False)
    for op, value in items:
        part = _item_shape(op, value, flags, probes)
        runs = {c: _sums(shape.runs[c], part.runs[c]) for c in shape.runs.keys() & part.runs}
        first = shape.first
        if shape.empty:
            first = first | part.first
        shape = _Shape(runs, first, shape.empty and part.empty, shape.ambiguous or part.ambiguous)
    return shape


def _item_shape(op, value, flags, probes):
    if op in _ONE_CHARACTER:
        members = _members(op, value, flags, probes)
        return _Shape(dict.fromkeys(members, (1,)), members, False, False)
    parts = [
        _shape(items, part_flags, probes) for items, part_flags in _flagged_parts(op, value, flags)
    ]
    if op in (
        _regex_parser.ASSERT,
        _regex_parser.ASSERT_NOT,
    ):  # inside a long run it sees only that character
        return _zero_width(
            [c for c in probes if (c in parts[0].runs) == (op == _regex_parser.ASSERT)]
        )
    if op == _regex_parser.AT:
        return _zero_width(_anchor_holds(value, flags, probes))
    if not parts:  # a back reference: taken as holding anywhere
        return _zero_width(probes)
    if op in _BACKTRACKING_REPEATS:
        return _repeat_shape(parts[0], value[0], value[1], probes)
    if op in (_regex_parser.BRANCH, _regex_parser.GROUPREF_EXISTS):
        return _alternatives_shape(parts)
    if op == _regex_parser.SUBPATTERN:
        return parts[0]
    # Atomic (possessive repeat, atomic group): it keeps the one length it took first.
    if op == getattr(_regex_parser, "POSSESSIVE_REPEAT", None):
        parts[0] = _repeat_shape(parts[0], value[0], value[1], probes)
    runs = {c: lengths[:1] for c, lengths in parts[0].runs.items()}
    return _Shape(runs, parts[0].first, parts[0].empty, False)


def _members(op, value, flags, probes):
    """The probe characters the parsed single-character item (op, value) matches."""
    if op == _regex_parser.ANY:
        return frozenset(c for c in probes if c != "\n" or flags & re.DOTALL)
    if op in (_regex_parser.LITERAL, _regex_parser.NOT_LITERAL):
        same = _members(_regex_parser.IN, [(_regex_parser.LITERAL, value)], flags, probes)
        if op == _regex_parser.LITERAL:
            return same
        return frozenset(probes) - same
    ignore_case = flags & re.IGNORECASE
    negated = value[:1] == [(_regex_parser.NEGATE, None)]
    members = set()
    for char in probes:
        forms = {char}
        if ignore_case:
            forms.update(form for form in (char.lower(), char.upper()) if len(form) == 1)
        if _in_set(value, char, forms, flags) != negated:
            members.add(char)
    return frozenset(members)


def _in_set(items, char, forms, flags):
    """Whether a character class's parsed `items` hold `char` (`forms`: it in either case)."""
    for kind, item in items:
        if kind == _regex_parser.LITERAL and chr(item) in forms:
            return True
        if kind == _regex_parser.RANGE and any(item[0] <= ord(form) <= item[1] for form in forms):
            return True
        if kind == _regex_parser.CATEGORY and re.match(_CATEGORIES[item], char, flags & re.ASCII):
            return True
    return False


def _zero_width(holds):
    """The _Shape of an assertion that holds inside a long run of each character of `holds`."""
    return _Shape(dict.fromkeys(holds, (0,)), frozenset(), True, False)


def _anchor_holds(anchor, flags, probes):
    """The probe characters inside whose long runs the anchor (^ $ \\A \\Z \\b \\B) holds."""
    if anchor == _regex_parser.AT_NON_BOUNDARY:
        return probes
    if anchor in (_regex_parser.AT_BEGINNING, _regex_parser.AT_END) and flags & re.MULTILINE:
        return "\n"
    return ""


def _repeat_shape(body, low, high, probes):
    runs = {}
    if low == 0:
        runs = dict.fromkeys(probes, (0,))
    rounds = range(low, min(high, low + 3) + 1)  # more rounds add only longer lengths
    for char, lengths in body.runs.items():
        runs[char] = _smallest(n for count in rounds for n in _times(lengths, count))
    ambiguous = (high > 0 and body.ambiguous) or (high > 1 and _pumps(body.runs))
    first = frozenset()
    if high > 0:
        first = body.first
    return _Shape(runs, first, low == 0 or body.empty, ambiguous)


def _alternatives_shape(shapes):
    runs = {}
    for shape in shapes:
        for char, lengths in shape.runs.items():
            runs[char] = _smallest(runs.get(char, ()) + lengths)
    return _Shape(
        runs,
        frozenset().union(*(shape.first for shape in shapes)),
        any(shape.empty for shape in shapes),
        _share_a_string(shapes) or any(shape.ambiguous for shape in shapes),
    )


def _share_a_string(shapes):
    """Whether two alternatives both match "", or a run of one character in one length."""
    if sum(shape.empty for shape in shapes) > 1:
        return True
    runs = collections.Counter()
    for shape in shapes:
        runs.update((c, n) for c, lengths in shape.runs.items() for n in lengths if n)
    return any(count > 1 for count in runs.values())


def _pumps(runs):
    """Whether a run of some character is matched in two lengths other than 0 (a and aa)."""
    return any(len(lengths) - (0 in lengths) > 1 for lengths in runs.values())


def _smallest(lengths):
    return tuple(sorted(set(lengths))[:3])


def _sums(a, b):
    return _smallest(x + y for x in a for y in b)


def _times(lengths, count):
    """The smallest lengths of `count` rounds of `lengths` (by repeated squaring)."""
    total = (0,)
    while count:
        if count & 1:
            total = _sums(total, lengths)
        lengths, count = _sums(lengths, lengths), count >> 1
    return total


def _source_span(pattern, flags, node):
    """(start, end) of the first text of `pattern` that parses as `node`, or None."""
    wanted = _plain([node])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # re's warnings on pieces of the pattern
        for end in range(1, len(pattern) + 1):
            if pattern[end - 1] not in "*+?}":
                continue
            for start in range(end - 1, max(end - 300, 0) - 1, -1):
                try:
                    if _plain(_regex_parser.parse(pattern[start:end], flags)) == wanted:
                        return start, end
                except (re.error, RecursionError, OverflowError):
                    pass
    return None


def _plain(value):
    """A parse, or a part of one, as nested tuples without group numbers."""
    if isinstance(value, tuple) and len(value) == 2 and value[0] is _regex_parser.SUBPATTERN:
        return (value[0], _plain(value[1][1:]))
    if isinstance(value, (list, tuple, _regex_parser.SubPattern)):
        return tuple(_plain(item) for item in value)
    return value


def _rewrite_hint(pattern, flags, node, span):
    """How to write the risky repeat `node` found at `span` of `pattern` (str)."""
    op, (low, _, items) = node
    items = _ungrouped(items)
    if not (span and op == _regex_parser.MAX_REPEAT and len(items) == 1 and items[0][0] == op):
        return _GENERAL_HINT
    inner_low, inner_high, inner_items = items[0][1]
    inner = _source_span(pattern, flags, items[0])
    single = len(inner_items) == 1 and inner_items[0][0] in _ONE_CHARACTER
    if not (inner and single and inner_high == _regex_parser.MAXREPEAT and (low or inner_low < 2)):
        return _GENERAL_HINT
    # (x{a,})+ matches what x{a,} does, (x{a,}){b,c} what x{a*b,} does
    atom = re.sub(r"(?:[*+?]|\{\d*,?\d*\})$", "", pattern[inner[0] : inner[1]])
    quantifier = {0: "*", 1: "+"}.get(low * inner_low, f"{{{low * inner_low},}}")
    part = pattern[span[0] : span[1]]
    return f"write `{part}` as `{atom}{quantifier}`, which matches the same text"


# ---- counts ----


@register(rule=bounds_rule())
def check_phrase_count(
    output,
    phrase: Text,
    min: Count = None,
    max: Count = None,
    ignore_case: Bool = True,
    whole_word: Bool = True,
):
    """`phrase` occurs `min`..`max` times (whole words, case-insensitive by default)."""
    count = _count_phrase(_fold(output, ignore_case), _fold(phrase, ignore_case), whole_word)
    return count_result(count, "occurrence", min, max, f" of {short_repr(phrase)}")


@register
def check_max_words(output, n: Count):
    """At most `n` whitespace-separated words (`word_count` also takes a `min`)."""
    return check_word_count(output, max=n)


@register(rule=bounds_rule())
def check_word_count(output, min: Count = None, max: Count = None, split: Split = "whitespace"):
    """`min`..`max` words, split on white space or (`alphanumeric`) as runs of `\\w`."""
    return count_result(len(split_words(output, split)), "word", min, max)


@register(rule=bounds_rule())
def check_char_count(output, min: Count = None, max: Count = None):
    """`min`..`max` characters (Unicode code points, white space included)."""
    return count_result(len(output), "character", min, max)


@register(rule=bounds_rule())
def check_line_count(output, min: Count = None, max: Count = None):
    """`min`..`max` non-blank lines."""
    count = sum(1 for line in output.splitlines() if line.strip())
    return count_result(count, "non-blank line", min, max)


# ---- JSON ----


@register
def check_json_valid(output, allow_fence: Bool = False):
    """The output is one JSON text per RFC 8259 (`NaN` and `Infinity` are not JSON);
    `allow_fence` accepts a ```json fence before it and a ``` after it (either or both)."""
    value, problem = parse_json(output, allow_fence)
    return CheckResult(not problem, problem or f"valid JSON ({type(value).__name__})")


_JSON_TYPES = ((dict, "object"), (list, "array"), (str, "string"), (bool, "boolean"))


def json_type_name(value):
    """The JSON type of a decoded value: "object", "array", "string", "boolean", "null" or
    "number"."""
    if value is None:
        return "null"
    return next((name for cls, name in _JSON_TYPES if isinstance(value, cls)), "number")


@register
def check_json_keys(output, keys: Texts, exact: Bool = False, allow_fence: Bool = False):
    """A JSON object with all of `keys` (with `exact`, no others)."""
    value, problem = parse_json(output, allow_fence)
    if problem:
        return CheckResult(False, problem)
    if not isinstance(value, dict):
        kind = json_type_name(value)
        kind = {"array": "an array", "null": "null"}.get(kind, f"a {kind}")
        return CheckResult(False, f"JSON is {kind}, expected an object")
    wanted = as_checks_read(keys)  # as the answer's keys are read (parse_json)
    missing = [k for k, read in zip(keys, wanted) if read not in value]
    if missing:
        return CheckResult(False, f"missing keys: {short_reprs(missing)}")
    extra = exact and [k for k in value if k not in wanted]
    if extra:
        got = short_reprs(extra)
        return CheckResult(False, f"unexpected keys: {got}", (got,))
    return CheckResult(True, f"has keys {short_reprs(keys)}")


def json_equal(a, b, subset=False):
    """Whether JSON values `a` and `b` are equal as JSON Schema compares them: 1 equals 1.0, true
    does not equal 1, key order does not count. With `subset`, an object of `a` may hold more
    keys than `b`'s, recursively (not in arrays)."""
    if json_type_name(a) != json_type_name(b):
        return False
    if isinstance(a, dict):
        if subset:
            same_keys = a.keys() >= b.keys()
        else:
            same_keys = a.keys() == b.keys()
        return same_keys and all(json_equal(a[k], b[k], subset) for k in b)
    if isinstance(a, list):
        return len(a) == len(b) and all(map(json_equal, a, b))
    return a == b


# ---- the whole reply: tool calls and how it ended (these checks see the Answer) ----

JsonObject = param_kind(lambda v: isinstance(v, dict), "must be a JSON object")


def _schema_check():
    """The json_schema check, which the optional file registers; EvalsError naming the file."""
    _extras("a JSON Schema")
    return CHECKS["json_schema"]


def JsonSchema(value):
    try:
        return _schema_check().params["schema"].kind(value)
    except EvalsError as exc:
        return str(exc)


FinishReasons = param_kind(
    lambda v: is_string_list(v) and set(v) <= set(FINISH_REASONS),
    "must be a non-empty list of " + ", ".join(FINISH_REASONS),
)


def tool_call_text(call, limit=None):
    """A tool call as reasons and reports show it, 'name({...})', cut to `limit` characters."""
    if "arguments" not in call:  # a record saved with --omit-outputs
        return f"{call.get('name')}([arguments omitted])"
    shown = json.dumps(call["arguments"], ensure_ascii=False)
    if limit is not None and len(shown) > limit:
        shown = shown[: limit - 3] + "..."
    return f"{call.get('name')}({shown})"


def _arguments_problem(call, arguments, schema, quoted):
    """Why `call`'s arguments do not hold `arguments` or satisfy `schema` (str), or None."""
    if arguments is None and schema is None:
        return None
    shown = tool_call_text(call, 120)
    quoted.append(shown)
    if not isinstance(call["arguments"], dict):
        return f"{shown}: its arguments are not a JSON object"
    if arguments is not None and not json_equal(call["arguments"], arguments, subset=True):
        return f"{shown} does not hold {json.dumps(arguments, ensure_ascii=False)}"
    if schema is None:
        return None
    # The json_schema check scores the arguments' JSON text: the same rules, the same reasons.
    result = _schema_check().func(json.dumps(call["arguments"]), schema)
    if result.passed:
        return None
    quoted.extend(result.quoted)
    return f"{shown}: {result.reason}"


@register(rule=bounds_rule(needed=False, hint="; for a tool that must not be called, use negate"))
def check_tool_called(
    reply,
    name: Text,
    arguments: JsonObject = None,
    schema: JsonSchema = None,
    min: Count = 1,
    max: Count = None,
):
    """The model called the tool `name` `min`..`max` times (default: at least once), counting
    the calls whose arguments hold `arguments` (a subset, compared as JSON) and satisfy
    `schema`; negated: no such call."""
    named, quoted = [call for call in reply.tool_calls if call["name"] == name], []
    misses = [_arguments_problem(call, arguments, schema, quoted) for call in named]
    count = misses.count(None)
    matching = ""
    if arguments is not None or schema is not None:
        matching = " with matching arguments"
    result = count_result(count, ("call", "calls"), min, max, f" of {name}{matching}")
    if result.passed or count >= (min or 0):  # too many calls: the count says it all
        return result
    called = ", ".join(dict.fromkeys(call["name"] for call in reply.tool_calls))
    if named:  # why the calls of the tool did not match
        detail = join_truncated([miss for miss in misses if miss is not None], 3)
    elif called:
        detail = f"the reply called {called}"
    else:
        detail = "the reply called no tool"
    return CheckResult(False, f"{result.reason}: {detail}", tuple(quoted))


@register
def check_tool_sequence(reply, names: Texts, exact: Bool = False):
    """The model called the tools `names` in this order, other calls allowed before, between
    and after them (with `exact`, exactly these calls and no other)."""
    called = [call["name"] for call in reply.tool_calls]
    calls = ", ".join(called) or "none"
    wanted = " then ".join(names)
    if exact and called == list(names):
        return CheckResult(True, f"called exactly {wanted}")
    if exact:
        return CheckResult(False, f"expected exactly {wanted}; the calls: {calls}")
    found = 0  # how many of `names` were called in order
    for called_name in called:
        found += found < len(names) and called_name == names[found]
    if found == len(names):
        return CheckResult(True, f"called {wanted} (the calls: {calls})")
    after = ""
    if found:
        after = f" after {names[found - 1]}"
    return CheckResult(
        False, f"no call of {names[found]}{after}, expected {wanted}; the calls: {calls}"
    )


@register
def check_finish_reason(reply, values: FinishReasons):
    """The reply ended for one of `values`: `stop`, `length` (the token limit), `tool_calls`,
    `content_filter` or `refusal` (each provider's word normalised by my_client); a reply
    whose client reported none fails."""
    ended = reply.finish_reason
    if ended is None:  # not known is not a pass, as for latency and cost
        return CheckResult(False, "the client reported no finish reason", flag="unknown")
    if ended in values:
        return CheckResult(True, f"ended with {ended}")
    return CheckResult(False, f"ended with {ended}, expected {' or '.join(values)}")


# ---- judge (its check is in evals_extras.py) ----

_NEEDS_JUDGE = (
    "a `judge` check needs a judge: score it with evaluate(case, output, judge=...), "
    "or on the command line with --judge MODULE:FUNCTION (or --no-judge to skip it)"
)
NO_JUDGE = object()  # evaluate(..., judge=NO_JUDGE) skips judge checks (--no-judge)


class JudgeRequired(EvalsError):
    """A `judge` check was scored without a judge (run_check never scores one)."""


def callable_name(func):
    """ "module:qualname" of a function (or of an object's type), as messages name it."""
    module = getattr(func, "__module__", None) or "?"
    return f"{module}:{getattr(func, '__qualname__', None) or type(func).__name__}"


# ---- latency (cost: evals_extras.py); not measured: not applicable (skipped), never a pass ----

Amount = param_kind(lambda v: is_json_number(v) and v >= 0, "must be a number of 0 or more")


@register(figure="latency_s")
def check_max_latency_s(reply, seconds: Amount):
    """The call took at most `seconds` seconds (a reply from the cache or a recording: as when it
    was made); not applicable when that is not known."""
    if reply.latency_s is None:
        return CheckResult(
            None,
            "not applicable: no latency is known (an answer recorded or re-scored without one)",
            flag="skipped",
        )
    return CheckResult(
        reply.latency_s <= seconds, f"took {reply.latency_s:.3f} s, expected at most {seconds:g} s"
    )


# ---- the user's own checks ----

USER_CHECK_SECONDS = 10.0  # a user's check still running then is abandoned: the case errs


@functools.lru_cache(maxsize=None)
def _user_check(spec):
    """The function a `python` check names, imported once; raises ClientError."""
    return load_callable(spec, "function")


def Function(spec):
    if not isinstance(spec, str):
        return "must be a string MODULE:FUNCTION"
    try:
        _user_check(spec)
    except ClientError as exc:
        return f"cannot be loaded: {exc}"
    return None


def _python_rule(check):
    # The function's own signature decides which keys it takes, as for the built-in checks.
    import inspect

    params = {k: v for k, v in check.items() if k not in ("type", "negate", "on", "function")}
    try:
        inspect.signature(_user_check(check["function"])).bind("output", **params)
    except TypeError as exc:
        return [f"{check['function']} does not take these parameters: {exc}"]
    except ValueError:  # no signature to read (a builtin): it is called as given
        pass
    return []


@register(rule=_python_rule)
def check_python(output, function: Function, **params):
    """Your own check: `function` (MODULE:FUNCTION, importable from the current folder) is
    called as FUNCTION(output, **the check's other keys) and returns a bool or (bool, reason);
    an exception, or a call over 10 seconds, makes the case an error."""
    cwd = os.getcwd()  # what the check changes stays in its call: the folder, its parameters
    with contextlib.suppress(ValueError):  # JSON's values, copied (others: as they are)
        params = marshal.loads(marshal.dumps(params))
    try:
        verdict = call_within(lambda: _user_check(function)(output, **params), USER_CHECK_SECONDS)
    except BaseException as exc:  # noqa: B902 - sys.exit(), pytest.fail(): its case's error
        if isinstance(exc, KeyboardInterrupt) and not getattr(exc, "by_call", False):
            raise  # Ctrl-C (the check ran in this thread, or the user's key stopped the wait)
        description, quoted = describe_raised(exc)
        return CheckResult(False, f"{function} raised {description}", quoted, "error")
    finally:
        os.chdir(cwd)
    reason = None
    if isinstance(verdict, tuple) and len(verdict) == 2 and isinstance(verdict[1], str):
        verdict, reason = verdict
    if not isinstance(verdict, bool):
        return CheckResult(
            False,
            f"{function} returned {type(verdict).__name__}, expected a bool or (bool, reason)",
            flag="error",
        )
    if not reason:
        return CheckResult(verdict, f"returned {verdict}")
    # The user's words may quote the output: --omit-outputs hides them, evals' own stay.
    return CheckResult(verdict, reason, (reason,))


# ---- validating and running checks ----


def validate_check(check):
    """The problems (list of str) of one check (a dict from the case file): unknown type or
    parameter, wrong kind, missing, or against its rule. A `python` check's function is
    imported here."""
    if not isinstance(check, dict):
        return [f"must be an object, got {json_type_name(check)}"]
    kind = check.get("type")
    if not isinstance(kind, str):
        return ["has no 'type' (a string naming the check)"]
    spec = CHECKS.get(kind) or _extras() and CHECKS.get(kind)  # the optional file registers
    if spec is None:
        known = ", ".join(sorted(CHECKS))
        hint = did_you_mean(kind, CHECKS)
        if not _extras():  # the optional file would register more: its absence is said first
            return [f"unknown check type {kind!r}: {_NO_EXTRAS}{hint} Known types: {known}"]
        return [f"unknown check type {kind!r}{hint} Known types: {known}"]
    params = {"negate": _NEGATE}
    if not spec.whole:  # "on" picks the text a check reads; a check of the whole reply reads none
        params["on"] = _ON
    params.update(spec.params)
    problems = []
    for key, value in check.items():
        param = params.get(key)
        if param is not None:
            problem = param.kind(value)
            if problem:
                problems.append(f"{kind}: parameter {key!r} {problem}")
        elif key != "type" and not spec.open:
            hint = did_you_mean(key, params).rstrip(".")
            problems.append(
                f"{kind}: unknown parameter {key!r}{hint} (allowed: {', '.join(params)})"
            )
    problems += [
        f"{kind}: missing required parameter {key!r}"
        for key, param in params.items()
        if param.required and key not in check
    ]
    if not problems and spec.rule:
        problems += [f"{kind}: {problem}" for problem in spec.rule(check)]
    return problems


def did_you_mean(name, known):
    """ "; did you mean 'x'?" for the names that start with `name` ("contains" is short for
    contains_any or contains_all, not for not_contains), else the closest one; "." if none."""
    import difflib

    close = [k for k in known if k.startswith(name)] or difflib.get_close_matches(name, known, 1)
    if not close:
        return "."
    return f"; did you mean {' or '.join(map(repr, close))}?"


def run_check(check, output, ask=None, case_input="", reasoning=None):
    """The CheckResult of one validated check (dict) on `output`: a str, a reply as a client
    returns it (a mapping or an object, read by read_reply as a run reads it) or an Answer.

    A judge check needs `ask` (prompt -> reply), else it raises JudgeRequired; a check that
    validate_check refuses, or a reply that read_reply refuses, raises ValueError with the
    message a run gives. reasoning: the model's thinking, for "on": "reasoning" (by default
    the reply's own)."""
    problems = validate_check(check)
    if problems:
        raise ValueError("; ".join(problems))
    spec = CHECKS[check["type"]]
    if spec.needs_judge and ask is None:
        raise JudgeRequired(_NEEDS_JUDGE)
    try:
        answer, reply = read_reply(output)
    except TypeError as exc:
        raise ValueError(str(exc)) from None
    if isinstance(output, Answer):  # a run's own answer: its latency and cost are read too
        answer = answer._replace(latency_s=output.latency_s, cost_usd=output.cost_usd)
    if reasoning is None:
        reasoning = reply["reasoning"]
    return _score(spec, check, _scorable(answer.text), answer, ask, case_input, reasoning)


# An answer that did not end by itself is scored all the same; a failing reason says why.
_ENDINGS = {
    "length": "the answer was cut at the token limit",
    "content_filter": "the answer was stopped by a content filter",
    "refusal": "the model refused",
}


def _scorable(output):
    """`output` as checks read it (_normal), or None when blank."""
    output = output and _normal(output)
    if not output or output.isspace():
        return None
    return output


def _score(spec, check, text, answer, ask=None, case_input="", reasoning=None):
    """The CheckResult of `check` (its `spec`), negated if asked, on the whole `answer`, on its
    scorable `text` or, with "on": "reasoning", on `reasoning` (None fails a text check)."""
    params = dict(check)
    if spec.needs_judge:
        params.update(ask=ask, case_input=case_input)
    del params["type"]  # copy and delete: 0.5 us a check, 1.3 us filtering in a comprehension
    negate = params.pop("negate", False)
    if params.pop("on", "answer") == "reasoning":
        text = _scorable(reasoning)
        if text is None:
            return _ended(CheckResult(False, "the model gave no reasoning"), answer)
    if spec.whole:
        text = answer
    elif text is None:  # an empty text fails every check of the text, negated ones included
        called = ", ".join(dict.fromkeys(call["name"] for call in answer.tool_calls))
        if called:
            return _ended(CheckResult(False, f"the reply has no text; it called {called}"), answer)
        return _ended(CheckResult(False, "the output is empty"), answer)
    result = spec.func(text, **params)
    if negate and result.flag is None and result.passed:
        result = result._replace(
            passed=False, reason=f"negated: holds, but must not: {result.reason}"
        )
    elif negate and result.flag is None:
        result = result._replace(passed=True, reason=f"negated: does not hold: {result.reason}")
    if spec.whole:
        return result
    return _ended(result, answer)


def _ended(result, answer):
    ending = _ENDINGS.get(answer.finish_reason)
    if ending is None or result.passed is not False or result.flag is not None:
        return result
    return result._replace(
        reason=f"{result.reason} ({ending}: finish_reason {answer.finish_reason})"
    )


# Check results repeat across cases ("found 'manager'"): their dicts are shared (read-only), so
# a 100,000-case suite holds a few thousand of them instead of half a million.
_shared = functools.lru_cache(maxsize=8192)(CheckResult.as_dict)

# A figure not known now (no latency kept with a recorded answer, no usage, an unpriced model)
# keeps the verdict its check had when last known: a fail stays a fail, anything else is
# skipped, never a pass. So no case turns fixed, then regressed, because of where its reply
# came from (docs/checks.md, "Latency and cost budgets").
_NOT_MEASURED = "not measured now; when last measured: "


def _kept_fail(kind, before):
    """The fail a check of type `kind` whose figure is not known now keeps: a CheckResult
    quoting the first check of that type that failed in `before` (the baseline's call, as check
    dicts), or None when none did."""
    for check in before:
        if isinstance(check, dict) and check.get("type") == kind and check.get("passed") is False:
            measured = str(check.get("reason")).rpartition(_NOT_MEASURED)[2]
            return CheckResult(False, _NOT_MEASURED + measured, flag="unknown")
    return None


def evaluate(case, output, judge=None, reasoning=None, attempt=0, before=()):
    """Score every check of `case` on `output` (str, or an Answer): (status, list of check
    dicts in case order).

    judge: a callable (prompt str -> reply str, or a Judge), passed `case=` and `attempt=`
    (the repeat index) when its signature names them; NO_JUDGE skips the checks that need
    one, None makes them errors. After a deterministic check failed they are skipped, unasked.
    reasoning: the model's thinking (str or None), which checks with "on": "reasoning" score.
    before: the check dicts of the baseline's call, whose fails a check keeps when the figure
    it scores is not known now (_kept_fail)."""
    answer = output
    if not isinstance(output, Answer):
        answer = Answer(output)
    text = _scorable(answer.text)  # once for all the case's checks
    specs = [CHECKS[check["type"]] for check in case.checks]
    results = []  # None: a check that needs the judge, asked below
    for spec, check in zip(specs, case.checks):
        if spec.needs_judge:
            results.append(None)
        else:
            result = _score(spec, check, text, answer, reasoning=reasoning)
            if spec.figure and getattr(answer, spec.figure) is None:
                result = _kept_fail(spec.name, before) or result
            results.append(_shared(result, spec.name))
    if None not in results:
        return case_status(results), results
    failed = ", ".join(dict.fromkeys(r["type"] for r in results if r and r["passed"] is False))
    if judge is NO_JUDGE:
        unjudged = CheckResult(None, "skipped (--no-judge): not judged", flag="skipped")
    elif failed:
        unjudged = CheckResult(
            None,
            f"skipped: a deterministic check failed ({failed}), so the judge was not asked",
            flag="skipped",
        )
    elif judge is None:
        unjudged = CheckResult(False, _NEEDS_JUDGE, flag="error")
    else:  # the judge as `ask` (prompt -> reply) for this case and attempt, keeping its name
        unjudged, ask = None, functools.partial(asking(judge), case=case, attempt=attempt)
        ask.name = getattr(judge, "name", None) or callable_name(judge)
    for index, (spec, check) in enumerate(zip(specs, case.checks)):
        if results[index] is None:
            results[index] = (
                unjudged or _score(spec, check, text, answer, ask, case.input, reasoning)
            ).as_dict(spec.name)
    return case_status(results), results


# ---------------------------------------------------------------------------------------------
# Cases: loading and validating the JSONL case file, all problems at once
# ---------------------------------------------------------------------------------------------


ROLES = ("system", "user", "assistant")  # a conversation's message roles, as chat APIs name them

# A case's fields: (required, whether a value is valid, what a valid one is).
CASE_FIELDS = {
    "id": (True, lambda v: isinstance(v, str) and v.strip(), "a non-empty string"),
    "input": (
        True,
        lambda v: isinstance(v, (str, list)),
        'a string or a list of messages ({"role": ..., "content": ...})',
    ),
    "checks": (True, lambda v: isinstance(v, list) and v, "a non-empty list of checks"),
    "description": (False, lambda v: isinstance(v, str), "a string"),
    "tags": (False, lambda v: is_string_list(v, allow_empty=True), "a list of strings"),
    "metadata": (False, lambda v: isinstance(v, dict), "an object"),
}

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _message_problems(message, where):
    """Problems of a conversation's message: {"role": one of ROLES, "content": non-empty str}."""
    if not isinstance(message, dict):
        return [f"{where}: expected object, got {json_type_name(message)}"]
    problems = [
        f"{where}: missing required key {key!r}"
        for key in ("role", "content")
        if key not in message
    ]
    problems += [
        f"{where}: unexpected key {short_repr(key)}"
        for key in message
        if key not in ("role", "content")
    ]
    role, content = message.get("role", "user"), message.get("content", ".")
    if role not in ROLES:
        shown = to_json(role)  # as written, unless it hides a control or format character
        if not shown.isprintable():
            shown = json.dumps(role)
        problems.append(f"{where}.role: {shown} not one of {to_json(list(ROLES))}")
    if not isinstance(content, str):
        problems.append(f"{where}.content: expected string, got {json_type_name(content)}")
    elif not content:
        problems.append(f"{where}.content: 0 characters, expected at least 1")
    return problems


def conversation_problems(value):
    """Problems (list of str) of a conversation, a case's input that is a list: it needs a
    message, each {"role": one of ROLES, "content": non-empty str}, the last the user's (the
    model answers it)."""
    if not value:
        return ["field 'input' is an empty conversation: give at least one user message"]
    problems = [
        problem
        for index, message in enumerate(value)
        for problem in _message_problems(message, f"input[{index}]")
    ]
    last = value[-1]
    if isinstance(last, dict) and last.get("role") in ROLES and last["role"] != "user":
        problems.append(
            f"input: the last message must be the user's, the one the model "
            f"answers (input[{len(value) - 1}] is from the {last['role']})"
        )
    return problems


def case_problems(data, memo=None):
    """Problems of one decoded case line (list of str), empty for a valid case. With `memo` (a
    dict kept across lines), equal check lists are validated once and shared as one tuple:
    20,000 cases load in 0.7 s, not 1.3 s, and 100,000 hold 1/3 of the memory."""
    if not isinstance(data, dict):
        problem = f"a case must be a JSON object, got {json_type_name(data)}"
        if isinstance(data, list) and any(isinstance(item, dict) for item in data):
            problem += " (one case a line, not an array of cases)"  # a whole file's JSON array
        return [problem]
    problems = [
        f"unknown field {key!r} (allowed: {', '.join(CASE_FIELDS)})"
        for key in data
        if key not in CASE_FIELDS
    ]
    for name, (required, valid, wanted) in CASE_FIELDS.items():
        if name not in data:
            if required:
                problems.append(f"missing field {name!r}")
        elif not valid(data[name]):
            problems.append(f"field {name!r} must be {wanted}")
        elif name in ("id", "tags") and _LONE_SURROGATE.search("".join(data[name])):
            # "\ud800" decodes to half a character, which no file, terminal or database takes
            # as UTF-8: the history write, or every later run, would fail.
            problems.append(
                f"field {name!r} holds a lone surrogate (half of a \\uXXXX pair); "
                "use whole characters"
            )
        elif name == "input" and isinstance(data["input"], list):
            problems += conversation_problems(data["input"])
        elif name == "checks":
            key = shared = None
            if memo is not None:  # equal lists validated once and shared as one tuple
                key = marshal.dumps(data["checks"])
                shared = memo.get(key)
            if shared is None:
                shared = (
                    tuple(data["checks"]),
                    [
                        f"check {number}: {problem}"
                        for number, check in enumerate(data["checks"], 1)
                        for problem in validate_check(check)
                    ],
                )
            if memo is not None:
                data["checks"] = memo.setdefault(key, shared)[0]
            problems += shared[1]
    return problems


def load_cases(path):
    """Load and validate a JSONL case file; returns (list of Case, sha256 hex of the file).
    Raises CaseFileError with every problem in the file ("FILE:LINE: message"; blank lines are
    skipped, not renumbered), so no model sees a half-valid suite."""
    import hashlib

    digest, memo = hashlib.sha256(), {}
    try:
        handle = open(path, "rb")
    except OSError as exc:
        reason = exc.strerror or exc
        if isinstance(exc, FileNotFoundError) and not os.path.isabs(path):
            reason = (
                f"{reason} in {os.getcwd()} (paths are relative to the current folder: "
                "run from the folder that holds the case file, or pass --cases)"
            )
        raise CaseFileError([f"{path}: cannot read the case file: {reason}"]) from None
    cases, problems, first_line = [], [], {}
    # Lines end at b"\n" only: a JSON string may hold U+2028, which is no line end.
    with handle:
        for number, raw in enumerate(handle, 1):
            digest.update(raw)
            where = f"{path}:{number}"
            try:  # only the first line can begin with a byte order mark
                raw = raw.decode("utf-8-sig" if number == 1 else "utf-8").rstrip("\r\n")
            except UnicodeDecodeError:
                problems.append(f"{where}: not UTF-8 text")
                continue
            if not raw.strip():
                continue
            try:
                data = strict_json_loads(raw, unique_keys=True)
            except (ValueError, RecursionError) as exc:  # NaN, a repeated key, deep nesting
                if isinstance(exc, json.JSONDecodeError):
                    reason = f"{exc.msg} (column {exc.colno})"
                elif isinstance(exc, RecursionError):
                    reason = "nested too deeply"
                else:
                    reason = exc
                problems.append(f"{where}: invalid JSON: {reason}")
                if raw.strip() in ("{", "[") and not first_line:  # a pretty-printer's first line
                    problems.append(
                        f"{where}: a case is one line of JSON (JSON Lines), not a "
                        "value spread over lines; the rest of the file was not read"
                    )
                    break
                continue
            problems += [f"{where}: {problem}" for problem in case_problems(data, memo)]
            case_id = data.get("id") if isinstance(data, dict) else None
            if isinstance(case_id, str) and first_line.setdefault(case_id, number) != number:
                problems.append(
                    f"{where}: duplicate id {case_id!r} (first used on line {first_line[case_id]})"
                )
            if not problems:  # after a problem the file is refused: no case is needed
                fields = {**data, "tags": tuple(data.get("tags", ()))}  # checks: a shared tuple
                cases.append(Case(**fields, path=str(path), line=number))
    if not cases and not problems:
        problems.append(f"{path}: no cases (the file is empty)")
    if problems:
        raise CaseFileError(problems)
    return cases, digest.hexdigest()


# ---- selection: tags, ids, what failed last time, shards ----


def shard_of(case_id, count):
    """The shard (0-based, of `count`) a case belongs to: a hash of its id, so the split does
    not change when cases are reordered, added or removed elsewhere in the file."""
    import hashlib

    return int(hashlib.sha256(case_id.encode("utf-8")).hexdigest()[:16], 16) % count


def select_cases(cases, tags=(), ids=(), failed_in=None, shard=None):
    """The cases to run, in file order: with any of `tags`, an id matching any shell-style
    pattern of `ids` ("refund-*"), a last status other than "pass" in the Baseline `failed_in`,
    and in `shard`, (index, count) with 1 <= index <= count. An empty filter keeps all."""
    import fnmatch

    return [
        case
        for case in cases
        if (not tags or set(tags) & set(case.tags))
        and (not ids or any(fnmatch.fnmatchcase(case.id, p) for p in ids))
        and (failed_in is None or (failed_in.get(case.id) or {}).get("status") != "pass")
        and (shard is None or shard_of(case.id, shard[1]) == shard[0] - 1)
    ]


# ---------------------------------------------------------------------------------------------
# Runner: call the model for every case, in case-file order, never scoring an error
# ---------------------------------------------------------------------------------------------


class BudgetExceeded(Exception):
    """The next call could take the run past its budget; the case is an error, not a call."""


class Interrupted(Exception):
    """The run was stopped by Ctrl-C or SIGTERM. `results` holds the cases that finished."""

    def __init__(self, results):
        self.results = results
        super().__init__("interrupted")


class RunOptions:
    """How cases are run: concurrency (calls in flight), timeout (s a call), repeat (calls a
    case), min_pass (default: a majority), budget (a Budget), price ((model, usage) -> US
    dollars, evals_extras.call_cost; None: costs unknown), judge (the callable of `judge`
    checks), baseline (a Baseline: a check keeps the fail it had there when the figure it
    scores is not known now; None: no baseline). A run counts its `replies`, of them the
    `cached` ones (a cache or a journal answered), and the calls the provider refused for a
    while (`refusals`)."""

    def __init__(
        self,
        concurrency=1,
        timeout=None,
        repeat=1,
        min_pass=None,
        budget=None,
        price=None,
        judge=None,
        baseline=None,
    ):
        self.concurrency = concurrency
        self.timeout = timeout
        self.repeat = repeat
        self.min_pass = min_pass
        self.budget = budget
        self.price = price
        self.judge = judge
        self.baseline = baseline
        self._counting = threading.Lock()
        self._start()

    def _start(self):
        """A run's own state: a refused key stops this run's calls, not a later run's."""
        self.refused = None  # why every later call would be refused too (a refused key)
        self.replies = self.cached = self.refusals = 0
        self.idle_refusals, self.replies_at_refusal = 0, None  # of the whole run, in a row

    @property
    def needed(self):
        if self.min_pass is not None:
            return self.min_pass
        return self.repeat // 2 + 1  # a majority


# ---- the runner: each case's calls, in a pool of worker threads ----

# A provider that refuses a call for now (HTTP 429, overloaded) says so with an exception whose
# `retry_after` is a number of seconds (0: it did not say how long). The case goes back to the
# run, which calls other cases meanwhile, and is called again once the wait is over. Refusals
# while the run makes progress are waits, not spent attempts; a case refused this many times in
# a row with no answer of the run in between errs, and so does one asked to wait too long.
REFUSAL_WAIT = 1.0  # seconds before calling again when the provider did not say; doubles...
REFUSAL_WAIT_MAX = 30.0  # ...with each refusal in a row, up to this
REFUSALS_WITHOUT_PROGRESS = 8
LONGEST_WAIT = 300.0  # seconds; a provider asking for more (a daily quota) is not waited for


class _Refused(Exception):
    """A call the provider refused for now: its exception, and the seconds it asks to wait."""

    def __init__(self, error, wait):
        super().__init__(error)
        self.error, self.wait = error, wait


def _retry_after(exc):
    """The seconds a refused call's exception asks to wait (0.0: not said), or None when it is
    not a refusal (no numeric `retry_after`)."""
    wait = getattr(exc, "retry_after", None)
    if isinstance(wait, bool) or not isinstance(wait, (int, float)):
        return None
    if wait != wait or wait < 0:  # NaN or negative: no time said
        return 0.0
    try:
        return float(wait)
    except OverflowError:  # an int too large for a float: longer than any wait
        return math.inf


# A client's error names the innermost frame of the user's code that raised it: a file that is
# none of the harness's own (evals.py, evals_extras.py, and my_client.py and my_client_batches.py,
# shipped beside it), the standard library's, installed packages' (site-packages,
# dist-packages) or code without a file ("<frozen ...>").
_HARNESS_FILES = ("evals.py", "evals_extras.py", "my_client.py", "my_client_batches.py")
_STDLIB = os.path.join(os.path.dirname(os.path.realpath(os.__file__)), "")
TRACEBACK_FRAMES = 20  # the innermost frames a record keeps of each exception...
TRACEBACK_CHARS = 10000  # ...and the last characters of them all


@functools.lru_cache(maxsize=None)
def _file_kind(filename):
    """ "harness", "library" or "user": whose code a traceback frame's file holds."""
    path = os.path.realpath(filename)
    if (
        os.path.dirname(path) == os.path.realpath(_HERE)
        and os.path.basename(path) in _HARNESS_FILES
    ):
        return "harness"
    parts = path.split(os.sep)
    if filename.startswith("<") or path.startswith(_STDLIB):
        return "library"
    if "site-packages" in parts or "dist-packages" in parts:
        return "library"
    return "user"


def _raised_where(exc):
    """(" (file:line in function)", the innermost frame of the user's code in the traceback of
    the client's `exc`, or ""; that traceback from the client's call on, or None when evals
    raised it: its time-out)."""
    import traceback

    tb = exc.__traceback__
    while tb is not None and _file_kind(tb.tb_frame.f_code.co_filename) == "harness":
        tb = tb.tb_next  # the frames that called the client
    if tb is None:
        return "", None
    where, cwd = "", os.path.join(os.getcwd(), "")
    for frame, line in traceback.walk_tb(tb):
        code = frame.f_code
        if _file_kind(code.co_filename) == "user":
            path = os.path.abspath(code.co_filename)
            if path.startswith(cwd):
                path = path[len(cwd) :]
            where = f" ({path}:{line} in {code.co_name})"
    text = "".join(traceback.format_exception(type(exc), exc, tb, limit=-TRACEBACK_FRAMES))
    if len(text) > TRACEBACK_CHARS:
        text = f"[{len(text) - TRACEBACK_CHARS:,} characters cut]\n" + text[-TRACEBACK_CHARS:]
    return where, text


def _baseline_checks(case_id, attempt, options):
    """The check dicts of the baseline's call whose fails `attempt` of a case keeps where a
    figure is not known now (_kept_fail): its entry's own (the call it shows), or with --repeat
    those of its call with the same repeat index (an entry's `attempts` keep their fails)."""
    entry = None
    if options.baseline is not None:
        entry = options.baseline.get(case_id)
    if not isinstance(entry, dict):
        return ()
    calls = entry.get("attempts")
    if options.repeat > 1 and isinstance(calls, list) and attempt < len(calls):
        entry = calls[attempt] if isinstance(calls[attempt], dict) else {}
    checks = entry.get("checks")
    if isinstance(checks, list):
        return checks
    return ()


def _attempt(case, attempt, call, options):
    """One call of `case` (its repeat `attempt`) and its scoring, as a CaseResult; _Refused when
    the provider refused the call for now."""
    if options.refused:  # every other call would be refused the same way, and counted
        return CaseResult(case.id, "error", error=f"not called: {options.refused}")
    estimate = options.budget.reserve() if options.budget else 0.0
    cost, answered, replayed = None, False, False
    # A conversation is copied for each call: a client may append its reply to the list.
    prompt = case.input if isinstance(case.input, str) else [dict(m) for m in case.input]
    try:
        started = time.perf_counter()
        try:
            output = call_within(lambda: call(prompt, case, attempt), options.timeout)
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # noqa: B902 - a client's sys.exit() is its case's error
            wait = _retry_after(exc)
            if wait is not None and wait <= LONGEST_WAIT:
                raise _Refused(exc, wait) from None
            if getattr(exc, "abandoned", False):  # not cancelled: the provider may bill it
                cost = estimate or None  # with no estimate yet it is no price: calls stay serial
            if getattr(exc, "status", None) in (401, 403):
                options.refused = (
                    f"the provider refused the credentials (HTTP {exc.status}) "
                    f"on case {case.id!r}; fix the key and run again"
                )
            where, trace = _raised_where(exc)
            error = _describe_error(exc) + where
            if wait is not None:
                error += (
                    f" (it asks to wait {wait_text(wait)}, more than {LONGEST_WAIT:g} s: "
                    "not waited)"
                )
            return CaseResult(
                case.id,
                "error",
                error=mask_secrets(error),
                latency_s=round(time.perf_counter() - started, 6),
                traceback=mask_secrets(trace),
            )
        latency = round(time.perf_counter() - started, 6)
        try:
            # The checks score what the model said: a canary kept in a credential variable
            # must fail its check when it leaks. Writers mask what the record quotes.
            answer, reply = read_reply(output)
        except TypeError as exc:
            return CaseResult(case.id, "error", latency_s=latency, error=str(exc))
        replayed = call.replays or reply["replayed"] or reply["cached"]
        with options._counting:
            options.replies += 1
            options.cached += reply["cached"]
        kept = None  # no call was made now: its checks see the latency of the one that made it
        if replayed:
            latency, kept = None, reply["latency_s"]
        cost = options.price(reply["model"], reply["usage"]) if options.price else None
        answer = answer._replace(latency_s=kept if replayed else latency, cost_usd=cost)
        answered = True
        before = _baseline_checks(case.id, attempt, options)
        status, checks = evaluate(case, answer, options.judge, reply["reasoning"], attempt, before)
        error = None
        if status == "error":
            error = next(c["reason"] for c in checks if c.get("error"))
        return CaseResult(
            case.id,
            status,
            answer.text,
            checks,
            error,
            latency,
            cost_usd=cost,
            tool_calls=answer.tool_calls,
            finish_reason=answer.finish_reason,
            kept_latency_s=kept,
            **{key: reply[key] for key in ("usage", "model", "sent", "reasoning")},
        )
    finally:
        if options.budget:  # a recorded answer cost nothing: it is not an unpriced call
            options.budget.settle(estimate, 0.0 if replayed else cost, answered)


# A call's parts each of a repeated case's `attempts` keeps when set, besides its status,
# output, error, latency and failed checks: enough to re-score it as it was (load_outputs).
_CALL_PARTS = ("kept_latency_s", "reasoning", "tool_calls", "finish_reason", "usage", "model")


def _verdict(attempts, options):
    """The CaseResult of a case's calls: its one call's, or with repeats, pass with `needed`
    passes, else error when the errored calls and those the budget left unmade could have made
    up the difference, else review or fail; flaky when the scored (not errored) calls disagree.
    Each check of the shown call counts passes and calls over the scored calls that scored it
    (not skipped)."""
    if options.repeat == 1:
        return attempts[0]
    counts = collections.Counter(a.status for a in attempts)
    scored = [a for a in attempts if a.status != "error"]
    if counts["pass"] >= options.needed:
        status = "pass"
    elif counts["pass"] + counts["error"] + options.repeat - len(attempts) >= options.needed:
        status = "error"
    else:
        status = "review" if counts["review"] else "fail"
    shown = next((a for a in attempts if a.status == status), attempts[0])
    costs = [a.cost_usd for a in attempts if a.cost_usd is not None]
    usages = [a.usage for a in attempts if a.usage]
    usage = (
        {key: sum(u.get(key) or 0 for u in usages) for key in ("input_tokens", "output_tokens")}
        if usages
        else None
    )
    same = [a.checks for a in scored if len(a.checks) == len(shown.checks)]
    # Copies: check dicts are shared, read-only.
    checks = [
        dict(
            check,
            passes=sum(c[i]["passed"] is True for c in same),
            calls=sum(c[i]["passed"] is not None for c in same),
        )
        for i, check in enumerate(shown.checks)
    ]
    return shown._replace(
        status=status,
        usage=usage,
        cost_usd=sum(costs) if costs else None,
        attempts=[
            {
                "status": a.status,
                "output": a.output,
                "error": a.error,
                "latency_s": a.latency_s,
                "checks": [c for c in a.checks if c.get("passed") is False],
                **dict(a.parts(_CALL_PARTS)),
            }
            for a in attempts
        ],
        flaky=0 < counts["pass"] < len(scored),
        error=shown.error if status == "error" else None,
        traceback=shown.traceback if status == "error" else None,
        passes=counts["pass"],
        calls=len(scored),
        checks=checks,
    )


class _Job:
    """One case's calls: the results of its repeats so far, and its refusals in a row."""

    def __init__(self, index, case):
        self.index, self.case, self.results = index, case, []
        self.idle_refusals = 0  # refused in a row, with no answer of the run in between
        self.replies_seen = None  # the run's replies at its last refusal


def _refusal_wait(job, refused, options):
    """The seconds `job` waits before its refused call is made again, or None when it gives up:
    refused REFUSALS_WITHOUT_PROGRESS times in a row while no call of the run was answered, or
    the run's calls that many times each of its -j workers (then every later call is not made:
    options.refused says why)."""
    with options._counting:
        options.refusals += 1
        replies = options.replies
        if replies != options.replies_at_refusal:
            options.idle_refusals, options.replies_at_refusal = 0, replies
        options.idle_refusals += 1
        in_a_row = options.idle_refusals
    if replies != job.replies_seen:  # the run is making progress: this refusal is a wait
        job.idle_refusals, job.replies_seen = 0, replies
    job.idle_refusals += 1
    if in_a_row > REFUSALS_WITHOUT_PROGRESS * options.concurrency:
        options.refused = (
            f"the provider refused the run's last {in_a_row} calls, none answered in between: "
            f"is the provider down, or its limit too low for -j {options.concurrency}?"
        )
        return None
    if job.idle_refusals > REFUSALS_WITHOUT_PROGRESS:
        return None
    if refused.wait > 0:
        return refused.wait
    return min(REFUSAL_WAIT_MAX, REFUSAL_WAIT * 2 ** (job.idle_refusals - 1))


def _advance(job, call, options):
    """Make `job`'s calls not made yet: (the seconds to wait when one is refused, None), the job
    then put back, else (None, its _verdict) (a budget's refusal ends the calls early)."""
    while len(job.results) < options.repeat:
        try:
            result = _attempt(job.case, len(job.results), call, options)
        except _Refused as refused:
            wait = _refusal_wait(job, refused, options)
            if wait is not None:
                return wait, None
            result = CaseResult(
                job.case.id,
                "error",
                error=mask_secrets(_describe_error(refused.error))
                + f"; refused {job.idle_refusals - 1} times in a row while no call of the run "
                "was answered: is the provider down, or its limit too low for -j "
                f"{options.concurrency}?",
            )
        except BudgetExceeded as exc:
            job.results.append(CaseResult(job.case.id, "error", error=_describe_error(exc)))
            break
        job.results.append(result)
    return None, _verdict(job.results, options)


def run_case(case, call_model, options=None):
    """The CaseResult of `call_model(case.input)` (options.repeat times; see asking), scored; a
    raise (but KeyboardInterrupt or a refusal, called again after its wait), a timeout or a
    return that is no reply is an unscored error."""
    options = options or RunOptions()
    options.refused = None  # a run of one case: a key refused before is tried again
    stop = threading.Event()
    try:
        return next(_finished([case], asking(call_model), options, stop))[1]
    finally:
        stop.set()


def run_cases(cases, call_model, options=None, on_result=None):
    """Every case's CaseResult, in the order of `cases`; on_result(result) as each finishes.
    Raises Interrupted (the finished results, in order) on KeyboardInterrupt."""
    results = []
    try:
        results.extend(each_result(cases, call_model, options, on_result))
    except Interrupted as stop:
        raise Interrupted(results + stop.results) from None
    return results


def refuse_conversations(cases, call_model, name=None):
    """EvalsError, before any call, naming the first case (FILE:LINE, id) whose input is a
    conversation when `call_model` (named `name`) has no true `accepts_conversations`: a client
    written for a str would crash on a list, or send its repr."""
    if getattr(call_model, "accepts_conversations", False):
        return
    talks = [case for case in cases if not isinstance(case.input, str)]
    if talks:
        raise EvalsError(
            f"{talks[0].path}:{talks[0].line}: case {talks[0].id!r} has a conversation as its "
            f"input ({plural(len(talks), 'case')} in all), and the client "
            f"{name or callable_name(call_model)} does not take conversations; one that "
            'takes a list of {"role", "content"} messages says so with the attribute '
            "accepts_conversations = True (my_client's clients have it)"
        )


def each_result(cases, call_model, options=None, on_result=None):
    """Yield each case's CaseResult in the order of `cases` once it and all before it finished
    (only results done ahead of their turn are held); on_result as for run_cases. EvalsError
    before any call (refuse_conversations); Interrupted (results not yet yielded) on Ctrl-C."""
    refuse_conversations(cases, call_model)
    options = options or RunOptions()
    options._start()
    stop, waiting, turn = threading.Event(), {}, 0
    try:
        for index, result in _finished(cases, asking(call_model), options, stop):
            if on_result:
                on_result(result)
            waiting[index] = result
            while turn in waiting:
                yield waiting.pop(turn)
                turn += 1
    except KeyboardInterrupt:
        raise Interrupted([waiting[index] for index in sorted(waiting)]) from None
    finally:
        stop.set()  # the workers take no new case once the consumer stopped, for any reason
        _release_caller()  # the one this thread used, when the cases ran here


class _Schedule:
    """The cases of a run for its workers, thread-safe: a refused case whose wait is over, else
    the next case in case-file order; `stop` ends it."""

    def __init__(self, cases, stop):
        self.fresh, self.stop = enumerate(cases), stop
        self.waiting = []  # a heap of (monotonic time it is due, index, job): earlier cases first
        self.out = 0  # jobs taken, neither finished nor put back
        self.changed = threading.Condition()

    def take(self):
        """The next job, or None when none is left (or the run was stopped)."""
        with self.changed:
            while not self.stop.is_set():
                now = time.monotonic()
                if self.waiting and self.waiting[0][0] <= now:
                    self.out += 1
                    return heapq.heappop(self.waiting)[2]
                index, case = next(self.fresh, (None, None))
                if case is not None:
                    self.out += 1
                    return _Job(index, case)
                if not self.waiting and not self.out:
                    return None
                # Woken by a job put back; and every 0.2 s to see `stop` (Ctrl-C in this thread)
                due = self.waiting[0][0] - now if self.waiting else 0.2
                self.changed.wait(min(due, 0.2))
            return None

    def put_back(self, job, wait):
        """`job` is finished (`wait` None), or due again in `wait` seconds."""
        with self.changed:
            self.out -= 1
            if wait is not None:
                heapq.heappush(self.waiting, (time.monotonic() + wait, job.index, job))
            self.changed.notify_all()


def _finished(cases, call, options, stop):
    """Yield (index, CaseResult) as cases finish, in `options.concurrency` worker threads (one:
    this thread), each taking the next job of the _Schedule, until `stop`."""
    schedule = _Schedule(cases, stop)
    if options.concurrency <= 1:
        for job in iter(schedule.take, None):
            wait, result = _advance(job, call, options)
            schedule.put_back(job, wait)
            if result is not None:
                yield job.index, result
        return
    done = queue.SimpleQueue()

    def worker():
        for job in iter(schedule.take, None):
            try:
                wait, result = _advance(job, call, options)
            except BaseException as exc:  # noqa: B902 - never lose a case to a worker crash
                wait, result = None, CaseResult(job.case.id, "error", error=_describe_error(exc))
            schedule.put_back(job, wait)
            if result is not None:
                done.put((job.index, result))
        _release_caller()

    # Daemon threads: a hung provider call must not keep the process alive after Ctrl-C.
    for number in range(min(options.concurrency, len(cases))):
        threading.Thread(target=worker, name=f"evals-worker-{number}", daemon=True).start()
    received = 0
    while received < len(cases):
        with contextlib.suppress(queue.Empty):  # a blocking get can miss Ctrl-C (Windows)
            yield done.get(timeout=0.2)
            received += 1


# ---- recorded outputs: replay a run without calling any model ----


def load_outputs(path, repeat=1):
    """Recorded replies by case id (see _recorded; None for a case that errored), from a
    recordings JSONL file ({"id", "output"} rows) or a run record saved with outputs; with
    `repeat` > 1 a record's case maps to the tuple of its calls (None: errored), each replayed
    once. EvalsError names the file and line (or case) for anything else."""
    try:
        with open(path, encoding="utf-8-sig", errors="replace") as handle:
            head, record = handle.read(200).lstrip(), None
            if head.startswith("{") and '"format"' in head:  # a run record, not JSON Lines
                handle.seek(0)
                with contextlib.suppress(ValueError, RecursionError):  # read as lines below
                    record = json.load(handle)
        if not (isinstance(record, dict) and record.get("format") == RECORD_FORMAT):
            if repeat > 1:  # one output a case: N replays of it would count as N answers
                raise EvalsError(
                    f"{path}: recordings hold one output a case, so --repeat {repeat} "
                    f"would score each as {repeat} answers; drop --repeat"
                )
            return {row["id"]: reply for row, reply in recording_rows(path)}
    except OSError as exc:
        raise EvalsError(f"{path}: cannot read recorded outputs: {exc.strerror or exc}") from None
    if record.get("outputs_included") is False:
        raise EvalsError(f"{path}: saved with --omit-outputs, it holds no outputs to re-score")
    outputs = {}
    for entry in record.get("cases") or []:  # an errored case's output is None
        if not (
            isinstance(entry, dict)
            and isinstance(entry.get("id"), str)
            and (
                isinstance(entry.get("output"), str)
                or entry.get("status") == "error"
                and entry.get("output") is None
            )
        ):
            continue
        calls = entry.get("attempts") if isinstance(entry.get("attempts"), list) else []
        made = len(calls) if calls and all(isinstance(a, dict) for a in calls) else 1
        if repeat > made:  # replaying a call again would score it as a new answer
            if entry.get("change") == "not_run":
                continue  # a shard's carried entry: no call of this run to replay
            raise EvalsError(
                f"{path}: case {entry['id']!r} was called {plural(made, 'time')} "
                f"in that run, so --repeat {repeat} would score its recorded calls "
                f"again as new answers; re-score with --repeat {made} or fewer"
            )
        # each call as it was: the shown output alone would score 3/3 (or 0/3) for a 2/3 run
        rows = [entry, *(calls if repeat > 1 else ())]
        if made > 1:  # the entry's usage sums its calls': it is not the shown call's
            rows[0] = {key: value for key, value in entry.items() if key != "usage"}
        for number, row in enumerate(rows):
            try:
                rows[number] = None if row.get("output") is None else _recorded(row)
            except ValueError as exc:
                call = f", call {number}" if number else ""
                raise EvalsError(f"{path}: case {entry['id']!r}{call}: {exc}") from None
        outputs[entry["id"]] = tuple(rows[1:]) if repeat > 1 else rows[0]
    return outputs


def stored_output(text, tool_calls=(), finish_reason=None):
    """A reply as recordings store it: its text when that is all the client reported, else
    {"text", "finish_reason", "tool_calls"}; my_client's reply_dict keeps the same rule, so
    that either's recordings replay through both."""
    if not tool_calls and finish_reason is None:
        return text
    stored = {"text": text, "finish_reason": finish_reason}
    if tool_calls:
        stored["tool_calls"] = [
            {"name": c["name"], "arguments": c["arguments"]} for c in tool_calls
        ]
    return stored


def _recorded(row):
    """The reply a recordings row or a run record's entry (or call) holds: its "output" (a str)
    alone, else a dict of the reply shape: tool calls and finish reason (inside the output, or
    beside a str), and beside it the reasoning, model, usage and latency_s the row kept.
    ValueError says what is wrong."""
    output = row.get("output")
    whole = output if isinstance(output, dict) else row
    unknown = [key for key in whole if key not in ("text", "tool_calls", "finish_reason")]
    if whole is output and unknown:
        raise ValueError(
            f"'output' has an unknown key {unknown[0]!r} (a whole reply has text, "
            "tool_calls and finish_reason)"
        )
    text = output.get("text") if whole is output else output
    if not isinstance(text, str):
        raise ValueError(
            '\'output\' must be a string or a whole reply {"text", "tool_calls", "finish_reason"}'
        )
    problem = _reply_problem(whole) or _figures_problem(row)
    if problem:
        raise ValueError(problem)
    reply = {
        "text": text,
        "tool_calls": whole.get("tool_calls") or None,
        "finish_reason": whole.get("finish_reason"),
        **{key: row[key] for key in ("reasoning", "model") if isinstance(row.get(key), str)},
        "usage": row.get("usage"),
        "latency_s": _latency_of(row),
    }
    reply = {key: value for key, value in reply.items() if value is not None}
    return text if len(reply) == 1 else reply


def _latency_of(row):
    """The seconds the call that made a recordings row's or a record entry's (or call's) output
    took: its `latency_s`, else (a reply no call made in that run) its `kept_latency_s`."""
    latency = row.get("latency_s")
    if latency is None:
        return row.get("kept_latency_s")
    return latency


def _figures_problem(row):
    """What is wrong with the usage or latency a recordings row or a record's entry kept with
    its reply (each may be absent or null), or None."""
    usage = row.get("usage")
    if usage is not None and not (isinstance(usage, dict) and _whole_usage(usage)):
        return "'usage' must hold whole numbers of input_tokens and output_tokens, or be null"
    for key in ("latency_s", "kept_latency_s"):
        if row.get(key) is not None and _seconds(row[key]) is None:
            return f"{key!r} must be a number of seconds (0 or more), or null"
    return None


def recording_rows(path):
    """Yield (row, its reply: see _recorded) per recordings row; EvalsError names FILE:LINE."""
    with open(path, "rb") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:  # only the first line can begin with a byte order mark
                row = json.loads(line.decode("utf-8-sig" if number == 1 else "utf-8"))
            except (ValueError, RecursionError) as exc:  # not UTF-8, nested too deeply
                raise EvalsError(f"{path}:{number}: invalid JSON: {exc}") from None
            if not (
                isinstance(row, dict)
                and isinstance(row.get("id"), str)
                and isinstance(row.get("output"), (str, dict))
            ):
                raise EvalsError(
                    f'{path}:{number}: expected {{"id": str, "output": str or a whole reply}}'
                )
            try:
                reply = _recorded(row)
            except ValueError as exc:
                raise EvalsError(f"{path}:{number}: {exc}") from None
            yield row, reply


def replay_client(outputs, source="recorded outputs", hint=""):
    """A call_model that answers each case (by its id) with its recorded output; a missing one
    is an error, its message ending with `hint`."""

    def replay(prompt, *, case=None, attempt=0):
        if case is None or case.id not in outputs:
            name = case.id if case else "?"
            raise LookupError(f"no recorded output for case {name!r} in {source}{hint}")
        output = outputs[case.id]
        if output is None:
            raise LookupError(f"case {case.id!r} errored in {source}: no output to re-score")
        if isinstance(output, tuple):  # a repeated run's calls, each once (load_outputs)
            output = output[attempt]
            if output is None:
                raise LookupError(f"call {attempt + 1} of case {case.id!r} errored in {source}")
        return output

    replay.model = "replay"  # recorded answers: neither timed nor priced
    replay.accepts_conversations = True  # answers by case id, whatever the input
    return replay


# ---- the offline default: my_client with no provider configured is replayed, not called ----


def unconfigured_my_client(spec, function, *variables):
    """Whether `spec` names my_client's `function` ("my_client:ask", "../my_client.py:ask") and
    the first provider `variables` set is unset, empty or "replay": nothing to call, replay."""
    module, _, name = spec.rpartition(":")
    if name != function or os.path.basename(module) not in ("my_client", "my_client.py"):
        return False
    provider = next((os.environ[v] for v in variables if os.environ.get(v, "").strip()), "")
    return provider.strip().lower() in ("", "replay")


def _offline_client(repeat, stderr):
    """(replay_client of EVALS_RECORDINGS (default recordings.jsonl), its name), said once on
    `stderr`; ClientError when there is no such file."""
    path = os.environ.get("EVALS_RECORDINGS") or "recordings.jsonl"
    why = "EVALS_PROVIDER is not set"
    if os.environ.get("EVALS_PROVIDER", "").strip():
        why = "EVALS_PROVIDER=replay"
    if not os.path.isfile(path):
        raise ClientError(
            f"no client to call: pass --client MODULE:FUNCTION (or set "
            "EVALS_CLIENT) for your own, or set EVALS_PROVIDER (openai, anthropic, "
            f"gemini, ollama) for my_client.py's; {why} and there is no recordings "
            f"file {path} to replay (--record FILE records a run's outputs, "
            "EVALS_RECORDINGS=FILE replays them)"
        )
    outputs = load_outputs(path, repeat)
    stderr.write(
        f"evals: {why}: replaying recorded outputs from {path}, no model is called "
        "(set EVALS_PROVIDER or --client to call one)\n"
    )
    return replay_client(
        outputs,
        path,
        " (record one from a model: set EVALS_PROVIDER, then "
        f"run python evals.py --record {path})",
    ), f"replay:{path}"


def latency_percentiles(latencies):
    """{"p50", "p90", "p99", "max"} of `latencies` (seconds; None entries ignored), nearest-rank
    percentiles; {} when there are none."""
    values = sorted(v for v in latencies if v is not None)
    if not values:
        return {}
    return {
        name: values[max(0, math.ceil(q * len(values)) - 1)]
        for name, q in (("p50", 0.50), ("p90", 0.90), ("p99", 0.99), ("max", 1.0))
    }


# ---------------------------------------------------------------------------------------------
# Outcomes and the baseline: one decision per case, one record, the history
# ---------------------------------------------------------------------------------------------


# ---- statistics: exact tests on k passes of n calls, standard library only ----

# The significance level of `repeat_change`, the conventional 0.05: for ONE repeated case whose
# true pass rate did not change, a run reports "regressed" with a chance of at most 5% (Fisher's
# exact test keeps within alpha; with few calls, well below). Per case and per run, uncorrected
# for many cases: 100 stable repeated cases can expect up to about 5 false "regressed" a run. A
# smaller alpha: fewer false alarms, and more calls needed to show a real drop.
DEFAULT_ALPHA = 0.05
REPEAT_CHANGES = ("regressed", "lower_not_significant", "too_few_calls", "not_lower")
RepeatChange = collections.namedtuple("RepeatChange", "change p_value")


def validate_counts(k, n, what):
    """ValueError (its message starting with `what`) unless `k` passes of `n` calls are whole
    numbers with 0 <= k <= n."""
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (k, n)):
        raise ValueError(f"{what}: counts must be integers, got {k!r} of {n!r}")
    if not 0 <= k <= n:
        raise ValueError(f"{what}: need 0 <= passes <= calls, got {k} of {n}")


def validate_level(value, name):
    """ValueError (naming `name`) unless `value` is a number strictly between 0 and 1."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 1:
        raise ValueError(f"{name} must be a number between 0 and 1 (exclusive), got {value!r}")


def fisher_one_sided(k_before, n_before, k_now, n_now):
    """One-sided p-value of Fisher's exact test that the pass rate is LOWER now than before:
    the hypergeometric upper tail, as SciPy's fisher_exact([[k_before, n_before - k_before],
    [k_now, n_now - k_now]], "greater"), in integers divided once. ValueError: bad counts."""
    validate_counts(k_before, n_before, "baseline")
    validate_counts(k_now, n_now, "now")
    passes, calls = k_before + k_now, n_before + n_now
    tail = sum(
        math.comb(passes, x) * math.comb(calls - passes, n_before - x)
        for x in range(k_before, min(passes, n_before) + 1)
    )
    return tail / math.comb(calls, n_before)


def min_detectable(n_before, n_now, alpha=DEFAULT_ALPHA):
    """Whether the largest drop (all passing, then all failing) would be significant at alpha."""
    validate_level(alpha, "alpha")
    return fisher_one_sided(n_before, n_before, 0, n_now) <= alpha


def repeat_change(k_before, n_before, k_now, n_now, alpha=DEFAULT_ALPHA):
    """How a repeated case's pass rate changed: RepeatChange(change, fisher_one_sided's p), the
    change "not_lower" (or a run has no calls), "too_few_calls" (no drop could be significant),
    "regressed" (p <= alpha) or "lower_not_significant"."""
    p = fisher_one_sided(k_before, n_before, k_now, n_now)
    validate_level(alpha, "alpha")
    if not (n_before and n_now and k_now * n_before < k_before * n_now):
        return RepeatChange("not_lower", p)
    if not min_detectable(n_before, n_now, alpha):
        return RepeatChange("too_few_calls", p)
    if p <= alpha:
        return RepeatChange("regressed", p)
    return RepeatChange("lower_not_significant", p)


# The counts a repeated case's new verdict keeps pool the baseline's with this run's, up to
# this many runs' worth of calls (the current run's number); beyond it they are scaled down.
POOLED_RUNS = 5
STATUSES = ("pass", "fail", "review", "error")
CHANGES = (
    "regressed",
    "fixed",
    "still_failing",
    "passing",
    "new",
    "errored",
    "not_run",
    "lower_not_significant",
)


def _pooled(kept_counts, counts):
    """The (passes, calls) a repeated case's new verdict keeps: its baseline's and this run's
    together, at most POOLED_RUNS of this run's calls (beyond, scaled down, rounded half up):
    the run that changed a verdict is the one that crossed it, so its counts alone lean to it."""
    passes, calls = kept_counts[0] + counts[0], kept_counts[1] + counts[1]
    most = POOLED_RUNS * counts[1]
    if calls <= most:
        return passes, calls
    return (2 * passes * most + calls) // (2 * calls), most


class Decision(collections.namedtuple("Decision", "change baseline")):
    """What `decide` says: (change, the status the baseline keeps), with `counts`, the (passes,
    calls) the baseline keeps (None: one call), and `rate`, the entry's "rate_test" or None."""

    def __new__(cls, change, baseline, counts=None, rate=None):
        decision = super().__new__(cls, change, baseline)
        decision.counts, decision.rate = counts, rate
        return decision

    counts = rate = None  # what _make, which skips __new__, leaves

    def _replace(self, **fields):  # keeps the attributes
        return Decision(*super()._replace(**fields), self.counts, self.rate)


def decide(status, before, accept=False, counts=None, alpha=DEFAULT_ALPHA):
    """The one rule for a case's change against the baseline (docs/outcomes.md): a Decision.
    before: its baseline entry or None; counts: (passes, calls) of a repeated case now, or None.
    Both with more than one call: `repeat_change` at `alpha` decides; otherwise the statuses."""
    before = before or {}
    kept = before.get("baseline")
    passes, calls = before.get("baseline_passes"), before.get("baseline_calls")
    kept_counts = None  # the baseline's (passes, calls) of a repeated case
    if type(passes) is int and type(calls) is int:
        kept_counts = (passes, calls)
    if status == "error":  # nothing scored: the baseline keeps its verdict and counts
        return Decision("errored", kept, kept_counts)
    if kept is None:  # not in the baseline: this run's verdict is its first
        return Decision("new", status, counts)
    following, rate = counts, None
    if counts and kept_counts and counts[1] > 1 and kept_counts[1] > 1:
        # A lower rate keeps the baseline's verdict until --accept. The counts change with the
        # verdict only (docs/outcomes.md), so a run that changes no verdict changes no byte of
        # the baseline: this run's with --accept, both pooled when the verdict changes, else
        # the baseline's, a sample no later run was chosen by (keeping a run's counts whenever
        # it came out higher would keep the luckiest run's: a stable case would then falsely
        # regress in a quarter of its runs at alpha 0.05).
        test = repeat_change(*kept_counts, *counts, alpha)
        rate = {
            "before": list(kept_counts),
            "result": test.change,
            "p_value": test.p_value,
            "alpha": alpha,
        }
        verdict, following = kept, kept_counts
        if accept:
            verdict, following = status, counts
        elif test.change == "not_lower" and status != kept:  # a new verdict: see _pooled
            following = _pooled(kept_counts, counts)
        if test.change == "regressed":  # significantly lower
            return Decision("regressed", verdict, following, rate)
        if test.change != "not_lower":  # lower, not significantly or with too few calls to tell
            return Decision("lower_not_significant", verdict, following, rate)
    elif status != "pass" and kept == "pass" and accept:
        return Decision("regressed", status, counts)
    elif status != "pass" and kept == "pass":  # the baseline keeps its pass until --accept
        return Decision("regressed", "pass", kept_counts)
    if status != "pass":  # a repeated case too when its rate is not lower (a stricter --min-pass)
        return Decision("still_failing", status, following, rate)
    # "scored": the last scored status, which an errored run keeps from the one before it
    passed_last = before.get("scored", before.get("status")) not in ("fail", "review")
    if kept == "pass" and passed_last:
        return Decision("passing", status, following, rate)
    # passing now after a fail: in the baseline, or in the last scored run
    return Decision("fixed", status, following, rate)


class Baseline(
    collections.namedtuple(
        "Baseline", "entries stamp case_file case_file_sha256", defaults=(None, None, None)
    )
):
    """A previous run: `entries` {case id: entry}, its file's _stamp (None: no file), the path
    and sha256 of the case file it ran."""

    def get(self, case_id):
        return self.entries.get(case_id)


# ---- reading records ----

# An entry's optional fields: null, or a value that passes the test.
_ENTRY_FIELDS = (
    ("latency_s", is_json_number, "must be a number or null"),
    ("cost_usd", is_json_number, "must be a number or null"),
    (
        "usage",
        lambda v: (
            isinstance(v, dict)
            and all(type(v.get(k, 0)) is int for k in ("input_tokens", "output_tokens"))
        ),
        "must hold whole numbers of input and output tokens",
    ),
    ("sent", lambda v: isinstance(v, dict), "must be an object or null"),
    ("kept_latency_s", is_json_number, "must be a number or null"),
    ("reasoning", lambda v: isinstance(v, str), "must be a string or null"),
    ("error", lambda v: isinstance(v, str), "must be a string or null"),
    ("traceback", lambda v: isinstance(v, str), "must be a string or null"),
)


def _entry_problem(entry):
    if entry.get("status") not in STATUSES:
        return f"'status' must be one of {', '.join(STATUSES)}"
    if "baseline" not in entry or entry["baseline"] not in STATUSES + (None,):
        return f"'baseline' must be one of {', '.join(STATUSES)} or null"
    if entry.get("change", "new") not in CHANGES:
        return f"'change' must be one of {', '.join(CHANGES)}"
    for key, valid, message in _ENTRY_FIELDS:
        if entry.get(key) is not None and not valid(entry[key]):
            return f"{key!r} {message}"
    for prefix in ("", "baseline_"):
        passes, calls = entry.get(prefix + "passes"), entry.get(prefix + "calls")
        if (passes, calls) != (None, None) and not (
            type(passes) is int and type(calls) is int and 0 <= passes <= calls
        ):
            return (
                f"{prefix + 'passes'!r} and {prefix + 'calls'!r} must be whole numbers with "
                "0 <= passes <= calls"
            )
    earned = "baseline_tool_calls" in entry and _tool_calls_problem(entry["baseline_tool_calls"])
    return _reply_problem(entry) or earned and f"'baseline_tool_calls': {earned}" or None


def record_problem(record):
    """What is wrong with a run record (dict) read from a file: a message, or None."""
    if not (isinstance(record, dict) and record.get("format") == RECORD_FORMAT):
        return "not an evals run record"
    if record.get("version") != RECORD_VERSION:
        return (
            f"run record version {record.get('version')!r} is not supported "
            f"(this is evals {__version__})"
        )
    for key in ("summary", "case_file"):
        if not isinstance(record.get(key, {}), dict):
            return f"{key!r} must be an object"
    if not isinstance(record.get("cases"), list):
        return "'cases' must be a list"
    ids = set()
    for number, entry in enumerate(record["cases"], 1):
        if not (isinstance(entry, dict) and isinstance(entry.get("id"), str)):
            return f"entry {number} of 'cases' needs a string 'id'"
        if entry["id"] in ids:
            return f"case {entry['id']!r}: listed twice"
        ids.add(entry["id"])
        problem = _entry_problem(entry)
        if problem:
            return f"case {entry['id']!r}: {problem}"
    if not is_string_list(record.get("removed", []), allow_empty=True):
        return "'removed' must be a list of case ids"
    return None


def _stamp(file):
    """(device, inode, size, mtime ns) of a path or descriptor, None if absent: writes change it."""
    try:
        info = os.stat(file)
    except FileNotFoundError:
        return None
    return info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns


def load_baseline(path):
    """A Baseline read from `path` (no entries when the file is absent): this tool's record or
    the original harness's {"rate", "results": {id: bool}, "ts"}. Raises BaselineError for a
    file that exists but is neither, so it is never silently replaced."""
    try:
        with open(path, encoding="utf-8-sig") as handle:
            stamp = _stamp(handle.fileno())
            record = json.load(handle)
    except FileNotFoundError:
        return Baseline({})
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError too; nested too deeply
        raise BaselineError(
            f"{path}: the baseline is not valid JSON ({exc}); fix or remove it, "
            "it is not overwritten"
        ) from None
    except OSError as exc:
        raise BaselineError(f"{path}: cannot read the baseline: {exc.strerror or exc}") from None
    if isinstance(record, dict) and record.get("format") == RECORD_FORMAT:
        problem = record_problem(record)
        if problem:
            raise BaselineError(f"{path}: {problem}; fix or remove it, it is not overwritten")
        case_file = record.get("case_file") or {}
        return Baseline(
            {entry["id"]: entry for entry in record["cases"]},
            stamp,
            case_file.get("path"),
            case_file.get("sha256"),
        )
    if not (isinstance(record, dict) and isinstance(record.get("results"), dict)):
        raise BaselineError(
            f"{path}: not a run record (expected this tool's record or "
            '{"rate", "results", "ts"}); it is not overwritten'
        )
    entries = {}
    for case_id, passed in record["results"].items():
        if not isinstance(passed, bool):
            raise BaselineError(f"{path}: results[{case_id!r}] must be true or false")
        status = "pass" if passed else "fail"
        entries[case_id] = {"id": case_id, "status": status, "baseline": status}
    return Baseline(entries, stamp)


# ---- making records ----


def _git_commit(directory):
    import subprocess

    try:
        return subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=directory,
            timeout=5,
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):  # no git, or not a checkout
        return None


RunResult = collections.namedtuple(
    "RunResult",
    "results started_at finished_at client case_file case_file_sha256",
    defaults=("", ""),
)
RunResult.__doc__ = """A finished run: CaseResults in case-file order, start and finish times
(ISO 8601), the client's name, the case file and its sha256."""


# A CaseResult's parts an entry holds, in order, when set (CaseResult.parts).
_ENTRY_PARTS = (
    "error",
    "traceback",
    "usage",
    "model",
    "sent",
    "cost_usd",
    "kept_latency_s",
    "attempts",
    "flaky",
    "output",
    "tool_calls",
    "finish_reason",
    "reasoning",
)


def _entry(result, before, case, accept, alpha):
    """The record entry of one case run (dict), its change decided by `decide`."""
    calls = None  # (passes, calls) of a repeated case
    if result.calls is not None:
        calls = (result.passes, result.calls)
    change, kept = decision = decide(result.status, before, accept, calls, alpha)
    before = before or {}
    entry = {"id": result.id, "status": result.status, "baseline": kept, "change": change}
    scored = before.get("scored", before.get("status"))
    if result.status == "error" and scored:  # a pass after it is a fix if the run before failed
        entry["scored"] = scored
    if case is not None:
        entry.update(input=case.input, description=case.description, tags=case.tags)
    entry.update(latency_s=result.latency_s, checks=result.checks)
    entry.update(result.parts(_ENTRY_PARTS))
    entry.update(zip(("passes", "calls"), calls or ()))  # a repeated case
    entry.update(zip(("baseline_passes", "baseline_calls"), decision.counts or ()))
    if decision.rate is not None:
        entry["rate_test"] = decision.rate
    if kept not in (None, result.status):  # the baseline outlives this run: keep the output
        # (and tool calls) that earned it, for a later report to show beside the new one
        if "baseline_output" in before:  # kept from an earlier run
            earner = before
        elif before.get("status") == kept:  # the run before earned it
            earner = {
                "baseline_output": before.get("output"),
                "baseline_tool_calls": before.get("tool_calls"),
            }
        else:
            earner = {}
        entry.update(
            (key, earner[key])
            for key in ("baseline_output", "baseline_tool_calls")
            if earner.get(key) is not None
        )
    return entry


def make_record(
    run,
    baseline,
    cases=None,
    accept=False,
    shown=None,
    all_case_ids=None,
    options=None,
    entries=None,
    alpha=DEFAULT_ALPHA,
    outputs_included=True,
):
    """The run record (a JSON-ready dict) of a RunResult (its results read once) against a
    Baseline, its entries appended to `entries` (a _Spool: on disk). Baseline entries of cases in
    the case file (`all_case_ids`, default: those run) not run now are "not_run", others removed.
    `shown(entry)`: the entry as the record keeps it (None: as it is); `outputs_included`:
    whether the entries so kept hold the model's outputs (False with --omit-outputs)."""
    if entries is None:
        entries = []
    by_id, ran = {case.id: case for case in cases or ()}, set()
    if shown is None:

        def shown(entry):
            return entry

    def run_entries():  # each stored as its case finishes, and summed: a spool holds none
        for result in run.results:
            entry = shown(
                _entry(result, baseline.get(result.id), by_id.get(result.id), accept, alpha)
            )
            entries.append(entry)
            ran.add(result.id)
            yield entry

    summary = summarize(run_entries())  # the baseline's figures below, once `ran` is known
    known = ran
    if all_case_ids is not None:
        known = set(all_case_ids)
    for case_id, before in baseline.entries.items():
        if case_id in known and case_id not in ran:
            entries.append(dict(shown(before), change="not_run"))
    removed = [case_id for case_id in baseline.entries if case_id not in known]
    # The baseline over the cases run now (a filtered or sharded run is compared like with
    # like): its last run's verdicts, and the verdicts it keeps (a regression keeps "pass").
    before = [entry for case_id, entry in baseline.entries.items() if case_id in ran]
    previous = (sum(e.get("status") == "pass" for e in before), len(before))
    kept = (sum(e.get("baseline") == "pass" for e in before), len(before))
    summary.update(_against(previous, kept), removed=len(removed))
    options = options or RunOptions()
    return {
        "format": RECORD_FORMAT,
        "version": RECORD_VERSION,
        "harness_version": __version__,
        "started_at": run.started_at,
        "finished_at": run.finished_at or utc_now(),
        "python": "%d.%d.%d" % sys.version_info[:3],
        "client": run.client,
        "git_commit": _git_commit(os.path.dirname(os.path.abspath(run.case_file or "."))),
        "case_file": {"path": run.case_file, "sha256": run.case_file_sha256},
        "outputs_included": outputs_included,
        "accepted": accept,
        "options": {
            "concurrency": options.concurrency,
            "timeout_s": options.timeout,
            "repeat": options.repeat,
            "min_pass": options.needed,
            "alpha": alpha,
        },
        "summary": summary,
        "removed": removed,
        "cases": entries,
    }


def _against(previous, kept):
    """The baseline's figures over the cases run: (passed, total) in its last run, and kept."""
    figures = {}
    for name, (passed, of) in (("previous", previous), ("baseline", kept)):
        rate = None  # no case run: no rate
        if of:
            rate = passed / of
        figures.update({f"{name}_pass_rate": rate, f"{name}_passed": passed, f"{name}_total": of})
    return figures


def summarize(entries, removed=(), previous=(0, 0), kept=(0, 0)):
    """The summary (dict) of a record's entries (any iterable, read once), those not run left
    out; `previous` and `kept`: see _against. Errors count as not passed."""
    status, change = collections.Counter(), collections.Counter()
    latencies, flaky, tokens, cost = [], [], None, None
    for entry in entries:
        if entry.get("change") == "not_run":
            continue
        outcome, latency = entry.get("status"), entry.get("latency_s")
        status[outcome] += 1
        change[entry.get("change")] += 1
        # None for a replay: not held, 1,000,000 of them
        if latency is not None and outcome != "error" and entry.get("model") != "replay":
            latencies.append(latency)
        if entry.get("flaky"):
            flaky.append({key: entry.get(key) for key in ("id", "passes", "calls")})
        if isinstance(entry.get("usage"), dict):
            tokens = [
                a + (entry["usage"].get(f"{side}_tokens") or 0)
                for a, side in zip(tokens or (0, 0), ("input", "output"))
            ]
        if isinstance(entry.get("cost_usd"), (int, float)):
            cost = (cost or 0) + entry["cost_usd"]
    total = sum(status.values())
    pass_rate = None
    if total:
        pass_rate = status["pass"] / total
    if tokens is not None:
        tokens = dict(zip(("input", "output"), tokens))
    if cost is not None:
        cost = round(cost, 6)
    return {
        "total": total,
        "passed": status["pass"],
        "failed": status["fail"],
        "review": status["review"],
        "errored": status["error"],
        "pass_rate": pass_rate,
        **_against(previous, kept),
        **{name: change[name] for name in CHANGES if name not in ("errored", "not_run")},
        "removed": len(removed),
        "flaky": flaky,
        "latency_s": latency_percentiles(latencies),
        "tokens": tokens,
        "cost_usd": cost,
    }


def completed(record):
    """`record` with each entry's change and the summary filled in where an older or hand-made
    record lacks them, entries without a string id left out (a spooled record as it is)."""
    if isinstance(record.get("cases"), _Spool) and isinstance(record.get("summary"), dict):
        return record
    cases = []
    for e in record.get("cases") or ():
        if not (isinstance(e, dict) and isinstance(e.get("id"), str)):
            continue
        if not isinstance(e.get("change"), str):
            e = dict(e, change=decide(e.get("status"), {"baseline": e.get("baseline")})[0])
        cases.append(e)
    summary = record.get("summary")
    if not isinstance(summary, dict) or "total" not in summary:
        summary = summarize(cases, record.get("removed") or ())
    return dict(record, cases=cases, summary=summary)


# ---- writing records ----


def _scored(entry):
    """The last status an entry scored: its own, or for an errored run the one before's."""
    if entry.get("status") == "error":
        return entry.get("scored")
    return entry.get("status")


def verdicts_kept(record, baseline):
    """Whether `record` keeps every verdict of `baseline` (a Baseline read from a file): the
    same case file and cases, each with the same last scored status, baseline verdict and
    counts, and no output kept that this run omits. Such a run leaves the baseline file byte
    for byte as it was (docs/outcomes.md):
    times, latencies and outputs change on every run, and would teach a team to ignore the
    file's diff; an errored case scored nothing, so it changes nothing either."""
    if baseline.stamp is None or record["removed"]:
        return False
    if record["case_file"]["sha256"] != baseline.case_file_sha256:
        return False
    seen = 0
    for entry in record["cases"]:
        before = baseline.get(entry["id"])
        if before is None or _scored(entry) != _scored(before):
            return False
        if "output" in before and not record["outputs_included"]:  # --omit-outputs: scrub it
            return False
        for key in ("baseline", "baseline_passes", "baseline_calls"):
            if entry.get(key) != before.get(key):
                return False
        seen += 1
    return seen == len(baseline.entries)


class _Spool:
    """Record entries in an unnamed temporary file, not in memory: re-scoring 100,000 cases
    peaks within 2x of a minimal loop's memory (30,000: 92 MB held, 59 MB spooled). append()
    as cases finish; iterate: new dicts; lines(): their JSON text; where(keep): some of them."""

    def __init__(self):
        import tempfile

        # A 64 KB buffer: 8 KB would cost 1.5 us a case more.
        self._file = tempfile.TemporaryFile(buffering=1 << 16)
        self._kinds = []  # (change, status) of each entry, for where(); equal ones share...
        self._kind = {}  # ...one tuple: 8 bytes an entry

    def __del__(self):  # closed, not left to the collector with a ResourceWarning
        self._file.close()

    def append(self, entry):
        kind = (entry.get("change"), entry.get("status"))
        self._kinds.append(self._kind.setdefault(kind, kind))
        self._file.write(json_line_bytes(entry))

    def _encoded(self):
        self._file.flush()
        self._file.seek(0)
        return iter(self._file)  # UTF-8 lines, each ending with "\n"

    def lines(self):
        return (line[:-1].decode("utf-8") for line in self._encoded())

    def __iter__(self):
        return map(json.loads, self.lines())

    def where(self, keep):
        """The entries (new dicts) whose change and status keep(change, status) accepts, the
        others neither decoded nor parsed: the summary of 100,000 re-scored cases takes 0.04 s
        with -q, not 0.57 s (0.40 s, not 0.89 s, listing the 22,695 that fail)."""
        kept = (line for line, kind in zip(self._encoded(), self._kinds) if keep(*kind))
        return map(json.loads, kept)  # json.loads reads UTF-8 bytes


def _entries_where(cases, keep):
    """The entries of a record's `cases` (a list, or a _Spool) whose change and status
    keep(change, status) accepts."""
    if isinstance(cases, _Spool):
        return cases.where(keep)
    return (entry for entry in cases if keep(entry.get("change"), entry.get("status")))


def record_chunks(record):
    """A run record as JSON text in str pieces, a header key or a case a line: a baseline
    diffs well in git, and a large one is written without one huge string."""
    yield "{\n"
    for key, value in record.items():
        if key != "cases":
            yield f" {to_json(key)}: {to_json(value)},\n"
    yield ' "cases": ['
    cases = record.get("cases", [])
    if isinstance(cases, _Spool):
        texts = cases.lines()
    else:
        texts = map(to_json, cases)
    separator = "\n"
    for text in texts:
        yield separator + text
        separator = ",\n"
    yield "\n ]\n}\n"


def write_record(path, record):
    """Write a run record to `path` atomically, laid out by record_chunks."""
    write_atomic(path, record_chunks(record))


# ---------------------------------------------------------------------------------------------
# Reports
# ---------------------------------------------------------------------------------------------


def as_percent(rate):
    """A rate (0..1) as "95.0%", None as "n/a"."""
    if rate is None:
        return "n/a"
    return f"{rate * 100:.1f}%"


def report_reasons(entry, limit=1000):
    """case_reasons of a record entry (dict), each cut to `limit` characters for the reports
    (the record keeps them whole)."""
    reasons = case_reasons(
        entry.get("status"), shown_text(entry.get("error")), entry.get("checks")
    )
    for index, r in enumerate(reasons):
        if len(r) > limit:
            reasons[index] = f"{r[:limit]}... ({len(r) - limit:,} more characters)"
    return reasons


def reply_lines(entry, limit=None):
    """What a reply did besides its text, shown below it: "-> name({...})" per tool call
    (arguments cut to `limit` characters), "[finish_reason: X]" if it did not end by itself."""
    calls = entry.get("tool_calls")
    if not isinstance(calls, list):
        calls = []
    lines = [f"-> {tool_call_text(call, limit)}" for call in calls if isinstance(call, dict)]
    ended = entry.get("finish_reason")
    usual = (None, "stop")
    if lines:  # a reply that called tools may end with them
        usual += ("tool_calls",)
    if ended not in usual:
        lines.append(f"[finish_reason: {ended}]")
    return lines


def earlier_rates(summary):
    """ ", last run R1%" and, where they differ (a regression not accepted), ", baseline R2%"."""
    last, kept = summary.get("previous_pass_rate"), summary.get("baseline_pass_rate")
    text = ""
    if last is not None:
        text = f", last run {as_percent(last)}"
    if kept not in (None, last):
        text += f", baseline {as_percent(kept)}"
    return text


def rate_change_text(entry):
    """A repeated case's pass rate (str): "3/3 -> 1/3 calls passed" and its test against the
    baseline, "1/3 calls passed" when there was none, "" for a case called once."""
    passes, calls, test = entry.get("passes"), entry.get("calls"), entry.get("rate_test")
    if type(calls) is not int or calls < 2:
        return ""
    if not isinstance(test, dict):
        test = {}
    before = test.get("before")
    if not (isinstance(before, list) and len(before) == 2):
        return f"{passes}/{calls} calls passed"
    alpha, result, p_value = test.get("alpha"), test.get("result"), test.get("p_value")
    p, at = "p = ?", "alpha ?"
    if is_json_number(p_value):
        p = f"p = {p_value:.3g}"
    if is_json_number(alpha):
        at = f"alpha {alpha:g}"
    why = {
        "regressed": f"{p}, a significant drop at {at}",
        "lower_not_significant": f"{p}, lower, not significant at {at}",
        "too_few_calls": f"{p}; too few calls for any drop to be significant at {at}",
        "not_lower": "not lower",
    }.get(result, p)
    if result == "too_few_calls" and is_json_number(alpha) and 0 < alpha < 1:
        needed = next((n for n in range(1, 10_000) if min_detectable(n, n, alpha)), 10_000)
        why += f": {needed} calls in each run can show one"
    return f"{before[0]}/{before[1]} -> {passes}/{calls} calls passed ({why})"


def flaky_items(summary):
    """(its id and the rate the verdict rests on, why) for each flaky case of a summary."""
    for key, why in (
        ("flaky", "calls disagreed in this run"),
        ("flaky_history", "both outcomes in recent runs"),
    ):
        items = summary.get(key)
        if not isinstance(items, list):
            continue
        for item in items:
            if not isinstance(item, dict):
                item = {"id": item}
            passes, calls, runs = item.get("passes"), item.get("calls"), item.get("runs")
            rate = ""
            if calls is not None:
                rate = f" ({passes}/{calls} calls passed)"
            elif runs is not None:
                rate = f" ({passes}/{runs} runs passed)"
            yield shown_id(item.get("id")) + rate, why


def below_min_pass_rate(summary):
    """Whether the run's pass rate is below its --min-pass-rate (the summary's min_pass_rate):
    the one rule the exit code and every report's headline follow."""
    floor, rate = summary.get("min_pass_rate"), summary.get("pass_rate")
    return is_json_number(floor) and is_json_number(rate) and rate < floor


def gate_percents(rate, floor):
    """A rate and the floor it is compared with (0..1 each) as percents (str, str): the one
    rule for every line that shows a rate next to a gate. The floor with as many decimals as
    it has (at least one: "90.0%", "97.25%"); the rate with one decimal, or as many more as
    put the printed rate on the same side of the printed floor as the rate itself, so a rate
    below the floor is never printed equal to it (1999/2000 against 1.0: "99.95%", "100.0%")."""
    shown_floor = _floor_percent(floor)
    for digits in range(1, 16):
        shown_rate = f"{rate * 100:.{digits}f}%"
        if (float(shown_rate[:-1]) < float(shown_floor[:-1])) == (rate < floor):
            break
    return shown_rate, shown_floor


def _floor_percent(floor):
    """A floor (0..1) as a percent with as many decimals as it has, at least one: 0.9 is
    "90.0%", 0.9725 "97.25%" (not 97.3%, a floor it is not)."""
    for digits in range(1, 12):
        shown = f"{floor * 100:.{digits}f}"
        if abs(float(shown) - floor * 100) < 1e-9:
            break
    return f"{shown}%"


def pass_rate_percent(summary):
    """The summary's pass rate as every report prints it: as_percent, with gate_percents'
    digits where the summary has a --min-pass-rate to compare it with."""
    floor, rate = summary.get("min_pass_rate"), summary.get("pass_rate")
    if is_json_number(floor) and is_json_number(rate):
        return gate_percents(rate, floor)[0]
    return as_percent(rate)


def min_pass_rate_lines(summary):
    """The --min-pass-rate line of a summary: the rate against the floor ([] without one),
    both as gate_percents prints them, with the counts."""
    floor, rate = summary.get("min_pass_rate"), summary.get("pass_rate")
    if not is_json_number(floor):
        return []
    if not is_json_number(rate):  # no case ran
        return [
            f"no case ran: the minimum pass rate {_floor_percent(floor)} (--min-pass-rate) does "
            "not apply"
        ]
    shown_rate, shown_floor = gate_percents(rate, floor)
    shown = f"pass rate {shown_rate} ({summary.get('passed')}/{summary.get('total')}) is"
    if below_min_pass_rate(summary):
        return [f"{shown} BELOW the minimum {shown_floor} (--min-pass-rate): the run fails"]
    return [f"{shown} at or above the minimum {shown_floor} (--min-pass-rate)"]


# The cases a summary lists, in its order, with their labels: with quiet, the first two.
_SUMMARY_SECTIONS = (
    ("regressed", "REGRESSED"),
    ("errored", "ERROR"),
    ("lower_not_significant", "LOWER, NOT SIGNIFICANT"),
    ("new", "NEW FAIL"),
    ("still_failing", "STILL FAILING"),
    ("fixed", "FIXED"),
)


def _replayed(record):  # ", replayed FILE: no model was called" for the offline default's
    client = str(record.get("client") or "")
    if client[:7] != "replay:":
        return ""
    return f", replayed {client[7:]}: no model was called"


def format_summary(record, quiet=False):
    """The human summary of a run record (str): pass rates, counts, then each case listed with
    its reasons (_SUMMARY_SECTIONS); quiet: only the count lines, regressions and errors."""
    summary = record["summary"]
    counts = [
        f"{summary[key]} {key.replace('_', ' ')}"
        for key in ("regressed", "fixed", "still_failing", "new", "errored", "removed")
    ]
    counts += [
        f"{summary[key]} {label}"
        for key, label in (
            ("review", "need review"),
            ("lower_not_significant", "lower, not significant"),
        )
        if summary.get(key)
    ]
    lines = [
        f"pass rate {pass_rate_percent(summary)} ({summary['passed']}/{summary['total']})"
        + earlier_rates(summary)
        + _replayed(record),
        ", ".join(counts),
    ]
    lines += min_pass_rate_lines(summary)
    latency, tokens, cost = (summary.get(key) for key in ("latency_s", "tokens", "cost_usd"))
    if latency and not quiet:
        lines.append(
            f"latency p50 {latency['p50']:.3f} s, p90 {latency['p90']:.3f} s, "
            f"max {latency['max']:.3f} s"
        )
    if tokens:
        priced = "cost unknown (model not in the price table; see --prices)"
        if cost is not None:
            priced = f"estimated cost ${cost:.4f}"
        lines.append(f"tokens {tokens['input']:,} in / {tokens['output']:,} out, {priced}")
    flaky = {}
    for text, why in flaky_items(summary):
        flaky.setdefault(why, []).append(text)
    lines += [f"flaky ({why}): " + ", ".join(texts) for why, texts in flaky.items()]
    sections = dict(_SUMMARY_SECTIONS)
    if quiet:
        sections = dict(_SUMMARY_SECTIONS[:2])
    listed = {change: [] for change in sections}

    def shown_here(change, status):  # a new case is listed only when it does not pass
        return change in sections and not (change == "new" and status == "pass")

    for entry in _entries_where(record["cases"], shown_here):
        listed[entry["change"]].append(entry)
    for change, label in sections.items():
        entries, groups = listed[change], {}
        if change == "errored":  # an error of three or more cases once (a missing key errs on all)
            for entry in entries:
                groups.setdefault(entry.get("error"), []).append(entry)
            entries = [entry for group in groups.values() if len(group) < 3 for entry in group]
        for group in groups.values():
            if len(group) >= 3:
                ids = join_truncated([shown_id(e["id"]) for e in group], 5, ", ")
                lines += [
                    f"ERROR: {len(group)} cases: {ids}",
                    f"    {one_line(*report_reasons(group[0]))}",
                ]
        for entry in entries:
            lines.append(f"{label}: {shown_id(entry['id'])}")
            if entry["status"] == "review":
                lines[-1] += " (needs review)"
            details = [rate_change_text(entry)]
            if change != "fixed":  # a fixed case passes: no reasons
                details += report_reasons(entry) + reply_lines(entry, 200)
            lines += [f"    {one_line(text)}" for text in details if text]
    if record.get("removed") and not quiet:
        lines.append("removed from the case file: " + ", ".join(map(one_line, record["removed"])))
    return "\n".join(lines) + "\n"


# ---- escaping, and GitHub Actions annotations ----
# Everything from a model or the case file (ids, inputs, outputs, check reasons, errors) is
# untrusted: each report (here and in evals_extras.py) escapes it for its format, and none
# prints output text when the record says outputs_included is false.

# Shown as \xNN / \uNNNN in every report: controls (ANSI escapes too), line separators but LF/CR,
# bidirectional overrides, what shows nothing (zero-width space, BOM, soft hyphen; not U+200C/D,
# which join letters and emoji), lone surrogates and non-characters, so ids differ visibly.
_INVISIBLE = re.compile(
    "[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\xad\u061c\u180e\u200b\u200e\u200f"
    "\u2028-\u202e\u2060-\u206f\ud800-\udfff\ufeff\ufff9-\ufffb\ufffe\uffff]"
)


def shown_text(value):
    """`value` as text: str(value), "" for None."""
    return "" if value is None else str(value)


def visible_text(value):
    """`value` as text with invisible or misleading characters spelled out (\\x1b, \\u202e)."""
    return _INVISIBLE.sub(
        lambda match: match.group().encode("unicode_escape").decode(),
        shown_text(value).replace("\r\n", "\n"),
    )


def one_line(value):
    """`value` on one line, as no text from a case or a model may start a line of a terminal
    or a CI log (a workflow command): spelled out as by visible_text, line breaks too."""
    return visible_text(value).replace("\n", "\\n").replace("\r", "\\r")


def shown_id(case_id):
    """A case id (str) on one line, every character str.isprintable() rejects spelled out
    (\\r, \\n, \\u200c, \\xa0, \\u202e) and a backslash doubled, as Python spells a string:
    two ids that differ are shown differently in every report."""
    return "".join(
        char if char.isprintable() and char != "\\" else char.encode("unicode_escape").decode()
        for char in shown_text(case_id)
    )


def ran_entries(record):
    """The (entry, change) of each case a `completed` record ran, in order, read anew at each
    call (from a _Spool: a report holds only the entries it keeps)."""
    return ((e, e["change"]) for e in record["cases"] if e["change"] != "not_run")


def _gh_escape(value, prop=False):
    """Workflow-command data, spelled out as by visible_text, escaped as the runner unescapes it
    (docs.github.com "Workflow commands"; actions/toolkit command.ts): in a property value
    (`prop`) also : and , so it can neither end the properties (::) nor start another (,)."""
    text = visible_text(value).replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    if prop:
        text = text.replace(":", "%3A").replace(",", "%2C")
    return text


def github_annotations(record):
    """GitHub Actions workflow commands (str, one a line, "" for none): `::error` or `::warning`
    a case, and `::error` for a pass rate below --min-pass-rate."""
    lines, record = [], completed(record)
    if _replayed(record):
        lines.append(f"::warning title=Recorded outputs::{_gh_escape(_replayed(record)[2:])}\n")
    for entry, change in ran_entries(record):
        if entry.get("status") == "error":  # a warning, with its one reason
            kind, command, rate = "Error", "warning", ""
        elif change == "regressed":
            kind, command, rate = "Regression", "error", rate_change_text(entry)
        elif change == "lower_not_significant":
            kind, command, rate = "Lower, not significant", "warning", rate_change_text(entry)
        else:
            continue
        message = "\n".join(text for text in [rate, *report_reasons(entry)] if text)
        title = _gh_escape(f"{kind}: " + shown_id(entry["id"]), prop=True)
        lines.append(f"::{command} title={title}::{_gh_escape(message)}\n")
    if below_min_pass_rate(record["summary"]):  # the exit code's other reason, shown too
        gate = _gh_escape(min_pass_rate_lines(record["summary"])[0])
        lines.append(f"::error title=Pass rate below the minimum::{gate}\n")
    return "".join(lines)


# ---------------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------------


EXIT_OK, EXIT_REGRESSION, EXIT_INVALID, EXIT_INTERRUPTED = 0, 1, 2, 130

EXIT_CODES_HELP = (
    "exit codes: 0 nothing regressed (or --accept took the regressions); 1 a case "
    "that passed in the baseline fails or needs review now, a repeated case's pass "
    "rate dropped significantly, or the pass rate is below --min-pass-rate (with "
    "--strict: any case does not pass); 2 invalid case file, baseline, option or "
    "client, or any case errored (2 wins over 1: the run is incomplete); 130 "
    "interrupted by Ctrl-C or SIGTERM, no record written."
)


def _param_usage(key, param):
    """A check parameter as --list-checks shows it: required, optional, or with its default."""
    if param.required:
        return key
    if param.default is None:
        return f"[{key}]"
    return f"[{key}={json.dumps(param.default)}]"


def _check_table():
    """--list-checks: every registered check with its parameters and summary (str)."""
    import textwrap

    whole = ", ".join(spec.name for spec in CHECKS.values() if spec.whole)
    lines = [
        textwrap.fill(
            'Check types (bounds are inclusive). Every check but judge also takes "negate": '
            'true; every check of the text takes "on": "reasoning" to score the model\'s '
            f"reasoning instead of its answer ({whole} see the whole reply):",
            79,
        ),
        "",
    ]
    for spec in CHECKS.values():
        params = [_param_usage(key, param) for key, param in spec.params.items()]
        lines += [
            f"  {spec.name} {' '.join(params + ['[KEY=VALUE...]'] * spec.open)}",
            textwrap.fill(spec.summary, 79, initial_indent=" " * 6, subsequent_indent=" " * 6),
        ]
    if not _extras():
        lines.append(f"\n{_NO_EXTRAS}.")
    return "\n".join(lines) + "\n"


def bounded_number(kind, low, high=math.inf):
    """An argparse type: a `kind` (int or float) from `low` to `high`; a float finite, above 0."""

    def convert(text):
        value = kind(text)
        if kind is float and not 0 < value < math.inf:
            raise argparse.ArgumentTypeError(f"must be a number above 0, got {text}")
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(
                (f"must be {low} or more" if value < low else f"must be at most {high}")
                + f", got {text}"
            )
        return value

    convert.__name__ = kind.__name__  # argparse's "invalid int value: 'x'"
    return convert


def _fraction(text, alpha=False):
    """--min-pass-rate: a fraction from 0 to 1 ("0.95") or a percentage ("95%"); with `alpha`
    (--alpha), a significance level: a number strictly between 0 and 1."""
    number = text.strip()
    percent = number.endswith("%") and not alpha
    try:
        value = float(number[:-1] if percent else number) / (100 if percent else 1)
    except ValueError:
        value = math.nan
    if alpha and not 0 < value < 1:
        raise argparse.ArgumentTypeError(
            f"expected a number between 0 and 1 (exclusive), e.g. 0.05, got {text!r}"
        )
    if not 0 <= value <= 1:  # NaN too
        raise argparse.ArgumentTypeError(
            f"expected a fraction from 0 to 1 (0.95) or a percentage (95%), got {text!r}"
        )
    return value


significance_level = functools.partial(_fraction, alpha=True)


# Every option, declared once: "flags" (or "command:flags", where a command gives the flag a
# meaning of its own) -> add_argument keywords, or the help of an on/off flag (store_true).
# _COMMANDS lists each command's options.
_OPTIONS = {
    "--version": dict(action="version", version=f"evals {__version__}"),
    "--cases": dict(
        default=DEFAULT_CASES, metavar="FILE", help=f"case file, JSONL (default: {DEFAULT_CASES})"
    ),
    "--baseline": dict(
        metavar="FILE",
        help="the previous run record, compared with and updated "
        f"(default: {DEFAULT_BASELINE}; NAME.last_run.json for --cases NAME.jsonl)",
    ),
    "--accept": "take this run as the new baseline, regressions included (listed, not failing)",
    "--no-save": "compare with the baseline; write no record and no history",
    "--out": dict(
        metavar="FILE",
        help="write the run record here, not to the baseline "
        "(default with --shard: run-shard-K-of-N.json)",
    ),
    "--validate": "only validate the case file, call nothing",
    "--list-checks": "print the check types and their parameters",
    "--tag": dict(
        action="append",
        default=[],
        metavar="TAG",
        help="run only cases with this tag (repeatable: any of them)",
    ),
    "--id": dict(
        action="append",
        default=[],
        metavar="PATTERN",
        help="run only cases whose id matches, e.g. 'refund-*' (repeatable)",
    ),
    "--failed": "run only cases that did not pass in the baseline's last run",
    "--client": dict(
        metavar="MODULE:FUNCTION",
        help="callable str -> str that answers each "
        f"input (default: $EVALS_CLIENT or {DEFAULT_CLIENT})",
    ),
    "--rescore": dict(
        metavar="FILE",
        help="score recorded outputs (recordings JSONL or a run "
        "record) instead of calling a model; no client is imported",
    ),
    "--record": dict(metavar="FILE", help="also save the outputs as recordings (JSONL)"),
    "-j --concurrency": dict(
        type=bounded_number(int, 1),
        default=1,
        metavar="N",
        help="calls in flight at once (default: 1)",
    ),
    "--timeout": dict(
        type=bounded_number(float, 0),
        metavar="SECONDS",
        help="per-call time limit; a slower call is an error (default: none)",
    ),
    "--repeat": dict(
        type=bounded_number(int, 1, 1000),
        default=1,
        metavar="N",
        help="call each case N times (at most 1000)",
    ),
    "--min-pass": dict(
        type=bounded_number(int, 1),
        metavar="K",
        help="passing calls a repeated case needs (default: a majority, 2 of 3)",
    ),
    "--alpha": dict(
        type=significance_level,
        default=DEFAULT_ALPHA,
        metavar="A",
        help="significance level of the pass-rate tests: a repeated case regresses "
        "when its rate dropped with p <= A (Fisher's exact test); also the "
        f"level of the flaky test (default: {DEFAULT_ALPHA})",
    ),
    "--min-pass-rate": dict(
        type=_fraction,
        metavar="P",
        help="fail (exit 1) when the pass "
        "rate is below P, a fraction (0.95) or a percentage (95%%)",
    ),
    "-q --quiet": "print only the summary lines, regressions and errors",
    "--strict": "exit 1 when any case does not pass, not only on regressions",
    "--json": dict(metavar="FILE", help="write the run record (JSON) here too"),
    "--github": "print GitHub Actions annotations for regressions (and, with evals_extras.py, "
    "append the Markdown report to $GITHUB_STEP_SUMMARY)",
}


def _parser(command, plugin):
    """The argument parser of `command` ("": run the cases), from _COMMANDS and _OPTIONS and
    those the optional file `plugin` declares (None: missing): its COMMANDS, with under "" the
    option groups and the description it adds to the run command's, and its OPTIONS."""
    import textwrap

    def wrap(text):
        if not text:
            return text
        return "\n\n".join(
            p if "\n" in p or p.startswith("example:") else textwrap.fill(p, 79)
            for p in text.split("\n\n")
        )

    commands, options = dict(_COMMANDS), dict(_OPTIONS)
    if plugin:
        options.update(plugin.OPTIONS)
        commands.update({name: spec for name, spec in plugin.COMMANDS.items() if name})
    function, description, epilog, groups = commands[command]
    if plugin and not command:  # the run command: the core's, and what the optional file adds
        _, more, _, added = plugin.COMMANDS[""]
        description += "\n\n" + more
        groups = {title: names + tuple(added.get(title, ())) for title, names in groups.items()}
    parser = argparse.ArgumentParser(
        prog=f"evals.py {command}".strip(),
        description=wrap(description),
        epilog=wrap(epilog),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    for title, names in groups.items():
        group = parser.add_argument_group(title) if title else parser
        for name in names:
            spec = options[name]
            if isinstance(spec, str):  # an on/off flag: its help
                spec = dict(action="store_true", help=spec)
            group.add_argument(*name.split(":")[-1].split(), **spec)
    parser.set_defaults(function=function)

    def error(message):  # one line naming --help, not the 20-line usage argparse prints first
        hint = " (--help lists the options)"
        if not plugin and "unrecognized arguments" in message:
            hint = (
                " (--help lists the options; more options come with evals_extras.py, which "
                f"is not beside evals.py: copy it there, {_HERE})"
            )
        parser.exit(2, f"{parser.prog}: error: {message}{hint}\n")

    parser.error = error
    return parser


def _without_plugin(argv, stderr):
    """`argv` without the --no-X flags of the optional file: without it there is nothing of
    its to turn off (a workflow passes --no-history either way), said on `stderr`. A flag close
    to one of the core's (--no-svae) stays, for the parser to refuse: it is a typo."""
    import difflib

    known = [flag for name in _OPTIONS for flag in name.split(":")[-1].split()]
    kept, dropped = [], []
    for arg in argv:
        if arg.startswith("--no-") and arg not in known:
            if not difflib.get_close_matches(arg, known, 1, cutoff=0.85):  # a letter or two
                dropped.append(arg)
                continue
        kept.append(arg)
    if dropped:
        stderr.write(
            f"evals: note: {', '.join(dropped)} ignored: evals_extras.py is not beside "
            "evals.py, so there is nothing of it to turn off\n"
        )
    return kept


def main(argv=None, stdout=None, stderr=None):
    """Command-line entry point; returns the exit code (see the module docstring).

    argv: arguments without the program name (default sys.argv[1:]); a first argument that is
    not an option names a command of the optional file (merge, report, ...: `evals.py --help`
    lists them), anything else runs the cases.
    stdout and stderr default to sys.stdout and sys.stderr; tests pass io.StringIO.
    """
    stdout, stderr = _Masking(stdout or sys.stdout), _Masking(stderr or sys.stderr)
    _find_secrets()
    argv = sys.argv[1:] if argv is None else list(argv)
    command = ""
    if argv and not argv[0].startswith("-"):
        command, argv = argv[0], argv[1:]
    if not command and argv[:1] == ["--version"]:  # before the optional file is looked for
        stdout.write(f"evals {__version__}\n")
        return EXIT_OK
    try:
        plugin = _extras(f"`evals.py {command}`" if command else None)
        if plugin and command and command not in plugin.COMMANDS:
            raise EvalsError(f"unknown command {command!r}: `evals.py --help` lists them")
        if not plugin:
            argv = _without_plugin(argv, stderr)
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            try:
                args = _parser(command, plugin).parse_args(argv)
            except SystemExit as exc:  # --help, --version or a usage error, already printed
                return EXIT_OK if exc.code == 0 else EXIT_INVALID
        with _sigterm_as_interrupt(), _masked_std_streams():
            return args.function(args, stdout, stderr)
    except KeyboardInterrupt:  # after the cases ran: every file is whole, old or new
        stderr.write("evals: interrupted; each file written is either complete or as it was\n")
        return EXIT_INTERRUPTED
    except CaseFileError as exc:
        stderr.write(
            f"{exc}\nevals: {plural(len(exc.problems), 'problem')} in the case "
            "file; no model was called\n"
        )
    except EvalsError as exc:
        stderr.write(f"evals: {exc}\n")
    except OSError as exc:  # a file that cannot be read or written: the run is not complete
        stderr.write(f"evals: {exc.filename or ''}: {exc.strerror or exc}\n")
    except Exception:  # noqa: B902 - a bug must not exit 1, the code of a regression
        import traceback

        stderr.write(traceback.format_exc())
        stderr.write("evals: internal error (above); nothing was compared\n")
    return EXIT_INVALID


@contextlib.contextmanager
def _masked_std_streams():
    """sys.stdout and sys.stderr masked (mask_secrets) while a command runs: what a client
    prints itself (my_client the URL it calls) reaches no stream with a credential in it."""
    with contextlib.redirect_stdout(_Masking(sys.stdout)):
        with contextlib.redirect_stderr(_Masking(sys.stderr)):
            yield


@contextlib.contextmanager
def _sigterm_as_interrupt():
    """SIGTERM (a CI job cancelled) stops the command as Ctrl-C does: cleanly, exit 130."""
    import signal

    main = threading.current_thread() is threading.main_thread()  # only it may set handlers
    previous = main and signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        yield
    finally:
        if main:
            signal.signal(signal.SIGTERM, previous)


def exit_code(summary, strict=False, accepted=False):
    """The exit code of a finished run (see EXIT_CODES_HELP)."""
    if summary["errored"]:  # the run is incomplete: that wins over any verdict
        return EXIT_INVALID
    if summary["regressed"] and not accepted:
        return EXIT_REGRESSION
    if strict and summary["passed"] < summary["total"]:
        return EXIT_REGRESSION
    if below_min_pass_rate(summary):
        return EXIT_REGRESSION
    return EXIT_OK


# What an existing file must begin with (its first 4 KiB) to be replaced by the output of an
# option: one this tool wrote before. Anything else (the harness, a module, a README, the
# recordings a client replays) is the user's, and is never written over. The optional file
# adds its reports' marks.
OWN_FILES = {
    "--out": ('"format": "evals-run"',),
    "--json": ('"format": "evals-run"',),
    "--record": ('"id":',),
}


def _same_file(a, b):
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    return os.path.exists(a) and os.path.exists(b) and os.path.samefile(a, b)


def refuse_overwriting(read, written):
    """EvalsError, before any call, unless each file to write ({option: path or None}) is named,
    in a folder that exists, neither a file read ({label: path}) nor another file written, and,
    if it exists and its option is in OWN_FILES, one this tool wrote."""
    seen = {label: path for label, path in read.items() if path}
    for option, path in written.items():
        if path is None:
            continue
        if not path.strip():
            raise EvalsError(f"{option}: the file name is empty")
        if os.path.isdir(path):
            raise EvalsError(f"{option} {path} is a folder; name a file")
        folder = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(folder):
            raise EvalsError(f"cannot write {path}: there is no folder {folder}")
        clash = next((label for label, taken in seen.items() if _same_file(path, taken)), None)
        if clash:
            raise EvalsError(
                f"{option} {path} is also {clash}: refusing to overwrite it; write to another file"
            )
        if option in OWN_FILES and os.path.exists(path):
            with open(path, encoding="utf-8", errors="replace") as handle:
                head = handle.read(4096)
            if head.strip() and not any(mark in head for mark in OWN_FILES[option]):
                raise EvalsError(
                    f"{option} {path}: the file exists and is not one this tool "
                    f"wrote ({option} writes a new one): refusing to overwrite it; "
                    "write to another file, or delete it first"
                )
        seen[option] = path


# ---- running the cases ----


class Run:
    """A run of the cases as the command line sets it up, handed to the optional file's hooks
    (before_run, around_call, finish), which read and set these attributes:
    args (every option's value: the optional file reads its own options there), cases (the case
    file's), digest (its sha256), baseline (a Baseline), selected (the cases to call), skipped
    (cases left out, keeping their baseline entries), options (RunOptions), client (the client's
    name), out (where the record goes; None: the baseline), save (whether a record is written),
    read and written ({label: path} of the files read and written: refuse_overwriting),
    nothing (a "nothing to rerun: ..." line: no call is made), keep_empty (an empty selection
    still writes its record: a shard), shown (the entry as the record keeps it, or None),
    outputs_included (False: the entries so kept hold no output), notes (lines printed after
    the summary), stopped (interrupted), stdout, stderr."""

    def __init__(self, args, cases, digest, baseline, stdout, stderr):
        self.args, self.cases, self.digest, self.baseline = args, cases, digest, baseline
        failed = baseline if args.failed else None
        self.selected, self.skipped = select_cases(cases, args.tag, args.id, failed), []
        self.options = RunOptions(
            concurrency=args.concurrency,
            timeout=args.timeout,
            repeat=args.repeat,
            min_pass=args.min_pass,
            baseline=baseline,
        )
        self.client, self.out, self.save = None, args.out, not args.no_save
        self.read = {f"--{name}": getattr(args, name) for name in ("cases", "rescore", "baseline")}
        self.written = {option: getattr(args, option[2:]) for option in OWN_FILES}
        self.nothing, self.keep_empty, self.shown, self.outputs_included = None, False, None, True
        self.notes, self.stopped = [], False
        self.stdout, self.stderr = stdout, stderr


def _baseline_of(cases_path):
    """The baseline of a case file, from any folder: last_run.json beside cases.jsonl,
    NAME.last_run.json beside NAME.jsonl."""
    folder, name = os.path.split(cases_path)
    if name == DEFAULT_CASES:
        return os.path.join(folder, DEFAULT_BASELINE)
    return os.path.join(folder, os.path.splitext(name)[0] + ".last_run.json")


def _run_command(args, stdout, stderr):
    plugin = _extras()  # its checks register as it is imported
    if args.list_checks:
        stdout.write(_check_table())
        return EXIT_OK
    cases, digest = load_cases(args.cases)
    if args.validate:
        stdout.write(f"{args.cases}: {plural(len(cases), 'case')}, all valid\n")
        return EXIT_OK
    args.baseline = args.baseline or _baseline_of(args.cases)
    # Options that cannot go together, before any call.
    refuse_pairs(
        args, ("accept", "no_save"), ("accept", "out"), ("no_save", "out"), ("rescore", "client")
    )
    run = Run(args, cases, digest, load_baseline(args.baseline), stdout, stderr)
    if plugin:
        plugin.before_run(run)
    if args.min_pass is not None and args.min_pass > run.options.repeat:
        raise EvalsError(f"--min-pass {args.min_pass} is more than --repeat {run.options.repeat}")
    if run.save and not run.out:
        run.written["--baseline"] = args.baseline
        run.read.pop("--baseline")
    refuse_overwriting(run.read, run.written)
    if args.record and os.path.exists(args.record):  # malformed: refused now, not after calls
        collections.deque(recording_rows(args.record), 0)
    if run.nothing:
        stdout.write(run.nothing + "\n")
        return EXIT_OK
    if not run.selected and not run.keep_empty:
        if args.failed and not (args.tag or args.id):
            stdout.write(f"nothing to rerun: every case passed in {args.baseline}\n")
            return EXIT_OK
        raise EvalsError(
            "no case matches the selection (--tag, --id, --failed)" + _selection_hint(args, cases)
        )
    # A --baseline that names the wrong file would make every regression new, and CI green.
    if not run.baseline.entries and (args.failed or args.baseline != DEFAULT_BASELINE):
        what = "--failed runs every case" if args.failed else "every case is new"
        stderr.write(f"evals: note: {args.baseline} holds no run yet, so {what}\n")
    call_model, run.client = _client_for(args, run.selected, run.options, stderr)
    if plugin:
        call_model = plugin.around_call(call_model, run)
    if not args.quiet:
        stdout.write(_headline(run))
        stdout.flush()
    return _finish_run(run, _run_cases(run, call_model))


def _headline(run):
    """The first line of a run: how many cases, the client, the repeat."""
    total = len(run.cases)
    scope = total
    if len(run.selected) != total:
        scope = f"{len(run.selected)} of {total}"
    repeat = ""
    if run.options.repeat > 1:
        repeat = f", repeat {run.options.repeat} (pass {run.options.needed})"
    return (
        f"evals {__version__}: {scope} case{'s' if total != 1 else ''} from "
        f"{run.args.cases}, client {run.client}{repeat}\n"
    )


def _run_cases(run, call_model):
    """The record of the run's calls, scored and compared with the baseline; run.stopped is
    set when Ctrl-C or SIGTERM ended them early."""
    args = run.args
    record = make_record(
        RunResult(
            _with_progress(run, call_model), utc_now(), None, run.client, args.cases, run.digest
        ),
        run.baseline,
        run.cases,
        args.accept,
        run.shown,
        [c.id for c in run.cases],
        run.options,
        _Spool(),
        args.alpha,
        run.outputs_included,
    )
    if args.min_pass_rate is not None:
        record["summary"]["min_pass_rate"] = args.min_pass_rate
    return record


def _finish_run(run, record):
    """The summary, recordings, record and reports of a run, inside the optional file's
    finish(run, record); an interrupted run writes nothing. Returns the exit code."""
    plugin = _extras()
    args, stdout, stderr = run.args, run.stdout, run.stderr
    with plugin.finish(run, record) if plugin else contextlib.nullcontext():
        stdout.write(format_summary(record, args.quiet))
        stdout.writelines(run.notes)
        if run.options.refusals:
            stdout.write(
                f"{plural(run.options.refusals, 'call')} refused by the provider for a while "
                "(a rate limit, an overload) and called again after the wait it asked for\n"
            )
        if run.stopped:  # nothing is written, so accepting made no difference
            stderr.write(
                f"evals: interrupted after {record['summary']['total']} of "
                f"{len(run.selected)} cases; no record written\n"
            )
            return EXIT_INTERRUPTED
        if args.record:
            _save_recordings(args.record, record, stderr)
        _save_record(run, record)
        if args.json:
            write_record(args.json, record)
        if args.github:
            stdout.write(github_annotations(record))
    code = exit_code(record["summary"], args.strict, args.accept)
    if code == EXIT_REGRESSION and args.strict and not record["summary"]["regressed"]:
        stderr.write("evals: exit 1: --strict, and not every case passed\n")
    return code


def _save_record(run, record):
    """Write the record to run.out, else to the baseline (unless --no-save, or when it would
    change no verdict of it: see verdicts_kept)."""
    args = run.args
    if run.out:
        write_record(run.out, record)
        run.stderr.write(f"evals: run record written to {run.out}\n")
        return
    if not run.save or (not args.accept and verdicts_kept(record, run.baseline)):
        return
    # Another run replaced the baseline since this one read it: a slower run must not undo an
    # --accept, so the record goes beside it, exit 2.
    if _stamp(args.baseline) != run.baseline.stamp:
        beside = f"{os.path.splitext(args.baseline)[0]}.{os.getpid()}.json"
        write_record(beside, record)
        raise EvalsError(
            f"{args.baseline} was written by another run while this one ran; "
            f"it is not overwritten. This run's record is in {beside}"
        )
    write_record(args.baseline, record)
    if args.accept:
        run.stdout.write(f"accepted this run as the baseline in {args.baseline}\n")


def _client_for(args, cases, options, stderr):
    """(call_model, its name): the recordings replayed (--rescore), else the client to load:
    --client, EVALS_CLIENT, else my_client:ask; my_client's ask with no provider configured is
    the replay of EVALS_RECORDINGS (see _offline_client)."""
    if args.rescore:
        call_model = replay_client(load_outputs(args.rescore, options.repeat), args.rescore)
        name = f"rescore:{args.rescore}"
    else:
        name = args.client or os.environ.get("EVALS_CLIENT") or DEFAULT_CLIENT
        # my_client with no provider: the harness replays what it would call
        if unconfigured_my_client(name, "ask", "EVALS_PROVIDER"):
            call_model, name = _offline_client(options.repeat, stderr)
        else:
            call_model = load_callable(name)
    refuse_conversations(cases, call_model, name)
    return call_model, name


def refuse_pairs(args, *pairs):
    """EvalsError for the first pair of options (dests) that `args` both has."""
    for first, second in pairs:
        if getattr(args, first) and getattr(args, second):
            raise EvalsError(
                f"--{first.replace('_', '-')} and --{second.replace('_', '-')} "
                "contradict each other: choose one"
            )


def _selection_hint(args, cases):
    """Why --tag or --id selects nothing, when a tag or a plain id names no case at all."""
    tags = sorted({tag for case in cases for tag in case.tags})
    if set(args.tag or ()) - set(tags):
        return f"; the case file's tags: {', '.join(tags) or 'none'}"
    ids = [c.id for c in cases]
    for pattern in args.id or ():
        if pattern in ids or set(pattern) & set("*?["):
            continue
        hint = did_you_mean(pattern, ids)
        if hint != ".":
            return hint
    return ""


def _with_progress(run, call_model):
    """each_result of the selected cases, with a one-line progress counter on stderr when it is
    a terminal; on Ctrl-C or SIGTERM it ends early with the finished results (run.stopped)."""
    counts, stream = collections.Counter(), run.stderr
    shown = (
        not run.args.quiet and getattr(stream, "isatty", bool)() and not os.environ.get("NO_COLOR")
    )

    def progress(result):
        counts[result.status] += 1
        stream.write(
            f"\r{sum(counts.values())}/{len(run.selected)} cases: {counts['fail']} failed, "
            f"{counts['error']} errors "
        )
        stream.flush()

    try:
        yield from each_result(run.selected, call_model, run.options, progress if shown else None)
    except Interrupted as stop:
        run.stopped = True
        yield from stop.results
    finally:
        if counts:
            stream.write("\r" + " " * 60 + "\r")
            stream.flush()


def _save_recordings(path, record, stderr):
    """Record the outputs (stored_output) of the cases `record` ran in a recordings file, with
    the latency, usage and model each was made with: their rows updated (or added at the end),
    every other row kept as it was."""
    rows = {row["id"]: row for row, _ in recording_rows(path)} if os.path.exists(path) else {}
    ran = [e for e in record["cases"] if e.get("change") != "not_run" and e["status"] != "error"]
    for entry in ran:
        fields = {
            "id": entry["id"],
            "input": entry.get("input"),
            "output": stored_output(
                entry.get("output"), entry.get("tool_calls") or (), entry.get("finish_reason")
            ),
        }
        if entry.get("reasoning") is not None:
            fields["reasoning"] = entry["reasoning"]
        if entry.get("model") not in (None, "", "replay"):  # a replay is no model's answer
            fields["model"] = entry["model"]
        if _latency_of(entry) is not None:
            fields["latency_s"] = _latency_of(entry)
        if entry.get("usage") is not None and not entry.get("attempts"):  # a repeated case's
            fields["usage"] = entry["usage"]  # sums its calls': it is not the recorded one's
        # An older recording's reasoning and figures are not this output's; its other fields
        # stay.
        kept = {
            k: v
            for k, v in rows.get(entry["id"], {}).items()
            if k not in ("reasoning", "latency_s", "usage")
        }
        rows[entry["id"]] = {**kept, **fields}
    write_jsonl_atomic(path, rows.values())
    stderr.write(
        f"evals: recorded {plural(len(ran), 'output')} of this run in {path} "
        f"({len(rows)} in all)\n"
    )


# ---- the command line's tables ----

# Each command: (function, description, epilog, {group title or None: option names}); ""
# runs the cases. The optional file's COMMANDS holds its commands (and, under "", what it adds
# to this one), its OPTIONS their options.
_COMMANDS = {
    "": (
        _run_command,
        "Run a JSONL file of cases through a model, score deterministic checks, "
        "and compare with the previous run (the baseline) to catch regressions.",
        EXIT_CODES_HELP + "\n\nWith no --client, EVALS_CLIENT or EVALS_PROVIDER, a run replays "
        "the outputs recorded in recordings.jsonl (EVALS_RECORDINGS), calling no model.",
        {
            None: ("--version",),
            "cases and baseline": (
                "--cases",
                "--baseline",
                "--accept",
                "--no-save",
                "--out",
                "--validate",
                "--list-checks",
            ),
            "selection": ("--tag", "--id", "--failed"),
            "model calls": (
                "--client",
                "--rescore",
                "--record",
                "-j --concurrency",
                "--timeout",
                "--repeat",
                "--min-pass",
            ),
            "pass rates and gates": ("--alpha", "--min-pass-rate"),
            "output": ("-q --quiet", "--strict", "--json", "--github"),
        },
    ),
}


if __name__ == "__main__":
    # A module that does `import evals` (the optional file) gets the running one, not a copy.
    sys.modules.setdefault("evals", sys.modules[__name__])
    try:
        code = main()
        sys.stdout.flush()
    except BrokenPipeError:
        # `python evals.py | head`: the reader left; exit quietly like other Unix tools.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = 1
    except KeyboardInterrupt:  # Ctrl-C again while main said the first: already said
        code = EXIT_INTERRUPTED
    if any(t.name == "evals-caller" and t.is_alive() for t in threading.enumerate()):
        # A call abandoned at --timeout may still read its socket: shutting the interpreter
        # down under it aborts (exit 134). Every file is written and closed: skip that shutdown.
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)
