"""Tests for my_client: provider adapters against a loopback server, retries, no provider."""

import contextlib
import io
import json
import os
import threading
import time
import unittest
from unittest import mock

import my_client
from tests._loopback import LoopbackServer, unused_port

KEY = "sk-test-SECRET-0123456789abcdef"
GEMINI_KEY = "AIzaTEST-SECRET-0123456789abcdefghij"


def openai_ok(text="Hello!", finish="stop", model="gpt-4o-mini-2024-07-18"):
    return {
        "status": 200,
        "json": {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "model": model,
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": text, "refusal": None}, "finish_reason": finish}
            ],
            "usage": {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15},
        },
    }


def anthropic_ok(text="Hi there", stop="end_turn"):
    return {
        "status": 200,
        "json": {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "claude-haiku-4-5-20251001",
            "content": [{"type": "text", "text": text}],
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": {"input_tokens": 20, "output_tokens": 5},
        },
    }


def gemini_ok(text="Bonjour", finish="STOP"):
    return {
        "status": 200,
        "json": {
            "candidates": [
                {
                    "content": {"role": "model", "parts": [{"text": "thinking...", "thought": True}, {"text": text}]},
                    "finishReason": finish,
                    "index": 0,
                }
            ],
            "usageMetadata": {"promptTokenCount": 7, "candidatesTokenCount": 2, "thoughtsTokenCount": 10, "totalTokenCount": 19},
            "modelVersion": "gemini-2.5-flash",
        },
    }


class LoopbackCase(unittest.TestCase):
    """Starts a loopback server; captures stderr; records injected sleeps."""

    def setUp(self):
        self.server = LoopbackServer().start()
        self.addCleanup(self.server.stop)
        my_client._adapted.clear()  # what a model refused is remembered per process
        self.addCleanup(my_client._adapted.clear)
        self.sleeps = []
        self.stderr = io.StringIO()
        redirect = contextlib.redirect_stderr(self.stderr)
        redirect.__enter__()
        self.addCleanup(redirect.__exit__, None, None, None)

    def client(self, provider="openai", **overrides):
        options = dict(
            base_url=self.server.url + "/v1",
            api_key=GEMINI_KEY if provider == "gemini" else KEY,
            sleep=self.sleeps.append,
            rand=lambda: 0.5,
            timeout=5,
            max_attempts=4,
            max_retry_wait=60,
            env={},
        )
        options.update(overrides)
        return my_client.make_client(provider, **options)

    def assertNoKey(self, text):
        self.assertNotIn(KEY, text)
        self.assertNotIn(GEMINI_KEY, text)

    def assertFails(self, client, prompt="hi"):
        with self.assertRaises(my_client.ProviderError) as ctx:
            client(prompt)
        self.assertNoKey(str(ctx.exception))
        self.assertNoKey(repr(ctx.exception.args))
        self.assertNotIn("\n", str(ctx.exception))
        return ctx.exception

    def tearDown(self):
        self.assertNoKey(self.stderr.getvalue())


class OpenAITests(LoopbackCase):
    def test_request_shape_and_reply(self):
        self.server.add(openai_ok())
        reply = self.client(model="gpt-test", system_prompt="Be brief.", max_tokens=50)("What is 2+2?")
        self.assertIsInstance(reply, str)
        self.assertIsInstance(reply, my_client.Reply)
        self.assertEqual(reply, "Hello!")
        self.assertEqual(reply.usage, {"input_tokens": 12, "output_tokens": 3})
        self.assertEqual(reply.model, "gpt-4o-mini-2024-07-18")
        self.assertEqual(reply.finish_reason, "stop")
        self.assertEqual(reply.attempts, 1)
        (request,) = self.server.requests
        self.assertEqual(request["path"], "/v1/chat/completions")
        self.assertEqual(request["headers"]["authorization"], "Bearer " + KEY)
        self.assertEqual(request["headers"]["content-type"], "application/json")
        self.assertEqual(
            request["json"],
            {
                "model": "gpt-test",
                "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2+2?"}],
                "temperature": 0.0,
                "max_tokens": 50,
            },
        )

    def test_official_endpoint_uses_max_completion_tokens(self):
        client = my_client.make_client("openai", max_tokens=10, env={})
        request = my_client.openai_request(client.settings, "hi", "k")
        self.assertEqual(request.url, "https://api.openai.com/v1/chat/completions")
        self.assertEqual(request.body["max_completion_tokens"], 10)
        self.assertNotIn("max_tokens", request.body)
        self.assertNotIn("system", json.dumps(request.body))

    def test_temperature_none_omits_field(self):
        self.server.add(openai_ok())
        self.client(temperature=None)("hi")
        self.assertNotIn("temperature", self.server.requests[0]["json"])

    def test_a_429_is_handed_back_after_one_request(self):
        self.server.add(
            {"status": 429, "json": {"error": {"message": "Rate limit reached", "type": "requests"}},
             "headers": {"Retry-After": "2", "x-ratelimit-remaining-requests": "0"}},
            openai_ok(),
        )
        error = self.assertFails(self.client())
        self.assertEqual((error.status, error.retry_after, error.attempts), (429, 2.0, 1))
        self.assertEqual(error.rate_limits, {"retry-after": "2", "x-ratelimit-remaining-requests": "0"})
        self.assertEqual(len(self.server.requests), 1)
        self.assertEqual(self.sleeps, [])

    def test_a_429_without_retry_after_is_handed_back_with_0(self):
        self.server.add({"status": 429, "json": {"error": {"message": "slow down"}}})
        error = self.assertFails(self.client())
        self.assertEqual((error.status, error.retry_after, error.rate_limits), (429, 0.0, {}))
        self.assertEqual(len(self.server.requests), 1)

    def test_a_client_told_to_wait_retries_a_429_after_retry_after(self):
        self.server.add(
            {"status": 429, "json": {"error": {"message": "Rate limit reached", "type": "requests"}}, "headers": {"Retry-After": "2"}},
            openai_ok(),
        )
        reply = self.client(wait_when_refused=True)("hi")
        self.assertEqual(reply.attempts, 2)
        self.assertEqual(self.sleeps, [2.0])
        self.assertEqual(len(self.server.requests), 2)

    def test_429_without_retry_after_uses_jittered_backoff(self):
        self.server.add({"status": 429, "json": {"error": {"message": "slow down"}}}, openai_ok())
        reply = self.client(wait_when_refused=True)("hi")
        self.assertEqual(reply.attempts, 2)
        self.assertEqual(self.sleeps, [0.5])  # rand 0.5 * min(20, 1 * 2**0)

    def test_a_daily_quota_429_is_no_refusal(self):
        quota = {"error": {"code": 429, "message": "Quota exceeded", "status": "RESOURCE_EXHAUSTED", "details": [
            {"@type": "type.googleapis.com/google.rpc.QuotaFailure",
             "violations": [{"quotaId": "GenerateRequestsPerDayPerProjectPerModel-FreeTier"}]}]}}
        self.server.add({"status": 429, "json": quota, "headers": {"Retry-After": "5"}})
        error = self.assertFails(self.client("gemini"))
        self.assertEqual((error.status, error.retry_after, error.attempts), (429, None, 1))
        self.assertIn("PerDay", str(error))

    def test_an_error_that_is_no_refusal_has_no_retry_after(self):
        self.server.add({"status": 400, "json": {"error": {"message": "bad request"}}})
        self.assertIsNone(self.assertFails(self.client()).retry_after)
        self.server.add(*[{"status": 500, "json": {"error": {"message": "boom"}}}] * 2)
        error = self.assertFails(self.client(max_attempts=2))
        self.assertEqual((error.status, error.retry_after, error.attempts), (500, None, 2))

    def test_the_reply_holds_the_rate_limit_headers(self):
        limits = {"x-ratelimit-limit-requests": "500", "x-ratelimit-remaining-requests": "499",
                  "x-ratelimit-reset-tokens": "6m0s"}
        self.server.add(dict(openai_ok(), headers=dict(limits, **{"X-Other": "1"})))
        reply = self.client()("hi")
        self.assertEqual(reply.rate_limits, limits)
        self.assertNotIn("rate_limits", my_client.reply_dict(reply))  # recordings do not keep them
        self.server.add(openai_ok())
        self.assertEqual(self.client()("hi").rate_limits, {})

    def test_identity_names_what_decides_the_answer_and_never_the_key(self):
        one = self.client(model="m1").identity()
        self.assertEqual(one, self.client(model="m1").identity())
        self.assertNotEqual(one, self.client(model="m2").identity())
        self.assertNotEqual(one, self.client(model="m1", temperature=0.7).identity())
        self.assertNotEqual(one, self.client(model="m1", system_prompt="Be brief.").identity())
        self.assertNotEqual(one, self.client(model="m1", max_tokens=5).identity())
        self.assertNotIn(KEY, one)
        self.assertEqual(json.loads(one)["url"], self.server.url + "/v1/chat/completions")
        self.assertEqual(json.loads(one)["body"], {"model": "m1", "temperature": 0.0})
        gemini = self.client("gemini", base_url="https://user:pw@host.example/v1beta?key=" + GEMINI_KEY)
        self.assertNotIn(GEMINI_KEY, gemini.identity())
        self.assertNotIn("pw", gemini.identity())
        self.assertEqual(self.server.requests, [])

    def test_500_then_503_then_success(self):
        self.server.add(
            {"status": 500, "json": {"error": {"message": "server error"}}},
            {"status": 503, "body": b"<html>Service Unavailable</html>"},
            openai_ok("fine"),
        )
        reply = self.client()("hi")
        self.assertEqual(reply, "fine")
        self.assertEqual(reply.attempts, 3)
        self.assertEqual(self.sleeps, [0.5, 1.0])

    def test_gives_up_after_max_attempts(self):
        self.server.add(*[{"status": 503, "json": {"error": {"message": "overloaded"}}}] * 3)
        error = self.assertFails(self.client(max_attempts=3))
        self.assertEqual(error.attempts, 3)
        self.assertEqual(error.status, 503)
        self.assertIn("openai: HTTP 503", str(error))
        self.assertIn("overloaded", str(error))
        self.assertIn("gave up after 3 attempts", str(error))
        self.assertEqual(len(self.server.requests), 3)
        self.assertEqual(len(self.sleeps), 2)

    def test_a_judge_client_waits_and_retries_a_429(self):
        self.server.add({"status": 429, "json": {"error": {"message": "slow"}}, "headers": {"Retry-After": "2"}},
                        openai_ok("PASS"))
        judge = my_client.make_judge("openai", base_url=self.server.url + "/v1", api_key=KEY,
                                     sleep=self.sleeps.append, env={"EVALS_SYSTEM_PROMPT": "app's"})
        reply = judge("Grade this.")
        self.assertEqual((reply, reply.attempts, self.sleeps), ("PASS", 2, [2.0]))
        self.assertEqual(self.server.requests[-1]["json"]["messages"], [{"role": "user", "content": "Grade this."}])

    def test_ask_identity_is_the_environment_clients(self):
        my_client._clients.clear()
        self.addCleanup(my_client._clients.clear)
        with mock.patch.dict(os.environ, {"EVALS_PROVIDER": ""}):
            with self.assertRaises(my_client.ConfigError):
                my_client.ask.identity()
        env = {"EVALS_PROVIDER": "openai", "EVALS_MODEL": "m9", "OPENAI_API_KEY": KEY,
               "EVALS_BASE_URL": self.server.url + "/v1"}
        with mock.patch.dict(os.environ, env):
            identity = my_client.ask.identity()
            self.assertEqual(identity, my_client.make_client().identity())
        self.assertEqual(json.loads(identity)["body"]["model"], "m9")
        self.assertNotIn(KEY, identity)

    def test_retry_after_beyond_budget_fails_at_once(self):
        self.server.add({"status": 429, "json": {"error": {"message": "wait"}}, "headers": {"Retry-After": "120"}})
        error = self.assertFails(self.client(max_retry_wait=30, wait_when_refused=True))
        self.assertEqual(error.attempts, 1)
        self.assertEqual(self.sleeps, [])
        self.assertIn("retry after 120s", str(error))
        self.assertIn("EVALS_MAX_RETRY_WAIT", str(error))

    def test_backoff_never_sleeps_past_budget(self):
        self.server.add(*[{"status": 500, "json": {"error": {"message": "boom"}}}] * 4)
        error = self.assertFails(self.client(max_retry_wait=0.7, rand=lambda: 0.99))
        self.assertLessEqual(sum(self.sleeps), 0.7 + 1e-9)
        self.assertIn("retry budget", str(error))
        self.assertEqual(error.attempts, len(self.server.requests))

    def test_insufficient_quota_429_is_not_retried(self):
        self.server.add(
            {"status": 429, "json": {"error": {"message": "You exceeded your current quota", "type": "insufficient_quota", "code": "insufficient_quota"}}}
        )
        error = self.assertFails(self.client())
        self.assertEqual(error.attempts, 1)
        self.assertIn("exceeded your current quota", str(error))

    def test_timeout_is_retried_then_succeeds(self):
        self.server.add(dict(openai_ok(), delay=1.0), openai_ok("after timeout"))
        reply = self.client(timeout=0.2)("hi")
        self.assertEqual(reply, "after timeout")
        self.assertEqual(reply.attempts, 2)

    def test_timeout_every_time(self):
        self.server.add(dict(openai_ok(), delay=0.6), dict(openai_ok(), delay=0.6))
        error = self.assertFails(self.client(timeout=0.15, max_attempts=2))
        self.assertIn("no response within 0.15s", str(error))
        self.assertEqual(error.attempts, 2)
        self.assertIsNone(error.status)

    def test_connection_reset_is_retried(self):
        self.server.add({"reset": True}, openai_ok("recovered"))
        reply = self.client()("hi")
        self.assertEqual(reply, "recovered")
        self.assertEqual(reply.attempts, 2)

    def test_connection_reset_every_time(self):
        self.server.add({"reset": True}, {"reset": True})
        error = self.assertFails(self.client(max_attempts=2))
        self.assertEqual(error.attempts, 2)
        self.assertTrue("reset" in str(error) or "closed the connection" in str(error), str(error))

    def test_connection_refused_fails_fast(self):
        client = self.client(base_url="http://127.0.0.1:%d/v1" % unused_port())
        error = self.assertFails(client)
        self.assertEqual(error.attempts, 1)
        self.assertIn("connection refused", str(error))
        self.assertEqual(self.sleeps, [])

    def test_non_json_body(self):
        self.server.add({"status": 200, "body": b"<html>proxy login</html>"})
        error = self.assertFails(self.client())
        self.assertIn("non-JSON body", str(error))
        self.assertIn("proxy login", str(error))
        self.assertEqual(error.attempts, 1)

    def test_empty_choices(self):
        self.server.add({"status": 200, "json": {"model": "m", "choices": []}})
        error = self.assertFails(self.client())
        self.assertIn("no choices", str(error))
        self.assertEqual(error.attempts, 1)

    def test_null_content(self):
        response = openai_ok()
        response["json"]["choices"][0]["message"]["content"] = None
        response["json"]["choices"][0]["finish_reason"] = "tool_calls"
        self.server.add(response)
        self.assertIn("no text content", str(self.assertFails(self.client())))

    def test_refusal_is_an_answer(self):
        """A structured refusal (message.refusal, content null) is the model's answer: its
        refusal message, finish_reason "refusal"
        (https://platform.openai.com/docs/guides/structured-outputs#refusals)."""
        response = openai_ok()
        response["json"]["choices"][0]["message"].update(content=None, refusal="I can't help with that.")
        self.server.add(response)
        reply = self.client()("hi")
        self.assertEqual(reply, "I can't help with that.")
        self.assertEqual((reply.finish_reason, reply.finish_reason_raw, reply.tool_calls),
                         ("refusal", "stop", []))

    def test_finish_reason_length_is_the_partial_answer(self):
        self.server.add(openai_ok("partial answ", finish="length"))
        reply = self.client()("hi")
        self.assertEqual((reply, reply.finish_reason, reply.finish_reason_raw),
                         ("partial answ", "length", "length"))

    def test_content_filter_is_an_answer(self):
        self.server.add(openai_ok("", finish="content_filter"))
        reply = self.client()("hi")
        self.assertEqual((reply, reply.finish_reason), ("", "content_filter"))
        response = openai_ok()
        response["json"]["choices"][0]["message"]["content"] = None
        response["json"]["choices"][0]["finish_reason"] = "content_filter"
        self.server.add(response)
        reply = self.client()("hi")
        self.assertEqual((reply, reply.finish_reason), ("", "content_filter"))

    def test_401_fails_fast_with_provider_message_and_no_key(self):
        message = "Incorrect API key provided: %s. You can find your API key at https://platform.openai.com/account/api-keys." % KEY
        self.server.add(
            {"status": 401, "json": {"error": {"message": message, "type": "invalid_request_error", "code": "invalid_api_key"}}}
        )
        error = self.assertFails(self.client())
        self.assertEqual(error.attempts, 1)
        self.assertEqual(error.status, 401)
        self.assertEqual(len(self.server.requests), 1)
        self.assertEqual(self.sleeps, [])
        self.assertIn("HTTP 401", str(error))
        self.assertIn("invalid_api_key", str(error))
        self.assertIn("Incorrect API key provided: [redacted]", str(error))

    def test_404_bad_model(self):
        self.server.add({"status": 404, "json": {"error": {"message": "The model `nope` does not exist", "code": "model_not_found"}}})
        error = self.assertFails(self.client(model="nope"))
        self.assertIn("does not exist", str(error))
        self.assertEqual(error.attempts, 1)

    def test_long_error_message_truncated(self):
        self.server.add({"status": 400, "json": {"error": {"message": "x" * 5000}}})
        error = self.assertFails(self.client())
        self.assertLess(len(str(error)), 400)
        self.assertTrue(str(error).endswith("..."))

    def test_retry_after_ms_header(self):
        self.server.add({"status": 429, "json": {"error": {"message": "slow"}}, "headers": {"retry-after-ms": "250"}}, openai_ok())
        self.assertEqual(self.client(wait_when_refused=True)("hi").attempts, 2)
        self.assertEqual(self.sleeps, [0.25])
        self.server.add({"status": 429, "json": {"error": {"message": "slow"}}, "headers": {"retry-after-ms": "250"}})
        self.assertEqual(self.assertFails(self.client()).retry_after, 0.25)

    def test_retry_after_http_date(self):
        import email.utils
        import time

        when = email.utils.formatdate(time.time() + 3600, usegmt=True)  # an hour away: beyond the budget
        self.server.add({"status": 503, "json": {"error": {"message": "maintenance"}}, "headers": {"Retry-After": when}})
        error = self.assertFails(self.client(wait_when_refused=True))
        self.assertIn("server asked to retry after", str(error))
        self.assertEqual(error.attempts, 1)
        # Handed back: a 503 that says when to come back is a refusal.
        self.server.add({"status": 503, "json": {"error": {"message": "maintenance"}}, "headers": {"Retry-After": when}})
        error = self.assertFails(self.client())
        self.assertEqual((error.status, error.attempts), (503, 1))
        self.assertAlmostEqual(error.retry_after, 3600, delta=5)

    def test_key_echoed_in_retried_errors_is_scrubbed(self):
        self.server.add(*[{"status": 500, "body": ("upstream said key=%s" % KEY).encode()}] * 2)
        error = self.assertFails(self.client(max_attempts=2))
        self.assertIn("non-JSON body: upstream said key=[redacted]", str(error))

    def test_a_body_over_the_size_limit_is_not_read_on(self):
        with mock.patch.object(my_client, "MAX_RESPONSE_BYTES", 1000):
            self.server.add({"status": 200, "body": b"x" * 5000}, openai_ok())
            error = self.assertFails(self.client(max_attempts=1))
        self.assertIn("response larger than", str(error))
        self.assertEqual(self.client()("hi"), "Hello!")  # the next call gets a fresh connection

    def test_a_key_at_the_length_limit_is_removed_whole(self):
        """The configured key is removed before the text is cut (a cut key no longer matches),
        and other key-shaped text (an Azure-style 32-hex-digit key) is masked too."""
        azure = "0123456789abcdef0123456789abcdef"
        for key, echoed in ((KEY, KEY), (KEY, azure)):
            for offset in (250, 280, 295):
                with self.subTest(echoed=echoed[:6], offset=offset):
                    message = "x" * offset + " key " + echoed + " rest"
                    self.server.add({"status": 400, "json": {"error": {"message": message}}})
                    error = str(self.assertFails(self.client(api_key=key)))
                    for piece in range(0, len(echoed) - 7):
                        self.assertNotIn(echoed[piece:piece + 8], error)

    def test_concurrent_calls_from_8_threads(self):
        self.server.add(*[openai_ok("same")] * 8)
        client = self.client()
        results, errors = [], []

        def run():
            try:
                results.append(client("hi"))
            except Exception as exc:  # reported below
                errors.append(exc)

        threads = [threading.Thread(target=run) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=10)
        self.assertEqual(errors, [])
        self.assertEqual(results, ["same"] * 8)
        self.assertEqual(len(self.server.requests), 8)

    def test_key_read_from_environment_at_call_time(self):
        env = {}
        client = self.client(api_key=None, env=env)
        with self.assertRaises(my_client.ConfigError) as ctx:
            client("hi")
        self.assertIn("OPENAI_API_KEY", str(ctx.exception))
        self.assertEqual(self.server.requests, [])
        env["OPENAI_API_KEY"] = KEY
        self.server.add(openai_ok())
        self.assertEqual(client("hi"), "Hello!")
        self.assertEqual(self.server.requests[0]["headers"]["authorization"], "Bearer " + KEY)


class KeyWithLineBreakTests(LoopbackCase):
    def test_a_key_with_a_line_break_is_refused_without_echoing_it(self):
        for key in (KEY + "\nsk-old", KEY[:10] + " " + KEY[10:]):
            with self.assertRaises(my_client.ConfigError) as ctx:
                self.client(api_key=key)("hi")
            self.assertIn("white space or a control character", str(ctx.exception))
            self.assertNoKey(str(ctx.exception))
        with self.assertRaises(my_client.ConfigError) as ctx:
            self.client(api_key=None, env={"OPENAI_API_KEY": KEY + "\r\nx"})("hi")
        self.assertIn("OPENAI_API_KEY", str(ctx.exception))
        self.assertNoKey(str(ctx.exception))
        self.assertEqual(self.server.requests, [])

    def test_surrounding_white_space_is_trimmed(self):
        self.server.add(openai_ok())
        self.assertEqual(self.client(api_key=" " + KEY + "\n")("hi"), "Hello!")
        self.assertEqual(self.server.requests[0]["headers"]["authorization"], "Bearer " + KEY)


class KeepAliveTests(LoopbackCase):
    def test_calls_from_one_thread_share_one_connection(self):
        self.server.add(openai_ok(), openai_ok(), openai_ok())
        client = self.client()
        for _ in range(3):
            self.assertEqual(client("hi").attempts, 1)
        peers = [r["peer"] for r in self.server.requests]
        self.assertEqual(len(set(peers)), 1, peers)

    def test_a_connection_the_server_closed_while_idle_is_replaced_not_failed(self):
        self.server.add(dict(openai_ok(), drop_after=True), openai_ok())
        client = self.client()
        client("first")
        time.sleep(0.05)  # let the server's close arrive
        reply = client("second")
        self.assertEqual(reply, "Hello!")
        self.assertEqual(reply.attempts, 1)
        self.assertEqual(self.sleeps, [])
        first, second = self.server.requests
        self.assertNotEqual(first["peer"], second["peer"])

    def test_a_socket_the_peer_closed_is_seen_as_dropped(self):
        import socket

        mine, theirs = socket.socketpair()
        self.addCleanup(mine.close)
        self.assertFalse(my_client._dropped(mine))
        theirs.close()
        self.assertTrue(my_client._dropped(mine))

    def test_threads_do_not_share_connections(self):
        self.server.add(*[openai_ok() for _ in range(4)])
        client = self.client()
        threads = [threading.Thread(target=client, args=("hi",)) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=10)
        self.assertEqual(len({r["peer"] for r in self.server.requests}), 4)


class OllamaTests(LoopbackCase):
    def test_no_key_no_authorization_header(self):
        self.server.add({"status": 200, "json": {
            "model": "llama3.2", "message": {"role": "assistant", "content": "local"},
            "done": True, "done_reason": "stop", "prompt_eval_count": 26, "eval_count": 3}})
        reply = self.client("ollama", api_key=None, model="llama3.2")("hi")
        self.assertEqual(reply, "local")
        request = self.server.requests[0]
        self.assertNotIn("authorization", request["headers"])
        self.assertEqual(request["path"], "/api/chat")  # the native API, whatever /v1 says
        self.assertEqual(request["json"]["model"], "llama3.2")

    def test_defaults(self):
        client = my_client.make_client("ollama", env={})
        self.assertEqual(client.settings.base_url, "http://localhost:11434")
        self.assertEqual(client.settings.model, "llama3.2")
        self.assertEqual(client.settings.num_ctx, my_client.OLLAMA_DEFAULT_NUM_CTX)


class AnthropicTests(LoopbackCase):
    def test_request_shape_and_reply(self):
        self.server.add(anthropic_ok())
        reply = self.client("anthropic", model="claude-test", system_prompt="You are terse.")("Say hi")
        self.assertEqual(reply, "Hi there")
        self.assertEqual(reply.usage, {"input_tokens": 20, "output_tokens": 5})
        self.assertEqual(reply.model, "claude-haiku-4-5-20251001")
        self.assertEqual((reply.finish_reason, reply.finish_reason_raw), ("stop", "end_turn"))
        self.assertEqual(reply.tool_calls, [])
        self.assertEqual(reply.attempts, 1)
        (request,) = self.server.requests
        self.assertEqual(request["path"], "/v1/messages")
        self.assertEqual(request["headers"]["x-api-key"], KEY)
        self.assertEqual(request["headers"]["anthropic-version"], "2023-06-01")
        self.assertNotIn("authorization", request["headers"])
        self.assertEqual(
            request["json"],
            {
                "model": "claude-test",
                "max_tokens": 1024,
                "messages": [{"role": "user", "content": "Say hi"}],
                "system": "You are terse.",
                "temperature": 0.0,
            },
        )

    def test_529_overloaded_then_success(self):
        self.server.add(
            {"status": 529, "json": {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}},
            anthropic_ok(),
        )
        reply = self.client("anthropic", wait_when_refused=True)("hi")
        self.assertEqual(reply.attempts, 2)
        self.assertEqual(len(self.sleeps), 1)

    def test_529_overloaded_is_handed_back(self):
        limits = {"anthropic-ratelimit-requests-remaining": "10", "anthropic-ratelimit-tokens-reset": "2025-01-01T00:00:30Z"}
        self.server.add(
            {"status": 529, "json": {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
             "headers": limits},
        )
        error = self.assertFails(self.client("anthropic"))
        self.assertEqual((error.status, error.retry_after, error.attempts), (529, 0.0, 1))
        self.assertEqual(error.rate_limits, limits)

    def test_refusal_is_an_answer(self):
        """stop_reason "refusal" (https://docs.anthropic.com/en/api/messages): the text there
        is, here none, with finish_reason "refusal"; with no content block at all too."""
        self.server.add(anthropic_ok("", stop="refusal"))
        reply = self.client("anthropic")("hi")
        self.assertEqual((reply, reply.finish_reason, reply.finish_reason_raw),
                         ("", "refusal", "refusal"))
        response = anthropic_ok(stop="refusal")
        response["json"]["content"] = []
        self.server.add(response)
        self.assertEqual(self.client("anthropic")("hi").finish_reason, "refusal")

    def test_max_tokens_truncation_is_the_partial_answer(self):
        self.server.add(anthropic_ok("partial", stop="max_tokens"))
        reply = self.client("anthropic", max_tokens=5)("hi")
        self.assertEqual((reply, reply.finish_reason, reply.finish_reason_raw),
                         ("partial", "length", "max_tokens"))
        self.assertEqual(self.server.requests[0]["json"]["max_tokens"], 5)

    def test_pause_turn_is_an_error(self):
        self.server.add(anthropic_ok("Searching", stop="pause_turn"))
        error = str(self.assertFails(self.client("anthropic")))
        self.assertIn("stop_reason 'pause_turn'", error)
        self.assertNotIn("Searching", error)

    def test_no_text_block_is_no_answer_and_an_empty_one_is_an_empty_answer(self):
        """No block at all is not an answer: an error.  Only a tool call is an answer with no
        text.  An empty text block is the model saying nothing: an answer, which evals
        scores."""
        response = anthropic_ok()
        response["json"]["content"] = []
        self.server.add(response)
        self.assertIn("no text content", str(self.assertFails(self.client("anthropic"))))
        response = anthropic_ok(stop="tool_use")
        response["json"]["content"] = [{"type": "tool_use", "id": "t", "name": "f", "input": {}}]
        self.server.add(response)
        reply = self.client("anthropic")("hi")
        self.assertEqual((reply, reply.tool_calls, reply.finish_reason),
                         ("", [{"name": "f", "arguments": {}}], "tool_calls"))
        response = anthropic_ok()
        response["json"]["content"] = [{"type": "text", "text": ""}]
        self.server.add(response)
        self.assertEqual(self.client("anthropic")("hi"), "")

    def test_401_error_body(self):
        self.server.add(
            {"status": 401, "json": {"type": "error", "error": {"type": "authentication_error", "message": "invalid x-api-key"}, "request_id": "req_1"}}
        )
        error = self.assertFails(self.client("anthropic"))
        self.assertEqual(str(error), "anthropic: HTTP 401 (authentication_error) invalid x-api-key")
        self.assertEqual(error.attempts, 1)


class GeminiTests(LoopbackCase):
    def test_request_shape_and_reply(self):
        self.server.add(gemini_ok())
        reply = self.client("gemini", model="gemini-test", system_prompt="Answer in French.", max_tokens=64)("Say hello")
        self.assertEqual(reply, "Bonjour")  # the thought part is skipped
        self.assertEqual(reply.usage, {"input_tokens": 7, "output_tokens": 12})
        self.assertEqual(reply.model, "gemini-2.5-flash")
        self.assertEqual((reply.finish_reason, reply.finish_reason_raw), ("stop", "STOP"))
        (request,) = self.server.requests
        self.assertEqual(request["path"], "/v1/models/gemini-test:generateContent")
        self.assertEqual(request["headers"]["x-goog-api-key"], GEMINI_KEY)
        self.assertNotIn(GEMINI_KEY, request["path"])
        self.assertEqual(
            request["json"],
            {
                "contents": [{"role": "user", "parts": [{"text": "Say hello"}]}],
                "systemInstruction": {"parts": [{"text": "Answer in French."}]},
                "generationConfig": {"temperature": 0.0, "maxOutputTokens": 64},
            },
        )

    def test_google_api_key_accepted(self):
        self.server.add(gemini_ok())
        client = self.client("gemini", api_key=None, env={"GOOGLE_API_KEY": GEMINI_KEY})
        self.assertEqual(client("hi"), "Bonjour")
        self.assertEqual(self.server.requests[0]["headers"]["x-goog-api-key"], GEMINI_KEY)

    def test_missing_key_names_both_variables(self):
        with self.assertRaises(my_client.ConfigError) as ctx:
            self.client("gemini", api_key=None, env={})("hi")
        self.assertIn("GEMINI_API_KEY", str(ctx.exception))
        self.assertIn("GOOGLE_API_KEY", str(ctx.exception))

    def test_prompt_blocked(self):
        self.server.add({"status": 200, "json": {"promptFeedback": {"blockReason": "SAFETY"}}})
        self.assertIn("prompt blocked", str(self.assertFails(self.client("gemini"))))

    def test_safety_finish_is_a_filtered_answer(self):
        self.server.add(gemini_ok("", finish="SAFETY"))
        reply = self.client("gemini")("hi")
        self.assertEqual((reply, reply.finish_reason, reply.finish_reason_raw),
                         ("", "content_filter", "SAFETY"))
        response = gemini_ok(finish="PROHIBITED_CONTENT")
        del response["json"]["candidates"][0]["content"]  # a blocked candidate has none
        self.server.add(response)
        self.assertEqual(self.client("gemini")("hi").finish_reason, "content_filter")

    def test_max_tokens_truncation_is_the_partial_answer(self):
        self.server.add(gemini_ok("part", finish="MAX_TOKENS"))
        reply = self.client("gemini")("hi")
        self.assertEqual((reply, reply.finish_reason, reply.finish_reason_raw),
                         ("part", "length", "MAX_TOKENS"))

    def test_empty_candidates(self):
        self.server.add({"status": 200, "json": {"candidates": []}})
        self.assertIn("no candidates", str(self.assertFails(self.client("gemini"))))

    def test_429_retry_info_in_body(self):
        self.server.add(
            {
                "status": 429,
                "json": {
                    "error": {
                        "code": 429,
                        "message": "Resource has been exhausted",
                        "status": "RESOURCE_EXHAUSTED",
                        "details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "7s"}],
                    }
                },
            },
            gemini_ok(),
        )
        reply = self.client("gemini", wait_when_refused=True)("hi")
        self.assertEqual(reply.attempts, 2)
        self.assertEqual(self.sleeps, [7.0])

    def test_400_bad_key_error_body(self):
        self.server.add(
            {"status": 400, "json": {"error": {"code": 400, "message": "API key not valid. Please pass a valid API key.", "status": "INVALID_ARGUMENT"}}}
        )
        error = self.assertFails(self.client("gemini"))
        self.assertEqual(str(error), "gemini: HTTP 400 (INVALID_ARGUMENT) API key not valid. Please pass a valid API key.")
        self.assertEqual(error.attempts, 1)


class ConfigTests(unittest.TestCase):
    def test_settings_repr_shows_no_key_nor_environment(self):
        env = {"OPENAI_API_KEY": "sk-live-ENVKEY", "AWS_SECRET_ACCESS_KEY": "aws-SECRET"}
        client = my_client.make_client("openai", env=env, api_key="sk-live-OVERRIDE")
        self.assertEqual(repr(client.settings), "Settings(provider='openai', model='gpt-4o-mini', "
                         "base_url='https://api.openai.com/v1')")
        env["EVALS_BASE_URL"] = "https://ana:hunter2@proxy.example/v1?api-key=sk-q&region=eu"
        self.assertIn("base_url='https://proxy.example/v1?region=eu'",
                      repr(my_client.make_client("openai", env=env).settings))

    def test_unknown_provider_lists_known(self):
        with self.assertRaises(my_client.ConfigError) as ctx:
            my_client.make_client(env={"EVALS_PROVIDER": "mistral"})
        for name in my_client.PROVIDERS:
            self.assertIn(name, str(ctx.exception))
        self.assertIn("EVALS_PROVIDER", str(ctx.exception))

    def test_bad_numbers_name_the_variable(self):
        cases = {
            "EVALS_TIMEOUT": "soon",
            "EVALS_MAX_ATTEMPTS": "2.5",
            "EVALS_MAX_TOKENS": "0",
            "EVALS_TEMPERATURE": "hot",
            "EVALS_MAX_RETRY_WAIT": "-1",
        }
        for name, value in cases.items():
            with self.subTest(name=name):
                with self.assertRaises(my_client.ConfigError) as ctx:
                    my_client.make_client(env={"EVALS_PROVIDER": "openai", name: value})
                self.assertIn(name, str(ctx.exception))
                self.assertIn(value, str(ctx.exception))

    def test_env_settings(self):
        env = {
            "EVALS_PROVIDER": "Anthropic",
            "EVALS_MODEL": "claude-x",
            "EVALS_BASE_URL": "http://127.0.0.1:9/v1/",
            "EVALS_TIMEOUT": "2.5",
            "EVALS_MAX_ATTEMPTS": "2",
            "EVALS_MAX_RETRY_WAIT": "5",
            "EVALS_TEMPERATURE": "0.3",
            "EVALS_MAX_TOKENS": "99",
            "EVALS_SYSTEM_PROMPT": "sys",
        }
        s = my_client.make_client(env=env).settings
        self.assertEqual(
            (s.provider, s.model, s.base_url, s.timeout, s.max_attempts, s.max_retry_wait, s.temperature, s.max_tokens, s.system_prompt),
            ("anthropic", "claude-x", "http://127.0.0.1:9/v1", 2.5, 2, 5.0, 0.3, 99, "sys"),
        )

    def test_defaults(self):
        s = my_client.make_client("openai", env={}).settings
        self.assertEqual((s.timeout, s.max_attempts, s.max_retry_wait, s.temperature, s.max_tokens), (60.0, 4, 60.0, 0.0, None))
        self.assertEqual(my_client.make_client("anthropic", env={}).settings.max_tokens, 1024)

    def test_unknown_override(self):
        with self.assertRaises(TypeError):
            my_client.make_client("openai", modle="x")

    def test_parse_retry_after(self):
        self.assertEqual(my_client.parse_retry_after("3"), 3.0)
        self.assertEqual(my_client.parse_retry_after(" 1.5 "), 1.5)
        self.assertEqual(my_client.parse_retry_after("Wed, 21 Oct 2015 07:28:30 GMT", now=1445412480.0), 30.0)
        self.assertEqual(my_client.parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412500.0), 0.0)
        self.assertIsNone(my_client.parse_retry_after("tomorrow-ish"))
        self.assertIsNone(my_client.parse_retry_after(None))


class AskWithProviderTests(LoopbackCase):
    def test_ask_uses_environment(self):
        self.server.add(openai_ok("via ask"))
        env = {
            "EVALS_PROVIDER": "openai",
            "EVALS_BASE_URL": self.server.url + "/v1",
            "EVALS_MODEL": "gpt-env",
            "OPENAI_API_KEY": KEY,
            "EVALS_MAX_ATTEMPTS": "1",
        }
        with mock.patch.dict(os.environ, env):
            reply = my_client.ask("hello")
        self.assertEqual(reply, "via ask")
        request = self.server.requests[0]
        self.assertEqual(request["json"]["model"], "gpt-env")
        self.assertEqual(request["headers"]["authorization"], "Bearer " + KEY)

    def test_ask_unknown_provider(self):
        with mock.patch.dict(os.environ, {"EVALS_PROVIDER": "gpt"}):
            with self.assertRaises(my_client.ConfigError) as ctx:
                my_client.ask("hello")
        self.assertIn("openai, anthropic, gemini, ollama", str(ctx.exception))


# --------------------------------------------------------------------------
# No provider: evals.py replays recordings itself, my_client is not the place
# --------------------------------------------------------------------------


class NoProviderTests(unittest.TestCase):
    def setUp(self):
        clean = {k: v for k, v in os.environ.items() if not k.startswith("EVALS_")}
        patcher = mock.patch.dict(os.environ, clean, clear=True)
        patcher.start()
        self.addCleanup(patcher.stop)

    def test_ask_without_a_provider_is_a_configuration_error(self):
        for value in (None, "", "replay", " Replay "):
            if value is not None:
                os.environ["EVALS_PROVIDER"] = value
            with self.subTest(provider=value), self.assertRaises(my_client.ConfigError) as ctx:
                my_client.ask("hello")
            self.assertIn("set EVALS_PROVIDER to one of openai, anthropic, gemini, ollama",
                          str(ctx.exception))
            self.assertIn("python evals.py replays recorded outputs by itself", str(ctx.exception))

    def test_make_client_replay_and_batch_are_configuration_errors(self):
        with self.assertRaises(my_client.ConfigError):
            my_client.make_client("replay")
        with self.assertRaises(my_client.ConfigError):
            my_client.ask.batch([("c", "hello")])

    def test_judge_without_a_provider_is_a_configuration_error(self):
        with self.assertRaises(my_client.ConfigError) as ctx:
            my_client.judge("a prompt")
        self.assertIn("EVALS_JUDGE_PROVIDER", str(ctx.exception))
        self.assertIn("replays recorded judge replies by itself", str(ctx.exception))

    def test_ask_names_attempt_for_the_cache_and_nothing_else(self):
        import inspect

        params = inspect.signature(my_client.ask).parameters
        self.assertEqual(list(params), ["prompt", "attempt"])
        self.assertEqual(params["attempt"].kind, inspect.Parameter.KEYWORD_ONLY)
        self.assertTrue(my_client.ask.accepts_conversations)
        self.assertTrue(callable(my_client.ask.batch))


if __name__ == "__main__":
    unittest.main()


class AnnouncedUrlTest(unittest.TestCase):
    def test_credentials_in_the_base_url_are_not_printed(self):
        import contextlib
        import io

        env = {"EVALS_PROVIDER": "openai", "EVALS_BASE_URL": "https://user:s3cret@host.example/v1",
               "OPENAI_API_KEY": "k"}
        with mock.patch.dict(os.environ, env, clear=False), \
                contextlib.redirect_stderr(io.StringIO()) as err:
            my_client._clients.clear()
            self.addCleanup(my_client._clients.clear)
            my_client._env_client()
        self.assertIn("at https://host.example/v1", err.getvalue())
        self.assertNotIn("s3cret", err.getvalue())
