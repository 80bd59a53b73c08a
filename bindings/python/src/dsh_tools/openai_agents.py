"""The tools as OpenAI Agents SDK function tools (install the `openai-agents` extra).

    from agents import Agent
    from dsh_tools import Tools
    from dsh_tools.openai_agents import openai_agents_tools

    tools = Tools()
    session = tools.session(cwd="/srv/project")
    agent = Agent(name="dev", tools=openai_agents_tools(tools, session))

Each tool is a `FunctionTool` with the component's own JSON schema, not made strict
(`strict_json_schema=False`): the model may leave out the optional fields, as the schema
allows. The model's arguments (a JSON text) reach the component unchanged, so the component
validates them and words every result.

An error result is marked as the SDK marks a function tool's handled failure: an error on the
tool call's trace span (its data name the tool and the component's error code), while the model
reads the component's text. Completion notices of the session's background tasks ride on its
next result, as with `dsh-host mcp`: the output is then a list of `ToolOutputText`, the result's
text first and one per notice after it, in arrival order (taken with `session.take_notices()`).
The call runs off the event loop, and a cancelled invocation (the SDK's tool timeout, a cancelled
run) aborts its foreground command.
"""

from __future__ import annotations

import copy
from typing import Any, Dict, List, Optional, Union

from agents import FunctionTool, RunContextWrapper, ToolOutputText
from agents.tracing import SpanError, get_current_span

from .tools import Session, ToolResult, Tools

# A tool's output: the result's text alone, or text items when notices ride on it.
Output = Union[str, List[ToolOutputText]]

ERROR_SPAN_MESSAGE = "error result"
"""The message of the trace-span error that marks an error result (never shown to the model)."""


def _output(name: str, result: ToolResult, session: Optional[Session]) -> Output:
    if result.is_error:
        span = get_current_span()
        if span is not None:
            span.set_error(SpanError(message=ERROR_SPAN_MESSAGE, data={"tool_name": name, "error_code": result.error_code}))
    notices = [] if session is None else session.take_notices()
    if not notices:
        return result.text
    return [ToolOutputText(text=text) for text in [result.text, *(n.text for n in notices)]]


def openai_agents_tools(tools: Tools, session: Optional[Session] = None) -> List[FunctionTool]:
    """One function tool per component tool, calling it in `session` (or without one)."""

    def make(name: str, description: str, schema: Dict[str, Any]) -> FunctionTool:
        async def invoke(_ctx: RunContextWrapper[Any], arguments: str) -> Output:
            return _output(name, await tools.acall(name, arguments, session), session)

        return FunctionTool(
            name=name,
            description=description,
            params_json_schema=copy.deepcopy(schema),
            on_invoke_tool=invoke,
            strict_json_schema=False,
        )

    return [make(d.name, d.description, d.input_schema) for d in tools.tool_definitions]
