"""my_client: the model client that ``python evals.py`` calls, one prompt at a time.

``ask(prompt, *, attempt=0) -> Reply`` is the entry point.  Set
``EVALS_PROVIDER`` to call a real model.  With no provider configured,
``python evals.py`` replays ``recordings.jsonl`` itself and does not call this
module at all (``ask`` called then raises :class:`ConfigError`).

The contract with evals.py runs one way: this module imports nothing from
evals, and evals imports nothing from it.  evals calls ``ask(prompt)`` and, as
``ask``'s signature names ``attempt``, passes the 0-based repeat index as that
keyword argument (the cache keeps one reply per repeat); a client whose
signature names ``case`` gets the case too.  What a client can do beyond one
call it declares as attributes evals reads: ``accepts_conversations``, and
``batch`` (provider batches).

A prompt is a ``str`` (one user message) or a conversation: a list of
``{"role": "system" | "user" | "assistant", "content": str}``, sent in each
provider's own shape (OpenAI-compatible and Ollama: ``messages`` as given;
Anthropic: the system messages joined into ``system``, consecutive messages of
one role merged with a blank line, as the roles must alternate; Gemini: the
system messages as ``systemInstruction``, ``assistant`` as a ``model`` turn,
consecutive messages of one role as one turn's parts).
``ask`` and every client ``make_client`` returns carry
``accepts_conversations = True``, which evals reads before sending one.

Usage::

    # offline (default): evals.py replays recordings.jsonl, this module is not called
    python evals.py

    # live, against a provider
    EVALS_PROVIDER=openai OPENAI_API_KEY=... python evals.py
    EVALS_PROVIDER=anthropic EVALS_MODEL=claude-sonnet-4-5 python evals.py
    EVALS_PROVIDER=ollama EVALS_MODEL=qwen2.5 python evals.py

    # from Python, without environment variables
    import my_client
    client = my_client.make_client("anthropic", api_key="...", max_tokens=256)
    reply = client("Summarise this ticket: ...")
    reply.usage, reply.model, reply.finish_reason, reply.attempts, reply.sent
    reply = client([{"role": "system", "content": "You are Acme's support bot."},
                    {"role": "user", "content": "Where is order A-1001?"}])
    reply.tool_calls  # [{"name": "lookup_order", "arguments": {"order_id": "A-1001"}}]

Environment variables (all read when ``ask`` is called; keys are read on every
call and are never printed, logged or put into an exception message):

======================  ======================================================
``EVALS_PROVIDER``      ``openai`` | ``anthropic`` | ``gemini`` | ``ollama``.
                        Unset, empty or ``replay``: no provider; evals.py
                        replays ``EVALS_RECORDINGS`` (default
                        ``recordings.jsonl``) itself, and ``ask`` raises
                        ConfigError.
``EVALS_MODEL``         model name.  Defaults: openai ``gpt-4o-mini``,
                        anthropic ``claude-haiku-4-5``, gemini
                        ``gemini-2.5-flash``, ollama ``llama3.2``.
``EVALS_BASE_URL``      API root including the version path, e.g.
                        ``http://localhost:8000/v1`` (vLLM, llama.cpp server,
                        LM Studio, OpenRouter, Azure OpenAI ``.../openai/v1``).
                        Defaults: ``https://api.openai.com/v1``,
                        ``https://api.anthropic.com/v1``,
                        ``https://generativelanguage.googleapis.com/v1beta``,
                        ``http://localhost:11434`` (Ollama's native API; a
                        trailing ``/v1`` or ``/api`` is dropped).  A URL
                        with no path gets the provider's version path, as
                        the SDKs do (``https://api.anthropic.com``).  Any
                        OpenAI-compatible server: ``EVALS_PROVIDER=openai``
                        with its key in ``OPENAI_API_KEY`` (any text for a
                        server that checks none).
``OPENAI_API_KEY``      key for ``openai`` (sent as ``Authorization: Bearer``).
``ANTHROPIC_API_KEY``   key for ``anthropic`` (sent as ``x-api-key``).
``GEMINI_API_KEY``      key for ``gemini`` (``GOOGLE_API_KEY`` also accepted;
                        sent as the ``x-goog-api-key`` header, never in the URL).
``EVALS_SYSTEM_PROMPT`` optional system prompt: sent before a str prompt, and
                        before a conversation that has no system message of
                        its own (one that has keeps its own).
``EVALS_TOOLS``         optional path of a JSON file: the tools offered to the
                        model, a list of ``{"name", "description",
                        "parameters"}`` (``parameters`` a JSON Schema object:
                        OpenAI's function shape without its wrapper).  Read
                        once per client; a file that is not such a list is a
                        ConfigError naming it.  Sent as each provider takes
                        tools (OpenAI and Ollama ``{"type": "function",
                        "function"}``, Anthropic ``input_schema``, Gemini
                        ``functionDeclarations`` with ``parametersJsonSchema``);
                        never to the judge.
``EVALS_TOOL_CHOICE``   whether the model must call a tool, when tools are
                        offered: ``auto`` (default: it decides), ``required``
                        (it must call one), ``none`` (it must not) or the
                        name of one of the offered tools (it must call that
                        one; another name is a ConfigError).  Sent
                        explicitly with every request that offers tools, in
                        each provider's spelling: OpenAI ``tool_choice``
                        ``"auto"`` | ``"required"`` | ``"none"`` |
                        ``{"type": "function", "function": {"name"}}``;
                        Anthropic ``tool_choice`` ``{"type": "auto" | "any"
                        | "none" | "tool", "name"}``; Gemini ``toolConfig``
                        ``{"functionCallingConfig": {"mode": "AUTO" | "ANY"
                        | "NONE", "allowedFunctionNames"}}``.  Ollama has no
                        such field: nothing is sent (its models decide).
                        Ignored without tools, and by the judge.
``EVALS_MAX_TOKENS``    output token cap (int).  Default: 1024 for anthropic
                        (the API requires one), not sent for the others.
``EVALS_MAX_TOKENS_FIELD`` ``max_tokens`` | ``max_completion_tokens``: the
                        cap's name for ``openai``.  Default:
                        ``max_completion_tokens`` on api.openai.com and Azure
                        OpenAI hosts (reasoning models take no other),
                        ``max_tokens`` elsewhere; a model that refuses
                        ``max_tokens`` is sent ``max_completion_tokens``.
``EVALS_TEMPERATURE``   float; ``none`` omits the field.  Unset: 0, except
                        for a model that refuses it (OpenAI's reasoning
                        models, newer Claude models: sent again without
                        one) and Gemini 3 (Google advises its default):
                        those get none, said once on stderr.  A temperature
                        you set is sent as set; a refusal is an error.
``EVALS_OLLAMA_NUM_CTX`` Ollama's context size in tokens, default 8192.  A
                        prompt of half of it or more is an error: Ollama
                        cuts a prompt that does not fit, without an error.
``EVALS_TIMEOUT``       seconds, default 60: socket timeout of each HTTP
                        attempt (connect, and each read of the response).
``EVALS_MAX_ATTEMPTS``  HTTP attempts per prompt, default 4 (1 = no retry).
``EVALS_MAX_RETRY_WAIT`` seconds, default 60: total time slept between
                        attempts for one prompt.
``EVALS_RPM``           requests a minute, ``EVALS_TPM`` tokens a minute
``EVALS_TPM``           (prompt estimate + token cap): limits set by hand
                        for a provider that sends no rate-limit headers
                        (Gemini, most local servers); calls wait to stay
                        within them (see "Pacing" below).  Unset: none.
``EVALS_CACHE``         ``1`` keeps each live reply in a cache and answers a
                        call already made from it, with no request; ``0`` or
                        unset: off.  ``python evals.py --cache`` / ``--no-cache``
                        set it.  See "Cache" below.
``EVALS_CACHE_PATH``    the cache, SQLite; default ``.evals/cache.sqlite``
                        (relative to the current directory).
``EVALS_JOURNAL``       set by ``python evals.py`` for a live run: a file
                        (the cache's format) each live answer is also kept
                        in as it comes, so that an interrupted run loses
                        none; ``EVALS_RESUME=1`` (``--resume``) answers
                        from it the calls it holds.  evals deletes it once
                        the run finishes.
``EVALS_BATCH_POLL_S``  seconds between polls of a batch (``ask.batch``);
                        unset: 5, then 1.5 times the last wait, up to 60.
======================  ======================================================

Batches (``python evals.py --batch``): ``ask.batch(requests, resume=None,
on_submitted=None)`` and :meth:`Client.batch` send ``[(custom_id, prompt)]``
through OpenAI's Batch API or Anthropic's Message Batches API (other providers:
ConfigError), each request the body a live call would send, poll until the
batch ends, and return ``{custom_id: Reply or ProviderError}``, each answer
read by the live call's parser (``attempts`` 0).  A default the model refuses
(``EVALS_TEMPERATURE`` above) is not sent again without it, as a live call
would be: that request's answer is its error.

Return value: a :class:`Reply`, a subclass of ``str`` (so code that expects a
string keeps working): the text part of the answer (``""`` when the model only
called tools), with the attributes its docstring lists: ``tool_calls``,
``finish_reason``, ``finish_reason_raw``, ``usage``, ``model``, ``attempts``,
``replayed``, ``cached``, ``reasoning`` and ``sent``.

``reply_dict(reply)`` is the reply as recordings and captures store it: the
string when that is all the provider said (no tool calls, no finish reason), else
``{"text", "finish_reason"}`` and its ``tool_calls`` when it made any.

Finish reasons, normalised (``finish_reason``; the provider's word stays in
``finish_reason_raw``):

==================  =================  ===============  ====================  ==========
normalised          OpenAI-compatible  Anthropic        Gemini                Ollama
==================  =================  ===============  ====================  ==========
``stop``            stop               end_turn,        STOP                  stop
                                       stop_sequence
``length``          length             max_tokens,      MAX_TOKENS            length
                                       model_context_
                                       window_exceeded
``tool_calls``      tool_calls,        tool_use         STOP with             stop with
                    function_call                       functionCall parts    tool_calls
``content_filter``  content_filter     (none)           SAFETY, RECITATION,   (none)
                                                        BLOCKLIST, SPII,
                                                        PROHIBITED_CONTENT,
                                                        IMAGE_SAFETY,
                                                        LANGUAGE
``refusal``         a non-null         refusal          (none)                (none)
                    message.refusal
error (no answer)   (none)             pause_turn       OTHER, MALFORMED_     (none)
                                                        FUNCTION_CALL,
                                                        UNEXPECTED_TOOL_CALL
==================  =================  ===============  ====================  ==========

Any provider's ``stop`` with tool calls in the reply is ``tool_calls``; a word
not in the table is ``None``.  Sources:
https://platform.openai.com/docs/api-reference/chat/object (finish_reason,
message.refusal), https://docs.anthropic.com/en/api/messages and
https://platform.claude.com/docs/en/build-with-claude/handling-stop-reasons
(stop_reason), https://ai.google.dev/api/generate-content#FinishReason ,
https://docs.ollama.com/api/chat (done_reason).

Truncations, content filters and refusals are answers, not errors: the reply
holds the text there is (a truncation: the partial text; a refusal with no
text: the provider's refusal message, if any; a filtered answer: usually
``""``) and evals scores it.  An answer that is empty (the model finished and
said nothing) is an answer too (every text check fails: "the output is
empty").

Errors:

* :class:`ProviderError` (one line, ``"<provider>: <what happened>"``): HTTP
  errors, timeouts, connection failures, non-JSON bodies, a response with no
  answer in it (no choices; no text field and no tool call, unless it ended
  truncated, filtered or refused; a tool call with no name), a prompt Gemini
  blocked (``promptFeedback.blockReason``), the finish reasons of the table's
  error row, an Ollama prompt that may not have fitted
  ``EVALS_OLLAMA_NUM_CTX``.  An error text is never returned as if it were
  model output.
* ``TypeError``: a prompt that is neither a str nor a conversation.
* :class:`ConfigError` (a ``ValueError``): no provider configured (evals.py
  replays recordings itself then), unknown provider, missing key,
  unparseable number in an ``EVALS_*`` variable, an ``EVALS_TOOLS`` file that
  is not a list of tools, an ``EVALS_TOOL_CHOICE`` that is none of the choices
  nor an offered tool's name.

Retry policy (per prompt): HTTP 408, 409, 429, 500, 502, 503, 504 and 529,
read timeouts, connection resets and dropped connections are retried, up to
``EVALS_MAX_ATTEMPTS`` attempts.  The wait before a retry is the server's
``Retry-After`` (seconds or HTTP-date; also ``retry-after-ms`` and Gemini's
``RetryInfo.retryDelay``) when given and above 0, otherwise exponential
backoff with full jitter: ``uniform(0, min(20, 1 * 2**(attempt-1)))`` seconds.
Total sleeping is capped by ``EVALS_MAX_RETRY_WAIT``; a backoff is cut to what
remains (once it is all spent, no further attempt is made, whatever
``EVALS_MAX_ATTEMPTS`` allows), and a ``Retry-After`` longer than what remains
fails at once (waiting less than the server asked would only earn another
429).  Not retried: other 4xx (bad key, bad model, bad request; the provider's
own error message is surfaced), 429s that mean "out of quota / spend limit" or
a used-up daily quota (retrying cannot help), connection refused and DNS
failures (almost always a wrong URL or a server that is not running), and
anything wrong with a 200 response.  A server's ``x-should-retry: true`` or
``false`` overrides the status, as the official SDKs let it.  The waits are
slept in the calling thread, as any caller of an HTTP API does (under
``python evals.py -j N`` the other workers go on meanwhile).

Pacing: OpenAI (and OpenAI-compatible servers that copy its
``x-ratelimit-*`` headers) and Anthropic (``anthropic-ratelimit-*``) say on
every answer how much of each rate limit is left and when it refills.  The
client reads them and, before each request, waits until the request fits
what is left, by the provider's own admission rule: 1 request, and its
prompt (estimated at 4 characters a token) plus its token cap in tokens
(Anthropic: the prompt in input tokens, the cap in output tokens).  All the
calls of the process to one endpoint (provider, URL, model) share what the
answers report, so ``-j 16`` stays within the limit together.  Waiting is
not an attempt: it spends neither ``EVALS_MAX_ATTEMPTS`` nor
``EVALS_MAX_RETRY_WAIT``; a wait of a second or more is said on stderr (at
most every 10 s): ``my_client: waiting for openai's rate limit (tokens: 0
left of 4500) until about 14:02:31; waiting is not a retry``.  With no
such headers and no ``EVALS_RPM`` / ``EVALS_TPM`` nothing waits.  A 429
that still comes is retried as above.

Connections: each thread keeps its HTTP connection to a provider open between
calls (keep-alive), so a run pays the TCP and TLS handshakes once per thread;
one the server closed while idle is replaced before the next request.  Through
a proxy from the environment (``HTTPS_PROXY``, ``NO_PROXY``) each call opens
its own connection.  ``close_connections()`` closes the calling thread's.

Thread safety: clients keep no mutable state per call.  ``ask`` may be called
from many threads.

Cache (``EVALS_CACHE=1``, or ``python evals.py --cache``): each answer of a
live client is kept in ``EVALS_CACHE_PATH``, keyed by a sha256 of the
provider, the request URL (without a user, password or key-like query
parameter), the JSON body as configured (model, messages and system prompt,
temperature, token cap, tools, ``num_ctx``) and the repeat index of the call
(the ``attempt`` keyword evals passes, default 0): ``--repeat 3`` keeps three
replies per case.  A call whose key is there returns that reply, with its
usage (so a run's cost is reported as it was), ``cached`` and ``replayed``
True and ``attempts`` 0, and makes no request and needs no key.  Errors are
never kept; every answer is, an empty one included.  SQLite in WAL mode with
a 30 s busy timeout: runs at once share it.  A cache that cannot be read or
written is said once on stderr, and the model is called.  The judge's client
does not use it (evals keeps judge verdicts in ``.evals/judge_cache.jsonl``).
``python my_client.py cache`` prints how many replies it holds and where;
``python my_client.py cache --clear`` empties it.

Judge (``python evals.py --judge my_client:judge``): ``judge(prompt) -> Reply``
answers the prompts of ``judge`` checks with the same providers, at
temperature 0 (with the same exceptions) and without ``EVALS_SYSTEM_PROMPT``:

=========================== =================================================
``EVALS_JUDGE_PROVIDER``    provider of the judge; unset: ``EVALS_PROVIDER``;
                            neither (or ``replay``): no judge provider;
                            evals.py replays recorded replies itself
                            (``EVALS_JUDGE_RECORDINGS``, default
                            ``judge_recordings.jsonl``: ``{"key": sha256
                            of the prompt, "reply": str}`` a line).
``EVALS_JUDGE_MODEL``       judge model; unset: ``EVALS_MODEL`` when the judge
                            uses the app's provider, else that provider's
                            default.  ``EVALS_JUDGE_BASE_URL`` likewise.
``EVALS_JUDGE_RECORD``      file to append every live judge reply to, in the
                            replay format (record once, replay in CI).
``EVALS_JUDGE_TEMPERATURE`` as ``EVALS_TEMPERATURE``, for the judge.
=========================== =================================================

Keys, timeouts and retries are the ``EVALS_*`` / key variables above.  The
judge's prompt holds the case's input and the output it grades: with a live
judge provider both are sent to that provider.

Capture (in your running app): ``capture`` wraps your own model function and
appends each call to ``.evals/captures.jsonl``, so that bad answers can be
reviewed into cases::

    @my_client.capture(tags=["support"], redact=[r"\\b\\d{16}\\b"])
    def answer(question): ...

``python evals.py review`` then turns them into cases.

evals 0.2.0, MIT licence (see LICENSE). Python 3.9 or newer, standard library only.
"""

import atexit
import collections.abc
import email.utils
import functools
import hashlib
import http.client
import itertools
import json
import os
import random
import re
import select
import socket
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Callable, Dict, List, Mapping, NamedTuple, Optional, Tuple

__all__ = [
    "Reply",
    "reply_dict",
    "ProviderError",
    "ConfigError",
    "ask",
    "make_client",
    "Client",
    "PROVIDERS",
    "DEFAULT_MODELS",
    "DEFAULT_BASE_URLS",
    "judge",
    "make_judge",
    "prompt_key",
    "capture",
    "close_connections",
]

PROVIDERS = ("openai", "anthropic", "gemini", "ollama")
_REPLAY_NAMES = ("", "replay")  # provider unset, empty or "replay": evals.py replays, not us

DEFAULT_MODELS = {
    "openai": "gpt-4o-mini",
    "anthropic": "claude-haiku-4-5",
    "gemini": "gemini-2.5-flash",
    "ollama": "llama3.2",
}

DEFAULT_BASE_URLS = {
    "openai": "https://api.openai.com/v1",
    "anthropic": "https://api.anthropic.com/v1",
    "gemini": "https://generativelanguage.googleapis.com/v1beta",
    "ollama": "http://localhost:11434",
}

# Environment variables holding the key, in order of preference.
KEY_VARS = {
    "openai": ("OPENAI_API_KEY",),
    "anthropic": ("ANTHROPIC_API_KEY",),
    "gemini": ("GEMINI_API_KEY", "GOOGLE_API_KEY"),
    "ollama": (),
}

ANTHROPIC_VERSION = "2023-06-01"
ANTHROPIC_DEFAULT_MAX_TOKENS = 1024
# Eval runs send temperature 0 for reproducible answers, except to a model that refuses it or
# whose provider advises against it (see _refusal, _for_model): it gets none, its default.
DEFAULT_TEMPERATURE = 0.0
# Ollama's context size when EVALS_OLLAMA_NUM_CTX is unset.  Ollama's own default depends on
# the machine (4k below 24 GiB of VRAM, https://docs.ollama.com/context-length) and it cuts a
# longer prompt without an error, so the harness sets one that does not vary with the machine.
OLLAMA_DEFAULT_NUM_CTX = 8192
_TOKEN_FIELDS = ("max_tokens", "max_completion_tokens")  # EVALS_MAX_TOKENS_FIELD's values

# The statuses the official SDKs retry (408, 409 "lock timeouts", 429, 5xx: ``_should_retry`` in
# https://github.com/openai/openai-python/blob/main/src/openai/_base_client.py and
# https://github.com/anthropics/anthropic-sdk-python/blob/main/src/anthropic/_base_client.py),
# 529 being Anthropic's "overloaded".
RETRY_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504, 529})
# Error codes that arrive with a 429 but mean "no money / no quota left":
# waiting does not help, so they fail fast.
NO_RETRY_ERROR_CODES = frozenset(
    {"insufficient_quota", "billing_hard_limit_reached", "enforced_spend_limit_reached"}
)
BACKOFF_BASE = 1.0  # seconds
BACKOFF_CAP = 20.0  # seconds
ERROR_TEXT_LIMIT = 300  # characters of a provider error message kept
MAX_RESPONSE_BYTES = 32 * 1024 * 1024  # a longer body is not an answer; reading on would only
# fill the memory (a server streaming without end)

# Injectable for tests: the sleep function and the random source (returns a
# float in [0, 1)).  Clients also accept ``sleep=`` / ``rand=`` overrides.
sleep = time.sleep
rand = random.random


# --------------------------------------------------------------------------
# Result and error types
# --------------------------------------------------------------------------


class Reply(str):
    """The model's answer: a ``str`` with metadata attributes.

    Attributes:
        usage (dict or None): ``{"input_tokens": int|None, "output_tokens": int|None}``, plus
            Anthropic's ``cache_creation_input_tokens`` and ``cache_read_input_tokens`` when
            it reports them (its ``input_tokens`` leaves those out); None when the provider
            reported no usage, and for a replay.
        model (str): the model that answered, as the provider reports it (else the model
            asked; ``"replay"`` for a recorded output).
        finish_reason (str or None): why the answer ended, normalised to ``stop``, ``length``,
            ``tool_calls``, ``content_filter`` or ``refusal`` (the module docstring's table);
            None when the provider said nothing this client knows.
        finish_reason_raw (str or None): the provider's own stop reason, verbatim.
        tool_calls (list): the tools the model asked to call, in its order:
            ``{"name": str, "arguments": dict}``; ``[]`` when none.  Arguments sent as a JSON
            string (OpenAI) are parsed, an empty one is ``{}``, and one that is not a JSON
            object stays the raw string (that is the model's answer, which evals' checks
            report).  The string is then the text part, ``""`` when the model only called
            tools.
        attempts (int): HTTP attempts made (0 for a replayed or cached answer).
        replayed (bool): a recorded answer, which took no model time (evals leaves it out
            of latency).
        cached (bool): the answer came from the cache of live calls (EVALS_CACHE), not from
            the model; ``replayed`` is True too.
        reasoning (str or None): the model's thinking, taken out of the answer: a leading
            ``<think>...</think>`` block of the text, or the provider's own field for it
            (``reasoning`` / ``reasoning_content``, Anthropic ``thinking`` blocks, Gemini
            thought parts, Ollama ``message.thinking``); None when there was none.  The
            string itself is the answer without it, which is what checks score.
        sent (dict or None): what was sent that decides the answer, named as the provider
            names it: ``temperature`` (None: none was sent, the provider's default applies),
            the token cap when one was sent (``max_tokens``, ``max_completion_tokens``,
            ``maxOutputTokens`` or ``num_predict``), Ollama's ``num_ctx`` and, when tools
            were offered (EVALS_TOOLS), ``tools``: their names, and ``tool_choice``: the
            value sent for EVALS_TOOL_CHOICE, in the provider's spelling (Gemini's
            ``toolConfig``; none for Ollama, which has no such field); e.g.
            ``{"temperature": None, "max_completion_tokens": 1024}``.  None for a replay.
    """

    def __new__(
        cls,
        text: str,
        usage: Optional[Dict[str, Optional[int]]] = None,
        model: str = "",
        finish_reason: Optional[str] = None,
        attempts: int = 0,
        replayed: bool = False,
        reasoning: Optional[str] = None,
        sent: Optional[Dict[str, Any]] = None,
        tool_calls: Optional[List[Dict[str, Any]]] = None,
        finish_reason_raw: Optional[str] = None,
        cached: bool = False,
    ) -> "Reply":
        obj = super().__new__(cls, text)
        obj.replayed = replayed
        obj.cached = cached
        obj.usage = usage
        obj.model = model
        obj.finish_reason = finish_reason
        obj.finish_reason_raw = finish_reason_raw
        obj.tool_calls = list(tool_calls or [])
        obj.attempts = attempts
        obj.reasoning = reasoning
        obj.sent = sent
        return obj


def reply_dict(reply: Any) -> Any:
    """A reply as recordings and captures store it: the str itself when that is all the
    provider reported, else the whole reply ``{"text": str, "finish_reason": str|None}`` with
    ``"tool_calls": [{"name", "arguments"}]`` when it made any (a finish reason, ``stop``
    included, is kept: a check of it on a replay must see what the live call saw)."""
    calls = getattr(reply, "tool_calls", None) or []
    finish = getattr(reply, "finish_reason", None)
    if not calls and finish is None:
        return str(reply)
    return {
        "text": str(reply),
        "finish_reason": finish,
        **(
            {
                "tool_calls": [
                    {"name": call["name"], "arguments": call["arguments"]} for call in calls
                ]
            }
            if calls
            else {}
        ),
    }


class ProviderError(Exception):
    """A model call failed; the message is one line: ``"<provider>: <what happened>"``.

    Attributes:
        provider (str): provider name (``openai``, ``anthropic``...).
        status (int or None): last HTTP status received, if any.
        attempts (int): HTTP attempts made before giving up.
    """

    def __init__(
        self, provider: str, message: str, status: Optional[int] = None, attempts: int = 0
    ):
        self.provider = provider
        self.status = status
        self.attempts = attempts
        self.detail = _one_line(message)
        super().__init__("%s: %s" % (provider, self.detail))


class ConfigError(ValueError):
    """Bad configuration: unknown provider, missing key, unparseable EVALS_* number."""


# Anything shaped like a key: OpenAI/Anthropic "sk-...", Google "AIza...", and any long run of
# hex digits (Azure's 32) or of letters mixed with digits, which is how keys and tokens look.
_KEY_PATTERNS = re.compile(
    r"(sk-[A-Za-z0-9_\-]{8,}|AIza[0-9A-Za-z_\-]{20,}|\b[0-9a-fA-F]{32,}\b|"
    r"\b(?=[A-Za-z0-9_\-]*\d)(?=[A-Za-z0-9_\-]*[A-Za-z])[A-Za-z0-9_\-]{32,}\b)"
)


# Query parameters that may hold a credential: never shown, nor part of a cache key.
_SECRET_PARAMS = re.compile(r"key|token|secret|sig|auth|password", re.I)


def _without_credentials(url: str) -> str:
    """``url`` without a user, a password or a query parameter that may hold a key."""
    parts = urllib.parse.urlsplit(url)
    query = [
        (name, value)
        for name, value in urllib.parse.parse_qsl(parts.query, True)
        if not _SECRET_PARAMS.search(name)
    ]
    return parts._replace(
        netloc=parts.netloc.rpartition("@")[2], query=urllib.parse.urlencode(query)
    ).geturl()


def _scrub(text: str, secret: Optional[str]) -> str:
    """Remove the API key, and anything shaped like a key, from text; then cut it to its length
    limit (cutting first could leave part of a key that no longer matches)."""
    if secret:
        text = text.replace(secret, "[redacted]")
    return _truncate(_KEY_PATTERNS.sub("[redacted]", text))


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _truncate(text: str, limit: int = ERROR_TEXT_LIMIT) -> str:
    text = _one_line(text)
    return text if len(text) <= limit else text[: limit - 3] + "..."


# --------------------------------------------------------------------------
# Settings
# --------------------------------------------------------------------------


class Settings(NamedTuple):
    """Resolved configuration of one client (no key: keys are read per call)."""

    provider: str
    model: str
    base_url: str
    timeout: float
    max_attempts: int
    max_retry_wait: float
    env: Mapping[str, str]
    api_key: Optional[str] = None
    system_prompt: Optional[str] = None
    tools: Optional[List[Dict[str, Any]]] = None  # see _load_tools
    tool_choice: Optional[str] = None  # with tools: see _tool_choice
    max_tokens: Optional[int] = None
    temperature: Optional[float] = None
    # True when the temperature is ours (DEFAULT_TEMPERATURE), not the user's: a model that
    # refuses it is then called without one (see _refusal).
    default_temperature: bool = False
    token_field: Optional[str] = None  # None: by the host
    num_ctx: int = OLLAMA_DEFAULT_NUM_CTX
    rpm: Optional[float] = None  # EVALS_RPM / EVALS_TPM: limits set by hand (see _Pacer)
    tpm: Optional[float] = None

    def __repr__(self) -> str:  # tracebacks and debug logs print it: no key, no environment
        return "Settings(provider=%r, model=%r, base_url=%r)" % (
            self.provider,
            self.model,
            _without_credentials(self.base_url),
        )


def _parse_number(
    name: str, raw: Any, kind: type, minimum: float, allow_none: bool = False
) -> Any:
    """Parse an EVALS_* number; raise ConfigError naming the variable."""
    if allow_none and (raw is None or (isinstance(raw, str) and raw.strip().lower() == "none")):
        return None
    try:
        value = kind(raw.strip()) if isinstance(raw, str) else kind(raw)
    except (TypeError, ValueError):
        what = "an integer" if kind is int else "a number"
        raise ConfigError("%s must be %s, got %r" % (name, what, raw)) from None
    if value != value or value < minimum or value == float("inf"):  # NaN, inf, too small
        raise ConfigError("%s must be a finite number >= %s, got %r" % (name, minimum, raw))
    return value


def _resolve_settings(
    provider: str,
    env: Mapping[str, str],
    overrides: Dict[str, Any],
    temperature_var: str = "EVALS_TEMPERATURE",
) -> Settings:
    """Settings from ``overrides``, else the environment, else the defaults; ``temperature_var``
    names the variable of the temperature (the judge has its own)."""

    def pick(key: str, var: str) -> Any:
        if key in overrides:
            return overrides[key]
        raw = env.get(var)
        return raw if raw not in (None, "") else None

    def number(key: str, var: str, default: Any, kind: type, minimum: float) -> Any:
        raw = pick(key, var)
        return _parse_number(var, default if raw is None else raw, kind, minimum)

    max_tokens = pick("max_tokens", "EVALS_MAX_TOKENS")
    if max_tokens is not None:
        max_tokens = _parse_number("EVALS_MAX_TOKENS", max_tokens, int, 1)
    elif provider == "anthropic":
        max_tokens = ANTHROPIC_DEFAULT_MAX_TOKENS
    temperature = pick("temperature", temperature_var)
    default_temperature = "temperature" not in overrides and temperature is None
    tools = _load_tools(pick("tools", "EVALS_TOOLS"))
    token_field = pick("max_tokens_field", "EVALS_MAX_TOKENS_FIELD")
    if token_field not in (None,) + _TOKEN_FIELDS:
        raise ConfigError(
            "EVALS_MAX_TOKENS_FIELD must be %s, got %r" % (" or ".join(_TOKEN_FIELDS), token_field)
        )
    return Settings(
        provider=provider,
        model=pick("model", "EVALS_MODEL") or DEFAULT_MODELS[provider],
        base_url=(pick("base_url", "EVALS_BASE_URL") or DEFAULT_BASE_URLS[provider]).rstrip("/"),
        api_key=overrides.get("api_key"),
        system_prompt=pick("system_prompt", "EVALS_SYSTEM_PROMPT"),
        tools=tools,
        tool_choice=_tool_choice(pick("tool_choice", "EVALS_TOOL_CHOICE"), tools),
        max_tokens=max_tokens,
        temperature=_parse_number(
            temperature_var,
            DEFAULT_TEMPERATURE if default_temperature else temperature,
            float,
            0.0,
            allow_none=True,
        ),
        default_temperature=default_temperature,
        token_field=token_field,
        num_ctx=number("num_ctx", "EVALS_OLLAMA_NUM_CTX", OLLAMA_DEFAULT_NUM_CTX, int, 1),
        timeout=number("timeout", "EVALS_TIMEOUT", 60, float, 0.001),
        max_attempts=number("max_attempts", "EVALS_MAX_ATTEMPTS", 4, int, 1),
        max_retry_wait=number("max_retry_wait", "EVALS_MAX_RETRY_WAIT", 60, float, 0.0),
        rpm=_parse_number("EVALS_RPM", pick("rpm", "EVALS_RPM"), float, 1, allow_none=True),
        tpm=_parse_number("EVALS_TPM", pick("tpm", "EVALS_TPM"), float, 1, allow_none=True),
        env=env,
    )


_TOOL_FIELDS = ("name", "description", "parameters")


def _tool_problem(tool: Any, names: List[str]) -> Optional[str]:
    """What is wrong with one tool of an EVALS_TOOLS list (None: nothing); ``names`` are the
    names of the tools before it."""
    if not isinstance(tool, dict):
        return "is %s, not an object" % type(tool).__name__
    unknown = sorted(set(tool) - set(_TOOL_FIELDS))
    if unknown:
        return "has unknown field(s) %s (a tool has %s)" % (
            ", ".join(map(repr, unknown)),
            ", ".join(_TOOL_FIELDS),
        )
    if not isinstance(tool.get("name"), str) or not tool["name"].strip():
        return "has no 'name' (a non-empty string)"
    if tool["name"] in names:
        return "repeats the name %r" % tool["name"]
    if not isinstance(tool.get("description", ""), str):
        return "%r: 'description' must be a string" % tool["name"]
    if not isinstance(tool.get("parameters", {}), dict):
        return "%r: 'parameters' must be a JSON Schema object" % tool["name"]
    return None


def _load_tools(source: Any) -> Optional[List[Dict[str, Any]]]:
    """The tools offered to the model: ``source`` is EVALS_TOOLS (the path of a JSON file) or
    a ``tools=`` list; None or an empty list: none.  Each tool is ``{"name", "description",
    "parameters"}`` (OpenAI's function shape without its wrapper; ``parameters`` a JSON
    Schema object).  ConfigError names the file and the problem."""
    where = "tools="
    if isinstance(source, str):
        where = "EVALS_TOOLS file %s" % source
        try:
            with open(source, encoding="utf-8-sig") as handle:
                source = json.load(handle)
        except OSError as exc:
            raise ConfigError("%s: cannot be read (%s)" % (where, exc.strerror or exc)) from None
        except (ValueError, RecursionError) as exc:  # RecursionError: nested too deeply
            raise ConfigError("%s: not valid JSON (%s)" % (where, exc)) from None
    if source is None:
        return None
    if not isinstance(source, list):
        raise ConfigError(
            '%s: expected a JSON list of {"name", "description", "parameters"}, '
            "got %s" % (where, type(source).__name__)
        )
    names = []  # type: List[str]
    for number, tool in enumerate(source, 1):
        problem = _tool_problem(tool, names)
        if problem:
            raise ConfigError("%s: tool %d %s" % (where, number, problem))
        names.append(tool["name"])
    return [dict(tool) for tool in source] or None


TOOL_CHOICES = ("auto", "required", "none")


def _tool_choice(raw: Any, tools: Optional[List[Dict[str, Any]]]) -> Optional[str]:
    """EVALS_TOOL_CHOICE: ``auto`` (the default), ``required``, ``none`` or the name of one of
    ``tools``; None when no tools are offered (nothing is sent then).  ConfigError otherwise."""
    if not tools:
        return None
    if raw is None:
        return "auto"
    names = [tool["name"] for tool in tools]
    if raw in TOOL_CHOICES or raw in names:
        return raw
    raise ConfigError(
        "EVALS_TOOL_CHOICE must be %s or the name of an offered tool (%s), got %r"
        % (", ".join(TOOL_CHOICES), ", ".join(names), raw)
    )


def _checked_key(provider: str, where: str, value: str) -> str:
    # A key with a line break or other control character would make http.client raise an
    # error quoting the whole header, key included: refuse it here, without echoing it.
    if any(ord(char) < 0x20 or ord(char) == 0x7F or char.isspace() for char in value):
        raise ConfigError(
            "%s: the key in %s contains white space or a control character "
            "(a pasted line break?); it is not sent" % (provider, where)
        )
    return value


def _read_key(settings: Settings) -> Optional[str]:
    """Return the API key for this call (override, else environment), or raise ConfigError."""
    if settings.api_key:
        return _checked_key(settings.provider, "api_key", settings.api_key.strip())
    names = KEY_VARS[settings.provider]
    for name in names:
        value = settings.env.get(name, "").strip()
        if value:
            return _checked_key(settings.provider, name, value)
    if not names:
        return None
    raise ConfigError(
        "%s: no API key: set %s (or choose another EVALS_PROVIDER; unset it to replay recordings offline)"
        % (settings.provider, " or ".join(names))
    )


# --------------------------------------------------------------------------
# HTTP with retries
# --------------------------------------------------------------------------

_LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1")


class _Failed(Exception):
    """An attempt failed (network, HTTP status, unusable 2xx body); ``what`` may hold the key:
    :func:`_retrying` scrubs it where, in one place, a failure becomes a ProviderError."""

    def __init__(
        self,
        what: str,
        retryable: bool = False,
        status: Optional[int] = None,
        retry_after: Optional[float] = None,
    ) -> None:
        super().__init__(what)
        self.what = what
        self.retryable = retryable
        self.status = status  # HTTP status; None below HTTP and for a rejected 2xx answer
        self.retry_after = retry_after  # seconds the server asked to wait, if it did


# Each thread keeps its connections open between calls (HTTP keep-alive): a suite of hundreds
# of cases then pays the TCP and TLS handshakes once per thread, not once per case.
_KEPT = threading.local()


class _Pool(dict):
    """One thread's kept-alive connections by (scheme, host, port); closed when the thread
    ends (its thread-local data is dropped) or, for the main thread, at exit."""

    def close(self) -> None:
        for connection in self.values():
            connection.close()
        self.clear()

    def __del__(self) -> None:
        self.close()


def close_connections() -> None:
    """Close the calling thread's kept-alive connections (they reopen on the next call)."""
    pool = getattr(_KEPT, "pool", None)
    if pool is not None:
        pool.close()


atexit.register(close_connections)


def _dropped(sock: Any) -> bool:
    """True when an idle socket is readable (closed by the server) or cannot be polled."""
    try:
        if hasattr(select, "poll"):  # poll: no FD_SETSIZE limit on descriptor numbers
            poller = select.poll()
            poller.register(sock, select.POLLIN)
            return bool(poller.poll(0))
        return bool(select.select([sock], [], [], 0)[0])
    except (OSError, ValueError):
        return True


def _read_capped(response: Any) -> bytes:
    body = response.read(MAX_RESPONSE_BYTES + 1)
    if len(body) > MAX_RESPONSE_BYTES:
        response.close()
        raise _Failed(
            "response larger than %d MiB; not read further" % (MAX_RESPONSE_BYTES // (1024 * 1024))
        )
    return body


def _uses_proxy(scheme: str, host: str) -> bool:
    if host in _LOOPBACK_HOSTS:  # local servers (ollama, vLLM, tests): never through a proxy
        return False
    return bool(urllib.request.getproxies().get(scheme)) and not urllib.request.proxy_bypass(host)


def _send_once(
    url: str, headers: Dict[str, str], data: Optional[bytes], timeout: float, method: str = "POST"
) -> Tuple[int, Mapping[str, str], bytes]:
    """Send once (a POST, or ``method``); return (status, headers, body) for any HTTP status,
    raise _Failed otherwise.

    Direct connections are kept alive per thread (http.client); through an HTTP(S) proxy from
    the environment (HTTPS_PROXY, NO_PROXY...) urllib opens one connection per call.
    """
    parts = urllib.parse.urlsplit(url)
    if _uses_proxy(parts.scheme, parts.hostname or ""):
        request = urllib.request.Request(url, data=data, headers=headers, method=method)
        return _urllib_send(urllib.request.urlopen, request, timeout, _read_capped)
    pool = getattr(_KEPT, "pool", None)
    if pool is None:
        pool = _KEPT.pool = _Pool()
    key = (parts.scheme, parts.hostname or "", parts.port)
    connection = pool.get(key)
    if connection is not None and connection.sock is not None and _dropped(connection.sock):
        # A server may close an idle kept-alive connection; a readable socket means it did
        # (or sent something unasked), so start afresh rather than fail the next request.
        connection.close()
    if connection is None:
        https = parts.scheme == "https"
        kind = http.client.HTTPSConnection if https else http.client.HTTPConnection
        connection = pool[key] = kind(key[1], parts.port, timeout=timeout)
    connection.timeout = timeout
    if connection.sock is not None:
        connection.sock.settimeout(timeout)
    target = parts.path + ("?" + parts.query if parts.query else "")
    try:
        connection.request(method, target or "/", body=data, headers=headers)
        response = connection.getresponse()
        body = _read_capped(response)
    except _Failed:
        connection.close()  # the rest of the body is still on the wire
        raise
    except (OSError, http.client.HTTPException, ValueError) as exc:
        connection.close()  # ValueError: a header http.client refuses (its text is scrubbed)
        raise _classify_network_error(exc, timeout) from None
    if response.will_close:
        connection.close()
    return response.status, response.headers, body


def _urllib_send(
    open_: Callable[..., Any], request: Any, timeout: float, read: Callable[[Any], Any]
) -> Tuple[int, Mapping[str, str], Any]:
    """(status, headers, read(response)) of urllib's answer to ``request``; for an HTTP error
    status, its body (bytes) in place of what ``read`` gives.  Raises _Failed below HTTP."""
    try:
        with open_(request, timeout=timeout) as response:
            return response.status, response.headers, read(response)
    except urllib.error.HTTPError as exc:
        try:
            body = exc.read(MAX_RESPONSE_BYTES)
        except (OSError, http.client.HTTPException):
            body = b""
        finally:
            exc.close()
        return exc.code, exc.headers, body
    except urllib.error.URLError as exc:
        raise _classify_network_error(exc.reason, timeout) from None
    except (OSError, http.client.HTTPException, ValueError) as exc:
        raise _classify_network_error(exc, timeout) from None


def _classify_network_error(reason: Any, timeout: float) -> _Failed:
    if isinstance(reason, (socket.timeout, TimeoutError)):
        return _Failed("no response within %gs (EVALS_TIMEOUT)" % timeout, True)
    if isinstance(reason, ConnectionRefusedError):
        return _Failed("connection refused (is the server running at EVALS_BASE_URL?)", False)
    if isinstance(reason, socket.gaierror):
        return _Failed("cannot resolve host (%s)" % reason, False)
    if isinstance(reason, http.client.RemoteDisconnected):
        return _Failed("server closed the connection without answering", True)
    if isinstance(reason, (ConnectionError, http.client.HTTPException)):
        return _Failed("connection reset (%s)" % type(reason).__name__, True)
    # TLS failures (certificate, handshake) and the rest: not retried.
    return _Failed("network error (%s: %s)" % (type(reason).__name__, reason), False)


def parse_retry_after(value: Optional[str], now: Optional[float] = None) -> Optional[float]:
    """Parse a ``Retry-After`` header value into seconds to wait.

    Args:
        value: delta-seconds (``"2"``, ``"1.5"``) or an HTTP-date
            (``"Wed, 21 Oct 2015 07:28:00 GMT"``), per RFC 9110 section 10.2.3
            (https://www.rfc-editor.org/rfc/rfc9110#field.retry-after).
        now: current Unix time in seconds (default ``time.time()``).

    Returns:
        float seconds (>= 0), or None if the header is absent or unparseable.
    """
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when is None:
            return None
        seconds = when.timestamp() - (time.time() if now is None else now)
    if seconds != seconds:  # NaN
        return None
    return max(0.0, seconds)


def _retry_after(headers: Mapping[str, str], payload: Any) -> Optional[float]:
    """Server-requested wait in seconds: retry-after-ms, Retry-After, or Gemini RetryInfo."""
    millis = headers.get("retry-after-ms")
    if millis:
        try:
            return max(0.0, float(millis) / 1000.0)
        except ValueError:
            pass
    seconds = parse_retry_after(headers.get("retry-after"))
    if seconds is not None:
        return seconds
    error = _error_object(payload)
    details = error.get("details")
    for detail in details if isinstance(details, list) else []:
        if isinstance(detail, dict) and str(detail.get("@type", "")).endswith("RetryInfo"):
            delay = str(detail.get("retryDelay", ""))
            if delay.endswith("s"):
                try:
                    return max(0.0, float(delay[:-1]))
                except ValueError:
                    pass
    return None


def _error_object(payload: Any) -> Dict[str, Any]:
    """The ``error`` object of an OpenAI / Anthropic / Gemini / Ollama error body."""
    if isinstance(payload, list) and payload:  # some Google endpoints wrap it in a list
        payload = payload[0]
    if isinstance(payload, dict):
        error = payload.get("error")
        if isinstance(error, dict):
            return error
        if isinstance(error, str):
            return {"message": error}
    return {}


def _daily_quotas(details: Any) -> List[str]:
    """The per-day quotas a Gemini 429 names as used up (``google.rpc.QuotaFailure`` violations
    whose quotaId has ``PerDay``).  Requests per day reset at midnight Pacific time
    (https://ai.google.dev/gemini-api/docs/rate-limits): waiting seconds cannot help."""
    quotas = []
    for detail in details if isinstance(details, list) else []:
        if isinstance(detail, dict) and str(detail.get("@type", "")).endswith("QuotaFailure"):
            for violation in detail.get("violations") or []:
                quota = violation.get("quotaId") if isinstance(violation, dict) else None
                if isinstance(quota, str) and "PerDay" in quota:
                    quotas.append(quota)
    return quotas


def _error_message(payload: Any, body: bytes) -> Tuple[str, bool]:
    """Return (description of an HTTP error body, whether it means 'no quota left')."""
    error = _error_object(payload)
    if error:
        labels = []
        for field in ("type", "status", "code"):
            value = error.get(field)
            if isinstance(value, str) and value and value not in labels:
                labels.append(value)
        details = error.get("details")
        if isinstance(details, dict) and isinstance(details.get("error_code"), str):
            labels.append(details["error_code"])
        daily = _daily_quotas(details)
        message = error.get("message") or json.dumps(error)
        text = "%s%s" % ("(%s) " % ", ".join(labels + daily) if labels or daily else "", message)
        no_quota = bool(daily) or any(label in NO_RETRY_ERROR_CODES for label in labels)
        return text, no_quota
    if payload is not None:
        return json.dumps(payload), False
    snippet = body.decode("utf-8", "replace").strip()
    return ("non-JSON body: %s" % snippet if snippet else "empty body"), False


def _attempt(
    url: str,
    headers: Dict[str, str],
    data: Optional[bytes],
    timeout: float,
    method: str = "POST",
    seen: Optional[Callable[[Mapping[str, str]], Any]] = None,
) -> Any:
    """Send once (a POST, or ``method``) and return the decoded JSON of a 2xx answer; raise
    _Failed otherwise.  ``seen(headers)`` gets the headers of any HTTP answer (the pacer's)."""
    status, resp_headers, body = _send_once(url, headers, data, timeout, method)
    if seen is not None:
        seen(resp_headers)
    if not 200 <= status < 300:
        raise _http_failure(status, resp_headers, body)
    try:
        parsed = json.loads(body.decode("utf-8")) if body else None
    except (UnicodeDecodeError, ValueError):
        text = body.decode("utf-8", "replace")
        raise _Failed("HTTP %d with a non-JSON body: %s" % (status, text), status=status) from None
    if parsed is None:
        raise _Failed("HTTP %d with an empty body" % status, status=status)
    return parsed


def _http_failure(status: int, headers: Mapping[str, str], body: bytes) -> _Failed:
    """The _Failed of an HTTP error answer with this body (JSON or not)."""
    try:
        payload = json.loads(body.decode("utf-8")) if body else None
    except (UnicodeDecodeError, ValueError):
        payload = None
    detail, no_quota = _error_message(payload, body)
    # The server's x-should-retry decides when it says true or false, as the official SDKs
    # obey it (see RETRY_STATUSES); otherwise the status does, but for a 429 of no quota left.
    told = headers.get("x-should-retry")
    retryable = (
        told == "true" if told in ("true", "false") else status in RETRY_STATUSES and not no_quota
    )
    wait = _retry_after(headers, payload) if retryable else None
    return _Failed("HTTP %d %s" % (status, detail), retryable, status, wait)


def _retry_wait(
    failure: _Failed,
    attempt: int,
    settings: Settings,
    remaining: float,
    rand_fn: Callable[[], float],
) -> Tuple[Optional[float], str]:
    """(seconds to sleep before the next attempt, "") or, when the policy says stop, (None, why).

    ``remaining`` is what is left of EVALS_MAX_RETRY_WAIT.  A Retry-After longer than that fails
    at once: waiting less than the server asked would only earn another 429.
    """
    if not failure.retryable:
        return None, ""
    if attempt >= settings.max_attempts:
        return None, "; gave up after %d attempt%s (EVALS_MAX_ATTEMPTS)" % (
            attempt,
            "s" if attempt > 1 else "",
        )
    # A Retry-After of 0 is no advice: the SDKs follow only 0 < Retry-After <= 60
    # (``_calculate_retry_timeout``, in the files RETRY_STATUSES cites).
    if failure.retry_after:
        if failure.retry_after > remaining:
            return None, (
                "; server asked to retry after %gs, more than the %gs left of the retry budget "
                "(EVALS_MAX_RETRY_WAIT)" % (failure.retry_after, max(remaining, 0.0))
            )
        return failure.retry_after, ""
    if remaining <= 0:
        return None, (
            "; retry budget of %gs used up after %d attempts (EVALS_MAX_RETRY_WAIT)"
            % (settings.max_retry_wait, attempt)
        )
    ceiling = min(BACKOFF_CAP, BACKOFF_BASE * (2 ** (attempt - 1)))  # full jitter below it
    return min(remaining, rand_fn() * ceiling), ""


def _retrying(
    once: Callable[[], Any],
    settings: Settings,
    secret: Optional[str],
    sleep_fn: Optional[Callable[[float], Any]] = None,
    rand_fn: Optional[Callable[[], float]] = None,
) -> Tuple[Any, int]:
    """(once(), attempts), calling ``once`` again after each retryable _Failed as the retry
    policy allows, sleeping between attempts (a server's Retry-After, else a backoff).
    ``sleep_fn``, ``rand_fn``: a client's own (None: the module's, looked up per call so that
    tests can patch them).

    Raises:
        ProviderError: the only place a failed request raises it, so every message is scrubbed
            of ``secret`` and carries the last HTTP status and the attempts made.
    """
    attempt, waited = 0, 0.0
    while True:
        attempt += 1
        try:
            return once(), attempt
        except _Failed as failure:
            delay, why = _retry_wait(
                failure, attempt, settings, settings.max_retry_wait - waited, rand_fn or rand
            )
            if delay is None:
                raise ProviderError(
                    settings.provider,
                    _scrub(failure.what, secret) + why,
                    status=failure.status,
                    attempts=attempt,
                ) from None
        if delay > 0:
            (sleep_fn or sleep)(delay)
        waited += delay


# --------------------------------------------------------------------------
# Pacing: wait for the provider's rate limits instead of running into them
# --------------------------------------------------------------------------

# Providers say on every answer how much of each limit is left and when it refills; a request
# that does not fit is refused (429), and on OpenAI a refused request counts against the limit
# too.  So before each request the client waits until it fits what is left, the provider's own
# admission rule: a request costs 1 of the requests limit and its estimated prompt tokens plus
# its token cap of the tokens limit (Anthropic: the prompt of input tokens, the cap of output
# tokens).  What is left refills continuously (a token bucket, as OpenAI and Anthropic describe
# their limits), at the rate the reset time implies.  Waiting is not an attempt: it spends
# neither EVALS_MAX_ATTEMPTS nor EVALS_MAX_RETRY_WAIT.  With no such headers and no
# EVALS_RPM / EVALS_TPM nothing waits.
#
# OpenAI (and the OpenAI-compatible servers that copy it): x-ratelimit-{limit,remaining,reset}-
# {requests,tokens}, the reset a duration ("6m0s", "20ms"),
# https://platform.openai.com/docs/guides/rate-limits#rate-limits-in-headers .  Anthropic:
# anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-{limit,remaining,reset}, the
# reset an RFC 3339 time, https://docs.anthropic.com/en/api/rate-limits#response-headers .
# Gemini sends none: its limits can be given by hand.

_LIMIT_NAMES = ("requests", "tokens", "input-tokens", "output-tokens")
_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?)(ms|h|m|s)")
_RFC3339 = re.compile(r"(\d{4}-\d\d-\d\d[Tt ]\d\d:\d\d:\d\d)(\.\d+)?([Zz]|[+-]\d\d:?\d\d)?$")
PACE_NOTICE_EVERY = 10.0  # seconds between two "waiting for the limit" lines of one endpoint
PACE_NOTICE_MIN = 1.0  # a wait shorter than this is not said
PACE_SLEEP_MAX = 1.0  # a waiting call looks again at least this often (answers update the state)


def parse_reset(value: Optional[str], now: Optional[float] = None) -> Optional[float]:
    """Seconds until a rate limit refills, from a reset header: a duration (OpenAI's ``"1s"``,
    ``"6m0s"``, ``"20ms"``, or plain seconds) or an RFC 3339 time (Anthropic's
    ``"2025-01-01T00:00:30Z"``; ``now``: Unix time, default ``time.time()``).  None when
    absent or unreadable."""
    value = (value or "").strip()
    if not value:
        return None
    try:
        seconds = float(value)
        return max(0.0, seconds) if seconds == seconds else None
    except ValueError:
        pass
    parts = _DURATION_PART.findall(value)
    if parts and "".join(n + unit for n, unit in parts) == value:
        scale = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
        return sum(float(n) * scale[unit] for n, unit in parts)
    match = _RFC3339.match(value)
    if not match:
        return None
    import datetime

    zone = (match.group(3) or "+00:00").upper().replace("Z", "+00:00")
    try:
        when = datetime.datetime.fromisoformat(
            match.group(1).replace("t", "T").replace(" ", "T")
            + (zone if ":" in zone else zone[:3] + ":" + zone[3:])
        )
    except ValueError:
        return None
    fraction = float(match.group(2) or 0)
    return max(0.0, when.timestamp() + fraction - (time.time() if now is None else now))


def rate_limits(headers: Mapping[str, str]) -> Dict[str, Tuple[float, float, Optional[float]]]:
    """{limit name: (limit, remaining, seconds until refilled or None)} from an answer's
    headers, OpenAI's and Anthropic's names read alike (see _LIMIT_NAMES); {} for none."""
    # One pass over the headers (an HTTPMessage looks each name up by scanning them all).
    headers = {
        name.lower(): value
        for name, value in headers.items()
        if name[:12].lower() in ("x-ratelimit-", "anthropic-ra")
    }
    if not headers:
        return {}
    found = {}
    for name in _LIMIT_NAMES:
        for limit, left, reset in (
            (
                "x-ratelimit-limit-" + name,
                "x-ratelimit-remaining-" + name,
                "x-ratelimit-reset-" + name,
            ),
            tuple(
                "anthropic-ratelimit-%s-%s" % (name, part)
                for part in ("limit", "remaining", "reset")
            ),
        ):
            try:
                values = float(headers.get(limit) or ""), float(headers.get(left) or "")
            except ValueError:
                continue
            if values[0] > 0 and values[1] >= 0:
                found[name] = (values[0], values[1], parse_reset(headers.get(reset)))
    if "input-tokens" in found or "output-tokens" in found:
        # Anthropic's tokens-* repeat the most restrictive of those two: counting the prompt and
        # the cap against it would count each twice.
        found.pop("tokens", None)
    return found


def _prompt_chars(value: Any) -> int:
    """Characters of the strings in a request body (its messages, system prompt, tools)."""
    if isinstance(value, str):
        return len(value)
    if isinstance(value, dict):
        return sum(_prompt_chars(v) for k, v in value.items() if k != "model")
    if isinstance(value, list):
        return sum(_prompt_chars(v) for v in value)
    return 0


def _costs(body: Mapping[str, Any], cap: Optional[int]) -> Dict[str, float]:
    """What a request counts against each limit: 1 request; its prompt, estimated at 4
    characters a token (OpenAI's rule of thumb; the answers' headers correct the estimate),
    plus its token cap."""
    prompt = -(-_prompt_chars(body) // 4)
    return {
        "requests": 1.0,
        "tokens": float(prompt + (cap or 0)),
        "input-tokens": float(prompt),
        "output-tokens": float(cap or 0),
    }


class _Bucket:
    """One limit as the client reckons it: ``level`` left at monotonic time ``at``, refilling
    at ``rate`` a second up to ``limit``."""

    __slots__ = ("limit", "level", "rate", "at")

    def __init__(self, limit: float, level: float, rate: float, at: float) -> None:
        self.limit, self.level, self.rate, self.at = limit, level, rate, at

    def left(self, now: float) -> float:
        return min(self.limit, self.level + self.rate * (now - self.at))


class _Pacer:
    """The limits of one endpoint (provider, URL, model), shared by every call to it in this
    process: :meth:`take` before a request, :meth:`done` with the headers of its answer.

    Between answers the client counts its own requests against what is left; an answer's
    headers correct that.  They are as of the moment the provider admitted the request, which
    the client does not know: requests sent after it may or may not be counted in them, and so
    may those still in flight when it was sent.  So an answer may lower what is left to what it
    reports less all that (a request racing ahead of another is never counted twice as free),
    and raise it only to what it reports less both (the client's own estimates of the prompts
    may be too high: the provider's figures bring it back)."""

    def __init__(
        self,
        name: str,
        rpm: Optional[float] = None,
        tpm: Optional[float] = None,
        clock: Callable[[], float] = time.monotonic,
        sleep_fn: Callable[[float], Any] = time.sleep,
    ) -> None:
        self.name, self.clock, self.sleep = name, clock, sleep_fn
        self.lock = threading.Lock()
        self.told = {}  # type: Dict[str, _Bucket]  # from the provider's headers
        now = clock()
        # Set by hand: never overwritten by headers, so the lower of both applies.
        self.manual = {
            name: _Bucket(limit, limit, limit / 60.0, now)
            for name, limit in (("requests", rpm), ("tokens", tpm))
            if limit
        }
        self.spent = dict.fromkeys(_LIMIT_NAMES, 0.0)  # reserved so far, each limit
        self.flying = dict.fromkeys(_LIMIT_NAMES, 0.0)  # reserved, not yet answered
        self.said = float("-inf")

    def _wait(self, costs: Mapping[str, float], now: float) -> Tuple[float, str]:
        """(seconds until a request of ``costs`` fits every limit, the limit it waits for)."""
        wait, which = 0.0, ""
        for name, bucket in list(self.told.items()) + list(self.manual.items()):
            need = min(costs[name], bucket.limit)  # more than the limit fits once it is full
            short = need - bucket.left(now)
            if short > 1e-6 and short / bucket.rate > wait:  # not a rounding error's wait
                wait, which = short / bucket.rate, name
        return wait, which

    def take(self, costs: Mapping[str, float]) -> Tuple[Dict[str, float], ...]:
        """Wait until a request of ``costs`` fits every known limit, count it against them and
        return the ticket :meth:`done` needs: (its costs, what had been reserved, this one
        included, and what was in flight before it)."""
        while True:
            with self.lock:
                now = self.clock()
                wait, which = self._wait(costs, now)
                if wait <= 0:
                    for name, bucket in list(self.told.items()) + list(self.manual.items()):
                        bucket.level, bucket.at = bucket.left(now) - costs[name], now
                    before = dict(self.flying)
                    for name in self.spent:
                        self.spent[name] += costs[name]
                        self.flying[name] += costs[name]
                    return dict(costs), dict(self.spent), before
                if wait >= PACE_NOTICE_MIN and now - self.said >= PACE_NOTICE_EVERY:
                    self.said = now
                    self._notice(which, wait)
            self.sleep(min(wait, PACE_SLEEP_MAX))

    def _notice(self, which: str, wait: float) -> None:
        """One stderr line: the calls wait for the provider's limit, and until when."""
        told = which in self.told
        bucket = self.told.get(which) or self.manual[which]
        until = time.strftime("%H:%M:%S", time.localtime(time.time() + wait))
        where = (
            "%s left of %g" % (max(0, int(bucket.left(self.clock()))), bucket.limit)
            if told
            else "%s by hand" % ("EVALS_RPM" if which == "requests" else "EVALS_TPM")
        )
        clear = "\r%s\r" % (" " * 60) if getattr(sys.stderr, "isatty", bool)() else ""
        sys.stderr.write(
            "%smy_client: waiting for %s's rate limit (%s: %s) until about %s; "
            "waiting is not a retry\n" % (clear, self.name, which, where, until)
        )
        sys.stderr.flush()

    def done(
        self, ticket: Tuple[Dict[str, float], ...], headers: Optional[Mapping[str, str]] = None
    ) -> None:
        """The request of ``ticket`` (from :meth:`take`) is over; ``headers``: its answer's
        (an HTTP error's too), None when none came."""
        found = rate_limits(headers) if headers is not None else {}
        costs, mark, before = ticket
        with self.lock:
            for name in self.flying:
                self.flying[name] -= costs[name]
            now = self.clock()
            for name, (limit, left, reset) in found.items():
                known = self.told.get(name)
                if reset and limit > left:  # refills to full in `reset` seconds
                    rate = (limit - left) / reset
                else:  # limits are per minute when the answer does not tell
                    rate = known.rate if known else limit / 60.0
                told = min(limit, left) - (self.spent[name] - mark[name])  # less those after it
                safe = told - before[name]  # less those it may have overtaken, too
                level = max(min(known.left(now), told), safe) if known else safe
                self.told[name] = _Bucket(limit, level, rate, now)


_pacers = {}  # type: Dict[Tuple[Any, ...], _Pacer]
_pacers_lock = threading.Lock()


def _pacer_for(settings: Settings) -> _Pacer:
    """The pacer of the settings' endpoint, one per provider, URL, model and hand-set limits:
    every client of the process calling it shares what the answers report."""
    key = (
        settings.provider,
        _without_credentials(settings.base_url),
        settings.model,
        settings.rpm,
        settings.tpm,
    )
    with _pacers_lock:
        pacer = _pacers.get(key)
        if pacer is None:
            pacer = _pacers[key] = _Pacer(settings.provider, settings.rpm, settings.tpm)
        return pacer


# --------------------------------------------------------------------------
# Providers: one request builder and one response parser each
# --------------------------------------------------------------------------


class Parsed(NamedTuple):
    """A response parser's result: the text part, usage, the model that answered, the finish
    reason (normalised, and the provider's own word), the reasoning the provider gave apart and
    the tool calls (``{"name", "arguments"}``)."""

    text: str
    usage: Optional[Dict[str, Optional[int]]]
    model: Optional[str]
    finish_reason: Optional[str]
    finish_reason_raw: Any
    reasoning: Optional[str]
    tool_calls: List[Dict[str, Any]]


# A prompt: a string, or a conversation: [{"role": "system" | "user" | "assistant", "content"}].
Prompt = Any
ROLES = ("system", "user", "assistant")


class Request(NamedTuple):
    """A request builder's result: where to POST, the headers, the JSON body, and ``sent``: the
    body's fields that decide the answer (:attr:`Reply.sent`), named as the provider does."""

    url: str
    headers: Dict[str, str]
    body: Dict[str, Any]
    sent: Dict[str, Any]


def _sampling(settings: Settings, cap_field: str, **extra: Any) -> Dict[str, Any]:
    """What a request sends that decides the answer: the temperature (None: none is sent), the
    token cap under the provider's name ``cap_field`` when one is set, and ``extra``."""
    sent = {"temperature": settings.temperature}  # type: Dict[str, Any]
    if settings.max_tokens is not None:
        sent[cap_field] = settings.max_tokens
    sent.update(extra)
    return sent


def _present(sent: Mapping[str, Any]) -> Dict[str, Any]:
    """The fields of ``sent`` that go on the wire (a None is not sent)."""
    return {name: value for name, value in sent.items() if value is not None}


def _root(settings: Settings) -> str:
    """The API root: EVALS_BASE_URL, plus the provider's version path when it has no path at all:
    ``https://api.anthropic.com`` is the Anthropic SDK's base URL (ANTHROPIC_BASE_URL), which it
    calls at ``/v1/messages``
    (https://github.com/anthropics/anthropic-sdk-python/blob/main/src/anthropic/_client.py)."""
    if urllib.parse.urlsplit(settings.base_url).path:
        return settings.base_url
    return settings.base_url + urllib.parse.urlsplit(DEFAULT_BASE_URLS[settings.provider]).path


def _is_conversation(value: Any) -> bool:
    """True for a non-empty list of ``{"role": system|user|assistant, "content": str}``."""
    return (
        isinstance(value, list)
        and bool(value)
        and all(
            isinstance(m, dict) and m.get("role") in ROLES and isinstance(m.get("content"), str)
            for m in value
        )
    )


def _chat_messages(settings: Settings, prompt: Prompt) -> List[Dict[str, str]]:
    """The conversation as ``[{"role", "content"}]`` (OpenAI's and Ollama's chat shape): a
    string is one user message; EVALS_SYSTEM_PROMPT comes first unless the conversation has a
    system message of its own.  Raises TypeError for a prompt that is neither."""
    if isinstance(prompt, str):
        messages = [{"role": "user", "content": prompt}]
    elif _is_conversation(prompt):
        messages = [{"role": m["role"], "content": m["content"]} for m in prompt]
    else:
        raise TypeError(
            'a prompt is a str or a non-empty list of {"role": system|user|'
            'assistant, "content": str}, got %s' % _truncate(repr(prompt), 120)
        )
    if settings.system_prompt and not any(m["role"] == "system" for m in messages):
        messages.insert(0, {"role": "system", "content": settings.system_prompt})
    return messages


def _system_and_turns(
    settings: Settings, prompt: Prompt
) -> Tuple[List[str], List[Tuple[str, List[str]]]]:
    """(the system messages' texts, the turns: (role, texts) of each run of consecutive other
    messages of one role), for the APIs that take the system prompt apart (Anthropic's
    ``system``, Gemini's ``systemInstruction``) and require user and assistant turns to
    alternate."""
    messages = _chat_messages(settings, prompt)
    runs = itertools.groupby((m for m in messages if m["role"] != "system"), lambda m: m["role"])
    return (
        [m["content"] for m in messages if m["role"] == "system"],
        [(role, [m["content"] for m in run]) for role, run in runs],
    )


def _offer_tools(
    settings: Settings,
    body: Dict[str, Any],
    sent: Dict[str, Any],
    shape: Callable[[List[Dict[str, Any]]], Any],
    choice: Optional[Tuple[str, Callable[[str], Any]]] = None,
) -> None:
    """Add the tools of EVALS_TOOLS to ``body`` in the provider's ``shape``, and their names to
    ``sent`` (Reply.sent) as ``tools``; nothing when there are none.  ``choice``: the body's
    field for EVALS_TOOL_CHOICE and the function spelling it, the value sent also recorded in
    ``sent`` as ``tool_choice``; None for a provider that has no such field (Ollama)."""
    if settings.tools:
        body["tools"] = shape(settings.tools)
        sent["tools"] = [tool["name"] for tool in settings.tools]
        if choice is not None and settings.tool_choice is not None:
            field, spell = choice
            body[field] = sent["tool_choice"] = spell(settings.tool_choice)


def _openai_tool_choice(choice: str) -> Any:
    """``tool_choice``: ``"auto"`` | ``"required"`` | ``"none"`` | ``{"type": "function",
    "function": {"name"}}`` (https://platform.openai.com/docs/api-reference/chat/create)."""
    if choice in TOOL_CHOICES:
        return choice
    return {"type": "function", "function": {"name": choice}}


def _anthropic_tool_choice(choice: str) -> Dict[str, Any]:
    """``tool_choice``: ``{"type": "auto" | "any" | "none"}`` or ``{"type": "tool", "name"}``,
    ``required`` spelled ``any``; see
    https://docs.anthropic.com/en/docs/agents-and-tools/tool-use/implement-tool-use#forcing-tool-use ."""
    if choice in TOOL_CHOICES:
        return {"type": {"required": "any"}.get(choice, choice)}
    return {"type": "tool", "name": choice}


def _gemini_tool_choice(choice: str) -> Dict[str, Any]:
    """``toolConfig``: ``{"functionCallingConfig": {"mode": "AUTO" | "ANY" | "NONE",
    "allowedFunctionNames"}}`` (https://ai.google.dev/gemini-api/docs/function-calling and
    https://ai.google.dev/api/caching#FunctionCallingConfig): a tool's name is mode ANY with
    that one name allowed."""
    if choice in TOOL_CHOICES:
        return {"functionCallingConfig": {"mode": {"required": "ANY"}.get(choice, choice.upper())}}
    return {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": [choice]}}


def _function_tools(tools: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """OpenAI's (and Ollama's) ``[{"type": "function", "function": {name, description,
    parameters}}]``: https://platform.openai.com/docs/api-reference/chat/create#chat-create-tools ,
    https://github.com/ollama/ollama/blob/main/docs/api.md#chat-request-with-tools ."""
    return [{"type": "function", "function": dict(tool)} for tool in tools]


def _not_json(constant: str) -> Any:
    raise ValueError("%s is not JSON" % constant)


def _tool_call(name: Any, arguments: Any, where: str) -> Dict[str, Any]:
    """One tool call as ``{"name", "arguments"}``: arguments sent as a JSON string are parsed;
    a string that is not a JSON object stays the raw string (the model's answer: evals' checks
    report it), an empty one or none at all is ``{}``."""
    if not isinstance(name, str) or not name:
        raise _Failed("response has a tool call with no name (%s)" % where)
    if isinstance(arguments, str):
        try:  # NaN and Infinity are not JSON (RFC 8259), though json.loads takes them
            parsed = json.loads(arguments, parse_constant=_not_json) if arguments.strip() else {}
        except ValueError:
            parsed = None
        arguments = parsed if isinstance(parsed, dict) else arguments
    elif arguments is None:
        arguments = {}
    elif not isinstance(arguments, dict):
        arguments = json.dumps(arguments)
    return {"name": name, "arguments": arguments}


def _key_headers(provider: str, key: Optional[str]) -> Dict[str, str]:
    """How each provider takes the key (its request builder's docstring cites the source), for
    its model calls and its batch API alike."""
    if provider == "anthropic":
        return {"x-api-key": key or "", "anthropic-version": ANTHROPIC_VERSION}
    if provider == "gemini":
        return {"x-goog-api-key": key or ""}
    return {"Authorization": "Bearer " + key} if key else {}


def _usage(
    input_tokens: Any, output_tokens: Any, **more: Any
) -> Optional[Dict[str, Optional[int]]]:
    """``{"input_tokens", "output_tokens"}`` and the counts in ``more`` that are integers;
    None when neither main count is one."""

    def as_int(value: Any) -> Optional[int]:
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    usage = {"input_tokens": as_int(input_tokens), "output_tokens": as_int(output_tokens)}
    if usage["input_tokens"] is None and usage["output_tokens"] is None:
        return None
    usage.update((name, value) for name, value in more.items() if as_int(value) is not None)
    return usage


def _text_field(mapping: Mapping[str, Any], *names: str) -> Optional[str]:
    """The first of ``names`` whose value in ``mapping`` is a string, or None."""
    return next((mapping[name] for name in names if isinstance(mapping.get(name), str)), None)


class _Reasons(NamedTuple):
    """A provider's finish reasons: ``field``, the name of the field that holds it; ``normal``,
    its words normalised (the module docstring's table); ``errors``, the words that mean no
    answer, each with the error ("%s" becomes the field and the word)."""

    field: str
    normal: Mapping[str, str]
    errors: Mapping[str, str]


# https://platform.openai.com/docs/api-reference/chat/object#chat/object-choices ("stop",
# "length", "tool_calls", "content_filter", and the deprecated "function_call").
_OPENAI_REASONS = _Reasons(
    "finish_reason",
    {
        "stop": "stop",
        "length": "length",
        "tool_calls": "tool_calls",
        "function_call": "tool_calls",
        "content_filter": "content_filter",
    },
    {},
)
# https://docs.anthropic.com/en/api/messages (stop_reason) and
# https://platform.claude.com/docs/en/build-with-claude/handling-stop-reasons : pause_turn is a
# server-tool loop stopped half-way (the turn is to be sent back to continue): no answer yet.
_ANTHROPIC_REASONS = _Reasons(
    "stop_reason",
    {
        "end_turn": "stop",
        "stop_sequence": "stop",
        "max_tokens": "length",
        "model_context_window_exceeded": "length",
        "tool_use": "tool_calls",
        "refusal": "refusal",
    },
    {"pause_turn": "answer paused before its end (%s); not an answer"},
)
# https://ai.google.dev/api/generate-content#FinishReason.  OTHER ("all other reasons that
# stopped the token generation") and a model's invalid function or tool call end the answer
# before it is complete: an error naming the reason.
_GEMINI_REASONS = _Reasons(
    "finishReason",
    dict(
        {
            reason: "content_filter"
            for reason in (
                "SAFETY",
                "RECITATION",
                "BLOCKLIST",
                "PROHIBITED_CONTENT",
                "SPII",
                "IMAGE_SAFETY",
                "LANGUAGE",
            )
        },
        STOP="stop",
        MAX_TOKENS="length",
    ),
    {
        "OTHER": "answer stopped for an unstated reason (%s)",
        "MALFORMED_FUNCTION_CALL": "answer stopped at an invalid function call (%s)",
        "UNEXPECTED_TOOL_CALL": "answer stopped at an invalid tool call (%s)",
    },
)
# https://docs.ollama.com/api/chat (done_reason): "length" at num_predict (EVALS_MAX_TOKENS) or
# when the context (num_ctx) is full.
_OLLAMA_REASONS = _Reasons("done_reason", {"stop": "stop", "length": "length"}, {})
# Reasons that make a reply without a text field an answer all the same ("").
_TEXTLESS_ANSWERS = ("length", "content_filter", "refusal")


def _answer(
    reasons: _Reasons,
    finish: Any,
    text_of: Callable[[], Any],
    tool_calls: List[Dict[str, Any]],
    refusal: Any = None,
    no_text: str = "response has no text content (%s)",
) -> Tuple[str, Optional[str]]:
    """(the text, the normalised finish reason), the same way for every provider.

    A truncation, a content filter and a refusal are answers: the text there is (a refusal
    with no text: the provider's refusal message, if any).  A reason in ``reasons.errors``
    raises _Failed, and so does a reply with no text field unless it has tool calls or ends
    for one of _TEXTLESS_ANSWERS: an error is never returned as model output.
    """
    where = "%s %r" % (reasons.field, finish)
    if isinstance(finish, str) and finish in reasons.errors:
        raise _Failed(reasons.errors[finish] % where)
    normal = reasons.normal.get(finish) if isinstance(finish, str) else None
    if refusal:
        normal = "refusal"
    elif tool_calls and normal == "stop":  # Gemini's STOP and Ollama's stop after a call
        normal = "tool_calls"
    text = text_of()
    if refusal and not text:
        text = refusal if isinstance(refusal, str) else ""
    if isinstance(text, str):  # "" too: the model said nothing, and evals scores that
        return text, normal
    if tool_calls or normal in _TEXTLESS_ANSWERS:
        return "", normal
    raise _Failed(no_text % where)


def _json_object(data: Any) -> Dict[str, Any]:
    if not isinstance(data, dict):
        raise _Failed("response is not a JSON object")
    return data


# The token cap's name on an OpenAI-compatible host.  OpenAI: max_tokens "is now deprecated in
# favor of max_completion_tokens, and is not compatible with o-series models"
# (https://platform.openai.com/docs/api-reference/chat/create#chat-create-max_tokens); Azure
# OpenAI's reasoning models take only max_completion_tokens
# (https://learn.microsoft.com/en-us/azure/ai-foundry/openai/how-to/reasoning).  The other
# servers document max_tokens (vLLM, llama.cpp, LM Studio, OpenRouter).  EVALS_MAX_TOKENS_FIELD
# overrides; a model that refuses max_tokens is sent max_completion_tokens (see _refusal).
_COMPLETION_TOKENS_HOSTS = (
    "api.openai.com",
    ".openai.azure.com",
    ".cognitiveservices.azure.com",
    ".services.ai.azure.com",
)


def _token_field(settings: Settings) -> str:
    if settings.token_field:
        return settings.token_field
    host = urllib.parse.urlsplit(settings.base_url).hostname or ""
    official = host == _COMPLETION_TOKENS_HOSTS[0] or host.endswith(_COMPLETION_TOKENS_HOSTS[1:])
    return "max_completion_tokens" if official else "max_tokens"


def openai_request(settings: Settings, prompt: Prompt, key: Optional[str]) -> Request:
    """Build an OpenAI chat completions request.

    Shape: ``POST {base}/chat/completions`` with ``Authorization: Bearer <key>``
    and ``{"model", "messages": [{"role": "system"|"user"|"assistant",
    "content"}], "temperature", "max_completion_tokens" | "max_tokens",
    "tools": [{"type": "function", "function"}], "tool_choice"}``; see
    https://platform.openai.com/docs/api-reference/chat/create .  The token
    cap's name is :func:`_token_field`'s.  No Authorization header is sent
    when ``key`` is None.
    """
    sent = _sampling(settings, _token_field(settings))
    body = dict(
        {"model": settings.model, "messages": _chat_messages(settings, prompt)}, **_present(sent)
    )
    _offer_tools(settings, body, sent, _function_tools, ("tool_choice", _openai_tool_choice))
    return Request(_root(settings) + "/chat/completions", _key_headers("openai", key), body, sent)


def _openai_tool_calls(message: Mapping[str, Any]) -> List[Dict[str, Any]]:
    """``message.tool_calls[].function`` (``{"name", "arguments": JSON string}``; Ollama's
    arguments are an object), or else the deprecated ``message.function_call``:
    https://platform.openai.com/docs/api-reference/chat/object#chat/object-choices .  Any
    other shape (a bare call object, a call that is not an object) is _Failed, never no call."""
    listed = message.get("tool_calls") or []
    if not isinstance(listed, list):
        shape = "an object" if isinstance(listed, dict) else type(listed).__name__
        raise _Failed("response's message.tool_calls is %s, not an array of calls" % shape)
    calls = [(call.get("function") or {}) if isinstance(call, dict) else {} for call in listed]
    # Not both: llama-cpp-python's server repeats a call of tool_calls in function_call.
    if not listed and isinstance(message.get("function_call"), dict):
        calls.append(message["function_call"])
    return [
        _tool_call(call.get("name"), call.get("arguments"), "message.tool_calls")
        for call in calls
        if isinstance(call, dict)
    ]


def openai_parse(data: Any, sent: Mapping[str, Any]) -> Parsed:
    """Extract the answer from a chat completion object.

    Response: ``{"model", "choices": [{"message": {"content", "refusal",
    "tool_calls"}, "finish_reason"}], "usage": {"prompt_tokens",
    "completion_tokens"}}``; see
    https://platform.openai.com/docs/api-reference/chat/object .  Compatible
    servers give a reasoning model's thinking apart in ``message.reasoning``
    (vLLM, Ollama, OpenRouter) or ``message.reasoning_content`` (older vLLM,
    DeepSeek): https://docs.vllm.ai/en/latest/features/reasoning_outputs/ .

    Raises:
        _Failed: no choices, or no text content and no tool calls in an answer
            that is not a refusal, a truncation or a content filter.
    """
    choices = data.get("choices") if isinstance(data, dict) else None
    if not choices or not isinstance(choices[0], dict):
        raise _Failed("response has no choices (empty 'choices' list)")
    message = choices[0].get("message") or {}
    finish = choices[0].get("finish_reason")

    def content() -> Any:
        parts = message.get("content")
        if isinstance(parts, list):  # some compatible servers return content parts
            return "".join(p.get("text", "") for p in parts if isinstance(p, dict))
        return parts

    calls = _openai_tool_calls(message)
    text, normal = _answer(_OPENAI_REASONS, finish, content, calls, refusal=message.get("refusal"))
    usage = data.get("usage") or {}
    return Parsed(
        text,
        _usage(usage.get("prompt_tokens"), usage.get("completion_tokens")),
        data.get("model"),
        normal,
        finish,
        _text_field(message, "reasoning", "reasoning_content"),
        calls,
    )


def _anthropic_tools(tools: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """``[{"name", "description", "input_schema"}]``
    (https://docs.anthropic.com/en/docs/agents-and-tools/tool-use/implement-tool-use); a tool
    with no parameters takes an empty object, as input_schema is required."""
    return [
        dict(
            {field: tool[field] for field in ("name", "description") if field in tool},
            input_schema=tool.get("parameters") or {"type": "object", "properties": {}},
        )
        for tool in tools
    ]


def anthropic_request(settings: Settings, prompt: Prompt, key: Optional[str]) -> Request:
    """Build an Anthropic Messages request.

    Shape: ``POST {base}/messages`` with ``x-api-key`` and
    ``anthropic-version: 2023-06-01``; body ``{"model", "max_tokens",
    "messages": [{"role": "user"|"assistant", "content"}], "system",
    "temperature", "tools": [{"name", "description", "input_schema"}],
    "tool_choice": {"type", "name"}}``: the
    system messages are joined into the top-level ``system``, and consecutive
    messages of one role are merged (the API requires the roles to
    alternate); see https://docs.anthropic.com/en/api/messages ,
    https://docs.anthropic.com/en/docs/agents-and-tools/tool-use/overview and
    https://docs.anthropic.com/en/api/versioning .
    """
    sent = _sampling(settings, "max_tokens")
    sent.setdefault("max_tokens", ANTHROPIC_DEFAULT_MAX_TOKENS)  # the API requires one
    system, turns = _system_and_turns(settings, prompt)
    messages = [{"role": role, "content": "\n\n".join(texts)} for role, texts in turns]
    body = dict({"model": settings.model, "messages": messages}, **_present(sent))
    if system:
        body["system"] = "\n\n".join(system)
    _offer_tools(settings, body, sent, _anthropic_tools, ("tool_choice", _anthropic_tool_choice))
    return Request(_root(settings) + "/messages", _key_headers("anthropic", key), body, sent)


def anthropic_parse(data: Any, sent: Mapping[str, Any]) -> Parsed:
    """Extract the answer from a Messages response.

    Response: ``{"model", "content": [{"type": "text", "text"} | {"type":
    "thinking", "thinking"} | {"type": "tool_use", "id", "name", "input"}],
    "stop_reason", "usage": {"input_tokens", "output_tokens",
    "cache_creation_input_tokens", "cache_read_input_tokens"}}``; stop reasons
    ``end_turn``, ``max_tokens``, ``stop_sequence``, ``tool_use``,
    ``pause_turn``, ``refusal``, ``model_context_window_exceeded``; see
    https://docs.anthropic.com/en/api/messages , for tool_use blocks
    https://docs.anthropic.com/en/docs/agents-and-tools/tool-use/implement-tool-use
    and, for thinking blocks,
    https://docs.anthropic.com/en/docs/build-with-claude/extended-thinking .
    ``input_tokens`` leaves out the cached tokens, counted apart
    (https://docs.anthropic.com/en/docs/build-with-claude/prompt-caching).

    Raises:
        _Failed: not a JSON object, stop_reason ``pause_turn``, or neither a
            text block nor a tool_use block in an answer that is not a
            refusal or a truncation.
    """
    data = _json_object(data)
    stop = data.get("stop_reason")
    blocks = [b for b in data.get("content") or [] if isinstance(b, dict)]
    texts = [b.get("text", "") for b in blocks if b.get("type") == "text"]
    thoughts = [
        b["thinking"]
        for b in blocks
        if b.get("type") == "thinking" and isinstance(b.get("thinking"), str)
    ]
    calls = [
        _tool_call(b.get("name"), b.get("input"), "tool_use block")
        for b in blocks
        if b.get("type") == "tool_use"
    ]
    # No text block at all (none, or only thinking) is no answer; an empty text block is one.
    text, normal = _answer(
        _ANTHROPIC_REASONS,
        stop,
        lambda: "".join(texts) if texts else None,
        calls,
        no_text="response has no text content (no text block in 'content', %s)",
    )
    usage = data.get("usage") or {}
    cached = {
        name: usage.get(name)
        for name in ("cache_creation_input_tokens", "cache_read_input_tokens")
    }
    return Parsed(
        text,
        _usage(usage.get("input_tokens"), usage.get("output_tokens"), **cached),
        data.get("model"),
        normal,
        stop,
        "\n\n".join(thoughts) or None,
        calls,
    )


def _gemini_path(model: str) -> str:
    """``models/{id}``, or a tuned model's own ``tunedModels/{id}``
    (https://ai.google.dev/api/tuning#method:-tunedmodels.generatecontent)."""
    kind, name = "models", model
    if model.startswith(("models/", "tunedModels/")):
        kind, _, name = model.partition("/")
    return "%s/%s" % (kind, urllib.parse.quote(name, safe="-._~"))


def _gemini_tools(tools: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """``[{"functionDeclarations": [{"name", "description", "parametersJsonSchema"}]}]``."""
    return [
        {
            "functionDeclarations": [
                dict(
                    {field: tool[field] for field in ("name", "description") if field in tool},
                    **(
                        {"parametersJsonSchema": tool["parameters"]}
                        if "parameters" in tool
                        else {}
                    ),
                )
                for tool in tools
            ]
        }
    ]


def gemini_request(settings: Settings, prompt: Prompt, key: Optional[str]) -> Request:
    """Build a Gemini generateContent request.

    Shape: ``POST {base}/models/{model}:generateContent`` (or
    ``tunedModels/{model}``) with the key in the ``x-goog-api-key`` header
    (https://ai.google.dev/gemini-api/docs/api-key); body ``{"contents":
    [{"role": "user"|"model", "parts": [{"text"}]}], "systemInstruction":
    {"parts": [{"text"}]}, "generationConfig": {"temperature",
    "maxOutputTokens"}, "tools": [{"functionDeclarations": [{"name",
    "description", "parametersJsonSchema"}]}], "toolConfig":
    {"functionCallingConfig": {"mode", "allowedFunctionNames"}}}``: an assistant message is a
    ``model`` turn, consecutive messages of one role are one turn's parts
    (the turns must alternate), the system messages are the system
    instruction's parts; see https://ai.google.dev/api/generate-content and
    https://ai.google.dev/gemini-api/docs/function-calling .  A tool's
    parameters are JSON Schema, which goes in ``parametersJsonSchema``
    (https://ai.google.dev/api/caching#FunctionDeclaration): ``parameters``
    takes an OpenAPI subset that refuses ``additionalProperties``, ``const``
    or ``$schema`` with HTTP 400.
    """
    sent = _sampling(settings, "maxOutputTokens")
    system, turns = _system_and_turns(settings, prompt)
    body = {
        "contents": [
            {
                "role": "model" if role == "assistant" else "user",
                "parts": [{"text": text} for text in texts],
            }
            for role, texts in turns
        ]
    }  # type: Dict[str, Any]
    if system:
        body["systemInstruction"] = {"parts": [{"text": text} for text in system]}
    if _present(sent):
        body["generationConfig"] = _present(sent)
    _offer_tools(settings, body, sent, _gemini_tools, ("toolConfig", _gemini_tool_choice))
    url = "%s/%s:generateContent" % (_root(settings), _gemini_path(settings.model))
    return Request(url, _key_headers("gemini", key), body, sent)


def gemini_parse(data: Any, sent: Mapping[str, Any]) -> Parsed:
    """Extract the answer from a GenerateContentResponse.

    Response: ``{"candidates": [{"content": {"parts": [{"text", "thought"} |
    {"functionCall": {"name", "args"}}]}, "finishReason"}], "promptFeedback":
    {"blockReason"}, "usageMetadata": {"promptTokenCount",
    "candidatesTokenCount", "thoughtsTokenCount"}, "modelVersion"}``; see
    https://ai.google.dev/api/generate-content#v1beta.GenerateContentResponse
    and, for functionCall parts (``args`` is a JSON object),
    https://ai.google.dev/api/caching#FunctionCall .  Thought parts are the
    reasoning, not the answer (https://ai.google.dev/gemini-api/docs/thinking);
    output_tokens counts candidates + thoughts tokens (both are billed as
    output).

    Raises:
        _Failed: not a JSON object, prompt blocked (promptFeedback.blockReason),
            no candidates, finishReason OTHER or an invalid function call, or
            neither a text part nor a function call in an answer that is not
            blocked or truncated.
    """
    data = _json_object(data)
    candidates = data.get("candidates") or []
    if not candidates:
        blocked = (data.get("promptFeedback") or {}).get("blockReason")
        raise _Failed(
            "prompt blocked (promptFeedback.blockReason %r)" % blocked
            if blocked
            else "response has no candidates (empty 'candidates')"
        )
    candidate = candidates[0]
    finish = candidate.get("finishReason")
    every = [p for p in (candidate.get("content") or {}).get("parts") or [] if isinstance(p, dict)]
    parts = [p for p in every if isinstance(p.get("text"), str)]
    texts = [p["text"] for p in parts if not p.get("thought")]
    calls = [
        _tool_call(
            p["functionCall"].get("name"), p["functionCall"].get("args"), "functionCall part"
        )
        for p in every
        if isinstance(p.get("functionCall"), dict)
    ]
    # No text part at all is no answer (unless the model called a function); an empty one is.
    text, normal = _answer(
        _GEMINI_REASONS, finish, lambda: "".join(texts) if texts else None, calls
    )
    meta = data.get("usageMetadata") or {}
    output = meta.get("candidatesTokenCount")
    if isinstance(output, int) and isinstance(meta.get("thoughtsTokenCount"), int):
        output += meta["thoughtsTokenCount"]
    thoughts = "".join(p["text"] for p in parts if p.get("thought")) or None
    return Parsed(
        text,
        _usage(meta.get("promptTokenCount"), output),
        data.get("modelVersion"),
        normal,
        finish,
        thoughts,
        calls,
    )


def ollama_request(settings: Settings, prompt: Prompt, key: Optional[str]) -> Request:
    """Build an Ollama chat request, on its native API: its OpenAI-compatible endpoint cannot
    set the context size, and Ollama cuts a prompt longer than the context without an error.

    Shape: ``POST {root}/api/chat`` with ``{"model", "messages", "stream":
    false, "options": {"temperature", "num_predict", "num_ctx"}, "tools":
    [{"type": "function", "function"}]}``; see https://docs.ollama.com/api/chat
    and https://github.com/ollama/ollama/blob/main/docs/api.md#generate-a-chat-completion
    (options are the Modelfile's parameters, num_ctx among them).  The root is
    EVALS_BASE_URL without a trailing ``/v1`` (Ollama's OpenAI-compatible
    endpoint, which this client called before) or ``/api``.  Ollama's chat API
    has no ``tool_choice``: EVALS_TOOL_CHOICE sends nothing (the model decides).
    """
    sent = _sampling(settings, "num_predict", num_ctx=settings.num_ctx)
    body = {
        "model": settings.model,
        "messages": _chat_messages(settings, prompt),
        "stream": False,
        "options": _present(sent),
    }
    _offer_tools(settings, body, sent, _function_tools)
    root = re.sub(r"/(v1|api)$", "", settings.base_url)
    return Request(root + "/api/chat", _key_headers("ollama", key), body, sent)


def ollama_parse(data: Any, sent: Mapping[str, Any]) -> Parsed:
    """Extract the answer from an Ollama chat response.

    Response: ``{"model", "message": {"content", "thinking", "tool_calls":
    [{"function": {"name", "arguments"}}]}, "done_reason", "prompt_eval_count",
    "eval_count"}`` (``arguments`` is a JSON object); see
    https://docs.ollama.com/api/chat ,
    https://github.com/ollama/ollama/blob/main/docs/api.md#chat-request-with-tools
    (``thinking``: ``Message`` in
    https://github.com/ollama/ollama-python/blob/main/ollama/_types.py).

    Raises:
        _Failed: not a JSON object, a prompt that may have been cut to fit
            ``sent["num_ctx"]``, or no text content and no tool calls in an
            answer that was not cut at num_predict.
    """
    data = _json_object(data)
    # Ollama cuts a prompt longer than its context without an error and reports the tokens it
    # kept (prompt_eval_count, cached ones included): about half of num_ctx
    # (https://github.com/ollama/ollama/issues/17427; older runners kept num_ctx:
    # https://github.com/ollama/ollama/issues/3839).  So half of num_ctx or more cannot be told
    # from a cut prompt; an absent count (older servers, a cached prompt) cannot be checked.
    kept, num_ctx = data.get("prompt_eval_count"), sent["num_ctx"]
    if isinstance(kept, int) and kept * 2 >= num_ctx:
        raise _Failed(
            "the prompt may not have fitted the context: prompt_eval_count %d is half "
            "of num_ctx %d or more, and Ollama cuts a longer prompt to about half of "
            "num_ctx without an error; raise EVALS_OLLAMA_NUM_CTX above %d"
            % (kept, num_ctx, 2 * kept)
        )
    message = data.get("message") if isinstance(data.get("message"), dict) else {}
    finish = data.get("done_reason")
    calls = _openai_tool_calls(message)
    text, normal = _answer(_OLLAMA_REASONS, finish, lambda: message.get("content"), calls)
    return Parsed(
        text,
        _usage(kept, data.get("eval_count")),
        data.get("model"),
        normal,
        finish,
        _text_field(message, "thinking"),
        calls,
    )


_ADAPTERS = {
    "openai": (openai_request, openai_parse),
    "ollama": (ollama_request, ollama_parse),
    "anthropic": (anthropic_request, anthropic_parse),
    "gemini": (gemini_request, gemini_parse),
}

# Reasoning models on OpenAI-compatible servers that do not parse their thinking out (llama.cpp,
# vLLM without a reasoning parser, older Ollama) start the text with <think>...</think>
# (https://docs.vllm.ai/en/latest/features/reasoning_outputs/, DeepSeek-R1's format).
_THINK = re.compile(r"\s*<think>(.*?)</think>\s*", re.S)


# --------------------------------------------------------------------------
# Defaults a model refuses
# --------------------------------------------------------------------------

# Changes to Settings by (provider, model), for the defaults a model refused or its provider
# advises against: later calls in this process send what it accepts.  Each is said once on
# stderr; Reply.sent records what was sent.
_adapted = {}  # type: Dict[Tuple[str, str], Dict[str, Any]]
_adapted_lock = threading.Lock()


def _adapt(settings: Settings, changes: Dict[str, Any], why: str) -> None:
    """Send ``settings``' model ``changes`` from now on; the first time, say ``why`` on stderr."""
    with _adapted_lock:
        known = _adapted.setdefault((settings.provider, settings.model), {})
        if any(name not in known for name in changes):
            known.update(changes)
            sys.stderr.write("my_client: %s %s\n" % (settings.model, why))
            sys.stderr.flush()


def _ours(settings: Settings) -> List[str]:
    """The Settings fields the user left to us, which a model may refuse: the temperature when
    it is DEFAULT_TEMPERATURE, the token cap's name when EVALS_MAX_TOKENS_FIELD is unset."""
    ours = []
    if settings.default_temperature:
        ours.append("temperature")
    if settings.token_field is None:
        ours.append("token_field")
    return ours


def _refusal(
    settings: Settings, sent: Mapping[str, Any], error: ProviderError
) -> Optional[Tuple[Dict[str, Any], str]]:
    """(Settings changes, why) when ``error`` is the model refusing a field that we chose, not
    the user: then the call is made again without it.  None for any other error.

    * temperature: OpenAI's reasoning models answer 400 ``unsupported_value`` ("Only the
      default (1) value is supported") or ``unsupported_parameter``
      (https://platform.openai.com/docs/guides/reasoning); newer Claude models 400
      "`temperature` is deprecated for this model"
      (https://platform.claude.com/docs/en/about-claude/model-deprecations).
    * max_tokens (OpenAI-compatible hosts): reasoning models, on Azure too, 400 "Unsupported
      parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens'
      instead." (https://learn.microsoft.com/en-us/azure/ai-foundry/openai/how-to/reasoning).

    Each change alters a field that was sent, so the same refusal cannot come twice in a call.
    """
    if error.status != 400:
        return None
    said = error.detail.lower()
    ours = _ours(settings)
    if "temperature" in ours and sent.get("temperature") is not None and "temperature" in said:
        return {"temperature": None}, "rejects temperature; sending none (the provider's default)"
    if (
        "token_field" in ours
        and settings.provider == "openai"
        and "max_tokens" in sent
        and "max_completion_tokens" in said
    ):
        return (
            {"token_field": "max_completion_tokens"},
            "rejects max_tokens; sending max_completion_tokens",
        )
    return None


def _for_model(settings: Settings) -> Settings:
    """``settings`` with the changes its model needs (see _adapted).  A Gemini 3 model gets no
    default temperature: Google "strongly recommend[s] keeping the temperature parameter at its
    default value of 1.0" (lower values may cause looping; it is not refused,
    https://ai.google.dev/gemini-api/docs/gemini-3)."""
    if (
        settings.default_temperature
        and settings.provider == "gemini"
        and _gemini_path(settings.model).startswith("models/gemini-3")
    ):
        _adapt(
            settings,
            {"temperature": None},
            "is Gemini 3, for which Google advises the "
            "default temperature; sending none (the provider's default)",
        )
    with _adapted_lock:
        known = _adapted.get((settings.provider, settings.model), {})
        changes = {name: known[name] for name in _ours(settings) if name in known}
    return settings._replace(**changes) if changes else settings


class Client:
    """A live client for one provider; call it with a prompt to get a :class:`Reply`.

    Thread-safe: it holds only immutable settings.  Build one with
    :func:`make_client`.
    """

    accepts_conversations = True  # a prompt may be a list of messages (evals reads this)
    uses_cache = True  # with EVALS_CACHE on; a judge's client has evals' judge cache instead

    def __init__(
        self,
        settings: Settings,
        sleep_fn: Optional[Callable[[float], Any]] = None,
        rand_fn: Optional[Callable[[], float]] = None,
    ) -> None:
        self.settings = settings
        self._sleep = sleep_fn
        self._rand = rand_fn

    def __repr__(self) -> str:
        s = self.settings
        return "Client(provider=%r, model=%r, base_url=%r)" % (s.provider, s.model, s.base_url)

    def __call__(self, prompt: Prompt, *, attempt: int = 0) -> Reply:
        """Send ``prompt`` (a str, or a conversation: a list of ``{"role", "content"}``)
        and return the answer as a :class:`Reply`.  ``attempt``: the repeat index of the call
        (evals passes it), part of the cache key, so that ``--repeat 3`` keeps three replies.

        A default the model refuses (see :func:`_refusal`) costs one more
        request: the call is made again without it.  With EVALS_CACHE on, a
        reply kept in the cache is returned without a request (see
        :func:`_from_cache`), and each answer is kept there.

        Raises:
            ConfigError: the provider needs a key and none is set.
            ProviderError: see the module docstring (HTTP errors after retries,
                timeouts after ``EVALS_TIMEOUT`` seconds, resets, non-JSON,
                a response with no answer in it).
            TypeError: a prompt that is neither a str nor a conversation.
        """
        slot, cached = _from_cache(self, prompt, attempt)
        if cached is not None:
            return cached
        s, key, spent = self.settings, _read_key(self.settings), 0
        build, parse = _ADAPTERS[s.provider]
        pacer = _pacer_for(s)
        while True:  # ends: see _refusal
            request = build(_for_model(s), prompt, key)
            data = json.dumps(request.body).encode("utf-8")
            headers = dict(
                request.headers,
                **{"Content-Type": "application/json", "Accept": "application/json"},
            )
            costs = _costs(request.body, s.max_tokens)

            def once() -> Parsed:  # each attempt waits for the provider's limit, then sends
                ticket, seen = pacer.take(costs), []  # type: ignore[var-annotated]
                try:
                    return parse(
                        _attempt(request.url, headers, data, s.timeout, seen=seen.append),
                        request.sent,
                    )
                finally:
                    pacer.done(ticket, seen[0] if seen else None)

            try:  # a 2xx answer that is not JSON, is empty or the parser rejects fails at once
                parsed, attempts = _retrying(once, s, key, self._sleep, self._rand)
                break
            except ProviderError as error:
                error.attempts += spent
                refusal = _refusal(s, request.sent, error)
                if refusal is None:
                    raise
                _adapt(s, *refusal)
                spent = error.attempts
        return _into_cache(slot, _reply(parsed, s, request.sent, spent + attempts))

    def batch(
        self,
        requests: List[Tuple[str, Prompt]],
        resume: Optional[str] = None,
        on_submitted: Optional[Callable[[str], Any]] = None,
    ) -> Mapping[str, Any]:
        """Send ``requests`` ([(custom_id, prompt)], each custom_id of 1 to 64 letters, digits,
        ``-`` or ``_``) through the provider's batch API, in the bodies a live call sends,
        or, with ``resume``, collect the batch of that id instead; poll until it ends (a
        progress line on stderr) and return {custom_id: Reply, or ProviderError for a request
        that got no answer (its error, the batch expired or was cancelled)}.  ``on_submitted``
        (batch id) is called once the batch is created, before the first poll.

        Raises:
            ConfigError: a provider with no batch API here (gemini, ollama), or no key.
            ProviderError: the batch could not be created, polled or read.
            KeyboardInterrupt: Ctrl-C while polling; the batch goes on at the provider.
        """
        s = _for_model(self.settings)
        api = _BATCH_APIS.get(s.provider)
        if api is None:
            raise ConfigError(
                "batch calls support %s; EVALS_PROVIDER is %s"
                % (" and ".join(_BATCH_APIS), s.provider)
            )
        key = _read_key(s)
        build, parse = _ADAPTERS[s.provider]
        built = {custom_id: build(s, prompt, key) for custom_id, prompt in requests}
        if not built:
            return {}
        if len(built) > BATCH_MAX_REQUESTS[s.provider]:
            raise ConfigError(
                "a %s batch holds at most %d requests, not %d: send fewer at "
                "once (evals: --shard K/N)"
                % (s.provider, BATCH_MAX_REQUESTS[s.provider], len(built))
            )
        interval = _poll_interval(s)  # a bad EVALS_BATCH_POLL_S is refused before submitting
        batch_id = resume or api.submit(s, key, built)
        if resume is None and on_submitted is not None:
            on_submitted(batch_id)
        batch = _poll_batch(api, s, key, batch_id, interval)
        answers = _BatchAnswers(api, s, key, built, parse, api.missing(batch))
        for url in api.result_urls(s, batch):
            answers.download(url)
        return answers.index()


def _reply(parsed: Parsed, settings: Settings, sent: Dict[str, Any], attempts: int) -> Reply:
    """The Reply of a parsed answer, live or from a batch: the same text, a leading
    ``<think>...</think>`` block taken out and added to the reasoning the provider gave apart."""
    text, reasoning = parsed.text, parsed.reasoning
    match = _THINK.match(text)
    if match:
        text = text[match.end() :]
        reasoning = "\n\n".join(part for part in (reasoning, match.group(1).strip()) if part)
    return Reply(
        text,
        usage=parsed.usage,
        model=parsed.model or settings.model,
        finish_reason=parsed.finish_reason,
        attempts=attempts,
        reasoning=reasoning or None,
        sent=sent,
        tool_calls=parsed.tool_calls,
        finish_reason_raw=parsed.finish_reason_raw,
    )


# --------------------------------------------------------------------------
# Provider batch APIs: many prompts in one batch, answered within 24 hours
# --------------------------------------------------------------------------

# Requests a batch may hold: OpenAI 50,000 (https://platform.openai.com/docs/guides/batch),
# Anthropic 100,000 (https://docs.anthropic.com/en/api/creating-message-batches).
BATCH_MAX_REQUESTS = {"openai": 50000, "anthropic": 100000}
BATCH_POLL_FIRST = 5.0  # seconds to the first poll; each wait is then 1.5 x the last, up to
BATCH_POLL_MAX = 60.0  # this.  EVALS_BATCH_POLL_S sets one fixed interval instead.
# Every request of an OpenAI batch goes to one endpoint, named when the batch is created
# (https://platform.openai.com/docs/api-reference/batch/create).
_OPENAI_BATCH_ENDPOINT = "/v1/chat/completions"


class _BatchApi(NamedTuple):
    """One provider's batch API: submit(settings, key, {custom_id: Request}) -> batch id; the
    path of the batch object; state(batch) -> (ended, progress text); result_urls(settings,
    batch); missing(batch): why a request has no result line; answer(row, request, settings,
    parse, key) -> Reply or ProviderError."""

    submit: Callable[..., str]
    path: str
    state: Callable[[Dict[str, Any]], Tuple[bool, str]]
    result_urls: Callable[[Settings, Dict[str, Any]], List[str]]
    missing: Callable[[Dict[str, Any]], str]
    answer: Callable[..., Any]


def _api(
    settings: Settings,
    key: Optional[str],
    method: str,
    path: str,
    payload: Any = None,
    data: Optional[bytes] = None,
    content_type: str = "application/json",
    creates: bool = False,
) -> Dict[str, Any]:
    """One call of a batch API (``path`` below the API root) with the retry policy, sleeping
    between attempts: the answer's JSON object.  ``creates``: a request that creates something
    is not sent again after a timeout or a reset, which may have come after it was done (a
    second batch would be billed again)."""
    url = _root(settings) + path
    headers = dict(_key_headers(settings.provider, key), Accept="application/json")
    if payload is not None:
        data = json.dumps(payload).encode("utf-8")
    if data is not None:
        headers["Content-Type"] = content_type

    def once() -> Any:
        try:
            answer = _attempt(url, headers, data, settings.timeout, method)
        except _Failed as failure:
            if creates and failure.status is None and failure.retryable:
                raise _Failed(
                    failure.what + " (not sent again: it may have been done; see "
                    "the provider's list of batches)"
                ) from None
            raise
        if not isinstance(answer, dict):
            raise _Failed(
                "%s %s answered %s, not an object" % (method, path, type(answer).__name__)
            )
        return answer

    return _retrying(once, settings, key)[0]


def _field(settings: Settings, answer: Mapping[str, Any], name: str, what: str) -> str:
    value = answer.get(name)
    if not isinstance(value, str) or not value:
        raise ProviderError(
            settings.provider,
            "%s answered no %r: %s" % (what, name, _truncate(json.dumps(answer))),
        )
    return value


def _multipart(fields: Dict[str, str], filename: str, content: bytes) -> Tuple[bytes, str]:
    """A multipart/form-data body (RFC 7578) of text ``fields`` and one ``file``: (body, its
    Content-Type)."""
    boundary = "evals-%s" % os.urandom(12).hex()
    mark = boundary.encode()
    parts = [
        b'--%s\r\nContent-Disposition: form-data; name="%s"\r\n\r\n%s\r\n'
        % (mark, name.encode(), value.encode())
        for name, value in fields.items()
    ]
    parts.append(
        b'--%s\r\nContent-Disposition: form-data; name="file"; filename="%s"\r\n'
        b"Content-Type: application/jsonl\r\n\r\n" % (mark, filename.encode())
    )
    return (
        b"".join(parts) + content + b"\r\n--%s--\r\n" % mark,
        "multipart/form-data; boundary=%s" % boundary,
    )


class _KeyKeepingRedirect(urllib.request.HTTPRedirectHandler):
    """Follows a redirect, without the key when it leads to another host."""

    def redirect_request(
        self, req: Any, fp: Any, code: int, msg: str, headers: Any, newurl: str
    ) -> Any:
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None and (
            urllib.parse.urlsplit(newurl).netloc != urllib.parse.urlsplit(req.full_url).netloc
        ):
            for name in ("Authorization", "X-api-key"):  # urllib's capitalisation
                new.remove_header(name)
        return new


def _get_into(url: str, headers: Dict[str, str], timeout: float, handle: Any) -> None:
    """GET ``url`` and write the body to ``handle`` as it arrives; raise _Failed as _attempt."""
    parts = urllib.parse.urlsplit(url)
    handlers = [_KeyKeepingRedirect()]  # type: List[Any]
    if not _uses_proxy(parts.scheme, parts.hostname or ""):
        handlers.append(urllib.request.ProxyHandler({}))

    def copy(response: Any) -> None:
        for chunk in iter(lambda: response.read(1 << 20), b""):
            handle.write(chunk)

    status, answer_headers, body = _urllib_send(
        urllib.request.build_opener(*handlers).open,
        urllib.request.Request(url, headers=headers, method="GET"),
        timeout,
        copy,
    )
    if not 200 <= status < 300:
        raise _http_failure(status, answer_headers, body)


class _BatchAnswers(collections.abc.Mapping):
    """A collected batch: {custom_id: Reply, or ProviderError for a request with no answer},
    every custom_id submitted.  The result lines are kept in a temporary file, each parsed
    when asked (by the parser of a live call); only where each line starts is held."""

    def __init__(
        self,
        api: _BatchApi,
        settings: Settings,
        key: Optional[str],
        built: Dict[str, Request],
        parse: Callable[..., Parsed],
        missing: str,
    ) -> None:
        self.file = tempfile.TemporaryFile()
        self._api, self._settings, self._key, self._built, self._parse = (
            api,
            settings,
            key,
            built,
            parse,
        )
        self._missing = missing
        self._starts = {}  # type: Dict[str, int]
        self._twice = set()  # the custom_ids answered more than once
        self._unreadable = 0  # lines that name no request (not JSON, no string custom_id)
        self._lock = threading.Lock()

    def __del__(self) -> None:
        if hasattr(self, "file"):
            self.file.close()

    def download(self, url: str) -> None:
        """Append the body of ``url`` (a retried download starts again where it started)."""
        start = self.file.seek(0, os.SEEK_END)
        headers = _key_headers(self._settings.provider, self._key)

        def once() -> None:
            self.file.seek(start)
            self.file.truncate()
            _get_into(url, headers, self._settings.timeout, self.file)

        _retrying(once, self._settings, self._key)

    def index(self) -> "_BatchAnswers":
        """Note where each result line starts, by its custom_id.  A line that names no request
        (not JSON, a custom_id that is no string) answers none; a request answered twice is an
        error: neither answer can be told the right one."""
        self.file.seek(0)
        offset = 0
        for line in self.file:
            if line.strip():
                try:
                    row = json.loads(line.decode("utf-8"))
                except (UnicodeDecodeError, ValueError):
                    row = None
                custom_id = row.get("custom_id") if isinstance(row, dict) else None
                if not isinstance(custom_id, str):
                    self._unreadable += 1
                elif custom_id in self._starts:
                    self._twice.add(custom_id)
                elif custom_id in self._built:
                    self._starts[custom_id] = offset
            offset += len(line)
        return self

    def __len__(self) -> int:
        return len(self._built)

    def __iter__(self) -> Any:
        return iter(self._built)

    def __getitem__(self, custom_id: str) -> Any:
        request = self._built[custom_id]
        start = self._starts.get(custom_id)
        if custom_id in self._twice:
            return ProviderError(
                self._settings.provider,
                "the batch answered this request "
                "twice (custom_id %s): neither answer is taken" % custom_id,
            )
        if start is None:
            return ProviderError(
                self._settings.provider,
                self._missing
                + (
                    " (%d result line(s) named no request: not JSON, or no string custom_id)"
                    % self._unreadable
                    if self._unreadable
                    else ""
                ),
            )
        with self._lock:
            self.file.seek(start)
            line = self.file.readline()
        return self._api.answer(
            json.loads(line.decode("utf-8")), request, self._settings, self._parse, self._key
        )


def _batch_answer(body_of: Callable[[Dict[str, Any]], Any]) -> Callable[..., Any]:
    """A batch API's reader of one result row, ``answer(row, request, settings, parse, key)``:
    ``body_of(row)`` gives the answer's JSON, which the live call's parser reads, or raises
    _Failed.  Returns the Reply, or the ProviderError of a _Failed, scrubbed of ``key``: the
    one way a batch's answer becomes an error."""

    @functools.wraps(body_of)
    def answer(
        row: Dict[str, Any],
        request: Request,
        settings: Settings,
        parse: Callable[..., Parsed],
        key: Optional[str],
    ) -> Any:
        try:
            return _reply(parse(body_of(row), request.sent), settings, request.sent, 0)
        except _Failed as failure:
            return ProviderError(settings.provider, _scrub(failure.what, key), failure.status)

    return answer


def _poll_interval(settings: Settings) -> Tuple[float, bool]:
    """(the first wait between polls in seconds, whether EVALS_BATCH_POLL_S fixed it)."""
    fixed = settings.env.get("EVALS_BATCH_POLL_S")
    if not fixed:
        return BATCH_POLL_FIRST, False
    return _parse_number("EVALS_BATCH_POLL_S", fixed, float, 0.0), True


def _poll_batch(
    api: _BatchApi,
    settings: Settings,
    key: Optional[str],
    batch_id: str,
    first: Tuple[float, bool],
) -> Dict[str, Any]:
    """Poll the batch until it ends, with a one-line progress on stderr; its last state.
    first: from _poll_interval."""
    interval, fixed = first
    tty, shown = getattr(sys.stderr, "isatty", bool)(), ""
    try:
        while True:
            batch = _api(settings, key, "GET", api.path % urllib.parse.quote(batch_id, safe=""))
            ended, progress = api.state(batch)
            line = "my_client: %s batch %s: %s" % (settings.provider, batch_id, progress)
            if line != shown:  # on a terminal the line is rewritten in place
                sys.stderr.write("\r%s" % line.ljust(len(shown)) if tty else line + "\n")
                sys.stderr.flush()
                shown = line
            if ended:
                return batch
            sleep(interval)
            interval = interval if fixed else min(interval * 1.5, BATCH_POLL_MAX)
    finally:
        if tty and shown:
            sys.stderr.write("\n")


# ---- OpenAI Batch API: https://platform.openai.com/docs/api-reference/batch and
# https://platform.openai.com/docs/guides/batch .  The requests are a JSONL file uploaded with
# purpose "batch" (https://platform.openai.com/docs/api-reference/files/create), one line a
# request: {"custom_id", "method": "POST", "url", "body"}.  A batch's status is validating,
# in_progress, finalizing, cancelling, or, once it ended, completed, expired, cancelled or
# failed.  The answers are lines {"custom_id", "response": {"status_code", "body"}, "error"} of
# the output file (answered) and the error file (not: an HTTP error, or an "error" such as
# batch_expired for a request the 24 hours did not reach), read at /files/{id}/content.


def _openai_batch_submit(settings: Settings, key: Optional[str], built: Dict[str, Request]) -> str:
    lines = b"".join(
        json.dumps(
            {
                "custom_id": custom_id,
                "method": "POST",
                "url": _OPENAI_BATCH_ENDPOINT,
                "body": request.body,
            }
        ).encode("utf-8")
        + b"\n"
        for custom_id, request in built.items()
    )
    data, content_type = _multipart({"purpose": "batch"}, "evals-batch.jsonl", lines)
    uploaded = _api(
        settings, key, "POST", "/files", data=data, content_type=content_type, creates=True
    )
    batch = _api(
        settings,
        key,
        "POST",
        "/batches",
        {
            "input_file_id": _field(settings, uploaded, "id", "the file upload"),
            "endpoint": _OPENAI_BATCH_ENDPOINT,
            "completion_window": "24h",
        },
        creates=True,
    )
    return _field(settings, batch, "id", "the batch creation")


def _batch_count(batch: Dict[str, Any], name: str) -> int:
    """A batch's request count ``name``: 0 when it is missing or no whole number (progress
    only: the answers are read from the results)."""
    counts = batch.get("request_counts")
    value = counts.get(name) if isinstance(counts, dict) else None
    return value if type(value) is int else 0


def _openai_batch_state(batch: Dict[str, Any]) -> Tuple[bool, str]:
    status = batch.get("status")
    done = _batch_count(batch, "completed") + _batch_count(batch, "failed")
    return (
        status in ("completed", "expired", "cancelled", "failed"),
        "%s, %d of %s requests done, %d failed"
        % (status, done, _batch_count(batch, "total") or "?", _batch_count(batch, "failed")),
    )


def _openai_batch_files(settings: Settings, batch: Dict[str, Any]) -> List[str]:
    return [
        _root(settings) + "/files/%s/content" % urllib.parse.quote(batch[name], safe="")
        for name in ("output_file_id", "error_file_id")
        if isinstance(batch.get(name), str)
    ]


def _openai_batch_missing(batch: Dict[str, Any]) -> str:
    errors = (batch.get("errors") or {}).get("data") or []
    why = "; ".join(str(e.get("message")) for e in errors if isinstance(e, dict))
    return "the batch %s ended %s with no answer to this request%s" % (
        batch.get("id"),
        batch.get("status"),
        ": " + why if why else "",
    )


@_batch_answer
def _openai_batch_answer(row: Dict[str, Any]) -> Any:
    response = row.get("response") if isinstance(row.get("response"), dict) else {}
    status, body = response.get("status_code"), response.get("body")
    if isinstance(row.get("error"), dict):
        raise _Failed(_error_message({"error": row["error"]}, b"")[0], status=status)
    if not (isinstance(status, int) and 200 <= status < 300):
        raise _Failed("HTTP %s %s" % (status, _error_message(body, b"")[0]), status=status)
    return body


# ---- Anthropic Message Batches API: https://docs.anthropic.com/en/api/creating-message-batches ,
# https://docs.anthropic.com/en/api/retrieving-message-batches and
# https://docs.anthropic.com/en/api/retrieving-message-batch-results .  POST
# /messages/batches {"requests": [{"custom_id", "params": a Messages request body}]}; the batch
# has processing_status in_progress, canceling or ended; once ended its results_url serves JSONL
# lines {"custom_id", "result": {"type": "succeeded", "message"} | {"type": "errored", "error"}
# | {"type": "canceled"} | {"type": "expired"}}, in no particular order.


def _anthropic_batch_submit(
    settings: Settings, key: Optional[str], built: Dict[str, Request]
) -> str:
    batch = _api(
        settings,
        key,
        "POST",
        "/messages/batches",
        {
            "requests": [
                {"custom_id": custom_id, "params": request.body}
                for custom_id, request in built.items()
            ]
        },
        creates=True,
    )
    return _field(settings, batch, "id", "the batch creation")


def _anthropic_batch_state(batch: Dict[str, Any]) -> Tuple[bool, str]:
    done = sum(_batch_count(batch, k) for k in ("succeeded", "errored", "canceled", "expired"))
    return (
        batch.get("processing_status") == "ended",
        "%s, %d of %d requests done, %d errored"
        % (
            batch.get("processing_status"),
            done,
            done + _batch_count(batch, "processing"),
            _batch_count(batch, "errored"),
        ),
    )


def _anthropic_batch_results(settings: Settings, batch: Dict[str, Any]) -> List[str]:
    url = batch.get("results_url")
    if not isinstance(url, str):
        return []
    ours, theirs = urllib.parse.urlsplit(_root(settings)), urllib.parse.urlsplit(url)
    if (ours.scheme, ours.netloc) != (theirs.scheme, theirs.netloc):  # the key goes there
        raise ProviderError(
            settings.provider,
            "the batch's results_url %s is not on %s; the "
            "key is not sent there" % (url, ours.netloc),
        )
    return [url]


def _anthropic_batch_missing(batch: Dict[str, Any]) -> str:
    return "the batch %s ended with no result for this request" % batch.get("id")


# The HTTP status of each error type (https://docs.anthropic.com/en/api/errors): a batch's
# errored result carries the type alone, and is said as the live call's error would be.
_ANTHROPIC_ERROR_STATUS = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "billing_error": 402,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "timeout_error": 504,
    "overloaded_error": 529,
}
_ANTHROPIC_UNANSWERED = {
    "canceled": "the batch was canceled before this request was processed",
    "expired": "the batch expired (24 hours) before this request was processed",
}


@_batch_answer
def _anthropic_batch_answer(row: Dict[str, Any]) -> Any:
    result = row.get("result") if isinstance(row.get("result"), dict) else {}
    kind = result.get("type")
    if kind == "succeeded":
        return result.get("message")
    if kind != "errored":
        raise _Failed(_ANTHROPIC_UNANSWERED.get(kind, "unknown batch result type %r" % kind))
    detail, _ = _error_message(result.get("error"), b"")
    status = _ANTHROPIC_ERROR_STATUS.get(_error_object(result.get("error")).get("type"))
    raise _Failed(("HTTP %d %s" % (status, detail)) if status else detail, status=status)


_BATCH_APIS = {
    "openai": _BatchApi(
        _openai_batch_submit,
        "/batches/%s",
        _openai_batch_state,
        _openai_batch_files,
        _openai_batch_missing,
        _openai_batch_answer,
    ),
    "anthropic": _BatchApi(
        _anthropic_batch_submit,
        "/messages/batches/%s",
        _anthropic_batch_state,
        _anthropic_batch_results,
        _anthropic_batch_missing,
        _anthropic_batch_answer,
    ),
}


# --------------------------------------------------------------------------
# Cache of live calls
# --------------------------------------------------------------------------

# Re-running a suite after editing only a check should not call the model again: with the cache
# on (EVALS_CACHE=1; ``python evals.py --cache`` sets it) each reply of a live client is kept in
# a SQLite file, keyed by everything that decides it, and a call whose key is there makes no
# request.  One reply is kept per repeat of a case (the ``attempt`` evals passes), so
# ``--repeat 3`` still samples three answers, and re-samples none of them next run.

DEFAULT_CACHE = os.path.join(".evals", "cache.sqlite")
# Part of every key: a change to what is keyed or stored misses the entries written before it.
_CACHE_FORMAT = "evals-cache-1"
_CACHE_ON = ("1", "true", "yes", "on")
_CACHE_OFF = ("", "0", "false", "no", "off")
_CACHE_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS replies (key TEXT PRIMARY KEY, provider TEXT NOT NULL, "
    "model TEXT NOT NULL, attempt INTEGER NOT NULL, reply TEXT NOT NULL, created_at TEXT NOT NULL)"
)
# What the cache keeps of a Reply, besides its text.
_CACHED = (
    "tool_calls",
    "usage",
    "finish_reason",
    "finish_reason_raw",
    "model",
    "sent",
    "reasoning",
)
_cache_threads = threading.local()  # each thread's open connections, by absolute path
_cache_warned = set()  # type: set
_cache_lock = threading.Lock()
_cache_write_lock = threading.Lock()  # one write at a time in this process (see _into_cache)


def cache_on(env: Mapping[str, str]) -> bool:
    """Whether ``EVALS_CACHE`` in ``env`` turns the cache on (``1``, ``true``, ``yes``,
    ``on``) or off (unset, empty, ``0``, ``false``, ``no``, ``off``); ConfigError otherwise."""
    raw = (env.get("EVALS_CACHE") or "").strip().lower()
    if raw not in _CACHE_ON + _CACHE_OFF:
        raise ConfigError("EVALS_CACHE must be 1 (on) or 0 (off), got %r" % raw)
    return raw in _CACHE_ON


def cache_path(env: Mapping[str, str]) -> str:
    """The cache file: ``EVALS_CACHE_PATH``, default ``.evals/cache.sqlite`` (relative to the
    current folder)."""
    return env.get("EVALS_CACHE_PATH") or DEFAULT_CACHE


def _cache_key(provider: str, request: Request, attempt: int) -> str:
    """sha256 hex of what decides a reply: the provider, the URL (without a user, a password or a
    query parameter that may hold a key), the JSON body with sorted keys (model, messages with
    the system prompt, temperature, token cap, tools, Ollama's num_ctx) and the repeat index.
    Headers are left out: they hold the key and, besides it, only constants."""
    url = _without_credentials(request.url)
    text = json.dumps(
        [_CACHE_FORMAT, provider, url, request.body, attempt],
        sort_keys=True,
        separators=(",", ":"),
    )
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _cache_db(path: str) -> Any:
    """The calling thread's connection to the cache at ``path``, created if missing: readable by
    its owner only (it holds model answers), in WAL mode, so that runs
    at once read while another writes and wait (30 s at most) for each other's writes."""
    import sqlite3

    path = os.path.abspath(path)
    connections = _cache_threads.__dict__.setdefault("connections", {})
    connection = connections.get(path)
    if connection is not None and os.path.exists(path):
        return connection
    os.makedirs(os.path.dirname(path), exist_ok=True)
    os.close(os.open(path, os.O_RDWR | os.O_CREAT, 0o600))
    deadline = time.monotonic() + 30
    while True:  # two runs creating the file at once may be told "locked" switching to WAL
        connection = sqlite3.connect(path, timeout=30, isolation_level=None)
        try:
            connection.execute("PRAGMA journal_mode=WAL")
            # A write survives the process being killed without an fsync each (in WAL mode),
            # only a power cut may lose the last ones: a reply a call costs milliseconds less.
            connection.execute("PRAGMA synchronous=NORMAL")
            connection.execute(_CACHE_SCHEMA)
            break
        except sqlite3.OperationalError as exc:
            connection.close()
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    connections[path] = connection
    return connection


def _cache_trouble(path: str, done: str, exc: BaseException) -> None:
    """Say once per file that the cache could not be used: a cache is never a reason for a call
    to fail, only to cost what it would have cost without one."""
    with _cache_lock:
        if path in _cache_warned:
            return
        _cache_warned.add(path)
    sys.stderr.write(
        "my_client: warning: cache %s not %s (%s: %s); the model is called as without "
        "one\n" % (path, done, type(exc).__name__, _one_line(exc))
    )
    sys.stderr.flush()


def _stores(env: Mapping[str, str]) -> Tuple[List[str], List[str]]:
    """(the files a reply is looked up in, those it is kept in): the cache when EVALS_CACHE is
    on; the journal of a run (``EVALS_JOURNAL``, which evals sets for a live run so that an
    interrupted one loses no answer) always kept in, and looked up in with ``EVALS_RESUME=1``
    (``python evals.py --resume``)."""
    cache = [cache_path(env)] if cache_on(env) else []
    journal = [env["EVALS_JOURNAL"]] if env.get("EVALS_JOURNAL") else []
    resume = (env.get("EVALS_RESUME") or "").strip().lower() in _CACHE_ON
    return cache + (journal if resume else []), cache + journal


def _from_cache(
    client: "Client", prompt: Prompt, attempt: int = 0
) -> Tuple[Optional[Tuple[Any, ...]], Optional[Reply]]:
    """(where to keep the reply: (paths, key, provider, repeat index ``attempt``), the cached
    reply or None);
    (None, None) when neither the cache nor a journal is on for ``client`` (a judge's client,
    or EVALS_CACHE off and no EVALS_JOURNAL in its environment; see :func:`_stores`).

    The key is that of the request as configured, before any default the model refused is
    dropped (see :func:`_refusal`): a new process builds that request first, so its calls hit.
    A cached reply has ``cached`` and ``replayed`` True (it took no model time), its usage,
    model, finish reason, tool calls, reasoning and ``sent`` as they were, and ``attempts`` 0.
    """
    s = client.settings
    reads, writes = _stores(s.env) if client.uses_cache else ([], [])
    if not writes:
        return None, None
    import sqlite3

    request = _ADAPTERS[s.provider][0](s, prompt, None)  # no key: it is not part of the key
    slot = (writes, _cache_key(s.provider, request, attempt), s.provider, attempt)
    for path in reads:
        try:
            row = (
                _cache_db(path)
                .execute("SELECT reply FROM replies WHERE key = ?", (slot[1],))
                .fetchone()
            )
            if row is None:
                continue
            data = json.loads(row[0])
            kept = dict({name: data.get(name) for name in _CACHED}, model=data.get("model") or "")
            return slot, Reply(data["text"], replayed=True, cached=True, **kept)
        except (sqlite3.Error, OSError, ValueError, LookupError, TypeError) as exc:
            _cache_trouble(path, "read", exc)
    return slot, None


def _into_cache(slot: Optional[Tuple[Any, ...]], reply: Reply) -> Reply:
    """Keep ``reply`` in the cache at ``slot`` (from :func:`_from_cache`; None: the cache is off)
    and return it.  Only answers get here, an empty one included: an error raises before.  One
    a content filter stopped is not kept: the filter may let the same request through next time."""
    if slot is None or reply.finish_reason == "content_filter":
        return reply
    import sqlite3

    data = dict({name: getattr(reply, name) for name in _CACHED}, text=str(reply))
    created = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime())
    for path in slot[0]:
        try:
            # One statement, so one transaction: a run at once sees the reply whole or not at all.
            # The process's threads take turns here: SQLite would make a thread that finds the
            # file locked sleep milliseconds before trying again.
            with _cache_write_lock:
                _cache_db(path).execute(
                    "INSERT OR REPLACE INTO replies (key, provider, model, attempt, reply, "
                    "created_at) VALUES (?, ?, ?, ?, ?, ?)",
                    (
                        slot[1],
                        slot[2],
                        reply.model and _without_keys(reply.model),
                        slot[3],
                        _without_keys(json.dumps(data)),
                        created,
                    ),
                )
        except (sqlite3.Error, OSError, ValueError, TypeError) as exc:
            _cache_trouble(path, "written", exc)
    return reply


def cache_command(argv: Optional[List[str]] = None, stdout: Any = None, stderr: Any = None) -> int:
    """``python my_client.py cache [--clear] [--path FILE]``: how many replies the cache of
    live calls holds, and where; ``--clear`` empties it.  Returns the exit code: 0, or 2 for a
    file that is not such a cache."""
    import argparse
    import sqlite3

    stdout, stderr = stdout or sys.stdout, stderr or sys.stderr
    parser = argparse.ArgumentParser(
        prog="my_client.py cache",
        description="Show how many replies the cache of live calls holds (python evals.py "
        "--cache, or EVALS_CACHE=1), or empty it. Emptying it is safe while a run "
        "uses it: that run's replies from then on are kept again.",
    )
    parser.add_argument("--clear", action="store_true", help="delete every cached reply")
    parser.add_argument(
        "--path",
        default=cache_path(os.environ),
        metavar="FILE",
        help="the cache (default: $EVALS_CACHE_PATH or %s)" % DEFAULT_CACHE,
    )
    args = parser.parse_args(argv)
    if not os.path.isfile(args.path):
        stdout.write("%s: no cache there (python evals.py --cache makes one)\n" % args.path)
        return 0
    try:
        db = _cache_db(args.path)
        count = db.execute("SELECT COUNT(*) FROM replies").fetchone()[0]
        if args.clear:
            db.execute("DELETE FROM replies")
            try:
                db.execute("VACUUM")
            except sqlite3.Error:  # a run reading it at the moment: the file shrinks later
                pass
    except sqlite3.Error as exc:
        stderr.write("my_client: %s is not a cache of live calls: %s\n" % (args.path, exc))
        return 2
    replies = "%d repl%s" % (count, "y" if count == 1 else "ies")
    stdout.write(
        "%s: %s\n"
        % (args.path, "cleared, %s deleted" % replies if args.clear else "%s cached" % replies)
    )
    return 0


# --------------------------------------------------------------------------
# Factory and entry point
# --------------------------------------------------------------------------

_OVERRIDES = frozenset(
    {
        "model",
        "base_url",
        "api_key",
        "system_prompt",
        "tools",
        "tool_choice",
        "max_tokens",
        "max_tokens_field",
        "temperature",
        "num_ctx",
        "timeout",
        "max_attempts",
        "max_retry_wait",
        "rpm",
        "tpm",
        "sleep",
        "rand",
        "env",
    }
)


def make_client(provider: Optional[str] = None, **overrides: Any) -> Callable[[str], Reply]:
    """Build a client: a thread-safe callable ``client(prompt) -> Reply``, the prompt a str or
    a conversation (a list of ``{"role", "content"}``); it has ``accepts_conversations = True``.

    Args:
        provider: ``"openai"``, ``"anthropic"``, ``"gemini"``, ``"ollama"``,
            or None to read ``EVALS_PROVIDER``.
        **overrides: take precedence over the environment: ``model`` (str),
            ``base_url`` (str), ``api_key`` (str; otherwise the key variable is
            read on every call), ``system_prompt`` (str), ``tools`` (a list of
            ``{"name", "description", "parameters"}``, or the path of a JSON file
            holding one, as EVALS_TOOLS; None for none), ``tool_choice`` (as
            EVALS_TOOL_CHOICE), ``max_tokens`` (int),
            ``max_tokens_field`` (``"max_tokens"`` or ``"max_completion_tokens"``),
            ``temperature`` (float or None to omit), ``num_ctx`` (int, Ollama),
            ``timeout`` (seconds per attempt), ``max_attempts`` (int),
            ``max_retry_wait`` (seconds), ``sleep`` (callable taking
            seconds), ``rand`` (callable returning a float in [0, 1)), ``env``
            (mapping used instead of ``os.environ``).

    Raises:
        ConfigError: no provider (EVALS_PROVIDER unset, empty or ``replay``: evals.py
            replays recordings itself), unknown provider (lists the known ones), an unparseable
            number, a tools file that is not a list of tools or a tool choice that is none
            of the choices nor an offered tool's name.  A missing key
            is reported on the first call.
        TypeError: unknown override name.
    """
    return _make_client(provider, overrides, "EVALS_TEMPERATURE")


def _make_client(
    provider: Optional[str], overrides: Dict[str, Any], temperature_var: str
) -> Callable[[str], Reply]:
    """:func:`make_client`, with the temperature read from ``temperature_var``."""
    unknown = set(overrides) - _OVERRIDES
    if unknown:
        raise TypeError("make_client() got unknown option(s): %s" % ", ".join(sorted(unknown)))
    env = overrides.pop("env", None)
    env = os.environ if env is None else env
    sleep_fn = overrides.pop("sleep", None)
    rand_fn = overrides.pop("rand", None)
    from_env = provider is None
    name = (env.get("EVALS_PROVIDER", "") if from_env else provider).strip().lower()
    if name in _REPLAY_NAMES:
        raise ConfigError(
            "no model provider configured (%s): set EVALS_PROVIDER to one of %s to call a model; "
            "python evals.py replays recorded outputs by itself, with no client"
            % (
                "EVALS_PROVIDER=replay" if name else "EVALS_PROVIDER is not set",
                ", ".join(PROVIDERS),
            )
        )
    if name not in PROVIDERS:
        source = "EVALS_PROVIDER=%r" % name if from_env else "provider %r" % name
        raise ConfigError(
            "unknown %s; known providers: %s (unset EVALS_PROVIDER for evals.py to replay "
            "recordings offline)" % (source, ", ".join(PROVIDERS))
        )
    settings = _resolve_settings(name, env, overrides, temperature_var)
    return Client(settings, sleep_fn=sleep_fn, rand_fn=rand_fn)


_ENV_VARS = (
    "EVALS_PROVIDER",
    "EVALS_MODEL",
    "EVALS_BASE_URL",
    "EVALS_SYSTEM_PROMPT",
    "EVALS_TOOLS",
    "EVALS_TOOL_CHOICE",
    "EVALS_MAX_TOKENS",
    "EVALS_MAX_TOKENS_FIELD",
    "EVALS_TEMPERATURE",
    "EVALS_OLLAMA_NUM_CTX",
    "EVALS_TIMEOUT",
    "EVALS_MAX_ATTEMPTS",
    "EVALS_MAX_RETRY_WAIT",
    "EVALS_RPM",
    "EVALS_TPM",
)
_clients: Dict[Tuple[Any, ...], Callable[[str], Reply]] = {}
_clients_lock = threading.Lock()


def _cached(
    cache: Dict[Tuple[Any, ...], Callable[[str], Reply]],
    names: Tuple[str, ...],
    factory: Callable[[], Callable[[str], Reply]],
) -> Callable[[str], Reply]:
    # One client per configuration (keys excluded: they are read on every call), so that its
    # stderr notice is printed once.
    config = tuple(os.environ.get(name) for name in names) + (os.getcwd(),)
    with _clients_lock:
        client = cache.get(config)
        if client is None:
            client = cache[config] = factory()
        return client


def _announced(factory: Callable[[], Callable[[str], Reply]], role: str) -> Callable[[], Any]:
    """`factory`, saying once on stderr which provider, model and URL a live client calls, so
    a run's log shows what it talked to."""

    def build() -> Callable[[str], Reply]:
        client = factory()
        if isinstance(client, Client):
            s = client.settings
            sys.stderr.write(
                "my_client: %s calls %s model %s at %s\n"
                % (role, s.provider, s.model, _without_credentials(s.base_url))
            )
        return client

    return build


def _env_client() -> Callable[[str], Reply]:
    return _cached(_clients, _ENV_VARS, _announced(make_client, "ask"))


def ask(prompt: Prompt, *, attempt: int = 0) -> Reply:
    """Answer ``prompt`` (a str, or a conversation: a list of ``{"role": "system" | "user" |
    "assistant", "content": str}``) with the model configured in the environment.

    This is what ``python evals.py`` calls, once per case and repeat, possibly
    from several threads at once; it passes ``attempt``, the 0-based repeat
    index (``--repeat 3``: 0, 1, 2), because this signature names it: the
    cache of live calls keeps one reply per repeat.  With ``EVALS_PROVIDER``
    unset, evals.py replays ``recordings.jsonl`` itself and never calls this;
    called then, it raises ConfigError.

    Returns:
        Reply: the answer (a ``str``: its text part) with ``tool_calls``,
        ``finish_reason``, ``finish_reason_raw``, ``usage``, ``model``,
        ``attempts``, ``reasoning`` and ``sent`` attributes.

    Raises:
        ConfigError, ProviderError, TypeError: see the module docstring.
    """
    return _env_client()(prompt, attempt=attempt)


ask.accepts_conversations = True  # type: ignore[attr-defined]  # evals passes conversations


def _ask_batch(
    requests: List[Tuple[str, Prompt]],
    resume: Optional[str] = None,
    on_submitted: Optional[Callable[[str], Any]] = None,
) -> Mapping[str, Any]:
    """``ask.batch``: :meth:`Client.batch` of the client configured in the environment (what
    ``python evals.py --batch`` calls).  Raises ConfigError when no provider is configured."""
    return _env_client().batch(requests, resume, on_submitted)


ask.batch = _ask_batch  # type: ignore[attr-defined]


# --------------------------------------------------------------------------
# Judge: the model that grades evals.py's `judge` checks
# --------------------------------------------------------------------------

_JUDGE_ENV_VARS = (
    "EVALS_JUDGE_PROVIDER",
    "EVALS_JUDGE_MODEL",
    "EVALS_JUDGE_BASE_URL",
    "EVALS_JUDGE_TEMPERATURE",
    "EVALS_JUDGE_RECORD",
) + _ENV_VARS


def prompt_key(prompt: str) -> str:
    """The key of a judge recording: sha256 hex of the prompt's UTF-8 bytes."""
    return hashlib.sha256(prompt.encode("utf-8")).hexdigest()


# A credential's name ends so (OPENAI_API_KEY, GITHUB_TOKEN), as the harness masks them too.
_CREDENTIAL = re.compile(r"(^|_)(KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIALS?)$", re.I)


def _without_keys(text: str) -> str:
    """``text`` with the value of every credential variable (8 characters or more) said
    ``[redacted]``: a reply that echoes a key keeps it out of the files this module writes."""
    for name, value in os.environ.items():
        if len(value) >= 8 and value in text and _CREDENTIAL.search(name):
            text = text.replace(value, "[redacted]")
    return text


def _append_line(path: str, row: Dict[str, Any]) -> None:
    """Append one JSON line with a single O_APPEND write (lines of threads never interleave)."""
    line = _without_keys(json.dumps(row, ensure_ascii=False, default=repr)) + "\n"
    _append_bytes(path, line.encode("utf-8"))


def _append_bytes(path: str, data: bytes) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    handle = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        while data:
            data = data[os.write(handle, data) :]
    finally:
        os.close(handle)


def _judge_config(
    env: Mapping[str, str], provider: Optional[str] = None
) -> Tuple[str, Optional[str], Optional[str]]:
    """(provider or "", model, base_url) of the judge: EVALS_JUDGE_* first, then EVALS_*.

    The app's EVALS_MODEL / EVALS_BASE_URL apply only when the judge uses the
    app's provider (a model name of one provider means nothing to another).
    """
    app = env.get("EVALS_PROVIDER", "").strip().lower()
    own = env.get("EVALS_JUDGE_PROVIDER", "").strip().lower()
    provider = provider.strip().lower() if provider is not None else own or app
    same = provider == app
    model = env.get("EVALS_JUDGE_MODEL") or (env.get("EVALS_MODEL") if same else None) or None
    base_url = (
        env.get("EVALS_JUDGE_BASE_URL") or (env.get("EVALS_BASE_URL") if same else None) or None
    )
    return provider, model, base_url


def make_judge(provider: Optional[str] = None, **overrides: Any) -> Callable[[str], Reply]:
    """Build a judge client ``judge(prompt) -> Reply`` (temperature 0, no system prompt, no
    tools).

    provider None reads ``EVALS_JUDGE_PROVIDER``, then ``EVALS_PROVIDER``; none (or
    ``replay``) is a ConfigError: evals.py replays recorded judge replies itself.  Overrides
    are those of :func:`make_client`.
    """
    env = overrides.pop("env", None)
    env = os.environ if env is None else env
    name, model, base_url = _judge_config(env, provider)
    if name in _REPLAY_NAMES:
        raise ConfigError(
            "no judge provider configured (EVALS_JUDGE_PROVIDER and EVALS_PROVIDER %s): set "
            "EVALS_JUDGE_PROVIDER to one of %s to call a judge model; python evals.py replays "
            "recorded judge replies by itself"
            % ("unset" if name == "" else "say replay", ", ".join(PROVIDERS))
        )
    overrides.setdefault("model", model)
    overrides.setdefault("base_url", base_url)
    overrides.setdefault("system_prompt", None)
    overrides.setdefault("tools", None)  # the judge grades; it is offered no tools
    overrides.setdefault("tool_choice", None)
    client = _make_client(name, dict(overrides, env=env), "EVALS_JUDGE_TEMPERATURE")
    client.uses_cache = False  # type: ignore[attr-defined]  # evals keeps its verdicts itself
    return client


_judges = {}  # type: Dict[Tuple[Any, ...], Callable[[str], Reply]]
_record_lock = threading.Lock()


def _judge_model() -> str:
    """What the judge is, everything that changes its verdicts: provider and model, URL (no
    credentials), temperature and token cap ("openai:gpt-4o-mini https://... temperature=0.0
    max_tokens=None"), or "replay". Part of evals' judge cache key, so that changing any of
    them never reuses another judge's cached verdicts."""
    provider, _, _ = _judge_config(os.environ)
    if provider in _REPLAY_NAMES:
        return "replay"
    s = _cached(_judges, _JUDGE_ENV_VARS, _announced(make_judge, "judge")).settings
    return "%s:%s %s temperature=%s max_tokens=%s" % (
        s.provider,
        s.model,
        _without_credentials(s.base_url),
        s.temperature,
        s.max_tokens,
    )


def judge(prompt: str) -> Reply:
    """Answer a judge prompt from evals.py (``--judge my_client:judge``).

    Configured by ``EVALS_JUDGE_PROVIDER``, ``EVALS_JUDGE_MODEL``,
    ``EVALS_JUDGE_BASE_URL`` (each falling back to the ``EVALS_*`` setting;
    model and URL only for the app's own provider), temperature 0
    (``EVALS_JUDGE_TEMPERATURE`` to change; ``none`` omits it).  Keys,
    timeouts and retries are the provider's ``EVALS_*`` settings.  With no
    provider it raises ConfigError (evals.py replays ``judge_recordings.jsonl``
    itself then, and does not call it).  ``EVALS_JUDGE_RECORD=FILE`` appends
    every live reply to FILE as ``{"key": sha256 of the prompt, "reply"}``, the
    lines evals.py replays offline later.

    The prompt holds the case's input and the output being graded: with a
    live provider they are sent to that provider.
    """
    client = _cached(_judges, _JUDGE_ENV_VARS, _announced(make_judge, "judge"))
    reply = client(prompt)
    record = os.environ.get("EVALS_JUDGE_RECORD")
    if record:
        with _record_lock:
            _append_line(
                record,
                {
                    "key": prompt_key(prompt),
                    "reply": str(reply),
                    "model": getattr(reply, "model", None),
                },
            )
    return reply


judge.judge_model = _judge_model  # type: ignore[attr-defined]


# --------------------------------------------------------------------------
# Capture: log real calls of a running app, to review them into cases
# --------------------------------------------------------------------------

DEFAULT_CAPTURES = os.path.join(".evals", "captures.jsonl")
_capture_lock = threading.Lock()
_capture_warned = []  # type: List[bool]


def _capture_input(args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Any:
    """The call's input: its first str or conversation argument, else such a keyword, else
    all the arguments as JSON."""

    def usable(value: Any) -> Any:
        if isinstance(value, str):
            return str(value)
        if _is_conversation(value):
            return [{"role": m["role"], "content": str(m["content"])} for m in value]
        return None

    for value in list(args) + [
        kwargs.get(name) for name in ("prompt", "input", "message", "messages", "text", "question")
    ]:
        found = usable(value)
        if found is not None:
            return found
    return json.loads(json.dumps({"args": list(args), "kwargs": kwargs}, default=repr))


def _capture_output(result: Any) -> Any:
    """The call's output: a str, a Reply as :func:`reply_dict` has it, or the value as JSON."""
    if result is None or isinstance(result, str):
        return None if result is None else reply_dict(result)
    return json.loads(json.dumps(result, default=repr))


def _redacted(value: Any, patterns: List[Any]) -> Any:
    if isinstance(value, str):
        for pattern in patterns:
            value = pattern.sub("[REDACTED]", value)
        return value
    if isinstance(value, list):
        return [_redacted(v, patterns) for v in value]
    if isinstance(value, dict):
        return {k: _redacted(v, patterns) for k, v in value.items()}
    return value


def _fingerprint(value: Any) -> Any:
    if value is None:
        return None
    text = (
        value if isinstance(value, str) else json.dumps(value, sort_keys=True, ensure_ascii=False)
    )
    return {"sha256": hashlib.sha256(text.encode("utf-8")).hexdigest(), "chars": len(text)}


class _CaptureLog:
    """Where and how :func:`capture` logs calls: one redacted JSON line per call."""

    def __init__(self, path: str, tags: Any, store_text: bool, redact: Any) -> None:
        self.path = path
        self.tags = [tags] if isinstance(tags, str) else [str(t) for t in tags]
        self.store_text = store_text
        self.patterns = [
            re.compile(p) if isinstance(p, str) else p
            for p in ([redact] if isinstance(redact, str) else redact)
        ]

    def write(
        self,
        args: Tuple[Any, ...],
        kwargs: Dict[str, Any],
        result: Any,
        error: Optional[BaseException],
        started: float,
        extra: Any,
    ) -> None:
        patterns = self.patterns
        try:
            row = {
                "ts": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "input": _redacted(_capture_input(args, kwargs), patterns),
                "output": _redacted(_capture_output(result), patterns) if error is None else None,
                "tags": self.tags,
                "context": _redacted(json.loads(json.dumps(extra, default=repr)), patterns)
                if extra is not None
                else None,
                "latency_s": round(time.perf_counter() - started, 6),
                "error": None,
            }
            if error is not None:
                text = str(error).strip()
                row["error"] = _redacted(
                    "%s: %s" % (type(error).__name__, text) if text else type(error).__name__,
                    patterns,
                )
            if not self.store_text:
                row["input"] = _fingerprint(row["input"])
                row["output"] = _fingerprint(row["output"])
                if error is not None:
                    row["error"] = type(error).__name__
            with _capture_lock:
                _append_line(self.path, row)
        except Exception as exc:  # never let logging break the app
            with _capture_lock:
                if not _capture_warned:
                    _capture_warned.append(True)
                    print(
                        "my_client: capture to %s failed, calls are not logged: %s"
                        % (self.path, exc),
                        file=sys.stderr,
                        flush=True,
                    )


def capture(
    func: Optional[Callable[..., Any]] = None,
    *,
    path: str = DEFAULT_CAPTURES,
    tags: Any = (),
    context: Any = None,
    store_text: bool = True,
    redact: Any = (),
) -> Any:
    r"""Log every call of your own model function, to turn bad answers into cases.

    One line in your app::

        @my_client.capture(tags=["support"], redact=[r"\b\d{16}\b"])
        def ask_support_bot(question): ...

        # or: ask = my_client.capture(ask)

    Each call appends ``{"ts", "input", "output", "tags", "context",
    "latency_s", "error"}`` as one JSON line to ``path`` (default
    ``.evals/captures.jsonl``), written with a single O_APPEND write under a
    lock, so lines from many threads never interleave.  ``input`` is the first
    str or conversation argument (else ``prompt=``/``messages=``/... keyword,
    else the arguments as JSON); ``output`` the return value (a Reply as
    :func:`reply_dict` has it).  A call that raises is
    logged with ``error`` ("Type: message") and the exception is re-raised.

    tags: list of strings kept with each call.  context: a dict, or a
    function returning one, called before each call (request id, user
    tier...).  redact:
    regex patterns (str or compiled); every match in input, output, context
    and error becomes ``[REDACTED]``.  store_text=False keeps only the
    sha256 and length of input and output (and the error's type), so nothing
    the user typed is written; such calls cannot become cases.

    Logging never breaks the app: a capture that cannot be written is
    dropped with one warning on stderr.
    """
    log = _CaptureLog(path, tags, store_text, redact)

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            try:  # taken before the call, while the request it describes is current
                extra = context() if callable(context) else context
            except Exception as exc:
                extra = {"context_error": "%s: %s" % (type(exc).__name__, exc)}
            started = time.perf_counter()
            try:
                result = fn(*args, **kwargs)
            except Exception as exc:
                log.write(args, kwargs, None, exc, started, extra)
                raise
            log.write(args, kwargs, result, None, started, extra)
            return result

        return wrapper

    return decorate(func) if func is not None else decorate


if __name__ == "__main__":
    if sys.argv[1:2] == ["cache"]:
        sys.exit(cache_command(sys.argv[2:]))
    print(
        "usage: python my_client.py cache [--clear] [--path FILE]\n\n"
        "my_client is the model client evals.py calls. Set EVALS_PROVIDER (openai,\n"
        "anthropic, gemini, ollama) to call a model; with it unset, evals.py replays\n"
        "recordings.jsonl itself. Every EVALS_* setting is in its docstring:\n"
        "python -m pydoc my_client.\n\n"
        "Run as a script it has one command: cache says how many replies the cache of\n"
        "live calls holds, and --clear empties it (python my_client.py cache --help).",
        file=sys.stdout if sys.argv[1:2] in (["-h"], ["--help"]) else sys.stderr,
    )
    sys.exit(0 if sys.argv[1:2] in (["-h"], ["--help"]) else 2)
