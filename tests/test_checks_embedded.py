"""The checks of JSON embedded in prose and of XML (json_embedded, xml_valid) and the JSON
Schema `format` keyword, all from evals_extras.py: passing and failing outputs, their reasons,
the refusals at load (evals.validate_check) and scoring through evals.run_check.

Run from the repository root: python -m unittest tests.test_checks_embedded
"""

import unittest
import unittest.mock

import evals
import evals_extras  # noqa: F401  (registers json_embedded and xml_valid)
from tests.test_checks import CheckTestCase as CheckTest


EMBEDDED = {"type": "json_embedded"}


class JsonEmbeddedTest(CheckTest):
    def test_an_object_in_prose(self):
        self.assertPasses(EMBEDDED, 'Sure! Here it is: {"id": 7, "tags": ["a"]} Anything else?',
                          "one JSON object at line 1 column 19")
        self.assertPasses(EMBEDDED, "The list:\n[1, 2, 3]\nDone.", "one JSON array at line 2")

    def test_a_nested_value_counts_once(self):
        self.assertPasses(EMBEDDED, 'Result: {"a": {"b": [1, {"c": 2}]}}.')

    def test_a_fenced_block(self):
        for fence in ("```json", "```JSON", "```"):
            with self.subTest(fence):
                self.assertPasses(EMBEDDED, f'Here:\n{fence}\n{{"a": 1}}\n```\nThanks.',
                                  "one JSON object at the fenced block at line 3 column 1")

    def test_a_fence_wins_over_brackets_in_the_prose(self):
        output = 'See [1] and [2]:\n```json\n{"a": 1}\n```'
        self.assertPasses(EMBEDDED, output, "fenced block")
        self.assertFails(EMBEDDED, 'See [1] and [2]: {"a": 1}', "3 JSON values")

    def test_a_python_fence_is_not_taken_for_json(self):
        output = '```python\nx = {"z": 1}\n```\nand\n```json\n{"a": 1}\n```'
        result = self.assertPasses(EMBEDDED, output)
        self.assertIn("line 6", result.reason)

    def test_prose_braces_are_not_candidates(self):
        self.assertPasses(EMBEDDED, 'Fill {name} in [brackets]: {"name": "x"}')
        self.assertFails(EMBEDDED, "Fill {name} in [brackets].",
                         "no JSON object or array in the output")

    def test_none(self):
        self.assertFails(EMBEDDED, "No JSON here, only prose.",
                         "no JSON object or array in the output")
        self.assertFails(EMBEDDED, 'a bare "string" and 42', "no JSON object or array")

    def test_none_parses_and_says_which(self):
        result = self.assertFails(EMBEDDED, 'First {"a": 1,} then\n["x" "y"]',
                                  "2 candidates, none parses")
        self.assertIn("line 1 column 7: ", result.reason)  # json's own words differ by version
        self.assertIn("line 2 column 1: Expecting ',' delimiter at line 2 column 6",
                      result.reason)
        self.assertFails(EMBEDDED, '```json\n{"a": 1,}\n```',
                         "1 candidate, none parses: the fenced block at line 2 column 1")

    def test_nan_and_infinity_are_not_json(self):
        result = self.assertFails(EMBEDDED, 'Value: {"a": NaN, "b": {"c": 1}}',
                                  "NaN is not a JSON value")
        self.assertIn("1 candidate", result.reason)  # not {"c": 1} inside it
        self.assertFails(EMBEDDED, "[Infinity]", "Infinity is not a JSON value")
        self.assertFails(EMBEDDED, '```json\n{"a": -Infinity}\n```', "Infinity")

    def test_several_parse_and_says_where(self):
        result = self.assertFails(EMBEDDED, '{"a": 1}\nand\n{"b": 2}',
                                  "2 JSON values, expected exactly one")
        self.assertIn("""at line 1 column 1 ('{"a": 1}'); at line 3 column 1""", result.reason)
        self.assertFails(EMBEDDED, '```json\n[1]\n```\n```\n[2]\n```', "2 JSON values")

    def test_one_candidate_parses_among_failures(self):
        self.assertPasses(EMBEDDED, '["unclosed" then {"ok": true}')

    def test_keys(self):
        check = {"type": "json_embedded", "keys": ["id", "name"]}
        self.assertPasses(check, 'Answer: {"id": 1, "name": "x", "extra": 0}',
                          "with keys 'id', 'name'")
        self.assertFails(check, 'Answer: {"id": 1}', "misses keys: 'name'")
        self.assertFails(check, "Answer: [1]", "is an array, expected an object")

    def test_schema(self):
        check = {"type": "json_embedded",
                 "schema": {"type": "object", "required": ["when"],
                            "properties": {"when": {"type": "string", "format": "date"}}}}
        self.assertPasses(check, 'Booked: {"when": "2024-02-29"}', "matching the schema")
        result = self.assertFails(check, 'Booked: {"when": "2023-02-29"}',
                                  "the JSON at line 1 column 9: $.when: '2023-02-29' is not a "
                                  "valid date")
        self.assertEqual(result.quoted, ("'2023-02-29'",))
        self.assertFails(check, "Booked: {}", "missing required key 'when'")

    def test_negated(self):
        self.assertPasses(dict(EMBEDDED, negate=True), "no JSON")
        self.assertFails(dict(EMBEDDED, negate=True), '{"a": 1}')

    def test_load_time_refusals(self):
        self.assertProblem({"type": "json_embedded", "keys": []}, "parameter 'keys'")
        self.assertProblem({"type": "json_embedded", "keys": "id"}, "parameter 'keys'")
        self.assertProblem({"type": "json_embedded", "schema": {"oneOf": []}},
                           "unsupported keyword 'oneOf'")
        self.assertProblem({"type": "json_embedded", "allow_fence": True},
                           "unknown parameter 'allow_fence'")

    def test_a_hostile_text_stays_fast(self):
        import time

        for output in ("{" * 200_000, '{"a":' * 100_000, "[{" * 100_000, "[" * 200_000,
                       '[1] ' * 50_000):
            start = time.perf_counter()
            self.assertFalse(evals.run_check(EMBEDDED, output).passed)
            self.assertLess(time.perf_counter() - start, 5, output[:10])
        self.assertFails(EMBEDDED, '["x" "y"] ' * 200 + '{"a": 1}',
                         "more than 100 candidates fail to parse")


XML = {"type": "xml_valid"}


class XmlValidTest(CheckTest):
    def test_well_formed(self):
        self.assertPasses(XML, '<?xml version="1.0" encoding="UTF-8"?>\n<order id="7"><item/>'
                               "</order>", "well-formed XML (root element 'order')")
        self.assertPasses(XML, "\n  <a>x &amp; y</a>\n")

    def test_errors_name_the_parser_error_and_where(self):
        self.assertFails(XML, "<a><b></a>", "not well-formed XML: mismatched tag at line 1, "
                                            "column 9")
        self.assertFails(XML, "\n\n  <a><b></a>", "mismatched tag at line 3, column 11")
        self.assertFails(XML, "<a>\n  <b>x & y</b>\n</a>",
                         "not well-formed (invalid token) at line 2")
        self.assertFails(XML, "<a/><b/>", "junk after document element")
        self.assertFails(XML, "just text", "syntax error at line 1, column 1")
        self.assertFails(XML, "Here: <a/>", "not well-formed XML")
        self.assertFails(XML, "<a>\ud800</a>", "lone surrogate")  # found by the property test

    def test_fence(self):
        fenced = "```xml\n<a/>\n```"
        self.assertFails(XML, fenced, "set allow_fence to accept that")
        self.assertPasses(dict(XML, allow_fence=True), fenced)
        self.assertPasses(dict(XML, allow_fence=True), "```\n<a/>\n```")
        self.assertPasses(dict(XML, allow_fence=True), "<a/>")
        self.assertFails(dict(XML, allow_fence=True), "```xml\n<a>\n```",
                         "no element found at line 2")
        self.assertFails(dict(XML, allow_fence=True), "Here:\n```xml\n<a/>\n```")

    def test_an_external_subset_may_declare_entities(self):
        # XML 1.0 section 4.1, WFC: Entity Declared binds only documents without an external
        # subset (or parameter entity references), or with standalone='yes'
        xhtml = ('<!DOCTYPE html PUBLIC "-//W3C//DTD XHTML 1.0 Strict//EN" '
                 '"http://www.w3.org/TR/xhtml1/DTD/xhtml1-strict.dtd">\n'
                 '<html xmlns="http://www.w3.org/1999/xhtml"><body><p title="a&nbsp;b">'
                 "a&nbsp;b&copy;</p></body></html>")
        self.assertPasses(XML, xhtml,
                          "well-formed XML (root element '{http://www.w3.org/1999/xhtml}html')")
        self.assertEqual(self.command(XML, xhtml), (0, "pass xml_valid: well-formed XML (root "
                         "element '{http://www.w3.org/1999/xhtml}html')\ncase: pass\n"))
        self.assertPasses(XML, '<!DOCTYPE a SYSTEM "a.dtd"><a>&nbsp;</a>')
        self.assertPasses(XML, '<!DOCTYPE a [<!ENTITY % p "x"> %p;]><a>&nbsp;</a>')

    def test_the_dtd_is_never_fetched(self):
        xhtml = '<!DOCTYPE html SYSTEM "http://127.0.0.1:9/x.dtd"><html>&nbsp;</html>'
        refused = unittest.mock.Mock(side_effect=AssertionError("a connection was attempted"))
        with unittest.mock.patch("socket.socket.connect", refused), \
                unittest.mock.patch("urllib.request.urlopen", refused):
            self.assertPasses(XML, xhtml)
        refused.assert_not_called()

    def test_an_undeclared_entity_fails_without_an_external_subset_and_is_named(self):
        result = self.assertFails(XML, "<p>a&nbsp;b</p>",
                                  "not well-formed XML: undefined entity &nbsp; at line 1, "
                                  "column 5")
        self.assertEqual(result.quoted, ("&nbsp;",))
        self.assertEqual(self.command(XML, "<p>a&nbsp;b</p>"), (1, "FAIL xml_valid: not "
                         "well-formed XML: undefined entity &nbsp; at line 1, column 5\n"
                         "case: fail\n"))
        self.assertFails(XML, '<!DOCTYPE p [<!ENTITY x "y">]><p>&x;&nbsp;</p>',
                         "undefined entity &nbsp; at line 1, column 37")
        self.assertFails(XML, '<p a="&lt;&x;&nbsp;"/>', "undefined entity &x; at line 1, "
                                                        "column 1")  # expat: the tag's start
        self.assertFails(XML, '<?xml version="1.0" standalone="yes"?>\n'
                              '<!DOCTYPE p SYSTEM "p.dtd"><p>&nbsp;</p>',
                         "undefined entity &nbsp; at line 2, column 31")

    def test_predefined_entities_and_character_references(self):
        self.assertPasses(XML, "<p a='&quot;&apos;'>&amp;&lt;&gt;&quot;&apos;&#233;&#xE9;</p>")
        self.assertPasses(XML, '<?xml version="1.0" standalone="yes"?><p>&amp;&#160;</p>')
        self.assertFails(XML, "<p>&#0;</p>", "reference to invalid character number")

    def test_load_time_refusals(self):
        self.assertProblem({"type": "xml_valid", "allow_fence": "yes"},
                           "parameter 'allow_fence' must be true or false")
        self.assertProblem({"type": "xml_valid", "schema": {}}, "unknown parameter 'schema'")


def schema_check(fmt):
    return {"type": "json_schema", "schema": {"properties": {"v": {"format": fmt}}}}


class SchemaFormatTest(CheckTest):
    VALID = {
        "date": ["2024-02-29", "1999-12-31"],
        "time": ["08:30:06Z", "08:30:06.283185z", "12:00:00+02:00", "23:59:60Z",
                 "15:59:60-08:00"],
        "date-time": ["1985-04-12T23:20:50.52Z", "1996-12-19T16:39:57-08:00",
                      "1990-12-31t23:59:60z"],
        "email": ["joe.bloggs@example.com", "a+tag@sub.example.co.uk", "o'hara@x.org",
                  "root@localhost"],
        "uri": ["https://example.com/a?b=c#d", "mailto:joe@example.com", "urn:isbn:0451450523",
                "http://[2001:db8::7]/c=GB?objectClass?one", "http://x/%20y",
                "http://u:p@h:8080/", "http://[v1.fe]/"],
        "uri-reference": ["https://example.com/a", "//example.com/path", "/a?b", "a/b:c", "#f",
                          ""],
        "uuid": ["2EB8AA08-AA98-11EA-B4AA-73B441D16380", "00000000-0000-0000-0000-000000000000"],
        "ipv4": ["192.168.0.1", "0.0.0.0"],
        "ipv6": ["::1", "2001:db8::ff00:42:8329", "::ffff:192.0.2.1"],
    }
    INVALID = {
        "date": ["2023-02-29", "2024-1-01", "2024-13-01", "2024-01-01T00:00:00Z",
                 "\u0662\u0660\u0662\u0664-01-01"],
        "time": ["24:00:00Z", "12:00:00", "12:60:00Z", "12:00:60Z", "12:00:00+24:00",
                 "23:59:60+01:00"],
        "date-time": ["1985-04-12 23:20:50Z", "1985-04-12T23:20:50", "2023-02-29T00:00:00Z"],
        "email": ["joe", "a@b@c", ".a@b.c", "a.@b.c", "a..b@c.d", "a@-b.c", "a@b.", "@b.c",
                  "a b@c.d", "a@b.c\n", "x" * 65 + "@b.c"],
        "uri": ["//example.com/path", "example.com", "http://a b", "1http://x", "http://x/%zz",
                "http://\u00fc.de", "", "http://x:8o/", "http://a@b@c/", "http://[::1%25eth0]/",
                "http:/[::1]"],
        "uri-reference": ["a:b c", "1:b", "/[::1]", "//x:y/", "\\\\host\\share", "#a#b"],
        "uuid": ["2eb8aa08aa9811eab4aa73b441d16380", "2eb8aa08-aa98-11ea-b4aa-73b441d1638",
                 "{2eb8aa08-aa98-11ea-b4aa-73b441d16380}"],
        "ipv4": ["1.2.3.04", "256.0.0.1", "1.2.3", "::1", "\u0661.2.3.4"],
        "ipv6": ["fe80::1%eth0", "1.2.3.4", ":::", "12345::", "::g"],
    }

    def test_every_format_has_cases(self):
        self.assertEqual(set(self.VALID), set(evals_extras.FORMATS))
        self.assertEqual(set(self.INVALID), set(evals_extras.FORMATS))

    def test_valid_values_pass(self):
        for fmt, values in self.VALID.items():
            for value in values:
                with self.subTest(fmt=fmt, value=value):
                    self.assertPasses(schema_check(fmt), evals.to_json({"v": value}))

    def test_invalid_values_fail_naming_the_format(self):
        for fmt, values in self.INVALID.items():
            for value in values:
                with self.subTest(fmt=fmt, value=value):
                    result = self.assertFails(schema_check(fmt), evals.to_json({"v": value}),
                                              f"is not a valid {fmt}")
                    self.assertTrue(result.reason.startswith("$.v: "), result.reason)

    def test_the_reason_quotes_the_value(self):
        result = self.assertFails(schema_check("email"), '{"v": "joe"}',
                                  "$.v: 'joe' is not a valid email")
        self.assertEqual(result.quoted, ("'joe'",))

    def test_a_value_not_a_string_is_not_checked(self):
        self.assertPasses(schema_check("date"), '{"v": 20240229}')
        self.assertFails({"type": "json_schema",
                          "schema": {"type": "string", "format": "date"}}, "3",
                         "expected string, got number")

    def test_format_in_tool_call_schemas(self):
        check = {"type": "tool_called", "name": "book",
                 "schema": {"properties": {"day": {"format": "date"}}}}
        good = evals.Answer("", ({"name": "book", "arguments": {"day": "2024-05-01"}},))
        bad = evals.Answer("", ({"name": "book", "arguments": {"day": "May 1st"}},))
        self.assertPasses(check, good)
        self.assertFails(check, bad, "$.day: 'May 1st' is not a valid date")

    def test_an_unknown_format_is_refused_at_load(self):
        problems = self.assertProblem(schema_check("phone"),
                                      "schema.properties.v.format must be one of 'date', "
                                      "'date-time', 'time', 'email', 'uri', 'uri-reference', "
                                      "'uuid', 'ipv4', 'ipv6'")
        self.assertEqual(len(problems), 1)
        self.assertProblem(schema_check("Date-Time"), "did you mean 'date-time'?")
        self.assertProblem(schema_check(["date"]), "format must be one of")
        self.assertEqual(evals.validate_check(schema_check("uuid")), [])


if __name__ == "__main__":
    unittest.main()
