"""The README's regression walkthrough runs top to bottom, as a newcomer pastes it."""

import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FILES = ("evals.py", "evals_extras.py", "my_client.py", "cases.jsonl", "recordings.jsonl",
         "last_run.json")


def walkthrough_blocks():
    """The ```sh blocks of "See a regression" up to "Cases", in order."""
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as handle:
        readme = handle.read()
    section = readme[readme.index("## See a regression"):readme.index("## Cases")]
    return re.findall(r"```sh\n(.*?)```", section, re.S)


class SizeTest(unittest.TestCase):
    def test_the_readme_fits_a_first_read(self):
        """The README is a door (at most 12,000 bytes); the rest is in docs/."""
        self.assertLessEqual(os.path.getsize(os.path.join(ROOT, "README.md")), 12000)


@unittest.skipUnless(shutil.which("git") and shutil.which("bash"), "needs git and bash")
class WalkthroughTest(unittest.TestCase):
    def test_the_walkthrough_runs_in_order_and_says_what_the_readme_says(self):
        blocks = walkthrough_blocks()
        self.assertEqual(len(blocks), 5, "break, reports, add/shards/merge, fix, undo")
        with tempfile.TemporaryDirectory() as folder:
            for name in FILES:
                shutil.copy(os.path.join(ROOT, name), folder)
            env = {k: v for k, v in os.environ.items() if not k.startswith("EVALS_")}
            env.update(GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.com",
                       GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@example.com",
                       PATH=os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", ""))
            for command in ("git init -q .", "git add -A", "git commit -q -m start"):
                subprocess.run(command.split(), cwd=folder, env=env, check=True, timeout=60)
            outputs = []
            for block in ["python evals.py"] + blocks:  # "Two commands" comes first
                done = subprocess.run(["bash", "-c", block.replace("python ", "python3 ")
                                       if not shutil.which("python") else block],
                                      cwd=folder, env=env, capture_output=True, text=True,
                                      timeout=300)
                outputs.append(done.stdout)
            status = subprocess.run(["git", "status", "--porcelain"], cwd=folder, env=env,
                                    capture_output=True, text=True, timeout=60).stdout
        first, broken, reports, shards, fixed, _undo = outputs
        self.assertIn("pass rate 100.0% (22/22)", first)
        self.assertIn("REGRESSED: refund-over-100-needs-approval", broken)
        self.assertTrue(broken.rstrip().endswith("exit 1"), broken)
        self.assertIn("::error title=Regression%3A refund-over-100-needs-approval::", reports)
        self.assertIn("the new case fails on that output, as it should", shards)
        self.assertIn("NEW FAIL: refund-150-instant", shards)
        self.assertTrue(shards.rstrip().endswith("exit 1"), shards)
        self.assertIn("FIXED: refund-over-100-needs-approval", fixed)
        self.assertIn("flaky (both outcomes in recent runs): refund-over-100-needs-approval "
                      "(2/3 runs passed)", fixed)
        self.assertTrue(fixed.rstrip().endswith("exit 0"), fixed)
        self.assertEqual(status, "", "the undo block leaves the folder as it was")


if __name__ == "__main__":
    unittest.main()
