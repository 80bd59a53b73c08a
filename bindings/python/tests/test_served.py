"""The Rust executor behind `dsh-host executor serve --stdio`, used from Python (`ServedExecutor`).

Through the real binary, named by `DSH_HOST_BIN` (the Rust test harness sets it; without it
these tests fail, they are not skipped): the tools give the same text through `ServedExecutor`
as `dsh-host call` gives, for the cases where the package's own executor differs from
`dsh-host` (an escapee, `kill $PPID`, a 200 KB command, a 100 KB output with its spill file);
background tasks, reads from offsets and aborts work over the wire; a server killed with
SIGKILL ends each running task with exactly one task-done event, as lost, and later calls say
the service is gone.
"""

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest
from unittest import mock

from dsh_tools import ExecutorError, LocalExecutor, Tools
from dsh_tools.executor import ServedExecutor, ServedExecutorError, default_executor, describe_executor

BIN = os.environ.get("DSH_HOST_BIN", "")
# A short grace keeps the cases that wait for it quick; the CLI and the server get the same.
GRACE = ["--grace-ms", "500"]


def setUpModule() -> None:
    if not BIN or not os.access(BIN, os.X_OK):
        raise RuntimeError(f"DSH_HOST_BIN must name the dsh-host binary to test against (got {BIN!r})")


def cli(tool, arguments, cwd):
    """What `dsh-host call` answers: (text, is_error)."""
    out = subprocess.run(
        [BIN, "call", "--cwd", cwd, *GRACE, "--json", tool, json.dumps(arguments)],
        capture_output=True,
        timeout=60,
    )
    # It exits 1 for an error result, which it prints all the same.
    if out.returncode not in (0, 1) or not out.stdout:
        raise AssertionError(f"dsh-host call failed ({out.returncode}): {out.stderr.decode(errors='replace')}")
    answer = json.loads(out.stdout)
    assert out.returncode == int(answer["isError"]), out
    return answer["text"], answer["isError"]


SPILL = re.compile(r"full output: (/\S+)\]")


def spill_paths(text):
    return SPILL.findall(text)


def without_spill_paths(text):
    return SPILL.sub("full output: <spill file>]", text)


def alive(pattern):
    """Processes whose command line contains `pattern` (not this test's own)."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if pattern in cmdline and state != "Z":
            found.append((int(pid), cmdline))
    return found


def wait_until(predicate, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


# An aborted command's marker would be made this many seconds after it started; the checks wait
# past that, so a command that was not stopped is seen.
MARKER_AFTER = 1.5


def past_the_marker(began: float) -> None:
    """Waits until a second after an unstopped command would have made its marker."""
    time.sleep(max(0.0, began + MARKER_AFTER + 1.0 - time.monotonic()))


class Served(unittest.TestCase):
    """One server per test, with a spill directory of its own."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="dsh-served-")
        self.addCleanup(self.tmp.cleanup)
        self.cwd = self.tmp.name
        self.spill = os.path.join(self.cwd, "spill")
        os.mkdir(self.spill)
        self.executor = ServedExecutor(binary=BIN, args=[*GRACE, "--spill-dir", self.spill])
        self.addCleanup(self.executor.shutdown)
        self.tools = Tools(executor=self.executor)
        self.addCleanup(self.tools.close)
        self.session = self.tools.session(cwd=self.cwd)
        self.addCleanup(self.session.close)

    def py(self, tool, arguments):
        r = self.session.call(tool, arguments)
        return r.text, r.is_error

    def same(self, arguments, tool="bash"):
        mine, theirs = self.py(tool, arguments), cli(tool, arguments, self.cwd)
        self.assertEqual(mine, theirs)
        return mine


class SameTextAsDshHost(Served):
    def test_echo(self):
        self.assertEqual(self.same({"command": "echo hello", "description": "Say hello"}), ("hello\n", False))

    def test_a_failing_command(self):
        text, _ = self.same({"command": "echo out; echo err >&2; exit 3", "description": "Fail"})
        self.assertIn("[exit code: 3]", text)

    def test_a_100_kb_output_names_a_spill_file_holding_all_of_it(self):
        command = "yes 0123456789abcdef | head -c 102400"
        arguments = {"command": command, "description": "Print 100 KB"}
        (text, is_error), (cli_text, cli_error) = self.py("bash", arguments), cli("bash", arguments, self.cwd)
        self.assertEqual((without_spill_paths(text), is_error), (without_spill_paths(cli_text), cli_error))
        self.assertIn("[output truncated; full output: ", text)
        paths = spill_paths(text)
        self.assertEqual(len(paths), 1, text)
        # Ground truth: the file exists, under the server's spill directory, and holds every byte.
        self.assertTrue(paths[0].startswith(self.spill + os.sep), paths[0])
        with open(paths[0], "rb") as f:
            whole = f.read()
        expected = subprocess.run(["bash", "-c", command], capture_output=True, check=True).stdout
        self.assertEqual(len(whole), 102400)
        self.assertEqual(whole, expected)
        # The text shown is the tail of it.
        shown = text.split("\n[output truncated")[0]
        self.assertTrue(expected.decode().endswith(shown), shown[-80:])

    def test_a_setsid_escapee_is_stopped_and_reported(self):
        marker = f"{300 + os.getpid() % 1000}.{int(time.time() * 1000) % 100000}"
        arguments = {"command": f"setsid sleep {marker} & echo started", "description": "Escape"}
        text, is_error = self.py("bash", arguments)
        self.assertEqual(alive(f"sleep {marker}"), [], "the escapee outlived the call")
        self.assertEqual((text, is_error), cli("bash", arguments, self.cwd))
        self.assertEqual(alive(f"sleep {marker}"), [])
        self.assertIn("leftover", text)

    def test_kill_ppid_does_not_reach_this_process(self):
        arguments = {"command": "kill -TERM $PPID; sleep 0.3; echo survived", "description": "Kill the parent"}
        text = self.same(arguments)
        # Still here, and the executor still serves.
        self.assertEqual(text, ("survived\n", False))
        self.assertEqual(self.py("bash", {"command": "echo again", "description": "x"}), ("again\n", False))

    def test_a_200_kb_command_runs(self):
        filler = "x" * (200 * 1024)
        big = {"command": f": {filler}; echo ok $((1 + 2))", "description": "A long command"}
        # `dsh-host call` cannot take 200 KB as one argument (the OS limit is 128 KiB), so its
        # text is taken for the same command without the filler: the filler prints nothing.
        small = {"command": ": x; echo ok $((1 + 2))", "description": "A long command"}
        self.assertEqual(self.py("bash", big), cli("bash", small, self.cwd))
        self.assertEqual(self.py("bash", big), ("ok 3\n", False))
        # The package's own executor cannot run it: what this executor is for.
        with self.assertRaises(ExecutorError):
            LocalExecutor().run({"command": big["command"], "workdir": self.cwd, "timeout_ms": 10_000.0, "owner": None})


class Errors(Served):
    def test_the_executors_errors_are_worded_as_by_dsh_host(self):
        for tool, arguments in [
            ("bash", {"command": "pwd", "description": "x", "workdir": "/nonexistent/dir"}),
            ("bash", {"command": "pwd", "description": "x", "timeoutMs": -5}),
            ("bash_output", {"task_id": "bash-99"}),
            ("bash_kill", {"task_id": "bash-99"}),
        ]:
            with self.subTest(tool=tool, arguments=arguments):
                text, is_error = self.same(arguments, tool)
                self.assertTrue(is_error, text)

    def test_the_cases_are_the_packages(self):
        with self.assertRaises(ExecutorError) as e:
            self.executor.get("bash-99")
        self.assertEqual((e.exception.case, e.exception.message), ("unknown-task", "bash-99"))
        with self.assertRaises(ExecutorError) as e:
            self.executor.run({"command": "pwd", "workdir": "/nonexistent", "timeout_ms": 1000.0, "owner": None})
        self.assertEqual(e.exception.case, "workdir-unusable")
        self.assertEqual(e.exception.message, 'workdir "/nonexistent" is not usable: No such file or directory (os error 2)')


class Refusals(unittest.TestCase):
    def test_a_refusal_by_the_servers_permission_rules_reads_as_in_dsh_host(self):
        with tempfile.TemporaryDirectory(prefix="dsh-served-") as cwd:
            policy = os.path.join(cwd, "policy.toml")
            with open(policy, "w") as f:
                f.write('[permissions]\ndefault = "allow"\ndeny = [{ rule = "Bash(rm -rf *)", message = "no recursive removal" }]\n')
            victim = os.path.join(cwd, "victim")
            os.mkdir(victim)
            arguments = {"command": f"rm -rf {victim}", "description": "Remove"}
            with ServedExecutor(binary=BIN, args=["--policy", policy]) as ex, Tools(executor=ex) as tools, tools.session(cwd=cwd) as s:
                r = s.call("bash", arguments)
            out = subprocess.run([BIN, "call", "--cwd", cwd, "--policy", policy, "--json", "bash", json.dumps(arguments)], capture_output=True)
            theirs = json.loads(out.stdout)
            self.assertEqual((r.text, r.is_error), (theirs["text"], theirs["isError"]))
            self.assertTrue(r.text.startswith("[policy: denied"), r.text)
            self.assertTrue(os.path.isdir(victim))


class Events(Served):
    def test_each_event_is_passed_on_once_and_acknowledged(self):
        done = []
        self.executor.set_task_done_handler(done.append)
        task = self.executor.start(self.executor.resolve("true", self.cwd, None, None))
        self.assertTrue(wait_until(lambda: len(done) == 1))
        self.assertEqual((done[0]["id"], done[0]["state"], done[0]["exit_code"]), (task["id"], "completed", 0))
        # Acknowledged: the server keeps no event after the cursor the client passed on.
        self.assertTrue(wait_until(lambda: self.executor._ask("events", {"cursor": 0}) == []))
        # The same event again (as after a reconnection) is not passed on twice.
        line = json.dumps({"jsonrpc": "2.0", "method": "task_done", "params": {"seq": 1, "task": dict(task, state="completed", exit_code=0)}})
        self.executor._received(line.encode() + b"\n")
        time.sleep(0.3)
        self.assertEqual(len(done), 1)

    def test_request_ids_are_unique_per_call_and_connection(self):
        with ServedExecutor(binary=BIN) as other:
            ids = [self.executor._request_id(), self.executor._request_id(), other._request_id()]
        self.assertEqual(len(set(ids)), 3)
        self.assertNotEqual(ids[0].rsplit("-", 1)[0], ids[2].rsplit("-", 1)[0])


class Background(Served):
    def reads_until(self, task, word, reader):
        """Reads until `word` arrived; every text read on the way."""
        texts = []
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            texts.append(reader(task))
            if word in texts[-1]:
                return texts
            time.sleep(0.05)
        self.fail(f"{word!r} never arrived: {texts}")

    def test_start_read_and_kill(self):
        go = os.path.join(self.cwd, "go")
        command = f"echo one; until [ -e {go} ]; do sleep 0.05; done; echo two; sleep 30"
        text, _ = self.py("bash", {"command": command, "description": "bg", "run_in_background": True})
        task = re.search(r"bash-\d+", text).group(0)
        read = lambda t: self.py("bash_output", {"task_id": t})[0]  # noqa: E731
        first = self.reads_until(task, "one\n", read)
        self.assertFalse(any("two" in t for t in first), first)
        open(go, "w").close()
        second = self.reads_until(task, "two\n", read)
        # Only what came since the previous read: "one" is not read again.
        self.assertFalse(any("one" in t for t in second), second)
        killed, is_error = self.py("bash_kill", {"task_id": task})
        self.assertFalse(is_error, killed)
        self.assertEqual(self.executor.get(task)["state"], "killed")
        notices = self.session.take_notices(timeout=5)
        self.assertEqual(len(notices), 1, notices)
        self.assertIn(task, notices[0].text)

    def test_a_read_whose_answer_was_lost_is_answered_again(self):
        printed, go = os.path.join(self.cwd, "printed"), os.path.join(self.cwd, "go")
        command = f"echo first; touch {printed}; until [ -e {go} ]; do sleep 0.05; done; echo second; sleep 30"
        task = self.executor.start(self.executor.resolve(command, self.cwd, None, None))["id"]
        self.assertTrue(wait_until(lambda: os.path.exists(printed)))
        real = self.executor._ask
        dropped = []

        def drop_first_read(method, params):
            answer = real(method, params)
            if method == "read" and not dropped:
                dropped.append(answer)
                raise ExecutorError("internal", "the answer was lost on the way")
            return answer

        with mock.patch.object(self.executor, "_ask", side_effect=drop_first_read):
            with self.assertRaises(ExecutorError):
                self.executor.read_output(task)
            open(go, "w").close()
            time.sleep(0.3)
            again = self.executor.read_output(task)
        self.assertEqual(dropped[0]["ok"]["read"]["stdout"]["text"], "first\n")
        # The lost answer comes again, unchanged (the server answers a repeated `from` so),
        # and the reads after it continue from its end: no byte lost, none twice.
        self.assertEqual(again["stdout"]["text"], "first\n")
        rest = self.reads_until(task, "second\n", lambda t: self.executor.read_output(t)["stdout"]["text"])
        self.assertEqual("".join(rest), "second\n")
        self.assertEqual(self.executor.read_output(task)["stdout"]["text"], "")
        self.assertTrue(self.executor.kill(task))

    def test_an_aborted_foreground_run_stops_before_its_next_step(self):
        marker = os.path.join(self.cwd, "MARKER")
        spec = self.executor.resolve(f"sleep {MARKER_AFTER}; touch {marker}", self.cwd, None, None)
        abort = threading.Event()
        outcome = {}

        def run():
            try:
                outcome["result"] = self.executor.run(spec, abort=abort)
            except BaseException as e:  # reported below
                outcome["error"] = e

        runner = threading.Thread(target=run)
        began = time.monotonic()
        runner.start()
        time.sleep(0.5)
        abort.set()
        runner.join(10)
        self.assertFalse(runner.is_alive(), "the aborted run did not end")
        self.assertNotIn("error", outcome)
        self.assertTrue(outcome["result"]["aborted"], outcome["result"])
        self.assertLess(time.monotonic() - began, 5)
        past_the_marker(began)
        self.assertFalse(os.path.exists(marker))
        # Set before the start, nothing runs at all.
        with self.assertRaises(ExecutorError) as e:
            self.executor.run(self.executor.resolve(f"touch {marker}", self.cwd, None, None), abort=abort)
        self.assertEqual(e.exception.case, "aborted")
        self.assertFalse(os.path.exists(marker))


class Aborts(Served):
    def test_an_aborted_tool_call_reads_as_with_the_packages_executor_and_its_command_stops(self):
        marker = os.path.join(self.cwd, "MARKER")
        arguments = {"command": f"sleep {MARKER_AFTER}; touch {marker}", "description": "Wait"}
        texts = []
        with Tools(executor=LocalExecutor(grace_ms=500)) as local, local.session(cwd=self.cwd) as local_session:
            for session in (self.session, local_session):
                abort = threading.Event()
                threading.Timer(0.4, abort.set).start()
                began = time.monotonic()
                r = session.call("bash", arguments, abort=abort)
                self.assertLess(time.monotonic() - began, 5)
                texts.append((r.text, r.is_error, r.error_code))
        self.assertEqual(texts[0], texts[1])
        self.assertTrue(texts[0][1], texts[0])
        past_the_marker(began)
        self.assertFalse(os.path.exists(marker))

    def test_cancelling_an_async_call_stops_its_command(self):
        import asyncio

        marker = os.path.join(self.cwd, "MARKER")

        async def cancelled():
            call = asyncio.ensure_future(
                self.session.acall("bash", {"command": f"sleep {MARKER_AFTER}; touch {marker}", "description": "Wait"})
            )
            await asyncio.sleep(0.4)
            call.cancel()
            with self.assertRaises(asyncio.CancelledError):
                await call

        began = time.monotonic()
        asyncio.run(cancelled())
        self.assertLess(time.monotonic() - began, 5)
        past_the_marker(began)
        self.assertFalse(os.path.exists(marker))
        self.assertEqual(self.py("bash", {"command": "echo still serving", "description": "x"}), ("still serving\n", False))


class FarSideKilled(Served):
    def kill_server(self):
        os.kill(self.executor._child.pid, signal.SIGKILL)
        self.assertTrue(wait_until(lambda: self.executor.lost is not None), "the loss was not noticed")

    def test_each_running_task_ends_once_lost_and_later_calls_say_why(self):
        done = []
        self.tools.executor.set_task_done_handler(lambda task: (done.append(task), self.tools._task_done(task)))
        text, _ = self.py("bash", {"command": "sleep 30", "description": "bg", "run_in_background": True})
        task = re.search(r"bash-\d+", text).group(0)
        finished, _ = self.py("bash", {"command": "true", "description": "bg", "run_in_background": True})
        finished = re.search(r"bash-\d+", finished).group(0)
        self.assertTrue(wait_until(lambda: len(done) == 1))
        self.kill_server()
        self.assertTrue(wait_until(lambda: len(done) == 2))
        time.sleep(0.5)
        # Nobody knows whether `sleep 30` still runs: the task ends lost, not killed.
        self.assertEqual([(t["id"], t["state"]) for t in done[1:]], [(task, "lost")])
        notices = self.session.take_notices(timeout=1)
        self.assertEqual([n.text for n in notices if task in n.text], [
            f"background bash task {task} was lost [status: lost: the executor is gone; the command may or may not "
            "have finished]. Its output can no longer be read."
        ])
        # Later calls: no silent restart, a clear answer.
        text, is_error = self.py("bash", {"command": "echo hi", "description": "x"})
        self.assertTrue(is_error, text)
        self.assertEqual(text, "Error: the executor service was not reached (it closed the connection)")
        # A command sent after the loss provably did not start.
        with self.assertRaises(ExecutorError) as e:
            self.executor.run({"command": "echo hi", "workdir": self.cwd, "timeout_ms": 1000.0, "owner": None})
        self.assertEqual(e.exception.case, "spawn-failed")
        self.assertIn("the command did not start", e.exception.message)
        lost = "[status: lost: the executor is gone; the command may or may not have finished]"
        self.assertEqual(self.py("bash_output", {"task_id": task}), (f"(output unavailable: the executor is gone)\n{lost}", False))
        self.assertEqual(
            self.py("bash_kill", {"task_id": task}),
            (f"task {task} was lost with the executor; it cannot be killed from here", False),
        )
        self.assertEqual(self.executor.get(task)["state"], "lost")
        self.assertFalse(self.executor.kill(task))
        # A task that ended before the loss: its unread output went with the server.
        text, is_error = self.py("bash_output", {"task_id": finished})
        self.assertTrue(is_error, text)
        self.assertIn("can no longer be read", text)
        self.assertEqual(self.py("bash_kill", {"task_id": finished}), (f"task {finished} had already finished", False))

    def test_a_run_in_flight_may_or_may_not_have_run(self):
        answer = {}
        runner = threading.Thread(target=lambda: answer.update(r=self.py("bash", {"command": "sleep 30", "description": "x"})))
        runner.start()
        time.sleep(0.5)
        self.kill_server()
        runner.join(10)
        self.assertFalse(runner.is_alive())
        text, is_error = answer["r"]
        self.assertTrue(is_error, text)
        self.assertIn("the executor service was lost", text)
        self.assertIn("it may or may not have run", text)


class Connecting(unittest.TestCase):
    def test_a_protocol_version_mismatch_is_refused_naming_both(self):
        class Newer(ServedExecutor):
            @staticmethod
            def protocol_version():
                return 2

        with self.assertRaises(ServedExecutorError) as e:
            Newer(binary=BIN)
        self.assertIn("version 2", str(e.exception))
        self.assertIn("version 1", str(e.exception))

    def test_a_server_answering_another_version_is_refused(self):
        stand_in = (
            "import json, sys\n"
            "m = json.loads(sys.stdin.readline())\n"
            "print(json.dumps({'jsonrpc': '2.0', 'id': m['id'], 'result': {'protocol': 7, 'server': 'x', "
            "'session': 's', 'limits': {}, 'remembered_requests': 1}}), flush=True)\n"
            "sys.stdin.read()\n"
        )
        with self.assertRaises(ServedExecutorError) as e:
            ServedExecutor([sys.executable, "-c", stand_in])
        self.assertIn("version 1", str(e.exception))
        self.assertIn("version 7", str(e.exception))

    def test_a_command_that_ends_before_hello_is_named(self):
        with self.assertRaises(ServedExecutorError) as e:
            ServedExecutor(["sh", "-c", "exit 2"])
        self.assertIn("ended before answering hello", str(e.exception))
        self.assertIn("status 2", str(e.exception))

    def test_the_limits_are_the_servers(self):
        with ServedExecutor(binary=BIN, args=["--max-output-bytes", "12345", *GRACE]) as ex:
            self.assertEqual(
                ex.current_limits(),
                {
                    "default_timeout_ms": 120000.0,
                    "max_timeout_ms": 600000.0,
                    "max_output_bytes": 12345,
                    "grace_ms": 500.0,
                    "sandbox": None,
                },
            )

    def test_shutdown_stops_the_tasks_and_the_server(self):
        ex = ServedExecutor(binary=BIN, args=GRACE)
        marker = f"sleep 4{os.getpid() % 1000}.25"
        ex.start(ex.resolve(marker, "/", None, None))
        self.assertTrue(wait_until(lambda: alive(marker) != []))
        ex.shutdown()
        self.assertIsNotNone(ex._child.poll())
        self.assertEqual(alive(marker), [])

    def test_the_default_executor_is_the_served_one_when_dsh_host_is_there(self):
        with mock.patch.dict(os.environ, {"DSH_HOST": BIN}):
            ex = default_executor()
        try:
            self.assertIsInstance(ex, ServedExecutor)
            self.assertEqual(describe_executor(ex)["kind"], "served")
            self.assertEqual((ex.describe()["binary"], ex.describe()["binary_source"]), (BIN, "env"))
        finally:
            ex.shutdown()
        with mock.patch.dict(os.environ, {"DSH_HOST": "", "PATH": "/nonexistent"}):
            ex = default_executor()
        self.assertIsInstance(ex, LocalExecutor)
        info = describe_executor(ex)
        self.assertEqual(info["kind"], "local")
        self.assertTrue(any("spill" in lack for lack in info["lacks"]))

    def test_a_carried_binary_comes_before_path_and_gives_way_when_it_cannot_serve(self):
        from dsh_tools.executor import served

        with tempfile.TemporaryDirectory() as d:
            path_dir = os.path.join(d, "path")
            os.mkdir(path_dir)
            on_path = os.path.join(path_dir, "dsh-host")
            os.symlink(BIN, on_path)
            carried = os.path.join(d, "dsh-host")
            env = {"DSH_HOST": "", "PATH": path_dir}
            with mock.patch.object(served, "PACKAGED_BINARY", carried), mock.patch.dict(os.environ, env):
                # None carried, or one that cannot be executed: PATH's.
                self.assertEqual(served.find_binaries(), [(on_path, "path")])
                with open(carried, "w") as f:
                    f.write("#!/bin/sh\nexit 3\n")
                self.assertEqual(served.find_binaries(), [(on_path, "path")])
                # An executable one comes first; DSH_HOST alone when set.
                os.chmod(carried, 0o755)
                self.assertEqual(served.find_binaries(), [(carried, "package"), (on_path, "path")])
                with mock.patch.dict(os.environ, {"DSH_HOST": BIN}):
                    self.assertEqual(served.find_binaries(), [(BIN, "env")])
                # One that cannot serve gives way to PATH's...
                ex = default_executor()
                try:
                    info = describe_executor(ex)
                    self.assertEqual((info["kind"], info["binary_source"], info["binary"]), ("served", "path", on_path))
                finally:
                    ex.shutdown()
                # ...and, with none there, to a LocalExecutor that says why.
                with mock.patch.dict(os.environ, {"PATH": d + "/nowhere"}):
                    ex = default_executor()
                info = describe_executor(ex)
                self.assertEqual(info["kind"], "local")
                self.assertIn(repr(carried), info["fallback_reason"])
                self.assertIn("exited with status 3", info["fallback_reason"])

    def test_tools_use_the_served_executor_by_default_and_say_so(self):
        with mock.patch.dict(os.environ, {"DSH_HOST": BIN}):
            tools = Tools()
        with tools, tools.session() as session:
            self.assertEqual(tools.doctor()["kind"], "served")
            self.assertEqual(tools.doctor()["lacks"], [])
            # A setsid escapee is stopped, as only the served executor does.
            text = session.call("bash", {"command": "setsid sleep 300 & echo started", "description": "Escape"}).text
            self.assertIn("[stopped 1 leftover background process(es)", text)
        with mock.patch.dict(os.environ, {"DSH_HOST": "", "PATH": "/nonexistent"}):
            tools = Tools()
        with tools:
            self.assertEqual(tools.doctor()["kind"], "local")


if __name__ == "__main__":
    unittest.main()
