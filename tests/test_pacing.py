"""Pacing by the provider's rate limits (the harness's Limiter, for any client): the headers read, the waits worked out on a
fake clock, and a live run against a loopback server that enforces a token bucket and refuses
what does not fit. No assertion on how long anything took: speed is benchmarks/bench.py's."""

import contextlib
import io
import json
import math
import os
import tempfile
import threading
import time
import unittest

import evals_extras
from tests._loopback import LoopbackServer
from tests.test_live_runs import KEY, completion, run_evals_in_process, write_cases


class FakeClock:
    """A monotonic clock that only moves when slept on; records the sleeps."""

    def __init__(self):
        self.now, self.slept = 100.0, []

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.slept.append(seconds)
        self.now += seconds


def pacer(tpm=None, stderr=None):
    clock = FakeClock()
    manual = {"tokens": (tpm, tpm / 60.0)} if tpm else {}
    limiter = evals_extras.Limiter(manual, stderr, clock=clock, sleep=clock.sleep)
    limiter.cap = 89  # as a reply's `sent` tells it
    return limiter, clock


PROMPT = "x" * 40  # 10 tokens at 4 characters a token, and 89 of the cap: 99
COSTS = evals_extras._costs(PROMPT, 89)


def openai_headers(tokens_left, reset="6s", limit=4500):
    return {"x-ratelimit-limit-requests": "60", "x-ratelimit-remaining-requests": "59",
            "x-ratelimit-reset-requests": "100ms", "x-ratelimit-limit-tokens": str(limit),
            "x-ratelimit-remaining-tokens": str(tokens_left), "x-ratelimit-reset-tokens": reset}


class HeadersTest(unittest.TestCase):
    def test_reset_durations_and_times(self):
        for text, seconds in (("1s", 1), ("6m0s", 360), ("20ms", 0.02), ("1h2m3.5s", 3723.5),
                              ("0.25", 0.25), ("2025-01-01T00:00:30Z", 30),
                              ("2025-01-01T00:00:30.5+00:00", 30.5),
                              ("2025-01-01T01:00:30+01:00", 30)):
            with self.subTest(text=text):
                self.assertAlmostEqual(evals_extras.parse_reset(text, now=1735689600.0), seconds)
        for junk in (None, "", "soon", "1x", "nan"):
            self.assertIsNone(evals_extras.parse_reset(junk), junk)

    def test_resets_past_absolute_infinite_and_huge(self):
        now = 1735689600.0  # 2025-01-01T00:00:00Z
        for text, seconds in (("0s", 0), ("0", 0), ("2024-12-31T23:59:00Z", 0),  # refilled
                              ("1735689660", 60), ("1735600000", 0),  # Unix times
                              ("366d", None), ("inf", None), ("1e300", None), ("-inf", None),
                              ("3e7", None)):  # 347 days in seconds: read as such
            with self.subTest(text=text):
                found = evals_extras.parse_reset(text, now=now)
                if text == "3e7":
                    self.assertEqual(found, 3e7)
                elif seconds is None:
                    self.assertIsNone(found)
                else:
                    self.assertAlmostEqual(found, seconds)

    def test_openai_and_anthropic_names(self):
        self.assertEqual(evals_extras.rate_limits(openai_headers(100, "5.9s")), {
            "requests": (60, 59, 0.1), "tokens": (4500, 100, 5.9)})
        found = evals_extras.rate_limits({
            "anthropic-ratelimit-requests-limit": "50", "anthropic-ratelimit-requests-remaining": "49",
            "anthropic-ratelimit-requests-reset": "2025-01-01T00:00:01Z",
            "anthropic-ratelimit-input-tokens-limit": "30000",
            "anthropic-ratelimit-input-tokens-remaining": "29000",
            "anthropic-ratelimit-output-tokens-limit": "8000",
            "anthropic-ratelimit-output-tokens-remaining": "x",
            "anthropic-ratelimit-tokens-limit": "30000",  # the stricter of the two, again
            "anthropic-ratelimit-tokens-remaining": "29000"})
        self.assertEqual(set(found), {"requests", "input-tokens"})
        self.assertEqual(found["input-tokens"], (30000, 29000, None))
        self.assertEqual(evals_extras.rate_limits({"content-type": "application/json"}), {})

    def test_costs_follow_the_admission_rule(self):
        self.assertEqual(COSTS, {"requests": 1, "tokens": 99, "input-tokens": 10,
                                 "output-tokens": 89})


class PacerTest(unittest.TestCase):
    def test_nothing_known_nothing_waits(self):
        paced, clock = pacer()
        for _ in range(100):
            paced.take(PROMPT)
        self.assertEqual(clock.slept, [])

    def test_a_request_waits_until_the_tokens_it_needs_have_refilled(self):
        paced, clock = pacer()
        paced.done(paced.take(PROMPT), openai_headers(0, "6s"))  # 4,500 in 6 s: 750 a second
        paced.take(PROMPT)
        self.assertAlmostEqual(sum(clock.slept), 99 / 750)

    def test_what_was_sent_after_a_request_is_taken_off_what_its_answer_reports(self):
        paced, clock = pacer()
        first = paced.take(PROMPT)
        paced.take(PROMPT)  # in flight when the first answer says 198 were left
        paced.done(first, openai_headers(198))
        paced.take(PROMPT)  # 198 - 99 = 99 left: fits
        self.assertEqual(clock.slept, [])
        paced.take(PROMPT)  # 0 left: waits
        self.assertAlmostEqual(sum(clock.slept), 99 / (4302 / 6))

    def test_an_answer_is_taken_less_the_requests_its_own_may_have_overtaken(self):
        paced, clock = pacer()
        first = paced.take(PROMPT)
        second = paced.take(PROMPT)  # sent while the first was in flight: it may arrive first
        paced.done(second, openai_headers(4401))  # 4,500 less the second only
        for _ in range(43):  # 4,401 less the first, which the answer may not count: 43 fit
            paced.take(PROMPT)
        self.assertEqual(clock.slept, [])
        paced.done(first)
        with contextlib.redirect_stderr(io.StringIO()):
            paced.take(PROMPT)
        self.assertGreater(sum(clock.slept), 0)

    def test_limits_by_hand_and_the_notice(self):
        err = io.StringIO()
        paced, clock = pacer(tpm=600, stderr=err)  # full at 600, then 10 a second
        for _ in range(7):
            paced.take(PROMPT)
        self.assertAlmostEqual(sum(clock.slept), (7 * 99 - 600) / 10)
        self.assertRegex(err.getvalue(), r"^evals: waiting for the provider's rate limit \(tokens: "
                                         r"set by hand \(EVALS_RPM, EVALS_TPM, --rate-limit\)\) "
                                         r"until about \d\d:\d\d:\d\d; waiting is not a retry\n$")

    def test_a_request_larger_than_the_limit_waits_for_a_full_bucket_not_forever(self):
        paced, clock = pacer(tpm=50)
        with contextlib.redirect_stderr(io.StringIO()):
            paced.take(PROMPT)  # 99 of a full 50: the bucket owes 49
            paced.take(PROMPT)  # then waits until it is full again: 99 at 50 a minute
        self.assertAlmostEqual(sum(clock.slept), 99 / (50 / 60))


class BucketServer(LoopbackServer):
    """OpenAI-style: `tokens` a `window` refilling continuously; a request costs its prompt
    (4 characters a token) plus its max_tokens at admission; what does not fit is refused 429."""

    def __init__(self, tokens, window):
        super().__init__()
        self.limit, self.window, self.level, self.at = tokens, window, tokens, time.monotonic()
        self.refused, self.lock = 0, threading.Lock()
        self.behave(self.respond)
        self.start()

    def respond(self, request):
        body = request["json"]
        cost = math.ceil(len(body["messages"][-1]["content"]) / 4) + body["max_tokens"]
        with self.lock:
            now = time.monotonic()
            self.level = min(self.limit, self.level + (now - self.at) * self.limit / self.window)
            self.at, fits = now, self.level >= cost
            self.level -= cost if fits else 0
            self.refused += not fits
            reset = (self.limit - self.level) * self.window / self.limit
            headers = {"x-ratelimit-limit-tokens": str(self.limit),
                       "x-ratelimit-remaining-tokens": str(int(self.level)),
                       "x-ratelimit-reset-tokens": "%dms" % (reset * 1000)}
        if not fits:
            return {"status": 429, "headers": dict(headers, **{"Retry-After": "1"}),
                    "json": {"error": {"message": "Rate limit reached", "type": "tokens"}}}
        return {"delay": 0.05, "headers": headers, "json": completion()}


class LearningTest(unittest.TestCase):
    """Where no headers tell the limits, the refusals do, and only when they dominate."""

    def complete(self, limiter, clock, refused, latency=0.2):
        ticket = limiter.take(PROMPT)
        clock.now += 0.001 if refused else latency
        limiter.done(ticket, refused=refused)

    def test_refusals_that_dominate_the_last_calls_set_a_rate_and_aimd_follows(self):
        limiter, clock = pacer()
        for _ in range(20):
            self.complete(limiter, clock, False, latency=0.05)  # 20 answers within a second
        self.assertIsNone(limiter.learned)
        for _ in range(12):  # 12 of the last 20 refused: not yet more than 60 %
            self.complete(limiter, clock, True)
        self.assertIsNone(limiter.learned)
        self.complete(limiter, clock, True)
        # 20 answers in the last 2 s: 10 a second, of which LEARN_START
        self.assertAlmostEqual(limiter.learned.rate, evals_extras.LEARN_START * 10)
        first = limiter.learned.rate
        self.complete(limiter, clock, True)  # started after the rate was set: lowered
        self.assertAlmostEqual(limiter.learned.rate, first * evals_extras.LEARN_DECREASE)
        lowered = limiter.learned.rate
        self.complete(limiter, clock, False)  # an answer raises it, by 1 / rate
        self.assertAlmostEqual(limiter.learned.rate, lowered + 1 / lowered)

    def test_starts_keep_the_learned_rate(self):
        limiter, clock = pacer()
        for _ in range(20):
            self.complete(limiter, clock, False, latency=0.05)
        for _ in range(13):
            self.complete(limiter, clock, True)
        rate, slept = limiter.learned.rate, len(clock.slept)
        for _ in range(3):
            limiter.take(PROMPT)
        self.assertAlmostEqual(sum(clock.slept[slept:]), 3 / rate, places=2)

    def test_after_a_refusal_starts_keep_the_pace_of_answered_calls(self):
        """A refused call comes back at once: its worker must not spin through the cases."""
        clock = FakeClock()
        limiter = evals_extras.Limiter(clock=clock, sleep=clock.sleep, concurrency=4)
        self.complete(limiter, clock, False)  # an answer takes 0.2 s
        self.complete(limiter, clock, True)
        limiter.take(PROMPT)
        limiter.take(PROMPT)
        spacing = 0.2 / (evals_extras.SPIN_PACE * 4)
        # each start one spacing after the one before, from the refused call's (0.001 s ago)
        self.assertAlmostEqual(sum(clock.slept), 2 * spacing - 0.001, places=6)
        clock.now += 0.2  # an answer's time later, the pace is free again
        slept = len(clock.slept)
        limiter.take(PROMPT)
        limiter.take(PROMPT)
        self.assertEqual(clock.slept[slept:], [])

    def test_a_share_of_refusals_at_any_rate_is_no_limit(self):
        """A provider that refuses one call in five, whatever the rate (the benchmark's
        random-429 server): nothing is learned, nothing waits for it."""
        limiter, clock = pacer()
        for number in range(400):
            self.complete(limiter, clock, refused=number % 5 == 0)
        self.assertIsNone(limiter.learned)

    def test_told_limits_are_not_learned_over(self):
        limiter, clock = pacer()
        limiter.done(limiter.take(PROMPT), openai_headers(4000))
        for _ in range(40):
            ticket = limiter.take(PROMPT)
            limiter.done(ticket, openai_headers(4000), refused=True)
        self.assertIsNone(limiter.learned)


class LimitsByHandTest(unittest.TestCase):
    """EVALS_RPM, EVALS_TPM and --rate-limit, read by the harness for any client."""

    def limits(self, rate_limit=None, **environ):
        import argparse
        import unittest.mock

        clean = {k: v for k, v in os.environ.items() if k not in ("EVALS_RPM", "EVALS_TPM")}
        with unittest.mock.patch.dict(os.environ, dict(clean, **environ), clear=True):
            return evals_extras._limits_by_hand(argparse.Namespace(rate_limit=rate_limit))

    def test_a_minute_s_limits_and_a_rate_a_second(self):
        self.assertEqual(self.limits(), {})
        self.assertEqual(self.limits(EVALS_RPM="120", EVALS_TPM="6000"),
                         {"requests": (120.0, 2.0), "tokens": (6000.0, 100.0)})
        self.assertEqual(self.limits(rate_limit=5.0), {"requests": (1.0, 5.0)})
        # --rate-limit and EVALS_RPM: evenly spaced at the lower rate
        self.assertEqual(self.limits(rate_limit=5.0, EVALS_RPM="60")["requests"], (1.0, 1.0))

    def test_a_value_that_is_no_limit_is_refused_naming_the_variable(self):
        for value in ("abc", "0", "0.5", "1e-9", "-5", "inf", "nan"):
            with self.subTest(value=value):
                with self.assertRaisesRegex(evals_extras.EvalsError,
                                            "EVALS_RPM must be a number of 1 or more"):
                    self.limits(EVALS_RPM=value)


class PacedRunTest(unittest.TestCase):
    def test_a_run_at_the_limit_is_answered_and_paced(self):
        """12 cases at -j 4 through a bucket of 5 requests' tokens refilling in 0.5 s: every
        case is answered, and the limit refuses at most one request."""
        server = BucketServer(tokens=500, window=0.5)
        self.addCleanup(server.stop)
        with tempfile.TemporaryDirectory() as folder:
            write_cases(folder, [("case-%02d" % i, "Question %02d" % i) for i in range(12)])
            code, out, err = run_evals_in_process(
                folder, _V1(server), "-j", "4", EVALS_MAX_ATTEMPTS="1", EVALS_MAX_TOKENS="97")
            with open(os.path.join(folder, "record.json"), encoding="utf-8") as handle:
                record = json.load(handle)
        self.assertEqual(code, 0, out + err)
        self.assertEqual(record["summary"]["passed"], 12)
        # The first wave goes out before any answer told the limits or the token cap (4 calls
        # at -j 4): at most one request of the wave after it runs into the limit, and is
        # handed back and called again; every later one is paced.
        self.assertLessEqual(server.refused, 1)
        self.assertEqual(len(server.requests), 12 + server.refused)
        self.assertNotIn(KEY, out + err)


class ResetServer(LoopbackServer):
    """Answers every request, saying its requests limit is used up and refills at `reset`."""

    def __init__(self, reset, limit=600):
        super().__init__()
        headers = {"x-ratelimit-limit-requests": str(limit),
                   "x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": reset}
        self.behave(lambda request: {"headers": headers, "json": completion()})
        self.start()


class ResetRunTest(unittest.TestCase):
    """What a run does with every kind of reset a server may send, through the command line."""

    def run_with(self, reset, cases=3, limit=600):
        server = ResetServer(reset, limit)
        self.addCleanup(server.stop)
        with tempfile.TemporaryDirectory() as folder:
            write_cases(folder, [("case-%d" % i, "Question %d" % i) for i in range(cases)])
            code, out, err = run_evals_in_process(folder, _V1(server), EVALS_MAX_ATTEMPTS="1")
        return code, out + err, server

    def test_a_reset_of_zero_or_past_is_refilled_not_unknown(self):
        # "Not told" would be a limit a minute: 600 a minute, 0 left, a wait of 0.1 s a call;
        # with 10 a minute it would be 6 s a call, said on stderr. Refilled: no wait at all.
        for reset in ("0s", "2020-01-01T00:00:00Z", "1600000000"):
            with self.subTest(reset=reset):
                server = ResetServer(reset, limit=10)
                self.addCleanup(server.stop)
                with tempfile.TemporaryDirectory() as folder:
                    write_cases(folder, [("a", "Question a"), ("b", "Question b")])
                    code, out, err = run_evals_in_process(folder, _V1(server))
                self.assertEqual(code, 0, out + err)
                self.assertNotIn("waiting for the provider's rate limit", err)

    def test_a_reset_beyond_the_longest_wait_errs_with_its_date(self):
        # 1 request refilling in 2 hours, none left: the next fits in 2 hours.
        code, out, server = self.run_with("2h", limit=1)
        self.assertEqual(code, 2, out)
        self.assertIn("would wait for the provider's rate limit (requests) until ", out)
        self.assertRegex(out, r"until \d{4}-\d\d-\d\d \d\d:\d\d UTC, in 2\.0 h: more than "
                              r"the 300 s evals waits")
        self.assertEqual(len(server.requests), 1)  # the first call told it; no other was made

    def test_infinite_or_huge_resets_are_not_told_and_the_run_goes_on(self):
        for reset in ("inf", "1e300", "nan"):
            with self.subTest(reset=reset):
                code, out, server = self.run_with(reset)
                self.assertEqual(code, 0, out)
                self.assertEqual(len(server.requests), 3)


class _V1:
    """A server's url with /v1, as run_evals_in_process wants it."""

    def __init__(self, server):
        self.url = server.url + "/v1"


if __name__ == "__main__":
    unittest.main()
