"""The subprocess executor's mechanics: environment, process group, tails, tasks."""

import os
import signal
import tempfile
import time
import unittest
from unittest import mock

from dsh_tools import EnvPolicy, ExecutorError, LocalExecutor


def spec(command, workdir="/", timeout_ms=10_000.0, owner=None):
    return {"command": command, "workdir": workdir, "timeout_ms": timeout_ms, "owner": owner}


class Environment(unittest.TestCase):
    def test_secret_words_in_any_case_and_the_forced_settings(self):
        host = {
            b"PATH": b"/bin",
            b"API_KEY": b"x",
            b"my_secret_x": b"x",
            b"GithubToken": b"x",
            b"DB_PASSWORD": b"x",
            b"monkey": b"x",
            b"PASSWD": b"kept",
            b"TERM": b"xterm",
            b"RAW": b"\xff\xfe",
        }
        env = EnvPolicy().child_env(host)
        self.assertEqual(
            env,
            {
                b"PATH": b"/bin",
                b"PASSWD": b"kept",
                b"RAW": b"\xff\xfe",
                b"NO_COLOR": b"1",
                b"TERM": b"dumb",
                b"PAGER": b"cat",
                b"GIT_PAGER": b"cat",
                b"GIT_TERMINAL_PROMPT": b"0",
            },
        )

    def test_deny_patterns_and_allowed_names_as_the_rust_executor(self):
        policy = EnvPolicy(
            deny=["*_PAT", "*_CREDENTIALS", "SSH_AUTH_SOCK", "corp_*", "EXACT"],
            allow=["GITLAB_PAT", "MY_API_KEY"],
        )
        for name in ["GITHUB_PAT", "google_application_credentials", "SSH_AUTH_SOCK", "CORP_PROXY", "exact", "GITHUB_TOKEN"]:
            self.assertTrue(policy.scrubs(name), name)
        for name in ["GITLAB_PAT", "MY_API_KEY", "PATH", "PATTERN", "EXACTLY", "SSH_AUTH_SOCKET"]:
            self.assertFalse(policy.scrubs(name), name)

    def test_a_command_sees_the_scrubbed_environment(self):
        with mock.patch.dict(os.environ, {"DSH_TEST_TOKEN": "t", "DSH_TEST_PLAIN": "p", "DSH_TEST_PAT": "q"}):
            ex = LocalExecutor(env_deny=["*_PAT"])
            r = ex.run(spec("echo ${DSH_TEST_TOKEN-unset} ${DSH_TEST_PLAIN-unset} ${DSH_TEST_PAT-unset} $TERM"))
        self.assertEqual(r["stdout"]["text"], "unset p unset dumb\n")


class Processes(unittest.TestCase):
    def test_own_session_and_group_no_stdin(self):
        # `cat` ends at once: stdin is /dev/null, not this process's.
        r = LocalExecutor().run(spec("cat /proc/$$/stat; cat; echo $$"))
        stat, pid = r["stdout"]["text"].splitlines()
        pgrp, sid = stat.rsplit(")", 1)[1].split()[2:4]
        self.assertEqual((pgrp, sid), (pid, pid))
        self.assertNotEqual(int(sid), os.getsid(0))

    def test_kill_0_hits_the_command_not_the_host(self):
        r = LocalExecutor().run(spec("kill -TERM 0; sleep 5"))
        self.assertEqual(r["signal"], "SIGTERM")

    def test_timeout_escalates_from_term_to_kill(self):
        ex = LocalExecutor(grace_ms=300)
        r = ex.run(spec("trap '' TERM; sleep 30", timeout_ms=200.0))
        self.assertTrue(r["timed_out"])
        self.assertEqual(r["signal"], "SIGKILL")

    def test_leftovers_are_stopped_and_counted(self):
        r = LocalExecutor(grace_ms=200).run(spec("sleep 30 & sleep 30 & echo started"))
        self.assertEqual((r["exit_code"], r["leftover_processes"]), (0, 2))

    def test_tails_are_byte_exact(self):
        ex = LocalExecutor(max_output_bytes=5)
        r = ex.run(spec("printf 'abcdefgh'; printf '\\xff\\xfeok' >&2"))
        self.assertEqual(r["stdout"], {"text": "defgh", "truncated": True, "spill_path": None, "spill_evicted": False})
        self.assertEqual(r["stderr"], {"text": "\ufffd\ufffdok", "truncated": False, "spill_path": None, "spill_evicted": False})

    def test_resolve_applies_defaults_and_caps(self):
        ex = LocalExecutor(cwd="/tmp", default_timeout_ms=1000, max_timeout_ms=5000)
        self.assertEqual(ex.resolve("x", None, None, "o"), spec("x", "/tmp", 1000.0, "o"))
        self.assertEqual(ex.resolve("x", "/", 9999.0, None)["timeout_ms"], 5000.0)
        with self.assertRaises(ExecutorError) as e:
            ex.resolve("x", None, float("inf"), None)
        self.assertEqual(e.exception.case, "invalid-request")

    def test_no_sandbox_so_none_in_the_limits_and_no_denials(self):
        ex = LocalExecutor()
        self.assertIsNone(ex.current_limits()["sandbox"])
        self.assertEqual(ex.run(spec("cat /etc/hostname >/dev/null"))["denials"], {"first": [], "more": 0})

    def test_unusable_workdir(self):
        with self.assertRaises(ExecutorError) as e:
            LocalExecutor().run(spec("true", workdir="/nonexistent-dir"))
        self.assertEqual(e.exception.case, "workdir-unusable")


class Tasks(unittest.TestCase):
    def setUp(self):
        self.done = []
        self.ex = LocalExecutor(grace_ms=200, max_tasks=1, max_finished_tasks=1)
        self.ex.set_task_done_handler(self.done.append)

    def tearDown(self):
        self.ex.shutdown()

    def test_incremental_reads_kill_and_one_event_per_task(self):
        with tempfile.TemporaryDirectory() as d:
            task = self.ex.start(spec(f"echo one; while [ ! -e {d}/go ]; do sleep 0.01; done; echo two; sleep 30", owner="o"))
            self.assertEqual((task["id"], task["state"], task["owner"]), ("bash-1", "running", "o"))
            deadline = time.monotonic() + 10
            text = ""
            while "one" not in text and time.monotonic() < deadline:
                text += self.ex.read_output("bash-1")["stdout"]["text"]
            self.assertEqual(text, "one\n")
            open(f"{d}/go", "w").close()
            while "two" not in text and time.monotonic() < deadline:
                text += self.ex.read_output("bash-1")["stdout"]["text"]
            self.assertEqual(text, "one\ntwo\n")
            self.assertEqual(self.ex.read_output("bash-1")["denials"], {"first": [], "more": 0})
            with self.assertRaises(ExecutorError) as e:
                self.ex.start(spec("true"))
            self.assertEqual(e.exception.case, "task-limit")
            self.assertTrue(self.ex.kill("bash-1"))
            self.assertFalse(self.ex.kill("bash-1"))
            self.assertTrue(self.ex.wait("bash-1", 10))
            self.assertEqual([(t["id"], t["state"], t["signal"]) for t in self.done], [("bash-1", "killed", "SIGTERM")])
            self.assertEqual(self.ex.owner_of("bash-1"), "o")

    def test_finished_tasks_beyond_the_limit_are_forgotten(self):
        for _ in range(2):
            task = self.ex.start(spec("true"))
            self.assertTrue(self.ex.wait(task["id"], 10))
        self.assertEqual([t["id"] for t in self.ex.list_tasks()], ["bash-2"])
        with self.assertRaises(ExecutorError) as e:
            self.ex.get("bash-1")
        self.assertEqual(e.exception.case, "unknown-task")

    def test_shutdown_waits_for_a_killed_task_already_forgotten(self):
        # bash-1 ignores TERM; killed, it is retired at once and, with one finished task kept,
        # forgotten when bash-2 is killed, while its tree still runs out the grace period.
        # bash-2 ends at TERM.
        ex = LocalExecutor(grace_ms=1000, max_tasks=1, max_finished_tasks=1)
        pids = []
        for trap in ["trap '' TERM", "trap - TERM"]:
            task = ex.start(spec(f"{trap}; echo $$; while :; do sleep 0.01; done"))
            deadline, text = time.monotonic() + 10, ""
            while not text.endswith("\n") and time.monotonic() < deadline:
                text += ex.read_output(task["id"])["stdout"]["text"]
            pids.append(int(text))
            self.assertTrue(ex.kill(task["id"]))
        self.assertEqual([t["id"] for t in ex.list_tasks()], ["bash-2"])
        ex.shutdown()
        for pid in pids:
            with self.assertRaises(ProcessLookupError, msg=f"pid {pid} outlived shutdown"):
                os.kill(pid, 0)

    def test_no_events_after_shutdown(self):
        self.ex.start(spec("sleep 30"))
        self.ex.shutdown()
        self.assertEqual(self.ex.get("bash-1")["state"], "killed")
        self.assertEqual(self.done, [])


if __name__ == "__main__":
    unittest.main()
