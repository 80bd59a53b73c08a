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
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple, Union

from langchain_core.tools import StructuredTool, ToolException

from .tools import Session, Tools


class DshTool(StructuredTool):
    """A structured tool whose arguments go to the component as one JSON object."""

    def _to_args_and_kwargs(
        self, tool_input: Union[str, Dict[str, Any]], tool_call_id: Optional[str]
    ) -> Tuple[Tuple[Any, ...], Dict[str, Any]]:
        # The arguments stay one value: spread as keywords they could collide with LangChain's
        # own (`config`, `run_manager`), and a string is the component's to reject, not ours.
        return (), {"arguments": tool_input}


def langchain_tools(tools: Tools, session: Optional[Session] = None) -> List[StructuredTool]:
    """One LangChain tool per component tool, calling it in `session` (or without one)."""

    def make(name: str, description: str, schema: Dict[str, Any]) -> StructuredTool:
        def run(arguments: Any) -> str:
            result = tools.call(name, arguments, session)
            if result.is_error:
                raise ToolException(result.text)
            return result.text

        return DshTool(
            name=name,
            description=description,
            args_schema=schema,
            func=run,
            handle_tool_error=True,
        )

    return [make(d.name, d.description, d.input_schema) for d in tools.tool_definitions]
