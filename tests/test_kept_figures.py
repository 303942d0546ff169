"""A reply from the cache, a recording or a re-scored record is held to `max_latency_s` and
`max_cost_usd` with the figures it was made with, and a figure not known now keeps the check's
last known fail: where a reply came from never turns a case fixed, then regressed.

Every run goes through evals' command line (evals.main), with a client in a file of the test's
folder that sleeps and answers as replies.json says, and counts its calls."""

import io
import json
import os
import tempfile
import unittest
from unittest import mock

import evals

CLIENT = '''
import json, os, time

HERE = os.path.dirname(os.path.abspath(__file__))


def ask(prompt, *, case, attempt):
    with open(os.path.join(HERE, "calls.txt"), "a") as handle:
        handle.write(case.id + "\\n")
    with open(os.path.join(HERE, "replies.json")) as handle:
        spec = json.load(handle)[case.id]
    sleeps = spec.get("sleep", [0])
    time.sleep(sleeps[attempt % len(sleeps)])
    return spec["reply"]
'''

ANSWER = {"type": "contains_all", "values": ["ok"]}
SLOW = {"sleep": [0.3], "reply": "ok"}  # a budget of 0.1 s fails, by 0.2 s at least
FAST = {"reply": "ok"}  # no sleep: a budget of 5 s passes
# 100,000 input tokens of gpt-4o-mini at $0.15 a million: $0.015, over a budget of $0.01
PRICED = {"reply": {"text": "ok", "model": "gpt-4o-mini",
                    "usage": {"input_tokens": 100000, "output_tokens": 0}}}


def case(case_id, *checks):
    return {"id": case_id, "input": f"{case_id}?", "checks": [ANSWER, *checks]}


def latency(seconds):
    return {"type": "max_latency_s", "seconds": seconds}


class KeptFiguresCase(unittest.TestCase):
    def setUp(self):
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.dir = tmp.name
        with open(self.path("client.py"), "w") as handle:
            handle.write(CLIENT)
        environ = mock.patch.dict(os.environ, {"EVALS_CACHE_PATH": self.path("cache.sqlite")})
        environ.start()
        self.addCleanup(environ.stop)

    def path(self, name):
        return os.path.join(self.dir, name)

    def write(self, cases, replies):
        with open(self.path("cases.jsonl"), "w") as handle:
            handle.writelines(json.dumps(c) + "\n" for c in cases)
        with open(self.path("replies.json"), "w") as handle:
            json.dump(replies, handle)

    def calls(self):
        if not os.path.exists(self.path("calls.txt")):
            return 0
        with open(self.path("calls.txt")) as handle:
            return len(handle.read().split())

    def run_cli(self, *args, client=True):
        """(exit code, stdout, the run's record, from --json) of a run of cases.jsonl against
        last_run.json (written when a verdict changed); with `client`, the client of the folder
        answers."""
        written = self.path("record.json")
        argv = ["--cases", self.path("cases.jsonl"), "--baseline", self.path("last_run.json"),
                "--no-history", "--json", written, *args]
        if client:
            argv += ["--client", self.path("client.py") + ":ask"]
        out, err = io.StringIO(), io.StringIO()
        code = evals.main(argv, out, err)
        with open(written) as handle:
            record = json.load(handle)
        return code, out.getvalue() + err.getvalue(), record

    def entry(self, record, case_id):
        return next(e for e in record["cases"] if e["id"] == case_id)


class CachedLatencyTest(KeptFiguresCase):
    def test_a_case_that_failed_its_latency_live_still_fails_from_the_cache(self):
        self.write([case("slow", latency(0.1))], {"slow": SLOW})
        code, out, first = self.run_cli("--cache")
        live = self.entry(first, "slow")
        self.assertEqual((live["status"], live["change"], self.calls()), ("fail", "new", 1), out)
        self.assertGreaterEqual(live["latency_s"], 0.3)
        for run in (2, 3):
            code, out, record = self.run_cli("--cache")
            entry = self.entry(record, "slow")
            self.assertEqual(self.calls(), 1, "the cache answers: no call")
            self.assertEqual(record["summary"]["cached"], 1)
            self.assertEqual((code, entry["status"], entry["change"]),
                             (0, "fail", "still_failing"), f"run {run}: {out}")
            self.assertEqual(record["summary"]["fixed"] + record["summary"]["regressed"], 0)
            # the latency kept with the reply: the live call's, which measured it from inside
            kept = entry["kept_latency_s"]
            self.assertTrue(0.3 <= kept <= live["latency_s"])
            self.assertEqual(entry["checks"][1]["reason"],
                             f"took {kept:.3f} s, expected at most 0.1 s")
            # a reply from the cache took no time in this run: none, and no percentiles
            self.assertIsNone(entry["latency_s"])
            self.assertEqual(record["summary"]["latency_s"], {})

    def test_a_rescore_of_the_runs_own_record_fails_with_the_recorded_latency(self):
        self.write([case("slow", latency(0.1)), case("fast", latency(5))],
                   {"slow": SLOW, "fast": FAST})
        self.run_cli()
        with open(self.path("last_run.json")) as handle:
            recorded = {e["id"]: e["latency_s"] for e in json.load(handle)["cases"]}
        code, out, record = self.run_cli("--rescore", self.path("last_run.json"),
                                         "--out", self.path("rescored.json"), client=False)
        self.assertEqual(self.calls(), 2, "a re-score calls no model")
        slow, fast = self.entry(record, "slow"), self.entry(record, "fast")
        self.assertEqual((code, slow["status"], slow["change"]), (0, "fail", "still_failing"), out)
        self.assertEqual(slow["checks"][1],
                         {"type": "max_latency_s", "passed": False,
                          "reason": f"took {recorded['slow']:.3f} s, expected at most 0.1 s"})
        self.assertEqual((fast["status"], fast["change"], fast["checks"][1]["passed"]),
                         ("pass", "passing", True))
        self.assertEqual((slow["kept_latency_s"], fast["kept_latency_s"]),
                         (recorded["slow"], recorded["fast"]))
        self.assertEqual((slow["latency_s"], fast["latency_s"]), (None, None))


class KeptCostTest(KeptFiguresCase):
    def test_the_usage_kept_with_a_reply_prices_it_from_the_cache_a_recording_and_a_record(self):
        self.write([case("dear", {"type": "max_cost_usd", "usd": 0.01})], {"dear": PRICED})
        reason = "cost $0.015000, expected at most $0.01"
        code, out, first = self.run_cli("--cache", "--record", self.path("rec.jsonl"))
        self.assertEqual(self.entry(first, "dear")["checks"][1]["reason"], reason, out)
        for source in (["--cache"], ["--rescore", self.path("rec.jsonl")],
                       ["--rescore", self.path("last_run.json"), "--out", self.path("r.json")]):
            code, out, record = self.run_cli(*source, client=source == ["--cache"])
            entry = self.entry(record, "dear")
            self.assertEqual((entry["status"], entry["change"], entry["checks"][1]["reason"]),
                             ("fail", "still_failing", reason), f"{source}: {out}")
            self.assertEqual(record["summary"]["cost_usd"], 0.015)
        self.assertEqual(self.calls(), 1)
        with open(self.path("rec.jsonl")) as handle:
            row = json.loads(handle.read())
        self.assertEqual((row["model"], row["usage"], row["latency_s"]),
                         ("gpt-4o-mini", {"input_tokens": 100000, "output_tokens": 0},
                          first["cases"][0]["latency_s"]))


class UnknownFigureTest(KeptFiguresCase):
    def recording_without_figures(self, *ids):
        with open(self.path("old.jsonl"), "w") as handle:
            handle.writelines(json.dumps({"id": i, "output": "ok"}) + "\n" for i in ids)

    def test_an_unknown_latency_keeps_the_baselines_fail_and_never_passes(self):
        self.write([case("slow", latency(0.1)), case("fast", latency(5))],
                   {"slow": SLOW, "fast": FAST})
        code, out, first = self.run_cli()
        baseline_reason = self.entry(first, "slow")["checks"][1]["reason"]
        self.assertTrue(baseline_reason.startswith("took 0.3"), baseline_reason)
        self.recording_without_figures("slow", "fast")
        for run in (2, 3):  # the kept fail is kept again, its reason not nested
            code, out, record = self.run_cli("--rescore", self.path("old.jsonl"), client=False)
            slow, fast = self.entry(record, "slow"), self.entry(record, "fast")
            self.assertEqual((code, slow["status"], slow["change"]),
                             (0, "fail", "still_failing"), f"run {run}: {out}")
            self.assertEqual(slow["checks"][1],
                             {"type": "max_latency_s", "passed": False, "unknown": True,
                              "reason": "not measured now; when last measured: "
                                        + baseline_reason})
            self.assertIn("STILL FAILING: slow", out)
            # a baseline that passed: skipped, never a pass; the case passes on its answer
            self.assertEqual((fast["status"], fast["change"]), ("pass", "passing"))
            self.assertEqual((fast["checks"][1]["passed"], fast["checks"][1]["skipped"]),
                             (None, True))
            self.assertEqual(record["summary"]["pass_rate"], 0.5)

    def test_a_repeated_call_keeps_the_verdict_of_the_baselines_call_of_its_index(self):
        # calls 1 and 3 sleep: the latency check passes 1 of 3 calls, the case fails
        self.write([case("mixed", latency(0.1))], {"mixed": {"sleep": [0.3, 0, 0.3],
                                                             "reply": "ok"}})
        code, out, first = self.run_cli("--repeat", "3")
        live = self.entry(first, "mixed")
        self.assertEqual((live["status"], live["passes"], live["calls"]), ("fail", 1, 3), out)
        # the same record as an older release could have written it of a replay: no latency
        for row in [live, *live["attempts"]]:
            row["latency_s"] = None
        with open(self.path("old.json"), "w") as handle:
            json.dump(first, handle)
        code, out, record = self.run_cli("--rescore", self.path("old.json"), "--repeat", "3",
                                         "--out", self.path("r.json"), client=False)
        entry = self.entry(record, "mixed")
        self.assertEqual((entry["status"], entry["change"], entry["passes"], entry["calls"]),
                         ("fail", "still_failing", 1, 3), out)
        self.assertEqual((entry["checks"][1]["passes"], entry["checks"][1]["calls"]), (0, 2))
        self.assertEqual([a["status"] for a in entry["attempts"]],
                         [a["status"] for a in live["attempts"]])

    def test_a_malformed_figure_is_refused_naming_file_line_and_field(self):
        self.write([case("a", latency(1))], {})
        with open(self.path("bad.jsonl"), "w") as handle:
            handle.write(json.dumps({"id": "a", "output": "ok", "latency_s": "fast"}) + "\n")
        out, err = io.StringIO(), io.StringIO()
        code = evals.main(["--cases", self.path("cases.jsonl"), "--no-save",
                           "--rescore", self.path("bad.jsonl")], out, err)
        self.assertEqual(code, 2)
        self.assertIn(f"{self.path('bad.jsonl')}:1: 'latency_s' must be a number of seconds "
                      "(0 or more), or null", err.getvalue())


if __name__ == "__main__":
    unittest.main()
