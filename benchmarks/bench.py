#!/usr/bin/env python3
"""Benchmarks for evals.py: live-call throughput, offline re-scoring, CLI startup.

Prints figures and a PASS/MISS summary; it is a script, not a unit test.

    python benchmarks/bench.py                 # full run (N=500, 100,000 re-scored cases)
    python benchmarks/bench.py --quick         # N=100, 20,000 re-scored cases
    python benchmarks/bench.py --n 500 --latency 0.2 --concurrency 1,8,32 --rescore-cases 100000

1. Throughput: a loopback OpenAI-compatible server answers every chat completion after a fixed
   latency; `python evals.py --client my_client:ask -j C` runs N cases against it through the
   real adapter (EVALS_PROVIDER=openai).  Wall time is compared with the physical limit
   ceil(N / C) x latency.  Target at the highest concurrency: <= 1.10 x the limit.
2. Re-scoring: `python evals.py --rescore recordings.jsonl` over generated cases with 5 checks
   each.  Targets: < 10 s and < 300 MB peak RSS.
3. Startup: median wall time of `python evals.py --help` over 10 runs.  Target < 100 ms; when
   missed, the slowest imports of `python -X importtime` are listed.

Standard library only; every subprocess runs with a time limit.
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
RESCORE_SECONDS_TARGET = 10.0
RESCORE_MB_TARGET = 300.0
STARTUP_MS_TARGET = 100.0


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
        if length:
            self.rfile.read(length)
        server = self.server
        with server.lock:
            server.count += 1
            server.in_flight += 1
            server.peak = max(server.peak, server.in_flight)
        time.sleep(server.latency)
        with server.lock:  # before answering: the client's next request may follow at once
            server.in_flight -= 1
        try:
            payload = server.body
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
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


class ChatServer:
    """Answers every POST with one chat completion after `latency` seconds; counts requests."""

    def __init__(self, latency):
        self.server = _Server(("127.0.0.1", 0), _Handler)
        self.server.latency = latency
        self.server.lock = threading.Lock()
        self.server.count = 0
        self.server.in_flight = 0
        self.server.peak = 0
        self.server.body = json.dumps({
            "id": "chatcmpl-bench", "object": "chat.completion", "model": "gpt-4o-mini",
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": "OK: the answer is 42."}}],
            "usage": {"prompt_tokens": 12, "completion_tokens": 7, "total_tokens": 19},
        }).encode("utf-8")
        self.thread = threading.Thread(target=self.server.serve_forever,
                                       kwargs={"poll_interval": 0.05}, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)

    @property
    def url(self):
        return "http://127.0.0.1:%d/v1" % self.server.server_address[1]

    def reset(self):
        with self.server.lock:
            self.server.count = 0
            self.server.peak = 0

    def stats(self):
        with self.server.lock:
            return self.server.count, self.server.peak


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


# ---------------------------------------------------------------------------------------------
# 1. Throughput through the real client
# ---------------------------------------------------------------------------------------------


def write_simple_cases(path, n):
    with open(path, "w", encoding="utf-8") as handle:
        for i in range(n):
            handle.write(json.dumps({
                "id": "case-%05d" % i, "input": "Question number %d: what is the answer?" % i,
                "checks": [{"type": "contains_any", "values": ["42"]}],
            }) + "\n")


def bench_throughput(n, latency, levels, workdir):
    cases = os.path.join(workdir, "throughput_cases.jsonl")
    write_simple_cases(cases, n)
    rows = []
    with ChatServer(latency) as server:
        env_shown = {"EVALS_PROVIDER": "openai", "OPENAI_API_KEY": KEY,
                     "EVALS_BASE_URL": server.url}
        env = _base_env(**env_shown)
        for level in levels:
            argv = [sys.executable, EVALS, "--cases", cases, "--client", "my_client:ask",
                    "-j", str(level), "--no-save", "--no-history", "-q"]
            server.reset()
            limit = math.ceil(n / level) * latency
            wall, done = _run(argv, env, ROOT, limit * 5 + 60)
            count, peak = server.stats()
            rows.append({
                "concurrency": level, "wall_s": wall, "limit_s": limit, "ratio": wall / limit,
                "requests": count, "peak_in_flight": peak, "exit": done.returncode,
                "stdout": done.stdout.decode("utf-8", "replace").strip(),
                "stderr": done.stderr.decode("utf-8", "replace").strip(),
                "command": _command_text(argv, env_shown),
            })
    return rows


# ---------------------------------------------------------------------------------------------
# 2. Offline re-scoring
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


def bench_rescore(n, workdir):
    cases, recordings = write_rescore_files(workdir, n)
    argv = [sys.executable, EVALS, "--cases", cases, "--rescore", recordings, "--no-save",
            "--no-history", "-q"]
    # ru_maxrss of RUSAGE_CHILDREN is the largest of all children waited for so far, so the
    # measurement runs in a fresh wrapper process whose only child is evals.py.
    wrapper = (
        "import json, resource, subprocess, sys, time\n"
        "argv = json.loads(sys.argv[1])\n"
        "t = time.perf_counter()\n"
        "p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)\n"
        "wall = time.perf_counter() - t\n"
        "rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss\n"
        "print(json.dumps({'wall': wall, 'rss_kib': rss, 'exit': p.returncode,\n"
        "                  'stdout': p.stdout.decode('utf-8', 'replace')[-2000:],\n"
        "                  'stderr': p.stderr.decode('utf-8', 'replace')[-2000:]}))\n"
    )
    env = _base_env()
    done = subprocess.run([sys.executable, "-c", wrapper, json.dumps(argv)], env=env, cwd=workdir,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=600)
    if done.returncode != 0:
        raise RuntimeError("re-scoring wrapper failed: %s" % done.stderr.decode()[-2000:])
    result = json.loads(done.stdout.decode("utf-8"))
    rss_kib = result["rss_kib"]
    if sys.platform == "darwin":  # bytes there
        rss_kib //= 1024
    return {
        "n": n, "wall_s": result["wall"], "peak_mb": rss_kib / 1024.0, "exit": result["exit"],
        "stdout": result["stdout"].strip(), "stderr": result["stderr"].strip(),
        "command": _command_text(argv),
        "sizes_mb": (os.path.getsize(cases) / 1e6, os.path.getsize(recordings) / 1e6),
    }


# ---------------------------------------------------------------------------------------------
# 3. Startup
# ---------------------------------------------------------------------------------------------


def bench_module_startup(runs=10):
    """Median ms of `python -m evals --help` with bytecode caching allowed (an imported module's
    compiled code is cached in __pycache__; a script's never is)."""
    argv = [sys.executable, "-m", "evals", "--help"]
    env = _base_env()
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    _run(argv, env, ROOT, 60)  # writes __pycache__/evals.*.pyc (ignored by git)
    times = []
    for _ in range(runs):
        wall, done = _run(argv, env, ROOT, 60)
        if done.returncode != 0:
            raise RuntimeError("python -m evals --help exited %d" % done.returncode)
        times.append(wall * 1000)
    return statistics.median(times), _command_text(argv)


def bench_startup(runs=10):
    argv = [sys.executable, EVALS, "--help"]
    env = _base_env()
    times = []
    _run(argv, env, ROOT, 60)  # warm the file cache and __pycache__
    for _ in range(runs):
        wall, done = _run(argv, env, ROOT, 60)
        if done.returncode != 0:
            raise RuntimeError("evals.py --help exited %d" % done.returncode)
        times.append(wall * 1000)
    baseline = []
    for _ in range(runs):
        wall, _done = _run([sys.executable, "-c", "pass"], env, ROOT, 60)
        baseline.append(wall * 1000)
    return {"median_ms": statistics.median(times), "min_ms": min(times),
            "python_ms": statistics.median(baseline), "command": _command_text(argv)}


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


def import_time_top(count=12):
    """Top-level imports made by evals.py itself (not by interpreter start-up), slowest first:
    (cumulative us, self us, name)."""
    startup = {name.strip() for _c, _s, name in _import_rows([sys.executable, "-X", "importtime",
                                                              "-c", "pass"])}
    rows = _import_rows([sys.executable, "-X", "importtime", EVALS, "--help"])
    own = [r for r in rows if not r[2].startswith("  ") and r[2].strip() not in startup]
    own.sort(reverse=True)
    return own[:count]


def startup_parts(runs=5):
    """Milliseconds: compiling evals.py (a script is never cached), running its module body
    (imports, regexes, dataclasses) with the source already compiled."""
    with open(EVALS, encoding="utf-8") as handle:
        source = handle.read()
    compile_ms = min(_timed(lambda: compile(source, EVALS, "exec")) for _ in range(runs))
    code = compile(source, EVALS, "exec")
    body = (
        "import sys, time\n"
        "code = compile(open(sys.argv[1], encoding='utf-8').read(), sys.argv[1], 'exec')\n"
        "t = time.perf_counter()\n"
        "exec(code, {'__name__': 'evals_bench', '__file__': sys.argv[1]})\n"
        "print((time.perf_counter() - t) * 1000)\n"
    )
    del code
    body_ms = []
    for _ in range(runs):
        done = subprocess.run([sys.executable, "-c", body, EVALS], env=_base_env(), cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
        body_ms.append(float(done.stdout.decode().strip().splitlines()[-1]))
    return compile_ms, statistics.median(body_ms)


def _timed(func):
    started = time.perf_counter()
    func()
    return (time.perf_counter() - started) * 1000


# ---------------------------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------------------------


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=None, help="cases for the throughput runs (500)")
    parser.add_argument("--latency", type=float, default=0.2, help="server latency, s (0.2)")
    parser.add_argument("--concurrency", default="1,8,32", help="levels, comma-separated")
    parser.add_argument("--rescore-cases", type=int, default=None,
                        help="cases for the re-scoring run (100000)")
    parser.add_argument("--quick", action="store_true",
                        help="N=100 and 20,000 re-scored cases (targets still shown)")
    parser.add_argument("--skip", action="append", default=[],
                        choices=["throughput", "rescore", "startup"], help="skip a part")
    args = parser.parse_args(argv)
    n = args.n or (100 if args.quick else 500)
    rescore_n = args.rescore_cases or (20000 if args.quick else 100000)
    levels = [int(x) for x in args.concurrency.split(",") if x.strip()]
    summary = []

    print("evals benchmarks: Python %s on %s, %d CPU(s)"
          % (sys.version.split()[0], sys.platform, os.cpu_count() or 0))
    with tempfile.TemporaryDirectory(prefix="evals-bench-") as workdir:
        if "throughput" not in args.skip:
            print("\n1. Live calls through my_client (OpenAI-compatible loopback server, "
                  "%d ms latency, N=%d)" % (args.latency * 1000, n))
            rows = bench_throughput(n, args.latency, levels, workdir)
            print("   %-4s %9s %9s %7s %9s %9s %5s" % ("-j", "wall s", "limit s", "ratio",
                                                      "requests", "peak", "exit"))
            for row in rows:
                print("   %-4d %9.2f %9.2f %7.3f %9d %9d %5d" % (
                    row["concurrency"], row["wall_s"], row["limit_s"], row["ratio"],
                    row["requests"], row["peak_in_flight"], row["exit"]))
            print("   command: " + rows[-1]["command"])
            for row in rows:
                if row["exit"] != 0 or row["requests"] != n:
                    print("   -j %d: exit %d, %d requests; stdout: %s; stderr: %s" % (
                        row["concurrency"], row["exit"], row["requests"], row["stdout"][-500:],
                        row["stderr"][-500:]))
            top = max(rows, key=lambda r: r["concurrency"])
            summary.append(("throughput -j %d <= %.2f x limit" % (top["concurrency"],
                                                                  THROUGHPUT_TARGET),
                            "%.3f x" % top["ratio"], top["ratio"] <= THROUGHPUT_TARGET))
            exact = all(r["requests"] == n for r in rows)
            summary.append(("server saw exactly N=%d requests per run" % n,
                            ", ".join(str(r["requests"]) for r in rows), exact))
            summary.append(("every throughput run exits 0",
                            ", ".join(str(r["exit"]) for r in rows),
                            all(r["exit"] == 0 for r in rows)))

        if "rescore" not in args.skip:
            print("\n2. Offline re-scoring: %d recorded cases x 5 checks" % rescore_n)
            result = bench_rescore(rescore_n, workdir)
            print("   files: cases %.1f MB, recordings %.1f MB" % result["sizes_mb"])
            print("   wall %.2f s, peak RSS %.1f MB, exit %d" % (
                result["wall_s"], result["peak_mb"], result["exit"]))
            print("   evals output: " + " | ".join(result["stdout"].splitlines()[:4]))
            if result["stderr"]:
                print("   stderr: " + result["stderr"][-500:])
            print("   command: " + result["command"])
            summary.append(("re-scoring %d cases < %.0f s" % (rescore_n, RESCORE_SECONDS_TARGET),
                            "%.2f s" % result["wall_s"],
                            result["wall_s"] < RESCORE_SECONDS_TARGET))
            summary.append(("re-scoring peak RSS < %.0f MB" % RESCORE_MB_TARGET,
                            "%.1f MB" % result["peak_mb"], result["peak_mb"] < RESCORE_MB_TARGET))
            # exit 1 is impossible without a baseline; 0 means no error
            summary.append(("re-scoring exits 0 (no errored case)", str(result["exit"]),
                            result["exit"] == 0))

        if "startup" not in args.skip:
            print("\n3. Startup: python evals.py --help, median of 10")
            result = bench_startup()
            print("   median %.1f ms, min %.1f ms (bare `python -c pass`: %.1f ms)" % (
                result["median_ms"], result["min_ms"], result["python_ms"]))
            print("   command: " + result["command"])
            ok = result["median_ms"] < STARTUP_MS_TARGET
            if not ok:
                compile_ms, body_ms = startup_parts()
                print("   where it goes: interpreter start-up %.1f ms, compiling evals.py %.1f ms "
                      "(scripts run as `python evals.py` are never byte-code cached), module "
                      "body %.1f ms, the rest is argparse and output" % (
                          result["python_ms"], compile_ms, body_ms))
                print("   slowest imports made by evals.py (python -X importtime; cumulative "
                      "and self, us):")
                for cumulative, own, name in import_time_top():
                    print("     %8d  %8d  %s" % (cumulative, own, name.strip()))
            summary.append(("startup median < %.0f ms" % STARTUP_MS_TARGET,
                            "%.1f ms" % result["median_ms"], ok))
            module_ms, module_command = bench_module_startup()
            print("   python -m evals --help (bytecode cached): median %.1f ms" % module_ms)
            print("   command: " + module_command)
            summary.append(("startup, python -m evals, median < %.0f ms" % STARTUP_MS_TARGET,
                            "%.1f ms" % module_ms, module_ms < STARTUP_MS_TARGET))

    print("\nSummary")
    for name, figure, ok in summary:
        print("   %-4s %-46s %s" % (_verdict(ok), name, figure))
    return 0 if all(ok for _n, _f, ok in summary) else 1


if __name__ == "__main__":
    sys.exit(main())
