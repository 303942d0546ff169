"""The adapters against loopback servers that answer as each provider documents it does.

Each fake below behaves like the provider for the request it gets (its path, headers and body),
including the 400 bodies the providers send for a parameter a model does not take, quoted as
users reported them:

* OpenAI reasoning models (o-series, gpt-5): "Unsupported value: 'temperature' does not support
  0 with this model..." (code unsupported_value; github.com/cline/cline/issues/7224,
  github.com/OpenHands/OpenHands/issues/4131) and, for o3-mini, "Unsupported parameter:
  'temperature' is not supported with this model." (github.com/BeehiveInnovations/
  pal-mcp-server/issues/78); https://platform.openai.com/docs/guides/reasoning .
* Azure OpenAI reasoning deployments: "Unsupported parameter: 'max_tokens' is not supported
  with this model. Use 'max_completion_tokens' instead." (github.com/langgenius/dify/issues/9746);
  https://learn.microsoft.com/en-us/azure/ai-foundry/openai/how-to/reasoning .
* Newer Claude models: "`temperature` is deprecated for this model." (type invalid_request_error,
  github.com/BitterSecurity/Decepticon/issues/107);
  https://platform.claude.com/docs/en/about-claude/model-deprecations .
* Gemini: a daily quota's 429 names a QuotaFailure violation "GenerateRequestsPerDayPer..."
  (github.com/langgenius/dify/issues/19838); https://ai.google.dev/gemini-api/docs/rate-limits .
* Ollama /api/chat (https://docs.ollama.com/api/chat): a prompt longer than options.num_ctx is
  cut without an error and prompt_eval_count reports what was kept, about half of num_ctx
  (github.com/ollama/ollama/issues/17427).
"""

import contextlib
import io
import unittest

import evals
import my_client
from tests.test_my_client import GEMINI_KEY, KEY, LoopbackCase, anthropic_ok, gemini_ok

QUESTION = "What is 2+2?"


def openai_400(message, param, code):
    return {"status": 400, "json": {"error": {
        "message": message, "type": "invalid_request_error", "param": param, "code": code}}}


TEMPERATURE_UNSUPPORTED_VALUE = openai_400(
    "Unsupported value: 'temperature' does not support 0 with this model. Only the default (1) "
    "value is supported.", "temperature", "unsupported_value")
TEMPERATURE_UNSUPPORTED_PARAMETER = openai_400(
    "Unsupported parameter: 'temperature' is not supported with this model.", "temperature",
    "unsupported_parameter")
MAX_TOKENS_UNSUPPORTED = openai_400(
    "Unsupported parameter: 'max_tokens' is not supported with this model. Use "
    "'max_completion_tokens' instead.", "max_tokens", "unsupported_parameter")
CLAUDE_TEMPERATURE_DEPRECATED = {"status": 400, "json": {
    "type": "error", "request_id": "req_011CabJ9ACVfYuqhf5QDYJdP",
    "error": {"type": "invalid_request_error",
              "message": "`temperature` is deprecated for this model."}}}


def completion(text, model, message_extra=None):
    message = {"role": "assistant", "content": text, "refusal": None}
    message.update(message_extra or {})
    return {"status": 200, "json": {
        "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15}}}


def reasoning_model(model, temperature_refusal=TEMPERATURE_UNSUPPORTED_VALUE):
    """An OpenAI or Azure OpenAI reasoning model: temperature only at its default (1), none at
    all for o3-mini's refusal, and the token cap only as max_completion_tokens."""
    only_default = temperature_refusal is TEMPERATURE_UNSUPPORTED_VALUE

    def respond(request):
        body = request["json"]
        if "temperature" in body and not (only_default and body["temperature"] == 1):
            return temperature_refusal
        if "max_tokens" in body:
            return MAX_TOKENS_UNSUPPORTED
        return completion("The answer is 4.", model)

    return respond


def claude_without_temperature(request):
    """A Claude model that refuses any temperature; like the Messages API, it requires the
    version header and max_tokens."""
    body = request["json"]
    if request["headers"].get("anthropic-version") != "2023-06-01" or "max_tokens" not in body:
        return {"status": 400, "json": {"type": "error", "error": {
            "type": "invalid_request_error", "message": "max_tokens: Field required"}}}
    if "temperature" in body:
        return CLAUDE_TEMPERATURE_DEPRECATED
    return anthropic_ok("The answer is 4.")


def gemini_answer(request):
    response = gemini_ok("The answer is 4.")
    response["json"]["modelVersion"] = request["path"].split("/")[-1].split(":")[0]
    return response


def ollama(thinking=None, answer="The answer is 4."):
    """Ollama's /api/chat: tokens counted as words (+10 for the chat template); a prompt over
    num_ctx (4096 when the request sets none, as below 24 GiB of VRAM) is cut to half of it and
    answered with 200, prompt_eval_count saying what was kept."""
    def respond(request):
        body = request["json"]
        if request["path"] != "/api/chat" or body.get("stream") is not False:
            return {"status": 404, "json": {"error": "404 page not found"}}
        num_ctx = (body.get("options") or {}).get("num_ctx", 4096)
        tokens = 10 + sum(len(m["content"].split()) for m in body["messages"])
        kept = tokens if tokens <= num_ctx else num_ctx // 2 + 2
        message = {"role": "assistant", "content": answer}
        if thinking:
            message["thinking"] = thinking
        return {"status": 200, "json": {
            "model": body["model"], "created_at": "2025-01-01T00:00:00Z", "message": message,
            "done": True, "done_reason": "stop", "prompt_eval_count": kept, "eval_count": 9}}

    return respond


class ProviderCase(LoopbackCase):
    """A loopback provider and clients configured as a user would, through the environment."""

    def env_client(self, provider, path="/v1", **env):
        key_var = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY",
                   "gemini": "GEMINI_API_KEY", "ollama": "OLLAMA_UNUSED"}[provider]
        settings = dict({"EVALS_BASE_URL": self.server.url + path,
                         key_var: GEMINI_KEY if provider == "gemini" else KEY}, **env)
        return my_client.make_client(provider, env=settings, sleep=self.sleeps.append,
                                     rand=lambda: 0.5)

    def notices(self):
        return [line for line in self.stderr.getvalue().splitlines() if line]

    def run_default(self, client, cases=6, concurrency=3):
        """Run `cases` cases through evals with `client`; (results, the replies)."""
        replies = []

        def call(prompt):
            reply = client(prompt)
            replies.append(reply)
            return reply

        suite = [evals.Case("c%d" % i, "%s (%d)" % (QUESTION, i),
                            ({"type": "contains_all", "values": ["4"]},)) for i in range(cases)]
        results = evals.run_cases(suite, call, evals.RunOptions(concurrency=concurrency))
        return results, replies


class DefaultRunTests(ProviderCase):
    """A default run reaches each kind of model with no error, and says what it sent."""

    def assertRunPasses(self, client, sent, notices):
        results, replies = self.run_default(client)
        self.assertEqual([(r.status, r.error) for r in results], [("pass", None)] * 6)
        self.assertEqual([r.sent for r in replies], [sent] * 6)
        self.assertEqual(self.notices(), notices)
        run = evals.RunResult(results, "", "", "env", None, None)
        record = evals.make_record(run, evals.Baseline({}))
        self.assertEqual([e.get("sent") for e in record["cases"]], [sent] * 6)  # recorded

    def test_an_openai_reasoning_model_gets_no_temperature_said_once(self):
        self.server.behave(reasoning_model("o3"))
        self.assertRunPasses(self.env_client("openai", EVALS_MODEL="o3"), {"temperature": None},
                             ["my_client: o3 rejects temperature; sending none (the provider's "
                              "default)"])
        later = self.server.requests[-1]["json"]
        self.assertNotIn("temperature", later)  # the refusal is remembered, not met again

    def test_o3_mini_refusing_the_parameter_itself(self):
        self.server.behave(reasoning_model("o3-mini", TEMPERATURE_UNSUPPORTED_PARAMETER))
        reply = self.env_client("openai", EVALS_MODEL="o3-mini")(QUESTION)
        self.assertEqual((reply, reply.sent, reply.attempts),
                         ("The answer is 4.", {"temperature": None}, 2))
        self.assertEqual([("temperature" in r["json"]) for r in self.server.requests],
                         [True, False])

    def test_an_azure_reasoning_deployment_with_a_token_cap(self):
        self.server.behave(reasoning_model("o4-mini"))
        client = self.env_client("openai", path="/openai/v1", EVALS_MODEL="my-o4-mini",
                                 EVALS_MAX_TOKENS="500")
        self.assertRunPasses(client, {"temperature": None, "max_completion_tokens": 500}, [
            "my_client: my-o4-mini rejects temperature; sending none (the provider's default)",
            "my_client: my-o4-mini rejects max_tokens; sending max_completion_tokens"])
        self.assertEqual(self.server.requests[-1]["path"], "/openai/v1/chat/completions")

    def test_a_claude_model_that_rejects_temperature(self):
        self.server.behave(claude_without_temperature)
        self.assertRunPasses(self.env_client("anthropic", EVALS_MODEL="claude-opus-4-7"),
                             {"temperature": None, "max_tokens": 1024},
                             ["my_client: claude-opus-4-7 rejects temperature; sending none "
                              "(the provider's default)"])

    def test_a_gemini_3_model_is_sent_no_temperature_from_the_first_call(self):
        self.server.behave(gemini_answer)
        self.assertRunPasses(self.env_client("gemini", path="/v1beta",
                                             EVALS_MODEL="gemini-3-pro-preview"),
                             {"temperature": None},
                             ["my_client: gemini-3-pro-preview is Gemini 3, for which Google "
                              "advises the default temperature; sending none (the provider's "
                              "default)"])
        self.assertTrue(all("generationConfig" not in r["json"] for r in self.server.requests))
        self.assertEqual(len(self.server.requests), 6)

    def test_a_gemini_3_model_gets_an_explicit_temperature(self):
        self.server.behave(gemini_answer)
        reply = self.env_client("gemini", path="/v1beta", EVALS_MODEL="gemini-3-pro-preview",
                                EVALS_TEMPERATURE="0")(QUESTION)
        self.assertEqual(reply.sent, {"temperature": 0.0})
        self.assertEqual(self.notices(), [])

    def test_models_that_take_temperature_0_still_get_it(self):
        self.server.behave(gemini_answer)
        self.assertRunPasses(self.env_client("gemini", path="/v1beta",
                                             EVALS_MODEL="gemini-2.5-flash"),
                             {"temperature": 0.0}, [])
        self.assertEqual(self.server.requests[0]["json"]["generationConfig"], {"temperature": 0.0})

    def test_through_ask_as_evals_calls_it(self):
        self.server.behave(reasoning_model("gpt-5"))
        env = {"EVALS_PROVIDER": "openai", "OPENAI_API_KEY": KEY, "EVALS_MODEL": "gpt-5",
               "EVALS_BASE_URL": self.server.url + "/v1"}
        with unittest.mock.patch.dict("os.environ", env):
            reply = my_client.ask(QUESTION)
        self.assertEqual((reply, reply.sent), ("The answer is 4.", {"temperature": None}))


class ExplicitSettingsTests(ProviderCase):
    """What the user set is sent as set: a refusal of it is the provider's error."""

    def test_an_explicit_temperature_the_model_rejects_is_an_error(self):
        self.server.behave(reasoning_model("o3"))
        for value in ("0", "0.2"):
            with self.subTest(value=value):
                client = self.env_client("openai", EVALS_MODEL="o3", EVALS_TEMPERATURE=value)
                error = self.assertFails(client)
                self.assertIn("HTTP 400 (invalid_request_error, unsupported_value) Unsupported "
                              "value: 'temperature' does not support", str(error))
                self.assertEqual(error.attempts, 1)
        self.assertEqual(self.notices(), [])
        self.assertEqual(my_client._adapted, {})

    def test_an_explicit_token_field_the_model_rejects_is_an_error(self):
        self.server.behave(reasoning_model("o3"))
        client = self.env_client("openai", EVALS_MODEL="o3", EVALS_TEMPERATURE="none",
                                 EVALS_MAX_TOKENS="50", EVALS_MAX_TOKENS_FIELD="max_tokens")
        self.assertIn("Use 'max_completion_tokens' instead", str(self.assertFails(client)))

    def test_a_refusal_naming_a_field_this_provider_has_no_choice_of_is_an_error(self):
        self.server.behave(lambda request: {"status": 400, "json": {"type": "error", "error": {
            "type": "invalid_request_error",
            "message": "max_tokens: use max_completion_tokens with this proxy"}}})
        error = self.assertFails(self.env_client("anthropic", EVALS_TEMPERATURE="0.5"))
        self.assertEqual((error.attempts, len(self.server.requests)), (1, 1))

    def test_another_400_is_not_retried(self):
        self.server.add(openai_400("Invalid 'messages[0].content': string too long.",
                                   "messages[0].content", "string_above_max_length"))
        error = self.assertFails(self.env_client("openai"))
        self.assertEqual((error.status, error.attempts, len(self.server.requests)), (400, 1, 1))

    def test_the_judge_has_the_same_default_and_its_own_variable(self):
        self.server.behave(reasoning_model("o3"))
        env = {"EVALS_JUDGE_PROVIDER": "openai", "EVALS_JUDGE_MODEL": "o3",
               "EVALS_JUDGE_BASE_URL": self.server.url + "/v1", "OPENAI_API_KEY": KEY,
               "EVALS_TEMPERATURE": "0.7"}  # the app's temperature is not the judge's
        reply = my_client.make_judge(env=env)("Grade this.")
        self.assertEqual(reply.sent, {"temperature": None})
        judge = my_client.make_judge(env=dict(env, EVALS_JUDGE_TEMPERATURE="0"))
        self.assertIn("unsupported_value", str(self.assertFails(judge)))
        with self.assertRaises(my_client.ConfigError) as ctx:
            my_client.make_judge(env=dict(env, EVALS_JUDGE_TEMPERATURE="warm"))
        self.assertIn("EVALS_JUDGE_TEMPERATURE", str(ctx.exception))


class TokenFieldTests(unittest.TestCase):
    def field(self, base_url, **env):
        client = my_client.make_client("openai", env=dict(env, EVALS_BASE_URL=base_url,
                                                          EVALS_MAX_TOKENS="64"))
        request = my_client.openai_request(client.settings, "hi", "k")
        (field,) = set(request.body) & {"max_tokens", "max_completion_tokens"}
        self.assertEqual(request.sent[field], 64)
        return field

    def test_documented_hosts_get_max_completion_tokens(self):
        for url in ("https://api.openai.com/v1", "https://res.openai.azure.com/openai/v1",
                    "https://res.cognitiveservices.azure.com/openai/v1",
                    "https://res.services.ai.azure.com/openai/v1"):
            with self.subTest(url=url):
                self.assertEqual(self.field(url), "max_completion_tokens")

    def test_other_compatible_servers_get_max_tokens_unless_told(self):
        self.assertEqual(self.field("http://localhost:8000/v1"), "max_tokens")
        self.assertEqual(self.field("https://openrouter.ai/api/v1"), "max_tokens")
        self.assertEqual(self.field("http://localhost:8000/v1",
                                    EVALS_MAX_TOKENS_FIELD="max_completion_tokens"),
                         "max_completion_tokens")
        self.assertEqual(self.field("https://api.openai.com/v1",
                                    EVALS_MAX_TOKENS_FIELD="max_tokens"), "max_tokens")

    def test_an_unknown_field_name_is_refused(self):
        with self.assertRaises(my_client.ConfigError) as ctx:
            my_client.make_client("openai", env={"EVALS_MAX_TOKENS_FIELD": "max_output"})
        self.assertIn("EVALS_MAX_TOKENS_FIELD must be max_tokens or max_completion_tokens",
                      str(ctx.exception))


class ThinkingTests(ProviderCase):
    """Thinking text is taken out of the answer and kept as Reply.reasoning."""

    def test_a_leading_think_block_is_not_the_answer(self):
        self.server.add(completion("<think>\nMaybe 5? No: 2+2 is 4.\n</think>\n\nThe answer is 4.",
                                   "deepseek-r1"))
        reply = self.env_client("openai")(QUESTION)
        self.assertEqual(reply, "The answer is 4.")
        self.assertEqual(reply.reasoning, "Maybe 5? No: 2+2 is 4.")

    def test_a_think_tag_later_in_the_text_is_part_of_the_answer(self):
        text = "Use <think>...</think> tags to show reasoning."
        self.server.add(completion(text, "m"))
        reply = self.env_client("openai")(QUESTION)
        self.assertEqual((reply, reply.reasoning), (text, None))

    def test_the_compatible_servers_separate_fields(self):
        for field in ("reasoning", "reasoning_content"):
            with self.subTest(field=field):
                self.server.add(completion("The answer is 4.", "qwen3", {field: "2+2=4"}))
                reply = self.env_client("openai")(QUESTION)
                self.assertEqual((reply, reply.reasoning), ("The answer is 4.", "2+2=4"))

    def test_anthropic_thinking_blocks(self):
        response = anthropic_ok("The answer is 4.")
        response["json"]["content"].insert(0, {"type": "thinking", "thinking": "2+2=4",
                                               "signature": "EqQBCgIYAhIM"})
        self.server.add(response)
        reply = self.env_client("anthropic")(QUESTION)
        self.assertEqual((reply, reply.reasoning), ("The answer is 4.", "2+2=4"))

    def test_gemini_thought_parts(self):
        self.server.add(gemini_ok("The answer is 4."))  # its thought part says "thinking..."
        reply = self.env_client("gemini", path="/v1beta")(QUESTION)
        self.assertEqual((reply, reply.reasoning), ("The answer is 4.", "thinking..."))

    def test_ollama_thinking_field_and_an_older_ollamas_think_block(self):
        self.server.behave(ollama(thinking="2+2=4"))
        reply = self.env_client("ollama", path="")(QUESTION)
        self.assertEqual((reply, reply.reasoning), ("The answer is 4.", "2+2=4"))
        self.server.behave(ollama(answer="<think>2+2=4</think>The answer is 4."))
        reply = self.env_client("ollama", path="")(QUESTION)
        self.assertEqual((reply, reply.reasoning), ("The answer is 4.", "2+2=4"))

    def test_a_case_is_scored_on_the_answer_not_on_the_thinking(self):
        self.server.behave(lambda request: completion(
            "<think>Maybe it is 5, or maybe 22. Let me check: 2+2 is 4.</think>The answer is 4.",
            "qwq"))
        case = evals.Case("sum", QUESTION, (
            {"type": "contains_all", "values": ["4"]},
            {"type": "not_contains", "values": ["maybe", "5"]},
            {"type": "max_words", "n": 5}))
        result = evals.run_case(case, self.env_client("openai"))
        self.assertEqual((result.status, result.output), ("pass", "The answer is 4."))


class OllamaTests(ProviderCase):
    def test_the_native_chat_request(self):
        self.server.behave(ollama())
        client = self.env_client("ollama", path="/v1", EVALS_MODEL="qwen3",
                                 EVALS_SYSTEM_PROMPT="Be brief.", EVALS_MAX_TOKENS="64")
        reply = client(QUESTION)
        (request,) = self.server.requests
        self.assertEqual(request["path"], "/api/chat")
        self.assertNotIn("authorization", request["headers"])
        self.assertEqual(request["json"], {
            "model": "qwen3", "stream": False,
            "messages": [{"role": "system", "content": "Be brief."},
                         {"role": "user", "content": QUESTION}],
            "options": {"temperature": 0.0, "num_predict": 64, "num_ctx": 8192}})
        self.assertEqual(reply.sent, {"temperature": 0.0, "num_predict": 64, "num_ctx": 8192})
        self.assertEqual(reply.usage, {"input_tokens": 15, "output_tokens": 9})
        self.assertEqual((reply.model, reply.finish_reason), ("qwen3", "stop"))

    def test_a_prompt_cut_to_fit_the_context_is_an_error_naming_the_counts(self):
        self.server.behave(ollama())
        long_prompt = "word " * 9000
        error = self.assertFails(self.env_client("ollama", path=""), long_prompt)
        self.assertIn("prompt_eval_count 4098 is half of num_ctx 8192 or more", str(error))
        self.assertIn("raise EVALS_OLLAMA_NUM_CTX above 8196", str(error))
        self.assertEqual(error.attempts, 1)
        reply = self.env_client("ollama", path="", EVALS_OLLAMA_NUM_CTX="32768")(long_prompt)
        self.assertEqual((reply, reply.sent["num_ctx"]), ("The answer is 4.", 32768))
        self.assertEqual(reply.usage["input_tokens"], 9010)

    def test_an_answer_cut_at_num_predict_and_an_ollama_error(self):
        response = ollama()({"path": "/api/chat", "json": {
            "model": "m", "stream": False, "messages": [{"role": "user", "content": "hi"}]}})
        response["json"]["done_reason"] = "length"
        self.server.add(response, {"status": 404, "json": {"error": "model 'nope' not found"}})
        reply = self.env_client("ollama", path="")(QUESTION)
        self.assertEqual((reply, reply.finish_reason, reply.finish_reason_raw),
                         ("The answer is 4.", "length", "length"))
        self.assertEqual(str(self.assertFails(self.env_client("ollama", path=""))),
                         "ollama: HTTP 404 model 'nope' not found")

    def test_a_bad_num_ctx_names_the_variable(self):
        with self.assertRaises(my_client.ConfigError) as ctx:
            my_client.make_client("ollama", env={"EVALS_OLLAMA_NUM_CTX": "8k"})
        self.assertIn("EVALS_OLLAMA_NUM_CTX must be an integer, got '8k'", str(ctx.exception))


class GeminiTests(ProviderCase):
    def test_other_and_malformed_function_call_are_errors_naming_the_reason(self):
        for reason in ("OTHER", "MALFORMED_FUNCTION_CALL", "UNEXPECTED_TOOL_CALL"):
            with self.subTest(reason=reason):
                self.server.add(gemini_ok("The answer is", finish=reason))
                error = str(self.assertFails(self.env_client("gemini", path="/v1beta")))
                self.assertIn("finishReason %r" % reason, error)
                self.assertNotIn("The answer is", error)

    def test_a_tuned_model_is_called_by_its_own_name(self):
        self.server.add(gemini_ok())
        self.env_client("gemini", path="/v1beta", EVALS_MODEL="tunedModels/support-v2")("hi")
        self.assertEqual(self.server.requests[0]["path"],
                         "/v1beta/tunedModels/support-v2:generateContent")

    def test_a_daily_quota_429_is_not_retried(self):
        self.server.add({"status": 429, "json": {"error": {
            "code": 429, "status": "RESOURCE_EXHAUSTED",
            "message": "You exceeded your current quota. Go to https://aistudio.google.com/apikey "
                       "to upgrade your quota tier.",
            "details": [
                {"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": [
                    {"quotaMetric": "generativelanguage.googleapis.com/"
                                    "generate_requests_per_model_per_day",
                     "quotaId": "GenerateRequestsPerDayPerProjectPerModel"}]},
                {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "21s"}]}}})
        error = self.assertFails(self.env_client("gemini", path="/v1beta"))
        self.assertEqual((error.attempts, self.sleeps), (1, []))
        self.assertIn("(RESOURCE_EXHAUSTED, GenerateRequestsPerDayPerProjectPerModel)", str(error))


class AnthropicUsageAndBaseUrlTests(ProviderCase):
    def test_cached_input_tokens_are_reported_apart(self):
        response = anthropic_ok()
        response["json"]["usage"].update(cache_creation_input_tokens=1500,
                                         cache_read_input_tokens=0)
        self.server.add(response)
        self.assertEqual(self.env_client("anthropic")("hi").usage, {
            "input_tokens": 20, "output_tokens": 5, "cache_creation_input_tokens": 1500,
            "cache_read_input_tokens": 0})

    def test_a_base_url_without_the_version_path_as_the_sdks_take_it(self):
        for provider, response, path in (
                ("anthropic", anthropic_ok(), "/v1/messages"),
                ("openai", completion("hi", "m"), "/v1/chat/completions"),
                ("gemini", gemini_ok(), "/v1beta/models/gemini-2.5-flash:generateContent")):
            with self.subTest(provider=provider):
                self.server.add(response)
                self.env_client(provider, path="/")("hi")
                self.assertEqual(self.server.requests[-1]["path"], path)


class RetrySignalTests(ProviderCase):
    def test_x_should_retry_decides_when_the_server_sends_it(self):
        busy = {"status": 503, "json": {"error": {"message": "busy"}},
                "headers": {"x-should-retry": "false"}}
        self.server.add(busy)
        self.assertEqual(self.assertFails(self.env_client("openai")).attempts, 1)
        self.server.add({"status": 400, "json": {"error": {"message": "try again"}},
                         "headers": {"x-should-retry": "true"}}, completion("ok", "m"))
        self.assertEqual(self.env_client("openai")("hi").attempts, 2)

    def test_409_is_retried(self):
        self.server.add({"status": 409, "json": {"type": "error", "error": {
            "type": "conflict_error", "message": "lock timeout"}}}, anthropic_ok())
        self.assertEqual(self.env_client("anthropic")("hi").attempts, 2)

    def test_retry_after_0_backs_off_instead_of_retrying_at_once(self):
        self.server.add({"status": 429, "json": {"error": {"message": "slow down"}},
                         "headers": {"Retry-After": "0"}}, completion("ok", "m"))
        client = self.env_client("openai")
        client.settings = client.settings._replace(wait_when_refused=True)  # as the judge's
        client("hi")
        self.assertEqual(self.sleeps, [0.5])  # rand 0.5 * min(20, 1 * 2**0)
        self.server.add({"status": 429, "json": {"error": {"message": "slow down"}},
                         "headers": {"Retry-After": "0"}})
        self.assertEqual(self.assertFails(self.env_client("openai")).retry_after, 0.0)


if __name__ == "__main__":
    with contextlib.redirect_stderr(io.StringIO()):
        unittest.main()
