#!/usr/bin/env python3
"""Benchmarks for evals.py: live calls, offline re-scoring, CLI startup.

Prints figures and a PASS/MISS summary; it is a script, not a unit test. Speed and memory are
given as RATIOS against a baseline measured in the same run (a plain standard-library loop, a
bound computed from the server's log, or a bare `python -c pass`), so that a slow or busy
machine moves both sides alike.

    python benchmarks/bench.py                 # full run (N=1000, 100,000 re-scored cases)
    python benchmarks/bench.py --quick         # N=200, 20,000 re-scored cases, 1 round
    python benchmarks/bench.py --n 1000 --latency 0.2 --concurrency 1,8,32 --rounds 3
    python benchmarks/bench.py --evals 15ff8ea=git:15ff8ea --evals start=git:8998a38 \\
        --evals now=evals.py                   # before/after, side by side, in one run
    python benchmarks/bench.py --evals main=git:main --evals now=evals.py \\
        --skip throughput --skip rescore --skip startup   # the rate-limited parts only
    python benchmarks/bench.py --skip throughput --skip 429 --skip limited --skip rescore \\
        --skip startup --rounds 3              # the matrix only

--evals [LABEL=]PATH or [LABEL=]git:REV (repeatable; default: this repository's evals.py)
names each copy of evals.py to measure; every part runs for every copy in the same run and
prints them side by side. A plain path is labelled with its file name, a plain git:REV with
REV. Each copy runs from a scratch folder holding only its evals.py, its evals_extras.py (the
optional file beside the core; older copies have none) and a my_client.py. For a PATH they are
taken from the path's folder, my_client.py from this repository when that folder has none; for
git:REV they are extracted with `git show REV:FILE` from this repository, my_client.py too (an
older my_client.py may import evals, which the scratch folder provides), this repository's
my_client.py when the revision has none. The copy labelled `15ff8ea` is the reference of the
re-scoring comparison below.

--rounds R (2; --quick: 1): each live and each re-scoring command runs R times, interleaved
with the others (the order reversed every other round), and its fastest run counts: noise from
the machine's other work only ever adds time. Every round's time is printed.

1. Live calls: a loopback (127.0.0.1) OpenAI-compatible server answers every chat completion
   after a fixed latency (0.2 s). `python EVALS --cases CASES --client my_client:ask -j C
   --out RECORD` runs N cases (1,000) against it through the copy's adapter
   (EVALS_PROVIDER=openai) at each concurrency C (8 and 32), keeping the journal of its answers
   as a live run does. The baseline is the PLAIN THREAD-POOL LOOP (PLAIN_LOOP, kept in
   this file and run as its own script like evals): it reads the same case file and sends the
   same N chat completions to the same server with concurrent.futures.ThreadPoolExecutor(C),
   each worker thread keeping ONE connection alive (http.client, the library under
   urllib.request), as my_client.py's adapter does; urllib.request alone would open a
   connection per request. Both walls include the interpreter's start. Target at each C:
   evals' wall / the loop's wall <= 1.05. Also printed: wall / the physical limit
   ceil(N / C) x latency (target at the highest C: <= 1.10), the requests the server saw
   (exactly N) and its peak of requests in flight.
1b. Rate limited: the same server answers 20% of requests 429 with Retry-After 1 s (seeded
   by prompt and the n-th request carrying it, so every run meets the same refusals); 200
   cases at -j 16.  The bound is the highest of lower bounds taken from the server's log of
   the requests it refused: each case's retry chain (its refusals x 1 s, a refusal being
   answered at once, then the latency of its answer) added to the earliest time its place in
   the case file lets it start (floor(A / 16) x latency, A: the cases before it whose first
   request was answered), and ceil(answers / 16) x latency.  The longest chain alone is
   printed too.  Target: wall <= 1.3 x the bound; the server's peak of requests in flight
   reaches 16.  One run per copy.
1c. At the provider's limit: a loopback server enforcing rate-limit buckets as OpenAI
   documents them (60 requests and 4,500 tokens a "minute" of 6 s, each a bucket refilling
   continuously; a request is counted at admission as its prompt tokens plus its token cap, 99
   here, and refused 429 when it does not fit), sending x-ratelimit-* headers; then the same
   with Anthropic's anthropic-ratelimit-* names (input and output tokens apart). 150 cases at
   -j 16.  The physical bound: the last request admitted as soon as every bucket holds its cost,
   plus the latency.  Targets: every case answered (exit 0), wall <= 1.15 x the bound, at most
   5 % of requests refused.  Then the OpenAI buckets with the limits hidden, as many
   OpenAI-compatible gateways do: no x-ratelimit-* headers, and a 429 with Retry-After only, or
   a bare 429; the run must learn the limits from the refusals.  Targets: every case answered,
   wall <= 1.3 x the bound, at most 15 % of requests refused.  One run per copy and flavour.
1d. A matrix: `python EVALS matrix --variants VARIANTS -j 16 --out-dir DIR` runs 3 variants of
   my_client (model-a, model-b, model-c: EVALS_MODEL in each variant's env) x 200 cases, each
   variant a normal run in a process of its own, one after another, against one loopback
   server answering after 50 ms (not --latency).  First without a rate limit: the bound is the
   three runs' latency bounds added, 3 x ceil(200 / 16) x latency (1.95 s).  Then with a
   requests limit the three share (part 1c's bucket: 120 requests a 6 s "minute", 20 a
   second, x-ratelimit-* headers): the bound is the 600th request admitted as soon as the
   bucket holds it, plus the latency ((600 - 120) / 20 + 0.05 = 24.05 s).  Target: wall <= 1.1
   x the bound, every request answered, exit 0.  A copy without the matrix command is skipped
   with a note.  R rounds per copy, the best counted.
2. Re-scoring: N generated cases (100,000) with 5 checks each and their recorded outputs
   (written to disk as they are generated, so N=1,000,000 works).  `python EVALS --rescore
   recordings.jsonl --out RECORD --no-history -q` scores them and writes its run record; the
   MINIMAL LOOP (a short stdlib script kept in this file) reads the same two files, scores the
   same five check kinds with plain code and streams a JSON Lines record (id, status, output,
   reasons of the failed checks).  Both must count the same passed cases (MISMATCH is printed
   otherwise).  Wall time, CPU time (user + system) and peak RSS of each are measured in a
   fresh wrapper process (RUSAGE_CHILDREN); the CPU time, printed beside the wall time, is
   less moved by other work on the machine.  Targets, evals / loop: time (wall) <= 2.0 x,
   memory <= 2.0 x; when a copy is labelled `15ff8ea`, each copy's time / its time is printed
   and every other copy must be faster (< 1.0).  Absolute targets: < 10 s and < 300 MB below 1,000,000
   cases; peak RSS < 1024 MB at >= 1,000,000.
3. Startup: median wall time of `python EVALS --help` over 10 runs.  Target < 100 ms; when
   missed, the slowest imports of `python -X importtime` are listed.  Also `python -m evals
   --help` from cached bytecode.  And the startup RATIO: median of `python EVALS --version`
   over 10 runs against the median of `python -c pass` over 10 runs, the two interleaved.
   Target: <= 2.0 x.

Standard library only; every subprocess runs with a time limit, every loop is bounded, and
the only server is on 127.0.0.1.
"""

import argparse
import functools
import http.server
import json
import math
import os
import random
import shlex
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EVALS = os.path.join(ROOT, "evals.py")
KEY = "dummy"

print = functools.partial(print, flush=True)  # noqa: A001 - figures appear as they are measured

THROUGHPUT_TARGET = 1.10  # x the physical limit, at the highest concurrency
LOOP_RATIO_TARGET = 1.05  # live wall time / the plain thread-pool loop's, at each concurrency
RESCORE_SECONDS_TARGET = 10.0  # below RESCORE_LARGE cases
RESCORE_MB_TARGET = 300.0  # below RESCORE_LARGE cases
RESCORE_LARGE = 1000000
RESCORE_LARGE_MB_TARGET = 1024.0  # at RESCORE_LARGE cases or more
RESCORE_TIME_RATIO_TARGET = 2.0  # evals / minimal loop
RESCORE_MEMORY_RATIO_TARGET = 2.0  # evals / minimal loop
STARTUP_MS_TARGET = 100.0
VERSION_RATIO_TARGET = 2.0  # python EVALS --version / python -c pass
RATE_LIMITED_SHARE = 0.2  # of requests answered 429
RATE_LIMITED_RETRY_AFTER = 1.0  # seconds
RATE_LIMITED_CASES = 200
RATE_LIMITED_CONCURRENCY = 16
RATE_LIMITED_TARGET = 1.3  # x the bound set by the longest retry chain


# ---------------------------------------------------------------------------------------------
# Loopback OpenAI-compatible server
# ---------------------------------------------------------------------------------------------


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # TCP_NODELAY, as production HTTP servers set it: without it the body, written after the
    # headers, waits for the client's delayed ACK on a kept-alive connection (about 40 ms).
    disable_nagle_algorithm = True

    def log_message(self, format, *args):
        pass

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        server = self.server
        refused = server.refuse(body) if server.refuse else False
        with server.lock:
            server.count += 1
            server.in_flight += 1
            server.peak = max(server.peak, server.in_flight)
        if not refused:  # a refusal is answered at once, as providers do
            time.sleep(server.latency)
        with server.lock:  # before answering: the client's next request may follow at once
            server.in_flight -= 1
        try:
            payload = server.refusal if refused else server.body
            self.send_response(429 if refused else 200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            if refused:
                self.send_header("Retry-After", "%g" % server.retry_after)
            self.end_headers()
            self.wfile.write(payload)
        except OSError:
            self.close_connection = True


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 1024  # listen() backlog: 32+ connections arrive at once

    def handle_error(self, request, client_address):
        pass


class _Serving:
    """A loopback server (`self.server`) served by a thread while in a `with` block."""

    def __enter__(self):
        self.thread = threading.Thread(target=self.server.serve_forever,
                                       kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)

    @property
    def url(self):
        return "http://127.0.0.1:%d/v1" % self.server.server_address[1]


class ChatServer(_Serving):
    """Answers every POST with one chat completion after `latency` seconds; counts requests."""

    def __init__(self, latency):
        self.server = _Server(("127.0.0.1", 0), _Handler)
        self.server.latency = latency
        self.server.lock = threading.Lock()
        self.server.count = 0
        self.server.in_flight = 0
        self.server.peak = 0
        self.server.refuse = None  # body -> True to answer 429 (see RateLimitedServer)
        self.server.body = json.dumps({
            "id": "chatcmpl-bench", "object": "chat.completion", "model": "gpt-4o-mini",
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": "OK: the answer is 42."}}],
            "usage": {"prompt_tokens": 12, "completion_tokens": 7, "total_tokens": 19},
        }).encode("utf-8")

    def reset(self):
        with self.server.lock:
            self.server.count = 0
            self.server.peak = 0

    def stats(self):
        with self.server.lock:
            return self.server.count, self.server.peak


class RateLimitedServer(ChatServer):
    """ChatServer answering a `share` of requests 429 with Retry-After `retry_after` s. Which
    ones is seeded per (prompt, n-th request carrying it), so every run and every copy of
    evals.py meets the same refusals whatever order its requests arrive in. `log` holds
    (prompt, refused) of every request, in order of arrival."""

    def __init__(self, latency, share, retry_after, seed):
        super().__init__(latency)
        self.server.retry_after = retry_after
        self.server.refusal = json.dumps({"error": {
            "message": "Rate limit reached for requests", "type": "requests",
            "code": "rate_limit_exceeded"}}).encode("utf-8")
        self.log, self.seen = [], {}

        def refuse(body):
            prompt = json.loads(body.decode("utf-8"))["messages"][-1]["content"]
            with self.server.lock:
                n = self.seen[prompt] = self.seen.get(prompt, 0) + 1
                refused = random.Random("%s:%s:%d" % (seed, prompt, n)).random() < share
                self.log.append((prompt, refused))
            return refused

        self.server.refuse = refuse

    def reset(self):
        super().reset()
        with self.server.lock:
            self.log, self.seen = [], {}

    def bounds(self, order, level):
        """Lower bounds on the wall time of a run that starts its cases in `order` (their
        prompts) with at most `level` requests in flight, from the server's log: a case's retry
        chain is its refusals x the Retry-After (a refusal is answered at once) and then the
        latency of its answer; it cannot start before floor(A / level) x latency, A being the
        cases before it whose first request was answered (each held a slot that long).
        Returns {"chain": the longest chain (s), "refusals": its refusals, "in_order": the
        latest end of start + chain (s), "case": its prompt, "answers": answered requests}."""
        with self.server.lock:
            log = list(self.log)
        refusals, first = {}, {}
        for prompt, refused in log:
            refusals[prompt] = refusals.get(prompt, 0) + refused
            first.setdefault(prompt, not refused)
        latency, wait = self.server.latency, self.server.retry_after
        result = {"chain": 0.0, "refusals": 0, "in_order": 0.0, "case": None,
                  "answers": sum(not refused for _prompt, refused in log)}
        held = 0
        for prompt in order:
            chain = refusals.get(prompt, 0) * wait + latency
            if chain > result["chain"]:
                result.update(chain=chain, refusals=refusals.get(prompt, 0))
            end = held // level * latency + chain
            if end > result["in_order"]:
                result.update(in_order=end, case=prompt)
            held += first.get(prompt, True)
        return result


# ---------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------


def _command_text(argv, env=None):
    shown = ["python" if a == sys.executable else a for a in argv]
    prefix = " ".join("%s=%s" % (k, shlex.quote(v)) for k, v in (env or {}).items())
    return (prefix + " " if prefix else "") + " ".join(shlex.quote(a) for a in shown)


def _base_env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVALS_")}
    env.pop("OPENAI_API_KEY", None)
    env.update(extra)
    return env


def _run(argv, env, cwd, limit):
    started = time.perf_counter()
    done = subprocess.run(argv, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          timeout=limit)
    return time.perf_counter() - started, done


def _verdict(ok):
    return "PASS" if ok else "MISS"


def _ratio_text(value, places=2):
    return "%.*f x" % (places, value) if value is not None else "n/a"


def _ratio(numerator, denominator):
    return numerator / denominator if denominator else None


class Copy:
    """One copy of evals.py to measure. `source` says where it comes from (a path, or
    "git:REV" and the commit); `files` maps each file name of its scratch folder to where it
    comes from: ("path", PATH) or ("git", COMMIT). `folder` is set by prepare()."""

    def __init__(self, label, source, files):
        self.label = label
        self.source = source
        self.files = files
        self.folder = None

    @property
    def path(self):
        return os.path.join(self.folder, "evals.py")

    def describe(self):
        """Where each file of the scratch folder comes from, one per line."""
        return ["%s <- %s" % (name, "git show %s:%s" % (where[:10], name) if kind == "git"
                              else where)
                for name, (kind, where) in sorted(self.files.items())]

    def prepare(self, parent, index):
        """Write the scratch folder: evals.py, evals_extras.py (when the copy has one) and
        my_client.py, nothing else; every run of this copy starts there."""
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in self.label)
        self.folder = os.path.join(parent, "copy-%d-%s" % (index, safe))
        os.makedirs(self.folder)
        for name, (kind, where) in self.files.items():
            data = _git_show(where, name) if kind == "git" else _read_bytes(where)
            with open(os.path.join(self.folder, name), "wb") as handle:
                handle.write(data)


def _read_bytes(path):
    with open(path, "rb") as handle:
        return handle.read()


def _git(*args):
    return subprocess.run(["git", "-C", ROOT] + list(args), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, timeout=60)


def _git_show(commit, name):
    done = _git("show", "%s:%s" % (commit, name))
    if done.returncode != 0:
        raise RuntimeError("git show %s:%s failed: %s" % (
            commit, name, done.stderr.decode("utf-8", "replace").strip()))
    return done.stdout


def _git_has(commit, name):
    return _git("cat-file", "-e", "%s:%s" % (commit, name)).returncode == 0


def _copy_files_from_path(path):
    files = {"evals.py": ("path", path)}
    folder = os.path.dirname(path)
    if os.path.isfile(os.path.join(folder, "evals_extras.py")):
        files["evals_extras.py"] = ("path", os.path.join(folder, "evals_extras.py"))
    own_client = os.path.join(folder, "my_client.py")
    files["my_client.py"] = ("path", own_client if os.path.isfile(own_client)
                             else os.path.join(ROOT, "my_client.py"))
    return files


def _copy_files_from_git(revision):
    """{file name: ("git", COMMIT) or ("path", this repository's my_client.py)}; the commit;
    raises ValueError when the revision or its evals.py cannot be found."""
    try:
        done = _git("rev-parse", "--verify", "--quiet", revision + "^{commit}")
    except (OSError, subprocess.SubprocessError) as exc:
        raise ValueError("git cannot be run (%s)" % exc)
    commit = done.stdout.decode("ascii", "replace").strip()
    if done.returncode != 0 or not commit:
        raise ValueError("no such git revision in %s" % ROOT)
    if not _git_has(commit, "evals.py"):
        raise ValueError("revision %s has no evals.py" % commit[:10])
    files = {"evals.py": ("git", commit)}
    if _git_has(commit, "evals_extras.py"):
        files["evals_extras.py"] = ("git", commit)
    files["my_client.py"] = (("git", commit) if _git_has(commit, "my_client.py")
                             else ("path", os.path.join(ROOT, "my_client.py")))
    return files, commit


def parse_copies(values, parser):
    """--evals values ("LABEL=PATH", "PATH", "LABEL=git:REV" or "git:REV") as Copy objects;
    the repository's evals.py when none is given. A plain path is labelled with its file name,
    a plain git:REV with REV."""
    copies = []
    for value in values or [EVALS]:
        label, sep, spec = value.partition("=")
        if not sep or not label or "/" in label or os.sep in label or label.startswith("git:"):
            label, spec = "", value  # a plain path (which may itself contain "=") or git:REV
        if spec.startswith("git:"):
            revision = spec[len("git:"):]
            try:
                files, commit = _copy_files_from_git(revision)
            except ValueError as exc:
                parser.error("--evals %s: %s" % (value, exc))
            label = label or revision
            source = "git:%s (%s)" % (revision, commit[:10])
        else:
            path = os.path.abspath(os.path.expanduser(spec))
            if not os.path.isfile(path):
                parser.error("--evals %s: no such file" % value)
            files = _copy_files_from_path(path)
            label = label or os.path.basename(path)
            source = path
        taken = {c.label for c in copies}
        if label in taken:
            number = 2
            while "%s (%d)" % (label, number) in taken:
                number += 1
            label = "%s (%d)" % (label, number)
        copies.append(Copy(label, source, files))
    return copies


# ---------------------------------------------------------------------------------------------
# 1. Throughput through the real client
# ---------------------------------------------------------------------------------------------


def _question(i):
    return "Question number %d: what is the answer?" % i


def write_simple_cases(path, n):
    with open(path, "w", encoding="utf-8") as handle:
        for i in range(n):
            handle.write(json.dumps({
                "id": "case-%05d" % i, "input": _question(i),
                "checks": [{"type": "contains_any", "values": ["42"]}],
            }) + "\n")


# The yardstick for live calls: the plain thread-pool loop a user would write with the standard
# library. It reads the same case file, sends the same N chat completions to the same server
# with concurrent.futures.ThreadPoolExecutor(C), and checks each answer for "42". Like
# my_client.py's adapter, each worker thread keeps ONE connection alive (http.client, the
# library urllib.request runs on; urllib.request itself would open one connection per request)
# and sends the same headers (Content-Type, Authorization: Bearer). No retries, no timeouts
# beyond the socket's, no record. Usage: python plain_loop.py CASES BASE_URL C; the key is
# read from OPENAI_API_KEY; prints {"total", "passed", "errors"} as JSON, exits 1 on an error.
PLAIN_LOOP = r'''
import concurrent.futures
import http.client
import json
import os
import sys
import threading
import urllib.parse


def main(cases_path, base_url, level):
    with open(cases_path, encoding="utf-8") as handle:
        prompts = [json.loads(line)["input"] for line in handle if line.strip()]
    url = urllib.parse.urlsplit(base_url.rstrip("/") + "/chat/completions")
    headers = {"Content-Type": "application/json",
               "Authorization": "Bearer " + os.environ["OPENAI_API_KEY"]}
    kept = threading.local()

    def ask(prompt):
        connection = getattr(kept, "connection", None)
        if connection is None:
            connection = kept.connection = http.client.HTTPConnection(
                url.hostname, url.port, timeout=60)
        body = json.dumps({"model": "gpt-4o-mini", "temperature": 0, "max_tokens": 1024,
                           "messages": [{"role": "user", "content": prompt}]})
        connection.request("POST", url.path, body=body.encode("utf-8"), headers=headers)
        response = connection.getresponse()
        data = response.read()
        if response.status != 200:
            raise RuntimeError("HTTP %d: %r" % (response.status, data[:200]))
        reply = json.loads(data)["choices"][0]["message"]["content"]
        return "42" in reply

    passed = errors = 0
    with concurrent.futures.ThreadPoolExecutor(level) as pool:
        for future in [pool.submit(ask, prompt) for prompt in prompts]:
            try:
                passed += future.result()
            except Exception as exc:
                errors += 1
                print("error: %s" % exc, file=sys.stderr)
    print(json.dumps({"total": len(prompts), "passed": passed, "errors": errors}))
    return 1 if errors else 0


sys.exit(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
'''

LOOP_LABEL = "plain loop"


def _live_run(label, argv, env, env_shown, cwd, server, limit):
    server.reset()
    wall, done = _run(argv, env, cwd, limit)
    count, peak = server.stats()
    return {"label": label, "wall_s": wall, "requests": count, "peak_in_flight": peak,
            "exit": done.returncode,
            "stdout": done.stdout.decode("utf-8", "replace").strip(),
            "stderr": done.stderr.decode("utf-8", "replace").strip(),
            "command": "(cd %s && %s)" % (shlex.quote(cwd), _command_text(argv, env_shown))}


def bench_throughput(copies, n, latency, levels, rounds, workdir):
    """{level: {label: [run, ...]}} for the plain loop (LOOP_LABEL) and every copy, `rounds`
    runs each at each level; within a round the runs are interleaved, the order reversed
    every other round, so that noise on the machine falls on all of them alike."""
    cases = os.path.join(workdir, "throughput_cases.jsonl")
    write_simple_cases(cases, n)
    loop_script = os.path.join(workdir, "plain_loop.py")
    with open(loop_script, "w", encoding="utf-8") as handle:
        handle.write(PLAIN_LOOP)
    runs = {}
    with ChatServer(latency) as server:
        env_shown = {"EVALS_PROVIDER": "openai", "OPENAI_API_KEY": KEY,
                     "EVALS_BASE_URL": server.url}
        env = _base_env(**env_shown)
        for level in levels:
            limit = math.ceil(n / level) * latency * 5 + 60
            runs[level] = {label: [] for label in [LOOP_LABEL] + [c.label for c in copies]}
            commands = [(LOOP_LABEL, [sys.executable, loop_script, cases, server.url,
                                      str(level)], workdir)]
            # --out, not --no-save: a run that writes its record keeps the journal of its
            # answers (--resume), and that is part of what a live run costs.
            commands += [(copy.label, [sys.executable, copy.path, "--cases", cases,
                                       "--client", "my_client:ask", "-j", str(level),
                                       "--out", "throughput_record.json", "--no-history",
                                       "-q"], copy.folder)
                         for copy in copies]
            for round_number in range(rounds):
                order = commands if round_number % 2 == 0 else commands[::-1]
                for label, argv, cwd in order:
                    shown = ({"OPENAI_API_KEY": KEY} if label == LOOP_LABEL else env_shown)
                    runs[level][label].append(
                        _live_run(label, argv, env, shown, cwd, server, limit))
    return runs


def part_throughput(copies, n, latency, levels, rounds, workdir, summary):
    print("\n1. Live calls through my_client (OpenAI-compatible loopback server, %d ms "
          "latency, N=%d), against the plain thread-pool loop; best of %d interleaved run(s)"
          % (latency * 1000, n, rounds))
    runs = bench_throughput(copies, n, latency, levels, rounds, workdir)
    labels = [LOOP_LABEL] + [c.label for c in copies]
    width = max(len(label) for label in labels)
    for level in levels:
        limit = math.ceil(n / level) * latency
        loop_best = min(r["wall_s"] for r in runs[level][LOOP_LABEL])
        print("   -j %d: the physical limit ceil(N/C) x latency is %.2f s" % (level, limit))
        print("   %-*s %9s %9s %9s %9s %6s %5s  %s" % (
            width, "", "wall s", "x loop", "x limit", "requests", "peak", "exit",
            "every round's wall s" if rounds > 1 else ""))
        for label in labels:
            done = runs[level][label]
            best = min(done, key=lambda r: r["wall_s"])
            ratio = _ratio(best["wall_s"], loop_best)
            print("   %-*s %9.2f %9s %9.3f %9s %6d %5s  %s" % (
                width, label, best["wall_s"], "-" if label == LOOP_LABEL else "%.3f" % ratio,
                best["wall_s"] / limit, "/".join(sorted({str(r["requests"]) for r in done})),
                max(r["peak_in_flight"] for r in done),
                "/".join(sorted({str(r["exit"]) for r in done})),
                " ".join("%.2f" % r["wall_s"] for r in done) if rounds > 1 else ""))
            for run in done:
                if run["exit"] != 0 or run["requests"] != n:
                    print("     %s: exit %s, %d requests; stdout: %s; stderr: %s" % (
                        label, run["exit"], run["requests"], run["stdout"][-500:],
                        run["stderr"][-500:]))
            if label != LOOP_LABEL:
                summary.append((label, "live -j %d <= %.2f x the plain loop" % (
                    level, LOOP_RATIO_TARGET), _ratio_text(ratio, 3),
                    ratio is not None and ratio <= LOOP_RATIO_TARGET))
    print("   commands (the last level):")
    for label in labels:
        print("     %s: %s" % (label, runs[levels[-1]][label][0]["command"]))
    print("     (the loop is PLAIN_LOOP in bench.py: ThreadPoolExecutor(C), one kept-alive "
          "http.client connection per worker thread, as my_client's adapter keeps)")
    top = max(levels)
    for copy in copies:
        done = runs[top][copy.label]
        best = min(r["wall_s"] for r in done) / (math.ceil(n / top) * latency)
        summary.append((copy.label, "live -j %d <= %.2f x the physical limit" % (
            top, THROUGHPUT_TARGET), "%.3f x" % best, best <= THROUGHPUT_TARGET))
        every = [r for level in levels for r in runs[level][copy.label]]
        summary.append((copy.label, "server saw exactly N=%d requests per live run" % n,
                        ", ".join(sorted({str(r["requests"]) for r in every})),
                        all(r["requests"] == n for r in every)))
        summary.append((copy.label, "every live run exits 0",
                        ", ".join(sorted({str(r["exit"]) for r in every})),
                        all(r["exit"] == 0 for r in every)))
    loop_runs = [r for level in levels for r in runs[level][LOOP_LABEL]]
    summary.append((LOOP_LABEL, "every loop run: N=%d requests, exit 0" % n,
                    ", ".join(sorted({"%d/%s" % (r["requests"], r["exit"])
                                      for r in loop_runs})),
                    all(r["requests"] == n and r["exit"] == 0 for r in loop_runs)))


# ---------------------------------------------------------------------------------------------
# 1b. Live calls under rate limiting (429 with Retry-After)
# ---------------------------------------------------------------------------------------------


def bench_rate_limited(copy, n, latency, level, workdir, seed=11):
    cases = os.path.join(workdir, "rate_limited_cases.jsonl")
    write_simple_cases(cases, n)
    cwd = copy.folder
    with RateLimitedServer(latency, RATE_LIMITED_SHARE, RATE_LIMITED_RETRY_AFTER, seed) as server:
        # Attempts enough that no case runs out of them (0.2 ** 9 per case); the default
        # retry budget (60 s) is far above any chain here.
        env_shown = {"EVALS_PROVIDER": "openai", "OPENAI_API_KEY": KEY,
                     "EVALS_BASE_URL": server.url, "EVALS_MAX_ATTEMPTS": "10"}
        argv = [sys.executable, copy.path, "--cases", cases, "--client", "my_client:ask",
                "-j", str(level), "--no-save", "--no-history", "-q"]
        wall, done = _run(argv, _base_env(**env_shown), cwd, 300)
        count, peak = server.stats()
        found = server.bounds([_question(i) for i in range(n)], level)
    # Lower bounds on the wall time, the highest one is the bound: the longest retry chain;
    # the same for each case started no earlier than its place in the case file allows (no
    # scheduler knows beforehand which case the server will refuse); the answers at `level`
    # at a time.
    bound = max(found["in_order"], math.ceil(found["answers"] / level) * latency)
    return {"wall_s": wall, "bound_s": bound, "chain_s": found["chain"],
            "most_refusals": found["refusals"], "in_order_s": found["in_order"],
            "case": found["case"], "requests": count, "refused": count - found["answers"],
            "peak_in_flight": peak, "exit": done.returncode, "ratio": wall / bound,
            "stdout": done.stdout.decode("utf-8", "replace").strip(),
            "stderr": done.stderr.decode("utf-8", "replace").strip(),
            "command": "(cd %s && %s)" % (shlex.quote(cwd), _command_text(argv, env_shown))}


def part_rate_limited(copies, n, latency, level, workdir, summary):
    print("\n1b. Rate limited: %d%% of requests answered 429 with Retry-After %g s (seeded), "
          "N=%d, -j %d, %d ms latency" % (RATE_LIMITED_SHARE * 100, RATE_LIMITED_RETRY_AFTER,
                                           n, level, latency * 1000))
    for copy in copies:
        row = bench_rate_limited(copy, n, latency, level, workdir)
        print("   [%s] wall %.2f s; bound %.2f s; ratio %.2f x" % (
            copy.label, row["wall_s"], row["bound_s"], row["ratio"]))
        print("     longest retry chain %.2f s (%d refusals; wall / chain %.2f x); started in "
              "case order, %r cannot end before %.2f s" % (
                  row["chain_s"], row["most_refusals"], row["wall_s"] / row["chain_s"],
                  row["case"], row["in_order_s"]))
        print("     requests %d (%d refused), peak in flight %d of %d, exit %d" % (
            row["requests"], row["refused"], row["peak_in_flight"], level, row["exit"]))
        print("     command: " + row["command"])
        if row["exit"] != 0:
            print("     stdout: %s; stderr: %s" % (row["stdout"][-500:], row["stderr"][-500:]))
        summary.append((copy.label, "429s: wall within %.1f x the retry-chain bound"
                        % RATE_LIMITED_TARGET, "%.2f x" % row["ratio"],
                        row["ratio"] <= RATE_LIMITED_TARGET))
        summary.append((copy.label, "429s: peak in flight reaches -j %d" % level,
                        str(row["peak_in_flight"]), row["peak_in_flight"] >= level))
        summary.append((copy.label, "429s: the run exits 0", str(row["exit"]), row["exit"] == 0))


# ---------------------------------------------------------------------------------------------
# 1c. Live calls at the provider's limit (rate-limit buckets and their headers)
# ---------------------------------------------------------------------------------------------

# OpenAI's limits, scaled down: 60 requests and 4,500 tokens a "minute" of 6 s, each a bucket
# refilling continuously; a request is admitted when it fits both, counted at admission as its
# prompt tokens (4 characters a token here) plus its token cap, else refused 429 (and, as on
# OpenAI, nothing is admitted meanwhile). With a cap of 89 each case costs 99 tokens: 45 fit a
# full bucket, then one every 0.132 s. The Anthropic flavour has the same requests limit and
# splits the tokens: input tokens (the prompts, 1,000) and output tokens (the caps, 45 x 89).
LIMITED_CASES = 150
LIMITED_CONCURRENCY = 16
LIMITED_WINDOW = 6.0  # seconds, the server's "minute"
LIMITED_CAP = 89  # EVALS_MAX_TOKENS: 10 prompt tokens + 89 = 99 a request
LIMITED_LIMITS = {"openai": {"requests": 60, "tokens": 4500},
                  "anthropic": {"requests": 60, "input-tokens": 1000, "output-tokens": 45 * 89}}
LIMITED_TARGET = 1.15  # x the physical bound
LIMITED_REFUSED_TARGET = 0.05  # of requests answered 429
# The same OpenAI buckets with the limits hidden, as many OpenAI-compatible gateways do: no
# x-ratelimit-* headers, a 429 with Retry-After only ("retry-after"), or a bare 429 ("bare").
# The run learns the limits from the refusals.
HIDDEN_TARGET = 1.3  # x the physical bound
HIDDEN_REFUSED_TARGET = 0.15  # of requests answered 429
# Flavour: (the style of its API and headers, what its answers tell of the limits)
LIMITED_FLAVOURS = {"openai": ("openai", "headers"), "anthropic": ("anthropic", "headers"),
                    "retry-after only": ("openai", "retry-after"), "bare 429": ("openai", "bare")}


class _BucketHandler(_Handler):  # its keep-alive and quiet log; its own answers
    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        request = json.loads(self.rfile.read(length).decode("utf-8"))
        refused, headers = self.server.owner.admit(request)
        if not refused:
            time.sleep(self.server.owner.latency)
        payload = self.server.owner.answer(refused)
        try:
            self.send_response(429 if refused else 200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(payload)
        except OSError:
            self.close_connection = True


class BucketServer(_Serving):
    """A loopback chat server enforcing rate-limit buckets as OpenAI documents them (`style`
    "openai": x-ratelimit-* headers, /v1/chat/completions) or Anthropic (anthropic-ratelimit-*
    headers, /v1/messages): each limit a bucket of `limits[name]` refilling continuously over
    `window` seconds, full at the start; an admitted request answers after `latency` with the
    headers of what is left, a refused one at once, 429 with Retry-After. Counts answers and
    refusals."""

    def __init__(self, style, latency, limits, window, told="headers"):
        self.style, self.latency, self.window, self.told = style, latency, window, told
        self.lock = threading.Lock()
        now = time.monotonic()
        self.buckets = {name: [float(limit), now, float(limit)] for name, limit in limits.items()}
        self.answered = self.refused = 0
        self.server = _Server(("127.0.0.1", 0), _BucketHandler)
        self.server.owner = self

    def costs(self, request):
        text = "".join(m["content"] for m in request.get("messages", [])
                       if isinstance(m.get("content"), str)) + (request.get("system") or "")
        prompt = -(-len(text) // 4)
        cap = request.get("max_tokens") or request.get("max_completion_tokens") or 0
        return {"requests": 1, "tokens": prompt + cap, "input-tokens": prompt,
                "output-tokens": cap}

    def admit(self, request):
        """(refused, headers) of one request, admitted or not as the buckets allow."""
        costs = self.costs(request)
        with self.lock:
            now = time.monotonic()
            wait = 0.0
            for name, bucket in self.buckets.items():
                level, at, limit = bucket
                bucket[0], bucket[1] = min(limit, level + (now - at) * limit / self.window), now
                if bucket[0] < costs[name]:
                    wait = max(wait, (costs[name] - bucket[0]) * self.window / limit)
            refused = wait > 0
            if refused:
                self.refused += 1
            else:
                self.answered += 1
                for name, bucket in self.buckets.items():
                    bucket[0] -= costs[name]
            headers = self.headers(now)
        if self.told != "headers":  # the limits hidden
            headers = {}
        if refused and self.told != "bare":
            headers["retry-after"] = str(max(1, math.ceil(wait)))
            if self.style == "openai" and self.told == "headers":
                headers["retry-after-ms"] = str(math.ceil(wait * 1000))
        return refused, headers

    def headers(self, now):
        headers = {}
        for name, (level, _at, limit) in self.buckets.items():
            reset = (limit - level) * self.window / limit  # until full again
            if self.style == "openai":
                headers.update({"x-ratelimit-limit-" + name: "%d" % limit,
                                "x-ratelimit-remaining-" + name: "%d" % max(0, level),
                                "x-ratelimit-reset-" + name: (
                                    "%dms" % (reset * 1000) if reset < 1 else "%.3fs" % reset)})
            else:
                at = time.time() + reset
                stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(at))
                headers.update({"anthropic-ratelimit-%s-limit" % name: "%d" % limit,
                                "anthropic-ratelimit-%s-remaining" % name: "%d" % max(0, level),
                                "anthropic-ratelimit-%s-reset" % name: "%s.%03dZ" % (
                                    stamp, int(at % 1 * 1000))})
        return headers

    def answer(self, refused):
        if refused:
            return json.dumps({"type": "error", "error": {
                "type": "rate_limit_error" if self.style == "anthropic" else "requests",
                "message": "Rate limit reached", "code": "rate_limit_exceeded"}}).encode()
        if self.style == "anthropic":
            return json.dumps({
                "id": "msg_bench", "type": "message", "role": "assistant",
                "model": "claude-haiku-4-5", "stop_reason": "end_turn",
                "content": [{"type": "text", "text": "OK: the answer is 42."}],
                "usage": {"input_tokens": 10, "output_tokens": 7}}).encode()
        return json.dumps({
            "id": "chatcmpl-bench", "object": "chat.completion", "model": "gpt-4o-mini",
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": "OK: the answer is 42."}}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 7, "total_tokens": 17}}).encode()


def limited_bound(limits, costs, n, level, latency, window):
    """The physical bound of n requests at `level` in flight against full buckets: the n-th
    admitted as soon as every bucket holds its cost (each refilling limit/window a second),
    then answered after `latency`; and ceil(n / level) x latency."""
    admitted = max(max(0.0, (n * costs[name] - limit) * window / limit)
                   for name, limit in limits.items())
    return max(admitted + latency, math.ceil(n / level) * latency)


def bench_limited(copy, flavour, n, latency, level, workdir):
    cases = os.path.join(workdir, "limited_cases.jsonl")
    write_simple_cases(cases, n)
    style, told = LIMITED_FLAVOURS[flavour]
    limits = LIMITED_LIMITS[style]
    with BucketServer(style, latency, limits, LIMITED_WINDOW, told) as server:
        env_shown = {"EVALS_PROVIDER": style, "EVALS_BASE_URL": server.url,
                     "EVALS_MAX_TOKENS": str(LIMITED_CAP),
                     ("OPENAI_API_KEY" if style == "openai" else "ANTHROPIC_API_KEY"): KEY}
        argv = [sys.executable, copy.path, "--cases", cases, "--client", "my_client:ask",
                "-j", str(level), "--no-save", "--no-history", "-q"]
        env = _base_env(**env_shown)
        env.pop("ANTHROPIC_API_KEY", None) if style == "openai" else None
        wall, done = _run(argv, env, copy.folder, 600)
        costs = server.costs({"messages": [{"content": _question(0)}], "max_tokens": LIMITED_CAP})
        bound = limited_bound(limits, costs, n, level, latency, LIMITED_WINDOW)
        answered, refused = server.answered, server.refused
    return {"wall_s": wall, "bound_s": bound, "ratio": wall / bound, "answered": answered,
            "refused": refused, "refused_share": refused / max(1, answered + refused),
            "exit": done.returncode, "stdout": done.stdout.decode("utf-8", "replace").strip(),
            "stderr": done.stderr.decode("utf-8", "replace").strip(),
            "command": "(cd %s && %s)" % (shlex.quote(copy.folder),
                                          _command_text(argv, env_shown))}


def part_limited(copies, n, latency, level, workdir, summary):
    print("\n1c. At the provider's limit: %d cases, -j %d, %d ms latency; buckets of %s a %g s "
          "\"minute\" (refilling continuously), each request 99 tokens; told by headers, or "
          "hidden (a 429 with Retry-After only, or bare)"
          % (n, level, latency * 1000, ", ".join(
              "%s %s" % (v, k) for k, v in LIMITED_LIMITS["openai"].items()), LIMITED_WINDOW))
    for flavour, (_style, told) in LIMITED_FLAVOURS.items():
        target, refused_target = LIMITED_TARGET, LIMITED_REFUSED_TARGET
        if told != "headers":
            target, refused_target = HIDDEN_TARGET, HIDDEN_REFUSED_TARGET
        for copy in copies:
            row = bench_limited(copy, flavour, n, latency, level, workdir)
            print("   [%s] %s: wall %.2f s; bound %.2f s; ratio %.2f x; %d answered, "
                  "%d refused 429 (%.1f %% of requests), exit %d" % (
                      copy.label, flavour, row["wall_s"], row["bound_s"], row["ratio"],
                      row["answered"], row["refused"], row["refused_share"] * 100, row["exit"]))
            print("     command: " + row["command"])
            if row["exit"] != 0:
                print("     stdout: %s; stderr: %s" % (row["stdout"][-300:], row["stderr"][-300:]))
            summary.append((copy.label, "%s: every case, within %.2f x the bound" % (
                flavour, target), "%.2f x" % row["ratio"],
                row["ratio"] <= target and row["answered"] >= n))
            summary.append((copy.label, "%s: <= %d %% of requests refused 429" % (
                flavour, refused_target * 100), "%.1f %%" % (row["refused_share"] * 100),
                row["refused_share"] <= refused_target))
            summary.append((copy.label, "%s: every case answered (exit 0)" % flavour,
                            "%d answered, exit %d" % (row["answered"], row["exit"]),
                            row["exit"] == 0 and row["answered"] >= n))


# ---------------------------------------------------------------------------------------------
# 1d. A matrix of variants against the bound they share
# ---------------------------------------------------------------------------------------------

# `evals.py matrix` runs each variant as a normal run in a process of its own, one after
# another, so no two share a provider's rate limit at once. Three variants of my_client (a
# model name apiece) x 200 cases at -j 16, against one loopback server: with a latency only,
# the bound is the three runs' latency bounds added; with a requests limit they share, the
# 600 requests admitted at its rate (the bucket full at the start), whoever sends them.
MATRIX_VARIANTS = ("model-a", "model-b", "model-c")
MATRIX_CASES = 200
MATRIX_CONCURRENCY = 16
MATRIX_LATENCY = 0.05  # s; not --latency: the start-up of each variant is what is measured
MATRIX_TARGET = 1.10  # x the shared physical bound
# Flavour: the server's buckets, each a "minute" of LIMITED_WINDOW s (none: a latency only).
# 120 requests a 6 s "minute" is 20 a second: 600 requests take (600 - 120) / 20 s + latency.
MATRIX_FLAVOURS = {"latency only": {}, "20 requests/s shared": {"requests": 120}}


def has_matrix(copy):
    """Whether the copy has the `matrix` command (older copies have none): its --help."""
    _wall, done = _run([sys.executable, copy.path, "matrix", "--help"], _base_env(),
                       copy.folder, 60)
    return done.returncode == 0 and b"--variants" in done.stdout


def write_variants(path, url):
    """A variants file: MATRIX_VARIANTS, each my_client against the server at `url`."""
    with open(path, "w", encoding="utf-8") as handle:
        for model in MATRIX_VARIANTS:
            handle.write(json.dumps({"name": model, "client": "my_client:ask", "env": {
                "EVALS_PROVIDER": "openai", "EVALS_BASE_URL": url, "OPENAI_API_KEY": KEY,
                "EVALS_MODEL": model}}) + "\n")


def matrix_bound(limits, costs, variants, n, level, latency, window):
    """Seconds: the least wall time of `variants` runs of n cases at `level` in flight, one
    after another (each ceil(n / level) x latency), and of their variants x n requests
    against the shared buckets `limits` (limited_bound)."""
    runs = variants * math.ceil(n / level) * latency
    if not limits:
        return runs
    return max(runs, limited_bound(limits, costs, variants * n, level, latency, window))


def bench_matrix_once(copy, limits, cases, workdir, run_number):
    """One `evals.py matrix` run of the copy against a fresh server with `limits`."""
    out_dir = os.path.join(workdir, "matrix-%d" % run_number)
    with BucketServer("openai", MATRIX_LATENCY, limits, LIMITED_WINDOW) as server:
        variants = os.path.join(workdir, "variants-%d.jsonl" % run_number)
        write_variants(variants, server.url)
        argv = [sys.executable, copy.path, "matrix", "--variants", variants, "--cases", cases,
                "-j", str(MATRIX_CONCURRENCY), "--out-dir", out_dir]
        wall, done = _run(argv, _base_env(), copy.folder, 600)
        costs = server.costs({"messages": [{"content": _question(0)}]})
        answered, refused = server.answered, server.refused
    bound = matrix_bound(limits, costs, len(MATRIX_VARIANTS), MATRIX_CASES, MATRIX_CONCURRENCY,
                         MATRIX_LATENCY, LIMITED_WINDOW)
    return {"wall_s": wall, "bound_s": bound, "ratio": wall / bound, "answered": answered,
            "refused": refused, "exit": done.returncode,
            "stdout": done.stdout.decode("utf-8", "replace").strip(),
            "stderr": done.stderr.decode("utf-8", "replace").strip(),
            "command": "(cd %s && %s)" % (shlex.quote(copy.folder), _command_text(argv))}


def bench_matrix(copies, rounds, workdir):
    """{flavour: {label: [run, ...]}}, `rounds` runs of each copy in each flavour, the copies
    interleaved within a round, the order reversed every other round."""
    cases = os.path.join(workdir, "matrix_cases.jsonl")
    write_simple_cases(cases, MATRIX_CASES)
    runs = {flavour: {copy.label: [] for copy in copies} for flavour in MATRIX_FLAVOURS}
    run_number = 0
    for round_number in range(rounds):
        order = copies if round_number % 2 == 0 else copies[::-1]
        for flavour, limits in MATRIX_FLAVOURS.items():
            for copy in order:
                run_number += 1
                runs[flavour][copy.label].append(
                    bench_matrix_once(copy, limits, cases, workdir, run_number))
    return runs


def part_matrix(copies, rounds, workdir, summary):
    print("\n1d. A matrix: `evals.py matrix`, %d variants of my_client x %d cases at -j %d, "
          "one after another, %d ms latency; without a rate limit, then with one the variants "
          "share; best of %d interleaved run(s)" % (
              len(MATRIX_VARIANTS), MATRIX_CASES, MATRIX_CONCURRENCY, MATRIX_LATENCY * 1000,
              rounds))
    able = []
    for copy in copies:
        if has_matrix(copy):
            able.append(copy)
        else:
            print("   [%s] skipped: it has no matrix command" % copy.label)
    if not able:
        return
    runs = bench_matrix(able, rounds, workdir)
    requests = len(MATRIX_VARIANTS) * MATRIX_CASES
    for flavour, by_label in runs.items():
        for label, done in by_label.items():
            best = min(done, key=lambda r: r["wall_s"])
            print("   [%s] %s: wall %.2f s; bound %.2f s; ratio %.3f x (%.2f s a variant above "
                  "the bound); %d answered, %d refused 429, exit %d%s" % (
                      label, flavour, best["wall_s"], best["bound_s"], best["ratio"],
                      (best["wall_s"] - best["bound_s"]) / len(MATRIX_VARIANTS),
                      best["answered"], best["refused"], best["exit"],
                      "; every round's wall s: " + " ".join("%.2f" % r["wall_s"] for r in done)
                      if rounds > 1 else ""))
            print("     command: " + best["command"])
            for run in done:
                if run["exit"] != 0:
                    print("     exit %d; stdout: %s; stderr: %s" % (
                        run["exit"], run["stdout"][-300:], run["stderr"][-300:]))
            summary.append((label, "matrix, %s: within %.2f x the shared bound" % (
                flavour, MATRIX_TARGET), "%.3f x" % best["ratio"], best["ratio"] <= MATRIX_TARGET))
            summary.append((label, "matrix, %s: %d requests answered, exit 0" % (
                flavour, requests), "%s" % ", ".join(sorted({
                    "%d/%d" % (r["answered"], r["exit"]) for r in done})),
                all(r["answered"] == requests and r["exit"] == 0 for r in done)))


# ---------------------------------------------------------------------------------------------
# 2. Offline re-scoring, against a minimal loop
# ---------------------------------------------------------------------------------------------

_WORDS = ("the refund policy says a manager must approve any request above one hundred dollars "
          "and customers should expect the money back within three to five business days after "
          "approval while store credit is issued at once and shipping costs are not refunded "
          "unless the item arrived damaged or the wrong size was sent by mistake").split()


def _output_text(rng, i):
    """An answer of ~50-200 words; most pass all five checks of _checks_for(i), some do not."""
    words = [rng.choice(_WORDS) for _ in range(rng.randint(40, 180))]
    if rng.random() < 0.85:  # most answers state the policy; the rest fail a check or two
        at = rng.randrange(len(words))
        words[at:at] = "a manager must approve it and the refund takes three to five business days".split()
    kind = i % 3  # matches the fifth check of _checks_for(i)
    if kind == 0:
        answer = {"answer": " ".join(words), "ticket": "T-%d" % i, "priority": "high"}
        if rng.random() < 0.1:
            del answer["ticket"]
        return "```json\n" + json.dumps(answer, indent=1) + "\n```"
    if kind == 1 and rng.random() < 0.9:
        words.insert(rng.randrange(len(words)), "REF-%06d" % i)
    words[0] = words[0].capitalize()
    return " ".join(words) + "."


def _checks_for(i):
    checks = [
        {"type": "contains_any", "values": ["manager approval", "manager must approve", "manager"]},
        {"type": "not_contains", "values": ["refund is instant", "guaranteed", "as an AI"]},
        {"type": "max_words", "n": 200},
        {"type": "regex", "pattern": r"\b(three|3)\s+to\s+(five|5)\s+business\s+days\b",
         "flags": "i"},
    ]
    fifth = i % 3
    if fifth == 0:
        checks.append({"type": "json_keys", "keys": ["answer", "ticket"], "allow_fence": True})
    elif fifth == 1:
        checks.append({"type": "regex", "pattern": r"REF-\d{6}"})
    else:
        checks.append({"type": "contains_all", "values": ["refund", "days"]})
    return checks


def write_rescore_files(workdir, n, seed=7):
    """Cases and recordings JSONL, written one case at a time (nothing held for all N)."""
    rng = random.Random(seed)
    cases = os.path.join(workdir, "rescore_cases.jsonl")
    recordings = os.path.join(workdir, "recordings.jsonl")
    with open(cases, "w", encoding="utf-8") as c_file, \
            open(recordings, "w", encoding="utf-8") as r_file:
        for i in range(n):
            case_id = "case-%06d" % i
            prompt = "Customer message %d: my order arrived broken, can I get my money back?" % i
            c_file.write(json.dumps({"id": case_id, "input": prompt, "checks": _checks_for(i),
                                     "tags": ["refund", "bulk"]}) + "\n")
            r_file.write(json.dumps({"id": case_id, "input": prompt,
                                     "output": _output_text(rng, i)}) + "\n")
    return cases, recordings


# The yardstick for re-scoring: what a few lines of plain Python do with the same two files.
# Recorded outputs are looked up by case id (the files need not be in the same order), the
# checks are the five kinds the generated cases use, and one JSON line per case is streamed out.
# Usage: python minimal_loop.py CASES RECORDINGS OUT; prints {"total", "passed", ...} as JSON.
MINIMAL_LOOP = r'''
import json
import re
import sys

FLAGS = {"i": re.IGNORECASE, "m": re.MULTILINE, "s": re.DOTALL, "x": re.VERBOSE}


def unfence(text):
    text = text.strip()
    if text.startswith("```") and text.endswith("```") and "\n" in text[:-3]:
        return text[text.index("\n") + 1:-3]
    return text


def failure(check, output):
    """None when the check passes, else the reason."""
    kind = check["type"]
    if kind in ("contains_any", "contains_all", "not_contains"):
        text = output.casefold()
        found = [v for v in check["values"] if v.casefold() in text]
        if kind == "contains_any":
            return None if found else "none of %r found" % (check["values"],)
        if kind == "contains_all":
            missing = [v for v in check["values"] if v not in found]
            return "missing: %r" % (missing,) if missing else None
        return "found forbidden: %r" % (found,) if found else None
    if kind == "max_words":
        count = len(output.split())
        return None if count <= check["n"] else "%d words, at most %d" % (count, check["n"])
    if kind == "regex":
        flags = 0
        for letter in check.get("flags", ""):
            flags |= FLAGS[letter]
        if re.search(check["pattern"], output, flags):
            return None
        return "no match for /%s/%s" % (check["pattern"], check.get("flags", ""))
    if kind == "json_keys":
        try:
            value = json.loads(unfence(output) if check.get("allow_fence") else output)
        except ValueError as exc:
            return "not valid JSON: %s" % exc
        if not isinstance(value, dict):
            return "JSON is not an object"
        missing = [k for k in check["keys"] if k not in value]
        return "missing keys: %r" % (missing,) if missing else None
    raise SystemExit("minimal loop: unknown check type %r" % kind)


def main(cases_path, recordings_path, out_path):
    outputs = {}
    with open(recordings_path, encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                row = json.loads(line)
                outputs[row["id"]] = row["output"]
    counts = {"pass": 0, "fail": 0, "error": 0}
    with open(cases_path, encoding="utf-8") as cases, \
            open(out_path, "w", encoding="utf-8") as out:
        for line in cases:
            if not line.strip():
                continue
            case = json.loads(line)
            output = outputs.get(case["id"])
            if output is None:
                status, reasons = "error", ["no recorded output"]
            elif not output.strip():
                status, reasons = "fail", ["the output is empty"]
            else:
                reasons = [r for r in (failure(c, output) for c in case["checks"]) if r]
                status = "fail" if reasons else "pass"
            counts[status] += 1
            out.write(json.dumps({"id": case["id"], "status": status, "output": output,
                                  "failed": reasons}) + "\n")
        total = sum(counts.values())
        summary = {"total": total, "passed": counts["pass"], "failed": counts["fail"],
                   "errored": counts["error"]}
        out.write(json.dumps({"summary": summary}) + "\n")
    print(json.dumps(summary))


main(*sys.argv[1:4])
'''

# ru_maxrss of RUSAGE_CHILDREN is the largest of all children waited for so far, so every
# measurement runs in a fresh wrapper process whose only child is the command measured.
_WRAPPER = (
    "import json, resource, subprocess, sys, time\n"
    "argv, limit = json.loads(sys.argv[1]), float(sys.argv[2])\n"
    "t = time.perf_counter()\n"
    "try:\n"
    "    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=limit)\n"
    "    code, out, err = p.returncode, p.stdout, p.stderr\n"
    "except subprocess.TimeoutExpired as exc:\n"
    "    code, out = None, exc.stdout or b''\n"
    "    err = (exc.stderr or b'') + b'\\n[killed at the time limit of %d s]' % limit\n"
    "wall = time.perf_counter() - t\n"
    "usage = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
    "rss, cpu = usage.ru_maxrss, usage.ru_utime + usage.ru_stime\n"
    "print(json.dumps({'wall': wall, 'cpu': cpu, 'rss_kib': rss, 'exit': code,\n"
    "                  'stdout': out.decode('utf-8', 'replace')[-2000:],\n"
    "                  'stderr': err.decode('utf-8', 'replace')[-2000:]}))\n"
)


def measure(argv, cwd, limit):
    """Wall time (s), CPU time (user + system, s), peak RSS (MB), exit code (None: killed at
    the limit) and output tails of one run of `argv`, measured by a fresh wrapper process."""
    done = subprocess.run([sys.executable, "-c", _WRAPPER, json.dumps(argv), str(limit)],
                          env=_base_env(), cwd=cwd, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, timeout=limit + 60)
    if done.returncode != 0:
        raise RuntimeError("measuring wrapper failed: %s" % done.stderr.decode()[-2000:])
    result = json.loads(done.stdout.decode("utf-8"))
    rss_kib = result["rss_kib"]
    if sys.platform == "darwin":  # bytes there
        rss_kib //= 1024
    return {"wall_s": result["wall"], "cpu_s": result["cpu"], "peak_mb": rss_kib / 1024.0,
            "exit": result["exit"],
            "stdout": result["stdout"].strip(), "stderr": result["stderr"].strip()}


def record_summary(path):
    """The "summary" object of a run record, read from the file's head (or tail) without
    loading the whole record (1,000,000 cases make a record of more than a gigabyte); None
    when it cannot be found."""
    decoder = json.JSONDecoder()
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as handle:
            head = handle.read(1 << 20).decode("utf-8", "replace")
            handle.seek(max(0, size - (1 << 20)))
            tail = handle.read().decode("utf-8", "replace")
    except OSError:
        return None
    for text, find in ((head, str.find), (tail, str.rfind)):
        at = find(text, '"summary":')
        while at > 0 and text[at - 1] == "\\":  # an escaped quote inside some string
            at = find(text, '"summary":', *((at + 1,) if find is str.find else (0, at)))
        if at < 0:
            continue
        start = at + len('"summary":')
        while start < len(text) and text[start] in " \t\r\n":
            start += 1
        try:
            value, _end = decoder.raw_decode(text, start)
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    return None


def _passed_from_stdout(text):
    """passed count from evals' "pass rate 77.4% (1548/2000)" line; None if absent."""
    for line in text.splitlines():
        if line.startswith("pass rate") and "(" in line and "/" in line:
            try:
                return int(line.rsplit("(", 1)[1].split("/", 1)[0])
            except ValueError:
                return None
    return None


def _rescore_limit(n):
    return max(600.0, n * 0.003)  # s; 1,000,000 cases: 50 minutes


def bench_rescore_loop(cases, recordings, workdir, n):
    script = os.path.join(workdir, "minimal_loop.py")
    with open(script, "w", encoding="utf-8") as handle:
        handle.write(MINIMAL_LOOP)
    out = os.path.join(workdir, "loop_record.jsonl")
    argv = [sys.executable, script, cases, recordings, out]
    result = measure(argv, workdir, _rescore_limit(n))
    result["passed"] = result["total"] = None
    try:
        counts = json.loads(result["stdout"].splitlines()[-1])
        result["passed"], result["total"] = counts["passed"], counts["total"]
    except (IndexError, KeyError, ValueError):
        pass
    result["command"] = _command_text([sys.executable, "minimal_loop.py",
                                       os.path.basename(cases), os.path.basename(recordings),
                                       os.path.basename(out)])
    _remove(out)
    return result


def bench_rescore_evals(copy, cases, recordings, workdir, n):
    out = os.path.join(workdir, "evals_record.json")
    argv = [sys.executable, copy.path, "--cases", os.path.basename(cases),
            "--rescore", os.path.basename(recordings), "--out", os.path.basename(out),
            "--no-history", "-q"]
    _remove(out)
    result = measure(argv, workdir, _rescore_limit(n))
    summary = record_summary(out)
    result["record_mb"] = os.path.getsize(out) / 1e6 if os.path.exists(out) else None
    if summary is not None:
        result["passed"], result["total"] = summary.get("passed"), summary.get("total")
        result["passed_from"] = "record summary"
    else:
        result["passed"], result["total"] = _passed_from_stdout(result["stdout"]), None
        result["passed_from"] = "stdout (no summary found in the record)"
    result["command"] = _command_text(argv)
    _remove(out)
    return result


def _remove(path):
    try:
        os.remove(path)
    except OSError:
        pass


def _rescore_copy_report(copy, label, result, loop, n, summary):
    """Print one evals copy's re-scoring details and add its target rows to the summary."""
    print("   [%s] %s" % (label, copy.path))
    print("     command: " + result["command"])
    if result["record_mb"] is not None:
        print("     run record %.1f MB; passed read from the %s" % (
            result["record_mb"], result["passed_from"]))
    print("     evals output: " + " | ".join(result["stdout"].splitlines()[:4]))
    if result["stderr"]:
        print("     stderr: " + result["stderr"][-500:])
    agree = result["passed"] is not None and result["passed"] == loop["passed"]
    if not agree:
        print("     " + "!" * 72)
        print("     MISMATCH: %s passed %s of %s cases, the minimal loop %s of %s" % (
            label, result["passed"], result["total"] if result["total"] is not None else "?",
            loop["passed"], loop["total"]))
        print("     " + "!" * 72)

    summary.append((label, "re-scoring time <= %.1f x the loop" % RESCORE_TIME_RATIO_TARGET,
                    _ratio_text(result["time_ratio"]),
                    result["time_ratio"] is not None
                    and result["time_ratio"] <= RESCORE_TIME_RATIO_TARGET))
    summary.append((label, "re-scoring memory <= %.1f x the loop"
                    % RESCORE_MEMORY_RATIO_TARGET, _ratio_text(result["memory_ratio"]),
                    result["memory_ratio"] is not None
                    and result["memory_ratio"] <= RESCORE_MEMORY_RATIO_TARGET))
    summary.append((label, "re-scoring passes the same cases as the loop",
                    "%s = %s" % (result["passed"], loop["passed"]) if agree else
                    "MISMATCH %s vs %s" % (result["passed"], loop["passed"]), agree))
    if n >= RESCORE_LARGE:
        summary.append((label, "re-scoring %d cases, peak RSS < %.0f MB" % (
            n, RESCORE_LARGE_MB_TARGET), "%.1f MB" % result["peak_mb"],
            result["peak_mb"] < RESCORE_LARGE_MB_TARGET))
    else:
        summary.append((label, "re-scoring %d cases < %.0f s" % (n, RESCORE_SECONDS_TARGET),
                        "%.2f s" % result["wall_s"],
                        result["wall_s"] < RESCORE_SECONDS_TARGET))
        summary.append((label, "re-scoring peak RSS < %.0f MB" % RESCORE_MB_TARGET,
                        "%.1f MB" % result["peak_mb"], result["peak_mb"] < RESCORE_MB_TARGET))
    # exit 1 is impossible without a baseline; 0 means no error
    summary.append((label, "re-scoring exits 0 (no errored case)", str(result["exit"]),
                    result["exit"] == 0))


REFERENCE_LABEL = "15ff8ea"  # the copy every other copy's re-scoring time is compared with


def _best(results):
    """The fastest of one command's runs, with the lowest peak RSS and CPU time of them all (a
    run's peak barely moves; its time does, with the machine's other work)."""
    best = dict(min(results, key=lambda r: r["wall_s"]))
    best["peak_mb"] = min(r["peak_mb"] for r in results)
    best["cpu_s"] = min(r["cpu_s"] for r in results)
    best["walls"] = [r["wall_s"] for r in results]
    return best


def part_rescore(copies, n, rounds, workdir, summary):
    print("\n2. Offline re-scoring: %d recorded cases x 5 checks, evals vs a minimal loop; "
          "best of %d interleaved run(s)" % (n, rounds))
    started = time.perf_counter()
    cases, recordings = write_rescore_files(workdir, n)
    print("   files: cases %.1f MB, recordings %.1f MB (written in %.1f s)" % (
        os.path.getsize(cases) / 1e6, os.path.getsize(recordings) / 1e6,
        time.perf_counter() - started))
    measured = {"minimal loop": []}
    measured.update((copy.label, []) for copy in copies)
    commands = [("minimal loop", lambda: bench_rescore_loop(cases, recordings, workdir, n))]
    commands += [(copy.label, functools.partial(bench_rescore_evals, copy, cases, recordings,
                                                workdir, n)) for copy in copies]
    for round_number in range(rounds):
        for label, measure_once in (commands if round_number % 2 == 0 else commands[::-1]):
            measured[label].append(measure_once())
    loop = _best(measured["minimal loop"])
    rows = [("minimal loop", loop)] + [(copy.label, _best(measured[copy.label]))
                                       for copy in copies]
    reference = dict(rows).get(REFERENCE_LABEL) if REFERENCE_LABEL in measured else None

    width = max(len(label) for label, _r in rows)
    print("   %-*s %9s %9s %7s %7s %7s %7s %9s %9s %5s  %s" % (
        width, "", "wall s", "peak MB", "time x", "mem x", "cpu s", "cpu x",
        "x " + REFERENCE_LABEL if reference else "", "passed", "exit",
        "every round's wall s" if rounds > 1 else ""))
    for label, result in rows:
        time_ratio = _ratio(result["wall_s"], loop["wall_s"])
        memory_ratio = _ratio(result["peak_mb"], loop["peak_mb"])
        result["time_ratio"], result["memory_ratio"] = time_ratio, memory_ratio
        result["reference_ratio"] = (_ratio(result["wall_s"], reference["wall_s"])
                                     if reference and label != "minimal loop" else None)
        print("   %-*s %9.2f %9.1f %7.2f %7.2f %7.2f %7.2f %9s %9s %5s  %s" % (
            width, label, result["wall_s"], result["peak_mb"], time_ratio or 0,
            memory_ratio or 0, result["cpu_s"], _ratio(result["cpu_s"], loop["cpu_s"]) or 0,
            "%.2f" % result["reference_ratio"]
            if result["reference_ratio"] is not None else "", result["passed"],
            result["exit"], " ".join("%.2f" % w for w in result["walls"]) if rounds > 1
            else ""))
    if reference:
        print("   (x %s: each copy's time / the time of the copy labelled %s)" % (
            REFERENCE_LABEL, REFERENCE_LABEL))
    print("   (cpu: user + system seconds, the least of the rounds; other work on the machine "
          "moves it less than the wall time)")
    print("   loop:  " + loop["command"] + "   (the script is MINIMAL_LOOP in bench.py)")
    if loop["exit"] != 0 or loop["passed"] is None:
        print("   loop failed: stdout: %s; stderr: %s" % (loop["stdout"][-500:],
                                                          loop["stderr"][-500:]))
    for copy, (label, result) in zip(copies, rows[1:]):
        _rescore_copy_report(copy, label, result, loop, n, summary)
        if reference and label != REFERENCE_LABEL:
            ratio = result["reference_ratio"]
            summary.append((label, "re-scoring faster than %s" % REFERENCE_LABEL,
                            _ratio_text(ratio), ratio is not None and ratio < 1.0))
    _remove(cases)
    _remove(recordings)


# ---------------------------------------------------------------------------------------------
# 3. Startup
# ---------------------------------------------------------------------------------------------


def bench_module_startup(copy, runs=10):
    """Median ms of `python -m evals --help` with bytecode caching allowed (an imported module's
    compiled code is cached in __pycache__; a script's never is); None when the file name is
    not a module name."""
    module = os.path.splitext(os.path.basename(copy.path))[0]
    if not module.isidentifier():
        return None, "(%s is not importable as a module)" % copy.path
    argv = [sys.executable, "-m", module, "--help"]
    env = _base_env()
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    _run(argv, env, copy.folder, 60)  # writes __pycache__/evals.*.pyc (ignored by git)
    times = []
    for _ in range(runs):
        wall, done = _run(argv, env, copy.folder, 60)
        if done.returncode != 0:
            raise RuntimeError("python -m %s --help exited %d" % (module, done.returncode))
        times.append(wall * 1000)
    return statistics.median(times), "(cd %s && %s)" % (shlex.quote(copy.folder),
                                                        _command_text(argv))


def bench_startup(copy, runs=10):
    argv = [sys.executable, copy.path, "--help"]
    env = _base_env()
    times = []
    _run(argv, env, ROOT, 60)  # warm the file cache
    for _ in range(runs):
        wall, done = _run(argv, env, ROOT, 60)
        if done.returncode != 0:
            raise RuntimeError("%s --help exited %d" % (copy.path, done.returncode))
        times.append(wall * 1000)
    baseline = []
    for _ in range(runs):
        wall, _done = _run([sys.executable, "-c", "pass"], env, ROOT, 60)
        baseline.append(wall * 1000)
    return {"median_ms": statistics.median(times), "min_ms": min(times),
            "python_ms": statistics.median(baseline), "command": _command_text(argv)}


def bench_version_ratio(copies, workdir, runs=10):
    """Median ms of `python EVALS --version` for each copy and of `python -c pass`, the runs
    interleaved (one of each per round, the order alternating) so that machine noise hits all."""
    env = _base_env()
    commands = [("python -c pass", [sys.executable, "-c", "pass"])]
    commands += [(copy.label, [sys.executable, copy.path, "--version"]) for copy in copies]
    times = {label: [] for label, _argv in commands}
    versions = {}
    for label, argv in commands:  # warm the file cache
        _wall, done = _run(argv, env, workdir, 60)
        versions[label] = (done.returncode,
                           (done.stdout or done.stderr).decode("utf-8", "replace").strip())
    for round_number in range(runs):
        order = commands if round_number % 2 == 0 else commands[::-1]
        for label, argv in order:
            wall, done = _run(argv, env, workdir, 60)
            if done.returncode != 0:
                raise RuntimeError("%s exited %d" % (_command_text(argv), done.returncode))
            times[label].append(wall * 1000)
    return ({label: statistics.median(values) for label, values in times.items()}, versions,
            {label: _command_text(argv) for label, argv in commands})


def _import_rows(argv):
    done = subprocess.run(argv, env=_base_env(), cwd=ROOT, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, timeout=60)
    rows = []
    for line in done.stderr.decode("utf-8", "replace").splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        parts = line[len("import time:"):].split("|")
        try:
            rows.append((int(parts[1]), int(parts[0]), parts[2].rstrip()))
        except (IndexError, ValueError):
            continue
    return rows


def import_time_top(path, count=12):
    """Top-level imports made by the evals.py at `path` itself (not by interpreter start-up),
    slowest first: (cumulative us, self us, name)."""
    startup = {name.strip() for _c, _s, name in _import_rows([sys.executable, "-X", "importtime",
                                                              "-c", "pass"])}
    rows = _import_rows([sys.executable, "-X", "importtime", path, "--help"])
    own = [r for r in rows if not r[2].startswith("  ") and r[2].strip() not in startup]
    own.sort(reverse=True)
    return own[:count]


def startup_parts(path, runs=5):
    """Milliseconds: compiling the evals.py at `path` (a script is never cached), running its
    module body (imports, regexes, dataclasses) with the source already compiled."""
    with open(path, encoding="utf-8") as handle:
        source = handle.read()
    compile_ms = min(_timed(lambda: compile(source, path, "exec")) for _ in range(runs))
    body = (
        "import sys, time\n"
        "code = compile(open(sys.argv[1], encoding='utf-8').read(), sys.argv[1], 'exec')\n"
        "t = time.perf_counter()\n"
        "exec(code, {'__name__': 'evals_bench', '__file__': sys.argv[1]})\n"
        "print((time.perf_counter() - t) * 1000)\n"
    )
    body_ms = []
    for _ in range(runs):
        done = subprocess.run([sys.executable, "-c", body, path], env=_base_env(), cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
        body_ms.append(float(done.stdout.decode().strip().splitlines()[-1]))
    return compile_ms, statistics.median(body_ms)


def _timed(func):
    started = time.perf_counter()
    func()
    return (time.perf_counter() - started) * 1000


def part_help_startup(copies, summary):
    print("\n3. Startup: python EVALS --help, median of 10")
    for copy in copies:
        result = bench_startup(copy)
        print("   [%s] median %.1f ms, min %.1f ms (bare `python -c pass`: %.1f ms)" % (
            copy.label, result["median_ms"], result["min_ms"], result["python_ms"]))
        print("     command: " + result["command"])
        ok = result["median_ms"] < STARTUP_MS_TARGET
        if not ok:
            compile_ms, body_ms = startup_parts(copy.path)
            print("     where it goes: interpreter start-up %.1f ms, compiling evals.py %.1f ms "
                  "(scripts run as `python evals.py` are never byte-code cached), module "
                  "body %.1f ms, the rest is argparse and output" % (
                      result["python_ms"], compile_ms, body_ms))
            print("     slowest imports made by evals.py (python -X importtime; cumulative "
                  "and self, us):")
            for cumulative, own, name in import_time_top(copy.path):
                print("       %8d  %8d  %s" % (cumulative, own, name.strip()))
        summary.append((copy.label, "startup median < %.0f ms" % STARTUP_MS_TARGET,
                        "%.1f ms" % result["median_ms"], ok))
        module_ms, module_command = bench_module_startup(copy)
        if module_ms is None:
            print("     python -m: " + module_command)
            continue
        print("     python -m evals --help (bytecode cached): median %.1f ms" % module_ms)
        print("     command: " + module_command)
        summary.append((copy.label, "startup, python -m evals, median < %.0f ms"
                        % STARTUP_MS_TARGET, "%.1f ms" % module_ms,
                        module_ms < STARTUP_MS_TARGET))


def part_version_ratio(copies, workdir, summary):
    print("\n3b. Startup ratio: python EVALS --version vs python -c pass, medians of 10, "
          "interleaved")
    medians, versions, commands = bench_version_ratio(copies, workdir)
    base = medians["python -c pass"]
    print("   %-20s median %7.1f ms" % ("python -c pass", base))
    for copy in copies:
        ratio = _ratio(medians[copy.label], base)
        code, text = versions[copy.label]
        print("   %-20s median %7.1f ms  %s  (prints %r, exit %d)" % (
            copy.label, medians[copy.label], _ratio_text(ratio), text[:40], code))
        print("     command: " + commands[copy.label] + "   (cwd: the temporary work folder)")
        summary.append((copy.label, "--version startup <= %.1f x python -c pass"
                        % VERSION_RATIO_TARGET, _ratio_text(ratio),
                        ratio is not None and ratio <= VERSION_RATIO_TARGET))


# ---------------------------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------------------------


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--evals", action="append", default=[], metavar="[LABEL=]PATH|git:REV",
                        help="a copy of evals.py to measure (repeatable; default: this "
                             "repository's), e.g. --evals before=/tmp/old/evals.py or "
                             "--evals 15ff8ea=git:15ff8ea")
    parser.add_argument("--n", type=int, default=None,
                        help="cases for the live runs (1000; --quick: 200)")
    parser.add_argument("--latency", type=float, default=0.2, help="server latency, s (0.2)")
    parser.add_argument("--concurrency", default="8,32", help="levels, comma-separated (8,32)")
    parser.add_argument("--rescore-cases", type=int, default=None,
                        help="cases for the re-scoring run (100000; --quick: 20000)")
    parser.add_argument("--rounds", type=int, default=None,
                        help="interleaved runs of each live and re-scoring command, the best "
                             "one counted (2; --quick: 1)")
    parser.add_argument("--quick", action="store_true",
                        help="N=200, 20,000 re-scored cases, 1 round (targets still shown)")
    parser.add_argument("--skip", action="append", default=[],
                        choices=["throughput", "429", "limited", "matrix", "rescore",
                                 "startup", "help", "version"],
                        help="skip a part (startup: both --help and the --version ratio)")
    args = parser.parse_args(argv)
    copies = parse_copies(args.evals, parser)
    n = args.n or (200 if args.quick else 1000)
    rescore_n = args.rescore_cases or (20000 if args.quick else 100000)
    rounds = args.rounds or (1 if args.quick else 2)
    levels = [int(x) for x in args.concurrency.split(",") if x.strip()]
    if not levels or min(levels) < 1 or n < 1 or rescore_n < 1 or not 1 <= rounds <= 20:
        parser.error("--concurrency, --n and --rescore-cases must be positive, --rounds 1-20")
    summary = []

    print("evals benchmarks: Python %s on %s, %d CPU(s)"
          % (sys.version.split()[0], sys.platform, os.cpu_count() or 0))
    with tempfile.TemporaryDirectory(prefix="evals-bench-") as workdir:
        # Each copy runs from a scratch folder holding only its evals.py, its evals_extras.py
        # when it has one, and a my_client.py (its own, else this repository's).
        for index, copy in enumerate(copies):
            copy.prepare(workdir, index)
            print("   [%s] %s" % (copy.label, copy.source))
            for line in copy.describe():
                print("       " + line)
        if "throughput" not in args.skip:
            part_throughput(copies, n, args.latency, levels, rounds, workdir, summary)
        if "429" not in args.skip:
            part_rate_limited(copies, RATE_LIMITED_CASES, args.latency,
                              RATE_LIMITED_CONCURRENCY, workdir, summary)
        if "limited" not in args.skip:
            part_limited(copies, LIMITED_CASES, args.latency, LIMITED_CONCURRENCY, workdir,
                         summary)
        if "matrix" not in args.skip:
            part_matrix(copies, rounds, workdir, summary)
        if "rescore" not in args.skip:
            part_rescore(copies, rescore_n, rounds, workdir, summary)
        if "startup" not in args.skip and "help" not in args.skip:
            part_help_startup(copies, summary)
        if "startup" not in args.skip and "version" not in args.skip:
            part_version_ratio(copies, workdir, summary)

    print("\nSummary")
    width = max([len(label) for label, _n, _f, _ok in summary] or [0])
    for label, name, figure, ok in summary:
        print("   %-4s %-*s  %-52s %s" % (_verdict(ok), width, label, name, figure))
    return 0 if all(ok for _l, _n, _f, ok in summary) else 1


if __name__ == "__main__":
    sys.exit(main())
