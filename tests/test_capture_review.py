"""evals_extras.capture in a running app (the review of captures: tests/test_review.py)."""

import contextlib
import io
import json
import os
import tempfile
import threading
import unittest

import evals_extras
import my_client



def read_lines(path):
    with open(path, encoding="utf-8") as handle:
        return handle.read().splitlines()


class CaptureTest(unittest.TestCase):
    def setUp(self):
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.dir = tmp.name
        self.path = os.path.join(self.dir, ".evals", "captures.jsonl")

    def rows(self):
        return [json.loads(line) for line in read_lines(self.path)]

    def test_decorator_forms_and_fields(self):
        @evals_extras.capture(path=self.path, tags=["support"], context={"release": "v2"})
        def bot(question, temperature=0):
            return "answer to " + question

        def plain(prompt):
            return my_client.Reply("reply", model="m")

        wrapped = evals_extras.capture(plain, path=self.path)
        self.assertEqual(bot("q1"), "answer to q1")
        self.assertEqual(wrapped("q2").model, "m")  # the return value is passed through as is
        self.assertEqual(bot.__name__, "bot")
        first, second = self.rows()
        self.assertEqual(set(first), {"ts", "input", "output", "tags", "context", "latency_s",
                                      "error"})
        self.assertEqual((first["input"], first["output"], first["tags"], first["context"]),
                         ("q1", "answer to q1", ["support"], {"release": "v2"}))
        self.assertIsNone(first["error"])
        self.assertGreaterEqual(first["latency_s"], 0)
        self.assertEqual((second["input"], second["output"], second["tags"]), ("q2", "reply", []))

    def test_a_dict_return_and_a_reply_with_tool_calls_are_stored_as_recordings_store_them(self):
        calls = [{"name": "lookup", "arguments": {"id": 7}}]
        evals_extras.capture(lambda q: {"text": "t", "score": 1}, path=self.path)("q")
        evals_extras.capture(lambda q: my_client.Reply("", finish_reason="tool_calls",
                                                        tool_calls=calls), path=self.path)("q")
        plain, reply = self.rows()
        self.assertEqual(plain["output"], {"text": "t", "score": 1})
        self.assertEqual(reply["output"], {"text": "", "finish_reason": "tool_calls",
                                           "tool_calls": calls})
        self.assertNotIn("my_client", evals_extras.capture.__globals__)

    def test_input_found_in_methods_and_keywords(self):
        class App:
            @evals_extras.capture(path=self.path)
            def ask(self, prompt):
                return prompt.upper()

        App().ask("hi")
        evals_extras.capture(lambda **kw: "x", path=self.path)(prompt="by keyword")
        evals_extras.capture(lambda messages: "x", path=self.path)([{"role": "user"}])
        inputs = [row["input"] for row in self.rows()]
        self.assertEqual(inputs[:2], ["hi", "by keyword"])
        self.assertEqual(inputs[2], {"args": [[{"role": "user"}]], "kwargs": {}})

    def test_error_is_captured_and_reraised(self):
        @evals_extras.capture(path=self.path)
        def bot(question):
            raise TimeoutError("provider took too long")

        with self.assertRaises(TimeoutError):
            bot("q")
        row = self.rows()[0]
        self.assertEqual(row["error"], "TimeoutError: provider took too long")
        self.assertIsNone(row["output"])

    def test_redaction(self):
        calls = []

        @evals_extras.capture(path=self.path, redact=[r"\b\d{16}\b", r"[\w.]+@\w+\.\w+"],
                           context=lambda: {"user": "ana@example.com", "n": len(calls)})
        def bot(question):
            calls.append(question)
            if "fail" in question:
                raise ValueError("bad card 4111111111111111")
            return "Card 4111111111111111 on file for ana@example.com."

        bot("My card is 4111111111111111, mail ana@example.com")
        with self.assertRaises(ValueError):
            bot("fail 4111111111111111")
        text = "\n".join(read_lines(self.path))
        self.assertNotIn("4111111111111111", text)
        self.assertNotIn("ana@example.com", text)
        first, second = self.rows()
        self.assertEqual(first["input"], "My card is [REDACTED], mail [REDACTED]")
        self.assertEqual(first["output"], "Card [REDACTED] on file for [REDACTED].")
        self.assertEqual(first["context"], {"user": "[REDACTED]", "n": 0})
        self.assertEqual(second["error"], "ValueError: bad card [REDACTED]")
        self.assertEqual(calls[0], "My card is 4111111111111111, mail ana@example.com")

    def test_store_text_false_keeps_only_hashes_and_lengths(self):
        @evals_extras.capture(path=self.path, store_text=False)
        def bot(question):
            if question == "boom":
                raise RuntimeError("secret detail")
            return "secret answer"

        bot("secret question")
        with self.assertRaises(RuntimeError):
            bot("boom")
        text = "\n".join(read_lines(self.path))
        self.assertNotIn("secret", text)
        first, second = self.rows()
        self.assertEqual(first["input"]["chars"], len("secret question"))
        self.assertEqual(len(first["input"]["sha256"]), 64)
        self.assertEqual(first["output"]["chars"], len("secret answer"))
        self.assertEqual(second["error"], "RuntimeError")

    def test_eight_threads_lose_no_line(self):
        @evals_extras.capture(path=self.path, tags=["load"])
        def bot(question):
            return question + " " + "x" * 20000  # lines far longer than a pipe buffer

        def worker(number):
            for call in range(40):
                bot(f"t{number}-c{call}")

        threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        lines = read_lines(self.path)
        self.assertEqual(len(lines), 8 * 40)
        inputs = {json.loads(line)["input"] for line in lines}  # every line valid JSON
        self.assertEqual(inputs, {f"t{n}-c{c}" for n in range(8) for c in range(40)})

    def test_a_capture_that_cannot_be_written_does_not_break_the_app(self):
        os.makedirs(self.path)  # a directory where the file should be
        evals_extras._capture_warned.clear()
        self.addCleanup(evals_extras._capture_warned.clear)
        bot = evals_extras.capture(lambda q: "fine", path=self.path)
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            self.assertEqual(bot("a"), "fine")
            self.assertEqual(bot("b"), "fine")
        self.assertEqual(err.getvalue().count("capture to"), 1)


if __name__ == "__main__":
    unittest.main()
