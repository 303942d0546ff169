"""Regex patterns that may backtrack catastrophically are refused when the case file loads:
the evil shapes of OWASP's ReDoS list and their kin, never a pattern the repository, its docs,
examples, tests or IFEval translation use."""

import ast
import importlib.util
import io
import json
import os
import re
import sys
import tempfile
import unittest
from unittest import mock

import evals

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
IFEVAL_DATA = os.path.join(os.path.dirname(ROOT), "shared", "ifeval", "input_data.jsonl")
THIS_FILE = os.path.relpath(os.path.abspath(__file__), ROOT)
REFUSED = "may backtrack catastrophically"

# (pattern, the part the message names): OWASP's "Evil Regexes" and the shapes they stand for.
EVIL = [
    # a repeat of nothing but a repeat of several characters: every split of "abab..." into rounds
    (r"((ab)*)*c", "((ab)*)*"),
    (r"((ab)+)+c", "((ab)+)+"),
    (r"(?:(?:ab)*)*c", "(?:(?:ab)*)*"),
    (r"((ab){1,3})+c", "((ab){1,3})+"),
    (r"(a+)+", "(a+)+"),
    (r"(a+)+$", "(a+)+"),
    (r"^(a+)+$", "(a+)+"),
    (r"([a-zA-Z]+)*", "([a-zA-Z]+)*"),
    (r"(a|aa)+", "(a|aa)+"),
    (r"(a|a?)+", "(a|a?)+"),
    (r"(.*a){12}", "(.*a){12}"),
    (r"(.*a){11}", "(.*a){11}"),
    (r"(a*)*", "(a*)*"),
    (r"(a|a)*", "(a|a)*"),
    (r"(ab|ab)*", "(ab|ab)*"),
    (r"(ab|a|b)*$", "(ab|a|b)*"),
    (r"(?:aa|aaa)+$", "(?:aa|aaa)+"),
    (r"(x+x+)+y", "(x+x+)+"),
    (r"^(([a-z])+.)+[A-Z]([a-z])+$", "(([a-z])+.)+"),
    (
        r"^([a-zA-Z0-9])(([\-.]|[_]+)?([a-zA-Z0-9]+))*(@){1}[a-z0-9]+[.]{1}"
        r"(([a-z]{2,3})|([a-z]{2,3}[.]{1}[a-z]{2,3}))$",
        r"(([\-.]|[_]+)?([a-zA-Z0-9]+))*",
    ),
    (r"^(\w+\s?)+$", r"(\w+\s?)+"),
    (r"(\w+\s?)*", r"(\w+\s?)*"),
    (r"(\s*\w+\s*)+!", r"(\s*\w+\s*)+"),
    (r"(\d+\.?)+$", r"(\d+\.?)+"),
    (r"(\d{1,3},?)+$", r"(\d{1,3},?)+"),
    (r"(.+,)*$", "(.+,)*"),
    (r"(\n\s*)+x", r"(\n\s*)+"),
    (r"(?:\r?\n|\s)+$", r"(?:\r?\n|\s)+"),
    (r"(?i)([A-Z][a-z]+\s?)+$", r"([A-Z][a-z]+\s?)+"),
    (r"(?:a+){2,}$", "(?:a+){2,}"),
    (r"\d+ (a+)+ (?# a comment) x", "(a+)+"),
]

# Realistic check patterns, none of which backtracks exponentially.
SAFE = [
    r"\d{4}-\d{2}-\d{2}",
    r"\b(?:\d{1,2}/){2}\d{2,4}\b",
    r"[\w.+-]+@[\w-]+\.[\w.]+",
    r"^\d{3}-\d{4}$",
    r"(\d+,)*\d+",
    r"\$\d+(?:,\d{3})*(?:\.\d{2})?",
    r"(\d{1,3}\.){3}\d{1,3}",
    r"(\w+\s)*",
    r"(\w+\s+)+\w+",
    r"\w+(\s\w+)*\s?",
    r"(\b\w+\b\s*)+$",
    r"^(?:\w+\s+){0,99}\w+$",
    r"([A-Z][a-z]+\s?)+",
    r"[A-Z]{2,}(?:\s+[A-Z]{2,})*",
    r"(?:\w+(?:-\w+)*)",
    r"(?:,\s*\w+)*",
    r"(?:\s*\d+\s*,)*",
    r"(\s*-\s*\w+)+",
    r"(?:\s|,)+",
    r"(\w|\d)+",
    r"(foo|foobar)+",
    r"^#{1,6}\s+\S.*$",
    r"(?m)^\s*[-*+]\s+.+$",
    r"(?m)^\s*\d+\.\s",
    r"(?:\*\*|__)(.+?)(?:\*\*|__)",
    r"(?:[^*]|\*(?!\*))+",
    r"(?:-{3,}|\*{3,})",
    r"```(?:\w+)?\n[\s\S]*?\n```",
    r'"(?:[^"\\]|\\.)*"',
    r'\{\s*"\w+"\s*:\s*.+\}',
    r"^\s*\{.*\}\s*$",
    r"(?:[a-z0-9-]+\.)+[a-z]{2,}",
    r"https?://[^\s/$.?#].[^\s]*",
    r"(?:https?://)?(?:www\.)?[\w-]+(?:\.[\w-]+)+(?:/\S*)?",
    r"\b(three|3)\s+to\s+(five|5)\s+business\s+days\b",
    r"(?:Mr|Mrs|Ms)\.?\s+[A-Z]\w+",
    r"(\d+(?:\.\d+)?)\s*(?:%|percent)",
    r"(?i)\b(?:yes|no)\b",
    r"(?:(?!\n\n)[\s\S])*",
    r"(?:(?:(?!\n\n)\s)*\n\n)*",
]


def _main(*argv):
    out, err = io.StringIO(), io.StringIO()
    code = evals.main(list(argv), out, err)
    return code, out.getvalue(), err.getvalue()


class RefusedAtLoadTest(unittest.TestCase):
    def setUp(self):
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.dir = tmp.name

    def write_cases(self, checks_per_case):
        path = os.path.join(self.dir, "cases.jsonl")
        with open(path, "w", encoding="utf-8") as handle:
            for number, checks in enumerate(checks_per_case, 1):
                case = {"id": f"case-{number}", "input": "hi", "checks": checks}
                handle.write(json.dumps(case) + "\n")
        return path

    def run_cases(self, path, *options):
        calls = []
        client = mock.Mock(side_effect=lambda text: calls.append(text) or "answer")
        with mock.patch.object(evals, "load_callable", return_value=client):
            code, out, err = _main(
                "--cases", path, "--client", "stub:ask", "--no-save", "--no-history", *options
            )
        self.assertEqual(calls, [], "a model was called")
        return code, out, err

    def test_each_evil_pattern_is_refused_through_the_command_line(self):
        path = self.write_cases([[{"type": "regex", "pattern": p}] for p, _ in EVIL])
        code, out, err = self.run_cases(path)
        self.assertEqual(code, 2)
        lines = err.splitlines()
        for number, (pattern, part) in enumerate(EVIL, 1):
            with self.subTest(pattern=pattern):
                prefix = f"{path}:{number}: check 1: regex: parameter 'pattern' {REFUSED}: "
                line = next(line for line in lines if line.startswith(prefix))
                self.assertIn(f"in `{part}`, ", line)
                self.assertIn("exponentially many ways, so a failing answer may take hours", line)
        last = f"evals: {len(EVIL)} problems in the case file; no model was called"
        self.assertEqual(lines[-1], last)

    def test_a_schema_pattern_is_refused_with_its_schema_path(self):
        schema = {
            "type": "object",
            "properties": {"code": {"type": "string", "pattern": "^(a|aa)+$"}},
        }
        tool = {
            "name": "lookup",
            "parameters": {"type": "object", "properties": {"q": {"pattern": "(a*)*"}}},
        }
        path = self.write_cases(
            [
                [{"type": "json_schema", "schema": schema}],
                [{"type": "tool_called", "name": "lookup", "schema": schema}],
                [{"type": "tool_calls_valid", "tools": [tool]}],
            ]
        )
        code, _, err = self.run_cases(path, "--validate")
        self.assertEqual(code, 2)
        self.assertIn(
            f"{path}:1: check 1: json_schema: parameter 'schema' "
            f"schema.properties.code.pattern {REFUSED}: in `(a|aa)+`, alternatives",
            err,
        )
        self.assertIn(
            f"{path}:2: check 1: tool_called: parameter 'schema' "
            f"schema.properties.code.pattern {REFUSED}: in `(a|aa)+`",
            err,
        )
        self.assertIn(f"parameters.properties.q.pattern {REFUSED}: in `(a*)*`, a repeat", err)

    def test_add_refuses_such_a_regex(self):
        path = os.path.join(self.dir, "new.jsonl")
        argv = ("add", "--id", "x", "--input", "hi", "--regex", "(a+)+$", "--cases", path)
        code, _, err = _main(*argv)
        self.assertEqual(code, 2)
        self.assertIn(f"check 1: regex: parameter 'pattern' {REFUSED}: in `(a+)+`", err)
        self.assertFalse(os.path.exists(path))

    def test_safe_patterns_pass(self):
        path = self.write_cases([[{"type": "regex", "pattern": p}] for p in SAFE])
        code, out, err = self.run_cases(path, "--validate")
        self.assertEqual((code, err), (0, ""))

    def test_the_rewrite_shown_matches_the_same_text_and_passes(self):
        texts = ["", "a", "aa", "aaaa!", "b", "ab", "Zz", "aaaaaaaaaaaa", "aaaaaaaaaaaaa"]
        for pattern, written in (
            (r"(a+)+", "a+"),
            (r"(a+)+$", "a+"),
            (r"([a-zA-Z]+)*", "[a-zA-Z]*"),
            (r"(a*)*", "a*"),
            (r"(?:a+)*", "a*"),
            (r"(a{2,})+", "a{2,}"),
            (r"(?:a+){12}", "a{12,}"),
            (r"(?:a+){0,20}", "a*"),
        ):
            with self.subTest(pattern=pattern):
                problem = evals.Regex(pattern)
                self.assertIn(f"as `{written}`, which matches the same text", problem)
                part = re.search(r"in `(.*?)`, ", problem).group(1)
                rewritten = pattern.replace(part, written)
                self.assertIsNone(evals.Regex(rewritten))
                for text in texts:
                    self.assertEqual(
                        bool(re.fullmatch(pattern, text)), bool(re.fullmatch(rewritten, text))
                    )
                    self.assertEqual(
                        bool(re.search(pattern, text)), bool(re.search(rewritten, text))
                    )

    def test_other_shapes_get_the_general_advice(self):
        for pattern in (r"(\w+\s?)+", r"(a|aa)+", r"(.*a){12}"):
            with self.subTest(pattern=pattern):
                self.assertIn(r"as `(\w+\s?)+` is `\w+(\s\w+)*\s?`", evals.Regex(pattern))
        self.assertIsNone(evals.Regex(r"\w+(\s\w+)*\s?"))

    def test_a_pattern_too_deep_to_check_is_refused_not_crashed_on(self):
        # The same limit on every Python (3.11 recursed out at some hundreds; 3.13 did not).
        deep = "(" * 450 + "ab" + ")" * 450 + "+"
        re.compile(deep)
        self.assertEqual(
            evals.validate_check({"type": "regex", "pattern": deep}),
            [
                "regex: parameter 'pattern' nests groups more than 100 deep, too deep to check "
                "whether it may backtrack catastrophically"
            ],
        )
        self.assertEqual(evals.validate_check({"type": "regex", "pattern": "(" * 99 + "ab" + ")" * 99 + "+"}), [])

    def test_the_documented_limits(self):
        # More than 10 rounds count as unbounded; a polynomial shape is not looked for.
        self.assertIsNone(evals.Regex(r"(.*a){10}"))
        self.assertIn(REFUSED, evals.Regex(r"(.*a){11}"))
        self.assertIsNone(evals.Regex(r"\w*\w*\w*x"))

    @unittest.skipUnless(sys.version_info >= (3, 11), "possessive repeats need Python 3.11+")
    def test_a_possessive_outer_repeat_passes(self):
        for pattern in (r"(a+)++$", r"(\w+\s?)*+$", r"(?:a|aa)++$"):
            with self.subTest(pattern=pattern):
                self.assertIsNone(evals.Regex(pattern))

    def test_flags_are_read(self):
        # With "i", [A-Z] and [a-z] overlap; with "x", the spaces are not part of the pattern.
        self.assertIsNone(evals.Regex(r"([A-Z][a-z]+\s?)+"))
        self.assertIn(REFUSED, evals.Regex(r"([A-Z][a-z]+\s?)+", "i"))
        self.assertIn("in `( a + ) +`", evals.Regex(r"( a + ) + $", "x"))
        self.assertIsNone(evals.Regex(r"(?:.*\n)+"))
        self.assertIn(REFUSED, evals.Regex(r"(?:.*\n)+", "s"))

    def test_the_analysis_runs_once_per_distinct_pattern(self):
        # 1,000 cases share the pattern; their check lists differ, so each is validated.
        shared = {"type": "regex", "pattern": r"\b(three|3)\s+to\s+(five|5)\b", "flags": "i"}
        path = self.write_cases([[shared, {"type": "max_words", "n": n}] for n in range(1000)])
        evals._backtracking_problem.cache_clear()
        code, _, err = self.run_cases(path, "--validate")
        self.assertEqual((code, err), (0, ""))
        info = evals._backtracking_problem.cache_info()
        self.assertEqual((info.misses, info.hits), (1, 999))


def _patterns_in_json(value, where, found):
    if isinstance(value, dict):
        if isinstance(value.get("pattern"), str):
            found.append((value["pattern"], value.get("flags", ""), where))
        for item in value.values():
            _patterns_in_json(item, where, found)
    elif isinstance(value, list):
        for item in value:
            _patterns_in_json(item, where, found)


def _patterns_in_python(source, where, found):
    """Every dict literal {"pattern": "...", "flags": "..."} of a Python source."""
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Dict):
            continue
        fields = {
            key.value: value
            for key, value in zip(node.keys, node.values)
            if isinstance(key, ast.Constant)
        }
        pattern, flags = fields.get("pattern"), fields.get("flags")
        if isinstance(pattern, ast.Constant) and isinstance(pattern.value, str):
            flags = flags.value if isinstance(flags, ast.Constant) else ""
            found.append((pattern.value, flags, f"{where}:{node.lineno}"))


_JSON_PATTERN = re.compile(r'"pattern":\s*("(?:[^"\\\n]|\\.)*")')


def repository_patterns():
    """(pattern, flags, where) of every pattern the repository's files hold: case and tool
    files, JSON in the docs, dict literals in Python (tests, examples, benchmarks)."""
    found = []
    for folder, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in (".git", "__pycache__", ".evals")]
        for name in files:
            path = os.path.join(folder, name)
            where = os.path.relpath(path, ROOT)
            if not name.endswith((".jsonl", ".json", ".md", ".py")):
                continue
            with open(path, encoding="utf-8") as handle:
                text = handle.read()
            if name.endswith(".jsonl"):
                for number, line in enumerate(text.splitlines(), 1):
                    if line.strip():
                        _patterns_in_json(json.loads(line), f"{where}:{number}", found)
            elif name.endswith(".json"):
                _patterns_in_json(json.loads(text), where, found)
            elif name.endswith(".md"):
                for match in _JSON_PATTERN.finditer(text):
                    found.append((json.loads(match.group(1)), "", where))
            else:
                _patterns_in_python(text, where, found)
    return found


def _load_ifeval_importer():
    path = os.path.join(ROOT, "examples", "ifeval", "import_ifeval.py")
    spec = importlib.util.spec_from_file_location("import_ifeval", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class RepositoryPatternsPassTest(unittest.TestCase):
    # The page that shows the refusal, with the pattern it refuses.
    SHOWN_REFUSED = {("docs/checks.md", r"^(\w+\s?)+$")}

    def assertAccepted(self, pattern, flags, where):
        try:
            compiled = evals.compile_pattern(pattern, flags)
        except (re.error, KeyError, TypeError):
            return  # a test's invalid pattern or flags, refused for that
        problem = evals._backtracking_problem(pattern, compiled.flags)
        self.assertIsNone(problem, f"{where}: {pattern!r}")

    def test_every_pattern_in_the_repository_passes(self):
        found = repository_patterns()
        self.assertGreater(len({pattern for pattern, _, _ in found}), 40)
        shown = set()
        for pattern, flags, where in found:
            if where.startswith(THIS_FILE):
                continue  # the refusals tested above
            if (where.split(":")[0], pattern) in self.SHOWN_REFUSED:
                shown.add((where.split(":")[0], pattern))
                self.assertIn(REFUSED, evals.Regex(pattern, flags))
                continue
            with self.subTest(where=where, pattern=pattern):
                self.assertAccepted(pattern, flags, where)
        self.assertEqual(shown, self.SHOWN_REFUSED)

    def test_the_ifeval_translation_passes(self):
        # The instructions the importer turns into regex checks, over a range of arguments.
        importer = _load_ifeval_importer()
        instructions = [("detectable_content:number_placeholders", {"num_placeholders": 3})]
        instructions += [
            ("detectable_content:postscript", {"postscript_marker": marker})
            for marker in ("P.S.", "P.P.S", "Note:", "***")
        ]
        instructions += [
            ("detectable_format:multiple_sections", {"section_spliter": s, "num_sections": 3})
            for s in ("Section", "SECTION", "*")
        ]
        instructions += [
            (
                "length_constraints:nth_paragraph_first_word",
                {"num_paragraphs": n, "nth_paragraph": nth, "first_word": "so"},
            )
            for n in range(1, 25)
            for nth in range(1, n + 1)
        ]
        instructions.append(("startend:quotation", {}))
        for instruction, arguments in instructions:
            check = importer.instruction_to_check(instruction, arguments)
            self.assertEqual(check["type"], "regex")
            self.assertAccepted(check["pattern"], check.get("flags", ""), instruction)

    @unittest.skipUnless(os.path.isfile(IFEVAL_DATA), "IFEval input data not found")
    def test_the_ifeval_data_translated_passes(self):
        importer = _load_ifeval_importer()
        count = 0
        with open(IFEVAL_DATA, encoding="utf-8") as handle:
            for line in handle:
                case, _ = importer.prompt_to_case(json.loads(line))
                for check in (case or {}).get("checks", ()):
                    if check["type"] == "regex":
                        count += 1
                        self.assertAccepted(check["pattern"], check.get("flags", ""), case["id"])
        self.assertGreater(count, 50)


if __name__ == "__main__":
    unittest.main()
