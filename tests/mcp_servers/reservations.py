"""A small MCP server for the gateway's tests, written with the SDK's low-level Server.

Tools: get_reservation, cancel, search (annotations, outputSchema and _meta to pass through),
fail (an isError result), slow (sleeps), crash (the process exits). Every call it receives is
appended as a JSON line to the file given with `--log PATH`, so a test can see what reached it.
Serves stdio, or Streamable HTTP with `--http PORT`.
"""

from __future__ import annotations

import json
import os
import sys

import anyio
import mcp_types as types
from mcp.server.lowlevel.server import NotificationOptions, Server
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ToolsListChanged
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

TOOLS = [
    types.Tool(name="get_reservation", description="Look a reservation up.",
               input_schema={"type": "object", "properties": {"reservation_id": {"type": "string"}},
                             "required": ["reservation_id"]}),
    types.Tool(name="cancel", description="Cancel a reservation.",
               input_schema={"type": "object", "properties": {"reservation_id": {"type": "string"}},
                             "required": ["reservation_id"]},
               annotations=types.ToolAnnotations(destructive_hint=True)),
    types.Tool(name="search", description="Search reservations.",
               input_schema={"type": "object", "properties": {"q": {"type": "string"}}},
               output_schema={"type": "object", "properties": {"hits": {"type": "integer"}},
                              "required": ["hits"]},
               annotations=types.ToolAnnotations(read_only_hint=True, title="Search"),
               _meta={"example.com/owner": "tests"}),
    types.Tool(name="fail", description="Always fails.", input_schema={"type": "object"}),
    types.Tool(name="slow", description="Sleeps.", input_schema={"type": "object",
               "properties": {"seconds": {"type": "number"}}}),
    types.Tool(name="crash", description="The server exits.", input_schema={"type": "object"}),
    types.Tool(name="add_tool", description="Adds the tool `extra` and announces the change.",
               input_schema={"type": "object"}),
]
EXTRA = types.Tool(name="extra", description="Added by add_tool.", input_schema={"type": "object"})
BUS = InMemorySubscriptionBus()


LOG: list[str] = []


def _log(name: str, arguments: dict, request, meta) -> None:
    headers = dict(request.headers) if request is not None else {}
    meta = dict(meta or {})
    for path in LOG:
        with open(path, "a") as f:
            f.write(json.dumps({"tool": name, "arguments": arguments, "pid": os.getpid(),
                                "authorization": headers.get("authorization"),
                                "traceparent": meta.get("traceparent"),
                                "env": os.environ.get("ZC_TEST_SERVER_ENV")}) + "\n")


async def list_tools(ctx, params):
    return types.ListToolsResult(tools=TOOLS)


async def call_tool(ctx, params):
    name, args = params.name, params.arguments or {}
    _log(name, args, ctx.request, ctx.meta)
    text = lambda s: [types.TextContent(type="text", text=s)]  # noqa: E731
    if name == "get_reservation":
        return types.CallToolResult(content=text(json.dumps({"id": args.get("reservation_id"),
                                                             "status": "ok"})))
    if name == "cancel":
        return types.CallToolResult(content=text(json.dumps({"cancelled": args.get("reservation_id")})))
    if name == "search":
        return types.CallToolResult(content=text('{"hits": 2}'), structured_content={"hits": 2},
                                    _meta={"example.com/page": 1})
    if name == "fail":
        return types.CallToolResult(content=text("Error: no such reservation"), is_error=True)
    if name == "slow":
        await anyio.sleep(float(args.get("seconds", 5)))
        return types.CallToolResult(content=text("slept"))
    if name == "add_tool":
        if EXTRA not in TOOLS:
            TOOLS.append(EXTRA)
        await BUS.publish(ToolsListChanged())  # 2026-07-28: to the listen streams
        if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
            await ctx.session.send_tool_list_changed()
        return types.CallToolResult(content=text("added"))
    if name == "extra":
        return types.CallToolResult(content=text("extra"))
    if name == "crash":
        sys.stderr.flush()
        os._exit(3)
    raise ValueError(f"unknown tool {name}")


server = Server("reservations", version="1.0", on_list_tools=list_tools, on_call_tool=call_tool,
                on_subscriptions_listen=ListenHandler(BUS))


async def _stdio() -> None:
    from mcp.server.stdio import stdio_server

    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options(NotificationOptions(
            tools_changed=True)))


def main(argv: list[str]) -> None:
    opts = dict(zip(argv[::2], argv[1::2]))
    if "--log" in opts:
        LOG.append(opts["--log"])
    if "--http" in opts:
        import uvicorn

        uvicorn.run(server.streamable_http_app(), host="127.0.0.1", port=int(opts["--http"]),
                    log_level="warning")
    else:
        anyio.run(_stdio)


if __name__ == "__main__":
    main(sys.argv[1:])
