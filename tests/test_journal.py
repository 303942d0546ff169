"""Nothing paid for is lost: each live run keeps its answers in a journal of its own, deleted
only once its record is written (or kept, and said, when it cannot be); no other run, offline or
live, selected or at the same time, removes it; `--resume` takes over the journals interrupted
runs left; calls in flight when a run is stopped are journaled if they answer within the grace
period, or said lost. Each test runs evals.py in a subprocess, as a user does."""

import glob
import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EVALS = os.path.join(ROOT, "evals.py")
RUN_TIMEOUT = 60  # seconds, a run

# A client of the user's own, steered by the environment (its file, and so its identity, stays
# the same): it logs each call it starts to APP_LOG, raises KeyboardInterrupt (Ctrl-C in the
# call) on the prompt APP_STOP_AT, sleeps APP_DELAY seconds an answer, and the seconds
# APP_SLOW gives a prompt ("Q1=1.0,Q3=30").
CLIENT = textwrap.dedent('''
    import os, time

    def answer(prompt):
        with open(os.environ.get("APP_LOG", "calls.log"), "a") as log:
            log.write(prompt + "\\n")
        if prompt == os.environ.get("APP_STOP_AT"):
            raise KeyboardInterrupt
        slow = dict(item.split("=") for item in os.environ.get("APP_SLOW", "").split(",") if item)
        time.sleep(float(slow.get(prompt, os.environ.get("APP_DELAY", "0"))))
        if os.environ.get("APP_RMDIR") and os.path.isdir(os.environ["APP_RMDIR"]):
            os.rmdir(os.environ["APP_RMDIR"])  # the --out folder goes while the run runs
        return "Answer to " + prompt
''')


class JournalCase(unittest.TestCase):
    CASES = 5

    def setUp(self):
        tmp = tempfile.TemporaryDirectory(prefix="evals-journal-")
        self.addCleanup(tmp.cleanup)
        self.folder = tmp.name
        with open(self.path("app.py"), "w", encoding="utf-8") as handle:
            handle.write(CLIENT)
        with open(self.path("cases.jsonl"), "w", encoding="utf-8") as handle:
            for i in range(self.CASES):
                handle.write(json.dumps({"id": f"c{i}", "input": f"Q{i}", "checks": [
                    {"type": "contains_any", "values": ["Answer"]}]}) + "\n")
        with open(self.path("recordings.jsonl"), "w", encoding="utf-8") as handle:
            for i in range(self.CASES):
                handle.write(json.dumps({"id": f"c{i}", "output": f"Answer to Q{i}"}) + "\n")

    def path(self, *names):
        return os.path.join(self.folder, *names)

    def env(self, **extra):
        env = {k: v for k, v in os.environ.items() if not k.startswith(("EVALS_", "APP_"))}
        env.update(PYTHONDONTWRITEBYTECODE="1", **extra)
        return env

    def argv(self, args, client=True):
        head = [sys.executable, EVALS, "--no-history"]
        if client:
            head += ["--client", "app:answer"]
        return head + list(args)

    def evals(self, *args, client=True, **env):
        """Run evals.py in the folder: (exit code, stdout, stderr)."""
        done = subprocess.run(self.argv(args, client), cwd=self.folder, env=self.env(**env),
                              capture_output=True, text=True, timeout=RUN_TIMEOUT)
        return done.returncode, done.stdout, done.stderr

    def start(self, *args, **env):
        process = subprocess.Popen(self.argv(args), cwd=self.folder, env=self.env(**env),
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.addCleanup(self.reap, process)
        return process

    @staticmethod
    def reap(process):
        if process.poll() is None:
            process.kill()
        process.communicate()

    def calls(self, log="calls.log"):
        if not os.path.exists(self.path(log)):
            return []
        with open(self.path(log), encoding="utf-8") as handle:
            return handle.read().splitlines()

    def wait_for(self, condition, what):
        for _ in range(1000):  # 20 s at most
            if condition():
                return
            time.sleep(0.02)
        self.fail(f"waited 20 s for {what}")

    def interrupt(self, process):
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=RUN_TIMEOUT)
        self.assertEqual(process.returncode, 130, out + err)
        return out, err

    def journals(self):
        return sorted(glob.glob(self.path(".evals", "unfinished*.jsonl")))


class NoOtherRunRemovesTheAnswersTest(JournalCase):
    def test_offline_selected_and_plain_runs_leave_an_interrupted_runs_journal(self):
        code, out, err = self.evals(APP_STOP_AT="Q3")  # Ctrl-C during the 4th call
        self.assertEqual(code, 130, out + err)
        self.assertIn("--resume calls only what this run did not answer", err)
        left = self.journals()
        self.assertEqual(len(left), 1, err)
        answered = self.calls()[:3]

        for args, client in ((), False), (("--id", "c4"), True), ((), True):
            with self.subTest(args=args, client=client):
                code, out, err = self.evals(*args, client=client)
                self.assertEqual(code, 0, out + err)
                self.assertTrue(os.path.exists(left[0]), "another run removed the journal")
        self.assertEqual(self.journals(), left, "a finished run removes only its own journal")

        # A --resume of one case uses none of its answers: the journal stays, said.
        code, out, err = self.evals("--resume", "--id", "c4", APP_LOG="resumed.log")
        self.assertEqual(code, 0, out + err)
        self.assertIn("0 of 1 answer reused", out)
        self.assertIn(f"{left[0]} keeps 3 answers this run did not use", err)
        self.assertEqual(self.journals(), left)

        code, out, err = self.evals("--resume", APP_LOG="resumed.log")
        self.assertEqual(code, 0, out + err)
        self.assertIn("3 of 5 answers reused from the interrupted run", out)
        self.assertEqual(self.calls("resumed.log"), ["Q4", "Q3", "Q4"])
        self.assertEqual(answered, ["Q0", "Q1", "Q2"])
        self.assertEqual(self.journals(), [], "the run that took the journal over deleted it")


class RunsAtTheSameTimeTest(JournalCase):
    CASES = 8

    def test_a_run_finishing_meanwhile_leaves_the_other_runs_answers(self):
        for other in ((), ("--resume",)):
            with self.subTest(other=other):
                for name in ("calls.log", "other.log", "resumed.log", "last_run.json"):
                    if os.path.exists(self.path(name)):
                        os.remove(self.path(name))
                slow = self.start("-j", "1", APP_DELAY="0.25")
                self.wait_for(lambda: len(self.calls()) >= 3, "the slow run's first answers")
                code, out, err = self.evals(*other, APP_LOG="other.log")
                self.assertEqual(code, 0, out + err)
                self.assertEqual(len(self.calls("other.log")), 8, "it reused nothing")
                if other:
                    self.assertIn("is the journal of a run still going on", err)
                count = len(self.calls())
                self.wait_for(lambda: len(self.calls()) >= count + 2, "more answers")
                out, err = self.interrupt(slow)
                answered = len(self.calls())
                if "1 call in flight got no answer" in err:  # Ctrl-C stopped it in its thread
                    answered -= 1

                code, out, err = self.evals("--resume", APP_LOG="resumed.log")
                self.assertEqual(code, 0, out + err)
                self.assertIn(f"{answered} of 8 answers reused from the interrupted run", out)
                self.assertEqual(len(self.calls("resumed.log")), 8 - answered)
                self.assertEqual(self.journals(), [])

    def test_a_journal_locked_by_a_running_process_is_left_to_it(self):
        code, out, err = self.evals(APP_STOP_AT="Q3")
        self.assertEqual(code, 130, out + err)
        (journal,) = self.journals()
        with open(journal, "rb") as handle:
            before = handle.read()
        holder = subprocess.Popen(
            [sys.executable, "-c", "import fcntl, os, sys, time\n"
             "fd = os.open(sys.argv[1], os.O_RDONLY)\nfcntl.flock(fd, fcntl.LOCK_EX)\n"
             "print('locked', flush=True)\ntime.sleep(60)\n", journal],
            stdout=subprocess.PIPE, text=True)
        self.addCleanup(self.reap, holder)
        self.assertEqual(holder.stdout.readline(), "locked\n")
        code, out, err = self.evals("--resume", APP_LOG="resumed.log")
        self.assertEqual(code, 0, out + err)
        self.assertIn("0 of 8 answers reused", out)
        self.assertIn("is the journal of a run still going on", err)
        with open(journal, "rb") as handle:
            self.assertEqual(handle.read(), before)


class CallsInFlightTest(JournalCase):
    CASES = 6

    def test_answers_in_flight_at_ctrl_c_are_journaled_within_the_grace_period(self):
        # -j 3: Q0 answers at once, Q1 and Q2 take 1 s, Q3 30 s; Ctrl-C once Q3 started.
        run = self.start("-j", "3", APP_SLOW="Q1=1.0,Q2=1.0,Q3=30")
        self.wait_for(lambda: "Q3" in self.calls(), "the 4th call")
        out, err = self.interrupt(run)
        self.assertIn("1 call in flight got no answer within 2 s of the stop", err)

        code, out, err = self.evals("--resume", APP_LOG="resumed.log")
        self.assertEqual(code, 0, out + err)
        self.assertEqual(sorted(self.calls("resumed.log")), ["Q3", "Q4", "Q5"])
        self.assertIn("3 of 6 answers reused from the interrupted run", out)


class TheRecordBeforeTheJournalTest(JournalCase):
    def test_a_record_that_cannot_be_written_keeps_the_journal_and_says_so(self):
        os.mkdir(self.path("out"))
        code, out, err = self.evals("--out", os.path.join("out", "run.json"), APP_RMDIR="out")
        self.assertEqual(code, 2, out + err)
        self.assertIn("there is no folder", err)
        self.assertIn("this run's answers are kept in", err)
        self.assertEqual(len(self.journals()), 1)

        os.mkdir(self.path("out"))
        code, out, err = self.evals("--resume", "--out", os.path.join("out", "run.json"),
                                    APP_LOG="resumed.log")
        self.assertEqual(code, 0, out + err)
        self.assertIn("5 of 5 answers reused", out)
        self.assertEqual(self.calls("resumed.log"), [])
        self.assertTrue(os.path.exists(self.path("out", "run.json")))
        self.assertEqual(self.journals(), [])

    def test_ctrl_c_while_the_record_is_written_keeps_the_journal(self):
        # The write of the record raises KeyboardInterrupt, as Ctrl-C at that moment would.
        script = ("import sys, evals\n"
                  "def interrupted(*args):\n    raise KeyboardInterrupt\n"
                  "evals.write_record = interrupted\nsys.exit(evals.main(sys.argv[1:]))\n")
        argv = [sys.executable, "-c", script, "--no-history", "--client", "app:answer"]
        done = subprocess.run(argv, cwd=self.folder, env=self.env(PYTHONPATH=ROOT),
                              capture_output=True, text=True, timeout=RUN_TIMEOUT)
        self.assertEqual(done.returncode, 130, done.stdout + done.stderr)
        self.assertIn("this run's answers are kept in", done.stderr)
        self.assertFalse(os.path.exists(self.path("last_run.json")))

        code, out, err = self.evals("--resume", APP_LOG="resumed.log")
        self.assertEqual(code, 0, out + err)
        self.assertIn("5 of 5 answers reused", out)
        self.assertEqual(self.calls("resumed.log"), [])


class AJournalThatIsNoFileTest(JournalCase):
    def test_an_evals_file_costs_no_answer(self):
        with open(self.path(".evals"), "w") as handle:
            handle.write("not a folder\n")
        code, out, err = self.evals("-j", "4")
        self.assertEqual(code, 0, out + err)
        self.assertIn("pass rate 100.0% (5/5)", out)
        self.assertEqual(err.count("cannot be written"), 1, err)
        self.assertTrue(os.path.exists(self.path("last_run.json")))

    def test_a_pipe_or_a_folder_named_like_a_journal_is_skipped_by_resume(self):
        os.makedirs(self.path(".evals", "unfinished.123-0123abcd.jsonl"))
        os.mkfifo(self.path(".evals", "unfinished.jsonl"))  # 0.3.0's journal's name
        code, out, err = self.evals("--resume", "-j", "2")
        self.assertEqual(code, 0, out + err)
        self.assertIn("pass rate 100.0% (5/5)", out)
        self.assertEqual(err.count("is not a file; skipped"), 2, err)
        self.assertTrue(os.path.exists(self.path("last_run.json")))


if __name__ == "__main__":
    unittest.main()
