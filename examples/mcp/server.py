"""The MCP server of docs/mcp.md's example: a reservation desk written with the SDK's low-level Server
(stdio)."""

from __future__ import annotations

import json

import anyio
import mcp_types as types
from mcp.server.lowlevel.server import Server
from mcp.server.stdio import stdio_server

ID = {"type": "object", "properties": {"reservation_id": {"type": "string"}}, "required": ["reservation_id"]}
TOOLS = [
    types.Tool(name="get_reservation", description="Look a reservation up.", input_schema=ID,
               annotations=types.ToolAnnotations(read_only_hint=True)),
    types.Tool(name="cancel_reservation", description="Cancel a reservation.", input_schema=ID,
               annotations=types.ToolAnnotations(destructive_hint=True)),
]


async def list_tools(ctx, params):
    return types.ListToolsResult(tools=TOOLS)


async def call_tool(ctx, params):
    rid = (params.arguments or {}).get("reservation_id")
    body = {"id": rid, "status": "confirmed"} if params.name == "get_reservation" else {"cancelled": rid}
    return types.CallToolResult(content=[types.TextContent(type="text", text=json.dumps(body))])


async def main() -> None:
    server = Server("desk", version="1.0", on_list_tools=list_tools, on_call_tool=call_tool)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
