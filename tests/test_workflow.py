"""Workflows around a run: selection, shards and merge, history, add, check, repeats, budget.

Everything runs in a temporary directory with a tiny client module written there; the command
line is driven in process through evals.main([...], stdout, stderr), except where two real
processes must race for the history database.
"""

import io
import json
import os
import sqlite3
import subprocess
import shlex
import shutil
import sys
import tempfile
import threading
import time
import unittest
import unittest.mock
import xml.etree.ElementTree as ET

import evals
import evals_extras

PRICE = evals_extras.call_cost  # how a run with evals_extras prices its calls

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EVALS = os.path.join(ROOT, "evals.py")

# Answers come from answers.json beside the module: {input: answer}. "!raise" raises; an
# object {"text", "model", "usage"} is returned as a str subclass carrying model and usage.
# Every prompt is logged to calls.log, so a test sees exactly which cases were called.
CLIENT = '''
import json, os, time
HERE = os.path.dirname(os.path.abspath(__file__))


class Answer(str):
    pass


def ask(prompt):
    with open(os.path.join(HERE, "calls.log"), "a") as log:
        log.write(prompt + "\\n")
    with open(os.path.join(HERE, "answers.json")) as handle:
        answer = json.load(handle)[prompt]
    if answer == "!raise":
        raise RuntimeError("provider unavailable")
    if answer == "!rendezvous":
        # Wait until every process of a concurrent test has reached this point, so their
        # history writes start together.
        open(os.path.join(HERE, "ready-%d" % os.getpid()), "w").close()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if len([n for n in os.listdir(HERE) if n.startswith("ready-")]) >= 2:
                break
            time.sleep(0.01)
        return "ok"
    if isinstance(answer, dict):
        out = Answer(answer["text"])
        out.model = answer["model"]
        out.usage = answer["usage"]
        return out
    return answer
'''


def ok_case(case_id, tags=None):
    """A case that passes when the answer contains "ok"; its input is "<id>?"."""
    case = {"id": case_id, "input": case_id + "?",
            "checks": [{"type": "contains_all", "values": ["ok"]}]}
    if tags is not None:
        case["tags"] = tags
    return case


class Workspace(unittest.TestCase):
    """A temp dir with client.py, answers.json, cases.jsonl and helpers to run the CLI."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.dir = self.tmp.name
        self.cases = self.path("cases.jsonl")
        self.baseline = self.path("last_run.json")
        self.client = self.path("client.py") + ":ask"
        with open(self.path("client.py"), "w") as handle:
            handle.write(CLIENT)

    def path(self, name):
        return os.path.join(self.dir, name)

    def write_cases(self, cases):
        with open(self.cases, "w") as handle:
            handle.write("".join(json.dumps(c) + "\n" for c in cases))

    def answer(self, answers):
        with open(self.path("answers.json"), "w") as handle:
            json.dump(answers, handle)

    def all_ok(self, ids, **overrides):
        answers = {i + "?": "ok" for i in ids}
        answers.update((i + "?", v) for i, v in overrides.items())
        self.answer(answers)

    def main(self, *argv):
        out, err = io.StringIO(), io.StringIO()
        code = evals.main(list(argv), out, err)
        return code, out.getvalue(), err.getvalue()

    def run_cli(self, *args):
        return self.main("--cases", self.cases, "--baseline", self.baseline,
                         "--client", self.client, *args)

    def load(self, name):
        with open(self.path(name)) as handle:
            return json.load(handle)

    def calls(self):
        try:
            with open(self.path("calls.log")) as handle:
                calls = handle.read().splitlines()
        except FileNotFoundError:
            return []
        os.remove(self.path("calls.log"))
        return calls


# ---------------------------------------------------------------------------------------------
# 1. Selection
# ---------------------------------------------------------------------------------------------


class SelectionTest(Workspace):
    IDS = ["refund-small", "refund-large", "json-shape", "greeting", "tone"]

    def setUp(self):
        super().setUp()
        self.write_cases([ok_case("refund-small", ["smoke", "billing"]),
                          ok_case("refund-large", ["billing"]),
                          ok_case("json-shape", ["format"]),
                          ok_case("greeting", ["smoke"]),
                          ok_case("tone")])
        self.all_ok(self.IDS)

    def test_tag_selects_cases_with_any_of_the_tags_in_file_order(self):
        code, out, _ = self.run_cli("--tag", "format", "--tag", "smoke", "--no-history")
        self.assertEqual(code, 0, out)
        self.assertEqual(self.calls(), ["refund-small?", "json-shape?", "greeting?"])
        self.assertIn("3 of 5 cases", out)

    def test_another_case_file_replacing_the_baseline_is_warned_before_any_call(self):
        self.assertEqual(self.run_cli("--no-history")[0], 0)
        other = self.path("other.jsonl")
        with open(other, "w") as handle:
            handle.write(json.dumps(ok_case("greeting")) + "\n")
        code, out, err = self.main("--cases", other, "--baseline", self.baseline,
                                   "--client", self.client, "--no-save", "--no-history")
        self.assertEqual((code, err), (0, ""), out)  # --no-save replaces nothing
        code, out, err = self.main("--cases", other, "--baseline", self.baseline,
                                   "--client", self.client, "--no-history")
        self.assertEqual(code, 0, out + err)
        self.assertIn(f"evals: warning: {self.baseline} is the baseline of {self.cases}, not "
                      f"{other}; this run replaces it and drops 4 cases", err)
        code, out, err = self.main("--cases", other, "--baseline", self.baseline,
                                   "--client", self.client, "--no-history")
        self.assertEqual(err, "")  # now it is other.jsonl's own baseline

    def test_id_glob_patterns_any_of_several(self):
        code, out, _ = self.run_cli("--id", "refund-*", "--id", "ton?", "--no-history")
        self.assertEqual(code, 0, out)
        self.assertEqual(self.calls(), ["refund-small?", "refund-large?", "tone?"])
        # A pattern matches the whole id, not a substring.
        code, _, err = self.run_cli("--id", "refund", "--no-history")
        self.assertEqual(code, 2)
        self.assertEqual(self.calls(), [])

    def test_tag_and_id_combine_as_and(self):
        self.run_cli("--tag", "billing", "--id", "*-large", "--no-history")
        self.assertEqual(self.calls(), ["refund-large?"])

    def test_empty_selection_exits_2_with_a_clear_message_and_calls_nothing(self):
        before = os.path.exists(self.baseline)
        code, out, err = self.run_cli("--tag", "nonexistent", "--no-history")
        self.assertEqual(code, 2)
        self.assertEqual(err, "evals: no case matches the selection (--tag, --id, --failed); the "
                              "case file's tags: billing, format, smoke\n")
        code, out, err = self.run_cli("--id", "nothing", "--id", "refund-larg", "--no-history")
        self.assertIn("(--tag, --id, --failed); did you mean 'refund-large'?\n", err)
        # a tag and an id that both exist, a glob: nothing to suggest
        for argv in (["--tag", "smoke", "--id", "refund-large"], ["--id", "refund-*x"]):
            code, out, err = self.run_cli(*argv, "--no-history")
            self.assertEqual(err, "evals: no case matches the selection (--tag, --id, "
                                  "--failed)\n", argv)
        self.assertEqual(self.calls(), [])
        self.assertEqual(os.path.exists(self.baseline), before)

    def test_failed_reruns_only_what_did_not_pass_and_keeps_the_rest(self):
        self.all_ok(self.IDS, **{"json-shape": "nope", "tone": "!raise"})
        self.assertEqual(self.run_cli("--no-history")[0], 2)  # tone errored
        self.calls()
        # A case added since the baseline has no last status: it is run too.
        self.write_cases([ok_case("refund-small", ["smoke", "billing"]),
                          ok_case("refund-large", ["billing"]),
                          ok_case("json-shape", ["format"]),
                          ok_case("greeting", ["smoke"]),
                          ok_case("tone"), ok_case("brand-new")])
        self.all_ok(self.IDS + ["brand-new"])
        code, out, _ = self.run_cli("--failed", "--no-history")
        self.assertEqual(code, 0, out)
        self.assertEqual(self.calls(), ["json-shape?", "tone?", "brand-new?"])
        record = self.load("last_run.json")
        by_id = {e["id"]: e for e in record["cases"]}
        self.assertEqual(set(by_id), set(self.IDS) | {"brand-new"})
        for case_id in ("refund-small", "refund-large", "greeting"):
            self.assertEqual(by_id[case_id]["change"], "not_run", case_id)
            self.assertEqual(by_id[case_id]["status"], "pass")
            self.assertEqual(by_id[case_id]["baseline"], "pass")
        self.assertEqual(by_id["json-shape"]["change"], "fixed")
        self.assertEqual(by_id["tone"]["change"], "new")  # errored before: no baseline yet
        self.assertEqual(by_id["brand-new"]["change"], "new")
        self.assertEqual(record["summary"]["total"], 3)
        # Nothing left to rerun: that is good news, not invalid input, and nothing is written.
        with open(self.baseline, "rb") as handle:
            kept = handle.read()
        calls = len(self.calls())
        code, out, _ = self.run_cli("--failed", "--no-history")
        self.assertEqual(code, 0)
        self.assertIn("nothing to rerun: every case passed", out)
        self.assertEqual(len(self.calls()), calls)
        with open(self.baseline, "rb") as handle:
            self.assertEqual(handle.read(), kept)
        # A later full run still compares the cases that were not run: a regression there
        # is reported against the kept "pass".
        self.all_ok(self.IDS + ["brand-new"], greeting="nope")
        code, out, _ = self.run_cli("--no-history")
        self.assertEqual(code, 1, out)
        self.assertIn("REGRESSED: greeting", out)
        self.assertEqual(len(self.calls()), 6)
        by_id = {e["id"]: e for e in self.load("last_run.json")["cases"]}
        self.assertEqual(by_id["greeting"]["change"], "regressed")
        self.assertEqual(by_id["refund-small"]["change"], "passing")


# ---------------------------------------------------------------------------------------------
# 2. Shards and merge
# ---------------------------------------------------------------------------------------------

SHARD_IDS = ["c%d" % n for n in range(9)]


def comparable(record):
    """The record's cases without timing fields, which differ between any two runs."""
    def strip(entry):
        entry = {k: v for k, v in entry.items() if k != "latency_s"}
        if entry.get("attempts"):
            entry["attempts"] = [{k: v for k, v in a.items() if k != "latency_s"}
                                 for a in entry["attempts"]]
        return entry
    return [strip(e) for e in record["cases"]]


COUNT_KEYS = ("total", "passed", "failed", "review", "errored", "pass_rate",
              "previous_pass_rate", "regressed", "fixed", "still_failing", "passing", "new",
              "errored", "removed", "flaky")


class ShardOfTest(unittest.TestCase):
    def test_same_id_same_shard_whatever_else_is_in_the_suite(self):
        ids = ["case-%d" % n for n in range(200)]
        first = {i: evals.shard_of(i, 4) for i in ids}
        more = list(reversed(ids)) + ["extra-%d" % n for n in range(50)]
        second = {i: evals.shard_of(i, 4) for i in more}
        self.assertEqual(first, {i: second[i] for i in ids})
        # Deterministic across processes too (not Python's salted hash()).
        done = subprocess.run(
            [sys.executable, "-c", "import evals; print([evals.shard_of('case-%d' % n, 4) "
             "for n in range(20)])"], cwd=ROOT, capture_output=True, text=True, timeout=60)
        self.assertEqual(done.stdout.strip(), str([first["case-%d" % n] for n in range(20)]))

    def test_shards_partition_the_suite(self):
        cases = [evals.Case(id="case-%d" % n, input="x", checks=()) for n in range(100)]
        picked = [evals.select_cases(cases, shard=(k, 3)) for k in (1, 2, 3)]
        ids = [c.id for part in picked for c in part]
        self.assertEqual(sorted(ids), sorted(c.id for c in cases))  # each exactly once
        self.assertTrue(all(picked), "every shard of 100 cases has some")
        for k, part in enumerate(picked):
            self.assertEqual([c.id for c in part],
                             [c.id for c in cases if evals.shard_of(c.id, 3) == k])
        self.assertEqual(evals.select_cases(cases, shard=(1, 1)), cases)


class ShardMergeTest(Workspace):
    def setUp(self):
        super().setUp()
        self.write_cases([ok_case(i) for i in SHARD_IDS])
        shards = {evals.shard_of(i, 3) for i in SHARD_IDS}
        self.assertEqual(shards, {0, 1, 2}, "the fixture needs a case in every shard")
        # The baseline: everything passed.
        self.all_ok(SHARD_IDS)
        self.assertEqual(self.run_cli("--no-history")[0], 0)

    def run_shards(self):
        for k in (1, 2, 3):
            code, out, err = self.run_cli("--shard", "%d/3" % k, "--out",
                                          self.path("run-%d.json" % k), "--no-history")
            self.assertIn(code, (0, 1, 2), err)
        return [self.path("run-%d.json" % k) for k in (1, 2, 3)]

    def merge(self, *records, out="merged.json"):
        return self.main("merge", *records, "--cases", self.cases, "--out", self.path(out))

    def assert_merge_matches_unsharded(self, expected_code):
        with open(self.baseline, "rb") as handle:
            baseline_bytes = handle.read()
        code_full, out_full, _ = self.run_cli("--out", self.path("full.json"), "--no-history")
        self.assertEqual(code_full, expected_code, out_full)
        records = self.run_shards()
        # --out leaves the baseline alone, so every shard compared with the same one.
        with open(self.baseline, "rb") as handle:
            self.assertEqual(handle.read(), baseline_bytes)
        code, out, err = self.merge(*records)
        self.assertEqual(code, expected_code, out + err)
        full, merged = self.load("full.json"), self.load("merged.json")
        self.assertEqual(comparable(merged), comparable(full))
        for key in COUNT_KEYS + ("previous_pass_rate", "previous_passed", "previous_total"):
            self.assertEqual(merged["summary"][key], full["summary"][key], key)
        self.assertLessEqual(merged["started_at"], merged["finished_at"])
        return full, merged, out

    def test_all_pass(self):
        full, merged, out = self.assert_merge_matches_unsharded(0)
        self.assertEqual(merged["summary"]["passed"], 9)
        self.assertIn("merged 3 records", out)

    def test_regression_exits_1_after_merge(self):
        self.all_ok(SHARD_IDS, c4="nope")
        full, merged, out = self.assert_merge_matches_unsharded(1)
        self.assertEqual(merged["summary"]["regressed"], 1)
        self.assertIn("REGRESSED: c4", out)

    def test_error_exits_2_after_merge(self):
        self.all_ok(SHARD_IDS, c4="nope", c7="!raise")
        full, merged, out = self.assert_merge_matches_unsharded(2)
        self.assertEqual(merged["summary"]["errored"], 1)
        self.assertEqual(merged["summary"]["regressed"], 1)
        self.assertIn("ERROR: c7", out)

    def test_merge_keeps_the_cases_each_shard_found_flaky_in_the_history(self):
        # c4 passed, failed, passed: each shard's summary lists its flaky cases from the
        # history, and merge recomputed the summary without them
        for answer in ("ok", "nope", "ok"):
            self.all_ok(SHARD_IDS, c4=answer)
            self.run_cli()
        records = []
        for k in (1, 2, 3):
            self.run_cli("--shard", "%d/3" % k, "--out", self.path("run-%d.json" % k))
            records.append(self.path("run-%d.json" % k))
        code, out, err = self.merge(*records)
        self.assertEqual(code, 0, out + err)
        self.assertEqual(self.load("merged.json")["summary"]["flaky_history"],
                         [{"id": "c4", "passes": 3, "runs": 4}])
        self.assertIn("flaky (both outcomes in recent runs): c4 (3/4 runs passed)", out)

    def test_the_workflows_gate_fails_below_its_pass_rate_floor(self):
        # c0 failing is in the baseline (accepted), so nothing regresses: only the floor the
        # workflow's merge line sets turns the gate red (8 of 9 is 88.9%).
        self.all_ok(SHARD_IDS, c0="no")
        self.assertEqual(self.run_cli("--accept", "--no-history")[0], 0)
        records = self.run_shards()
        with open(os.path.join(ROOT, ".github", "workflows", "evals.yml"), encoding="utf-8") as f:
            line = next(l.strip() for l in f if l.strip().startswith("python evals.py merge"))
        argv = shlex.split(line)[2:]
        self.assertIn("--min-pass-rate", argv)
        argv = [a for a in argv if a != "run-shard-*.json"]
        argv[argv.index("--out") + 1] = self.path("merged.json")
        code, out, err = self.main(*argv, *records, "--cases", self.cases)
        self.assertEqual(code, 1, out + err)
        self.assertIn("88.9%", out)
        self.assertIn("minimum 95", out)
        floor = argv.index("--min-pass-rate")
        without_floor = argv[:floor] + argv[floor + 2 :]
        self.assertEqual(self.main(*without_floor, *records, "--cases", self.cases)[0], 0)

    def test_missing_shard_is_refused_naming_a_case(self):
        # The shards compare with a baseline that has every case, so each record carries the
        # cases it did not run as "not_run": that must not hide a shard that never ran.
        records = self.run_shards()
        code, out, err = self.merge(records[0], records[1])
        self.assertEqual(code, 2, out)
        lost = [i for i in SHARD_IDS if evals.shard_of(i, 3) == 2]
        self.assertIn("run by no shard", err)
        for case_id in lost:
            self.assertIn(case_id, err)
        self.assertFalse(os.path.exists(self.path("merged.json")))

    def test_many_missing_cases_say_how_many_are_not_listed(self):
        os.remove(self.baseline)
        record = evals_extras.read_record(self.run_shards()[0])  # the cases of shard 1 of 3
        ran = [entry["id"] for entry in record["cases"]]
        lost = [f"lost-{n}" for n in range(12)]
        with self.assertRaises(evals.EvalsError) as caught:
            evals_extras.merge_records([record], ran + lost)
        self.assertEqual(str(caught.exception), "12 case(s) were run by no shard: "
                         + ", ".join(lost[:10]) + " (+2 more); is a shard's record missing?")

    def test_missing_shard_without_a_baseline_is_refused(self):
        os.remove(self.baseline)
        records = self.run_shards()
        code, _, err = self.merge(records[0], records[2])
        self.assertEqual(code, 2)
        lost = [i for i in SHARD_IDS if evals.shard_of(i, 3) == 1]
        self.assertIn("run by no shard: " + ", ".join(lost), err)

    def test_doubled_shard_is_refused_naming_the_case(self):
        records = self.run_shards()
        code, _, err = self.merge(records[0], records[1], records[2], records[1])
        self.assertEqual((code, err), (2, f"evals: {records[1]} is given twice\n"))
        same = os.path.join(os.path.dirname(records[1]), ".", os.path.basename(records[1]))
        code, _, err = self.merge(records[0], records[1], records[2], same)
        self.assertEqual((code, err), (2, f"evals: {same} is given twice\n"))
        shutil.copy(records[1], self.path("copy.json"))
        code, _, err = self.merge(records[0], records[1], records[2], self.path("copy.json"))
        self.assertEqual(code, 2)
        first = [i for i in SHARD_IDS if evals.shard_of(i, 3) == 1][0]
        self.assertIn("case %r was run by more than one shard: %s and %s"
                      % (first, records[1], self.path("copy.json")), err)
        self.assertFalse(os.path.exists(self.path("merged.json")))

    def test_previous_pass_rate_is_the_whole_suites_not_one_shards(self):
        self.all_ok(SHARD_IDS, c4="nope")
        self.assertEqual(self.run_cli("--no-history", "--accept")[0], 0)  # baseline: 8 of 9
        self.all_ok(SHARD_IDS)
        records = self.run_shards()
        for order in (records, records[::-1]):
            code, out, _ = self.merge(*order)
            self.assertEqual(code, 0, out)
            self.assertIn("last run 88.9%", out)
            self.assertEqual(self.load("merged.json")["summary"]["previous_passed"], 8)

    def test_a_shard_of_another_case_file_version_is_refused(self):
        records = self.run_shards()
        self.write_cases([ok_case(i) for i in SHARD_IDS] + [ok_case("added-later")])
        code, _, err = self.merge(*records)
        self.assertEqual(code, 2)
        self.assertIn("ran another version of the case file", err)
        self.assertFalse(os.path.exists(self.path("merged.json")))


# ---------------------------------------------------------------------------------------------
# 3. History
# ---------------------------------------------------------------------------------------------


class HistoryTest(Workspace):
    IDS = ["flip", "steady", "late"]

    def setUp(self):
        super().setUp()
        self.write_cases([ok_case(i) for i in self.IDS])
        self.db = self.path(os.path.join(".evals", "history.sqlite"))

    def test_every_run_appends_and_history_lists_newest_first(self):
        self.all_ok(self.IDS)
        self.assertEqual(self.run_cli()[0], 0)
        self.all_ok(self.IDS, flip="nope")
        self.assertEqual(self.run_cli()[0], 1)
        self.all_ok(self.IDS, late="nope")
        code, out, _ = self.run_cli()
        self.assertEqual(code, 1)
        # pass, fail, pass: both outcomes, the verdict changed twice.
        self.assertIn("flaky (both outcomes in recent runs): flip (2/3 runs passed)\n", out)

        connection = sqlite3.connect(self.db)
        self.addCleanup(connection.close)
        self.assertEqual(connection.execute("SELECT COUNT(*) FROM runs").fetchone()[0], 3)
        self.assertEqual(connection.execute("SELECT COUNT(*) FROM results").fetchone()[0], 9)

        code, out, _ = self.main("history", "--baseline", self.baseline)
        self.assertEqual(code, 0)
        lines = out.splitlines()[1:]  # under a header line
        self.assertEqual(len(lines), 3)
        self.assertRegex(lines[0], r"^run +3 .* 2/3 passed \(66\.7%\), 1 regressed$")
        self.assertRegex(lines[1], r"^run +2 .* 2/3 passed \(66\.7%\), 1 regressed$")
        self.assertRegex(lines[2], r"^run +1 .* 3/3 passed \(100\.0%\), 0 regressed$")

        code, out, _ = self.main("history", "late", "--baseline", self.baseline)
        self.assertEqual(code, 0)
        statuses = [line.split()[4] for line in out.splitlines()[1:]]
        self.assertEqual(statuses, ["fail", "pass", "pass"])
        self.assertIn("contains_all: missing: 'ok'", out.splitlines()[1])

        code, out, _ = self.main("history", "late", "--baseline", self.baseline, "--limit", "1")
        self.assertEqual(len(out.splitlines()), 2)

        code, _, err = self.main("history", "no-such-case", "--baseline", self.baseline)
        self.assertEqual(code, 2)
        self.assertIn("no history for case 'no-such-case'", err)

    def test_one_flip_is_not_flaky_and_no_history_writes_nothing(self):
        self.all_ok(self.IDS)
        self.run_cli()
        self.all_ok(self.IDS, flip="nope")
        _, out, _ = self.run_cli()
        self.assertNotIn("both outcomes in recent runs", out)
        self.run_cli("--no-history")
        self.assertEqual(len(evals_extras.history_rows(self.db)), 2)

    def test_history_without_a_database_exits_2(self):
        code, _, err = self.main("history", "--baseline", self.baseline)
        self.assertEqual(code, 2)
        self.assertIn("no history yet", err)
        self.assertFalse(os.path.exists(self.db))

    def test_two_concurrent_processes_both_land_completely(self):
        ids = ["p%d" % n for n in range(6)]
        self.write_cases([ok_case(i) for i in ids])
        self.all_ok(ids, p5="!rendezvous")
        db = self.path("shared.sqlite")
        env = dict(os.environ, PYTHONPATH=ROOT)
        procs = [subprocess.Popen(
            [sys.executable, EVALS, "--cases", self.cases, "--client", self.client,
             "--baseline", self.path("base-%d.json" % n), "--history", db, "-q"],
            cwd=self.dir, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            for n in range(2)]
        for proc in procs:
            out, err = proc.communicate(timeout=60)
            self.assertEqual(proc.returncode, 0, err.decode())
            self.assertNotIn("warning", err.decode())
        connection = sqlite3.connect(db)
        self.addCleanup(connection.close)
        self.assertEqual(connection.execute("PRAGMA integrity_check").fetchone()[0], "ok")
        runs = [row[0] for row in connection.execute("SELECT id FROM runs ORDER BY id")]
        self.assertEqual(len(runs), 2)
        for run in runs:
            rows = connection.execute(
                "SELECT case_id, status FROM results WHERE run_id = ? ORDER BY case_id",
                (run,)).fetchall()
            self.assertEqual(rows, [(i, "pass") for i in ids])
        self.assertEqual(
            connection.execute("SELECT SUM(total), SUM(passed) FROM runs").fetchone(), (12, 12))


# ---------------------------------------------------------------------------------------------
# 4. add
# ---------------------------------------------------------------------------------------------


class AddTest(Workspace):
    def setUp(self):
        super().setUp()
        self.write_cases([ok_case("first"), ok_case("second")])

    def add(self, *args):
        return self.main("add", "--cases", self.cases, "--baseline", self.baseline, *args)

    def read(self):
        with open(self.cases, "rb") as handle:
            return handle.read()

    def test_appends_exactly_one_validated_line(self):
        before = self.read()
        code, out, err = self.add("--id", "third", "--input", "Is it ok?", "--max-words", "5",
                                  "--contains-all", "ok", "--contains-all", "yes",
                                  "--tag", "smoke", "--description", "from a ticket")
        self.assertEqual(code, 0, err)
        after = self.read()
        self.assertTrue(after.startswith(before))
        added = after[len(before):]
        self.assertEqual(added.count(b"\n"), 1)
        self.assertTrue(added.endswith(b"\n"))
        self.assertEqual(json.loads(added), {
            "id": "third", "input": "Is it ok?",
            "checks": [{"type": "contains_all", "values": ["ok", "yes"]},
                       {"type": "max_words", "n": 5}],
            "description": "from a ticket", "tags": ["smoke"]})
        cases, _ = evals.load_cases(self.cases)
        self.assertEqual([c.id for c in cases], ["first", "second", "third"])
        self.assertIn("added case 'third'", out)

    def test_refuses_a_duplicate_id_naming_its_line(self):
        before = self.read()
        code, _, err = self.add("--id", "second", "--input", "x", "--max-words", "3")
        self.assertEqual(code, 2)
        self.assertIn("%s:2: id 'second' exists already" % self.cases, err)
        self.assertEqual(self.read(), before)

    def test_refuses_invalid_checks_and_writes_nothing(self):
        before = self.read()
        for bad in (["--check", '{"type": "max_words"}'],
                    ["--check", '{"type": "no_such_check"}'],
                    ["--check", "{not json"],
                    ["--regex", "(unclosed"],
                    ["--max-words", "-1"]):
            code, _, err = self.add("--id", "new", "--input", "x", *bad)
            self.assertEqual(code, 2, bad)
            self.assertTrue(err.startswith("evals: "), err)
            self.assertEqual(self.read(), before, bad)
        code, _, err = self.add("--id", "new", "--input", "x")
        self.assertEqual(code, 2)
        self.assertIn("at least one check", err)
        self.assertEqual(self.read(), before)

    def test_file_without_trailing_newline(self):
        with open(self.cases, "wb") as handle:
            handle.write(json.dumps(ok_case("only")).encode())
        before = self.read()
        code, _, err = self.add("--id", "two", "--input", "x", "--max-words", "3")
        self.assertEqual(code, 0, err)
        line = json.dumps({"id": "two", "input": "x", "checks": [{"type": "max_words", "n": 3}]})
        self.assertEqual(self.read(), before + b"\n" + line.encode() + b"\n")
        self.assertEqual([c.id for c in evals.load_cases(self.cases)[0]], ["only", "two"])

    def test_missing_file_is_created(self):
        os.remove(self.cases)
        code, _, err = self.add("--id", "one", "--input", "x", "--not-contains", "y")
        self.assertEqual(code, 0, err)
        line = json.dumps({"id": "one", "input": "x",
                           "checks": [{"type": "not_contains", "values": ["y"]}]})
        self.assertEqual(self.read(), line.encode() + b"\n")

    def test_keeps_the_case_file_permissions(self):
        os.chmod(self.cases, 0o644)
        code, _, err = self.add("--id", "third", "--input", "x", "--max-words", "3")
        self.assertEqual(code, 0, err)
        self.assertEqual(os.stat(self.cases).st_mode & 0o777, 0o644)

    def test_from_run_takes_input_and_output_and_says_whether_the_checks_catch_it(self):
        self.write_cases([{"id": "refund", "input": "Can I get a refund?",
                           "checks": [{"type": "max_words", "n": 50}]}])
        self.answer({"Can I get a refund?": "Sure, instant refund, no questions asked."})
        self.assertEqual(self.main("--cases", self.cases, "--baseline", self.baseline,
                                   "--client", self.client, "--no-history")[0], 0)
        code, out, err = self.add("--id", "refund-2", "--from-run", "refund",
                                  "--not-contains", "instant refund")
        self.assertEqual(code, 0, err)
        self.assertIn("FAIL not_contains", out)
        self.assertIn("catches this answer", out)
        self.assertNotIn("warning", out)
        added = evals.load_cases(self.cases)[0][-1]
        self.assertEqual((added.id, added.input), ("refund-2", "Can I get a refund?"))

        code, out, _ = self.add("--id", "refund-3", "--from-run", "refund", "--max-words", "20")
        self.assertEqual(code, 0)
        self.assertIn("pass max_words", out)
        self.assertIn("warning: the new case PASSES on that output", out)

        # A record saved without outputs: the case is added, and the user is told that the
        # checks could not be tried.
        self.assertEqual(self.main("--cases", self.cases, "--baseline", self.baseline,
                                   "--client", self.client, "--no-history",
                                   "--omit-outputs")[0], 0)
        code, out, _ = self.add("--id", "refund-5", "--from-run", "refund", "--max-words", "20")
        self.assertEqual(code, 0)
        self.assertIn("has no output for 'refund'", out)
        self.assertNotIn("warning", out)
        self.assertEqual(evals.load_cases(self.cases)[0][-1].id, "refund-5")

        code, out, _ = self.add("--id", "refund-6", "--input", "q", "--output", "x", "--check",
                                '{"type": "python", "function": "tests.user_checks:broken"}')
        self.assertEqual(code, 0)
        self.assertIn("ERROR python: tests.user_checks:broken raised ValueError", out)
        self.assertIn("warning: a check of the new case could not be scored", out)
        self.assertNotIn("catches this answer", out)

        before = self.read()
        code, _, err = self.add("--id", "refund-4", "--from-run", "nope", "--max-words", "2")
        self.assertEqual(code, 2)
        self.assertIn("no case 'nope' in the last run", err)
        self.assertEqual(self.read(), before)

    def test_from_run_without_a_run_record_says_there_is_none(self):
        self.assertFalse(os.path.exists(self.baseline))
        before = self.read()
        code, _, err = self.add("--id", "refund-4", "--from-run", "refund", "--max-words", "2")
        self.assertEqual(code, 2)
        self.assertIn(f"{self.baseline}: no run record there to take 'refund' from (run python "
                      "evals.py first, or give --baseline FILE)", err)
        self.assertEqual(self.read(), before)

    def test_recordings_gives_the_replay_an_answer_for_the_new_case(self):
        self.write_cases([{"id": "refund", "input": "Can I get a refund?",
                           "checks": [{"type": "max_words", "n": 50}]}])
        recordings = self.path("recordings.jsonl")
        with open(recordings, "w") as handle:
            handle.write(json.dumps({"id": "refund", "input": "Can I get a refund?",
                                     "output": "Yes, an instant refund."}) + "\n")
        code, out, err = self.add("--id", "refund-2", "--input", "Refund now?",
                                  "--output", "Instant refund!", "--not-contains", "instant",
                                  "--recordings", recordings)
        self.assertEqual(code, 0, err)
        self.assertIn("recorded its output in", out)
        self.assertEqual(evals.load_outputs(recordings),
                         {"refund": "Yes, an instant refund.", "refund-2": "Instant refund!"})
        # The offline replay now scores it (and finds the bad answer) instead of erroring.
        code, out, _ = self.main("--cases", self.cases, "--baseline", self.baseline,
                                 "--rescore", recordings, "--no-history", "--no-save")
        self.assertEqual(code, 0, out)
        self.assertIn("NEW FAIL: refund-2\n    not_contains: found forbidden: 'instant'", out)
        # An id the recordings file has already is refused before anything is written.
        with open(recordings, "a") as handle:
            handle.write(json.dumps({"id": "orphan", "input": "x", "output": "old"}) + "\n")
        before_cases, before_recordings = self.read(), _text(recordings)
        code, _, err = self.add("--id", "orphan", "--input", "x", "--output", "new",
                                "--max-words", "3", "--recordings", recordings)
        self.assertEqual(code, 2)
        self.assertIn("has a recording for 'orphan' already", err)
        code, _, err = self.add("--id", "no-output", "--input", "x", "--max-words", "3",
                                "--recordings", recordings)
        self.assertEqual(code, 2)
        self.assertIn("--recordings needs an output", err)
        self.assertEqual(self.read(), before_cases)
        self.assertEqual(_text(recordings), before_recordings)

    def test_a_budget_counts_replayed_answers_as_free_not_unpriced(self):
        self.write_cases([{"id": "refund", "input": "refund?",
                           "checks": [{"type": "max_words", "n": 50}]}])
        recordings = self.path("recordings.jsonl")
        with open(recordings, "w") as handle:
            handle.write(json.dumps({"id": "refund", "output": "Yes."}) + "\n")
        code, out, err = self.main("--cases", self.cases, "--baseline", self.baseline,
                                   "--rescore", recordings, "--budget", "0.01", "--no-save",
                                   "--no-history")
        self.assertEqual(code, 0, out)
        self.assertNotIn("could not price", err)  # a replayed answer costs nothing

    def test_recordings_that_is_a_run_record_is_refused_and_left_whole(self):
        self.write_cases([{"id": "refund", "input": "refund?",
                           "checks": [{"type": "max_words", "n": 50}]}])
        self.all_ok(["refund"])
        self.assertEqual(self.main("--cases", self.cases, "--baseline", self.baseline,
                                   "--client", self.client, "--no-history")[0], 0)
        before = _text(self.baseline)
        code, _, err = self.add("--id", "new", "--input", "x", "--output", "y",
                                "--max-words", "3", "--recordings", self.baseline)
        self.assertEqual(code, 2, err)
        self.assertIn(f"{self.baseline}:1: ", err)  # not a recordings line
        self.assertEqual(_text(self.baseline), before)
        json.loads(before)


# ---------------------------------------------------------------------------------------------
# 5. check
# ---------------------------------------------------------------------------------------------


class CheckCommandTest(Workspace):
    def setUp(self):
        super().setUp()
        self.write_cases([{"id": "refund-limit", "input": "x", "checks": [
            {"type": "contains_all", "values": ["manager approval"]},
            {"type": "max_words", "n": 6}]}])

    def check(self, stdin, *args):
        with unittest.mock.patch.object(sys, "stdin", io.StringIO(stdin)):
            return self.main("check", "--cases", self.cases, *args)

    def test_pass_and_fail_from_stdin(self):
        code, out, _ = self.check("Needs manager approval first.", "refund-limit")
        self.assertEqual(code, 0, out)
        self.assertTrue(out.endswith("refund-limit: pass\n"))
        code, out, _ = self.check("Refunds over one hundred dollars need manager approval.",
                                  "refund-limit")
        self.assertEqual(code, 1)
        self.assertIn("FAIL max_words", out)
        self.assertIn("pass contains_all", out)
        self.assertTrue(out.endswith("refund-limit: fail\n"))

    def test_output_option_wins_over_stdin(self):
        code, _, _ = self.check("manager approval", "refund-limit", "--output", "no")
        self.assertEqual(code, 1)

    def test_a_check_that_cannot_be_scored_exits_2_and_a_judge_check_names_the_run(self):
        self.write_cases([
            {"id": "own", "input": "x", "checks": [
                {"type": "python", "function": "tests.user_checks:broken"}]},
            {"id": "judged", "input": "x", "checks": [{"type": "judge", "rubric": "polite"}]}])
        code, out, _ = self.check("text", "own")
        self.assertEqual(code, 2, out)
        self.assertEqual(out, "ERROR python: tests.user_checks:broken raised ValueError: the "
                              "check itself is broken\nown: error\n")
        code, out, err = self.check("text", "judged")
        self.assertEqual(code, 2, out)
        self.assertIn("run the case: python evals.py --id judged --judge MODULE:FUNCTION", err)

    def test_unknown_id_exits_2_with_a_suggestion(self):
        code, out, err = self.check("x", "refund-limt")
        self.assertEqual(code, 2)
        self.assertIn("no case 'refund-limt'; did you mean 'refund-limit'?", err)
        self.assertEqual(out, "")


# ---------------------------------------------------------------------------------------------
# 6. Runner features, in process
# ---------------------------------------------------------------------------------------------


def scripted(*answers):
    """A call_model returning the given answers in turn; "!error" raises."""
    remaining = list(answers)
    calls = []

    def call(prompt):
        calls.append(prompt)
        answer = remaining.pop(0)
        if answer == "!error":
            raise ConnectionError("reset by peer")
        return answer

    call.calls = calls
    return call


class Priced(str):
    def __new__(cls, text, model, usage):
        self = super().__new__(cls, text)
        self.model, self.usage = model, usage
        return self


OK_CASE = evals.Case(id="k", input="q", checks=({"type": "contains_all", "values": ["ok"]},))


class RepeatTest(unittest.TestCase):
    def run_one(self, *answers, repeat=3, min_pass=2):
        call = scripted(*answers)
        [result] = evals.run_cases([OK_CASE], call, evals.RunOptions(repeat=repeat,
                                                                     min_pass=min_pass))
        self.assertEqual(len(call.calls), repeat)
        return result

    def test_two_of_three_passes(self):
        result = self.run_one("ok", "no", "ok")
        self.assertEqual((result.status, result.flaky), ("pass", True))
        self.assertEqual([a["status"] for a in result.attempts], ["pass", "fail", "pass"])
        failed = result.attempts[1]
        self.assertEqual(evals.case_reasons(failed["status"], failed["error"], failed["checks"]),
                         ["contains_all: missing: 'ok'"])

    def test_one_of_three_fails(self):
        result = self.run_one("no", "no", "ok")
        self.assertEqual((result.status, result.flaky), ("fail", True))
        self.assertEqual(result.output, "no")  # the shown attempt has the verdict's status

    def test_all_agree_is_not_flaky(self):
        result = self.run_one("ok", "ok", "ok")
        self.assertEqual((result.status, result.flaky), ("pass", False))

    def test_errors_count_as_not_passing(self):
        result = self.run_one("ok", "!error", "!error")
        self.assertEqual(result.status, "error")
        # An error is no outcome: one scored call, which passed, cannot disagree with itself.
        self.assertFalse(result.flaky)
        self.assertEqual((result.passes, result.calls), (1, 1))
        self.assertIn("ConnectionError: reset by peer", result.error)
        # Two errors cannot hide a definite fail: fail, error, error needs 2 passes, at most
        # 2 possible -> still undecided, so error.
        self.assertEqual(self.run_one("no", "!error", "!error").status, "error")
        # pass, pass, error is enough.
        self.assertEqual(self.run_one("ok", "ok", "!error").status, "pass")
        # fail, fail, error: even a pass instead of the error would not reach 2 -> fail.
        self.assertEqual(self.run_one("no", "no", "!error").status, "fail")

    def test_default_min_pass_is_a_majority(self):
        self.assertEqual(evals.RunOptions(repeat=3).needed, 2)
        self.assertEqual(evals.RunOptions(repeat=4).needed, 3)
        self.assertEqual(self.run_one("ok", "no", "ok", min_pass=None).status, "pass")

    def test_record_and_summary_show_flaky(self):
        call = scripted("ok", "no", "ok")
        options = evals.RunOptions(repeat=3, min_pass=2)
        results = evals.run_cases([OK_CASE], call, options)
        run = evals.RunResult(results, "2024-01-01T00:00:00+00:00",
                              "2024-01-01T00:00:01+00:00", "test")
        baseline = evals.Baseline({})
        record = evals.make_record(run, baseline, [OK_CASE], options=options)
        self.assertEqual(record["summary"]["flaky"], [{"id": "k", "passes": 2, "calls": 3}])
        self.assertEqual(record["options"]["min_pass"], 2)
        self.assertIn("flaky (calls disagreed in this run): k (2/3 calls passed)",
                      evals.format_summary(record))


class ReviewRegressionTest(unittest.TestCase):
    """A regression the judge left undecided ("review") is fixed like a failed one."""

    def test_review_then_pass_is_fixed_and_reported(self):
        for before_status in ("fail", "review"):
            before = {"id": "k", "baseline": "pass", "status": before_status}
            self.assertEqual(evals.decide("pass", before), ("fixed", "pass"), before_status)
        before = {"id": "k", "baseline": "pass", "status": "pass"}
        self.assertEqual(evals.decide("pass", before), ("passing", "pass"))
        self.assertEqual(evals.decide("review", before), ("regressed", "pass"))


class BudgetTest(unittest.TestCase):
    USAGE = {"input_tokens": 1000, "output_tokens": 1000}  # gpt-4o-mini: $0.00075 a call

    def cases(self, n):
        return [evals.Case(id="b%d" % i, input="q%d" % i,
                           checks=({"type": "contains_all", "values": ["ok"]},))
                for i in range(n)]

    def test_calls_stop_before_the_budget_would_be_exceeded(self):
        calls = []

        def call(prompt):
            calls.append(prompt)
            return Priced("ok", "gpt-4o-mini-2024-07-18", dict(self.USAGE))

        budget = evals_extras.Budget(0.0032)
        results = evals.run_cases(self.cases(7), call, evals.RunOptions(
            price=PRICE, budget=budget))
        # 4 calls cost 0.003; a 5th would make 0.00375 > 0.0032.
        self.assertEqual(calls, ["q0", "q1", "q2", "q3"])
        self.assertEqual([r.status for r in results], ["pass"] * 4 + ["error"] * 3)
        for result in results[4:]:
            self.assertIn("BudgetExceeded: budget $0.0032 would be exceeded", result.error)
            self.assertIsNone(result.output)
        self.assertAlmostEqual(budget.spent, 0.003)
        self.assertAlmostEqual(results[0].cost_usd, 0.00075)
        self.assertEqual(results[0].model, "gpt-4o-mini-2024-07-18")
        self.assertEqual(results[0].usage, self.USAGE)

    def test_budget_with_concurrency_never_overspends(self):
        calls = []

        def call(prompt):
            calls.append(prompt)
            return Priced("ok", "gpt-4o-mini", dict(self.USAGE))

        budget = evals_extras.Budget(0.0032)
        results = evals.run_cases(self.cases(12), call,
                                  evals.RunOptions(price=PRICE, budget=budget, concurrency=4))
        self.assertLessEqual(budget.spent, 0.0032)
        self.assertEqual(len(calls), sum(r.status == "pass" for r in results))
        self.assertEqual(len(calls), 4)

    def test_a_call_abandoned_by_the_timeout_is_counted_at_its_estimate(self):
        # It may still be billed: $0.00075 for the first call, the same for the one that
        # overran, so with $0.002 a third call would pass the budget and is not made.
        def call(prompt):
            if prompt == "q1":
                time.sleep(1)
            return Priced("ok", "gpt-4o-mini", dict(self.USAGE))

        budget = evals_extras.Budget(0.002)
        results = evals.run_cases(self.cases(3), call,
                                  evals.RunOptions(price=PRICE, timeout=0.2, budget=budget))
        self.assertEqual([r.status for r in results], ["pass", "error", "error"])
        self.assertIn("TimeoutError", results[1].error)
        self.assertIn("budget", results[2].error)
        self.assertAlmostEqual(budget.spent, 0.0015)

    def test_a_repeated_case_the_budget_stopped_is_an_error_never_a_fail(self):
        def call(prompt):
            return Priced("ok", "gpt-4o-mini", dict(self.USAGE))

        # b0's three calls spend $0.00225 and b1's first $0.00075: the budget stops there.
        results = evals.run_cases(self.cases(3), call,
                                  evals.RunOptions(price=PRICE, repeat=3,
                                                   budget=evals_extras.Budget(0.003)))
        self.assertEqual([r.status for r in results], ["pass", "error", "error"])
        self.assertIn("BudgetExceeded", results[2].error)
        strict = evals.RunOptions(price=PRICE, repeat=3, min_pass=3,
                                  budget=evals_extras.Budget(0.003))
        self.assertEqual([r.status for r in evals.run_cases(self.cases(3), call, strict)],
                         ["pass", "error", "error"])

    def test_a_first_call_abandoned_before_any_price_keeps_the_calls_one_at_a_time(self):
        # Its estimate was no price: had it counted as $0, q1 and q2 would go out together and
        # spend $0.0015 of a $0.001 budget.
        release = threading.Event()
        self.addCleanup(release.set)

        def call(prompt):
            if prompt == "q0":
                release.wait(5)
            return Priced("ok", "gpt-4o-mini", dict(self.USAGE))

        budget = evals_extras.Budget(0.001)
        results = evals.run_cases(self.cases(4), call, evals.RunOptions(price=PRICE, 
            concurrency=3, timeout=0.3, budget=budget))
        self.assertLessEqual(budget.spent, 0.001)
        self.assertEqual(sorted(r.status for r in results), ["error", "error", "error", "pass"])

    def test_unpriced_calls_never_stop_the_run(self):
        def call(prompt):
            return Priced("ok", "some-local-model", dict(self.USAGE))

        results = evals.run_cases(self.cases(3), call,
                                  evals.RunOptions(price=PRICE,
                                                   budget=evals_extras.Budget(0.000001)))
        self.assertEqual([r.status for r in results], ["pass"] * 3)
        self.assertIsNone(results[0].cost_usd)

    def test_unpriced_calls_are_counted_and_do_not_serialise_the_run(self):
        # The first call goes alone (it would calibrate the estimate); once it proved
        # unpriceable, the other two must be in flight together to pass the barrier.
        barrier = threading.Barrier(2, timeout=5)
        first = self.cases(3)[0].input

        def call(prompt):
            if prompt != first:
                barrier.wait()
            return Priced("ok", "some-local-model", dict(self.USAGE))

        budget = evals_extras.Budget(1.0)
        results = evals.run_cases(self.cases(3), call,
                                  evals.RunOptions(price=PRICE, concurrency=3, budget=budget))
        self.assertEqual([r.status for r in results], ["pass"] * 3)
        self.assertEqual(budget.unpriced, 3)


class CostTest(unittest.TestCase):
    def test_a_release_of_a_listed_model_is_priced_as_it(self):
        usage = {"input_tokens": 1_000_000, "output_tokens": 1_000_000}
        self.assertAlmostEqual(evals_extras.call_cost("gpt-4o-mini-2024-07-18", usage), 0.75)
        self.assertAlmostEqual(evals_extras.call_cost("gpt-4o-2024-08-06", usage), 12.5)
        self.assertAlmostEqual(evals_extras.call_cost("gpt-4o", usage), 12.5)
        self.assertAlmostEqual(PRICE("gpt-4.1-nano", {"input_tokens": 2_000_000}), 0.2)
        self.assertAlmostEqual(evals_extras.call_cost("claude-haiku-4-5-20251001", usage), 6.0)
        self.assertAlmostEqual(evals_extras.call_cost("gemini-2.5-flash-001", usage), 2.8)
        # A name that only starts like a listed model is not priced as it: a typo, or a
        # variant with its own price, is "cost unknown", never a guess.
        for model in ("gpt-4o-minimal", "gpt-4o-mnii", "gemini-2.5-flash-lite"):
            self.assertIsNone(evals_extras.call_cost(model, usage), model)

    def test_unknown_model_or_no_usage_is_none(self):
        usage = {"input_tokens": 10, "output_tokens": 10}
        self.assertIsNone(evals_extras.call_cost("mystery-model", usage))
        self.assertIsNone(evals_extras.call_cost("gpt-4", usage))  # not a prefix of gpt-4o
        self.assertIsNone(evals_extras.call_cost(None, usage))
        self.assertIsNone(evals_extras.call_cost("gpt-4o", None))
        self.assertEqual(evals_extras.call_cost("replay", usage), 0.0)

    def test_latency_percentiles_nearest_rank(self):
        results = [evals.CaseResult("c%d" % n, "pass", latency_s=float(n))
                   for n in range(10, 0, -1)]
        results.append(evals.CaseResult("e", "error", latency_s=100.0))
        results.append(evals.CaseResult("f", "fail", latency_s=None))
        self.assertEqual(evals.latency_percentiles(r.latency_s for r in results[:-2]),
                         {"p50": 5.0, "p90": 9.0, "p99": 10.0, "max": 10.0})
        self.assertEqual(evals.latency_percentiles([0.4, 0.1, None, 0.3, 0.2]),
                         {"p50": 0.2, "p90": 0.4, "p99": 0.4, "max": 0.4})
        self.assertEqual(evals.latency_percentiles([None]), {})
        # The summary leaves out errored calls and replayed answers.
        entries = [{"id": r.id, "status": r.status, "latency_s": r.latency_s, "change": "new"}
                   for r in results] + [{"id": "r", "status": "pass", "latency_s": 50.0,
                                         "model": "replay", "change": "new"}]
        self.assertEqual(evals.summarize(entries)["latency_s"]["max"], 10.0)


class PricesFileTest(Workspace):
    def setUp(self):
        super().setUp()
        self.write_cases([ok_case("a"), ok_case("b")])
        usage = {"input_tokens": 500_000, "output_tokens": 250_000}
        self.answer({"a?": {"text": "ok", "model": "acme-large-2025-01", "usage": usage},
                     "b?": {"text": "ok", "model": "gpt-4o-mini", "usage": usage}})

    def write_prices(self, data):
        with open(self.path("prices.json"), "w") as handle:
            json.dump(data, handle)
        return self.path("prices.json")

    def test_prices_file_extends_the_table(self):
        prices = self.write_prices({"acme-large": [2, 4]})
        code, out, err = self.run_cli("--prices", prices, "--no-history")
        self.assertEqual(code, 0, err)
        by_id = {e["id"]: e for e in self.load("last_run.json")["cases"]}
        self.assertAlmostEqual(by_id["a"]["cost_usd"], 2.0)  # 0.5 * 2 + 0.25 * 4
        self.assertAlmostEqual(by_id["b"]["cost_usd"], 0.225)  # built-in price still there
        self.assertEqual(self.load("last_run.json")["summary"]["cost_usd"], 2.225)
        self.assertIn("tokens 1,000,000 in / 500,000 out, estimated cost $2.2250", out)

    def test_without_the_file_the_unknown_model_is_unpriced(self):
        code, _, _ = self.run_cli("--no-history")
        self.assertEqual(code, 0)
        by_id = {e["id"]: e for e in self.load("last_run.json")["cases"]}
        self.assertNotIn("cost_usd", by_id["a"])
        self.assertAlmostEqual(by_id["b"]["cost_usd"], 0.225)

    def test_bad_entries_are_rejected_before_any_call(self):
        for data in ({"acme": [1]}, {"acme": [1, -2]}, {"acme": "cheap"}, {"acme": [True, 1]},
                     [["acme", 1, 2]], {"acme": [float("inf"), 1]}):
            prices = self.write_prices(data)
            code, _, err = self.run_cli("--prices", prices, "--no-history")
            self.assertEqual(code, 2, data)
            self.assertIn("--prices %s" % prices, err)
            self.assertEqual(self.calls(), [], data)
            self.assertFalse(os.path.exists(self.baseline))
        with open(self.path("prices.json"), "w") as handle:
            handle.write("{oops")
        code, _, err = self.run_cli("--prices", self.path("prices.json"), "--no-history")
        self.assertEqual(code, 2)
        self.assertIn("cannot read a JSON price table", err)


# ---------------------------------------------------------------------------------------------
# 7. report
# ---------------------------------------------------------------------------------------------


@unittest.skipUnless(hasattr(evals, "render_junit"), "render_junit is not in evals.py yet")
class ReportCommandTest(Workspace):
    def test_report_writes_a_parseable_junit_file(self):
        self.write_cases([ok_case("a"), ok_case("b"), ok_case("c")])
        self.all_ok(["a", "b", "c"], b="<nope & \x1b[31m>", c="!raise")
        self.assertEqual(self.run_cli("--no-history")[0], 2)
        junit = self.path("report.xml")
        code, out, err = self.main("report", self.baseline, "--junit", junit)
        self.assertEqual(code, 0, err)
        root = ET.parse(junit).getroot()
        self.assertIn(root.tag, ("testsuites", "testsuite"))
        self.assertEqual(len(root.findall(".//testcase")), 3)

    def test_report_refuses_a_file_that_is_not_a_record(self):
        with open(self.path("x.json"), "w") as handle:
            json.dump({"hello": 1}, handle)
        code, _, err = self.main("report", self.path("x.json"), "--junit", self.path("r.xml"))
        self.assertEqual(code, 2)
        self.assertIn("not an evals run record", err)
        self.assertFalse(os.path.exists(self.path("r.xml")))


# ---------------------------------------------------------------------------------------------
# 8. Found in review: resources, odd inputs, the flaky window
# ---------------------------------------------------------------------------------------------


class ReviewFindingsTest(Workspace):
    def test_runs_with_a_time_limit_leave_no_threads_behind(self):
        cases = [evals.Case(id="t%d" % i, input="q", checks=({"type": "max_words", "n": 3},))
                 for i in range(8)]
        before = set(threading.enumerate())  # other tests' threads may end meanwhile
        for _ in range(3):
            evals.run_cases(cases, lambda prompt: "ok", evals.RunOptions(concurrency=4,
                                                                         timeout=5))
        deadline = time.monotonic() + 5
        while set(threading.enumerate()) - before and time.monotonic() < deadline:
            time.sleep(0.02)
        self.assertEqual(set(threading.enumerate()) - before, set())

    def test_add_with_a_lone_surrogate_writes_both_files(self):
        self.write_cases([ok_case("a")])
        recordings = self.path("recs.jsonl")
        code, _, err = self.main("add", "--cases", self.cases, "--id", "b", "--input", "q",
                                 "--output", "half an emoji \ud83d", "--max-words", "1",
                                 "--recordings", recordings)
        self.assertEqual(code, 0, err)
        self.assertEqual(evals.load_outputs(recordings), {"b": "half an emoji \ud83d"})
        self.assertEqual([c.id for c in evals.load_cases(self.cases)[0]], ["a", "b"])

    def test_flaky_counts_each_cases_own_last_runs(self):
        self.write_cases([ok_case("a"), ok_case("b")])
        for answer in ("ok", "no", "ok"):
            self.all_ok(["a", "b"], a=answer)
            self.run_cli()
        self.all_ok(["a", "b"])
        for _ in range(10):
            self.run_cli("--id", "b")
        self.all_ok(["a", "b"], a="no")
        code, out, _ = self.run_cli()
        self.assertEqual(code, 1)
        self.assertIn("flaky (both outcomes in recent runs): a (2/4 runs passed)", out)

    def test_cases_can_be_pickled_and_copied(self):
        import copy
        import pickle

        case = evals.Case(id="a", input="q", checks=({"type": "max_words", "n": 3},))
        self.assertEqual(pickle.loads(pickle.dumps(case)), case)
        self.assertEqual(copy.deepcopy(case), case)
        self.assertIsNone(case.metadata)

    def test_a_baseline_with_anything_after_its_cases_is_refused_not_overwritten(self):
        self.write_cases([ok_case("a")])
        self.all_ok(["a"])
        self.run_cli("--no-history")
        with open(self.baseline, "a") as handle:
            handle.write("<<<<<<< HEAD\n")
        with open(self.baseline) as handle:
            broken = handle.read()
        code, _, err = self.run_cli("--no-history")
        self.assertEqual(code, 2)
        self.assertIn("not valid JSON", err)
        with open(self.baseline) as handle:
            self.assertEqual(handle.read(), broken)

    def test_a_baseline_that_is_only_read_needs_no_writable_folder(self):
        self.write_cases([ok_case("a")])
        self.all_ok(["a"])
        code, _, err = self.run_cli("--baseline", self.path("nodir/last_run.json"),
                                    "--out", self.path("x.json"), "--no-history")
        self.assertEqual(code, 0, err)


def _text(path):
    with open(path, encoding="utf-8") as handle:
        return handle.read()


if __name__ == "__main__":
    unittest.main()
