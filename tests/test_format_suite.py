"""The JSON Schema Test Suite's format tests (draft 2020-12, optional/format) for every format
the json_schema check claims, each case run through the check as the suite gives it; an RFC 3986
grammar written out in full as an independent oracle for `uri` and `uri-reference`; and answers
with a bad URI failing on the command line.

The suite is not copied into this repository: JSON_SCHEMA_TEST_SUITE names a copy of it (the
folder that holds tests/draft2020-12). .ci/run takes the one inside the pinned jsonschema
source distribution from PyPI (docs/development.md); without it those tests are skipped.

Run from the repository root: python -m unittest tests.test_format_suite
"""

import io
import json
import os
import random
import re
import tempfile
import unittest

import evals
import evals_extras

SUITE_ROOT = os.environ.get("JSON_SCHEMA_TEST_SUITE")
SUITE = SUITE_ROOT and os.path.join(SUITE_ROOT, "tests", "draft2020-12", "optional", "format")
needs_suite = unittest.skipUnless(
    SUITE and os.path.isdir(SUITE), "JSON_SCHEMA_TEST_SUITE names no copy of the suite"
)

# The suite's tests the check deliberately does not follow: (file, test description): reason.
# SuiteTest asserts each still disagrees, so an entry that starts agreeing fails the suite.
_EMAIL_RULE = (
    "docs/checks.md's email rule is a pragmatic local@domain: no quoted local part and no "
    "[address] domain, which RFC 5321's Mailbox allows"
)
SKIPPED = {
    ("email.json", "a quoted string with a space in the local part is valid"): _EMAIL_RULE,
    ("email.json", "a quoted string with a double dot in the local part is valid"): _EMAIL_RULE,
    ("email.json", "a quoted string with a @ in the local part is valid"): _EMAIL_RULE,
    ("email.json", "an IPv4-address-literal after the @ is valid"): _EMAIL_RULE,
    ("email.json", "an IPv6-address-literal after the @ is valid"): _EMAIL_RULE,
}


def suite_cases():
    """[(file, group description, schema, test)] of the suite's file of every claimed format."""
    cases = []
    for name in sorted(f"{format}.json" for format in evals_extras.FORMATS):
        with open(os.path.join(SUITE, name), encoding="utf-8") as handle:
            for group in json.load(handle):
                for test in group["tests"]:
                    cases.append((name, group["description"], group["schema"], test))
    return cases


def check_passes(schema, data):
    """Whether the registered json_schema check, given `schema`, passes `data` as JSON text."""
    check = {"type": "json_schema", "schema": schema}
    problems = evals.validate_check(check)
    if problems:
        raise AssertionError(f"the suite's schema {schema!r} is refused: {problems}")
    return evals.run_check(check, json.dumps(data)).passed


@needs_suite
class SuiteTest(unittest.TestCase):
    def test_the_suite_has_a_file_per_claimed_format(self):
        found = {name[: -len(".json")] for name in os.listdir(SUITE) if name.endswith(".json")}
        self.assertLessEqual(set(evals_extras.FORMATS), found)

    def test_each_case_gets_the_suites_verdict(self):
        for name, group, schema, test in suite_cases():
            with self.subTest(file=name, group=group, test=test["description"]):
                passed = check_passes(schema, test["data"])
                if (name, test["description"]) in SKIPPED:
                    self.assertNotEqual(passed, test["valid"], "skipped, yet agrees now")
                else:
                    self.assertEqual(passed, test["valid"], test["data"])

    def test_skipped_entries_name_real_tests(self):
        names = [(name, test["description"]) for name, _, _, test in suite_cases()]
        self.assertEqual(len(names), len(set(names)), "a (file, description) names two tests")
        self.assertLessEqual(set(SKIPPED), set(names))



# RFC 3986 Appendix A transcribed rule by rule into one regular expression per format, IPv6address
# and IPv4address included, as an oracle independent of the check's split-then-check code.
_HEXDIG = "[0-9A-Fa-f]"
_UNRESERVED = r"[A-Za-z0-9\-._~]"
_PCT = f"%{_HEXDIG}{_HEXDIG}"
_SUB = r"[!$&'()*+,;=]"
_PCHAR = f"(?:{_UNRESERVED}|{_PCT}|{_SUB}|[:@])"
_SEGMENT = f"{_PCHAR}*"
_SEGMENT_NZ = f"{_PCHAR}+"
_SEGMENT_NZ_NC = f"(?:{_UNRESERVED}|{_PCT}|{_SUB}|@)+"
_PATH_ABEMPTY = f"(?:/{_SEGMENT})*"
_PATH_ABSOLUTE = f"/(?:{_SEGMENT_NZ}(?:/{_SEGMENT})*)?"
_PATH_NOSCHEME = f"{_SEGMENT_NZ_NC}(?:/{_SEGMENT})*"
_PATH_ROOTLESS = f"{_SEGMENT_NZ}(?:/{_SEGMENT})*"
_DEC_OCTET = "(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9][0-9]|[0-9])"
_IPV4 = rf"{_DEC_OCTET}\.{_DEC_OCTET}\.{_DEC_OCTET}\.{_DEC_OCTET}"
_H16 = f"{_HEXDIG}{{1,4}}"
_LS32 = f"(?:{_H16}:{_H16}|{_IPV4})"
_IPV6 = "(?:" + "|".join([
    f"(?:{_H16}:){{6}}{_LS32}",
    f"::(?:{_H16}:){{5}}{_LS32}",
    f"(?:{_H16})?::(?:{_H16}:){{4}}{_LS32}",
    f"(?:(?:{_H16}:){{0,1}}{_H16})?::(?:{_H16}:){{3}}{_LS32}",
    f"(?:(?:{_H16}:){{0,2}}{_H16})?::(?:{_H16}:){{2}}{_LS32}",
    f"(?:(?:{_H16}:){{0,3}}{_H16})?::{_H16}:{_LS32}",
    f"(?:(?:{_H16}:){{0,4}}{_H16})?::{_LS32}",
    f"(?:(?:{_H16}:){{0,5}}{_H16})?::{_H16}",
    f"(?:(?:{_H16}:){{0,6}}{_H16})?::",
]) + ")"
_IPVFUTURE = rf"[vV]{_HEXDIG}+\.(?:{_UNRESERVED}|{_SUB}|:)+"
_IP_LITERAL = rf"\[(?:{_IPV6}|{_IPVFUTURE})\]"
_REG_NAME = f"(?:{_UNRESERVED}|{_PCT}|{_SUB})*"
_HOST = f"(?:{_IP_LITERAL}|{_IPV4}|{_REG_NAME})"
_USERINFO = f"(?:{_UNRESERVED}|{_PCT}|{_SUB}|:)*"
_AUTHORITY = f"(?:{_USERINFO}@)?{_HOST}(?::[0-9]*)?"
_QUERY = f"(?:{_PCHAR}|[/?])*"
_TAIL = rf"(?:\?{_QUERY})?(?:#{_QUERY})?"  # [ "?" query ] [ "#" fragment ]: the same rule
_HIER_PART = f"(?://{_AUTHORITY}{_PATH_ABEMPTY}|{_PATH_ABSOLUTE}|{_PATH_ROOTLESS}|)"
_URI = rf"[A-Za-z][A-Za-z0-9+\-.]*:{_HIER_PART}{_TAIL}"
_RELATIVE_PART = f"(?://{_AUTHORITY}{_PATH_ABEMPTY}|{_PATH_ABSOLUTE}|{_PATH_NOSCHEME}|)"
ORACLE = {
    "uri": re.compile(_URI),
    "uri-reference": re.compile(f"{_URI}|{_RELATIVE_PART}{_TAIL}"),
}

# Pieces the generated strings are made of: every delimiter, the characters URIs exclude, and
# hosts of each kind, valid and broken.
PIECES = [
    "http", "h", "x+1.-", "1", "_", ":", "//", "/", "?", "#", "@", ".", "..", "a", "Z", "~", "-",
    "!", "'", "=", "%41", "%4", "%", "%zz", " ", "\\", "\"", "<", "{", "|", "^", "`", "\u00e9",
    "\n", "[", "]", "80", "abc", "0", "127.0.0.1", "256.1.1.1", "01.2.3.4", "[::1]", "[::]",
    "[1:2:3:4:5:6:7:8]", "[1:2:3:4:5:6:7::]", "[1:2:3:4:5:6:7:8:9]", "[1::2::3]",
    "[::ffff:1.2.3.4]", "[::ffff:01.2.3.4]", "[1:2:3:4:5:6:1.2.3.4]", "[1:2:3:4:5:6:7:1.2.3.4]",
    "[12345::]", "[fe80::1%25eth0]", "[v1.x]", "[V1f.a:b!]", "[v.x]", "[vg.x]", "[v1.]",
    "[1.2.3.4]", "[]", "[::1", "::1]", "user:pw@", "a@b@",
]


def generated_strings(count, seed):
    """`count` strings of 1 to 7 random PIECES (seeded: the same strings every run)."""
    pick = random.Random(seed)
    return ["".join(pick.choices(PIECES, k=pick.randint(1, 7))) for _ in range(count)]


class OracleTest(unittest.TestCase):
    def assertAgrees(self, fmt, text):
        with self.subTest(fmt=fmt, text=text):
            expected = ORACLE[fmt].fullmatch(text) is not None
            self.assertEqual(evals_extras._is_format(text, fmt), expected)

    def test_generated_strings(self):
        strings = generated_strings(4000, seed=3986)
        valid = [text for text in strings if ORACLE["uri-reference"].fullmatch(text)]
        self.assertGreater(len(valid), 400)  # the pieces reach valid references too
        for text in strings:
            for prefix in ("", "http://", "s:", "//"):
                self.assertAgrees("uri", prefix + text)
                self.assertAgrees("uri-reference", prefix + text)

    def test_ip_literals(self):
        # every placement of "::" among 0 to 8 groups, with and without an embedded IPv4
        for groups in range(9):
            for gap in range(groups + 1):
                for tail in ("", ":1.2.3.4", ":01.2.3.4"):
                    words = ["fe80"] * groups
                    address = ":".join(words[:gap]) + "::" + ":".join(words[gap:]) + tail
                    no_gap = ":".join(words) + tail
                    for inside in (address, no_gap, address.replace("::", ":::")):
                        self.assertAgrees("uri", f"http://[{inside}]/")

    def test_by_hand(self):
        for text, uri, reference in [
            ("http://example.com:abc/path", False, False),  # port is *DIGIT
            ("http://example.com:/path", True, True),  # an empty port
            ("http://a:b@example.com:8080/", True, True),
            ("http://a@b@example.com/", False, False),  # "@" is not in userinfo
            ("http://[v7.a:b]/", True, True),
            ("http://[::1%25eth0]/", False, False),  # RFC 6874 zones are not RFC 3986
            ("file:///etc/hosts", True, True),  # an empty reg-name
            ("a:b", True, True),
            ("./a:b", False, True),
            ("a/b:c", False, True),  # a colon after the first segment
            (":a", False, False),  # an empty scheme
            ("http://a/#b#c", False, False),  # "#" is not in a fragment
            ("?#", False, True),
        ]:
            with self.subTest(text):
                self.assertEqual(evals_extras._is_format(text, "uri"), uri)
                self.assertEqual(evals_extras._is_format(text, "uri-reference"), reference)
                self.assertEqual(ORACLE["uri"].fullmatch(text) is not None, uri)
                self.assertEqual(ORACLE["uri-reference"].fullmatch(text) is not None, reference)


class CommandLineTest(unittest.TestCase):
    def rescore(self, cases, outputs):
        """`evals --cases C --rescore R --no-save --json J` on `cases` with recorded `outputs`
        ({id: output}): (exit code, printed text, {id: status} from the --json record)."""
        with tempfile.TemporaryDirectory() as folder:
            def write(name, rows):
                with open(os.path.join(folder, name), "w", encoding="utf-8") as handle:
                    handle.write("".join(json.dumps(row) + "\n" for row in rows))
            write("cases.jsonl", cases)
            write("rec.jsonl", [{"id": key, "output": value} for key, value in outputs.items()])
            out, err = io.StringIO(), io.StringIO()
            code = evals.main(["--cases", os.path.join(folder, "cases.jsonl"), "--rescore",
                               os.path.join(folder, "rec.jsonl"), "--no-save", "--json",
                               os.path.join(folder, "run.json")], out, err)
            with open(os.path.join(folder, "run.json"), encoding="utf-8") as handle:
                statuses = {row["id"]: row["status"] for row in json.load(handle)["cases"]}
        return code, out.getvalue() + err.getvalue(), statuses

    def test_broken_authorities_fail(self):
        check = {"type": "json_schema",
                 "schema": {"type": "object", "required": ["link"],
                            "properties": {"link": {"type": "string", "format": "uri"}}}}
        answers = {
            "port": "http://example.com:abc/path",
            "userinfo": "https://[@example.org/test.txt",
            "ip-literal": "http://[::ffff:01.2.3.4]/",
            "good": "http://user@[2001:db8::7]:8080/a?b#c",
        }
        cases = [{"id": key, "input": key, "checks": [check]} for key in answers]
        outputs = {key: json.dumps({"link": value}) for key, value in answers.items()}
        code, printed, statuses = self.rescore(cases, outputs)
        self.assertEqual(code, 0, printed)  # new failures, no baseline to regress from
        self.assertEqual(statuses, {"port": "fail", "userinfo": "fail", "ip-literal": "fail",
                                    "good": "pass"})
        self.assertIn("pass rate 25.0% (1/4)", printed)
        self.assertIn("NEW FAIL: port\n    json_schema: $.link: "
                      "'http://example.com:abc/path' is not a valid uri", printed)

    @needs_suite
    def test_the_uri_file_through_the_command_line(self):
        cases, outputs, expected = [], {}, {}
        with open(os.path.join(SUITE, "uri.json"), encoding="utf-8") as handle:
            groups = json.load(handle)
        for group in groups:
            for number, test in enumerate(group["tests"]):
                key = f"t{number}"
                cases.append({"id": key, "input": test["description"],
                              "checks": [{"type": "json_schema", "schema": group["schema"]}]})
                outputs[key] = json.dumps(test["data"])
                expected[key] = "pass" if test["valid"] else "fail"
        _, printed, statuses = self.rescore(cases, outputs)
        self.assertEqual(statuses, expected, printed)


if __name__ == "__main__":
    unittest.main()
