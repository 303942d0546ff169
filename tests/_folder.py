"""A test case in a temporary folder holding copies of this repository's files, with evals'
command line run there in-process."""

import io
import os
import shutil
import tempfile
import unittest

import evals

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class FolderCase(unittest.TestCase):
    """`self.dir`: a temporary folder holding copies of the repository's `FILES`."""

    FILES = ("cases.jsonl", "recordings.jsonl", "last_run.json")

    def setUp(self):
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.dir = tmp.name
        for name in self.FILES:
            shutil.copy(os.path.join(ROOT, name), self.dir)

    def main(self, *argv):
        """evals.main(argv) run in the folder: (exit code, stdout, stderr)."""
        out, err = io.StringIO(), io.StringIO()
        cwd = os.getcwd()
        os.chdir(self.dir)
        try:
            code = evals.main(list(argv), out, err)
        finally:
            os.chdir(cwd)
        return code, out.getvalue(), err.getvalue()
