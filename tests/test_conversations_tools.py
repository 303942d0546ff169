"""Conversations in, tool calls and the whole reply out: each adapter against a loopback server
that answers in its provider's documented JSON, EVALS_TOOLS, the replay and capture of whole replies.

The response fixtures follow the providers' published references, cited next to each one.
"""

import json
import os
import tempfile
import unittest
from unittest import mock

import evals
import evals_extras
import my_client
from tests.test_my_client import (GEMINI_KEY, KEY, LoopbackCase, anthropic_ok,
                                  gemini_ok, openai_ok)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SYSTEM = "You are Acme's support bot. Never issue a refund yourself."
CONVERSATION = [
    {"role": "system", "content": SYSTEM},
    {"role": "user", "content": "My order has not arrived."},
    {"role": "assistant", "content": "Sorry to hear that. What is the order number?"},
    {"role": "user", "content": "It is A-1001."},
]
ORDER_SCHEMA = {"type": "object", "properties": {"order_id": {"type": "string"}},
                "required": ["order_id"]}
TOOLS = [
    {"name": "lookup_order", "description": "Look an order up by its id.",
     "parameters": ORDER_SCHEMA},
    {"name": "issue_refund", "description": "Refund an order.", "parameters": ORDER_SCHEMA},
]
ARGUMENTS = {"order_id": "A-1001"}
# Gemini takes a tool's JSON Schema as parametersJsonSchema; its `parameters` is an OpenAPI
# subset that refuses additionalProperties, const and $schema with HTTP 400.
GEMINI_TOOLS = [{"functionDeclarations": [
    {"name": tool["name"], "description": tool["description"],
     "parametersJsonSchema": tool["parameters"]} for tool in TOOLS]}]

# OpenAI chat completion with tool calls: message.tool_calls[].function.arguments is a JSON
# string, content null, finish_reason "tool_calls".
# https://platform.openai.com/docs/api-reference/chat/object and
# https://platform.openai.com/docs/guides/function-calling
OPENAI_TOOL_CALLS = {"status": 200, "json": {
    "id": "chatcmpl-7", "object": "chat.completion", "created": 1727000000,
    "model": "gpt-4o-mini-2024-07-18",
    "choices": [{"index": 0, "logprobs": None, "finish_reason": "tool_calls", "message": {
        "role": "assistant", "content": None, "refusal": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {
                "name": "lookup_order", "arguments": "{\"order_id\": \"A-1001\"}"}},
            {"id": "call_2", "type": "function", "function": {
                "name": "issue_refund", "arguments": "{\"order_id\": \"A-1001\"}"}}]}}],
    "usage": {"prompt_tokens": 80, "completion_tokens": 30, "total_tokens": 110}}}

# Anthropic Messages response with a tool_use content block (input is a JSON object) and
# stop_reason "tool_use".
# https://docs.anthropic.com/en/docs/agents-and-tools/tool-use/implement-tool-use and
# https://docs.anthropic.com/en/api/messages
ANTHROPIC_TOOL_USE = {"status": 200, "json": {
    "id": "msg_01Aq9w938a90dw8q", "type": "message", "role": "assistant",
    "model": "claude-haiku-4-5-20251001",
    "content": [
        {"type": "text", "text": "I'll look that order up."},
        {"type": "tool_use", "id": "toolu_01A09q90qw90lq917835lq9", "name": "lookup_order",
         "input": {"order_id": "A-1001"}}],
    "stop_reason": "tool_use", "stop_sequence": None,
    "usage": {"input_tokens": 120, "output_tokens": 40}}}

# Gemini GenerateContentResponse with a functionCall part (args is a JSON object); the
# candidate ends with finishReason "STOP".
# https://ai.google.dev/gemini-api/docs/function-calling and
# https://ai.google.dev/api/caching#FunctionCall
GEMINI_FUNCTION_CALL = {"status": 200, "json": {
    "candidates": [{"index": 0, "finishReason": "STOP", "content": {"role": "model", "parts": [
        {"functionCall": {"name": "lookup_order", "args": {"order_id": "A-1001"}}}]}}],
    "usageMetadata": {"promptTokenCount": 90, "candidatesTokenCount": 12,
                      "totalTokenCount": 102},
    "modelVersion": "gemini-2.5-flash"}}

# Ollama /api/chat response with message.tool_calls[].function (arguments is a JSON object)
# and done_reason "stop".
# https://github.com/ollama/ollama/blob/main/docs/api.md#chat-request-with-tools
OLLAMA_TOOL_CALLS = {"status": 200, "json": {
    "model": "llama3.2", "created_at": "2024-07-22T20:33:28.123648Z",
    "message": {"role": "assistant", "content": "", "tool_calls": [
        {"function": {"name": "lookup_order", "arguments": {"order_id": "A-1001"}}}]},
    "done_reason": "stop", "done": True, "total_duration": 885095291,
    "prompt_eval_count": 122, "eval_count": 33}}


def ollama_ok(text="Let me check.", done_reason="stop"):
    """Ollama /api/chat, not streamed (https://docs.ollama.com/api/chat)."""
    return {"status": 200, "json": {
        "model": "llama3.2", "created_at": "2024-07-22T20:33:28.123648Z",
        "message": {"role": "assistant", "content": text}, "done_reason": done_reason,
        "done": True, "prompt_eval_count": 40, "eval_count": 9}}


OK_RESPONSES = {"openai": openai_ok, "anthropic": anthropic_ok, "gemini": gemini_ok,
                "ollama": ollama_ok}
TOOL_RESPONSES = {"openai": OPENAI_TOOL_CALLS, "anthropic": ANTHROPIC_TOOL_USE,
                  "gemini": GEMINI_FUNCTION_CALL, "ollama": OLLAMA_TOOL_CALLS}


class ConversationRequestTests(LoopbackCase):
    """A conversation goes out in each provider's documented shape."""

    def sent_body(self, provider, prompt=CONVERSATION, **overrides):
        self.server.add(OK_RESPONSES[provider]())
        self.client(provider, **overrides)(prompt)
        return self.server.requests[-1]["json"]

    def test_openai_sends_the_messages_as_given(self):
        self.assertEqual(self.sent_body("openai")["messages"], CONVERSATION)

    def test_ollama_sends_the_messages_as_given(self):
        self.assertEqual(self.sent_body("ollama")["messages"], CONVERSATION)

    def test_anthropic_takes_the_system_messages_apart(self):
        body = self.sent_body("anthropic")
        self.assertEqual(body["system"], SYSTEM)
        self.assertEqual(body["messages"], CONVERSATION[1:])

    def test_anthropic_merges_consecutive_messages_of_one_role(self):
        conversation = [{"role": "system", "content": "Be brief."},
                        {"role": "user", "content": "Hi."},
                        {"role": "system", "content": "Answer in English."},
                        {"role": "user", "content": "Where is my order?"},
                        {"role": "assistant", "content": "Which order?"},
                        {"role": "assistant", "content": "Its number, please."},
                        {"role": "user", "content": "A-1001"}]
        body = self.sent_body("anthropic", conversation)
        self.assertEqual(body["system"], "Be brief.\n\nAnswer in English.")
        self.assertEqual(body["messages"], [
            {"role": "user", "content": "Hi.\n\nWhere is my order?"},
            {"role": "assistant", "content": "Which order?\n\nIts number, please."},
            {"role": "user", "content": "A-1001"}])

    def test_gemini_has_a_system_instruction_and_model_turns(self):
        body = self.sent_body("gemini")
        self.assertEqual(body["systemInstruction"], {"parts": [{"text": SYSTEM}]})
        self.assertEqual(body["contents"], [
            {"role": "user", "parts": [{"text": "My order has not arrived."}]},
            {"role": "model", "parts": [{"text": "Sorry to hear that. What is the order number?"}]},
            {"role": "user", "parts": [{"text": "It is A-1001."}]}])

    def test_gemini_puts_consecutive_messages_of_one_role_in_one_turn(self):
        # Gemini answers turns of one role in a row "Please ensure that multiturn requests
        # alternate between user and model" (HTTP 400); a system message taken out between
        # two user messages leaves two in a row. One turn holds them as its parts.
        conversation = [{"role": "user", "content": "Hi."},
                        {"role": "system", "content": "Answer in English."},
                        {"role": "user", "content": "Where is my order?"},
                        {"role": "assistant", "content": "Which order?"},
                        {"role": "assistant", "content": "Its number, please."},
                        {"role": "user", "content": "A-1001"}]
        body = self.sent_body("gemini", conversation)
        self.assertEqual(body["systemInstruction"], {"parts": [{"text": "Answer in English."}]})
        self.assertEqual(body["contents"], [
            {"role": "user", "parts": [{"text": "Hi."}, {"text": "Where is my order?"}]},
            {"role": "model", "parts": [{"text": "Which order?"},
                                        {"text": "Its number, please."}]},
            {"role": "user", "parts": [{"text": "A-1001"}]}])

    def test_the_system_prompt_setting_comes_first_only_without_a_system_message(self):
        without = CONVERSATION[1:]
        for provider in ("openai", "ollama"):
            with self.subTest(provider=provider):
                body = self.sent_body(provider, without, system_prompt="Be brief.")
                self.assertEqual(body["messages"],
                                 [{"role": "system", "content": "Be brief."}] + without)
                body = self.sent_body(provider, CONVERSATION, system_prompt="Be brief.")
                self.assertEqual(body["messages"], CONVERSATION)
        self.assertEqual(self.sent_body("anthropic", without, system_prompt="Be brief.")["system"],
                         "Be brief.")
        self.assertEqual(self.sent_body("anthropic", system_prompt="Be brief.")["system"], SYSTEM)
        self.assertEqual(self.sent_body("gemini", without, system_prompt="Be brief.")
                         ["systemInstruction"], {"parts": [{"text": "Be brief."}]})
        self.assertEqual(self.sent_body("gemini", system_prompt="Be brief.")
                         ["systemInstruction"], {"parts": [{"text": SYSTEM}]})

    def test_a_conversation_without_a_system_message_sends_none(self):
        self.assertNotIn("system", self.sent_body("anthropic", CONVERSATION[1:]))
        self.assertNotIn("systemInstruction", self.sent_body("gemini", CONVERSATION[1:]))

    def test_a_prompt_that_is_neither_is_refused_before_any_request(self):
        for prompt in ([], [{"role": "tool", "content": "x"}], [{"role": "user"}], 42):
            with self.subTest(prompt=prompt):
                with self.assertRaises(TypeError):
                    self.client("openai")(prompt)
        self.assertEqual(self.server.requests, [])


class PlainPromptBytesTests(unittest.TestCase):
    """A str prompt is sent byte for byte as before conversations existed."""

    def body(self, provider, build):
        client = my_client.make_client(provider, env={}, system_prompt="Be brief.", max_tokens=64)
        return json.dumps(build(client.settings, "What is 2+2?", "k").body)

    def test_each_provider(self):
        self.assertEqual(self.body("openai", my_client.openai_request), (
            '{"model": "gpt-4o-mini", "messages": [{"role": "system", "content": "Be brief."}, '
            '{"role": "user", "content": "What is 2+2?"}], "temperature": 0.0, '
            '"max_completion_tokens": 64}'))
        self.assertEqual(self.body("anthropic", my_client.anthropic_request), (
            '{"model": "claude-haiku-4-5", "messages": [{"role": "user", "content": '
            '"What is 2+2?"}], "temperature": 0.0, "max_tokens": 64, "system": "Be brief."}'))
        self.assertEqual(self.body("gemini", my_client.gemini_request), (
            '{"contents": [{"role": "user", "parts": [{"text": "What is 2+2?"}]}], '
            '"systemInstruction": {"parts": [{"text": "Be brief."}]}, "generationConfig": '
            '{"temperature": 0.0, "maxOutputTokens": 64}}'))
        self.assertEqual(self.body("ollama", my_client.ollama_request), (
            '{"model": "llama3.2", "messages": [{"role": "system", "content": "Be brief."}, '
            '{"role": "user", "content": "What is 2+2?"}], "stream": false, "options": '
            '{"temperature": 0.0, "num_predict": 64, "num_ctx": 8192}}'))


class ToolCallReplyTests(LoopbackCase):
    """A tool call in each provider's documented shape comes back as Reply.tool_calls."""

    def reply(self, provider, response):
        self.server.add(response)
        return self.client(provider)(CONVERSATION)

    def test_openai(self):
        reply = self.reply("openai", OPENAI_TOOL_CALLS)
        self.assertEqual(reply, "")
        self.assertEqual(reply.tool_calls, [{"name": "lookup_order", "arguments": ARGUMENTS},
                                            {"name": "issue_refund", "arguments": ARGUMENTS}])
        self.assertEqual((reply.finish_reason, reply.finish_reason_raw), ("tool_calls", "tool_calls"))
        self.assertEqual(reply.usage, {"input_tokens": 80, "output_tokens": 30})

    def test_anthropic_keeps_the_text_beside_the_call(self):
        reply = self.reply("anthropic", ANTHROPIC_TOOL_USE)
        self.assertEqual(reply, "I'll look that order up.")
        self.assertEqual(reply.tool_calls, [{"name": "lookup_order", "arguments": ARGUMENTS}])
        self.assertEqual((reply.finish_reason, reply.finish_reason_raw), ("tool_calls", "tool_use"))

    def test_gemini_stop_with_a_function_call_is_tool_calls(self):
        reply = self.reply("gemini", GEMINI_FUNCTION_CALL)
        self.assertEqual(reply, "")
        self.assertEqual(reply.tool_calls, [{"name": "lookup_order", "arguments": ARGUMENTS}])
        self.assertEqual((reply.finish_reason, reply.finish_reason_raw), ("tool_calls", "STOP"))

    def test_ollama_stop_with_tool_calls_is_tool_calls(self):
        reply = self.reply("ollama", OLLAMA_TOOL_CALLS)
        self.assertEqual(reply, "")
        self.assertEqual(reply.tool_calls, [{"name": "lookup_order", "arguments": ARGUMENTS}])
        self.assertEqual((reply.finish_reason, reply.finish_reason_raw), ("tool_calls", "stop"))

    def test_openai_arguments_that_are_not_a_json_object_stay_the_raw_string(self):
        # NaN and Infinity are not JSON (RFC 8259), though Python's json reads them: a call
        # holding one would be no JSON object in the record, and evals refuses it.
        for raw in ('{"order_id": "A-10', '["A-1001"]', "A-1001", '{"amount": NaN}',
                    '{"amount": -Infinity}'):
            with self.subTest(raw=raw):
                response = json.loads(json.dumps(OPENAI_TOOL_CALLS))
                calls = response["json"]["choices"][0]["message"]["tool_calls"]
                calls[0]["function"]["arguments"] = raw
                del calls[1]
                reply = self.reply("openai", response)
                self.assertEqual(reply.tool_calls, [{"name": "lookup_order", "arguments": raw}])
                self.assertEqual(reply.finish_reason, "tool_calls")

    def test_openai_empty_arguments_are_an_empty_object(self):
        response = json.loads(json.dumps(OPENAI_TOOL_CALLS))
        response["json"]["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] = ""
        self.assertEqual(self.reply("openai", response).tool_calls[0]["arguments"], {})

    def test_openai_deprecated_function_call(self):
        response = openai_ok(finish="function_call")
        response["json"]["choices"][0]["message"].update(content=None, function_call={
            "name": "lookup_order", "arguments": "{\"order_id\": \"A-1001\"}"})
        reply = self.reply("openai", response)
        self.assertEqual((reply.tool_calls, reply.finish_reason),
                         ([{"name": "lookup_order", "arguments": ARGUMENTS}], "tool_calls"))

    def test_a_call_in_tool_calls_and_function_call_alike_is_one_call(self):
        # llama-cpp-python's server (chat format chatml-function-calling, a named tool_choice)
        # gives the call in both fields; its arguments here are cut at the token limit.
        raw = '{ "order_id": "1234567890123456789012'
        call = {"name": "lookup_order", "arguments": raw}
        response = openai_ok(finish="tool_calls")
        response["json"]["choices"][0]["message"].update(
            content=None, function_call=dict(call),
            tool_calls=[{"id": "call__0_lookup_order_cmpl-1", "type": "function",
                         "function": dict(call)}])
        reply = self.reply("openai", response)
        self.assertEqual((reply.tool_calls, reply.finish_reason), ([call], "tool_calls"))

    def test_a_tool_call_without_a_name_is_a_malformed_body(self):
        response = json.loads(json.dumps(OPENAI_TOOL_CALLS))
        response["json"]["choices"][0]["message"]["tool_calls"][0]["function"].pop("name")
        self.server.add(response)
        error = self.assertFails(self.client())
        self.assertIn("tool call with no name", str(error))
        self.assertEqual(error.attempts, 1)

    def test_finish_reason_tool_calls_without_calls_or_text_is_no_answer(self):
        response = openai_ok(finish="tool_calls")
        response["json"]["choices"][0]["message"]["content"] = None
        self.server.add(response)
        self.assertIn("no text content", str(self.assertFails(self.client())))

    def test_gemini_malformed_function_call_stays_an_error(self):
        response = json.loads(json.dumps(GEMINI_FUNCTION_CALL))
        response["json"]["candidates"][0]["finishReason"] = "MALFORMED_FUNCTION_CALL"
        self.server.add(response)
        self.assertIn("invalid function call", str(self.assertFails(self.client("gemini"))))


class TruncationAndRefusalTests(LoopbackCase):
    """A truncated or refused answer is returned, with its normalised finish reason."""

    def test_a_truncated_answer_from_each_provider(self):
        responses = {"openai": openai_ok("The refund takes", finish="length"),
                     "anthropic": anthropic_ok("The refund takes", stop="max_tokens"),
                     "gemini": gemini_ok("The refund takes", finish="MAX_TOKENS"),
                     "ollama": ollama_ok("The refund takes", done_reason="length")}
        for provider, response in responses.items():
            with self.subTest(provider=provider):
                self.server.add(response)
                reply = self.client(provider)(CONVERSATION)
                self.assertEqual((reply, reply.finish_reason), ("The refund takes", "length"))

    def test_anthropic_context_window_exceeded_is_a_truncation(self):
        self.server.add(anthropic_ok("The refund", stop="model_context_window_exceeded"))
        reply = self.client("anthropic")("hi")
        self.assertEqual((reply, reply.finish_reason), ("The refund", "length"))

    def test_a_gemini_thinking_model_that_spent_its_tokens_thinking_answers_nothing(self):
        response = gemini_ok(finish="MAX_TOKENS")
        response["json"]["candidates"][0]["content"]["parts"].pop()  # only the thought part
        self.server.add(response)
        reply = self.client("gemini")("hi")
        self.assertEqual((reply, reply.finish_reason, reply.reasoning),
                         ("", "length", "thinking..."))

    def test_openai_refusal_beside_content_keeps_the_content(self):
        response = openai_ok("I won't do that.")
        response["json"]["choices"][0]["message"]["refusal"] = "I can't help with that."
        self.server.add(response)
        reply = self.client()("hi")
        self.assertEqual((reply, reply.finish_reason), ("I won't do that.", "refusal"))

    def test_an_ollama_prompt_that_did_not_fit_stays_an_error(self):
        response = ollama_ok(done_reason="length")
        response["json"]["prompt_eval_count"] = 4100
        self.server.add(response)
        self.assertIn("may not have fitted", str(self.assertFails(self.client("ollama"))))


class ToolsFileTests(LoopbackCase):
    """EVALS_TOOLS: the tools offered to the model, in each provider's shape."""

    def setUp(self):
        super().setUp()
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.dir = tmp.name
        self.tools = self.write("tools.json", json.dumps(TOOLS))

    def write(self, name, text):
        path = os.path.join(self.dir, name)
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)
        return path

    def sent(self, provider):
        self.server.add(TOOL_RESPONSES[provider])
        reply = self.client(provider, env={"EVALS_TOOLS": self.tools})(CONVERSATION)
        self.assertEqual(reply.sent["tools"], ["lookup_order", "issue_refund"])
        return self.server.requests[-1]["json"]

    def test_openai_and_ollama_get_function_tools(self):
        expected = [{"type": "function", "function": tool} for tool in TOOLS]
        self.assertEqual(self.sent("openai")["tools"], expected)
        self.assertEqual(self.sent("ollama")["tools"], expected)

    def test_anthropic_gets_input_schema(self):
        self.assertEqual(self.sent("anthropic")["tools"], [
            {"name": "lookup_order", "description": "Look an order up by its id.",
             "input_schema": ORDER_SCHEMA},
            {"name": "issue_refund", "description": "Refund an order.",
             "input_schema": ORDER_SCHEMA}])

    def test_gemini_gets_function_declarations(self):
        body = self.sent("gemini")
        self.assertEqual(body["tools"], GEMINI_TOOLS)
        self.assertNotIn("tools", body["generationConfig"])

    def test_gemini_gets_the_json_schema_whole(self):
        # OpenAI's strict tools need additionalProperties false; Gemini's OpenAPI-subset
        # `parameters` answers it "Unknown name \"additionalProperties\"" (HTTP 400), its
        # parametersJsonSchema takes it.
        strict = {"type": "object", "additionalProperties": False,
                  "properties": {"reason": {"const": "damaged"}}, "required": ["reason"]}
        path = self.write("strict.json", json.dumps([{"name": "escalate",
                                                      "parameters": strict}, {"name": "bare"}]))
        self.server.add(GEMINI_FUNCTION_CALL)
        self.client("gemini", env={"EVALS_TOOLS": path})("hi")
        self.assertEqual(self.server.requests[-1]["json"]["tools"], [{"functionDeclarations": [
            {"name": "escalate", "parametersJsonSchema": strict}, {"name": "bare"}]}])

    def test_a_tool_without_parameters(self):
        path = self.write("bare.json", json.dumps([{"name": "escalate"}]))
        self.server.add(anthropic_ok(), openai_ok())
        self.client("anthropic", env={"EVALS_TOOLS": path})("hi")
        self.client("openai", env={"EVALS_TOOLS": path})("hi")
        anthropic, openai = (r["json"]["tools"] for r in self.server.requests)
        self.assertEqual(anthropic, [{"name": "escalate", "input_schema": {
            "type": "object", "properties": {}}}])
        self.assertEqual(openai, [{"type": "function", "function": {"name": "escalate"}}])

    def test_no_tools_no_field(self):
        self.server.add(openai_ok())
        reply = self.client()("hi")
        self.assertNotIn("tools", self.server.requests[0]["json"])
        self.assertNotIn("tools", reply.sent)
        empty = self.write("empty.json", "[]")
        self.server.add(openai_ok())
        self.assertNotIn("tools", self.client(env={"EVALS_TOOLS": empty})("hi").sent)

    def test_the_file_is_read_once_per_client(self):
        client = self.client(env={"EVALS_TOOLS": self.tools})
        self.write("tools.json", "not json any more")
        self.server.add(openai_ok(), openai_ok())
        client("one")
        client("two")
        self.assertEqual([len(r["json"]["tools"]) for r in self.server.requests], [2, 2])

    def test_a_tools_list_given_to_make_client(self):
        self.server.add(openai_ok())
        self.client(tools=TOOLS[:1], env={"EVALS_TOOLS": "/nonexistent"})("hi")
        self.assertEqual(self.server.requests[0]["json"]["tools"][0]["function"]["name"],
                         "lookup_order")

    def test_a_bad_tools_file_is_a_config_error_naming_it(self):
        bad = {
            "missing.json": (None, "cannot be read"),
            "broken.json": ('[{"name": ', "not valid JSON"),
            "object.json": ('{"name": "lookup_order"}', "expected a JSON list"),
            "scalar.json": ('["lookup_order"]', "tool 1 is str, not an object"),
            "noname.json": ('[{"description": "x"}]', "tool 1 has no 'name'"),
            "typo.json": ('[{"name": "a", "paramaters": {}}]', "unknown field(s) 'paramaters'"),
            "twice.json": ('[{"name": "a"}, {"name": "a"}]', "tool 2 repeats the name 'a'"),
            "params.json": ('[{"name": "a", "parameters": "order_id"}]',
                            "'parameters' must be a JSON Schema object"),
            "description.json": ('[{"name": "a", "description": 3}]',
                                 "'description' must be a string"),
        }
        for name, (text, words) in bad.items():
            with self.subTest(name=name):
                path = os.path.join(self.dir, name) if text is None else self.write(name, text)
                with self.assertRaises(my_client.ConfigError) as ctx:
                    my_client.make_client("openai", env={"EVALS_TOOLS": path})
                self.assertIn("EVALS_TOOLS file %s: " % path, str(ctx.exception))
                self.assertIn(words, str(ctx.exception))
        self.assertEqual(self.server.requests, [])

    def test_the_judge_is_offered_no_tools(self):
        self.server.add(openai_ok('{"verdict": "pass"}'))
        judge = my_client.make_judge(env={
            "EVALS_JUDGE_PROVIDER": "openai", "EVALS_JUDGE_BASE_URL": self.server.url + "/v1",
            "OPENAI_API_KEY": KEY, "EVALS_TOOLS": self.tools})
        self.assertNotIn("tools", judge("Grade this.").sent)
        self.assertNotIn("tools", self.server.requests[0]["json"])

    def test_ask_reads_evals_tools(self):
        env = {"EVALS_PROVIDER": "gemini", "GEMINI_API_KEY": GEMINI_KEY,
               "EVALS_BASE_URL": self.server.url + "/v1beta", "EVALS_TOOLS": self.tools}
        self.server.add(GEMINI_FUNCTION_CALL)
        with mock.patch.dict(os.environ, env):
            reply = my_client.ask(CONVERSATION)
        self.assertEqual(reply.tool_calls, [{"name": "lookup_order", "arguments": ARGUMENTS}])
        self.assertEqual(self.server.requests[0]["json"]["tools"], GEMINI_TOOLS)


class ToolChoiceTests(LoopbackCase):
    """EVALS_TOOL_CHOICE: sent explicitly whenever tools are offered, in each provider's
    spelling; nothing without tools, and nothing to Ollama, which has no such field."""

    # OpenAI: https://platform.openai.com/docs/api-reference/chat/create (tool_choice);
    # Anthropic: https://docs.anthropic.com/en/docs/agents-and-tools/tool-use/implement-tool-use
    # #forcing-tool-use ; Gemini: https://ai.google.dev/api/caching#FunctionCallingConfig
    SPELLED = {
        "openai": ("tool_choice", {
            "auto": "auto", "required": "required", "none": "none",
            "issue_refund": {"type": "function", "function": {"name": "issue_refund"}}}),
        "anthropic": ("tool_choice", {
            "auto": {"type": "auto"}, "required": {"type": "any"}, "none": {"type": "none"},
            "issue_refund": {"type": "tool", "name": "issue_refund"}}),
        "gemini": ("toolConfig", {
            "auto": {"functionCallingConfig": {"mode": "AUTO"}},
            "required": {"functionCallingConfig": {"mode": "ANY"}},
            "none": {"functionCallingConfig": {"mode": "NONE"}},
            "issue_refund": {"functionCallingConfig": {
                "mode": "ANY", "allowedFunctionNames": ["issue_refund"]}}}),
    }

    def call(self, provider, choice=None, tools=TOOLS):
        env = {} if choice is None else {"EVALS_TOOL_CHOICE": choice}
        self.server.add(TOOL_RESPONSES[provider])
        reply = self.client(provider, tools=tools, env=env)("hi")
        return self.server.requests[-1]["json"], reply.sent

    def test_auto_is_sent_by_default(self):
        for provider, (field, spelled) in self.SPELLED.items():
            with self.subTest(provider=provider):
                body, sent = self.call(provider)
                self.assertEqual(body[field], spelled["auto"])
                self.assertEqual(sent["tool_choice"], spelled["auto"])

    def test_each_choice_in_each_providers_spelling(self):
        for provider, (field, spelled) in self.SPELLED.items():
            for choice, expected in spelled.items():
                with self.subTest(provider=provider, choice=choice):
                    body, sent = self.call(provider, choice)
                    self.assertEqual(body[field], expected)
                    self.assertEqual(sent["tool_choice"], expected)
                    other = {"tool_choice", "toolConfig"} - {field}
                    self.assertFalse(other & set(body), body)

    def test_the_tool_choice_override_of_make_client(self):
        self.server.add(openai_ok())
        self.client(tools=TOOLS, tool_choice="lookup_order",
                    env={"EVALS_TOOL_CHOICE": "none"})("hi")
        self.assertEqual(self.server.requests[-1]["json"]["tool_choice"],
                         {"type": "function", "function": {"name": "lookup_order"}})

    def test_ollama_has_no_tool_choice_and_is_sent_none(self):
        for choice in (None, "required", "lookup_order"):
            with self.subTest(choice=choice):
                body, sent = self.call("ollama", choice)
                self.assertEqual(len(body["tools"]), 2)
                self.assertFalse({"tool_choice", "toolConfig"} & set(body), body)
                self.assertNotIn("tool_choice", sent)

    def test_no_tools_no_tool_choice(self):
        for provider in ("openai", "anthropic", "gemini", "ollama"):
            for choice in (None, "required", "lookup_order"):  # ignored without tools
                with self.subTest(provider=provider, choice=choice):
                    self.server.add(OK_RESPONSES[provider]())
                    env = {} if choice is None else {"EVALS_TOOL_CHOICE": choice}
                    reply = self.client(provider, env=env)("hi")
                    body = self.server.requests[-1]["json"]
                    self.assertFalse({"tools", "tool_choice", "toolConfig"} & set(body), body)
                    self.assertNotIn("tool_choice", reply.sent)

    def test_a_name_that_is_not_an_offered_tool_is_a_config_error(self):
        for choice in ("cancel_order", "any", "AUTO", ""):
            with self.subTest(choice=choice):
                with self.assertRaises(my_client.ConfigError) as ctx:
                    my_client.make_client("openai", tools=TOOLS,
                                          env={"EVALS_TOOL_CHOICE": choice or " "})
                message = str(ctx.exception)
                self.assertIn("EVALS_TOOL_CHOICE must be auto, required, none or the name of "
                              "an offered tool (lookup_order, issue_refund)", message)
        self.assertEqual(self.server.requests, [])

    def test_the_judge_sends_no_tool_choice(self):
        self.server.add(openai_ok('{"verdict": "pass"}'))
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        tools = os.path.join(tmp.name, "tools.json")
        with open(tools, "w", encoding="utf-8") as handle:
            json.dump(TOOLS, handle)
        judge = my_client.make_judge(env={
            "EVALS_JUDGE_PROVIDER": "openai", "EVALS_JUDGE_BASE_URL": self.server.url + "/v1",
            "OPENAI_API_KEY": KEY, "EVALS_TOOLS": tools, "EVALS_TOOL_CHOICE": "lookup_order"})
        self.assertNotIn("tool_choice", judge("Grade this.").sent)
        self.assertNotIn("tool_choice", self.server.requests[0]["json"])


class AcceptsConversationsTests(unittest.TestCase):
    def test_every_client_says_so(self):
        self.assertIs(my_client.ask.accepts_conversations, True)
        for provider in my_client.PROVIDERS:
            with self.subTest(provider=provider):
                client = my_client.make_client(provider, env={})
                self.assertIs(getattr(client, "accepts_conversations", False), True)
        self.assertIs(evals_extras.capture(my_client.ask, path=os.devnull).accepts_conversations,
                      True)


class ReplyDictTests(unittest.TestCase):
    def test_a_plain_answer_stays_a_string(self):
        self.assertEqual(my_client.reply_dict("hi"), "hi")
        self.assertEqual(my_client.reply_dict(my_client.Reply("hi")), "hi")

    def test_a_known_ending_is_kept_stop_included(self):
        # A replay must see the ending the live call saw: stored as a bare str, "stop" came
        # back as "not reported", which a finish_reason check fails.
        self.assertEqual(my_client.reply_dict(my_client.Reply("hi", finish_reason="stop")),
                         {"text": "hi", "finish_reason": "stop"})

    def test_tool_calls_or_another_ending_make_a_dict(self):
        calls = [{"name": "lookup_order", "arguments": ARGUMENTS}]
        self.assertEqual(my_client.reply_dict(my_client.Reply("", finish_reason="tool_calls",
                                                               tool_calls=calls)),
                         {"text": "", "tool_calls": calls, "finish_reason": "tool_calls"})
        self.assertEqual(my_client.reply_dict(my_client.Reply("The refund", finish_reason="length")),
                         {"text": "The refund", "finish_reason": "length"})


class WholeReplyReplayTests(unittest.TestCase):
    """Recordings whose output is a whole reply replay its tool calls and finish reason, in
    the harness's replay (my_client has none): by case id, whatever the input."""

    CALLS = [{"name": "lookup_order", "arguments": ARGUMENTS},
             {"name": "get_policy", "arguments": "not json"}]
    RECORDS = [
        {"id": "tool", "input": CONVERSATION, "output": {
            "text": "", "tool_calls": CALLS, "finish_reason": "tool_calls"}},
        {"id": "cut", "input": "Explain refunds.", "output": {"text": "Refunds are",
                                                             "finish_reason": "length"}},
        {"id": "plain", "input": "hello", "output": "Hi!"},
    ]

    def setUp(self):
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.path = os.path.join(tmp.name, "recordings.jsonl")
        self.write(self.RECORDS)

    def write(self, records):
        with open(self.path, "w", encoding="utf-8") as handle:
            handle.write("".join(json.dumps(r) + "\n" for r in records))

    def replayed(self, *cases):
        return evals.run_cases(list(cases), evals.replay_client(evals.load_outputs(self.path)))

    def test_by_case_id(self):
        tool, cut, plain = self.replayed(
            evals.Case("tool", "a templated prompt", ({"type": "tool_called", "name": "lookup_order"},)),
            evals.Case("cut", CONVERSATION[:2], ({"type": "contains_all", "values": ["x"]},)),
            evals.Case("plain", "hello", ({"type": "contains_all", "values": ["Hi"]},)))
        self.assertEqual((tool.output, tool.tool_calls, tool.finish_reason),
                         ("", tuple({"name": c["name"], "arguments": c["arguments"]}
                                    for c in self.CALLS), "tool_calls"))
        self.assertIsNone(tool.latency_s)  # a replayed answer took no model time
        self.assertEqual((cut.output, cut.tool_calls, cut.finish_reason),
                         ("Refunds are", (), "length"))
        self.assertEqual((plain.status, plain.tool_calls, plain.finish_reason),
                         ("pass", (), None))

    def test_a_malformed_whole_output_names_the_line(self):
        for output, words in (({"tool_calls": []}, "'output' must be a string"),
                              ({"text": "", "tool_calls": [{"arguments": {}}]}, "tool call 1"),
                              ({"text": "", "finish_reason": 3}, "finish_reason"),
                              # a misspelt key would replay as no tool call at all
                              ({"text": "", "toolcalls": [{"name": "issue_refund"}]},
                               "unknown key 'toolcalls'"),
                              ({"text": "", "finish_reason": "end_turn"}, '"end_turn"'),
                              ({"text": "", "tool_calls": [{"name": ""}]}, "tool call 1"),
                              ({"text": "", "tool_calls": [{"name": "a", "args": {}}]},
                               "unknown key 'args'")):
            with self.subTest(output=output):
                self.write([self.RECORDS[2], {"id": "bad", "input": "x", "output": output}])
                with self.assertRaises(evals.EvalsError) as ctx:
                    evals.load_outputs(self.path)
                self.assertIn("%s:2: " % self.path, str(ctx.exception))
                self.assertIn(words, str(ctx.exception))


class CaptureWholeReplyTests(unittest.TestCase):
    def setUp(self):
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.dir = tmp.name
        self.captures = os.path.join(self.dir, ".evals", "captures.jsonl")

    def rows(self):
        with open(self.captures, encoding="utf-8") as handle:
            return [json.loads(line) for line in handle]

    def test_a_conversation_and_a_tool_call_reply_are_stored_whole(self):
        calls = [{"name": "lookup_order", "arguments": ARGUMENTS}]

        @evals_extras.capture(path=self.captures)
        def bot(messages):
            return my_client.Reply("", finish_reason="tool_calls", tool_calls=calls)

        evals_extras.capture(lambda q: my_client.Reply("Hi", finish_reason="stop"),
                          path=self.captures)("hello")
        bot(CONVERSATION)
        plain, whole = self.rows()
        self.assertEqual((plain["input"], plain["output"]),
                         ("hello", {"text": "Hi", "finish_reason": "stop"}))
        self.assertEqual(whole["input"], CONVERSATION)
        self.assertEqual(whole["output"], {"text": "", "tool_calls": calls,
                                           "finish_reason": "tool_calls"})


if __name__ == "__main__":
    unittest.main()
