"""The OpenAI Agents SDK adapter, driven through the SDK's own objects: its `FunctionTool`s
invoked with a `ToolContext` and a JSON text, its model-side converter, and a whole agent run
with the SDK's scripted model. No model, no network."""

import asyncio
import json
import os
import tempfile
import threading
import time
import unittest

from agents import Agent, FunctionTool, Runner, ToolOutputText, set_trace_processors
from agents.models.chatcmpl_converter import Converter
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call
from agents.tool_context import ToolContext
from agents.tracing import FunctionSpanData, TracingProcessor, function_span, trace

from dsh_tools import LocalExecutor, Tools
from dsh_tools.executor.process import group_members
from dsh_tools.openai_agents import openai_agents_tools


class Spans(TracingProcessor):
    """Keeps the ended spans (instead of the SDK's exporter, which would send them away)."""

    def __init__(self):
        self.ended = []

    def on_trace_start(self, trace):
        pass

    def on_trace_end(self, trace):
        pass

    def on_span_start(self, span):
        pass

    def on_span_end(self, span):
        self.ended.append(span)

    def shutdown(self):
        pass

    def force_flush(self):
        pass


SPANS = Spans()

# A background command that first waits for the test to create `go` in its directory.
GATED = "until [ -e go ]; do sleep 0.01; done; "


def setUpModule():
    set_trace_processors([SPANS])


class OpenAIAgentsTools(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name
        self.tools = Tools(LocalExecutor(grace_ms=200))
        self.notices = []
        self.noticed = threading.Event()
        self.session = self.tools.session(cwd=self.dir, on_notice=self.on_notice)
        self.by_name = {t.name: t for t in openai_agents_tools(self.tools, self.session)}
        SPANS.ended.clear()

    def tearDown(self):
        self.tools.close()
        self.tmp.cleanup()

    def on_notice(self, notice):
        self.notices.append(notice)
        self.noticed.set()

    def invoke(self, name, arguments, call_id="call-1"):
        """What the SDK does for a model's tool call: `on_invoke_tool(ToolContext, JSON text)`."""
        text = arguments if isinstance(arguments, str) else json.dumps(arguments)
        ctx = ToolContext(context=None, tool_name=name, tool_call_id=call_id, tool_arguments=text)
        return asyncio.run(self.by_name[name].on_invoke_tool(ctx, text))

    def go(self):
        open(os.path.join(self.dir, "go"), "w").close()

    def start_and_finish(self, command):
        """Start a background task and wait until its notice arrived (not taken yet). The task
        waits for the start's result, so that its notice cannot ride on that one."""
        args = {"command": GATED + command, "description": "Background", "run_in_background": True}
        self.assertEqual(self.invoke("bash", args), "started background task bash-1")
        self.go()
        self.assertTrue(self.noticed.wait(10))
        return self.notices[0].text

    def test_a_model_is_shown_the_components_definitions_not_made_strict(self):
        self.assertEqual(list(self.by_name), [d.name for d in self.tools.tool_definitions])
        self.assertTrue(all(isinstance(t, FunctionTool) for t in self.by_name.values()))
        # What the SDK sends a Chat Completions model, converted by the SDK itself: the
        # component's own definitions, with strict mode off.
        shown = [Converter.tool_to_openai(t) for t in self.by_name.values()]
        want = self.tools.definitions(format="openai")
        for tool in want:
            tool["function"]["strict"] = False
        self.assertEqual(shown, want)

    def test_optional_fields_may_be_left_out(self):
        # A strict schema would make the model send every field; the component's does not.
        bash = self.by_name["bash"].params_json_schema
        self.assertEqual(bash["required"], ["command", "description"])
        self.assertIn("run_in_background", bash["properties"])
        self.assertEqual(self.invoke("bash", {"command": "pwd", "description": "Where"}), self.dir + "\n")

    def test_arguments_reach_the_component_unchanged(self):
        for args in ('{"command": "echo hi", "description": "Greet"}', "not json", '{"description": 1}'):
            want = self.tools.call("bash", args, self.session)
            self.assertEqual(self.invoke("bash", args), want.text, args)

    def test_an_error_result_is_the_components_text_and_marks_the_span(self):
        args = {"description": "No command given"}
        want = self.tools.call("bash", args, self.session)
        self.assertTrue(want.is_error)
        with trace("test"):
            with function_span("bash") as span:
                self.assertEqual(self.invoke("bash", args), want.text)
        self.assertEqual(span.error, {"message": "error result", "data": {"tool_name": "bash", "error_code": want.error_code}})
        # A non-zero exit is no error result: its span has no error.
        args = {"command": "exit 3", "description": "Fail"}
        want = self.tools.call("bash", args, self.session)
        self.assertFalse(want.is_error)
        with trace("test"):
            with function_span("bash") as span:
                self.assertEqual(self.invoke("bash", args), want.text)
        self.assertIsNone(span.error)

    def test_a_notice_rides_on_the_next_result_once(self):
        notice = self.start_and_finish("echo bg")
        out = self.invoke("bash_output", {"task_id": "bash-1"})
        self.assertEqual(out, [ToolOutputText(text="bg\n\n[status: completed, exit code: 0]"), ToolOutputText(text=notice)])
        self.assertEqual(self.invoke("bash", {"command": "echo next", "description": "Go on"}), "next\n")
        self.assertEqual(self.session.take_notices(), [])

    def test_a_cancelled_invocation_aborts_the_foreground_command(self):
        args = json.dumps({"command": "echo $$ > pgid; sleep 30; touch MARKER", "description": "Sleep, then mark"})
        ctx = ToolContext(context=None, tool_name="bash", tool_call_id="call-1", tool_arguments=args)

        async def main():
            # As the SDK's tool timeout does it: wait_for cancels the invocation.
            with self.assertRaises(asyncio.TimeoutError):
                await asyncio.wait_for(self.by_name["bash"].on_invoke_tool(ctx, args), 0.5)

        started = time.monotonic()
        asyncio.run(main())
        self.assertLess(time.monotonic() - started, 2.0)
        with open(os.path.join(self.dir, "pgid")) as f:
            pgid = int(f.read())
        self.assertEqual(group_members(pgid), [])
        time.sleep(0.2)
        self.assertFalse(os.path.exists(os.path.join(self.dir, "MARKER")))

    def test_an_agent_run_shows_the_model_the_components_texts(self):
        async def after_the_notice(_call):
            # The model's second turn comes once the background task ended and its notice came.
            self.go()
            await asyncio.to_thread(self.noticed.wait, 10)
            return [function_call("bash", {"description": "No command"}, call_id="c2")]

        model = ScriptedModel(
            [
                [function_call("bash", {"command": GATED + "echo bg", "description": "Bg", "run_in_background": True}, call_id="c1")],
                ModelStep.respond(after_the_notice),
                [assistant_message("done")],
            ]
        )
        agent = Agent(name="dev", model=model, tools=list(self.by_name.values()))

        async def run():
            return await Runner.run(agent, "go")

        result = asyncio.run(run())
        self.assertEqual(result.final_output, "done")
        outputs = [i for i in model.calls[-1].input if isinstance(i, dict) and i.get("type") == "function_call_output"]
        want_error = self.tools.call("bash", {"description": "No command"}).text
        self.assertEqual(
            [(o["call_id"], o["output"]) for o in outputs],
            [
                ("c1", "started background task bash-1"),
                (
                    "c2",
                    [
                        {"type": "input_text", "text": want_error},
                        {"type": "input_text", "text": self.notices[0].text},
                    ],
                ),
            ],
        )
        errors = [(s.span_data.name, s.error) for s in SPANS.ended if isinstance(s.span_data, FunctionSpanData)]
        self.assertEqual(
            errors,
            [("bash", None), ("bash", {"message": "error result", "data": {"tool_name": "bash", "error_code": "INVALID_ARGS"}})],
        )


if __name__ == "__main__":
    unittest.main()
