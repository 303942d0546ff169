"""The baseline changes only when a verdict does: a run that keeps every case's verdict leaves
last_run.json byte for byte as it was, so `git status` stays clean after the README's first
command and after any run that changed nothing (docs/outcomes.md, "When the baseline is
written")."""

import os
import shutil
import subprocess
import sys
import tempfile
import unittest

from tests.test_workflow import ROOT, Workspace, ok_case


class WrittenOnlyWhenAVerdictChangesTest(Workspace):
    def setUp(self):
        super().setUp()
        self.write_cases([ok_case("a"), ok_case("b")])
        self.all_ok(["a", "b"])

    def baseline_bytes(self):
        with open(self.baseline, "rb") as handle:
            return handle.read()

    def assert_run(self, code, *args, written):
        before = self.baseline_bytes() if os.path.exists(self.baseline) else None
        got, out, err = self.run_cli("--no-history", *args)
        self.assertEqual(got, code, out + err)
        after = self.baseline_bytes()
        if written:
            self.assertNotEqual(after, before, "the baseline should have been written")
        else:
            self.assertEqual(after, before, "a run that changed no verdict rewrote the baseline")
        return out

    def test_each_kind_of_change_and_its_repeat(self):
        self.assert_run(0, written=True)  # the first run records the baseline
        self.assert_run(0, written=False)  # the same verdicts: not a byte changes
        self.all_ok(["a", "b"], a="no")
        self.assertIn("REGRESSED: a", self.assert_run(1, written=True))  # a's status changed
        self.assertIn("REGRESSED: a", self.assert_run(1, written=False))  # and again: no news
        self.assert_run(0, "--accept", written=True)  # --accept always writes
        self.assert_run(0, written=False)
        self.all_ok(["a", "b"], a="!raise")
        self.assert_run(2, written=False)  # an error scores nothing, so changes nothing
        self.all_ok(["a", "b"])
        self.assertIn("FIXED: a", self.assert_run(0, written=True))
        self.write_cases([ok_case("a"), ok_case("b"), ok_case("c")])  # a case added
        self.all_ok(["a", "b", "c"])
        self.assert_run(0, written=True)
        self.assert_run(0, written=False)
        self.write_cases([ok_case("a"), ok_case("b")])  # a case removed
        self.assert_run(0, written=True)
        edited = ok_case("b")
        edited["checks"].append({"type": "max_words", "n": 5})  # the case file changed
        self.write_cases([ok_case("a"), edited])
        self.assert_run(0, written=True)
        self.assert_run(0, written=False)

    def test_a_selected_run_that_keeps_its_verdicts_writes_nothing(self):
        self.assert_run(0, written=True)
        self.assert_run(0, "--id", "a", written=False)
        self.all_ok(["a", "b"], b="no")
        self.assert_run(1, "--id", "b", written=True)


@unittest.skipUnless(shutil.which("git"), "needs git")
class CleanTreeTest(unittest.TestCase):
    def test_the_readme_command_leaves_a_fresh_clone_clean(self):
        with tempfile.TemporaryDirectory() as folder:
            clone = os.path.join(folder, "clone")
            env = {k: v for k, v in os.environ.items()
                   if not k.startswith(("EVALS_", "GIT_")) and not k.endswith("_API_KEY")}
            env.update(GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.com",
                       GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@example.com",
                       PYTHONDONTWRITEBYTECODE="1")
            os.mkdir(clone)
            tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True,
                                     check=True).stdout.decode().split("\0")
            for name in ("evals.py", "evals_extras.py", "my_client.py", "my_client_batches.py",
                         "cases.jsonl", "recordings.jsonl", "last_run.json", ".gitignore"):
                self.assertIn(name, tracked)
                shutil.copy(os.path.join(ROOT, name), clone)

            def git(*argv):
                return subprocess.run(["git", *argv], cwd=clone, env=env, capture_output=True,
                                      text=True, check=True).stdout

            git("init", "-q")
            git("add", "-A")
            git("commit", "-qm", "copied")
            for _ in range(2):  # the README's first command, then the same again
                done = subprocess.run([sys.executable, "evals.py"], cwd=clone, env=env,
                                      capture_output=True, text=True, timeout=120)
                self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
                self.assertEqual(git("status", "--porcelain"), "")


if __name__ == "__main__":
    unittest.main()
