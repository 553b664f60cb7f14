#!/usr/bin/env python3
"""A remote A2A peer for issue 30's formations, served by the official Python SDK
(a2a-sdk 1.3.0, its Starlette JSON-RPC routes, on uvicorn), so that a capsule's calls
to a remote agent meet a server mur did not write:

    python peer_server.py <behaviour>

It listens on 127.0.0.1 (a port of its own choosing) and prints `{"port": N}` as its
first stdout line, then serves its agent card at /.well-known/agent-card.json and
JSON-RPC on /. What it does with a task depends on <behaviour>:

    answer  working, then an artifact "sdk peer answers: <task text>", then completed
    input   asks "Which city?" (input required); the follow-up completes the task
            with "weather in <reply>: sunny"
    drop    the first stream gets one working event, then its connection is cut; the
            task completes a moment later with "after the drop: <task text>", for a
            resubscription (or GetTask) to find
    hang    stays working until canceled; a cancel prints {"canceled": "<task id>"}
    token   as answer, for callers presenting `Authorization: Bearer s3cret-peer-token`;
            everyone else gets 401
    big     working, then one artifact of BIG_CHUNKS chunks of BIG_CHUNK_BYTES letters
            "x" each (50,000,000 bytes in all; append after the first, last_chunk on
            the last), then completed: an answer far past any caller's bound
"""

import asyncio
import json
import socket
import sys

import uvicorn
from starlette.applications import Starlette
from starlette.responses import JSONResponse

from a2a.helpers import new_task_from_user_message, new_text_message, new_text_part
from a2a.server.agent_execution import AgentExecutor
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types.a2a_pb2 import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    TaskState,
)

TOKEN = "s3cret-peer-token"
BEHAVIOURS = ("answer", "input", "drop", "hang", "token", "big")
# Long enough for the caller to notice the cut and come back while the task still runs.
DROP_SETTLES_SECONDS = 0.5
# The `big` answer: 50 chunks of 1,000,000 bytes, each under a caller's one-event cap.
BIG_CHUNKS = 50
BIG_CHUNK_BYTES = 1_000_000


def say(line):
    """One JSON line on stdout, which the Rust side reads as it comes."""
    print(json.dumps(line), flush=True)


class Peer(AgentExecutor):
    def __init__(self, behaviour):
        self.behaviour = behaviour

    async def execute(self, context, event_queue):
        task = context.current_task
        if task is None:
            task = new_task_from_user_message(context.message)
            await event_queue.enqueue_event(task)
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        text = context.get_user_input()

        def agent_text(words):
            return new_text_message(words, context_id=task.context_id, task_id=task.id)

        if self.behaviour == "input":
            if task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED:
                await updater.complete(agent_text(f"weather in {text}: sunny"))
            else:
                await updater.requires_input(agent_text("Which city?"))
            return
        await updater.start_work()
        if self.behaviour == "hang":
            await asyncio.Event().wait()
        if self.behaviour == "big":
            chunk = "x" * BIG_CHUNK_BYTES
            for n in range(BIG_CHUNKS):
                await updater.add_artifact(
                    [new_text_part(chunk)],
                    artifact_id="big-answer",
                    name="answer",
                    append=n > 0,
                    last_chunk=n == BIG_CHUNKS - 1,
                )
            await updater.complete()
            return
        answer = f"sdk peer answers: {text}"
        if self.behaviour == "drop":
            await asyncio.sleep(DROP_SETTLES_SECONDS)
            answer = f"after the drop: {text}"
        await updater.add_artifact([new_text_part(answer)], name="answer")
        await updater.complete()

    async def cancel(self, context, event_queue):
        say({"canceled": context.task_id})
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        await updater.cancel()


class Cut(Exception):
    """Raised inside a response to end its connection without ending its body."""


def guarded(app, behaviour):
    """The SDK's app behind what the behaviour adds on the wire: the token check, and
    the first stream cut after its first working event."""
    state = {"cut": False}

    async def guard(scope, receive, send):
        if scope["type"] != "http":
            return await app(scope, receive, send)
        if behaviour == "token" and scope["path"] == "/":
            headers = dict(scope["headers"])
            if headers.get(b"authorization") != f"Bearer {TOKEN}".encode():
                refusal = JSONResponse(
                    {"error": "unauthorized", "message": "this peer wants its bearer token"},
                    status_code=401,
                    headers={"www-authenticate": "Bearer"},
                )
                return await refusal(scope, receive, send)
        if behaviour != "drop" or state["cut"] or scope["method"] != "POST":
            return await app(scope, receive, send)

        async def cutting(message):
            await send(message)
            body = message.get("body", b"")
            if message["type"] == "http.response.body" and b"TASK_STATE_WORKING" in body:
                state["cut"] = True
                # uvicorn closes a connection whose app fails mid-body, leaving the
                # chunked body unended: the caller sees its stream break.
                raise Cut()

        return await app(scope, receive, cutting)

    return guard


def card(port):
    url = f"http://127.0.0.1:{port}/"
    return AgentCard(
        name="sdk-peer",
        description="A remote A2A agent served by the Python SDK, for mur's tests",
        version="1.0.0",
        supported_interfaces=[
            AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version="1.0")
        ],
        capabilities=AgentCapabilities(streaming=True),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[
            AgentSkill(id="answer", name="answer", description="Answers", tags=["test"])
        ],
    )


def main():
    behaviour = sys.argv[1] if len(sys.argv) > 1 else ""
    if behaviour not in BEHAVIOURS:
        sys.exit(f"usage: peer_server.py {{{'|'.join(BEHAVIOURS)}}}")
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    # Listening before the port is printed: a caller that connects at once waits in
    # the backlog for uvicorn instead of being refused.
    listener.listen(128)
    port = listener.getsockname()[1]
    agent_card = card(port)
    handler = DefaultRequestHandler(
        agent_executor=Peer(behaviour),
        task_store=InMemoryTaskStore(),
        agent_card=agent_card,
    )
    routes = create_agent_card_routes(agent_card) + create_jsonrpc_routes(handler, "/")
    app = guarded(Starlette(routes=routes), behaviour)
    config = uvicorn.Config(app, log_level="warning", lifespan="off")
    say({"port": port})
    uvicorn.Server(config).run(sockets=[listener])


if __name__ == "__main__":
    main()
