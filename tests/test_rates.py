"""Nondeterminism measured: pass rates of repeated cases (k of n, per case and per check), the
significance test that decides their regressions, flakiness from evidence, `compare`, and the
gates on pass rate, latency and cost.

The command line runs in process, in a temporary folder with a client module written there
that gives each prompt its answers in turn.
"""

import collections
import io
import itertools
import json
import os
import random
import tempfile
import unittest
import unittest.mock
import xml.etree.ElementTree as ET

import evals
import evals_extras

# answers.json: {input: answer or [answers, in turn]}; counts.json: calls so far per input.
CLIENT = '''
import json, os
HERE = os.path.dirname(os.path.abspath(__file__))


class Priced(str):
    pass


def ask(prompt):
    with open(os.path.join(HERE, "answers.json")) as handle:
        answers = json.load(handle)[prompt]
    counts_path = os.path.join(HERE, "counts.json")
    counts = {}
    if os.path.exists(counts_path):
        with open(counts_path) as handle:
            counts = json.load(handle)
    turn = counts.get(prompt, 0)
    counts[prompt] = turn + 1
    with open(counts_path, "w") as handle:
        json.dump(counts, handle)
    answer = answers[turn % len(answers)] if isinstance(answers, list) else answers
    if answer == "!raise":
        raise RuntimeError("provider unavailable")
    if isinstance(answer, dict):
        out = Priced(answer["text"])
        out.model, out.usage = answer["model"], answer["usage"]
        return out
    return answer
'''

OK = {"type": "contains_all", "values": ["ok"]}
OK_CASE = evals.Case("k", "k?", (OK,))


def ok_case(case_id, *extra):
    return {"id": case_id, "input": case_id + "?", "checks": [OK, *extra]}


def scripted(*answers):
    """A call_model giving `answers` in turn, then again from the start."""
    state = {"turn": 0}

    def call(prompt):
        answer = answers[state["turn"] % len(answers)]
        state["turn"] += 1
        if answer == "!error":
            raise ConnectionError("reset by peer")
        return answer
    return call


def run_record(answers, baseline=None, repeat=3, case=OK_CASE, accept=False, alpha=0.05):
    """The record of one run of `case` against `baseline` (a record or None)."""
    options = evals.RunOptions(repeat=repeat)
    results = evals.run_cases([case], scripted(*answers), options)
    run = evals.RunResult(results, "2026-01-01T00:00:00+00:00", "2026-01-01T00:00:01+00:00", "t")
    entries = {e["id"]: e for e in baseline["cases"]} if baseline else {}
    return evals.make_record(run, evals.Baseline(entries), [case], accept, options=options,
                             alpha=alpha)


class Workspace(unittest.TestCase):
    def setUp(self):
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.dir = tmp.name
        self.cases = self.path("cases.jsonl")
        self.baseline = self.path("last_run.json")
        with open(self.path("client.py"), "w") as handle:
            handle.write(CLIENT)

    def path(self, name):
        return os.path.join(self.dir, name)

    def write_cases(self, *cases):
        with open(self.cases, "w") as handle:
            handle.write("".join(json.dumps(c) + "\n" for c in cases))

    def answer(self, **answers):
        """Answers by case id (the input is "<id>?"); the turns start again."""
        with open(self.path("answers.json"), "w") as handle:
            json.dump({k + "?": v for k, v in answers.items()}, handle)
        if os.path.exists(self.path("counts.json")):
            os.remove(self.path("counts.json"))

    def calls(self):
        if not os.path.exists(self.path("counts.json")):
            return {}
        with open(self.path("counts.json")) as handle:
            return {k[:-1]: v for k, v in json.load(handle).items()}

    def main(self, *argv):
        out, err = io.StringIO(), io.StringIO()
        code = evals.main(list(argv), out, err)
        return code, out.getvalue(), err.getvalue()

    def run_cli(self, *args):
        return self.main("--cases", self.cases, "--baseline", self.baseline,
                         "--client", self.path("client.py") + ":ask", *args)

    def load(self, path):
        with open(path) as handle:
            return json.load(handle)


# ---------------------------------------------------------------------------------------------
# 1. The rule: decide
# ---------------------------------------------------------------------------------------------


def before(status, passes=None, calls=None, baseline=None):
    entry = {"baseline": baseline or status, "status": status}
    if calls is not None:
        entry.update(baseline_passes=passes, baseline_calls=calls)
    return entry


class DecideRepeatedTest(unittest.TestCase):
    """(status now, baseline entry, counts now) -> change, kept verdict, kept counts, test."""

    TABLE = [
        # a significant drop, whatever the statuses: regressed, the baseline kept
        ("fail", before("pass", 20, 20), (6, 20), "regressed", "pass", (20, 20), "regressed"),
        ("pass", before("pass", 20, 20), (11, 20), "regressed", "pass", (20, 20), "regressed"),
        # a drop that is not significant: listed, the baseline's verdict and counts kept
        ("fail", before("pass", 3, 3), (1, 3), "lower_not_significant", "pass", (3, 3),
         "lower_not_significant"),
        ("pass", before("pass", 20, 20), (19, 20), "lower_not_significant", "pass", (20, 20),
         "lower_not_significant"),
        # with 2 calls a run not even 2/2 -> 0/2 can be significant at 0.05
        ("fail", before("pass", 2, 2), (0, 2), "lower_not_significant", "pass", (2, 2),
         "too_few_calls"),
        # no drop: the statuses name it; the counts change with the verdict only, pooled
        ("pass", before("pass", 2, 3), (3, 3), "passing", "pass", (2, 3), "not_lower"),
        ("pass", before("fail", 1, 3), (3, 3), "fixed", "pass", (4, 6), "not_lower"),
        ("fail", before("fail", 0, 3), (1, 3), "still_failing", "fail", (0, 3), "not_lower"),
        # a stricter --min-pass fails a case whose rate did not drop: no regression, a new
        # verdict (fail), so pooled counts
        ("fail", before("pass", 2, 3), (2, 3), "still_failing", "fail", (4, 6), "not_lower"),
        # the regression kept by the baseline is fixed by a pass at the old rate: the verdict
        # (pass) did not change, nor do its counts
        ("pass", before("fail", 20, 20, baseline="pass"), (20, 20), "fixed", "pass", (20, 20),
         "not_lower"),
    ]

    def test_table(self):
        for status, entry, counts, change, kept, kept_counts, result in self.TABLE:
            with self.subTest(status=status, entry=entry, counts=counts):
                decision = evals.decide(status, entry, counts=counts)
                self.assertEqual(decision, (change, kept))
                self.assertEqual(decision.counts, kept_counts)
                self.assertEqual(decision.rate["result"], result)
                self.assertEqual(decision.rate["before"],
                                 [entry["baseline_passes"], entry["baseline_calls"]])
                self.assertEqual(decision.rate["p_value"], evals.fisher_one_sided(
                    entry["baseline_passes"], entry["baseline_calls"], *counts))

    def test_p_values_are_fishers(self):
        self.assertAlmostEqual(evals.decide("fail", before("pass", 3, 3), counts=(1, 3))
                               .rate["p_value"], 0.2, delta=1e-15)
        self.assertAlmostEqual(evals.decide("fail", before("pass", 2, 2), counts=(0, 2))
                               .rate["p_value"], 1 / 6, delta=1e-15)

    def test_alpha_moves_the_line(self):
        entry = before("pass", 3, 3)
        self.assertEqual(evals.decide("fail", entry, counts=(1, 3), alpha=0.25).change,
                         "regressed")
        self.assertEqual(evals.decide("fail", entry, counts=(0, 3), alpha=0.01).rate["result"],
                         "too_few_calls")

    def test_accept_takes_the_new_counts(self):
        decision = evals.decide("fail", before("pass", 20, 20), True, (6, 20))
        self.assertEqual((decision, decision.counts), (("regressed", "fail"), (6, 20)))
        decision = evals.decide("fail", before("pass", 3, 3), True, (1, 3))
        self.assertEqual((decision, decision.counts), (("lower_not_significant", "fail"), (1, 3)))

    def test_a_case_called_once_on_either_side_keeps_todays_rules(self):
        # baseline called once, now repeated: the statuses decide; the kept verdict has no counts
        decision = evals.decide("fail", before("pass"), counts=(2, 3))
        self.assertEqual((decision, decision.counts, decision.rate),
                         (("regressed", "pass"), None, None))
        decision = evals.decide("pass", before("pass"), counts=(1, 3))
        self.assertEqual((decision, decision.counts), (("passing", "pass"), (1, 3)))
        # baseline repeated, now called once: the statuses decide; a regression keeps the counts
        decision = evals.decide("fail", before("pass", 20, 20))
        self.assertEqual((decision, decision.counts, decision.rate),
                         (("regressed", "pass"), (20, 20), None))
        decision = evals.decide("pass", before("pass", 20, 20))
        self.assertEqual((decision, decision.counts), (("passing", "pass"), None))
        # one scored call (the others errored) is not a rate
        self.assertEqual(evals.decide("fail", before("pass", 3, 3), counts=(0, 1)).change,
                         "regressed")

    def test_errors_and_new_cases(self):
        decision = evals.decide("error", before("pass", 3, 3), counts=(0, 0))
        self.assertEqual((decision, decision.counts), (("errored", "pass"), (3, 3)))
        decision = evals.decide("fail", None, counts=(1, 3))
        self.assertEqual((decision, decision.counts), (("new", "fail"), (1, 3)))

    def test_a_decision_is_still_the_pair_it_was(self):
        change, kept = evals.decide("fail", before("pass"))
        self.assertEqual((change, kept), ("regressed", "pass"))
        self.assertEqual(evals.decide("fail", before("pass")), ("regressed", "pass"))
        self.assertEqual(evals.decide("fail", before("pass")).baseline, "pass")

    def test_a_replaced_decision_keeps_its_counts_and_rate(self):
        decision = evals.decide("fail", before("pass", 20, 20), counts=(2, 20))
        replaced = decision._replace(baseline="fail")
        self.assertEqual(replaced, (decision.change, "fail"))
        self.assertEqual((replaced.counts, replaced.rate), (decision.counts, decision.rate))
        self.assertEqual(replaced.rate["result"], "regressed")
        with self.assertRaises((ValueError, TypeError)):  # namedtuple's: TypeError from 3.13
            decision._replace(chnage="fixed")
        self.assertEqual(decision._replace(baseline=None), (decision.change, None))
        self.assertIsNone(evals.Decision._make(["new", "pass"]).counts)


# ---------------------------------------------------------------------------------------------
# 2. Counting calls, in the result and the record
# ---------------------------------------------------------------------------------------------


class CountsTest(unittest.TestCase):
    def test_case_and_check_counts(self):
        case = evals.Case("k", "q", (OK, {"type": "max_words", "n": 1}))
        [result] = evals.run_cases([case], scripted("ok", "no", "ok", "ok too"),
                                   evals.RunOptions(repeat=4))
        # calls: pass, fail ("no"), pass, fail ("ok too": two words); 2 of 4 is no majority
        self.assertEqual((result.status, result.passes, result.calls, result.flaky),
                         ("fail", 2, 4, True))
        self.assertEqual([(c["type"], c["passes"], c["calls"]) for c in result.checks],
                         [("contains_all", 3, 4), ("max_words", 3, 4)])
        self.assertEqual(result.reasons, ["contains_all: missing: 'ok' (3/4 calls passed)"])

    def test_errored_calls_are_neither_passes_nor_calls(self):
        [result] = evals.run_cases([OK_CASE], scripted("ok", "!error", "no", "no"),
                                   evals.RunOptions(repeat=4))
        self.assertEqual((result.status, result.passes, result.calls, result.flaky),
                         ("fail", 1, 3, True))
        self.assertEqual((result.checks[0]["passes"], result.checks[0]["calls"]), (1, 3))

    def test_a_skipped_check_is_not_counted_and_shared_dicts_stay_unchanged(self):
        case = evals.Case("k", "q", (OK, {"type": "max_latency_s", "seconds": 5}))
        call = evals.replay_client({"k": "ok"})
        [result] = evals.run_cases([case], call, evals.RunOptions(repeat=3))
        self.assertEqual([(c["passes"], c["calls"]) for c in result.checks], [(3, 3), (0, 0)])
        self.assertTrue(result.checks[1]["skipped"])
        # The cache of shared check dicts still hands out dicts without counts.
        _, checks = evals.evaluate(case, "ok")
        self.assertNotIn("passes", checks[0])

    def test_one_call_has_no_counts(self):
        [result] = evals.run_cases([OK_CASE], scripted("ok"))
        self.assertEqual((result.passes, result.calls), (None, None))
        record = run_record(["ok"], repeat=1)
        self.assertFalse({"passes", "calls", "baseline_passes", "rate_test"}
                         & set(record["cases"][0]))
        self.assertNotIn("passes", record["cases"][0]["checks"][0])

    def test_the_baseline_keeps_its_counts_until_its_verdict_changes(self):
        first = run_record(["ok"])
        entry = first["cases"][0]
        self.assertEqual((entry["passes"], entry["calls"], entry["baseline_passes"],
                          entry["baseline_calls"]), (3, 3, 3, 3))
        self.assertEqual(entry["checks"][0]["passes"], 3)
        lower = run_record(["ok", "no", "ok"], first)
        entry = lower["cases"][0]
        self.assertEqual((entry["change"], entry["passes"], entry["baseline_passes"],
                          entry["baseline_calls"]), ("lower_not_significant", 2, 3, 3))
        self.assertEqual(entry["rate_test"]["before"], [3, 3])
        # the verdict held, so the next run is compared with the same 3/3, not with 2/3
        again = run_record(["ok", "no", "ok"], lower)
        self.assertEqual((again["cases"][0]["change"], again["cases"][0]["rate_test"]["before"]),
                         ("lower_not_significant", [3, 3]))
        self.assertEqual(again["summary"]["lower_not_significant"], 1)
        self.assertEqual(again["summary"]["regressed"], 0)
        recovered = run_record(["ok"], again)
        self.assertEqual(recovered["cases"][0]["change"], "passing")
        accepted = run_record(["ok", "no", "ok"], lower, accept=True)
        self.assertEqual((accepted["cases"][0]["baseline_passes"],
                          accepted["cases"][0]["baseline_calls"]), (2, 3))

    def test_a_significant_drop_that_still_passes_is_a_regression(self):
        baseline = run_record(["ok"], repeat=20)
        record = run_record(["ok", "ok", "ok", "ok", "no"] * 2 + ["no"] * 10, baseline, repeat=20)
        entry = record["cases"][0]
        self.assertEqual((entry["status"], entry["passes"], entry["change"]),
                         ("fail", 8, "regressed"))
        record = run_record(["ok"] * 11 + ["no"] * 9, baseline, repeat=20)
        entry = record["cases"][0]
        self.assertEqual((entry["status"], entry["change"], entry["baseline"]),
                         ("pass", "regressed", "pass"))
        self.assertEqual(record["summary"]["regressed"], 1)
        self.assertEqual(record["options"]["alpha"], 0.05)

    def test_the_record_checks_its_counts(self):
        record = run_record(["ok", "no", "ok"])
        self.assertIsNone(evals.record_problem(record))
        for bad in ({"passes": 4}, {"calls": "3"}, {"baseline_passes": -1},
                    {"baseline_calls": None}, {"passes": True}):
            broken = dict(record, cases=[dict(record["cases"][0], **bad)])
            with self.subTest(bad=bad):
                self.assertIn("must be whole numbers with 0 <= passes <= calls",
                              evals.record_problem(broken))


class BaselineCountsOverRunsTest(unittest.TestCase):
    """What the baseline keeps run after run: a repeated case's counts change with its verdict
    only, so a run that keeps every verdict leaves the file as it was; never the luckiest
    run's counts alone."""

    def test_the_counts_change_with_the_verdict_only(self):
        # 16/20 then 20/20 at one true rate: the verdict holds, and so do the counts (keeping
        # the higher run's would compare the next with 20/20, where 15/20 is a "regression").
        decision = evals.decide("pass", before("pass", 16, 20), counts=(20, 20))
        self.assertEqual((decision, decision.counts), (("passing", "pass"), (16, 20)))
        decision = evals.decide("pass", before("pass", 20, 20), counts=(16, 20))
        self.assertEqual((decision, decision.counts),
                         (("lower_not_significant", "pass"), (20, 20)))
        # a new verdict: the run that crossed it pooled with the baseline's, not alone
        decision = evals.decide("pass", before("fail", 1, 20), counts=(20, 20))
        self.assertEqual((decision, decision.counts), (("fixed", "pass"), (21, 40)))

    def test_a_regression_keeps_the_counts_and_the_pool_is_bounded(self):
        decision = evals.decide("fail", before("pass", 100, 100), counts=(10, 20))
        self.assertEqual((decision, decision.counts), (("regressed", "pass"), (100, 100)))
        # 110/120 pooled, at most 5 runs of 20 calls: scaled to 92/100 (91.67 rounded)
        decision = evals.decide("pass", before("fail", 90, 100), counts=(20, 20))
        self.assertEqual((decision, decision.counts), (("fixed", "pass"), (92, 100)))
        decision = evals.decide("fail", before("pass", 3, 3), True, (1, 3))
        self.assertEqual(decision.counts, (1, 3))  # --accept takes this run's counts alone

    @unittest.mock.patch.object(evals, "_git_commit", lambda directory: None)  # 200 records
    def test_a_stable_case_regresses_in_at_most_alpha_of_the_runs(self):
        """40 teams each run one stable case 5 times, the baseline rewritten only when the run
        changes a verdict (evals.verdicts_kept), as `python evals.py` does."""
        rng = random.Random(3)

        def ask(prompt):  # passes with probability 0.8, run after run
            return "ok" if rng.random() < 0.8 else "no"

        options, changes, kept = evals.RunOptions(repeat=20), collections.Counter(), 0
        for _ in range(40):
            baseline = evals.Baseline({})
            for _ in range(5):
                results = evals.run_cases([OK_CASE], ask, options)
                run = evals.RunResult(results, "2026-01-01T00:00:00+00:00", None, "t")
                record = evals.make_record(run, baseline, [OK_CASE], options=options)
                entry = json.loads(json.dumps(record["cases"][0]))
                changes[entry["change"]] += bool(baseline.entries)
                if evals.verdicts_kept(record, baseline):
                    kept += 1
                else:
                    baseline = evals.Baseline({"k": entry}, "written", None,
                                              record["case_file"]["sha256"])
        # 160 runs compared with a baseline; at 0.05 about 8 may be false regressions
        self.assertLessEqual(changes["regressed"], 8, changes)
        self.assertGreater(kept, 100)  # most runs leave the file as it was


# ---------------------------------------------------------------------------------------------
# 3. Every report shows k of n
# ---------------------------------------------------------------------------------------------


class ReportsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        base = run_record(["ok"])
        two = run_record(["ok"], repeat=2)
        lower = run_record(["ok", "no", "no"], base)["cases"][0]
        regressed = run_record(["ok", "no", "no"], base, alpha=0.25)["cases"][0]
        regressed["id"] = "r"
        few = run_record(["no"], two, repeat=2)["cases"][0]
        few["id"] = "few"
        cases = [lower, regressed, few]
        cls.record = dict(base, cases=cases, summary=evals.summarize(cases))

    def test_text_summary(self):
        text = evals.format_summary(self.record)
        self.assertIn("1 regressed, 0 fixed", text)
        self.assertIn(", 2 lower, not significant", text)
        self.assertIn("REGRESSED: r\n    3/3 -> 1/3 calls passed (p = 0.2, a significant drop "
                      "at alpha 0.25)\n    contains_all: missing: 'ok' (1/3 calls passed)\n",
                      text)
        self.assertIn("LOWER, NOT SIGNIFICANT: k\n    3/3 -> 1/3 calls passed (p = 0.2, lower, "
                      "not significant at alpha 0.05)\n", text)
        self.assertIn("LOWER, NOT SIGNIFICANT: few\n    2/2 -> 0/2 calls passed (p = 0.167; too "
                      "few calls for any drop to be significant at alpha 0.05: 3 calls in each "
                      "run can show one)\n", text)
        self.assertIn("flaky (calls disagreed in this run): k (1/3 calls passed), r (1/3 calls passed)",
                      text)
        quiet = evals.format_summary(self.record, quiet=True)
        self.assertIn("2 lower, not significant", quiet)  # never hidden, even in -q

    def test_markdown(self):
        md = evals_extras.render_markdown(self.record)
        self.assertIn("### Lower, not significant (2)", md)
        self.assertIn("- 3/3 \\-&gt; 1/3 calls passed", md)
        self.assertIn("| lower not significant |", md)
        self.assertIn("### Flaky (2)", md)
        # the text summary's wording (test_text_summary), from the same place
        self.assertIn("- k \\(1/3 calls passed\\): calls disagreed in this run\n", md)
        self.assertIn("contains\\_all\\: missing\\: 'ok' \\(1/3 calls passed\\)", md)

    def test_html(self):
        page = evals_extras.render_html(self.record, {})
        self.assertIn('<section id="lower">', page)
        self.assertIn('<span class="badge lower">lower, not significant</span>', page)
        self.assertIn("3/3 -&gt; 1/3 calls passed (p = 0.2, lower, not significant", page)
        self.assertIn("missing: &#x27;ok&#x27; (1/3 calls passed)</li>", page)
        self.assertIn('<section id="flaky"><h2>Flaky (2)</h2>', page)
        self.assertIn('<tr><td class="id">k (1/3 calls passed)</td><td>calls disagreed in this '
                      'run</td></tr>', page)
        self.assertIn("<b>2</b>lower, not significant</div>", page)

    def test_a_passing_repeated_case_shows_its_rate_too(self):
        record = run_record(["ok"], run_record(["ok", "no", "ok"]))
        self.assertIn("<td>passing · 2/3 -&gt; 3/3 calls passed (not lower)</td>",
                      evals_extras.render_html(record, {}))
        root = ET.fromstring(evals_extras.render_junit(record))
        self.assertEqual([p.get("value") for p in root.iter("property")
                          if p.get("name") == "pass_rate"],
                         ["2/3 -> 3/3 calls passed (not lower)"])
        self.assertIsNone(root.find(".//failure"))

    def test_junit(self):
        root = ET.fromstring(evals_extras.render_junit(self.record))
        cases = {c.get("name"): c for c in root.iter("testcase")}
        self.assertEqual(cases["r"].find("failure").get("type"), "regression")
        properties = {p.get("name"): p.get("value") for p in cases["k"].iter("property")}
        self.assertEqual(properties["pass_rate"],
                         "3/3 -> 1/3 calls passed (p = 0.2, lower, not significant at alpha 0.05)")
        self.assertEqual(properties["flaky"], "true")

    def test_junit_counts_a_regression_that_still_passes_as_a_failure(self):
        # 20/20 -> 11/20 passes by majority and regressed: one <failure>, and failures="1"
        record = run_record(["ok"] * 11 + ["no"] * 9, run_record(["ok"], repeat=20), repeat=20)
        self.assertEqual((record["cases"][0]["status"], record["cases"][0]["change"]),
                         ("pass", "regressed"))
        root = ET.fromstring(evals_extras.render_junit(record))
        self.assertEqual(len(list(root.iter("failure"))), 1)
        self.assertEqual((root.get("failures"), root.find("testsuite").get("failures")),
                         ("1", "1"))

    def test_junit_marks_a_case_the_history_finds_flaky_too(self):
        record = run_record(["ok"], repeat=1)
        record["summary"]["flaky_history"] = [{"id": "k", "passes": 2, "runs": 3}]
        root = ET.fromstring(evals_extras.render_junit(record))
        self.assertEqual([(p.get("name"), p.get("value")) for p in
                          root.find("testsuite/testcase").iter("property")], [("flaky", "true")])

    def test_github(self):
        lines = evals.github_annotations(self.record).splitlines()
        self.assertIn("::error title=Regression%3A r::3/3 -> 1/3 calls passed (p = 0.2, a "
                      "significant drop at alpha 0.25)%0Acontains_all: missing: 'ok' (1/3 calls "
                      "passed)", lines)
        self.assertTrue(any(line.startswith("::warning title=Lower%2C not significant%3A k::3/3")
                            for line in lines), lines)

    def test_a_hand_made_record_with_odd_values_still_renders(self):
        entry = {"id": "x", "status": "pass", "baseline": "pass", "change": "lower_not_significant",
                 "passes": 2, "calls": 3, "rate_test": {"before": [3, 3], "p_value": "?"}}
        record = {"format": "evals-run", "version": 1, "cases": [entry]}
        self.assertIn("3/3 -> 2/3 calls passed (p = ?)", evals.format_summary(
            evals.completed(record)))
        evals_extras.render_html(record)
        evals_extras.render_markdown(record)

    def test_a_hand_edited_error_or_quote_is_refused_or_rendered_not_a_crash(self):
        entry = {"id": "x", "status": "error", "baseline": "pass", "error": ["not", "text"]}
        record = {"format": "evals-run", "version": 1, "cases": [entry]}
        self.assertEqual(evals.record_problem(record),
                         "case 'x': 'error' must be a string or null")
        check = {"type": "contains_all", "passed": False, "reason": "missing: 'ok' in 'no'",
                 "quoted": 2.5}
        self.assertEqual(evals_extras.without_outputs({"id": "x", "checks": [check]})["checks"][0],
                         {"type": "contains_all", "passed": False,
                          "reason": "missing: 'ok' in 'no'"})
        check["quoted"] = ["'no'", None]
        self.assertEqual(evals_extras.without_outputs({"id": "x", "checks": [check]})["checks"][0]
                         ["reason"], "missing: 'ok' in '[output omitted]'")


# ---------------------------------------------------------------------------------------------
# 4. The command line: exit codes, --alpha, flakiness, --repeat-flaky, gates
# ---------------------------------------------------------------------------------------------


class RepeatedRunCliTest(Workspace):
    def test_lower_not_significant_exits_0_and_a_significant_drop_exits_1(self):
        self.write_cases(ok_case("k"), ok_case("steady"))
        self.answer(k="ok", steady="ok")
        self.assertEqual(self.run_cli("--repeat", "3")[0], 0)
        self.answer(k=["ok", "no", "no"], steady="ok")
        code, out, _ = self.run_cli("--repeat", "3")
        self.assertEqual(code, 0, out)
        self.assertIn("0 regressed, 0 fixed, 0 still failing, 0 new, 0 errored, 0 removed, "
                      "1 lower, not significant\n", out)
        self.assertIn("LOWER, NOT SIGNIFICANT: k\n    3/3 -> 1/3 calls passed", out)
        entry = {e["id"]: e for e in self.load(self.baseline)["cases"]}["k"]
        self.assertEqual((entry["status"], entry["baseline"], entry["baseline_passes"],
                          entry["baseline_calls"]), ("fail", "pass", 3, 3))
        self.answer(k="no", steady="ok")
        with open(self.baseline, "rb") as handle:
            kept = handle.read()
        code, out, _ = self.run_cli("--repeat", "3", "--alpha", "0.25")
        self.assertEqual(code, 1, out)
        self.assertIn("REGRESSED: k\n    3/3 -> 0/3 calls passed (p = 0.05, a significant drop "
                      "at alpha 0.25)", out)
        with open(self.baseline, "rb") as handle:  # k failed last run too: no verdict changed
            self.assertEqual(handle.read(), kept)

    def test_rescoring_a_repeated_record_scores_each_of_its_calls(self):
        # 4 of 10 calls passed; re-scoring that record with the same checks and --repeat 10
        # replayed the one output its entry shows ten times: 0/10, "a significant drop", exit 1
        self.write_cases(ok_case("k"))
        self.answer(k=["no", "ok", "no", "no", "ok", "no", "ok", "no", "ok", "no"])
        self.assertEqual(self.run_cli("--repeat", "10", "--out", self.path("run.json"))[0], 0)
        code, out, _ = self.main("--cases", self.cases, "--baseline", self.path("run.json"),
                                 "--rescore", self.path("run.json"), "--repeat", "10",
                                 "--no-save")
        self.assertEqual(code, 0, out)
        self.assertIn("0 regressed, 0 fixed, 1 still failing", out)
        self.assertIn("4/10 -> 4/10 calls passed", out)
        # one call re-scores the output the entry shows, as before
        code, out, _ = self.main("--cases", self.cases, "--baseline", self.path("run.json"),
                                 "--rescore", self.path("run.json"), "--no-save")
        self.assertEqual(code, 0, out)
        self.assertIn("pass rate 0.0% (0/1)", out)
        record = self.load(self.path("run.json"))  # its calls are valid, its entry is not
        record["cases"][0]["tool_calls"] = [{"name": ""}]
        evals_extras.write_json_atomic(self.path("bad.json"), record)
        with self.assertRaisesRegex(evals.EvalsError, "bad.json: case 'k': tool call 1 must"):
            evals.load_outputs(self.path("bad.json"), repeat=10)
        # a record of one call a case, replayed ten times, would count one output as ten
        self.assertEqual(self.run_cli("--out", self.path("once.json"))[0], 0)
        code, _, err = self.main("--cases", self.cases, "--baseline", self.path("run.json"),
                                 "--rescore", self.path("once.json"), "--repeat", "10",
                                 "--no-save")
        self.assertEqual(code, 2)
        self.assertIn("once.json: case 'k' was called 1 time in that run, so --repeat 10 "
                      "would score its recorded calls again as new answers", err)

    def test_rescoring_recordings_with_repeat_is_refused(self):
        # a recordings file holds one output a case: replayed ten times it would count as ten
        # answers, 10/10 or 0/10, "significant" against a repeated baseline
        self.write_cases(ok_case("k"))
        with open(self.path("rec.jsonl"), "w") as handle:
            handle.write(json.dumps({"id": "k", "output": "ok"}) + "\n")
        code, _, err = self.main("--cases", self.cases, "--baseline", self.baseline,
                                 "--rescore", self.path("rec.jsonl"), "--repeat", "10")
        self.assertEqual(code, 2)
        self.assertIn("recordings hold one output a case, so --repeat 10 would score each as "
                      "10 answers", err)
        self.assertFalse(os.path.exists(self.baseline))

    def test_bad_alpha_is_refused_before_any_call(self):
        self.write_cases(ok_case("k"))
        self.answer(k="ok")
        for value in ("0", "1", "1.5", "x", "nan"):
            code, _, err = self.run_cli("--repeat", "3", "--alpha", value)
            self.assertEqual(code, 2, value)
            self.assertIn("expected a number between 0 and 1", err)
        self.assertEqual(self.calls(), {})


class FlakyHistoryTest(unittest.TestCase):
    def setUp(self):
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.db = os.path.join(tmp.name, "history.sqlite")

    def runs(self, **verdicts):
        """Append one run a column: runs(a="pfp") appends pass, fail, pass for case a."""
        for number in range(max(map(len, verdicts.values()))):
            cases = [{"id": i, "status": {"p": "pass", "f": "fail", "e": "error"}[v[number]],
                      "change": "passing"} for i, v in verdicts.items() if number < len(v)]
            evals_extras.history_append(self.db, {
                "started_at": "t", "finished_at": "t", "client": "c", "git_commit": None,
                "case_file": {"sha256": "0"}, "cases": cases,
                "summary": {"total": 1, "passed": 0, "pass_rate": 0, "regressed": 0}})

    def flaky(self, *ids, **options):
        return evals_extras.history_flaky(self.db, list(ids), **options)

    def test_the_test_and_its_level(self):
        self.runs(flip="pfp", glitch="ppppfpppp", step="pppppfffff", twice="pfppfppppp",
                  steady="pppppppppp", errors="pepepep")
        self.assertEqual(self.flaky("flip", "glitch", "step", "twice", "steady", "errors"),
                         [{"id": "flip", "passes": 2, "runs": 3},
                          {"id": "twice", "passes": 8, "runs": 10}])
        # One failure in 3 runs: P(>= 1 failure | 3 runs, 1%) = 0.0297, rejected at 0.05, not
        # at 0.01.
        self.assertEqual(self.flaky("flip", alpha=0.01), [])
        # one glitch in 9 runs: P = 0.0865, "always passes" stands
        self.assertAlmostEqual(evals_extras._binomial_tail(9, evals_extras.FLAKY_GLITCH_RATE, 1),
                               1 - 0.99 ** 9, delta=1e-12)

    def test_the_run_not_yet_appended_counts_and_the_window_slides(self):
        self.runs(a="pf")
        self.assertEqual(self.flaky("a"), [])
        self.assertEqual(self.flaky("a", current={"a": "pass"}),
                         [{"id": "a", "passes": 2, "runs": 3}])
        self.assertEqual(self.flaky("a", current={"a": "pass"}, window=2), [])


class RepeatFlakyCliTest(Workspace):
    def test_only_the_flaky_cases_are_called_n_times(self):
        self.write_cases(ok_case("flip"), ok_case("steady"))
        self.answer(flip="ok", steady="ok")
        code, out, _ = self.run_cli("--repeat-flaky", "4")
        self.assertEqual(code, 0)
        self.assertIn("nothing to rerun: the history", out)
        self.assertEqual(self.calls(), {})
        for answer in ("ok", "no", "ok"):
            self.answer(flip=answer, steady="ok")
            self.run_cli()
        self.answer(flip=["ok", "no"], steady="ok")
        code, out, _ = self.run_cli("--repeat-flaky", "4")
        self.assertEqual(self.calls(), {"flip": 4})
        self.assertIn("repeat 4 (pass 3)", out)
        entries = {e["id"]: e for e in self.load(self.baseline)["cases"]}
        self.assertEqual((entries["flip"]["passes"], entries["flip"]["calls"]), (2, 4))
        self.assertEqual(entries["steady"]["change"], "not_run")
        self.assertIn("flaky (calls disagreed in this run): flip (2/4 calls passed)", out)

    def test_contradictions(self):
        self.write_cases(ok_case("k"))
        self.answer(k="ok")
        code, _, err = self.run_cli("--repeat-flaky", "3", "--repeat", "3")
        self.assertEqual(code, 2)
        self.assertIn("--repeat and --repeat-flaky contradict", err)
        code, _, err = self.run_cli("--repeat-flaky", "3", "--min-pass", "4")
        self.assertEqual(code, 2)
        self.assertIn("--min-pass 4 is more than --repeat-flaky 3", err)
        self.assertEqual(self.main("--repeat-flaky", "1")[0], 2)

    def test_an_unreadable_history_is_an_input_error(self):
        self.write_cases(ok_case("k"))
        self.answer(k="ok")
        os.makedirs(self.path(".evals"))
        with open(self.path(os.path.join(".evals", "history.sqlite")), "w") as handle:
            handle.write("not a database, but long enough to be read as one" * 100)
        code, _, err = self.run_cli("--repeat-flaky", "3")
        self.assertEqual(code, 2)
        self.assertIn("--repeat-flaky: cannot read the history", err)


class MinPassRateTest(Workspace):
    def test_below_the_floor_fails_the_run_and_says_so(self):
        self.write_cases(ok_case("a"), ok_case("b"))
        self.answer(a="ok", b="no")  # b is a new failure, not a regression
        code, out, _ = self.run_cli("--min-pass-rate", "90%", "--no-save")
        self.assertEqual(code, 1)
        self.assertIn("pass rate 50.0% (1/2) is BELOW the minimum 90.0% (--min-pass-rate): the "
                      "run fails\n", out)
        code, out, _ = self.run_cli("--min-pass-rate", "0.5")
        self.assertEqual(code, 0)
        self.assertIn("pass rate 50.0% (1/2) is at or above the minimum 50.0%", out)
        self.assertEqual(self.load(self.baseline)["summary"]["min_pass_rate"], 0.5)
        code, out, _ = self.main("report", self.baseline)
        self.assertIn("at or above the minimum 50.0%", out)

    def test_the_reports_headline_says_the_run_fails_below_the_floor(self):
        self.write_cases(ok_case("a"), ok_case("b"))
        self.answer(a="ok", b="no")
        md, page = self.path("report.md"), self.path("report.html")
        code, _, _ = self.run_cli("--min-pass-rate", "90%", "--no-save", "--markdown", md,
                                  "--html", page)
        self.assertEqual(code, 1)
        with open(md) as handle:
            self.assertEqual(handle.readline(),
                             "## ❌ evals: pass rate 50.0% below the minimum 90.0%\n")
        with open(page) as handle:
            self.assertIn('<h1><span class="verdict bad">FAIL</span>evals: pass rate 50.0% '
                          'below the minimum 90.0%</h1>', handle.read())
        code, _, _ = self.run_cli("--min-pass-rate", "50%", "--no-save", "--markdown", md)
        self.assertEqual(code, 0)
        with open(md) as handle:
            self.assertEqual(handle.readline(), "## ✅ evals: no regressions (1 failing)\n")

    def test_a_rate_below_the_floor_is_never_printed_equal_to_it(self):
        # 1,999 of 2,000 against 100% and 1,899 of 2,000 against 95% round to the floor at one
        # decimal; every place that shows the gate prints the digits that tell them apart.
        with open(self.path("fast.py"), "w") as handle:
            handle.write("def ask(prompt):\n    return 'no' if prompt[0] == 'x' else 'ok'\n")
        reports = {name: self.path(name) for name in ("r.md", "r.html", "r.xml")}
        for failing, floor, rate, shown_floor in ((1, "1.0", "99.95%", "100.0%"),
                                                  (101, "0.95", "94.95%", "95.0%")):
            ids = [f"x{n}" for n in range(failing)] + [f"c{n}" for n in range(2000 - failing)]
            self.write_cases(*[ok_case(i) for i in ids])
            gate = (f"pass rate {rate} ({2000 - failing}/2000) is BELOW the minimum "
                    f"{shown_floor} (--min-pass-rate): the run fails")
            code, out, _ = self.main("--cases", self.cases, "--client",
                                     self.path("fast.py") + ":ask", "--no-save", "--no-history",
                                     "--min-pass-rate", floor, "--github", "--markdown",
                                     reports["r.md"], "--html", reports["r.html"], "--junit",
                                     reports["r.xml"])
            self.assertEqual(code, 1, out)
            self.assertIn(f"pass rate {rate} ({2000 - failing}/2000)\n", out)
            self.assertIn(gate + "\n", out)
            escaped = gate.replace("%", "%25")  # as a workflow command escapes it
            self.assertIn(f"::error title=Pass rate below the minimum::{escaped}\n", out)
            with open(reports["r.md"]) as handle:
                markdown = handle.read().replace("\\", "")  # Markdown's escapes dropped
            self.assertTrue(markdown.startswith(
                f"## ❌ evals: pass rate {rate} below the minimum {shown_floor}\n\n"
                f"pass rate **{rate}** ({2000 - failing}/2000)  \n{gate}\n"), markdown[:300])
            with open(reports["r.html"]) as handle:
                html = handle.read()
            self.assertIn(f"evals: pass rate {rate} below the minimum {shown_floor}</h1>", html)
            self.assertIn(f"pass rate <b>{rate}</b>", html)
            self.assertIn(gate, html)
            failure = ET.parse(reports["r.xml"]).find(".//testcase[@name='min_pass_rate']/failure")
            self.assertEqual((failure.get("message"), failure.text), (gate, gate))
        # a floor is printed as given, and a rate at it is at or above it
        self.write_cases(*[ok_case(f"c{n}") for n in range(3)], ok_case("x0"))
        code, out, _ = self.main("--cases", self.cases, "--client", self.path("fast.py") + ":ask",
                                 "--no-save", "--no-history", "--min-pass-rate", "0.7525")
        self.assertEqual(code, 1, out)
        self.assertIn("pass rate 75.0% (3/4) is BELOW the minimum 75.25% (--min-pass-rate)", out)
        code, out, _ = self.main("--cases", self.cases, "--client", self.path("fast.py") + ":ask",
                                 "--no-save", "--no-history", "--min-pass-rate", "75%")
        self.assertEqual(code, 0, out)
        self.assertIn("pass rate 75.0% (3/4) is at or above the minimum 75.0% (--min-pass-rate)",
                      out)

    def test_values(self):
        self.write_cases(ok_case("a"))
        self.answer(a="ok")
        for value in ("95", "-0.1", "101%", "x", "nan", ""):
            code, _, err = self.run_cli("--min-pass-rate", value, "--no-save")
            self.assertEqual(code, 2, value)
            self.assertIn("expected a fraction from 0 to 1 (0.95) or a percentage (95%)", err)
        for value in ("1", "100%", "0", "0.999"):
            self.assertEqual(self.run_cli("--min-pass-rate", value, "--no-save")[0], 0, value)

    def test_errors_still_win_and_merge_takes_the_gate(self):
        self.write_cases(ok_case("a"), ok_case("b"))
        self.answer(a="ok", b="!raise")
        self.assertEqual(self.run_cli("--min-pass-rate", "0.9", "--no-save")[0], 2)
        self.answer(a="ok", b="no")
        shards = [self.path(f"shard-{k}.json") for k in (1, 2)]
        for k, shard in enumerate(shards, 1):
            self.run_cli("--shard", f"{k}/2", "--no-history", "--out", shard)
        self.assertTrue(all(os.path.exists(p) for p in shards))
        code, out, _ = self.main("merge", *shards, "--cases", self.cases, "--out",
                                 self.path("merged.json"), "--min-pass-rate", "0.75")
        self.assertEqual(code, 1, out)
        self.assertIn("is BELOW the minimum 75.0%", out)


class LatencyAndCostTest(Workspace):
    def test_the_checks_see_the_calls_latency_and_cost(self):
        case = evals.Case("k", "q", (OK, {"type": "max_latency_s", "seconds": 2},
                                     {"type": "max_cost_usd", "usd": 0.0001}))
        reply = type("Priced", (str,), {})("ok")
        reply.model, reply.usage = "gpt-4o-mini", {"input_tokens": 1000, "output_tokens": 1000}
        clock = itertools.chain([10.0], itertools.repeat(13.5))  # the call's start, then after
        with unittest.mock.patch.object(evals.time, "perf_counter", side_effect=clock):
            [result] = evals.run_cases([case], lambda prompt: reply,
                                       evals.RunOptions(price=evals_extras.call_cost))
        self.assertEqual(result.status, "fail")
        self.assertEqual([(c["passed"], c["reason"]) for c in result.checks[1:]],
                         [(False, "took 3.500 s, expected at most 2 s"),
                          (False, "cost $0.000750, expected at most $0.0001")])

    def test_a_replayed_answer_is_not_applicable_never_a_pass(self):
        self.write_cases(ok_case("k", {"type": "max_latency_s", "seconds": 2},
                                 {"type": "max_cost_usd", "usd": 1, "negate": True}))
        with open(self.path("rec.jsonl"), "w") as handle:
            handle.write(json.dumps({"id": "k", "output": "ok"}) + "\n")
        code, out, _ = self.main("--cases", self.cases, "--baseline", self.baseline,
                                 "--rescore", self.path("rec.jsonl"))
        self.assertEqual(code, 0, out)
        checks = self.load(self.baseline)["cases"][0]["checks"]
        self.assertEqual([(c["passed"], c.get("skipped")) for c in checks],
                         [(True, None), (None, True), (None, True)])
        self.assertEqual(checks[1]["reason"],
                         "not applicable: no latency is known (an answer recorded or "
                         "re-scored without one)")
        self.assertTrue(checks[2]["reason"].startswith("not applicable: the cost is unknown"))

    def test_an_unknown_model_has_no_cost(self):
        self.write_cases(ok_case("k", {"type": "max_cost_usd", "usd": 0.01}))
        self.answer(k={"text": "ok", "model": "my-own-model",
                       "usage": {"input_tokens": 5, "output_tokens": 5}})
        self.run_cli("--no-history")
        check = self.load(self.baseline)["cases"][0]["checks"][1]
        self.assertEqual((check["passed"], check["skipped"]), (None, True))


# ---------------------------------------------------------------------------------------------
# 5. compare A B
# ---------------------------------------------------------------------------------------------


class CompareTest(Workspace):
    IDS = ["c%d" % n for n in range(10)]

    def setUp(self):
        super().setUp()
        self.write_cases(*[ok_case(i) for i in self.IDS])

    def record(self, name, *args, **answers):
        self.answer(**{i: answers.get(i, "ok") for i in self.IDS})
        path = self.path(name)
        self.run_cli("--out", path, "--no-history", *args)
        return path

    def compare(self, *args):
        return self.main("compare", *args)

    def test_significantly_worse_exits_1(self):
        a = self.record("a.json")
        b = self.record("b.json", **{i: "no" for i in self.IDS[:6]})
        code, out, _ = self.compare(a, b)
        self.assertEqual(code, 1, out)
        self.assertIn(f"A {a}: pass rate 100.0% (10/10), 95% Wilson interval 72.2% to 100.0%\n",
                      out)
        self.assertIn(f"B {b}: pass rate 40.0% (4/10), 95% Wilson interval 16.8% to 68.7%\n", out)
        self.assertIn("paired over the 10 cases scored in both: 6 passed in A only, 0 in B only; "
                      "McNemar's exact test: B worse p = 0.0156 (one-sided), two-sided p = "
                      "0.0312\n", out)
        self.assertIn("B is significantly worse than A at alpha 0.05 (exit 1)\n", out)
        self.assertIn("6 regressed, 0 fixed", out)
        self.assertIn("REGRESSED: c0\n", out)
        # the other way round B is better; at alpha 0.01 the drop is not significant
        self.assertEqual(self.compare(b, a)[0], 0)
        code, out, _ = self.compare(a, b, "--alpha", "0.01")
        self.assertEqual(code, 0)
        self.assertIn("B is not significantly worse than A at alpha 0.01\n", out)

    def test_a_few_flips_are_not_significant(self):
        a = self.record("a.json", c9="no")
        b = self.record("b.json", c0="no", c1="no")
        code, out, _ = self.compare(a, b)
        self.assertEqual(code, 0)
        self.assertIn("2 passed in A only, 1 in B only; McNemar's exact test: B worse p = 0.5", out)
        self.assertEqual(self.compare(a, a)[0], 0)

    def test_repeated_cases_use_their_rates_and_majorities(self):
        self.write_cases(ok_case("k"), ok_case("m"))
        self.IDS = ["k", "m"]
        a = self.record("a.json", "--repeat", "3")
        # 3/3 -> 1/3 (lower, not significant); with --min-pass 1 the status is pass, the
        # majority is not.
        b = self.record("b.json", "--repeat", "3", "--min-pass", "1", k=["ok", "no", "no"],
                        m=["ok", "no", "no"])
        result = evals_extras.compare_records(evals_extras.read_record(a),
                                              evals_extras.read_record(b))
        self.assertEqual((result["paired"], result["a_only_passed"], result["b_only_passed"]),
                         (2, 2, 0))
        self.assertEqual(result["b"]["passed"], 2)  # the statuses
        code, out, _ = self.compare(a, b)
        self.assertEqual(code, 0)
        self.assertIn("LOWER, NOT SIGNIFICANT: k\n    3/3 -> 1/3 calls passed (p = 0.2", out)

    def test_cases_in_one_record_only_and_errors(self):
        a = self.record("a.json", c0="!raise")
        self.write_cases(*[ok_case(i) for i in self.IDS[:9]], ok_case("extra"))
        self.IDS = self.IDS[:9] + ["extra"]
        b = self.record("b.json", c1="!raise")
        result = evals_extras.compare_records(evals_extras.read_record(a),
                                              evals_extras.read_record(b))
        self.assertEqual(result["paired"], 7)  # c2..c8: c0 and c1 errored once, c9 and extra
        self.assertEqual((result["only_in_a"], result["only_in_b"]), (["c9"], ["extra"]))
        changes = {e["id"]: e["change"] for e in result["record"]["cases"]}
        self.assertEqual((changes["c0"], changes["c1"], changes["extra"]),
                         ("new", "errored", "new"))
        self.assertEqual((result["errored_in_a"], result["errored_in_b"]), (["c0"], ["c1"]))
        self.assertEqual(result["verdict"], "incomplete")
        code, out, _ = self.compare(a, b)
        self.assertEqual(code, 2)  # incomplete, as a run with an errored case
        self.assertIn("only in A: c9\nonly in B: extra\n", out)
        self.assertIn(f"incomplete: 1 case in A {a} (c0) and 1 case in B {b} (c1) errored, so "
                      "there is no verdict on B against A (exit 2)\n", out)
        self.assertNotIn("not significantly worse", out)

    def test_an_errored_case_makes_the_comparison_incomplete_as_it_makes_a_run(self):
        # B has 2 of 10 cases errored: the run that wrote it exits 2, and so does compare,
        # naming the cases and the record, never "not significantly worse" with exit 0.
        a = self.record("a.json")
        self.answer(**dict({i: "ok" for i in self.IDS}, c3="!raise", c7="!raise"))
        b = self.path("b.json")
        code, _, _ = self.run_cli("--out", b, "--no-history")
        self.assertEqual(code, 2)
        page = self.path("compare.html")
        code, out, _ = self.compare(a, b, "--html", page)
        self.assertEqual(code, 2, out)
        self.assertIn(f"B {b}: pass rate 80.0% (8/10)", out)
        self.assertIn(f"incomplete: 2 cases in B {b} (c3, c7) errored, so there is no verdict "
                      "on B against A (exit 2)\n", out)
        self.assertIn("ERROR: c3\n", out)
        self.assertNotIn("not significantly worse", out)
        with open(page) as handle:
            html = handle.read()
        self.assertIn("<title>evals compare: incomplete: a case errored, no verdict</title>",
                      html)
        self.assertIn('<span class="verdict warn">INCOMPLETE</span>', html)
        self.assertNotIn("NOT WORSE", html)
        # errors win over the test, as in a run: B worse and incomplete exits 2
        worse = {i: "no" for i in self.IDS[:7]}
        self.answer(**dict({i: "ok" for i in self.IDS}, **worse, c9="!raise"))
        self.run_cli("--out", b, "--no-history")
        code, out, _ = self.compare(a, b)
        self.assertEqual(code, 2, out)
        self.assertIn("B worse p = 0.00781", out)
        self.assertIn(f"incomplete: 1 case in B {b} (c9) errored", out)
        code, out, _ = self.main("compare", "--help")
        self.assertIn("2 incomplete: a case errored in A or B", " ".join(out.split()))

    def test_bad_input_exits_2(self):
        a = self.record("a.json")
        with open(self.path("other.json"), "w") as handle:
            json.dump({"rate": 1.0}, handle)
        self.assertEqual(self.compare(a, self.path("missing.json"))[0], 2)
        code, _, err = self.compare(a, self.path("other.json"))
        self.assertEqual(code, 2)
        self.assertIn("not an evals run record", err)
        with open(self.path("lines.jsonl"), "w") as handle:  # JSON Lines, as a case file
            handle.write('{"id": "a"}\n{"id": "b"}\n')
        code, _, err = self.compare(a, self.path("lines.jsonl"))
        self.assertEqual(code, 2)
        self.assertIn("cannot read the run record: Extra data: line 2 column 1 (char 12) (one "
                      "JSON value a line, as in a case or recordings file; a run record is one "
                      "JSON object, e.g. last_run.json)", err)
        self.write_cases(ok_case("different"))
        self.IDS = ["different"]
        code, _, err = self.compare(a, self.record("d.json"))
        self.assertEqual(code, 2)
        self.assertIn("no case was scored in both records", err)
        self.assertEqual(self.compare(a)[0], 2)

    def test_html_page(self):
        self.write_cases(ok_case("<b>k</b>"))
        self.IDS = ["<b>k</b>"]
        a = self.record("a.json")
        b = self.record("b.json", **{"<b>k</b>": "no <script>alert(1)</script>"})
        page = self.path("compare.html")
        code, _, _ = self.compare(a, b, "--html", page, "--alpha", "0.5")
        self.assertEqual(code, 1)  # 1 pair, 1 against 0: p = 0.5
        with open(page) as handle:
            html = handle.read()
        self.assertIn("<title>evals compare: B is significantly worse than A</title>", html)
        self.assertIn('<span class="verdict bad">WORSE</span>', html)
        self.assertIn("<h4>A&#x27;s output</h4>", html)
        self.assertIn(f"A {a}: pass rate 100.0% (1/1)", html)
        self.assertIn("no &lt;script&gt;alert(1)&lt;/script&gt;", html)
        self.assertNotIn("<script>", html)
        self.assertNotIn("<b>k</b>", html)
        self.assertIn("McNemar&#x27;s exact test", html)
        self.assertIn("content=\"default-src 'none'; style-src 'unsafe-inline'\"", html)
        # written again over its own page; never over a file it did not write
        self.assertEqual(self.compare(a, b, "--html", page)[0], 0)
        with open(self.path("notes.html"), "w") as handle:
            handle.write("<p>mine</p>")
        code, _, err = self.compare(a, b, "--html", self.path("notes.html"))
        self.assertEqual(code, 2)
        self.assertIn("refusing to overwrite it", err)
        code, _, err = self.compare(a, b, "--html", a)
        self.assertEqual(code, 2)


if __name__ == "__main__":
    unittest.main()
