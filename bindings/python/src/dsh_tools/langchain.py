"""The tools as LangChain structured tools (install the `langchain` extra).

    from dsh_tools import Tools
    from dsh_tools.langchain import langchain_tools

    tools = Tools()
    session = tools.session(cwd="/srv/project")
    agent_tools = langchain_tools(tools, session)  # bash, bash_output, bash_kill

Each tool takes the component's own JSON schema and hands the model's arguments to the
component unchanged, so the component validates them and words every result. An error result
becomes a `ToolException` handled by LangChain: its text is the tool's output, and a
`ToolMessage` made for a tool call has `status="error"`.

Completion notices of the session's background tasks ride on its next result, as with
`dsh-host mcp`: the output is then a list of text blocks, the result's text first and one block
per notice after it, in arrival order (the tools take them with `session.take_notices()`).
`ainvoke` runs the call off the event loop, and cancelling it aborts the foreground command.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple, Union

from langchain_core.tools import StructuredTool, ToolException

from .tools import Session, ToolResult, Tools

# A tool's output: the result's text alone, or text blocks when notices ride on it.
Output = Union[str, List[Dict[str, str]]]


class DshTool(StructuredTool):
    """A structured tool whose arguments go to the component as one JSON object."""

    def _to_args_and_kwargs(
        self, tool_input: Union[str, Dict[str, Any]], tool_call_id: Optional[str]
    ) -> Tuple[Tuple[Any, ...], Dict[str, Any]]:
        # The arguments stay one value: spread as keywords they could collide with LangChain's
        # own (`config`, `run_manager`), and a string is the component's to reject, not ours.
        return (), {"arguments": tool_input}


class DshToolError(ToolException):
    """An error result of the component; `content` is what the model reads."""

    def __init__(self, content: Output):
        super().__init__(content)
        self.content = content


def _error_content(e: ToolException) -> Output:
    return e.content if isinstance(e, DshToolError) else str(e)


def _output(result: ToolResult, session: Optional[Session]) -> Output:
    """The result's text, with the session's pending notices as text blocks after it."""
    notices = [] if session is None else session.take_notices()
    output: Output = result.text
    if notices:
        output = [{"type": "text", "text": text} for text in [result.text, *(n.text for n in notices)]]
    if result.is_error:
        raise DshToolError(output)
    return output


def langchain_tools(tools: Tools, session: Optional[Session] = None) -> List[StructuredTool]:
    """One LangChain tool per component tool, calling it in `session` (or without one)."""

    def make(name: str, description: str, schema: Dict[str, Any]) -> StructuredTool:
        def run(arguments: Any) -> Output:
            return _output(tools.call(name, arguments, session), session)

        async def arun(arguments: Any) -> Output:
            return _output(await tools.acall(name, arguments, session), session)

        return DshTool(
            name=name,
            description=description,
            args_schema=schema,
            func=run,
            coroutine=arun,
            handle_tool_error=_error_content,
        )

    return [make(d.name, d.description, d.input_schema) for d in tools.tool_definitions]
