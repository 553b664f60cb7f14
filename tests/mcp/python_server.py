"""An MCP server written with the official Python SDK (`mcp` 2.3.0, its `MCPServer`,
formerly FastMCP), served over streamable HTTP on 127.0.0.1 behind a bearer token.

Usage: python_server.py TOKEN
Prints `PORT <n>` once it listens, then serves until killed. Every request without
`Authorization: Bearer TOKEN` gets 401 before the SDK sees it.
"""

import asyncio
import json
import socket
import sys

import uvicorn
from pydantic import BaseModel

from mcp.server.mcpserver import Context, MCPServer

TOKEN = sys.argv[1]

server = MCPServer(name="notes", instructions="A small notes server for mur's tests.")


@server.tool(description="Adds two integers.")
def add(a: int, b: int) -> int:
    return a + b


@server.tool(description="Says hello to someone by name.")
def greet(name: str) -> str:
    return f"Hello, {name}, from the Python MCP SDK."


@server.tool(description="Counts to `steps`, reporting progress at each step.")
async def count(steps: int, ctx: Context) -> str:
    for i in range(1, steps + 1):
        await ctx.report_progress(i, steps, f"step {i}")
        await asyncio.sleep(0.05)
    return f"counted to {steps}"


@server.tool(description="Says the W3C traceparent the call came with: in `_meta`, and as a header.")
def traceparent(ctx: Context) -> str:
    meta = ctx.request_context.meta or {}
    headers = ctx.headers or {}
    return json.dumps({"meta": meta.get("traceparent"), "header": headers.get("traceparent")})


class Colour(BaseModel):
    colour: str


@server.tool(description="Asks the person for a colour.")
async def favourite(ctx: Context) -> str:
    answer = await ctx.elicit("Which colour do you like?", Colour)
    if answer.action == "accept" and answer.data is not None:
        return f"the person likes {answer.data.colour}"
    return f"the person did not answer ({answer.action})"


def guarded(app):
    expected = f"Bearer {TOKEN}".encode()

    async def asgi(scope, receive, send):
        if scope["type"] == "http":
            headers = dict(scope.get("headers") or [])
            if headers.get(b"authorization") != expected:
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"content-type", b"application/json")]})
                await send({"type": "http.response.body",
                            "body": b'{"error": "a bearer token is required"}'})
                return
        await app(scope, receive, send)

    return asgi


def main():
    app = guarded(server.streamable_http_app())
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    # Listening before the port is told, so the first connection is never refused.
    sock.listen(128)
    print(f"PORT {sock.getsockname()[1]}", flush=True)
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    asyncio.run(uvicorn.Server(config).serve(sockets=[sock]))


main()
