"""Tool definitions in the shapes agent ecosystems expect, all from the component's own.

The same shapes as `dsh-host tools --format …`: MCP's are `tools/list` entries, title and
annotations included; OpenAI's and Anthropic's function tools have no place for a title or
annotations, so they carry name, description and schema only.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Dict, List, Literal

Format = Literal["mcp", "openai", "anthropic"]
FORMATS = ("mcp", "openai", "anthropic")


@dataclass(frozen=True)
class Annotations:
    read_only_hint: bool
    destructive_hint: bool
    idempotent_hint: bool
    open_world_hint: bool


@dataclass(frozen=True)
class ToolDefinition:
    name: str
    title: str
    description: str
    input_schema: Dict[str, Any]
    annotations: Annotations


def from_wit(d: Any) -> ToolDefinition:
    a = d.annotations
    return ToolDefinition(
        name=d.name,
        title=d.title,
        description=d.description,
        input_schema=json.loads(getattr(d, "input-schema")),
        annotations=Annotations(
            read_only_hint=getattr(a, "read-only-hint"),
            destructive_hint=getattr(a, "destructive-hint"),
            idempotent_hint=getattr(a, "idempotent-hint"),
            open_world_hint=getattr(a, "open-world-hint"),
        ),
    )


def _mcp(t: ToolDefinition) -> Dict[str, Any]:
    a = t.annotations
    return {
        "name": t.name,
        "title": t.title,
        "description": t.description,
        "inputSchema": t.input_schema,
        "annotations": {
            "title": t.title,
            "readOnlyHint": a.read_only_hint,
            "destructiveHint": a.destructive_hint,
            "idempotentHint": a.idempotent_hint,
            "openWorldHint": a.open_world_hint,
        },
    }


def render(tools: List[ToolDefinition], format: str) -> List[Dict[str, Any]]:
    """The definitions as JSON-ready data in `format` ("mcp", "openai" or "anthropic")."""
    if format == "mcp":
        return [_mcp(t) for t in tools]
    if format == "openai":
        return [
            {"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.input_schema}}
            for t in tools
        ]
    if format == "anthropic":
        return [{"name": t.name, "description": t.description, "input_schema": t.input_schema} for t in tools]
    raise ValueError(f"unknown definitions format {format!r}: expected one of {', '.join(FORMATS)}")
