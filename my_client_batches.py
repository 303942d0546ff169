"""my_client_batches: provider batch APIs for my_client (``python evals.py --batch``).

``my_client.Client.batch`` and ``my_client.ask.batch`` import this file when a batch is sent: it
sends many prompts in one batch through OpenAI's Batch API or Anthropic's Message Batches API,
each request the body a live call would send, polls until the batch ends (within 24 hours, at
half the price) and reads each answer with the live call's parser.  Copy it beside my_client.py
to use batches; see docs/live-runs.md.

evals 0.4.0, MIT licence (see LICENSE). Python 3.9 or newer, standard library only.
"""

import collections.abc
import functools
import json
import os
import sys
import tempfile
import threading
import urllib.parse
import urllib.request
from typing import Any, Callable, Dict, List, Mapping, NamedTuple, Optional, Tuple

import my_client
from my_client import (
    _ADAPTERS,
    ConfigError,
    Parsed,
    Prompt,
    ProviderError,
    Request,
    Settings,
    _attempt,
    _error_message,
    _error_object,
    _Failed,
    _for_model,
    _http_failure,
    _key_headers,
    _parse_number,
    _read_key,
    _reply,
    _retrying,
    _root,
    _scrub,
    _truncate,
    _urllib_send,
    _uses_proxy,
)

__all__ = ["batch"]


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
                my_client._say("\r%s" % line.ljust(len(shown)) if tty else line + "\n")
                shown = line
            if ended:
                return batch
            my_client.sleep(interval)  # looked up per poll: tests patch it
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


def batch(
    settings: Settings,
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

    The batch API's own calls wait out the provider's refusals: a batch cannot be scheduled
    again call by call.
    """
    s = _for_model(settings)._replace(wait_when_refused=True)
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
            "once (evals: --shard K/N)" % (s.provider, BATCH_MAX_REQUESTS[s.provider], len(built))
        )
    interval = _poll_interval(s)  # a bad EVALS_BATCH_POLL_S is refused before submitting
    batch_id = resume or api.submit(s, key, built)
    if resume is None and on_submitted is not None:
        on_submitted(batch_id)
    last = _poll_batch(api, s, key, batch_id, interval)
    answers = _BatchAnswers(api, s, key, built, parse, api.missing(last))
    for url in api.result_urls(s, last):
        answers.download(url)
    return answers.index()
