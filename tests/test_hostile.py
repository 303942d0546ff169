"""Hostile input: files the user had are never overwritten, bad names are refused."""

import io
import json
import os
import shutil
import tempfile
import unittest

import evals

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class NothingTheUserHadIsOverwrittenTest(unittest.TestCase):
    def setUp(self):
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.dir = tmp.name
        for name in ("cases.jsonl", "recordings.jsonl", "last_run.json"):
            shutil.copy(os.path.join(ROOT, name), self.dir)
        self.before = {name: self.read(name) for name in os.listdir(self.dir)}

    def read(self, name):
        with open(os.path.join(self.dir, name), "rb") as handle:
            return handle.read()

    def main(self, *argv):
        err = io.StringIO()
        cwd = os.getcwd()
        os.chdir(self.dir)
        try:
            code = evals.main(list(argv), io.StringIO(), err)
        finally:
            os.chdir(cwd)
        return code, err.getvalue()

    def test_outputs_pointed_at_inputs_are_refused_before_any_work(self):
        rescore = ("--rescore", "recordings.jsonl", "--no-history")
        for argv, words in (
                (("--out", ""), "--out: the file name is empty"),
                (("--html", "cases.jsonl"), "--html cases.jsonl is also --cases"),
                (("--junit", "./cases.jsonl"), "--junit ./cases.jsonl is also --cases"),
                (("--markdown", "last_run.json", "--no-save"), "is also --baseline"),
                (("--json", "recordings.jsonl"), "--json recordings.jsonl is also --rescore"),
                (("--record", "recordings.jsonl"), "is also --rescore"),
                (("--out", "cases.jsonl"), "--out cases.jsonl is also --cases"),
                (("--html", "r.html", "--markdown", "r.html"), "--html r.html is also --markdown")):
            with self.subTest(argv=argv):
                code, err = self.main(*rescore, *argv)
                self.assertEqual(code, 2, err)
                self.assertIn(words, err)
                self.assertIn("refusing to overwrite" if "empty" not in words else "empty", err)
        for command in (("report", "last_run.json", "--html", "last_run.json"),
                        ("merge", "last_run.json", "--out", "last_run.json"),
                        ("merge", "last_run.json", "--out", "cases.jsonl")):
            with self.subTest(command=command):
                code, err = self.main(*command)
                self.assertEqual(code, 2, err)
                self.assertIn("refusing to overwrite", err)
        self.assertEqual({name: self.read(name) for name in os.listdir(self.dir)}, self.before)

    def test_a_link_to_an_input_is_the_same_file(self):
        os.symlink("cases.jsonl", os.path.join(self.dir, "link.html"))
        code, err = self.main("--rescore", "recordings.jsonl", "--html", "link.html")
        self.assertEqual(code, 2)
        self.assertIn("--html link.html is also --cases", err)
        self.assertEqual(self.read("cases.jsonl"), self.before["cases.jsonl"])


if __name__ == "__main__":
    unittest.main()
