"""The package's API: loading, definitions, sessions, notices and closing."""

import os
import tempfile
import threading
import time
import unittest

from dsh_tools import ComponentError, LocalExecutor, Tools, bundled_component


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except FileNotFoundError:
        return False


def wait_for_line(path: str) -> str:
    deadline = time.monotonic() + 10
    while True:
        try:
            with open(path) as f:
                text = f.read()
            if text.endswith("\n"):
                return text
        except FileNotFoundError:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(path)
        time.sleep(0.01)


class Loading(unittest.TestCase):
    def test_bad_components_are_refused_clearly(self):
        with self.assertRaisesRegex(ComponentError, "cannot read the tools component .*nowhere.wasm"):
            Tools(component="/nowhere.wasm")
        with self.assertRaisesRegex(ComponentError, "not a loadable component"):
            Tools(component=b"not wasm")

    def test_a_component_given_as_bytes_is_the_bundled_one(self):
        with Tools(component=bundled_component()) as a, Tools() as b:
            self.assertEqual(a.definitions(), b.definitions())

    def test_bad_settings_are_refused_clearly(self):
        with self.assertRaisesRegex(ValueError, r"grace_ms: expected a finite number > 0, got nan"):
            LocalExecutor(grace_ms=float("nan"))
        with self.assertRaisesRegex(ValueError, r"max_tasks: expected a whole number > 0, got 0"):
            LocalExecutor(max_tasks=0)
        with self.assertRaisesRegex(ValueError, r"env_deny: 'A=B' is no variable name"):
            LocalExecutor(env_deny=["A=B"])

    def test_bad_uses_are_refused_clearly(self):
        with Tools() as tools:
            with self.assertRaisesRegex(ValueError, "unknown definitions format 'yaml'"):
                tools.definitions(format="yaml")
            with self.assertRaisesRegex(ValueError, "must be an absolute path, got 'rel'"):
                tools.session(cwd="rel")
            with self.assertRaisesRegex(TypeError, "JSON-serializable"):
                tools.call("bash", {"command": object()})
            session = tools.session()
            session.close()
            with self.assertRaisesRegex(RuntimeError, "closed"):
                session.call("bash", {"command": "true", "description": "Nothing"})

    def test_instructions_are_text_or_none(self):
        with Tools() as tools:
            self.assertIn(type(tools.instructions()), (str, type(None)))


class Sandboxed(LocalExecutor):
    """The local executor, claiming a sandbox and reporting fixed denials: what the component
    makes of an executor's sandbox facts, through this package's conversions."""

    DENIALS = {
        "first": [
            {"access": "write", "target": "/etc/hosts", "reason": "outside-writable-roots"},
            {"access": "socket", "target": "AF_INET", "reason": "network-off"},
        ],
        "more": 1,
    }

    def current_limits(self):
        limits = super().current_limits()
        limits["sandbox"] = {"mode": "workspace-write", "writable": ["/w", "/tmp"], "denied_reads": ["/root/.ssh"], "network": "off"}
        return limits

    def run(self, spec):
        return {**super().run(spec), "denials": self.DENIALS}

    def read_output(self, task_id):
        return {**super().read_output(task_id), "denials": self.DENIALS}


class Sandbox(unittest.TestCase):
    LINE = "[sandbox: write to /etc/hosts denied (outside the writable roots); AF_INET socket denied (the network is off); and 1 more]"

    def test_without_a_sandbox_nothing_is_said_of_one(self):
        with Tools() as tools:
            self.assertNotIn("sandbox", tools.instructions())
            self.assertEqual(tools.call("bash", {"command": "echo hi", "description": "Greet"}).text, "hi\n")

    def test_an_executors_sandbox_and_denials_reach_the_model(self):
        with Tools(Sandboxed(grace_ms=200)) as tools:
            paragraph = tools.instructions().split("\n\n")[-1].splitlines()
            self.assertEqual(
                paragraph[:3],
                [
                    "Commands run in a sandbox (workspace-write): they can write only under /w, /tmp and their own $TMPDIR; "
                    "git hooks and configuration there stay read-only, and git init, add and commit work.",
                    "They cannot read: /root/.ssh.",
                    "The network is off: no sockets but Unix sockets.",
                ],
            )
            r = tools.call("bash", {"command": "echo hi; exit 1", "description": "Fail"})
            self.assertEqual((r.text, r.is_error), ("hi\n[exit code: 1]\n" + self.LINE, False))
            tools.call("bash", {"command": "true", "description": "Nothing", "run_in_background": True})
            self.assertTrue(tools.executor.wait("bash-1", 10))
            r = tools.call("bash_output", {"task_id": "bash-1"})
            self.assertEqual(r.text, "(no new output)\n[status: completed, exit code: 0]\n" + self.LINE)


class Sessions(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name
        self.tools = Tools(LocalExecutor(grace_ms=200))

    def tearDown(self):
        self.tools.close()
        self.tmp.cleanup()

    def test_each_session_has_its_cwd_and_its_tasks(self):
        a = self.tools.session(cwd=self.dir)
        b = self.tools.session(cwd="/")
        self.assertEqual(a.call("bash", {"command": "pwd", "description": "Where"}).text, self.dir + "\n")
        self.assertEqual(b.call("bash", {"command": "pwd", "description": "Where"}).text, "/\n")
        a.call("bash", {"command": "sleep 30", "description": "Sleep", "run_in_background": True})
        theirs = b.call("bash_kill", {"task_id": "bash-1"})
        mine = a.call("bash_kill", {"task_id": "bash-1"})
        self.assertTrue(theirs.is_error)
        self.assertFalse(mine.is_error)
        self.assertNotEqual(theirs.text, mine.text)

    def test_notices_reach_the_callback_of_their_session_only(self):
        got = {"a": [], "b": []}
        arrived = threading.Event()

        def on(name):
            def callback(notice):
                got[name].append(notice)
                arrived.set()

            return callback

        a = self.tools.session(on_notice=on("a"))
        self.tools.session(on_notice=on("b"))
        a.call("bash", {"command": "exit 3", "description": "Fail", "run_in_background": True})
        self.assertTrue(arrived.wait(10))
        self.assertEqual(len(got["a"]), 1)
        self.assertEqual(got["b"], [])
        notice = got["a"][0]
        self.assertEqual((notice.owner, notice.source.kind, notice.source.plugin), (a.owner, "plugin", "tool-bash"))
        self.assertIn("bash-1", notice.text)
        # The same notice is kept for take_notices, once.
        self.assertEqual(a.take_notices(), [notice])
        self.assertEqual(a.take_notices(), [])

    def test_a_notice_callback_may_close_its_session(self):
        closed = threading.Event()

        def on_notice(_notice):
            session.close()
            closed.set()

        session = self.tools.session(on_notice=on_notice)
        session.call("bash", {"command": "true", "description": "Nothing", "run_in_background": True})
        self.assertTrue(closed.wait(10))
        self.assertTrue(session.closed)

    def test_closing_a_session_stops_its_tasks_and_only_its(self):
        a = self.tools.session(cwd=self.dir)
        b = self.tools.session(cwd=self.dir)
        for session, name in ((a, "a"), (b, "b")):
            session.call(
                "bash",
                {"command": f"echo $$ > {name}.pid; exec sleep 30", "description": "Sleep", "run_in_background": True},
            )
        pid_a = int(wait_for_line(os.path.join(self.dir, "a.pid")))
        pid_b = int(wait_for_line(os.path.join(self.dir, "b.pid")))
        a.close()
        self.assertFalse(alive(pid_a))
        self.assertTrue(alive(pid_b))
        self.assertEqual(a.take_notices(), [])
        self.tools.close()
        self.assertFalse(alive(pid_b))


if __name__ == "__main__":
    unittest.main()
