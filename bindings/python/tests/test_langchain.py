"""The LangChain adapter, driven through LangChain's own tool objects: no model, no network."""

import asyncio
import os
import tempfile
import threading
import time
import unittest

from langchain_core.messages import ToolMessage
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool

from dsh_tools import LocalExecutor, Tools
from dsh_tools.executor.process import group_members
from dsh_tools.langchain import langchain_tools


# A background command that first waits for the test to create `go` in its directory.
GATED = "until [ -e go ]; do sleep 0.01; done; "


class LangChainTools(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.tools = Tools(LocalExecutor(grace_ms=200))
        self.notices = []
        self.noticed = threading.Event()
        self.session = self.tools.session(cwd=self.dir.name, on_notice=self.on_notice)
        self.by_name = {t.name: t for t in langchain_tools(self.tools, self.session)}

    def on_notice(self, notice):
        self.notices.append(notice)
        self.noticed.set()

    def tearDown(self):
        self.tools.close()
        self.dir.cleanup()

    def tool_call(self, name, args, call_id="call-1"):
        return self.by_name[name].invoke({"type": "tool_call", "id": call_id, "name": name, "args": args})

    def read_pgid(self):
        """The process group written to `pgid` by a running command (bash leads its group)."""
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with open(os.path.join(self.dir.name, "pgid")) as f:
                    text = f.read()
                if text.endswith("\n"):
                    return int(text)
            except FileNotFoundError:
                pass
            time.sleep(0.01)
        raise TimeoutError("no pgid written")

    def start_and_finish(self, command):
        """Start a background task and wait until its notice arrived (not taken yet). The task
        waits for the start's result, so that its notice cannot ride on that one."""
        started = self.by_name["bash"].invoke(
            {"command": GATED + command, "description": "In the background", "run_in_background": True}
        )
        self.assertEqual(started, "started background task bash-1")
        open(os.path.join(self.dir.name, "go"), "w").close()
        self.assertTrue(self.noticed.wait(10))
        self.assertEqual(len(self.notices), 1)
        return self.notices[0].text

    def test_a_model_is_shown_the_components_definitions(self):
        self.assertEqual(list(self.by_name), [d.name for d in self.tools.tool_definitions])
        self.assertTrue(all(isinstance(t, BaseTool) for t in self.by_name.values()))
        # What LangChain binds to a model, converted by LangChain itself.
        shown = [convert_to_openai_tool(t) for t in self.by_name.values()]
        self.assertEqual(shown, self.tools.definitions(format="openai"))

    def test_a_call_runs_a_real_command_in_the_session(self):
        out = self.by_name["bash"].invoke({"command": "pwd; echo made > f.txt", "description": "Show the directory"})
        self.assertEqual(out, self.dir.name + "\n")
        with open(f"{self.dir.name}/f.txt") as f:
            self.assertEqual(f.read(), "made\n")

    def test_a_bad_argument_gives_the_components_validation_text(self):
        args = {"description": "No command given", "timeoutMs": "soon"}
        want = self.tools.call("bash", args, self.session)
        self.assertTrue(want.is_error)
        self.assertEqual(self.by_name["bash"].invoke(args), want.text)
        # Through a model's tool call, the message is marked as an error.
        msg = self.by_name["bash"].invoke({"type": "tool_call", "id": "call-1", "name": "bash", "args": args})
        self.assertIsInstance(msg, ToolMessage)
        self.assertEqual((msg.content, msg.status, msg.tool_call_id), (want.text, "error", "call-1"))

    def test_argument_names_of_langchain_itself_reach_the_component(self):
        # `config` and `run_manager` are keywords of LangChain's own; they must not collide.
        args = {"command": "echo ok", "description": "Say ok", "config": 1, "run_manager": 2}
        want = self.tools.call("bash", args, self.session)
        self.assertEqual(self.by_name["bash"].invoke(args), want.text)

    def test_a_notice_rides_on_the_next_result_once(self):
        notice = self.start_and_finish("echo bg")
        want = self.tools.call("bash", {"command": "echo next", "description": "Go on"}, self.session).text
        msg = self.tool_call("bash", {"command": "echo next", "description": "Go on"})
        # As dsh-host mcp gives it: the result's text block, then one text block per notice.
        self.assertEqual(msg.content, [{"type": "text", "text": want}, {"type": "text", "text": notice}])
        self.assertEqual(msg.status, "success")
        # Once: the next result carries none, and the session has none left to take.
        self.assertEqual(self.tool_call("bash", {"command": "echo again", "description": "Again"}).content, "again\n")
        self.assertEqual(self.session.take_notices(), [])

    def test_a_notice_rides_on_an_error_result_too(self):
        notice = self.start_and_finish("exit 4")
        args = {"description": "No command given"}
        want = self.tools.call("bash", args, self.session).text
        msg = self.tool_call("bash", args)
        self.assertEqual(msg.content, [{"type": "text", "text": want}, {"type": "text", "text": notice}])
        self.assertEqual(msg.status, "error")

    def test_ainvoke_runs_the_call_and_cancelling_it_aborts_the_command(self):
        async def main():
            self.assertEqual(await self.by_name["bash"].ainvoke({"command": "echo a", "description": "Say a"}), "a\n")
            call = asyncio.create_task(
                self.by_name["bash"].ainvoke(
                    {"command": "echo $$ > pgid; sleep 30; touch MARKER", "description": "Sleep, then mark"}
                )
            )
            pgid = await asyncio.to_thread(self.read_pgid)
            call.cancel()
            with self.assertRaises(asyncio.CancelledError):
                await call
            return pgid

        pgid = asyncio.run(main())
        self.assertEqual(group_members(pgid), [])
        time.sleep(0.2)
        self.assertFalse(os.path.exists(os.path.join(self.dir.name, "MARKER")))

    def test_background_task_through_the_other_tools(self):
        started = self.by_name["bash"].invoke(
            {"command": GATED + "echo bg", "description": "Echo in the background", "run_in_background": True}
        )
        self.assertEqual(started, "started background task bash-1")
        open(os.path.join(self.dir.name, "go"), "w").close()
        notices = self.session.take_notices(timeout=10)
        self.assertEqual(len(notices), 1, notices)
        out = self.by_name["bash_output"].invoke({"task_id": "bash-1"})
        self.assertTrue(out.startswith("bg\n"), out)
        unknown = self.by_name["bash_kill"].invoke({"task_id": "bash-99"})
        self.assertEqual(unknown, self.tools.call("bash_kill", {"task_id": "bash-99"}, self.session).text)


if __name__ == "__main__":
    unittest.main()
