"""The pages of docs/ are tested the way the README's walkthrough is: every ```sh block runs as a
reader pastes it, on a scratch copy of the repository, and prints what the page shows.

A block that cannot run here (it needs an API key, a server, a long load test) says so on the
line before it, `<!-- not run: WHY -->`; those stay few. The output a page shows for a block is
the plain ``` block right after it: each of its lines (but `...`; `...` inside a line stands
for anything) must be in what the block printed, stdout and stderr together, and the block must end with exit status 0 (a block whose
command fails on purpose ends with `echo "exit $?"`, and shows the `exit N` it prints).
"""

import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = os.path.join(ROOT, "docs")
FOLDERS = ("examples", "benchmarks")  # copied beside the top-level files: blocks run their files
MAX_NOT_RUN = 6
BLOCK = re.compile(r"^( *)```sh\n(.*?)^\1```\n", re.S | re.M)
SHOWN = re.compile(r"\n*( *)```\n(.*?)^\1```", re.S | re.M)
NOT_RUN = re.compile(r"^ *<!-- not run: (.+?) -->$", re.M)
VERSION = re.compile(r"^evals \d+\.\d+\.\d+\S*:", re.M)


def dedent(text, indent):
    return "".join(line[len(indent):] if line.startswith(indent) else line
                   for line in text.splitlines(True))


def blocks(text):
    """(line number, command, shown output lines or None, not-run reason or None) per block."""
    for match in BLOCK.finditer(text):
        indent = match.group(1)
        before = text[:match.start()].rstrip("\n").rsplit("\n", 1)[-1].strip()
        not_run = NOT_RUN.fullmatch(before)
        shown = SHOWN.match(text, match.end())
        lines = None
        if shown and shown.group(1) == indent:
            lines = [line.strip() for line in dedent(shown.group(2), indent).splitlines()
                     if line.strip() and line.strip() != "..."]
        yield (text.count("\n", 0, match.start()) + 1, dedent(match.group(2), indent), lines,
               not_run.group(1) if not_run else None)


def pages():
    """{name: text} of docs/*.md."""
    found = {}
    for path in sorted(glob.glob(os.path.join(DOCS, "*.md"))):
        with open(path, encoding="utf-8") as handle:
            found[os.path.basename(path)] = handle.read()
    return found


def scratch_copy(folder):
    """The repository's top-level files (evals.py, evals_extras.py when there is one,
    my_client.py, cases, recordings, the baseline ...) and the folders blocks run files from."""
    for name in os.listdir(ROOT):
        path = os.path.join(ROOT, name)
        if os.path.isfile(path):
            shutil.copy(path, folder)
    for name in FOLDERS:
        shutil.copytree(os.path.join(ROOT, name), os.path.join(folder, name),
                        ignore=shutil.ignore_patterns("__pycache__", ".evals"))


def environment(folder):
    """No EVALS_* setting of the developer's leaks in; `python` is this Python."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVALS_")}
    shims = os.path.join(folder, ".shims")
    os.mkdir(shims)
    os.symlink(sys.executable, os.path.join(shims, "python"))
    env["PATH"] = shims + os.pathsep + env.get("PATH", "")
    env.pop("PYTHONPATH", None)
    return env


class MarkersTest(unittest.TestCase):
    def test_not_run_blocks_stay_few_and_say_why(self):
        not_run = [(name, line, why) for name, text in pages().items()
                   for line, _command, _shown, why in blocks(text) if why]
        self.assertLessEqual(len(not_run), MAX_NOT_RUN, not_run)
        for name, line, why in not_run:
            self.assertGreater(len(why), 10, f"docs/{name}:{line}: say why it is not run")

    def test_every_marker_stands_before_a_block(self):
        for name, text in pages().items():
            marked = len(NOT_RUN.findall(text))
            self.assertEqual(marked, sum(1 for b in blocks(text) if b[3]),
                             f"docs/{name}: a not-run marker that is not right before a ```sh block")

    def test_the_output_shown_after_a_block_is_found(self):
        # A plain fence right after a ```sh block (blank lines between) is its shown output;
        # counted here by lines, apart from the SHOWN pattern, which once found none.
        for name, text in pages().items():
            lines, expected = text.splitlines(), 0
            for number, line in enumerate(lines):
                if line.strip() != "```sh":
                    continue
                end = next(i for i in range(number + 1, len(lines))
                           if lines[i].strip() == "```")
                after = next((l for l in lines[end + 1:] if l.strip()), "")
                expected += after.strip() == "```"
            found = sum(1 for b in blocks(text) if b[2] is not None)
            self.assertEqual(found, expected, f"docs/{name}")

    def test_most_blocks_run(self):
        counts = [bool(b[3]) for text in pages().values() for b in blocks(text)]
        self.assertGreater(counts.count(False), counts.count(True))


@unittest.skipUnless(shutil.which("bash") and hasattr(os, "symlink"), "needs bash and symlinks")
class BlocksRunTest(unittest.TestCase):
    def test_every_block_runs_and_prints_what_the_page_shows(self):
        for name, text in pages().items():
            runnable = [b for b in blocks(text) if not b[3]]
            if not runnable:
                continue
            with tempfile.TemporaryDirectory() as folder:
                scratch_copy(folder)
                env = environment(folder)
                for line, command, shown, _ in runnable:  # in page order, in one folder
                    with self.subTest(page=name, line=line):
                        done = subprocess.run(["bash", "-c", command], cwd=folder, env=env,
                                              capture_output=True, text=True, timeout=120)
                        printed = VERSION.sub("evals VERSION:", done.stdout + done.stderr)
                        where = f"docs/{name}:{line}\n{command}\nprinted:\n{printed}"
                        self.assertEqual(done.returncode, 0, where)
                        for expected in shown or ():  # `...` inside a line: anything
                            pattern = ".*?".join(re.escape(part) for part in
                                                 VERSION.sub("evals VERSION:", expected).split("..."))
                            self.assertRegex(printed, re.compile(pattern, re.M), where)


class LinksTest(unittest.TestCase):
    """Relative links in the README and docs/ (and the examples' READMEs) reach a file, and a
    #fragment reaches a heading of that file."""

    def slugs(self, path):
        with open(path, encoding="utf-8") as handle:
            text = re.sub(r"^```.*?^```", "", handle.read(), flags=re.S | re.M)
        return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
                for h in re.findall(r"^#+ (.+)$", text, re.M)}

    def test_links_reach_their_targets(self):
        files = [os.path.join(ROOT, "README.md"), os.path.join(ROOT, "CHANGELOG.md")]
        files += glob.glob(os.path.join(DOCS, "*.md"))
        files += glob.glob(os.path.join(ROOT, "examples", "*", "README.md"))
        for source in files:
            with open(source, encoding="utf-8") as handle:
                text = re.sub(r"^ *```.*?^ *```", "", handle.read(), flags=re.S | re.M)
            for target in re.findall(r"\]\(([^)\s]+)\)", text):
                if re.match(r"[a-z]+:", target):
                    continue
                path, _, fragment = target.partition("#")
                full = os.path.normpath(os.path.join(os.path.dirname(source), path)) \
                    if path else source
                where = f"{os.path.relpath(source, ROOT)}: ({target})"
                self.assertTrue(os.path.exists(full), where)
                if fragment and full.endswith(".md"):
                    self.assertIn(fragment, self.slugs(full), where)


if __name__ == "__main__":
    unittest.main()
