"""`python evals.py --batch` against a loopback server implementing OpenAI's Batch API and
Anthropic's Message Batches API as documented (the shapes are cited in my_client.py), beside
their live chat endpoints, so that a batch run and a live run of one suite can be compared.

The server answers each prompt the same way live and in a batch: a prompt with "refund" gets
an answer naming a manager, one with "BROKEN" is refused with HTTP 400, any other gets a
polite non-answer. A batch ends on its second poll, expired when the test says so.
"""

import contextlib
import email.parser
import email.policy
import http.server
import io
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest
from unittest import mock

import evals
import evals_extras
import my_client
import my_client_batches

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KEY = "sk-batchtest-0123456789abcdef"
MODEL = {"openai": "gpt-4o-mini", "anthropic": "claude-haiku-4-5"}


def answer_text(prompt):
    if "refund" in prompt.lower():
        return "A manager must approve refunds over $100."
    return "I am sorry, I cannot help with that."


def last_prompt(provider, body):
    return body["messages"][-1]["content"]


def live_answer(provider, body):
    """(status, JSON) of a live call with this request body."""
    prompt = last_prompt(provider, body)
    if "BROKEN" in prompt:
        kind = "invalid_request_error"
        error = {"message": "this prompt is refused", "type": kind}
        return 400, ({"error": error} if provider == "openai" else
                     {"type": "error", "error": error})
    text = answer_text(prompt)
    if provider == "openai":
        return 200, {"id": "chatcmpl-1", "object": "chat.completion", "model": body["model"],
                     "choices": [{"index": 0, "finish_reason": "stop",
                                  "message": {"role": "assistant", "content": text}}],
                     "usage": {"prompt_tokens": 1000, "completion_tokens": 500}}
    return 200, {"id": "msg_1", "type": "message", "role": "assistant", "model": body["model"],
                 "content": [{"type": "text", "text": text}], "stop_reason": "end_turn",
                 "usage": {"input_tokens": 1000, "output_tokens": 500}}


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # the body not held back until the headers' ACK (~40 ms)

    def log_message(self, format, *args):
        pass

    def reply(self, status, payload, content_type="application/json"):
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        with self.server.lock:
            self.server.log.append(("GET", self.path, self.headers.get("Authorization")
                                    or self.headers.get("x-api-key")))
            status, payload, kind = self.server.fake.get(self.path)
        self.reply(status, payload, kind)

    def do_POST(self):
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        with self.server.lock:
            self.server.log.append(("POST", self.path, self.headers.get("Authorization")
                                    or self.headers.get("x-api-key")))
            status, payload = self.server.fake.post(self.path, self.headers, raw)
        self.reply(status, payload)


class FakeProvider:
    """OpenAI's and Anthropic's endpoints: live chat, and the batch APIs."""

    def __init__(self, expire=()):
        self.expire = set(expire)  # prompts a batch leaves unanswered, ending "expired"
        self.polls_fail = False  # a poll is answered 503
        self.hold = False  # batches do not end
        self.files, self.batches, self.live_bodies, self.batch_bodies = {}, {}, [], []
        self.http = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.http.daemon_threads = True
        self.http.fake, self.http.lock, self.http.log = self, threading.Lock(), []
        self.thread = threading.Thread(target=self.http.serve_forever,  # stop() within 5 ms
                                       kwargs={"poll_interval": 0.005}, daemon=True)
        self.thread.start()

    def stop(self):
        self.http.shutdown()
        self.http.server_close()

    @property
    def url(self):
        return "http://127.0.0.1:%d/v1" % self.http.server_address[1]

    def log(self):
        with self.http.lock:
            return list(self.http.log)

    def created(self):
        return [path for method, path, _ in self.log()
                if method == "POST" and path in ("/v1/batches", "/v1/messages/batches")]

    # ---- POST ----
    def post(self, path, headers, raw):
        if path in ("/v1/chat/completions", "/v1/messages"):
            body = json.loads(raw)
            self.live_bodies.append(body)
            return live_answer("openai" if path == "/v1/chat/completions" else "anthropic", body)
        if path == "/v1/files":
            return self.upload(headers, raw)
        if path == "/v1/batches":
            return self.create("openai", json.loads(raw))
        if path == "/v1/messages/batches":
            return self.create("anthropic", json.loads(raw))
        return 404, {"error": {"message": "no route %s" % path}}

    def upload(self, headers, raw):
        message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
            b"Content-Type: " + headers["Content-Type"].encode() + b"\r\n\r\n" + raw)
        parts = {part.get_param("name", header="content-disposition"): part
                 for part in message.iter_parts()}
        if parts["purpose"].get_content().strip() != "batch":
            return 400, {"error": {"message": "purpose must be batch"}}
        file_id = "file-%d" % (len(self.files) + 1)
        self.files[file_id] = parts["file"].get_payload(decode=True)
        return 200, {"id": file_id, "object": "file", "purpose": "batch",
                     "filename": parts["file"].get_filename()}

    def create(self, provider, body):
        if provider == "openai":
            assert body["endpoint"] == "/v1/chat/completions", body
            assert body["completion_window"] == "24h", body
            lines = [json.loads(line) for line in self.files[body["input_file_id"]].splitlines()]
            assert all(line["method"] == "POST" and line["url"] == "/v1/chat/completions"
                       for line in lines), lines
            requests = [(line["custom_id"], line["body"]) for line in lines]
            batch_id = "batch_%d" % (len(self.batches) + 1)
        else:
            requests = [(r["custom_id"], r["params"]) for r in body["requests"]]
            batch_id = "msgbatch_%d" % (len(self.batches) + 1)
        self.batch_bodies.extend(body for _, body in requests)
        self.batches[batch_id] = {"provider": provider, "requests": requests, "polls": 0}
        return 200, self.state(batch_id)

    # ---- GET ----
    def get(self, path):
        parts = path.strip("/").split("/")
        if self.polls_fail:
            error = {"message": "overloaded", "type": "server_error"}
            return 503, {"error": error}, "application/json"
        if parts[:2] == ["v1", "batches"] and len(parts) == 3:
            self.batches[parts[2]]["polls"] += 1
            return 200, self.state(parts[2]), "application/json"
        if parts[:3] == ["v1", "messages", "batches"] and len(parts) == 4:
            self.batches[parts[3]]["polls"] += 1
            return 200, self.state(parts[3]), "application/json"
        if parts[:3] == ["v1", "messages", "batches"] and parts[4:] == ["results"]:
            return 200, self.anthropic_results(parts[3]), "application/binary"
        if parts[:2] == ["v1", "files"] and parts[3:] == ["content"]:
            return 200, self.files[parts[2]], "application/octet-stream"
        return 404, {"error": {"message": "no route %s" % path}}, "application/json"

    def ended(self, batch):
        return batch["polls"] >= 2 and not self.hold

    def expired(self, batch):
        return any(last_prompt(batch["provider"], body) in self.expire
                   for _, body in batch["requests"])

    def state(self, batch_id):
        batch = self.batches[batch_id]
        total = len(batch["requests"])
        if batch["provider"] == "anthropic":
            ended = self.ended(batch)
            return {"id": batch_id, "type": "message_batch",
                    "processing_status": "ended" if ended else "in_progress",
                    "request_counts": {"processing": 0 if ended else total,
                                       "succeeded": total if ended else 0, "errored": 0,
                                       "canceled": 0, "expired": 0},
                    "results_url": "%s/messages/batches/%s/results" % (self.url, batch_id)
                    if ended else None}
        state = {"id": batch_id, "object": "batch", "endpoint": "/v1/chat/completions",
                 "status": "in_progress", "request_counts": {"total": total, "completed": 0,
                                                             "failed": 0}}
        if self.ended(batch):
            state["status"] = "expired" if self.expired(batch) else "completed"
            state.update(self.openai_files(batch_id, batch))
            state["request_counts"].update(completed=total, failed=0)
        return state

    def openai_files(self, batch_id, batch):
        output, errors = [], []
        for custom_id, body in batch["requests"]:
            row = {"id": "batch_req_%s" % custom_id, "custom_id": custom_id}
            if last_prompt("openai", body) in self.expire:
                errors.append(dict(row, response=None, error={
                    "code": "batch_expired", "message": "This request could not be executed "
                    "before the completion window expired."}))
                continue
            status, answer = live_answer("openai", body)
            row.update(response={"status_code": status, "request_id": "req_1", "body": answer},
                       error=None)
            (output if status == 200 else errors).append(row)
        names = {}
        for name, rows in (("output_file_id", output), ("error_file_id", errors)):
            if rows:
                names[name] = "file-%s-%s" % (batch_id, name[:3])
                self.files[names[name]] = "".join(json.dumps(r) + "\n" for r in rows).encode()
        return names

    def anthropic_results(self, batch_id):
        lines = []
        for custom_id, body in reversed(self.batches[batch_id]["requests"]):  # any order
            if last_prompt("anthropic", body) in self.expire:
                result = {"type": "expired"}
            else:
                status, answer = live_answer("anthropic", body)
                result = ({"type": "succeeded", "message": answer} if status == 200
                          else {"type": "errored", "error": answer})
            lines.append(json.dumps({"custom_id": custom_id, "result": result}) + "\n")
        return "".join(lines).encode("utf-8")


CASES = [
    {"id": "refund", "input": "Can I get a refund of $150?",
     "checks": [{"type": "contains_any", "values": ["manager"]}]},
    {"id": "refund-chat", "input": "My order arrived damaged; what about a refund?",
     "checks": [{"type": "contains_all", "values": ["manager", "approve"]}]},
    {"id": "hours", "input": "When are you open?",
     "checks": [{"type": "contains_any", "values": ["9am"]}]},
    {"id": "broken", "input": "BROKEN request",
     "checks": [{"type": "max_words", "n": 50}]},
]


class BatchCase(unittest.TestCase):
    provider = "openai"

    def setUp(self):
        tmp = tempfile.TemporaryDirectory(prefix="evals-batch-")
        self.addCleanup(tmp.cleanup)
        self.dir = tmp.name
        self.cases = os.path.join(self.dir, "cases.jsonl")
        self.write_cases(CASES)

    def write_cases(self, cases):
        with open(self.cases, "w", encoding="utf-8") as handle:
            handle.writelines(json.dumps(case) + "\n" for case in cases)

    def serve(self, **options):
        server = FakeProvider(**options)
        self.addCleanup(server.stop)
        return server

    def run_evals(self, server, *args, provider=None, out="record.json", **extra):
        """evals.main in this process against `server`: (exit code, stdout, stderr), my_client's
        own lines on stderr included."""
        provider = provider or self.provider
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("EVALS_") and not k.endswith("_API_KEY")}
        env.update(EVALS_PROVIDER=provider, EVALS_BASE_URL=server.url, EVALS_BATCH_POLL_S="0.01",
                   EVALS_MODEL=MODEL.get(provider, "x"), OPENAI_API_KEY=KEY,
                   ANTHROPIC_API_KEY=KEY, GEMINI_API_KEY=KEY)
        env.update(extra)
        stdout, stderr = io.StringIO(), io.StringIO()
        with mock.patch.dict(os.environ, env, clear=True), contextlib.redirect_stderr(stderr):
            code = evals.main(["--cases", self.cases, "--client", "my_client:ask",
                               "--baseline", os.path.join(self.dir, "last_run.json"),
                               "--no-history", *(["--out", os.path.join(self.dir, out)]
                                                 if out else []), *args],
                              stdout, stderr)
        self.stdout, self.stderr = stdout.getvalue(), stderr.getvalue()
        return code

    def describe(self):
        return "\nstdout:\n%s\nstderr:\n%s" % (self.stdout[-3000:], self.stderr[-3000:])

    def record(self, name="record.json"):
        with open(os.path.join(self.dir, name), encoding="utf-8") as handle:
            return json.load(handle)

    def saved(self):
        path = os.path.join(self.dir, ".evals", "batches.json")
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)["batches"]


def comparable(record):
    """The record without what differs between a live and a batch run: times and costs."""
    record = json.loads(json.dumps(record))
    for key in ("started_at", "finished_at", "git_commit"):
        record.pop(key, None)
    for key in ("latency_s", "cost_usd"):
        record["summary"].pop(key, None)
    for entry in record["cases"]:
        entry.pop("latency_s", None)
        entry.pop("cost_usd", None)
    return record


class SameRecordTests(BatchCase):
    def assertSameAsLive(self, provider):
        server = self.serve()
        live = self.run_evals(server, provider=provider, out="live.json")
        self.assertEqual(live, 2, self.describe())  # the BROKEN case errors
        batched = self.run_evals(server, "--batch", provider=provider, out="batch.json")
        self.assertEqual(batched, 2, self.describe())
        self.assertEqual(server.created(), ["/v1/batches" if provider == "openai"
                                            else "/v1/messages/batches"])
        # The batch sent exactly the bodies of the live calls.
        self.assertEqual(sorted(map(json.dumps, server.batch_bodies)),
                         sorted(map(json.dumps, server.live_bodies)))
        live_record, batch_record = self.record("live.json"), self.record("batch.json")
        self.assertEqual(comparable(batch_record), comparable(live_record))
        statuses = {e["id"]: e["status"] for e in batch_record["cases"]}
        self.assertEqual(statuses, {"refund": "pass", "refund-chat": "pass", "hours": "fail",
                                    "broken": "error"})
        # Half the price: gpt-4o-mini 1000 x $0.15 + 500 x $0.60 per million = $0.00045 live.
        live_costs = {e["id"]: e.get("cost_usd") for e in live_record["cases"]}
        for entry in batch_record["cases"]:
            if entry["status"] != "error":
                self.assertAlmostEqual(entry["cost_usd"], live_costs[entry["id"]] / 2)
                self.assertIsNone(entry.get("latency_s"))
        self.assertAlmostEqual(batch_record["summary"]["cost_usd"],
                               live_record["summary"]["cost_usd"] / 2)
        self.assertEqual(self.saved(), [])  # collected: nothing left to resume
        return batch_record

    def test_openai_batch_gives_the_live_record(self):
        record = self.assertSameAsLive("openai")
        broken = next(e for e in record["cases"] if e["id"] == "broken")
        self.assertEqual(broken["error"], "ProviderError: openai: HTTP 400 "
                         "(invalid_request_error) this prompt is refused")
        self.assertAlmostEqual(record["cases"][0]["cost_usd"], 0.00045 / 2)

    def test_anthropic_batch_gives_the_live_record(self):
        record = self.assertSameAsLive("anthropic")
        broken = next(e for e in record["cases"] if e["id"] == "broken")
        self.assertEqual(broken["error"], "ProviderError: anthropic: HTTP 400 "
                         "(invalid_request_error) this prompt is refused")

    def test_the_key_goes_with_every_batch_request(self):
        server = self.serve()
        self.run_evals(server, "--batch", provider="anthropic")
        self.assertEqual({sent for _m, _p, sent in server.log()}, {KEY})
        self.assertNotIn(KEY, self.stderr + self.stdout)

    def test_repeats_are_one_request_each(self):
        server = self.serve()
        code = self.run_evals(server, "--batch", "--repeat", "3", "--id", "refund*")
        self.assertEqual(code, 0, self.describe())
        self.assertEqual(len(server.batch_bodies), 6)
        entries = {e["id"]: e for e in self.record()["cases"] if e.get("change") != "not_run"}
        self.assertEqual([a["status"] for a in entries["refund"]["attempts"]], ["pass"] * 3)

    def test_each_repeat_gets_the_answer_to_its_own_request(self):
        case = evals.Case("c", "q", ({"type": "contains_any", "values": ["yes"]},))
        replies = {evals_extras._batch_call_id("c", 0): "yes", evals_extras._batch_call_id("c", 1): "no",
                   evals_extras._batch_call_id("c", 2): ValueError("refused")}
        result = evals.run_case(case, evals_extras._answered_from(replies), evals.RunOptions(repeat=4))
        self.assertEqual([(a["status"], a["output"], a["error"]) for a in result.attempts],
                         [("pass", "yes", None), ("fail", "no", None),
                          ("error", None, "ValueError: refused"),
                          ("error", None, "LookupError: the batch holds no answer to this call")])

    def test_progress_is_said_on_stderr(self):
        server = self.serve()
        self.run_evals(server, "--batch", "--id", "refund")
        self.assertIn("evals: submitted batch batch_1 (1 call)", self.stderr)
        self.assertIn("my_client: openai batch batch_1: in_progress, 0 of 1 requests done",
                      self.stderr)
        self.assertIn("my_client: openai batch batch_1: completed, 1 of 1 requests done",
                      self.stderr)
        self.assertIn("evals: collected batch batch_1; costs are estimated at batch prices",
                      self.stderr)

    def test_conversation_cases_go_through_a_batch(self):
        # The batch answers a conversation as a live call does; the run must not refuse the
        # collected answers as coming from a client that takes no conversations.
        conversation = [{"role": "system", "content": "You are Acme's support bot."},
                        {"role": "user", "content": "Can I get a refund of $150?"}]
        self.write_cases([{"id": "chat", "input": conversation,
                           "checks": [{"type": "contains_any", "values": ["manager"]}]}])
        server = self.serve()
        code = self.run_evals(server, "--batch")
        self.assertEqual(code, 0, self.describe())
        self.assertEqual(server.batch_bodies[0]["messages"], conversation)
        [entry] = self.record()["cases"]
        self.assertEqual((entry["status"], entry["input"]), ("pass", conversation))
        self.assertEqual(self.saved(), [])

    def test_repeat_flaky_sends_each_flaky_case_n_times(self):
        history = os.path.join(self.dir, ".evals", "history.sqlite")
        os.makedirs(os.path.dirname(history))
        for status in ("pass", "fail", "pass"):  # "refund" is flaky in the history
            evals_extras.history_append(history, {
                "started_at": "t", "finished_at": "t", "client": "c", "git_commit": None,
                "case_file": {"sha256": "0"},
                "cases": [{"id": "refund", "status": status, "change": "passing"}],
                "summary": {"total": 1, "passed": 0, "pass_rate": 0, "regressed": 0}})
        server = self.serve()
        code = self.run_evals(server, "--batch", "--repeat-flaky", "3", "--history", history)
        self.assertEqual(code, 0, self.describe())
        self.assertEqual(len(server.batch_bodies), 3)
        entries = {e["id"]: e for e in self.record()["cases"] if e.get("change") != "not_run"}
        self.assertEqual([a["status"] for a in entries["refund"]["attempts"]], ["pass"] * 3)


class ResumeTests(BatchCase):
    def interrupted_run(self, server):
        """A --batch run stopped by Ctrl-C at its first wait between polls."""
        with mock.patch.object(my_client, "sleep", side_effect=KeyboardInterrupt):
            code = self.run_evals(server, "--batch")
        self.assertEqual(code, 130, self.describe())
        return self.stderr

    def test_ctrl_c_saves_the_batch_and_the_next_run_collects_it(self):
        server = self.serve()
        said = self.interrupted_run(server)
        self.assertIn("evals: batch batch_1 goes on at the provider; --batch with the same "
                      "cases, or --batch-resume batch_1, collects it", said)
        [saved] = self.saved()
        digest = evals.load_cases(self.cases)[1]
        self.assertEqual((saved["id"], saved["case_file_sha256"], saved["case_ids"]),
                         ("batch_1", digest, [c["id"] for c in CASES]))
        self.assertEqual(saved["custom_ids"], {evals_extras._batch_call_id(c["id"], 0): [c["id"], 0]
                                               for c in CASES})
        self.assertTrue(all(len(key) <= 64 for key in saved["custom_ids"]))
        self.assertFalse(os.path.exists(os.path.join(self.dir, "record.json")))
        code = self.run_evals(server, "--batch")
        self.assertEqual(code, 2, self.describe())  # the BROKEN case
        self.assertIn("evals: collecting batch batch_1, submitted", self.stderr)
        self.assertEqual(server.created(), ["/v1/batches"])  # not submitted again
        self.assertEqual([e["status"] for e in self.record()["cases"]],
                         ["pass", "pass", "fail", "error"])
        self.assertEqual(self.saved(), [])

    def test_a_poll_that_fails_keeps_the_batch_to_collect(self):
        server = self.serve()
        server.polls_fail = True
        code = self.run_evals(server, "--batch", EVALS_MAX_ATTEMPTS="1")
        self.assertEqual(code, 2, self.describe())
        self.assertIn("evals: --batch: openai: HTTP 503 (server_error) overloaded; gave up "
                      "after 1 attempt", self.stderr)
        self.assertIn("(--batch-resume batch_1 collects the batch)", self.stderr)
        self.assertEqual([b["id"] for b in self.saved()], ["batch_1"])
        server.polls_fail = False
        self.assertEqual(self.run_evals(server, "--batch", EVALS_MAX_ATTEMPTS="1"), 2)
        self.assertEqual(server.created(), ["/v1/batches"])
        self.assertEqual(len(self.record()["cases"]), 4)

    def polling(self):
        """evals.py --batch in a process, once its batch (held at the server) was polled twice."""
        server = self.serve()
        server.hold = True
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("EVALS_") and not k.endswith("_API_KEY")}
        env.update(EVALS_PROVIDER="openai", EVALS_BASE_URL=server.url, OPENAI_API_KEY=KEY,
                   EVALS_BATCH_POLL_S="0.1", PYTHONPATH=ROOT)
        process = subprocess.Popen(
            [sys.executable, os.path.join(ROOT, "evals.py"), "--cases", self.cases, "--batch",
             "--client", "my_client:ask", "--out", "record.json", "--no-history"],
            cwd=self.dir, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        self.addCleanup(lambda: process.poll() is None and (process.kill(), process.wait()))
        deadline = time.monotonic() + 20
        while not server.batches or server.batches["batch_1"]["polls"] < 2:
            self.assertIsNone(process.poll(), "evals.py exited early")
            self.assertLess(time.monotonic(), deadline, "no batch was polled")
            time.sleep(0.05)
        return process

    def test_a_real_ctrl_c_while_polling(self):
        process = self.polling()
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=20)
        self.assertEqual(process.returncode, 130, err)
        self.assertIn("--batch-resume batch_1, collects it", err)
        self.assertEqual([b["id"] for b in self.saved()], ["batch_1"])

    def test_ctrl_c_pressed_twice_while_polling_prints_no_traceback(self):
        process = self.polling()
        # An impatient user: Ctrl-C, and again 20 ms later, while the first is handled.
        process.send_signal(signal.SIGINT)
        time.sleep(0.02)
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=20)
        # 130, or killed by the signal itself (a shell shows both as 130) when one lands while
        # the interpreter shuts down, after every file was written.
        self.assertIn(process.returncode, (130, -signal.SIGINT), err)
        self.assertNotIn("Traceback", err)
        self.assertEqual([b["id"] for b in self.saved()], ["batch_1"])

    def test_batch_resume_id(self):
        server = self.serve()
        self.interrupted_run(server)
        # EVALS_CACHE=1 in the environment: a batch run consults no cache, and says nothing of it
        code = self.run_evals(server, "--batch-resume", "batch_1", EVALS_CACHE="1")
        self.assertEqual(code, 2, self.describe())
        self.assertEqual(server.created(), ["/v1/batches"])
        self.assertEqual(len(self.record()["cases"]), 4)
        self.assertNotIn("cache", self.stdout)
        self.assertNotIn("cached", self.record()["summary"])

    def test_a_no_save_run_keeps_the_batch_to_collect_again(self):
        server = self.serve()
        self.interrupted_run(server)
        self.assertEqual(self.run_evals(server, "--batch", "--no-save", out=None), 2)  # broken
        self.assertIn("collecting batch batch_1", self.stderr)
        self.assertEqual([b["id"] for b in self.saved()], ["batch_1"])
        self.run_evals(server, "--batch")
        self.assertEqual((server.created(), self.saved()), (["/v1/batches"], []))

    def test_a_batch_not_saved_here_is_matched_by_case_id(self):
        server = self.serve()
        self.interrupted_run(server)
        os.remove(os.path.join(self.dir, ".evals", "batches.json"))
        with open(self.cases, "w", encoding="utf-8") as handle:  # the same cases, reordered
            handle.write("".join(json.dumps(c) + "\n" for c in reversed(CASES)))
        code = self.run_evals(server, "--batch-resume", "batch_1")
        self.assertEqual(code, 2, self.describe())  # the BROKEN case
        self.assertIn("matched to these cases by case id and repeat", self.stderr)
        self.assertEqual({e["id"]: e["status"] for e in self.record()["cases"]},
                         {"refund": "pass", "refund-chat": "pass", "hours": "fail",
                          "broken": "error"})

    def test_another_selection_submits_its_own_batch(self):
        server = self.serve()
        self.interrupted_run(server)
        code = self.run_evals(server, "--batch", "--id", "refund")
        self.assertEqual(code, 0, self.describe())
        self.assertNotIn("collecting", self.stderr)
        self.assertEqual(server.created(), ["/v1/batches", "/v1/batches"])
        self.assertEqual([b["id"] for b in self.saved()], ["batch_1"])  # still to collect

    def test_resuming_another_selection_is_refused(self):
        server = self.serve()
        self.interrupted_run(server)
        code = self.run_evals(server, "--batch-resume", "batch_1", "--id", "refund")
        self.assertEqual(code, 2, self.describe())
        self.assertIn("--batch-resume batch_1: that batch holds other cases", self.stderr)
        self.assertEqual(server.created(), ["/v1/batches"])

    def test_an_edited_case_file_is_another_selection(self):
        server = self.serve()
        self.interrupted_run(server)
        self.write_cases(CASES[:3] + [dict(CASES[3], input="BROKEN request, edited")])
        self.run_evals(server, "--batch")
        self.assertEqual(len(server.created()), 2)


class ExpiredTests(BatchCase):
    def assertExpiredHandled(self, provider, reason):
        server = self.serve(expire={"When are you open?"})
        code = self.run_evals(server, "--batch", provider=provider)
        self.assertEqual(code, 2, self.describe())
        entries = {e["id"]: e for e in self.record()["cases"]}
        self.assertEqual({i: e["status"] for i, e in entries.items()},
                         {"refund": "pass", "refund-chat": "pass", "hours": "error",
                          "broken": "error"})
        self.assertIn(reason, entries["hours"]["error"])
        self.assertEqual(self.saved(), [])

    def test_openai_expired_batch(self):
        self.assertExpiredHandled("openai", "(batch_expired) This request could not be "
                                            "executed before the completion window expired.")

    def test_anthropic_expired_requests(self):
        self.assertExpiredHandled("anthropic", "the batch expired (24 hours) before this "
                                               "request was processed")


class RefusedTests(BatchCase):
    def test_other_providers_are_refused_before_any_call(self):
        server = self.serve()
        for provider in ("gemini", "ollama"):
            code = self.run_evals(server, "--batch", provider=provider)
            self.assertEqual(code, 2, self.describe())
            self.assertIn("evals: --batch: batch calls support openai and anthropic; "
                          "EVALS_PROVIDER is %s" % provider, self.stderr)
        self.assertEqual(server.log(), [])

    def test_a_refused_resume_does_not_suggest_the_command_just_run(self):
        server = self.serve()
        code = self.run_evals(server, "--batch-resume", "batch_9", provider="ollama")
        self.assertEqual(code, 2, self.describe())
        self.assertIn("evals: --batch: batch calls support openai and anthropic; "
                      "EVALS_PROVIDER is ollama\n", self.stderr)
        self.assertNotIn("collects the batch", self.stderr)
        self.assertEqual(server.log(), [])

    def test_a_client_without_a_batch_interface(self):
        with open(os.path.join(self.dir, "plain.py"), "w") as handle:
            handle.write("def ask(prompt):\n    return 'x'\n")
        server = self.serve()
        stderr = io.StringIO()
        code = evals.main(["--cases", self.cases, "--client",
                           os.path.join(self.dir, "plain.py") + ":ask", "--batch",
                           "--baseline", os.path.join(self.dir, "b.json"), "--no-save"],
                          io.StringIO(), stderr)
        self.assertEqual(code, 2)
        self.assertIn("has no batch interface", stderr.getvalue())
        self.assertEqual(server.log(), [])

    def test_budget_and_rescore_contradict_batch(self):
        server = self.serve()
        self.assertEqual(self.run_evals(server, "--batch", "--budget", "1"), 2)
        self.assertIn("--budget and --batch contradict each other", self.stderr)
        self.assertEqual(server.log(), [])

    def test_cache_contradicts_batch_and_batch_resume(self):
        # A batch answers every call: the cache would answer none (its after-run line said
        # "0 of N replies came from the cache").
        server = self.serve()
        for batch in (["--batch"], ["--batch-resume", "batch_1"]):
            with self.subTest(batch=batch):
                self.assertEqual(self.run_evals(server, *batch, "--cache"), 2, self.describe())
                self.assertIn(f"--cache and {batch[0]} contradict each other", self.stderr)
        self.assertEqual(server.log(), [])

    def test_evals_cache_is_ignored_by_a_batch_even_with_omit_outputs(self):
        server = self.serve()
        self.run_evals(server, "--batch", "--omit-outputs", EVALS_CACHE="1")  # 2: "broken" errs
        self.assertIn("evals: collected batch batch_1", self.stderr, self.describe())
        self.assertNotIn("contradict", self.stderr)

    def test_a_poll_interval_that_is_no_finite_number_is_refused_before_submitting(self):
        server = self.serve()
        for bad in ("inf", "nan", "-1"):
            code = self.run_evals(server, "--batch", EVALS_BATCH_POLL_S=bad)
            self.assertEqual(code, 2, self.describe())
            self.assertIn("EVALS_BATCH_POLL_S must be a finite number >= 0.0", self.stderr)
        self.assertEqual(server.created(), [])


class ParsedLikeLiveTests(unittest.TestCase):
    """The batch's answer objects go through the live parsers (whole replies kept)."""

    def test_a_tool_call_and_thinking_survive_an_anthropic_batch(self):
        settings = my_client._resolve_settings("anthropic", {"EVALS_BASE_URL": "http://x/v1"},
                                               {})
        request = my_client.anthropic_request(settings, "hi", KEY)
        row = {"custom_id": "0-0", "result": {"type": "succeeded", "message": {
            "model": "claude-haiku-4-5", "stop_reason": "tool_use",
            "content": [{"type": "thinking", "thinking": "look it up"},
                        {"type": "tool_use", "id": "t1", "name": "lookup_order",
                         "input": {"order_id": "A-1"}}],
            "usage": {"input_tokens": 3, "output_tokens": 4}}}}
        reply = my_client_batches._anthropic_batch_answer(row, request, settings,
                                                  my_client.anthropic_parse, KEY)
        self.assertEqual((str(reply), reply.finish_reason, reply.tool_calls, reply.reasoning,
                          reply.usage["output_tokens"]),
                         ("", "tool_calls", [{"name": "lookup_order",
                                              "arguments": {"order_id": "A-1"}}],
                          "look it up", 4))

    def test_an_openai_answer_the_parser_rejects_is_an_error(self):
        settings = my_client._resolve_settings("openai", {}, {})
        request = my_client.openai_request(settings, "hi", KEY)
        row = {"custom_id": "0-0", "error": None,
               "response": {"status_code": 200, "body": {"choices": []}}}
        error = my_client_batches._openai_batch_answer(row, request, settings, my_client.openai_parse,
                                               KEY)
        self.assertIsInstance(error, my_client.ProviderError)
        self.assertIn("no choices", str(error))

    def test_results_elsewhere_are_not_fetched_with_the_key(self):
        settings = my_client._resolve_settings("anthropic", {"EVALS_BASE_URL":
                                                             "https://api.anthropic.com"}, {})
        with self.assertRaises(my_client.ProviderError) as caught:
            my_client_batches._anthropic_batch_results(settings, {"results_url":
                                                          "https://evil.example/r"})
        self.assertIn("not on api.anthropic.com", str(caught.exception))


if __name__ == "__main__":
    unittest.main()
