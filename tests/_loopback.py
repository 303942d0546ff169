"""A scripted HTTP server on 127.0.0.1 for testing model adapters.

Each POST is recorded (path, lower-cased headers, parsed JSON body) and
answered with the next scripted response; when the script is empty the server
answers 599 so that an unexpected extra request is obvious in a failure.

Scripted responses are dicts:
    {"status": 200, "json": {...}}                  JSON body
    {"status": 502, "body": b"<html>", "headers": {"Retry-After": "2"}}
    {"delay": 0.5, ...}                             sleep before answering
    {"reset": True}                                 close the socket with RST, no answer
    {"drop_after": True, ...}                       answer, then close the kept-alive
                                                    connection without telling the client
Each recorded request also has "peer": the client's port, which tells connections apart,
"at": when it arrived (time.monotonic()), and "in_flight": the requests being answered then,
itself included.

Instead of a script, ``behave(respond)`` makes the server act like a provider: each request
the script does not answer is answered with ``respond(request)``, an action as above computed
from the recorded request (its path, headers and JSON body). ``PromptServer(behave)`` is an
OpenAI-compatible chat server acting by prompt: ``behave(prompt, n)`` gives the action for the
n-th request (1-based) carrying that prompt.
"""

import http.server
import json
import socket
import struct
import threading
import time

MAX_DELAY = 2.0  # seconds; scripted delays are clamped so a test cannot hang


def answer(handler, action, max_delay=MAX_DELAY):
    """Carry out one scripted action on a BaseHTTPRequestHandler (see the module docstring)."""
    if action.get("delay"):
        time.sleep(min(float(action["delay"]), max_delay))
    if action.get("reset"):
        # SO_LINGER with a zero timeout makes close() send a TCP RST.
        handler.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        handler.close_connection = True
        handler.connection.close()
        return
    if "json" in action:
        payload = json.dumps(action["json"]).encode("utf-8")
        content_type = "application/json"
    else:
        payload = action.get("body", b"")
        content_type = "text/html"
    try:
        handler.send_response(action.get("status", 200))
        handler.send_header("Content-Type", content_type)
        handler.send_header("Content-Length", str(len(payload)))
        for name, value in (action.get("headers") or {}).items():
            handler.send_header(name, value)
        handler.end_headers()
        handler.wfile.write(payload)
    except OSError:  # the client gave up (timeout test)
        handler.close_connection = True


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # as production servers do (TCP_NODELAY)

    def log_message(self, format, *args):  # keep test output quiet
        pass

    def do_POST(self):
        server = self.server
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw.decode("utf-8")) if raw else None
        except ValueError:
            body = raw
        request = {
            "path": self.path,
            "headers": {k.lower(): v for k, v in self.headers.items()},
            "json": body,
            "peer": self.client_address[1],
            "at": time.monotonic(),
        }
        with server.lock:
            server.in_flight += 1
            request["in_flight"] = server.in_flight
            server.requests.append(request)
            action = server.script.pop(0) if server.script else None
            respond = server.respond
        try:
            if action is None:
                action = respond(request) if respond else {
                    "status": 599,
                    "json": {"error": {"message": "loopback: no scripted response left"}},
                }
            answer(self, action, server.max_delay)
        finally:
            with server.lock:
                server.in_flight -= 1
        if action.get("drop_after"):
            self.close_connection = True


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 64  # a run's workers may all connect at once

    def handle_error(self, request, client_address):  # resets and timeouts are expected
        pass


class LoopbackServer:
    """Start with ``start()``, script with ``add(...)``, stop with ``stop()``."""

    def __init__(self, max_delay=MAX_DELAY):
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.lock = threading.Lock()
        self._server.requests = []
        self._server.script = []
        self._server.respond = None
        self._server.in_flight = 0
        self._server.max_delay = max_delay
        # stop() waits for the loop's next poll: 5 ms, not 50, at each of some 150 servers a suite
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.005}, daemon=True)

    def start(self):
        self._thread.start()
        return self

    def stop(self):
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    @property
    def url(self):
        host, port = self._server.server_address[:2]
        return "http://%s:%d" % (host, port)

    def add(self, *actions):
        with self._server.lock:
            self._server.script.extend(actions)

    def behave(self, respond):
        """Answer each request the script does not with ``respond(request) -> action``."""
        with self._server.lock:
            self._server.respond = respond

    @property
    def requests(self):
        with self._server.lock:
            return list(self._server.requests)


def prompt_of(body):
    """The last message's content of a chat-completions request body, or '<unreadable>'."""
    try:
        return body["messages"][-1]["content"]
    except (KeyError, IndexError, TypeError):
        return "<unreadable>"


class PromptServer(LoopbackServer):
    """A started chat-completions server (its url ends in /v1) acting by prompt:
    ``behave(prompt, n)`` gives the action for the n-th request (1-based) carrying ``prompt``."""

    def __init__(self, behave, max_delay=MAX_DELAY):
        super().__init__(max_delay)
        self._behave, self._counts = behave, {}
        self.behave(self._respond)
        self.start()

    def _respond(self, request):
        prompt = prompt_of(request["json"])
        with self._server.lock:
            self._counts[prompt] = number = self._counts.get(prompt, 0) + 1
        return self._behave(prompt, number)

    @property
    def url(self):
        return super().url + "/v1"

    def counts(self):
        """Requests per prompt."""
        with self._server.lock:
            return dict(self._counts)

    def log(self):
        """(arrival time, prompt, requests in flight) of each request, in arrival order."""
        return [(r["at"], prompt_of(r["json"]), r["in_flight"]) for r in self.requests]


def unused_port():
    """A loopback port with nothing listening (for connection-refused tests)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return port
