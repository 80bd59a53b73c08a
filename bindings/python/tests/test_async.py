"""The async API and aborting a call: `acall` runs off the event loop, and cancelling it (or
setting a call's `abort` event) stops the foreground command, with the component's text."""

import asyncio
import os
import tempfile
import threading
import time
import unittest

from dsh_tools import LocalExecutor, Tools
from dsh_tools.executor.process import group_members

SLEEP_THEN_MARK = "echo $$ > pgid; sleep 30; touch MARKER"


def wait_for_pgid(directory: str) -> int:
    """The process group of the command that wrote `pgid` (bash is its group's leader)."""
    path = os.path.join(directory, "pgid")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with open(path) as f:
                text = f.read()
            if text.endswith("\n"):
                return int(text)
        except FileNotFoundError:
            pass
        time.sleep(0.01)
    raise TimeoutError(path)


class NoAbort(LocalExecutor):
    """An executor written against the Protocol's `run(spec)`: it cannot abort."""

    def run(self, spec):
        return super().run(spec)


class Async(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name
        # The default grace period (3 s): the abort must not wait it out, TERM stops the command.
        self.tools = Tools(LocalExecutor())
        self.session = self.tools.session(cwd=self.dir)

    def tearDown(self):
        self.tools.close()
        self.tmp.cleanup()

    def marker(self) -> bool:
        return os.path.exists(os.path.join(self.dir, "MARKER"))

    def test_acall_gives_what_call_gives(self):
        async def both(args):
            return await self.session.acall("bash", args), await self.tools.acall("bash", args)

        for args in ({"command": "pwd; echo err >&2; exit 3", "description": "Show"}, {"description": "No command"}):
            want = self.session.call("bash", args)
            self.assertEqual(asyncio.run(both(args))[0], want)
        self.assertEqual(asyncio.run(both({"command": "echo hi", "description": "Greet"}))[1].text, "hi\n")

    def test_a_call_runs_off_the_event_loop(self):
        async def main():
            ticks = 0

            async def tick():
                nonlocal ticks
                while True:
                    await asyncio.sleep(0.01)
                    ticks += 1

            ticker = asyncio.create_task(tick())
            result = await self.session.acall("bash", {"command": "sleep 0.5; echo done", "description": "Wait"})
            ticker.cancel()
            return result, ticks

        result, ticks = asyncio.run(main())
        self.assertEqual(result.text, "done\n")
        self.assertGreater(ticks, 10)

    def test_cancelling_acall_aborts_the_foreground_command(self):
        async def main():
            call = asyncio.create_task(
                self.session.acall("bash", {"command": SLEEP_THEN_MARK, "description": "Sleep, then mark"})
            )
            pgid = await asyncio.to_thread(wait_for_pgid, self.dir)
            self.assertTrue(group_members(pgid), "the command runs")
            started = time.monotonic()
            call.cancel()
            with self.assertRaises(asyncio.CancelledError):
                await call
            return pgid, time.monotonic() - started

        pgid, took = asyncio.run(main())
        # Stopped by TERM at once, well within the grace period, and nothing of it is left.
        self.assertLess(took, 2.0)
        self.assertEqual(group_members(pgid), [])
        time.sleep(0.3)
        self.assertFalse(self.marker())
        # The session goes on.
        self.assertEqual(self.session.call("bash", {"command": "echo next", "description": "Go on"}).text, "next\n")

    def test_an_abort_event_aborts_a_running_call_with_the_components_text(self):
        abort = threading.Event()
        timer = threading.Timer(0.3, abort.set)
        timer.start()
        started = time.monotonic()
        r = self.session.call("bash", {"command": SLEEP_THEN_MARK, "description": "Sleep, then mark"}, abort=abort)
        self.assertLess(time.monotonic() - started, 2.0)
        self.assertEqual((r.text, r.is_error, r.error_code), ("Error: command aborted", True, "ABORTED"))
        self.assertEqual(group_members(wait_for_pgid(self.dir)), [])
        self.assertFalse(self.marker())

    def test_an_abort_before_the_start_never_starts_the_command(self):
        abort = threading.Event()
        abort.set()
        r = self.session.call("bash", {"command": "touch MARKER", "description": "Mark"}, abort=abort)
        self.assertEqual((r.text, r.is_error, r.error_code), ("Error: command aborted", True, "ABORTED"))
        time.sleep(0.2)
        self.assertFalse(self.marker())

    def test_an_abort_leaves_background_tasks_alone(self):
        abort = threading.Event()
        abort.set()
        r = self.session.call(
            "bash", {"command": "touch MARKER", "description": "Mark", "run_in_background": True}, abort=abort
        )
        self.assertEqual(r.text, "started background task bash-1")
        self.assertTrue(self.tools.executor.wait("bash-1", 10))
        self.assertTrue(self.marker())

    def test_an_executor_without_abort_runs_the_command_to_its_end(self):
        with Tools(NoAbort()) as tools:
            abort = threading.Event()
            abort.set()
            r = tools.call("bash", {"command": "echo ran", "description": "Run"}, abort=abort)
            self.assertEqual((r.text, r.is_error), ("ran\n", False))


if __name__ == "__main__":
    unittest.main()
