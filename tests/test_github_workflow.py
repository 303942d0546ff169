"""The GitHub workflow (.github/workflows/evals.yml): valid against SchemaStore's published
schema, its pull-request comment guarded (pull_request only, the narrowest permissions, a fork
told and skipped), and the comment step's script run against a stand-in for `gh`.

The schema is the one check-jsonschema ships (SchemaStore's github-workflow.json, Apache-2.0);
PyYAML, jsonschema and check-jsonschema are test-only packages pinned in .ci/run: without them
the tests that need them are skipped, like the Hypothesis tests.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import unittest

try:
    import yaml
except ImportError:  # test-only package (.ci/run)
    yaml = None

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKFLOW = os.path.join(ROOT, ".github", "workflows", "evals.yml")
MARKER = "<!-- evals-report -->"


def load_workflow():
    """The workflow as GitHub reads it: YAML 1.2's booleans, so `on:` stays a key (PyYAML
    follows YAML 1.1, where `on` is true)."""

    class Loader(yaml.SafeLoader):
        pass

    Loader.yaml_implicit_resolvers = {
        first: [r for r in resolvers if r[0] != "tag:yaml.org,2002:bool"]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }
    Loader.add_implicit_resolver("tag:yaml.org,2002:bool",
                                 re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"),
                                 list("tTfF"))
    with open(WORKFLOW, encoding="utf-8") as handle:
        return yaml.load(handle, Loader=Loader)


def comment_step(workflow):
    steps = workflow["jobs"]["comment"]["steps"]
    return next(s for s in steps if "run" in s and "gh api" in s["run"])


@unittest.skipIf(yaml is None, "PyYAML is a test-only package (pip install pyyaml, .ci/run)")
class SchemaTest(unittest.TestCase):
    def setUp(self):
        try:
            import importlib.resources

            import jsonschema
            schemas = importlib.resources.files("check_jsonschema.builtin_schemas.vendor")
        except ImportError:
            self.skipTest("jsonschema and check-jsonschema are test-only packages (.ci/run)")
        self.schema = json.loads(schemas.joinpath("github-workflows.json").read_text("utf-8"))
        validator = jsonschema.validators.validator_for(self.schema)
        validator.check_schema(self.schema)
        self.validator = validator(self.schema)

    def problems(self, workflow):
        return sorted(f"{list(e.absolute_path)}: {e.message}"
                      for e in self.validator.iter_errors(workflow))

    def test_the_workflow_validates_against_the_published_schema(self):
        self.assertEqual(self.schema.get("$id"), "https://json.schemastore.org/github-workflow.json")
        self.assertEqual(self.problems(load_workflow()), [])

    def test_the_schema_refuses_a_broken_workflow(self):
        # the validation can fail: a permission level that does not exist, a step key misspelt
        workflow = load_workflow()
        workflow["jobs"]["comment"]["permissions"] = {"pull-requests": "writ"}
        self.assertTrue(self.problems(workflow))
        workflow = load_workflow()
        comment_step(workflow)["continue-on-eror"] = True
        self.assertTrue(self.problems(workflow))


@unittest.skipIf(yaml is None, "PyYAML is a test-only package (pip install pyyaml, .ci/run)")
class CommentGuardTest(unittest.TestCase):
    def setUp(self):
        self.workflow = load_workflow()
        self.job = self.workflow["jobs"]["comment"]

    def test_no_trigger_hands_a_pull_requests_code_a_write_token(self):
        self.assertIn("pull_request", self.workflow["on"])
        self.assertNotIn("pull_request_target", self.workflow["on"])
        with open(WORKFLOW, encoding="utf-8") as handle:
            self.assertNotIn("pull_request_target", handle.read())

    def test_only_the_comment_job_may_write_and_only_to_pull_requests(self):
        self.assertEqual(self.workflow["permissions"], {"contents": "read"})
        granted = {name: job["permissions"] for name, job in self.workflow["jobs"].items()
                   if "permissions" in job}
        self.assertEqual(granted, {"comment": {"pull-requests": "write"}})

    def test_the_comment_job_runs_on_pull_requests_after_the_gate_and_no_code_of_theirs(self):
        self.assertEqual(self.job["needs"], "gate")
        self.assertIn("github.event_name == 'pull_request'", self.job["if"])
        self.assertIn("!cancelled()", self.job["if"])  # a failing gate's report is posted too
        uses = [s.get("uses", "") for s in self.job["steps"]]
        self.assertFalse([u for u in uses if u.startswith("actions/checkout")])
        download = next(s for s in self.job["steps"] if "download-artifact" in s.get("uses", ""))
        self.assertEqual(download["with"]["name"], "evals-reports")

    def test_the_comment_never_decides_the_verdict_and_its_script_takes_no_expression(self):
        step = comment_step(self.workflow)
        self.assertIs(step["continue-on-error"], True)
        self.assertNotIn("${{", step["run"])  # event text reaches the script as variables only
        self.assertEqual(step["env"]["HEAD_REPOSITORY"],
                         "${{ github.event.pull_request.head.repo.full_name }}")
        self.assertEqual(step["env"]["REPOSITORY"], "${{ github.repository }}")
        self.assertEqual(step["env"]["GH_TOKEN"], "${{ github.token }}")
        gate = self.workflow["jobs"]["gate"]
        self.assertIn('exit "$code"', gate["steps"][-2]["run"])  # the gate's exit is the verdict
        self.assertIn("--markdown evals-report.md", gate["steps"][-2]["run"])


# Stands in for `gh api`: logs each call, answers the listing with comments.json through the
# real jq (as gh's --jq does), keeps the body of a POST or PATCH.
FAKE_GH = textwrap.dedent("""\
    import json, os, shutil, subprocess, sys
    args = sys.argv[1:]
    with open("gh.log", "a") as log:
        log.write(json.dumps(args) + "\\n")
    if os.environ.get("FAKE_GH_FAILS"):
        sys.exit("gh: HTTP 403: Resource not accessible by integration")
    if "--method" in args:
        shutil.copy(args[args.index("--input") + 1], "sent.json")
    else:
        query = args[args.index("--jq") + 1]
        sys.stdout.write(subprocess.run(["jq", "-r", query, "comments.json"], check=True,
                                        capture_output=True, text=True).stdout)
""")


@unittest.skipIf(yaml is None, "PyYAML is a test-only package (pip install pyyaml, .ci/run)")
@unittest.skipIf(not (shutil.which("bash") and shutil.which("jq")), "needs bash and jq")
class CommentScriptTest(unittest.TestCase):
    """The comment step's script as the runner runs it (bash -e), with `gh` stood in for."""

    REPORT = "## ❌ evals: 1 regression\n\n`x` & <b>\n"

    def run_script(self, comments, head="owner/repo", fails=False):
        folder = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, folder)
        bin_folder = os.path.join(folder, "bin")
        os.mkdir(bin_folder)
        with open(os.path.join(bin_folder, "gh"), "w", encoding="utf-8") as handle:
            handle.write(f"#!{sys.executable}\n" + FAKE_GH)
        os.chmod(os.path.join(bin_folder, "gh"), 0o755)
        with open(os.path.join(folder, "comments.json"), "w", encoding="utf-8") as handle:
            json.dump(comments, handle)
        with open(os.path.join(folder, "evals-report.md"), "w", encoding="utf-8") as handle:
            handle.write(self.REPORT)
        step = comment_step(load_workflow())
        env = dict(os.environ, PATH=bin_folder + os.pathsep + os.environ["PATH"],
                   REPOSITORY="owner/repo", HEAD_REPOSITORY=head, PULL_REQUEST="7",
                   GH_TOKEN="not-a-token")
        if fails:
            env["FAKE_GH_FAILS"] = "1"
        done = subprocess.run(["bash", "-e", "-c", step["run"]], cwd=folder, env=env,
                              capture_output=True, text=True, timeout=60)
        calls, sent = [], None
        if os.path.exists(os.path.join(folder, "gh.log")):
            with open(os.path.join(folder, "gh.log"), encoding="utf-8") as handle:
                calls = [json.loads(line) for line in handle]
        if os.path.exists(os.path.join(folder, "sent.json")):
            with open(os.path.join(folder, "sent.json"), encoding="utf-8") as handle:
                sent = json.load(handle)
        return done, calls, sent

    def test_the_first_report_is_posted_after_the_marker(self):
        someone = {"id": 3, "user": {"login": "someone"}, "body": MARKER + "\nquoted"}
        done, calls, sent = self.run_script([someone])
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertEqual(calls[0][:3], ["api", "repos/owner/repo/issues/7/comments", "--paginate"])
        self.assertEqual(calls[1][:4], ["api", "--method", "POST",
                                        "repos/owner/repo/issues/7/comments"])
        self.assertEqual(sent, {"body": MARKER + "\n" + self.REPORT})

    def test_a_later_push_updates_the_comment_it_posted(self):
        comments = [{"id": 3, "user": {"login": "someone"}, "body": "looks good"},
                    {"id": 99, "user": {"login": "github-actions[bot]"}, "body": MARKER + "\nold"},
                    {"id": 5, "user": {"login": "github-actions[bot]"}, "body": "another bot text"}]
        done, calls, sent = self.run_script(comments)
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertEqual(len(calls), 2)
        self.assertEqual(calls[1][:4], ["api", "--method", "PATCH",
                                        "repos/owner/repo/issues/comments/99"])
        self.assertEqual(sent, {"body": MARKER + "\n" + self.REPORT})

    def test_a_fork_is_told_and_nothing_is_posted(self):
        done, calls, sent = self.run_script([], head="someone/fork")
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertTrue(done.stdout.startswith("::notice title=No pull-request comment::a pull "
                                               "request from a fork"), done.stdout)
        self.assertEqual((calls, sent), ([], None))

    def test_a_refused_listing_fails_the_step_and_posts_nothing(self):
        # the step fails (continue-on-error keeps the job's verdict): no second comment
        done, calls, sent = self.run_script([], fails=True)
        self.assertNotEqual(done.returncode, 0)
        self.assertEqual((len(calls), sent), (1, None))


if __name__ == "__main__":
    unittest.main()
