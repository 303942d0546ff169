"""Report files: JUnit XML, Markdown, the HTML diff and GitHub Actions annotations.

Every report is fed hostile model output and case ids; the assertions check that the text
arrives as text (escaped) and never as markup, XML structure or a workflow command.
"""

import html.parser
import io
import json
import os
import re
import tempfile
import unittest
import unittest.mock
import xml.etree.ElementTree as ET

import evals
import evals_extras

# Model output that tries every way out of its box: HTML and attribute injection, Markdown
# markup and fences, table cells, workflow commands on a new line, an encoded newline, an
# ANSI escape, a bidirectional override, a lone surrogate and a control XML 1.0 forbids.
HOSTILE = ('Sure! <script>alert(1)</script></td></pre></textarea> "onerror=alert(2) x=\'y\' '
           '<img src=x onerror=alert(3)> <a href="https://evil.example">go</a> '
           "`` ``` **bold** _it_ [link](javascript:alert(4)) ![i](x) | cell | <!-- c -->\n"
           "::set-output name=x::y\n::add-mask::secret\r\n%0A::error::pwned %250A "
           "\x1b[31mred\u202eevil\ud800 bell\x07 end")
HOSTILE_ID = 'case-<b>|*x*|</b>"id,:a'

OLD_REFUND = ("I'm sorry the blender broke. Because the order is over $100, the refund needs "
              "manager approval; I've sent the request now.")
NEW_REFUND = "I'm sorry the blender broke. I've refunded $150 to your card right away."


def check(type_, passed, reason):
    return {"type": type_, "passed": passed, "reason": reason}


def entry(case_id, status, change, output=None, baseline=None, **extra):
    item = {"id": case_id, "input": f"input of {case_id}", "description": "", "tags": [],
            "status": status, "baseline": baseline or status, "change": change,
            "checks": extra.pop("checks", [check("contains_any", status == "pass", "reason")]),
            "latency_s": extra.pop("latency_s", 0.25)}
    if output is not None:
        item["output"] = output
    item.update(extra)
    return item


def make_record(cases, outputs_included=True, removed=()):
    """A run record built by hand, the shape make_record writes."""
    counted = [c for c in cases if c["change"] != "not_run"]

    def count(status):
        return sum(1 for c in counted if c["status"] == status)

    def changed(change):
        return sum(1 for c in counted if c["change"] == change)

    scored = len(counted) - count("error")
    return {
        "format": "evals-run", "version": 1, "harness_version": evals.__version__,
        "started_at": "2026-11-30T10:00:00+01:00", "finished_at": "2026-11-30T10:00:42+01:00",
        "python": "3.11.7", "client": "my_client:ask", "git_commit": None,
        "case_file": {"path": "cases.jsonl", "sha256": "0" * 64},
        "outputs_included": outputs_included, "accepted": False,
        "summary": {
            "total": len(counted), "passed": count("pass"), "failed": count("fail"),
            "review": count("review"), "errored": count("error"),
            "pass_rate": count("pass") / scored if scored else None, "previous_pass_rate": 1.0,
            **{k: changed(k) for k in ("regressed", "fixed", "still_failing", "passing", "new")},
            "removed": len(removed), "flaky": [], "latency_s": {}, "tokens": None,
            "cost_usd": None,
        },
        "removed": list(removed),
        "cases": cases,
    }


def sample(outputs_included=True):
    """(record, previous): two regressions (one hostile), an error, a new failure, a review,
    a fix, passing cases and a case not run this time."""
    cases = [
        entry("refund", "fail", "regressed", NEW_REFUND, baseline="pass", checks=[
            check("contains_any", False, "none of 'manager approval' found"),
            check("max_words", True, "14 words")]),
        entry(HOSTILE_ID, "fail", "regressed", HOSTILE, baseline="pass", checks=[
            check("not_contains", False, "found '<script>'\n::add-mask::x, 50%0A done")]),
        entry("timeout", "error", "errored", baseline="pass", checks=[],
              error="TimeoutError: no answer within 30 s\n::warning::injected"),
        entry("new-long", "fail", "new", "word " * 30, checks=[
            check("max_words", False, "30 words, at most 10 allowed")]),
        entry("judge", "review", "still_failing", "Fine.", checks=[
            check("judge", False, "judge unsure")]),
        entry("fixed-one", "pass", "fixed", "Yes, we ship to the EU."),
        entry("steady", "pass", "passing", "Hello there"),
        entry("brand-new-pass", "pass", "new", "All good"),
        entry("skipped", "pass", "not_run", "NOT-RUN-OUTPUT", baseline="pass"),
    ]
    if not outputs_included:
        for case in cases:
            case.pop("output", None)
    previous = {
        "refund": {"id": "refund", "status": "pass", "baseline": "pass", "output": OLD_REFUND},
        HOSTILE_ID: {"id": HOSTILE_ID, "status": "pass", "baseline": "pass",
                     "output": "I cannot help </pre><script>old()</script>"},
        "timeout": {"id": "timeout", "status": "pass", "baseline": "pass",
                    "output": "PREVIOUS-TIMEOUT-OUTPUT"},
        "judge": {"id": "judge", "status": "review", "baseline": "review", "output": "Fine."},
        "fixed-one": {"id": "fixed-one", "status": "fail", "baseline": "fail",
                      "output": "We do not ship abroad."},
        "steady": {"id": "steady", "status": "pass", "baseline": "pass", "output": "Hello there"},
        "skipped": {"id": "skipped", "status": "pass", "baseline": "pass",
                    "output": "NOT-RUN-OUTPUT"},
    }
    if not outputs_included:
        previous = {k: {f: v for f, v in e.items() if f != "output"} for k, e in previous.items()}
    return make_record(cases, outputs_included, removed=["gone"]), previous


OUTPUT_MARKERS = ("blender", "refunded", "alert(1)", "set-output", "word word", "Fine.",
                  "ship to the EU", "Hello there", "All good", "NOT-RUN-OUTPUT",
                  "PREVIOUS-TIMEOUT-OUTPUT", "do not ship", "I cannot help")


class JUnitTest(unittest.TestCase):
    def setUp(self):
        self.record, _ = sample()
        self.xml = evals_extras.render_junit(self.record)
        self.root = ET.fromstring(self.xml.encode("utf-8"))
        self.cases = {c.get("name"): c for c in self.root.iter("testcase")}

    def test_declaration_and_one_suite(self):
        self.assertTrue(self.xml.startswith('<?xml version="1.0" encoding="UTF-8"?>\n'))
        self.assertEqual(self.root.tag, "testsuites")
        suites = self.root.findall("testsuite")
        self.assertEqual(len(suites), 1)
        self.assertEqual(suites[0].get("name"), "evals")

    def test_counts_match_the_cases_run(self):
        suite = self.root.find("testsuite")
        self.assertEqual(suite.get("tests"), "8")  # the not_run case is left out
        self.assertEqual(suite.get("failures"), "4")  # 2 regressed, 1 new failure, 1 review
        self.assertEqual(suite.get("errors"), "1")
        self.assertEqual(suite.get("skipped"), "0")
        self.assertEqual(suite.get("time"), "42.000")
        self.assertEqual(suite.get("timestamp"), "2026-11-30T09:00:00")
        for name in ("tests", "failures", "errors", "skipped", "time"):
            self.assertEqual(self.root.get(name), suite.get(name))
        self.assertEqual(len(self.cases), 8)
        self.assertNotIn("skipped", self.cases)
        self.assertTrue(all(c.get("classname") == "evals" for c in self.cases.values()))
        self.assertEqual(self.cases["refund"].get("time"), "0.250")

    def test_failure_types_and_messages(self):
        refund = self.cases["refund"].find("failure")
        self.assertEqual(refund.get("type"), "regression")
        self.assertEqual(refund.get("message"), "contains_any: none of 'manager approval' found")
        self.assertIn("passed in the baseline", refund.text)
        self.assertNotIn("max_words", refund.text)  # passing checks are not failures
        self.assertEqual(self.cases["new-long"].find("failure").get("type"), "failure")
        self.assertEqual(self.cases["judge"].find("failure").get("type"), "review")
        for name in ("fixed-one", "steady", "brand-new-pass"):
            self.assertIsNone(self.cases[name].find("failure"))
            self.assertIsNone(self.cases[name].find("error"))

    def test_error_element(self):
        error = self.cases["timeout"].find("error")
        self.assertEqual(error.get("type"), "TimeoutError")
        self.assertEqual(error.get("message"),
                         "TimeoutError: no answer within 30 s\n::warning::injected")
        self.assertIsNone(self.cases["timeout"].find("failure"))
        self.assertIsNone(self.cases["timeout"].find("system-out"))

    def test_hostile_text_round_trips_without_forbidden_characters(self):
        case = self.cases[HOSTILE_ID]  # the id survived as an attribute value
        out = case.find("system-out").text
        self.assertIn("<script>alert(1)</script></td>", out)
        self.assertIn("\n::set-output name=x::y", out)
        for forbidden in ("\x1b", "\x07", "\ud800", "\u202e"):  # spelled out, as everywhere
            self.assertNotIn(forbidden, out)
            self.assertNotIn(forbidden, self.xml)
        self.assertIn("\\x1b[31mred\\u202eevil\\ud800 bell\\x07 end", out)
        message = case.find("failure").get("message")
        self.assertEqual(message, "not_contains: found '<script>'\n::add-mask::x, 50%0A done")
        self.assertNotIn("<script>", self.xml)
        self.xml.encode("utf-8")  # no lone surrogate left

    def test_outputs_omitted(self):
        record, _ = sample(outputs_included=False)
        record["cases"][0]["output"] = "LEAKED OUTPUT"  # even if one slipped into the record
        text = evals_extras.render_junit(record)
        self.assertNotIn("system-out", text)
        self.assertNotIn("LEAKED", text)

    def test_record_without_change_or_times(self):
        record = {"cases": [{"id": "a", "status": "fail", "baseline": "pass", "checks": [
            check("equals", False, "differs")], "latency_s": 1.5},
            {"id": "b", "status": "pass", "baseline": "pass", "checks": [], "latency_s": None}]}
        root = ET.fromstring(evals_extras.render_junit(record))
        suite = root.find("testsuite")
        self.assertEqual((suite.get("tests"), suite.get("failures"), suite.get("time")),
                         ("2", "1", "1.500"))
        self.assertIsNone(suite.get("timestamp"))
        self.assertEqual(root.find(".//failure").get("type"), "regression")


def fenced_blocks(markdown):
    """[(fence, body)] of the fenced code blocks, parsed the CommonMark way: a block opened
    by N backticks closes at the first line that is only a run of at least N backticks."""
    blocks, lines, i = [], markdown.split("\n"), 0
    while i < len(lines):
        opening = re.match(r"^ {0,3}(`{3,})", lines[i])
        if not opening:
            i += 1
            continue
        fence, body, i = opening.group(1), [], i + 1
        while i < len(lines) and not re.match(r"^ {0,3}`{%d,}\s*$" % len(fence), lines[i]):
            body.append(lines[i])
            i += 1
        blocks.append((fence, "\n".join(body)))
        i += 1
    return blocks


def outside_fences(markdown):
    kept, inside = [], None
    for line in markdown.split("\n"):
        match = re.match(r"^ {0,3}(`{3,})", line)
        if inside is None and match:
            inside = match.group(1)
        elif inside is not None and re.match(r"^ {0,3}`{%d,}\s*$" % len(inside), line):
            inside = None
        elif inside is None:
            kept.append(line)
    return "\n".join(kept)


class MarkdownTest(unittest.TestCase):
    def setUp(self):
        self.record, self.previous = sample()
        self.md = evals_extras.render_markdown(self.record, self.previous)

    def test_headline_and_counts(self):
        first = self.md.split("\n")[0]
        self.assertTrue(first.startswith("## "))
        self.assertIn("2 regressions", first)
        self.assertIn("pass rate **42.9%** (3/8), last run 100.0%", self.md)
        self.assertIn("| regressed | errored | failed |", self.md)
        self.assertIn("| 2 | 1 | 3 | 1 | 1 | 2 | 3 | 8 |", self.md)

    def test_sections_in_reading_order(self):
        order = [self.md.index(h) for h in ("### Regressed (2)", "### Errored (1)",
                                            "### New and other failures (2)", "### Fixed (1)")]
        self.assertEqual(order, sorted(order))
        self.assertLess(self.md.index("#### refund"), self.md.index("### Errored"))
        self.assertIn("none of 'manager approval' found", self.md)
        self.assertIn("Removed from the case file: gone", self.md)
        self.assertNotIn("NOT-RUN-OUTPUT", self.md)
        self.assertNotIn("steady", self.md)  # passing cases are only counted

    def test_output_excerpt_cannot_leave_its_fence(self):
        blocks = fenced_blocks(self.md)
        hostile = [b for f, b in blocks if "alert(1)" in b]
        self.assertEqual(len(hostile), 1)
        fence = [f for f, b in blocks if "alert(1)" in b][0]
        self.assertGreater(len(fence), 3)  # longer than the ``` run inside
        self.assertIn("::set-output name=x::y", hostile[0])  # the whole excerpt stayed inside
        self.assertIn("\\x1b[31m", hostile[0])
        self.assertIn("\\u202e", hostile[0])

    def test_no_markup_outside_fences(self):
        rest = outside_fences(self.md)
        for raw in ("<script", "<b>", "</b>", "<img", "<!--", "**bold**", "](", "\x1b"):
            self.assertNotIn(raw, rest)
        self.assertNotIn("alert(1)", rest)
        heading = [l for l in rest.split("\n") if "case\\-" in l][0]
        self.assertEqual(heading,
                         '#### case\\-&lt;b&gt;\\|\\*x\\*\\|&lt;/b&gt;"id,\\:a')
        # no unescaped pipe or emphasis marker on any line built from model or case text
        for line in rest.split("\n"):
            if line.startswith("|"):
                continue  # the counts table: numbers only
            self.assertIsNone(re.search(r"(?<!\\)[|*_`\[\]]", line.replace("**", "", 2)
                                        if line.startswith("pass rate") else line), line)

    def test_outputs_omitted(self):
        record, previous = sample(outputs_included=False)
        record["cases"][0]["output"] = "LEAKED OUTPUT"
        text = evals_extras.render_markdown(record, previous)
        self.assertIn("(output omitted)", text)
        self.assertNotIn("LEAKED", text)
        for marker in OUTPUT_MARKERS:
            self.assertNotIn(marker, text)

    def test_excerpt_counts_the_characters_it_leaves_out(self):
        # the excerpt is of the spelled-out text (a control is 4 characters, CRLF is 1), so
        # the count is of that text too, never negative
        for output, left_out in (("\x1b" * 150, 200), ("a\r\n" * 300, 200)):
            text = evals_extras.render_markdown(make_record([entry("long", "fail", "new", output)]))
            self.assertIn(f"\n… ({left_out} more characters)\n", text)

    def test_all_green(self):
        record = make_record([entry("a", "pass", "passing", "ok")])
        text = evals_extras.render_markdown(record, {"a": {"id": "a", "status": "pass",
                                                   "baseline": "pass"}})
        self.assertTrue(text.startswith("## ✅ evals: no regressions\n"))
        self.assertNotIn("###", text)


# GitHub refuses a comment over 65,536 characters (and over 262,144 UTF-8 bytes); the workflow
# posts the report after its marker line.
COMMENT_LIMIT = 65536
COMMENT_MARKER = "<!-- evals-report -->\n"
RUN_PAGE = "https://github.com/owner/repo/actions/runs/42"


def big_run(secret=""):
    """(record, the ids in the report's order, worst first): 5,000 cases with ids of 200
    characters full of backticks and entities, long outputs made of backtick runs, markup and
    `secret`. The 20 regressions come last in the file; the Markdown report lists them first."""
    def case_id(n):
        return f"case-{n:04d}-" + ("`&*<" * 60)[:190]

    output = ("``````` <b>&amp;</b> " + secret) * 80
    cases = []
    for n in range(4980):
        if n < 1000:
            cases.append(entry(case_id(n), "error", "errored", baseline="pass", checks=[],
                               error="RuntimeError: " + "&<`" * 300))
        elif n < 4900:
            cases.append(entry(case_id(n), "fail", "new", output, checks=[
                check("not_contains", False, "found '&<`|'" * 60) for _ in range(3)]))
        else:
            cases.append(entry(case_id(n), "pass", "fixed", output, baseline="fail"))
    regressed = [entry(case_id(n), "fail", "regressed", output, baseline="pass", checks=[
        check("contains_any", False, "none of '&<`' found")]) for n in range(4980, 5000)]
    cases += regressed
    order = ([c["id"] for c in regressed] + [c["id"] for c in cases[:50]]
             + [c["id"] for c in cases[1000:1050]] + [c["id"] for c in cases[4900:4950]])
    return make_record(cases, removed=[f"gone-{n}" for n in range(2000)]), order


def shown_ids(md):
    """The case ids a Markdown report shows, in its order, as the ids the record holds."""
    ids = []
    for line in md.split("\n"):
        match = re.match(r"(?:#### |- )case\\-(\d{4})\\-", line)
        if match:
            ids.append(int(match.group(1)))
    return ids


class CommentSizeTest(unittest.TestCase):
    """The Markdown report fits one pull-request comment, however many cases the run has."""

    def test_a_5000_case_run_fits_one_comment_worst_cases_first(self):
        record, order = big_run()
        md = evals_extras.render_markdown(record, link=RUN_PAGE)
        self.assertLessEqual(len(COMMENT_MARKER + md), COMMENT_LIMIT)
        self.assertLessEqual(len((COMMENT_MARKER + md).encode("utf-8")), 262144)
        shown = shown_ids(md)
        expected = [int(i[5:9]) for i in order]
        self.assertGreater(len(shown), 20)  # every regression, then errored cases
        self.assertEqual(shown, expected[: len(shown)])
        self.assertLess(len(shown), len(expected))  # the budget, not the 50 a section, cut it
        headings = [md.index(h) for h in ("### Regressed (20)", "### Errored (1000)",
                                          "### New and other failures (3900)", "### Fixed (80)")]
        self.assertEqual(headings, sorted(headings))
        self.assertTrue(md.endswith(
            f"\n\n**{5000 - len(shown)} more cases not shown**, to fit a pull-request comment: "
            "the HTML report has every case, the pass rate by tag and the flaky cases "
            f"([this run's artifacts]({RUN_PAGE})).\n"), md[-400:])
        self.assertNotIn("gone-1", md)  # the list of removed cases went with the cut
        self.assertEqual(outside_fences(md).count("```"), 0)  # every fence closed

    def test_a_5000_case_run_of_regressions_with_long_outputs_fits_one_comment(self):
        output = "```` " + "`" * 30 + " <b>&amp;</b>\n" * 200
        cases = [entry(f"case-{n:04d}-" + "&`" * 95, "fail", "regressed", output,
                       baseline="pass", checks=[check("not_contains", False, "found '&'" * 50)])
                 for n in range(4500)]
        cases += [entry(f"case-{n:04d}", "error", "errored", baseline="pass", checks=[],
                        error="TimeoutError") for n in range(4500, 5000)]
        md = evals_extras.render_markdown(make_record(cases), link=RUN_PAGE)
        self.assertLessEqual(len(COMMENT_MARKER + md), COMMENT_LIMIT)
        shown = shown_ids(md)
        self.assertEqual(shown, list(range(len(shown))))  # regressions, in the record's order
        self.assertGreater(len(shown), 5)
        self.assertIn(f"\n\n**{5000 - len(shown)} more cases not shown**", md)
        self.assertIn("### Errored (500)\n\n… and 500 more\n", md)

    def test_a_case_longer_than_a_comment_is_counted_not_shown(self):
        reasons = [check(f"c{n}", False, "&" * 600) for n in range(200)]  # 600 kB escaped
        record = make_record([entry("huge", "fail", "regressed", "x", baseline="pass",
                                    checks=reasons)])
        md = evals_extras.render_markdown(record)
        self.assertLessEqual(len(md), 50000)
        self.assertNotIn("#### huge", md)
        self.assertIn("### Regressed (1)\n\n… and 1 more\n\n**1 more case not shown**", md)

    def test_without_a_link_the_cut_report_names_the_option(self):
        record, _ = big_run()
        md = evals_extras.render_markdown(record)
        self.assertIn("the flaky cases (`--html`).\n", md)
        self.assertNotIn("](", outside_fences(md))

    def test_a_small_run_is_not_cut(self):
        record, previous = sample()
        self.assertEqual(evals_extras.render_markdown(record, previous, link=RUN_PAGE),
                         evals_extras.render_markdown(record, previous))
        self.assertNotIn("not shown", evals_extras.render_markdown(record, link=RUN_PAGE))

    def test_the_report_command_links_the_run_and_fits_after_masking(self):
        # A credential of 8 characters masked as "[redacted]" (10) grows the text: the file the
        # workflow posts still fits.
        secret = "s3cr3tK9"
        record, _ = big_run(secret)
        with tempfile.TemporaryDirectory() as directory:
            path, md_path = (os.path.join(directory, n) for n in ("run.json", "report.md"))
            summary = os.path.join(directory, "summary.md")
            with open(path, "w", encoding="utf-8") as handle:
                json.dump(record, handle)
            env = {"GITHUB_SERVER_URL": "https://github.com", "GITHUB_REPOSITORY": "owner/repo",
                   "GITHUB_RUN_ID": "42", "REPORT_TOKEN": secret, "GITHUB_STEP_SUMMARY": summary}
            with unittest.mock.patch.dict(os.environ, env):
                code = evals.main(["report", path, "--markdown", md_path, "--github"],
                                  io.StringIO(), io.StringIO())
            self.assertEqual(code, 0)  # a report, not a gate
            with open(md_path, encoding="utf-8") as handle:
                md = handle.read()
            with open(summary, encoding="utf-8") as handle:
                self.assertEqual(handle.read(), md + "\n")
        self.assertNotIn(secret, md)
        self.assertIn("[redacted]", md)
        self.assertLessEqual(len(COMMENT_MARKER + md), COMMENT_LIMIT)
        self.assertIn(f"([this run's artifacts]({RUN_PAGE})).\n", md)


class TagCollector(html.parser.HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags, self.attributes, self.text = [], set(), []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.attributes.update(name for name, _ in attrs)

    def handle_data(self, data):
        self.text.append(data)


ALLOWED_TAGS = {"html", "head", "meta", "title", "style", "body", "main", "h1", "h2", "h4",
                "div", "span", "b", "section", "details", "summary", "p", "pre", "ul", "li",
                "code", "del", "ins", "table", "tr", "th", "td"}


class HtmlTest(unittest.TestCase):
    def setUp(self):
        self.record, self.previous = sample()
        self.page = evals_extras.render_html(self.record, self.previous)
        self.parsed = TagCollector()
        self.parsed.feed(self.page)
        self.text = "".join(self.parsed.text)

    def test_self_contained(self):
        self.assertTrue(self.page.startswith("<!DOCTYPE html>"))
        self.assertNotIn("<script", self.page.lower())
        # the only URL is the hostile output's, shown as escaped text
        self.assertEqual(self.page.count("http"), self.page.count("http-equiv") + 1)
        self.assertIn("&lt;a href=&quot;https://evil.example&quot;&gt;", self.page)
        clean = evals_extras.render_html(make_record([entry("a", "pass", "passing", "ok")]), {})
        self.assertNotIn("http", clean.replace("http-equiv", ""))
        for reference in ("src=", "href=", "url(", "@import", "<link", "<img"):
            self.assertNotIn(reference, clean)
        self.assertNotIn("<img", self.page)  # the hostile one is text: &lt;img
        self.assertIn("default-src 'none'", self.page)
        self.assertIn('name="viewport"', self.page)
        self.assertIn("@media (max-width:760px)", self.page)

    def test_only_our_tags_and_attributes(self):
        # hostile ids and outputs produced no element and no attribute of their own
        self.assertLessEqual(set(self.parsed.tags), ALLOWED_TAGS)
        self.assertLessEqual(self.parsed.attributes,
                             {"lang", "charset", "name", "content", "http-equiv", "class", "open",
                              "id"})

    def test_hostile_text_is_shown_as_text(self):
        self.assertIn("&lt;script&gt;alert(1)&lt;/script&gt;&lt;/td&gt;", self.page)
        self.assertIn("&quot;onerror=alert(2) x=&#x27;y&#x27;", self.page)
        self.assertIn('Sure! <script>alert(1)</script></td></pre></textarea> "onerror=', self.text)
        self.assertIn(HOSTILE_ID, self.text)
        self.assertIn("\\x1b[31mred\\u202eevil\\ud800", self.text)
        self.page.encode("utf-8")  # the lone surrogate was spelled out

    def regressed_card(self, case_id):
        start = self.page.index(f'<span class="id">{case_id}</span>')
        return self.page[start:self.page.index("</details>", start)]

    def test_regressed_case_shows_both_outputs_with_marks(self):
        card = self.regressed_card("refund")
        self.assertIn("Baseline output", card)
        self.assertIn("This run", card)
        self.assertIn("<del>", card)
        self.assertIn("<ins>", card)
        self.assertRegex(card, r"<del>[^<]*manager approval")
        self.assertRegex(card, r"<ins>[^<]*refunded \$150")
        self.assertIn("sorry the blender broke.", card)  # unchanged words unmarked
        self.assertIn("none of &#x27;manager approval&#x27; found", card)
        self.assertIn("input of refund", card)

    def test_reading_order(self):
        positions = [self.page.index(s) for s in (
            "Regressed: passed in the baseline", "Errored:", "Other failures", "Fixed (1)",
            "Passing (2)", "Removed from the case file")]
        self.assertEqual(positions, sorted(positions))
        self.assertLess(self.page.index('"id">refund<'), self.page.index('"id">timeout<'))
        self.assertNotIn("NOT-RUN-OUTPUT", self.page)
        self.assertIn("(no output: the call failed)", self.page)

    def test_outputs_omitted(self):
        record, previous = sample(outputs_included=False)
        record["cases"][0]["output"] = "LEAKED OUTPUT"
        previous["refund"]["output"] = "LEAKED PREVIOUS"
        page = evals_extras.render_html(record, previous)
        self.assertIn("(output omitted)", page)
        self.assertNotIn("LEAKED", page)
        for marker in OUTPUT_MARKERS:
            self.assertNotIn(marker, page)
        self.assertNotIn("<del>", page)

    def test_attempt_outputs_never_printed(self):
        record = make_record([entry("flaky", "fail", "regressed", "now", baseline="pass",
                                    flaky=True, attempts=[
                                        {"status": "pass", "output": "ATTEMPT-OUTPUT"},
                                        {"status": "fail", "output": "now"}])])
        page = evals_extras.render_html(record, {})
        self.assertNotIn("ATTEMPT-OUTPUT", page)
        self.assertIn("1/2 calls passed", page)
        self.assertIn(">flaky<", page)

    def test_says_when_no_latency_was_measured(self):
        # A replayed or re-scored answer has latency_s None: "not measured", never "0 ms",
        # in the passing table and on a case's card alike.
        record = make_record([entry("replayed", "pass", "passing", "ok", latency_s=None),
                              entry("live", "pass", "passing", "ok", latency_s=0.25),
                              entry("rescored", "fail", "new", "no", latency_s=None)])
        page = evals_extras.render_html(record, {})
        self.assertIn('"id">replayed</td><td>passing</td><td>not measured</td>', page)
        self.assertIn('"id">live</td><td>passing</td><td>250 ms</td>', page)
        self.assertIn('<div class="muted">now fail · not measured</div>', page)
        self.assertNotIn("0 ms<", page.replace("250 ms<", ""))

    def test_the_page_and_the_markdown_give_one_headline(self):
        # one verdict for every report: errors before a pass, failing cases counted
        for cases, tone, word, text in (
                ([entry("e", "error", "errored", error="boom")], "warn", "INCOMPLETE",
                 "1 errored, no regressions"),
                ([entry("f", "fail", "new", "x"), entry("p", "pass", "passing", "ok")], "good",
                 "PASS", "no regressions (1 failing)")):
            record = make_record(cases)
            self.assertIn(f'<h1><span class="verdict {tone}">{word}</span>evals: {text}</h1>',
                          evals_extras.render_html(record, {}))
            self.assertIn(f" evals: {text}\n", evals_extras.render_markdown(record))

    def test_no_baseline(self):
        record = make_record([entry("a", "fail", "new", "text")])
        page = evals_extras.render_html(record, {})
        self.assertIn("(no baseline output recorded)", page)
        self.assertNotIn("<ins>", page)


def parse_command(line):
    """A workflow command the way the runner reads one (actions/runner ActionCommand
    TryParseV2 and its UnescapeProperty / UnescapeData): (name, properties, data) or None."""
    line = line.lstrip()
    if not line.startswith("::"):
        return None
    end = line.find("::", 2)
    if end < 0:
        return None
    info, data = line[2:end], line[end + 2:]
    name, _, props = info.partition(" ")
    properties = {}
    for part in filter(None, props.strip().split(",")):
        key, sep, value = part.partition("=")
        if sep:
            for escaped, raw in (("%0D", "\r"), ("%0A", "\n"), ("%3A", ":"), ("%2C", ","),
                                 ("%25", "%")):
                value = value.replace(escaped, raw)
            properties[key] = value
    for escaped, raw in (("%0D", "\r"), ("%0A", "\n"), ("%25", "%")):
        data = data.replace(escaped, raw)
    return name, properties, data


class GithubAnnotationsTest(unittest.TestCase):
    def setUp(self):
        self.record, _ = sample()
        self.text = evals.github_annotations(self.record)
        self.lines = self.text.splitlines()

    def test_one_line_per_regression_and_error(self):
        self.assertTrue(self.text.endswith("\n"))
        self.assertEqual(len(self.text.split("\n")), len(self.lines) + 1)  # no stray breaks
        errors = [l for l in self.lines if l.startswith("::error ")]
        warnings = [l for l in self.lines if l.startswith("::warning ")]
        self.assertEqual(len(errors), 2)
        self.assertEqual(len(warnings), 1)
        self.assertEqual(len(self.lines), 3)
        for line in self.lines:
            self.assertTrue(line.startswith(("::error ", "::warning ")), line)
            self.assertNotIn("\r", line)

    def test_escaping_reaches_the_runner_intact(self):
        parsed = [parse_command(line) for line in self.lines]
        self.assertEqual(parsed[0], ("error", {"title": "Regression: refund"},
                                     "contains_any: none of 'manager approval' found"))
        name, properties, data = parsed[1]
        self.assertEqual(properties, {"title": "Regression: " + HOSTILE_ID})
        self.assertEqual(data, "not_contains: found '<script>'\n::add-mask::x, 50%0A done")
        self.assertEqual(parsed[2], ("warning", {"title": "Error: timeout"},
                                     "TimeoutError: no answer within 30 s\n::warning::injected"))
        self.assertTrue(self.lines[0].startswith("::error title=Regression%3A refund::"))
        self.assertIn("50%250A done", self.lines[1])
        self.assertIn("%2C", self.lines[1].split("::")[1])  # the id's comma, inside the title

    def test_hostile_output_cannot_start_a_command(self):
        hostile_reasons = ["x\n::set-output name=x::y", "::add-mask::secret", "%0A::error::a",
                           "a\r\n::stop-commands::t", "a\u2028::error::b", "a\x85::error::c",
                           "a\r::notice::d"]
        record = make_record([entry(f"c{i}", "fail", "regressed", HOSTILE, baseline="pass",
                                    checks=[check("regex", False, reason)])
                              for i, reason in enumerate(hostile_reasons)]
                             + [entry("e,x::y\nz", "error", "errored", error=HOSTILE)])
        text = evals.github_annotations(record)
        lines = text.split("\n")[:-1]
        self.assertEqual(len(lines), len(hostile_reasons) + 1)
        self.assertEqual(len(text.splitlines()), len(lines))  # no Unicode line break either
        for line in lines:
            self.assertTrue(line.startswith(("::error title=", "::warning title=")), line)
            name, properties, data = parse_command(line)
            self.assertEqual(list(properties), ["title"])  # no injected property
        name, properties, data = parse_command(lines[-1])
        self.assertEqual((name, properties["title"]), ("warning", "Error: e,x::y\\nz"))  # an id is one line

    def test_nothing_to_report(self):
        record = make_record([entry("a", "pass", "passing", "ok"),
                              entry("b", "fail", "new", "no")])
        self.assertEqual(evals.github_annotations(record), "")


class EndToEndTest(unittest.TestCase):
    """A record made by the command line (--rescore of recordings), then every report."""

    CASES = [
        {"id": "refund", "input": "Refund?", "checks": [
            {"type": "contains_any", "values": ["manager approval"]}]},
        {"id": "short", "input": "Short?", "checks": [{"type": "max_words", "n": 5}]},
    ]

    def run_cli(self, directory, outputs):
        with open(os.path.join(directory, "recordings.jsonl"), "w", encoding="utf-8") as handle:
            for case_id, output in outputs.items():
                handle.write(json.dumps({"id": case_id, "output": output}) + "\n")
        baseline = os.path.join(directory, "last_run.json")
        before = None
        if os.path.exists(baseline):
            with open(baseline, encoding="utf-8") as handle:
                before = json.load(handle)
        code = evals.main(["--cases", os.path.join(directory, "cases.jsonl"),
                           "--baseline", baseline,
                           "--rescore", os.path.join(directory, "recordings.jsonl")],
                          stdout=io.StringIO(), stderr=io.StringIO())
        with open(baseline, encoding="utf-8") as handle:
            return code, json.load(handle), before

    def test_rescored_regression(self):
        with tempfile.TemporaryDirectory() as directory:
            with open(os.path.join(directory, "cases.jsonl"), "w", encoding="utf-8") as handle:
                handle.write("\n".join(json.dumps(c) for c in self.CASES) + "\n")
            code, _, _ = self.run_cli(directory, {
                "refund": "Refunds over $100 need manager approval.", "short": "Friday."})
            self.assertEqual(code, 0)
            code, record, before = self.run_cli(directory, {
                "refund": "Refunded </td><script>x()</script> instantly.", "short": "Friday."})
            self.assertEqual(code, 1)
        previous = {e["id"]: e for e in before["cases"]}

        root = ET.fromstring(evals_extras.render_junit(record))
        suite = root.find("testsuite")
        self.assertEqual((suite.get("tests"), suite.get("failures"), suite.get("errors")),
                         ("2", "1", "0"))
        failure = root.find(".//testcase[@name='refund']/failure")
        self.assertEqual(failure.get("type"), "regression")
        self.assertIn("manager approval", failure.get("message"))

        page = evals_extras.render_html(record, previous)
        self.assertNotIn("<script", page)
        self.assertIn("need manager approval", page)
        self.assertIn("<del>", page)
        self.assertIn("<ins>", page)

        markdown = evals_extras.render_markdown(record, previous)
        self.assertIn("1 regression", markdown.split("\n")[0])

        lines = evals.github_annotations(record).splitlines()
        self.assertEqual(len(lines), 1)
        self.assertTrue(lines[0].startswith("::error title=Regression%3A refund::"))

    def test_ids_that_differ_by_what_cannot_be_seen_stay_apart_in_every_report(self):
        # CRLF against LF, a zero-width non-joiner, a bidi isolate, a no-break space: each id
        # must get its own JUnit name, Markdown line, HTML cell and terminal line.
        ids = ["a\r\nb", "a\nb", "a\rb", "a\u200cb", "ab", "a\u2066b", "a\xa0b", "a b",
               "a\\nb", "a\\u200cb"]  # the last two: a backslash, then letters
        cases = [{"id": i, "input": f"q{n}", "checks": [{"type": "equals", "value": "yes"}]}
                 for n, i in enumerate(ids)]
        with tempfile.TemporaryDirectory() as directory:
            path = os.path.join(directory, "cases.jsonl")
            with open(path, "w", encoding="utf-8") as handle:
                handle.write("".join(json.dumps(c) + "\n" for c in cases))
            with open(os.path.join(directory, "rec.jsonl"), "w", encoding="utf-8") as handle:
                handle.write("".join(json.dumps({"id": i, "output": "no"}) + "\n" for i in ids))
            files = {kind: os.path.join(directory, f"r.{kind}") for kind in ("xml", "md", "html")}
            out = io.StringIO()
            code = evals.main(["--cases", path, "--rescore", os.path.join(directory, "rec.jsonl"),
                               "--no-save", "--no-history", "--strict", "--junit", files["xml"],
                               "--markdown", files["md"], "--html", files["html"]],
                              stdout=out, stderr=io.StringIO())
            self.assertEqual(code, 1)
            shown = {}
            for kind, name in files.items():
                with open(name, encoding="utf-8") as handle:
                    shown[kind] = handle.read()
        names = [c.get("name") for c in ET.fromstring(shown["xml"]).iter("testcase")]
        self.assertEqual(len(set(names)), len(ids), names)
        self.assertIn("a\\r\\nb", names)
        self.assertIn("a\\u200cb", names)
        headings = [line for line in shown["md"].splitlines() if line.startswith("#### ")]
        self.assertEqual(len(set(headings)), len(ids), headings)
        cells = re.findall(r'<span class="id">(.*?)</span>', shown["html"])
        self.assertEqual(len(set(cells)), len(ids), cells)
        failing = [line for line in out.getvalue().splitlines() if "FAIL: " in line]
        self.assertEqual(len(set(failing)), len(ids), failing)
        for line in failing:
            self.assertNotIn("\r", line)

    def test_the_report_command_takes_a_record_without_a_summary(self):
        # read_record accepts it (the reports compute the summary), so `report` must too
        bare = {"format": "evals-run", "version": 1,
                "cases": [{"id": "k", "status": "fail", "baseline": "pass"}]}
        with tempfile.TemporaryDirectory() as directory:
            path = os.path.join(directory, "run.json")
            with open(path, "w", encoding="utf-8") as handle:
                json.dump(bare, handle)
            out, err = io.StringIO(), io.StringIO()
            code = evals.main(["report", path, "--markdown", os.path.join(directory, "r.md")],
                              stdout=out, stderr=err)
        self.assertEqual(code, 0, err.getvalue())
        self.assertIn("pass rate 0.0% (0/1)\n1 regressed, 0 fixed", out.getvalue())
        self.assertIn("REGRESSED: k\n", out.getvalue())


class SpooledRecordTest(unittest.TestCase):
    """A run's record keeps its entries in a spool (a temporary file): every report reads them
    from there, the same as from a list, without holding them all."""

    @staticmethod
    def record(count, spool, passed_before=("c1", "c2")):
        # every 50th case fails (c0, c50...), the others pass
        cases = [evals.Case(f"c{n}", "q", ({"type": "contains_all", "values": ["ok"]},))
                 for n in range(count)]
        answers = {f"c{n}": ("ok " if n % 50 else "no ") + "word " * 400 for n in range(count)}
        results = evals.run_cases(cases, evals.replay_client(answers))
        before = {i: {"id": i, "status": "pass", "baseline": "pass"} for i in passed_before}
        run = evals.RunResult(results, "2026-01-01T00:00:00+00:00", "2026-01-01T00:00:09+00:00",
                              "t")
        return evals.make_record(run, evals.Baseline(before), cases,
                                 entries=evals._Spool() if spool else None)

    def test_every_report_is_the_same_from_the_spool(self):
        spooled, listed = self.record(120, True), self.record(120, False)
        self.assertIsInstance(spooled["cases"], evals._Spool)
        for render in (evals_extras.render_junit, evals_extras.render_markdown, evals_extras.render_html,
                       evals.github_annotations, evals.format_summary):
            with self.subTest(render=render.__name__):
                self.assertEqual(render(spooled), render(listed))

    def test_the_summary_parses_only_the_entries_it_lists(self):
        # c0 passed before and fails now (regressed), c50 and c100 fail (new), the other 117
        # pass: the summary lists three entries, with -q the regression alone, and parses no
        # other entry of the spool
        spooled = self.record(120, True, passed_before=("c0", "c1", "c2"))
        listed = self.record(120, False, passed_before=("c0", "c1", "c2"))
        for quiet, shown in ((False, ["REGRESSED: c0", "NEW FAIL: c50", "NEW FAIL: c100"]),
                             (True, ["REGRESSED: c0"])):
            with self.subTest(quiet=quiet):
                expected = evals.format_summary(listed, quiet)
                with unittest.mock.patch.object(json, "loads", wraps=json.loads) as parse:
                    summary = evals.format_summary(spooled, quiet)
                self.assertEqual(summary, expected)
                self.assertEqual([line for line in summary.splitlines() if "FAIL" in line
                                  or "REGRESSED" in line], shown)
                self.assertEqual(parse.call_count, len(shown))

    def test_the_spool_gives_back_the_entries_asked_for_in_order(self):
        spooled, listed = self.record(120, True), self.record(120, False)

        def failed(change, status):
            return status == "fail"

        self.assertEqual(list(evals._entries_where(spooled["cases"], failed)),
                         [json.loads(json.dumps(e)) for e in listed["cases"]
                          if e["status"] == "fail"])
        self.assertEqual([e["id"] for e in evals._entries_where(listed["cases"], failed)],
                         ["c0", "c50", "c100"])

    def test_the_record_is_written_the_same_from_the_spool(self):
        # 120 entries of 2 KB: the spool gives them back in several blocks of lines
        for count in (120, 1, 0):
            with self.subTest(count=count):
                spooled, listed = self.record(count, True), self.record(count, False)
                self.assertEqual("".join(evals.record_chunks(spooled)),
                                 "".join(evals.record_chunks(listed)))
                self.assertEqual(list(spooled["cases"]),
                                 [json.loads(json.dumps(e)) for e in listed["cases"]])

    def test_a_report_holds_only_the_entries_it_shows(self):
        import tracemalloc

        record = self.record(4000, True)  # 4000 entries of 2 KB: 8 MB if held
        for render in (evals_extras.render_markdown, evals_extras.render_html, evals.github_annotations):
            with self.subTest(render=render.__name__):
                tracemalloc.start()
                try:
                    render(record)
                    peak = tracemalloc.get_traced_memory()[1]
                finally:
                    tracemalloc.stop()
                self.assertLess(peak, 3_000_000)

    def test_record_replaces_the_output_of_each_row_it_ran(self):
        with tempfile.TemporaryDirectory() as directory:
            path = os.path.join(directory, "rec.jsonl")
            with open(path, "w", encoding="utf-8") as handle:
                handle.writelines(json.dumps({"id": f"c{n}", "output": "old " * 250}) + "\n"
                                  for n in range(2000))
            record = self.record(2000, True)
            evals._save_recordings(path, record, io.StringIO())
            with open(path, encoding="utf-8") as handle:
                rows = [json.loads(line) for line in handle]
        self.assertEqual([r["id"] for r in rows], [f"c{n}" for n in range(2000)])
        self.assertTrue(rows[1]["output"].startswith("ok word"))

    def test_record_keeps_the_order_and_fields_of_the_rows_it_keeps(self):
        with tempfile.TemporaryDirectory() as directory:
            path = os.path.join(directory, "rec.jsonl")
            with open(path, "w", encoding="utf-8") as handle:
                handle.write("\ufeff" + "\n".join(json.dumps(row) for row in (
                    {"id": "c5", "output": "kept", "note": "mine"},
                    {"id": "c1", "output": "first", "reasoning": "old thinking", "note": "n"},
                    {"id": "c5", "output": "the last of two", "note": "last"},
                    {"id": "c7", "output": "not run"})) + "\n")
            record = self.record(3, True)
            entries = list(record["cases"])
            self.assertEqual([e["change"] for e in entries], ["new", "passing", "passing"])
            out = io.StringIO()
            evals._save_recordings(path, record, out)
            with open(path, encoding="utf-8") as handle:
                rows = [json.loads(line) for line in handle]
        ok = "ok " + "word " * 400
        self.assertEqual(rows, [
            {"id": "c5", "output": "the last of two", "note": "last"},
            {"id": "c1", "output": ok, "note": "n", "input": "q"},
            {"id": "c7", "output": "not run"},
            {"id": "c0", "input": "q", "output": "no " + "word " * 400},
            {"id": "c2", "input": "q", "output": ok}])
        self.assertEqual(out.getvalue(), f"evals: recorded 3 outputs of this run in {path} "
                                         "(5 in all)\n")

if __name__ == "__main__":
    unittest.main()
