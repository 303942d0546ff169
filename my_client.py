"""my_client: the model client that ``python evals.py`` calls, one prompt at a time.

It sends a prompt (a str or a conversation) to OpenAI or an OpenAI-compatible server,
Anthropic, Gemini or Ollama and returns a :class:`Reply`, a ``str`` with the answer's tool
calls, finish reason, usage and rate-limit headers.  ``ask(prompt, *, attempt=0)`` calls the
provider configured by the ``EVALS_*`` environment variables; ``make_client(provider,
**settings)`` builds a client without them; ``make_judge`` builds the client of the judge,
``judge`` answers evals' ``judge`` checks.  What happens around a call (the cache, the journal
of a live run, pacing, waiting when a provider refuses a call) is the harness's.  Every
setting, error and retry rule is in docs/clients.md.

evals 0.4.0, MIT licence (see LICENSE). Python 3.9 or newer, standard library only.
"""

import atexit
import email.utils
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
    """The model's answer: a ``str`` (the text part, ``""`` when the model only called tools) with
    the attributes docs/clients.md describes ("The reply"): ``tool_calls`` (``[{"name",
    "arguments"}]``), ``finish_reason`` (normalised) and ``finish_reason_raw``, ``usage``
    (``{"input_tokens", "output_tokens"}`` or None), ``model``, ``attempts`` (HTTP attempts; 0 for
    a replay or a batch), ``replayed``, ``reasoning`` (the thinking taken out of the text),
    ``sent`` (what was sent that decides the answer, e.g. ``{"temperature": None,
    "max_completion_tokens": 1024}``) and ``rate_limits`` (the answer's rate-limit headers, names
    lower-cased, for the harness to pace by; not in recordings)."""

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
        rate_limits: Optional[Dict[str, str]] = None,
    ) -> "Reply":
        obj = super().__new__(cls, text)
        obj.replayed = replayed
        obj.rate_limits = dict(rate_limits or {})
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
    """A reply as recordings and captures store it: the str itself when that is all the provider
    reported, else the whole reply ``{"text": str, "finish_reason": str|None}`` with
    ``"tool_calls": [{"name", "arguments"}]`` when it made any (a finish reason, ``stop`` included,
    is kept: a check of it on a replay must see what the live call saw)."""
    calls = getattr(reply, "tool_calls", None) or []
    finish = getattr(reply, "finish_reason", None)
    if not calls and finish is None:
        return str(reply)
    whole = {"text": str(reply), "finish_reason": finish}  # type: Dict[str, Any]
    if calls:
        whole["tool_calls"] = [{"name": c["name"], "arguments": c["arguments"]} for c in calls]
    return whole


class ProviderError(Exception):
    """A model call failed; the message is one line: ``"<provider>: <what happened>"``. ``status``:
    the last HTTP status (None below HTTP); ``attempts``: HTTP attempts made; ``rate_limits``: the
    last answer's rate-limit headers (as :attr:`Reply.rate_limits`); ``retry_after``: for a call
    the provider refused for its load or rate and the client handed back (see _retrying), the
    seconds it asked to wait, 0.0 when it did not say; None for every other error."""

    def __init__(
        self,
        provider: str,
        message: str,
        status: Optional[int] = None,
        attempts: int = 0,
        retry_after: Optional[float] = None,
        rate_limits: Optional[Dict[str, str]] = None,
    ):
        self.provider = provider
        self.status = status
        self.attempts = attempts
        self.retry_after = retry_after
        self.rate_limits = dict(rate_limits or {})
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


# A credential's name ends so (OPENAI_API_KEY, GITHUB_TOKEN), as the harness masks them too.
_CREDENTIAL = re.compile(r"(^|_)(KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIALS?)$", re.I)


def _masked(text: str) -> str:
    """``text`` with the value of every credential variable (8 characters or more) said
    ``[redacted]``, as it is and as JSON escapes it (either way): what this file writes to a file
    or stderr.  The harness masks what it writes the same way, in more forms."""
    for name, value in os.environ.items():
        if len(value) < 8 or not _CREDENTIAL.search(name):
            continue
        forms = {value, json.dumps(value)[1:-1], json.dumps(value, ensure_ascii=False)[1:-1]}
        for form in sorted(forms, key=len, reverse=True):
            text = text.replace(form, "[redacted]")
    return text


def _say(line: str) -> None:
    """Write ``line`` to stderr, credentials masked (_masked)."""
    sys.stderr.write(_masked(line))
    sys.stderr.flush()


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
    # False: a call the provider refuses for its load or rate raises at once, for the harness
    # to schedule again (see _retrying); True: the client waits and retries it itself.
    wait_when_refused: bool = False

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


# Each setting and the variable it is read from (``EVALS_`` and the name) when no override
# gives it.
_VARIABLES = {
    "model": "MODEL",
    "base_url": "BASE_URL",
    "system_prompt": "SYSTEM_PROMPT",
    "tools": "TOOLS",
    "tool_choice": "TOOL_CHOICE",
    "max_tokens": "MAX_TOKENS",
    "max_tokens_field": "MAX_TOKENS_FIELD",
    "temperature": "TEMPERATURE",
    "num_ctx": "OLLAMA_NUM_CTX",
    "timeout": "TIMEOUT",
    "max_attempts": "MAX_ATTEMPTS",
    "max_retry_wait": "MAX_RETRY_WAIT",
}
# The judge's own variables, read before the app's (see _sources).
_JUDGE_VARIABLES = ("PROVIDER", "MODEL", "BASE_URL", "TEMPERATURE")


def _provider_name(env: Mapping[str, str], provider: Optional[str], judge: bool) -> str:
    """The provider asked for: ``provider``, else (for the judge) EVALS_JUDGE_PROVIDER, else
    EVALS_PROVIDER; "" for none."""
    if provider is not None:
        return provider.strip().lower()
    if judge and env.get("EVALS_JUDGE_PROVIDER", "").strip():
        return env["EVALS_JUDGE_PROVIDER"].strip().lower()
    return env.get("EVALS_PROVIDER", "").strip().lower()


def _sources(env: Mapping[str, str], provider: str, judge: bool) -> Dict[str, Tuple[str, ...]]:
    """{setting: the variables it is read from, first set wins}.  The app's client reads EVALS_*.
    The judge reads EVALS_JUDGE_MODEL, _BASE_URL and _TEMPERATURE first and sends no system prompt
    and no tools (it grades); it falls back to the app's model and URL only when it uses the app's
    provider (a model name of one provider means nothing to another), never to the app's
    temperature (a judge grades at 0 unless told otherwise)."""
    sources = {key: ("EVALS_" + name,) for key, name in _VARIABLES.items()}
    if not judge:
        return sources
    same = provider == env.get("EVALS_PROVIDER", "").strip().lower()
    for key in ("model", "base_url", "temperature"):
        own = ("EVALS_JUDGE_" + _VARIABLES[key],)
        if same and key != "temperature":
            own += sources[key]
        sources[key] = own
    sources.update(system_prompt=(), tools=(), tool_choice=())
    return sources


def _resolve_settings(
    provider: str, env: Mapping[str, str], overrides: Dict[str, Any], judge: bool = False
) -> Settings:
    """Settings from ``overrides``, else the environment (see _sources), else the defaults."""
    sources = _sources(env, provider, judge)

    def pick(key: str) -> Any:
        if key in overrides:
            return overrides[key]
        for var in sources[key]:
            if env.get(var) not in (None, ""):
                return env[var]
        return None

    def number(key: str, default: Any, kind: type, minimum: float) -> Any:
        raw = pick(key)
        return _parse_number(sources[key][0], default if raw is None else raw, kind, minimum)

    max_tokens = pick("max_tokens")
    if max_tokens is not None:
        max_tokens = _parse_number("EVALS_MAX_TOKENS", max_tokens, int, 1)
    elif provider == "anthropic":
        max_tokens = ANTHROPIC_DEFAULT_MAX_TOKENS  # the API requires one
    # Ours (0, for runs that repeat) unless given, even as None: see _refusal.
    default_temperature = pick("temperature") is None and "temperature" not in overrides
    tools = _load_tools(pick("tools"))
    token_field = pick("max_tokens_field")
    if token_field not in (None,) + _TOKEN_FIELDS:
        raise ConfigError(
            "EVALS_MAX_TOKENS_FIELD must be %s, got %r" % (" or ".join(_TOKEN_FIELDS), token_field)
        )
    temperature = _parse_number(
        sources["temperature"][0], pick("temperature"), float, 0.0, allow_none=True
    )
    if default_temperature:
        temperature = DEFAULT_TEMPERATURE
    return Settings(
        provider=provider,
        model=pick("model") or DEFAULT_MODELS[provider],
        base_url=(pick("base_url") or DEFAULT_BASE_URLS[provider]).rstrip("/"),
        api_key=overrides.get("api_key"),
        system_prompt=pick("system_prompt"),
        tools=tools,
        tool_choice=_tool_choice(pick("tool_choice"), tools),
        max_tokens=max_tokens,
        temperature=temperature,
        default_temperature=default_temperature,
        token_field=token_field,
        num_ctx=number("num_ctx", OLLAMA_DEFAULT_NUM_CTX, int, 1),
        timeout=number("timeout", 60, float, 0.001),
        max_attempts=number("max_attempts", 4, int, 1),
        max_retry_wait=number("max_retry_wait", 60, float, 0.0),
        wait_when_refused=bool(overrides.get("wait_when_refused", judge)),
        env=env,
    )


_TOOL_FIELDS = ("name", "description", "parameters")


def _tool_problem(tool: Any, names: List[str]) -> Optional[str]:
    """What is wrong with one tool of an EVALS_TOOLS list (None: nothing); ``names`` are the names
    of the tools before it."""
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
    """The tools offered to the model: ``source`` is EVALS_TOOLS (the path of a JSON file) or a
    ``tools=`` list; None or an empty list: none.  Each tool is ``{"name", "description",
    "parameters"}`` (OpenAI's function shape without its wrapper; ``parameters`` a JSON Schema
    object).  ConfigError names the file and the problem."""
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
        refused: bool = False,
        rate_limits: Optional[Dict[str, str]] = None,
    ) -> None:
        super().__init__(what)
        self.what = what
        self.retryable = retryable
        self.status = status  # HTTP status; None below HTTP and for a rejected 2xx answer
        self.retry_after = retry_after  # seconds the server asked to wait, if it did
        self.refused = refused  # refused for the provider's load or rate (see _http_failure)
        self.rate_limits = rate_limits or {}  # the answer's, see _rate_limit_headers


# Each thread keeps its connections open between calls (HTTP keep-alive): a suite of hundreds
# of cases then pays the TCP and TLS handshakes once per thread, not once per case.
_KEPT = threading.local()


class _Pool(dict):
    """One thread's kept-alive connections by (scheme, host, port); closed when the thread ends
    (its thread-local data is dropped) or, for the main thread, at exit."""

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
    """Send once (a POST, or ``method``); return (status, headers, body) for any HTTP status, raise
    _Failed otherwise.

    Direct connections are kept alive per thread (http.client); through an HTTP(S) proxy from the
    environment (HTTPS_PROXY, NO_PROXY...) urllib opens one connection per call.
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
    """Seconds to wait (>= 0) from a ``Retry-After`` value: delta-seconds or an HTTP-date (RFC 9110
    section 10.2.3); ``now``: Unix time, default ``time.time()``.  None when absent or
    unparseable."""
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


def _rate_limit_headers(headers: Mapping[str, str]) -> Dict[str, str]:
    """An answer's rate-limit headers (Reply.rate_limits), names lower-cased: OpenAI's
    x-ratelimit-{limit,remaining,reset}-{requests,tokens}
    (https://platform.openai.com/docs/guides/rate-limits#rate-limits-in-headers), copied by many
    compatible servers; Anthropic's anthropic-ratelimit-*
    (https://docs.anthropic.com/en/api/rate-limits#response-headers); retry-after(-ms)."""
    found = {}
    for name, value in headers.items():
        name = name.lower()
        if name.startswith(("x-ratelimit-", "anthropic-ratelimit-")):
            found[name] = value
        elif name in ("retry-after", "retry-after-ms"):
            found[name] = value
    return found


def _attempt(
    url: str,
    headers: Dict[str, str],
    data: Optional[bytes],
    timeout: float,
    method: str = "POST",
    seen: Optional[Callable[[Dict[str, str]], Any]] = None,
) -> Any:
    """Send once (a POST, or ``method``) and return the decoded JSON of a 2xx answer; raise _Failed
    otherwise.  ``seen`` gets the rate-limit headers of a 2xx answer."""
    status, resp_headers, body = _send_once(url, headers, data, timeout, method)
    if seen is not None:
        seen(_rate_limit_headers(resp_headers))
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
    retryable = status in RETRY_STATUSES and not no_quota  # a 429 of no quota left is not
    told = headers.get("x-should-retry")
    if told in ("true", "false"):  # the server's word decides, as the official SDKs obey it
        retryable = told == "true"
    if not retryable:
        return _Failed("HTTP %d %s" % (status, detail), status=status)
    # Refused for the provider's load or rate, not broken: 429 (rate), 529 and Anthropic's
    # overloaded_error (https://docs.anthropic.com/en/api/errors), and a 503 that says when
    # to come back.  The harness may schedule such a call again (see _retrying).
    refused = (
        status in (429, 529)
        or _error_object(payload).get("type") == "overloaded_error"
        or (status == 503 and ("retry-after" in headers or "retry-after-ms" in headers))
    )
    return _Failed(
        "HTTP %d %s" % (status, detail),
        True,
        status,
        _retry_after(headers, payload),
        refused,
        _rate_limit_headers(headers),
    )


def _retry_wait(
    failure: _Failed,
    attempt: int,
    settings: Settings,
    remaining: float,
    rand_fn: Callable[[], float],
) -> Tuple[Optional[float], str]:
    """(seconds to sleep before the next attempt, "") or, when the policy says stop, (None, why).

    ``remaining`` is what is left of EVALS_MAX_RETRY_WAIT.  A Retry-After longer than that fails at
    once: waiting less than the server asked would only earn another 429.
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
    """(once(), attempts), calling ``once`` again after each retryable _Failed as the policy
    allows, sleeping between attempts (a server's Retry-After, else a backoff).  A call the
    provider refused for its load or rate is handed back at once with its ``retry_after``
    unless ``settings.wait_when_refused``: the harness schedules it again, for every client
    alike.  ``sleep_fn``, ``rand_fn``: a client's own (None: the module's, looked up per call
    so that tests can patch them).  The only place a failed request raises ProviderError, so
    every message is scrubbed of ``secret``."""
    attempt, waited = 0, 0.0
    while True:
        attempt += 1
        try:
            return once(), attempt
        except _Failed as failure:
            handed_back = failure.refused and not settings.wait_when_refused
            delay, why = None, "; handed back to be scheduled again"
            if not handed_back:
                delay, why = _retry_wait(
                    failure, attempt, settings, settings.max_retry_wait - waited, rand_fn or rand
                )
            if delay is None:
                error = ProviderError(
                    settings.provider,
                    _scrub(failure.what, secret) + why,
                    status=failure.status,
                    attempts=attempt,
                    rate_limits=failure.rate_limits,
                )
                if handed_back:
                    error.retry_after = failure.retry_after or 0.0
                raise error from None
        if delay > 0:
            (sleep_fn or sleep)(delay)
        waited += delay


# --------------------------------------------------------------------------
# Providers: one request builder and one response parser each
# --------------------------------------------------------------------------


class Parsed(NamedTuple):
    """A response parser's result: the text part, usage, the model that answered, the finish reason
    (normalised, and the provider's own word), the reasoning the provider gave apart and the tool
    calls (``{"name", "arguments"}``)."""

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
    """The conversation as ``[{"role", "content"}]`` (OpenAI's and Ollama's chat shape): a string
    is one user message; EVALS_SYSTEM_PROMPT comes first unless the conversation has a system
    message of its own.  Raises TypeError for a prompt that is neither."""
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
    messages of one role), for the APIs that take the system prompt apart (Anthropic's ``system``,
    Gemini's ``systemInstruction``) and require user and assistant turns to alternate."""
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
    ``sent`` (Reply.sent) as ``tools``; nothing when there are none.  ``choice``: the body's field
    for EVALS_TOOL_CHOICE and the function spelling it, the value sent also recorded in ``sent`` as
    ``tool_choice``; None for a provider that has no such field (Ollama)."""
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
    https://docs.anthropic.com/en/docs/agents-and-tools/tool-use/implement-tool-use#forcing-tool-use
    ."""
    if choice in TOOL_CHOICES:
        return {"type": {"required": "any"}.get(choice, choice)}
    return {"type": "tool", "name": choice}


def _gemini_tool_choice(choice: str) -> Dict[str, Any]:
    """``toolConfig``: ``{"functionCallingConfig": {"mode": "AUTO" | "ANY" | "NONE",
    "allowedFunctionNames"}}`` (https://ai.google.dev/gemini-api/docs/function-calling and
    https://ai.google.dev/api/caching#FunctionCallingConfig): a tool's name is mode ANY with that
    one name allowed."""
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
    """One tool call as ``{"name", "arguments"}``: arguments sent as a JSON string are parsed; a
    string that is not a JSON object stays the raw string (the model's answer: evals' checks report
    it), an empty one or none at all is ``{}``."""
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
    """How each provider takes the key (its request builder's docstring cites the source), for its
    model calls and its batch API alike."""
    if provider == "anthropic":
        return {"x-api-key": key or "", "anthropic-version": ANTHROPIC_VERSION}
    if provider == "gemini":
        return {"x-goog-api-key": key or ""}
    return {"Authorization": "Bearer " + key} if key else {}


def _usage(
    input_tokens: Any, output_tokens: Any, **more: Any
) -> Optional[Dict[str, Optional[int]]]:
    """``{"input_tokens", "output_tokens"}`` and the counts in ``more`` that are integers; None
    when neither main count is one."""

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
    """A provider's finish reasons: ``field``, the name of the field that holds it; ``normal``, its
    words normalised (the module docstring's table); ``errors``, the words that mean no answer,
    each with the error ("%s" becomes the field and the word)."""

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

    A truncation, a content filter and a refusal are answers: the text there is (a refusal with no
    text: the provider's refusal message, if any).  A reason in ``reasons.errors`` raises _Failed,
    and so does a reply with no text field unless it has tool calls or ends for one of
    _TEXTLESS_ANSWERS: an error is never returned as model output.
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
    """``POST {base}/chat/completions`` (Authorization: Bearer, none without a key) with
    ``{"model", "messages", "temperature", the token cap (:func:`_token_field`), "tools",
    "tool_choice"}``: https://platform.openai.com/docs/api-reference/chat/create ."""
    sent = _sampling(settings, _token_field(settings))
    body = dict(
        {"model": settings.model, "messages": _chat_messages(settings, prompt)}, **_present(sent)
    )
    _offer_tools(settings, body, sent, _function_tools, ("tool_choice", _openai_tool_choice))
    return Request(_root(settings) + "/chat/completions", _key_headers("openai", key), body, sent)


def _openai_tool_calls(message: Mapping[str, Any]) -> List[Dict[str, Any]]:
    """``message.tool_calls[].function`` (``{"name", "arguments": JSON string}``; Ollama's
    arguments are an object), or else the deprecated ``message.function_call``:
    https://platform.openai.com/docs/api-reference/chat/object#chat/object-choices .  Any other
    shape (a bare call object, a call that is not an object) is _Failed, never no call."""
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
    """The answer of a chat completion object ``{"model", "choices": [{"message": {"content",
    "refusal", "tool_calls"}, "finish_reason"}], "usage"}``
    (https://platform.openai.com/docs/api-reference/chat/object).  Compatible servers give the
    thinking apart in ``message.reasoning`` or ``reasoning_content``
    (https://docs.vllm.ai/en/latest/features/reasoning_outputs/).  _Failed: no choices, or
    neither text nor tool calls in an answer that is no refusal, truncation or filtered one."""
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
    (https://docs.anthropic.com/en/docs/agents-and-tools/tool-use/implement-tool-use); a tool with
    no parameters takes an empty object, as input_schema is required."""
    return [
        dict(
            {field: tool[field] for field in ("name", "description") if field in tool},
            input_schema=tool.get("parameters") or {"type": "object", "properties": {}},
        )
        for tool in tools
    ]


def anthropic_request(settings: Settings, prompt: Prompt, key: Optional[str]) -> Request:
    """``POST {base}/messages`` (``x-api-key``, ``anthropic-version: 2023-06-01``) with
    ``{"model", "max_tokens", "messages", "system", "temperature", "tools", "tool_choice"}``:
    the system messages joined into ``system``, consecutive messages of one role merged (the
    roles must alternate).  https://docs.anthropic.com/en/api/messages ,
    https://docs.anthropic.com/en/docs/agents-and-tools/tool-use/overview ,
    https://docs.anthropic.com/en/api/versioning ."""
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
    """The answer of a Messages response ``{"model", "content": [text | thinking | tool_use
    blocks], "stop_reason", "usage"}`` (https://docs.anthropic.com/en/api/messages ,
    https://docs.anthropic.com/en/docs/agents-and-tools/tool-use/implement-tool-use ,
    https://docs.anthropic.com/en/docs/build-with-claude/extended-thinking); ``input_tokens``
    leaves out the cached tokens, counted apart
    (https://docs.anthropic.com/en/docs/build-with-claude/prompt-caching).  _Failed: not an
    object, ``pause_turn``, or neither a text nor a tool_use block in an answer that is no
    refusal or truncation."""
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
    declarations = []
    for tool in tools:
        declaration = {field: tool[field] for field in ("name", "description") if field in tool}
        if "parameters" in tool:
            declaration["parametersJsonSchema"] = tool["parameters"]
        declarations.append(declaration)
    return [{"functionDeclarations": declarations}]


def gemini_request(settings: Settings, prompt: Prompt, key: Optional[str]) -> Request:
    """``POST {base}/models/{model}:generateContent`` (or ``tunedModels/``), the key in
    ``x-goog-api-key`` (https://ai.google.dev/gemini-api/docs/api-key), with ``{"contents":
    [{"role": "user" | "model", "parts"}], "systemInstruction", "generationConfig", "tools",
    "toolConfig"}``: consecutive messages of one role are one turn's parts
    (https://ai.google.dev/api/generate-content ,
    https://ai.google.dev/gemini-api/docs/function-calling).  Parameters go in
    ``parametersJsonSchema`` (https://ai.google.dev/api/caching#FunctionDeclaration):
    ``parameters`` takes an OpenAPI subset that refuses ``additionalProperties``, ``const`` or
    ``$schema`` with HTTP 400."""
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
    """The answer of a GenerateContentResponse ``{"candidates": [{"content": {"parts"},
    "finishReason"}], "promptFeedback", "usageMetadata", "modelVersion"}``
    (https://ai.google.dev/api/generate-content#v1beta.GenerateContentResponse ,
    https://ai.google.dev/api/caching#FunctionCall).  Thought parts are the reasoning
    (https://ai.google.dev/gemini-api/docs/thinking); output_tokens counts candidates and
    thoughts tokens, both billed as output.  _Failed: not an object, a blocked prompt, no
    candidates, a finish reason of no answer, or neither text nor a function call."""
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
    """``POST {root}/api/chat`` with ``{"model", "messages", "stream": false, "options":
    {"temperature", "num_predict", "num_ctx"}, "tools"}`` (https://docs.ollama.com/api/chat): the
    native API, as the OpenAI-compatible one cannot set the context size and Ollama cuts a
    longer prompt without an error.  The root is EVALS_BASE_URL without a trailing ``/v1`` or
    ``/api``.  Ollama has no ``tool_choice``: EVALS_TOOL_CHOICE sends nothing."""
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
    """The answer of a chat response ``{"model", "message": {"content", "thinking",
    "tool_calls"}, "done_reason", "prompt_eval_count", "eval_count"}``
    (https://docs.ollama.com/api/chat ,
    https://github.com/ollama/ollama/blob/main/docs/api.md#chat-request-with-tools).  _Failed:
    not an object, a prompt that may have been cut to fit ``sent["num_ctx"]``, or neither text
    nor tool calls in an answer not cut at num_predict."""
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
            _say("my_client: %s %s\n" % (settings.model, why))


def _ours(settings: Settings) -> List[str]:
    """The Settings fields the user left to us, which a model may refuse: the temperature when it
    is DEFAULT_TEMPERATURE, the token cap's name when EVALS_MAX_TOKENS_FIELD is unset."""
    ours = []
    if settings.default_temperature:
        ours.append("temperature")
    if settings.token_field is None:
        ours.append("token_field")
    return ours


def _refusal(
    settings: Settings, sent: Mapping[str, Any], error: ProviderError
) -> Optional[Tuple[Dict[str, Any], str]]:
    """(Settings changes, why) when ``error`` is the model refusing a field that we chose, not the
    user: then the call is made again without it.  None for any other error.

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

    Thread-safe: it holds only immutable settings.  Build one with :func:`make_client`.
    """

    accepts_conversations = True  # a prompt may be a list of messages (evals reads this)

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

    def identity(self) -> str:
        """What decides an answer besides the prompt, for the harness's cache key: the provider,
        the URL (without credentials) and the JSON body the client sends for an empty prompt
        without its messages (model, temperature, token cap, tools, tool choice, num_ctx...), and
        the system prompt; JSON with sorted keys.  Never the key."""
        s = self.settings
        request = _ADAPTERS[s.provider][0](s, "", None)
        body = {k: v for k, v in request.body.items() if k not in ("messages", "contents")}
        return json.dumps(
            {
                "provider": s.provider,
                "url": _without_credentials(request.url),
                "body": body,
                "system_prompt": s.system_prompt,
            },
            sort_keys=True,
        )

    def __call__(self, prompt: Prompt, *, attempt: int = 0) -> Reply:
        """Send ``prompt`` (a str or a conversation) and return the :class:`Reply`.
        ``attempt``, the repeat index evals passes, changes nothing here.  A default the model
        refuses (:func:`_refusal`) costs one more request, made without it.

        Raises:
            ConfigError: the provider needs a key and none is set.
            ProviderError: see docs/clients.md ("Errors"); ``retry_after`` set for a refusal
                handed back.
            TypeError: a prompt that is neither a str nor a conversation.
        """
        s, key, spent = self.settings, _read_key(self.settings), 0
        build, parse = _ADAPTERS[s.provider]
        while True:  # ends: see _refusal
            request = build(_for_model(s), prompt, key)
            data = json.dumps(request.body).encode("utf-8")
            headers = dict(
                request.headers,
                **{"Content-Type": "application/json", "Accept": "application/json"},
            )
            limits = []  # type: List[Dict[str, str]]

            def once() -> Parsed:
                answer = _attempt(request.url, headers, data, s.timeout, seen=limits.append)
                return parse(answer, request.sent)

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
        reply = _reply(parsed, s, request.sent, spent + attempts)
        reply.rate_limits = limits[-1]
        return reply

    def batch(
        self,
        requests: List[Tuple[str, Prompt]],
        resume: Optional[str] = None,
        on_submitted: Optional[Callable[[str], Any]] = None,
    ) -> Mapping[str, Any]:
        """Send ``requests`` ([(custom_id, prompt)]) through the provider's batch API, or with
        ``resume`` collect the batch of that id; return {custom_id: Reply or ProviderError}. See
        my_client_batches.batch, the companion file beside this one."""
        import my_client_batches

        return my_client_batches.batch(self.settings, requests, resume, on_submitted)


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
# Factory and entry point
# --------------------------------------------------------------------------

_OVERRIDES = frozenset(_VARIABLES) | {"api_key", "wait_when_refused", "sleep", "rand", "env"}


def make_client(provider: Optional[str] = None, **overrides: Any) -> Callable[[str], Reply]:
    """Build a client: a thread-safe callable ``client(prompt) -> Reply``, the prompt a str or a
    conversation (a list of ``{"role", "content"}``), with ``accepts_conversations = True`` and
    ``identity()``.  ``provider``: ``openai``, ``anthropic``, ``gemini``, ``ollama``, or None to
    read EVALS_PROVIDER.  ``overrides`` take precedence over the environment: each EVALS_* setting
    by its lower-case name (``model``, ``base_url``, ``tools``, ``max_tokens``, ``temperature``...;
    see _VARIABLES), ``api_key`` (else the key variable is read on every call),
    ``wait_when_refused`` (see _retrying), ``sleep``, ``rand`` and ``env`` (a mapping used instead
    of ``os.environ``).  docs/clients.md lists them all.

    Raises:
        ConfigError: no provider (EVALS_PROVIDER unset, empty or ``replay``: evals.py
            replays recordings itself), unknown provider (lists the known ones), an unparseable
            number, a tools file that is not a list of tools or a tool choice that is none
            of the choices nor an offered tool's name.  A missing key
            is reported on the first call.
        TypeError: unknown override name.
    """
    return _build(provider, overrides, judge=False)


def make_judge(provider: Optional[str] = None, **overrides: Any) -> Callable[[str], Reply]:
    """Build a judge client ``judge(prompt) -> Reply``: as :func:`make_client`, reading
    EVALS_JUDGE_PROVIDER, _MODEL, _BASE_URL and _TEMPERATURE first (see _sources), with no system
    prompt and no tools, and waiting out the provider's refusals itself (it is called while a case
    is scored, where the harness cannot schedule it again).  No provider (or ``replay``) is a
    ConfigError: evals.py replays recorded judge replies itself."""
    return _build(provider, overrides, judge=True)


def _build(provider: Optional[str], overrides: Dict[str, Any], judge: bool) -> Client:
    """:func:`make_client`, or with ``judge`` :func:`make_judge`."""
    unknown = set(overrides) - _OVERRIDES
    if unknown:
        raise TypeError("make_client() got unknown option(s): %s" % ", ".join(sorted(unknown)))
    overrides = dict(overrides)
    env = overrides.pop("env", None)
    if env is None:
        env = os.environ
    sleep_fn = overrides.pop("sleep", None)
    rand_fn = overrides.pop("rand", None)
    name = _provider_name(env, provider, judge)
    if name in _REPLAY_NAMES and judge:
        raise ConfigError(
            "no judge provider configured (EVALS_JUDGE_PROVIDER and EVALS_PROVIDER %s): set "
            "EVALS_JUDGE_PROVIDER to one of %s to call a judge model; python evals.py replays "
            "recorded judge replies by itself"
            % ("say replay" if name else "unset", ", ".join(PROVIDERS))
        )
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
        source = "provider %r" % name
        if provider is None:
            source = "EVALS_PROVIDER=%r" % name
        raise ConfigError(
            "unknown %s; known providers: %s (unset EVALS_PROVIDER for evals.py to replay "
            "recordings offline)" % (source, ", ".join(PROVIDERS))
        )
    settings = _resolve_settings(name, env, overrides, judge)
    return Client(settings, sleep_fn=sleep_fn, rand_fn=rand_fn)


# What configures the clients built from the environment, one client kept per configuration.
_ENV_VARS = ("EVALS_PROVIDER",) + tuple("EVALS_" + name for name in _VARIABLES.values())
_JUDGE_ENV_VARS = tuple("EVALS_JUDGE_" + name for name in _JUDGE_VARIABLES) + _ENV_VARS
_clients = {}  # type: Dict[Tuple[Any, ...], Client]
_clients_lock = threading.Lock()


def _env_client(judge: bool = False) -> Client:
    """The client the environment configures (the judge's with ``judge``), built once per
    configuration (keys excluded: they are read on every call), saying once on stderr which
    provider, model and URL it calls, so that a run's log shows what it talked to."""
    names = _ENV_VARS
    if judge:
        names = _JUDGE_ENV_VARS
    config = (judge, os.getcwd()) + tuple(os.environ.get(name) for name in names)
    with _clients_lock:
        client = _clients.get(config)
        if client is None:
            client = _clients[config] = _build(None, {}, judge)
            s = client.settings
            _say(
                "my_client: %s calls %s model %s at %s\n"
                % (
                    "judge" if judge else "ask",
                    s.provider,
                    s.model,
                    _without_credentials(s.base_url),
                )
            )
        return client


def ask(prompt: Prompt, *, attempt: int = 0) -> Reply:
    """Answer ``prompt`` (a str or a conversation) with the model the environment configures:
    what ``python evals.py`` calls, once per case and repeat, maybe from several threads; it
    passes ``attempt`` (the repeat index) as this signature names it.  A call the provider
    refuses for its load or rate raises ProviderError with ``retry_after`` at once, for the
    harness to schedule again.  With no provider (evals.py replays recordings itself then) it
    raises ConfigError; see docs/clients.md."""
    return _env_client()(prompt, attempt=attempt)


def _ask_identity() -> str:
    """``ask.identity``: :meth:`Client.identity` of the client configured in the environment (the
    harness's cache key).  Raises ConfigError when no provider is configured."""
    return _env_client().identity()


def _ask_batch(
    requests: List[Tuple[str, Prompt]],
    resume: Optional[str] = None,
    on_submitted: Optional[Callable[[str], Any]] = None,
) -> Mapping[str, Any]:
    """``ask.batch``: :meth:`Client.batch` of the client configured in the environment (what
    ``python evals.py --batch`` calls).  Raises ConfigError when no provider is configured."""
    return _env_client().batch(requests, resume, on_submitted)


ask.accepts_conversations = True  # type: ignore[attr-defined]  # evals passes conversations
ask.identity = _ask_identity  # type: ignore[attr-defined]
ask.batch = _ask_batch  # type: ignore[attr-defined]


# --------------------------------------------------------------------------
# Judge: the model that grades evals.py's `judge` checks
# --------------------------------------------------------------------------


def prompt_key(prompt: str) -> str:
    """The key of a judge recording: sha256 hex of the prompt's UTF-8 bytes."""
    return hashlib.sha256(prompt.encode("utf-8")).hexdigest()


_record_lock = threading.Lock()


def _record(path: str, row: Dict[str, Any]) -> None:
    """Append one JSON line to ``path`` with a single O_APPEND write, the value of every credential
    variable (8 characters or more) in it said ``[redacted]``: a reply that echoes a key keeps it
    out of the file."""
    line = _masked(json.dumps(row, ensure_ascii=False, default=repr))
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    data = (line + "\n").encode("utf-8")
    with _record_lock:
        handle = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            while data:
                data = data[os.write(handle, data) :]
        finally:
            os.close(handle)


def _judge_model() -> str:
    """What the judge is, everything that changes its verdicts: provider and model, URL (no
    credentials), temperature and token cap ("openai:gpt-4o-mini https://... temperature=0.0
    max_tokens=None"), or "replay". Part of evals' judge cache key, so that changing any of them
    never reuses another judge's cached verdicts."""
    if _provider_name(os.environ, None, judge=True) in _REPLAY_NAMES:
        return "replay"
    s = _env_client(judge=True).settings
    return "%s:%s %s temperature=%s max_tokens=%s" % (
        s.provider,
        s.model,
        _without_credentials(s.base_url),
        s.temperature,
        s.max_tokens,
    )


def judge(prompt: str) -> Reply:
    """Answer a judge prompt from evals.py (``--judge my_client:judge``) with the client
    :func:`make_judge` builds from the environment.  With no provider it raises ConfigError
    (evals.py replays ``judge_recordings.jsonl`` itself then, and does not call it).
    ``EVALS_JUDGE_RECORD=FILE`` appends every live reply to FILE as ``{"key": sha256 of the prompt,
    "reply"}``, the lines evals.py replays offline later.

    The prompt holds the case's input and the output being graded: with a live provider they are
    sent to that provider.
    """
    reply = _env_client(judge=True)(prompt)
    record = os.environ.get("EVALS_JUDGE_RECORD")
    if record:
        _record(record, {"key": prompt_key(prompt), "reply": str(reply), "model": reply.model})
    return reply


judge.judge_model = _judge_model  # type: ignore[attr-defined]
