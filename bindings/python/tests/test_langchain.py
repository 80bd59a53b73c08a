"""The LangChain adapter, driven through LangChain's own tool objects: no model, no network."""

import tempfile
import unittest

from langchain_core.messages import ToolMessage
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool

from dsh_tools import LocalExecutor, Tools
from dsh_tools.langchain import langchain_tools


class LangChainTools(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.tools = Tools(LocalExecutor(grace_ms=200))
        self.session = self.tools.session(cwd=self.dir.name)
        self.by_name = {t.name: t for t in langchain_tools(self.tools, self.session)}

    def tearDown(self):
        self.tools.close()
        self.dir.cleanup()

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

    def test_background_task_through_the_other_tools(self):
        started = self.by_name["bash"].invoke(
            {"command": "echo bg", "description": "Echo in the background", "run_in_background": True}
        )
        self.assertEqual(started, "started background task bash-1")
        notices = self.session.take_notices(timeout=10)
        self.assertEqual(len(notices), 1, notices)
        out = self.by_name["bash_output"].invoke({"task_id": "bash-1"})
        self.assertTrue(out.startswith("bg\n"), out)
        unknown = self.by_name["bash_kill"].invoke({"task_id": "bash-99"})
        self.assertEqual(unknown, self.tools.call("bash_kill", {"task_id": "bash-99"}, self.session).text)


if __name__ == "__main__":
    unittest.main()
