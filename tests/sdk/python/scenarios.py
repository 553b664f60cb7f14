#!/usr/bin/env python3
"""Issue 15's A2A scenarios, driven by the official Python SDK (a2a-sdk 1.3.0) as a
client of a capsule's address. `tests/all/a2a_sdk.rs` runs one scenario per process:

    python scenarios.py <scenario> <address>        # the address ends with '/'

with the capsule's token in A2A_TOKEN when its address wants one. The script prints one
JSON line of what the SDK saw, every event re-serialized with the SDK's own ProtoJSON
(`MessageToDict`), so the Rust test asserts on exactly what a user of the SDK gets and
its failure message shows it. A failure prints the same line with an "error" key (and
what was seen so far) and exits 1.

The capsule answers from a script (the scripted driver), so the texts sent here do not
steer it: each Rust test writes the turns its scenario needs.
"""

import asyncio
import json
import os
import sys
import time
import traceback
import uuid

import httpx
from google.protobuf.json_format import MessageToDict

from a2a.client import (
    A2ACardResolver,
    AuthInterceptor,
    ClientCallContext,
    ClientConfig,
    ClientFactory,
    CredentialService,
)
from a2a.types.a2a_pb2 import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    SubscribeToTaskRequest,
    TaskState,
)
from a2a.utils.errors import A2AError

# Every scenario ends well within this; a hang fails with what was seen so far.
DEADLINE_SECONDS = float(os.environ.get("A2A_SCENARIO_DEADLINE", "25"))
# The longest any one HTTP read may wait: above the door's heartbeats and the slowest
# blocking SendMessage a scenario makes (httpx's default, 5 s, is below neither).
HTTP_TIMEOUT_SECONDS = 20.0


def view(message):
    """A protobuf message as ProtoJSON, the shape on the wire."""
    return MessageToDict(message)


def user_message(text, context_id=None, task_id=None):
    message = Message(message_id=str(uuid.uuid4()), role=Role.ROLE_USER, parts=[Part(text=text)])
    if context_id:
        message.context_id = context_id
    if task_id:
        message.task_id = task_id
    return SendMessageRequest(message=message)


def event_state(event):
    """The task state an event reports, or None (an artifact update, a message)."""
    if event.HasField("task"):
        return event.task.status.state
    if event.HasField("status_update"):
        return event.status_update.status.state
    return None


def event_task_id(event):
    if event.HasField("task"):
        return event.task.id
    if event.HasField("status_update"):
        return event.status_update.task_id
    if event.HasField("artifact_update"):
        return event.artifact_update.task_id
    return ""


def event_seq(event):
    """`metadata.murmur.seq` of an event (a task snapshot's is on the task)."""
    if event.HasField("task"):
        metadata = event.task.metadata
    elif event.HasField("status_update"):
        metadata = event.status_update.metadata
    elif event.HasField("artifact_update"):
        metadata = event.artifact_update.metadata
    else:
        return None
    murmur = MessageToDict(metadata).get("murmur", {})
    seq = murmur.get("seq")
    return None if seq is None else int(seq)


def error_view(error):
    """What a user sees of an SDK error: its class (mapped from the JSON-RPC code)."""
    return {"error": type(error).__name__, "message": str(error), "data": error.data}


async def error_of(call):
    """The SDK error a call raises, or `{"error": None, "result": ...}` if it succeeds."""
    try:
        result = await call
    except A2AError as error:
        return error_view(error)
    return {"error": None, "result": None if result is None else view(result)}


async def first_event(stream):
    """A stream's first event (None if it has none), the stream then closed."""
    try:
        async for event in stream:
            return event
        return None
    finally:
        await stream.aclose()


class Door:
    """One capsule address: its card, resolved once, and the SDK's clients for it."""

    def __init__(self, address):
        token = os.environ.get("A2A_TOKEN")
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.address = address
        self.http = httpx.AsyncClient(headers=headers, timeout=HTTP_TIMEOUT_SECONDS)
        self.card = None
        self.clients = []

    async def resolve(self):
        self.card = await A2ACardResolver(self.http, self.address).get_agent_card()
        return self.card

    def client(self, streaming):
        """A client from the card: streaming (SendStreamingMessage) or blocking
        (SendMessage, which returns the task once it ends)."""
        config = ClientConfig(streaming=streaming, httpx_client=self.http)
        client = ClientFactory(config).create(self.card)
        self.clients.append(client)
        return client

    async def close(self):
        for client in self.clients:
            await (client.aclose() if isinstance(client, httpx.AsyncClient) else client.close())
        await self.http.aclose()


async def collect(stream, seen):
    """Every event of a stream to its close, each also appended to `seen` as it comes
    (so a failure shows how far it got)."""
    events = []
    async for event in stream:
        events.append(event)
        seen.append(view(event))
    return events


async def poll_task(client, task_id, done, within=10.0):
    """GetTask until `done(task)` holds, for at most `within` seconds."""
    until = time.monotonic() + within
    while True:
        task = await client.get_task(GetTaskRequest(id=task_id))
        if done(task) or time.monotonic() > until:
            return task
        await asyncio.sleep(0.1)


# ------------------------------------------------------------------------------------
# The scenarios. Each fills `obs` (printed whatever happens) and returns nothing.


async def card(door, obs):
    resolved = await door.resolve()
    obs["card"] = view(resolved)
    # The card must be one the SDK can build a client from (its interface, binding and
    # protocol version chosen as the SDK chooses them).
    door.client(streaming=True)
    obs["client"] = "created"


async def send(door, obs):
    await door.resolve()
    client = door.client(streaming=False)
    obs["events"] = []
    await collect(client.send_message(user_message("say hello")), obs["events"])


async def stream_tool(door, obs):
    await door.resolve()
    client = door.client(streaming=True)
    obs["events"] = []
    await collect(client.send_message(user_message("run the tool")), obs["events"])


async def cancel(door, obs):
    await door.resolve()
    streaming = door.client(streaming=True)
    blocking = door.client(streaming=False)
    obs["events"] = []
    started = time.monotonic()
    task_id = None
    async for event in streaming.send_message(user_message("sleep a long time")):
        obs["events"].append(view(event))
        task_id = task_id or event_task_id(event)
        if "cancel" not in obs and event_state(event) == TaskState.TASK_STATE_WORKING:
            # Give the slow tool a moment to start, so the cancel stops it running.
            await asyncio.sleep(0.5)
            # A running task that is not waiting for input takes no follow-up.
            follow_up = user_message("hurry up", None, task_id)
            follow_up.configuration.return_immediately = True
            obs["followUp"] = await error_of(first_event(blocking.send_message(follow_up)))
            obs["cancel"] = view(await blocking.cancel_task(CancelTaskRequest(id=task_id)))
    obs["streamClosedAfter"] = time.monotonic() - started
    task = await poll_task(
        blocking, task_id, lambda t: t.status.state == TaskState.TASK_STATE_CANCELED
    )
    obs["task"] = view(task)
    obs["seconds"] = time.monotonic() - started
    # An ended task cannot be canceled again.
    obs["cancelAgain"] = await error_of(blocking.cancel_task(CancelTaskRequest(id=task_id)))


async def input_required(door, obs):
    await door.resolve()
    streaming = door.client(streaming=True)
    blocking = door.client(streaming=False)
    context_id = f"sdk-python-{uuid.uuid4().hex[:8]}"
    obs["contextId"] = context_id
    obs["asked"] = []
    asked = await collect(
        streaming.send_message(user_message("summarise a file", context_id)), obs["asked"]
    )
    waiting = [e for e in asked if event_state(e) == TaskState.TASK_STATE_INPUT_REQUIRED]
    if not waiting:
        raise AssertionError("the stream closed without TASK_STATE_INPUT_REQUIRED")
    task_id = event_task_id(waiting[-1])
    obs["waiting"] = view(await blocking.get_task(GetTaskRequest(id=task_id)))
    # The answer goes on the same task, in its context: streamed, as a chat client would.
    obs["answered"] = []
    await collect(
        streaming.send_message(user_message("README.md", context_id, task_id)), obs["answered"]
    )
    obs["task"] = view(await blocking.get_task(GetTaskRequest(id=task_id)))


async def tasks(door, obs):
    await door.resolve()
    client = door.client(streaming=False)
    suffix = uuid.uuid4().hex[:8]
    context_a, context_b = f"sdk-a-{suffix}", f"sdk-b-{suffix}"
    obs["contexts"] = [context_a, context_b]
    sent = []
    for text, context_id in (("first", context_a), ("second", context_a), ("third", context_b)):
        async for event in client.send_message(user_message(text, context_id)):
            sent.append(event.task)
    obs["sent"] = [view(t) for t in sent]
    first = sent[0].id
    obs["full"] = view(await client.get_task(GetTaskRequest(id=first)))
    obs["last1"] = view(await client.get_task(GetTaskRequest(id=first, history_length=1)))
    obs["none"] = view(await client.get_task(GetTaskRequest(id=first, history_length=0)))
    obs["all"] = view(await client.list_tasks(ListTasksRequest()))
    obs["inA"] = view(await client.list_tasks(ListTasksRequest(context_id=context_a)))
    obs["completed"] = view(
        await client.list_tasks(ListTasksRequest(status=TaskState.TASK_STATE_COMPLETED))
    )
    page1 = await client.list_tasks(ListTasksRequest(page_size=2))
    obs["page1"] = view(page1)
    obs["page2"] = view(
        await client.list_tasks(ListTasksRequest(page_size=2, page_token=page1.next_page_token))
    )
    missing = GetTaskRequest(id="tsk_00000000000000000000000000000000")
    obs["missing"] = await error_of(client.get_task(missing))
    obs["cancelMissing"] = await error_of(client.cancel_task(CancelTaskRequest(id=missing.id)))
    streaming = door.client(streaming=True)
    obs["subscribeMissing"] = await error_of(
        first_event(streaming.subscribe(SubscribeToTaskRequest(id=missing.id)))
    )
    obs["sendToUnknown"] = await error_of(
        first_event(client.send_message(user_message("hello?", None, missing.id)))
    )
    # An ended task takes no more messages.
    obs["sendToEnded"] = await error_of(
        first_event(client.send_message(user_message("more", context_a, first)))
    )


async def resubscribe(door, obs):
    await door.resolve()
    client = door.client(streaming=True)
    obs["first"] = []
    stream = client.send_message(user_message("a long task"))
    async for event in stream:
        obs["first"].append(view(event))
        # Drop the connection mid-task, after the first tool's artifact.
        if event.HasField("artifact_update"):
            break
    await stream.aclose()
    task_id = event_task_id(event)
    seq = event_seq(event)
    obs["lastEventId"] = seq
    # Long enough to miss the next tool's events while away.
    await asyncio.sleep(1.0)
    context = ClientCallContext(service_parameters={"Last-Event-ID": str(seq)})
    obs["second"] = []
    await collect(client.subscribe(SubscribeToTaskRequest(id=task_id), context=context), obs["second"])
    # The task has ended: a subscription without a cursor is refused.
    obs["afterEnd"] = await error_of(first_event(client.subscribe(SubscribeToTaskRequest(id=task_id))))


async def poll(door, obs):
    await door.resolve()
    # `polling`: SendMessage returns at once (returnImmediately) and the caller polls.
    config = ClientConfig(streaming=False, polling=True, httpx_client=door.http)
    client = ClientFactory(config).create(door.card)
    door.clients.append(client)
    started = time.monotonic()
    returned = [e.task async for e in client.send_message(user_message("take your time"))]
    obs["returned"] = view(returned[0])
    obs["returnedAfter"] = time.monotonic() - started
    task = await poll_task(
        client, returned[0].id, lambda t: t.status.state == TaskState.TASK_STATE_COMPLETED
    )
    obs["task"] = view(task)


async def subscribe(door, obs):
    await door.resolve()
    client = door.client(streaming=True)
    obs["sent"] = []
    obs["subscribed"] = []
    sent = client.send_message(user_message("a task to watch"))
    async for event in sent:
        obs["sent"].append(view(event))
        if event.HasField("artifact_update"):
            break
    task_id = event_task_id(event)
    # A second client joins mid-task, without a cursor, while the first reads on.
    watcher = client.subscribe(SubscribeToTaskRequest(id=task_id))
    await asyncio.gather(collect(sent, obs["sent"]), collect(watcher, obs["subscribed"]))


async def late(door, obs):
    await door.resolve()
    client = door.client(streaming=True)
    # Run to its end with a blocking send: only the resumptions below are streams.
    blocking = door.client(streaming=False)
    ended = [e async for e in blocking.send_message(user_message("a long reply"))][0]
    obs["task"] = view(ended.task)
    task_id = event_task_id(ended)
    last = event_seq(ended)

    def after(seq):
        return ClientCallContext(service_parameters={"Last-Event-ID": str(seq)})

    # Resuming from far back, after the task ended: those events are gone.
    gone = await error_of(first_event(client.subscribe(SubscribeToTaskRequest(id=task_id), context=after(1))))
    obs["gone"] = gone
    # The SDK hands over the error's google.rpc.ErrorInfo metadata as its data.
    first = int((gone.get("data") or {}).get("firstAvailableSequence", last))
    obs["fromFirstKept"] = [
        event_seq(e)
        for e in await collect(client.subscribe(SubscribeToTaskRequest(id=task_id), context=after(first - 1)), [])
    ]
    obs["tail"] = [
        view(e) for e in await collect(client.subscribe(SubscribeToTaskRequest(id=task_id), context=after(last - 2)), [])
    ]


async def queue(door, obs):
    await door.resolve()
    streaming = door.client(streaming=True)
    blocking = door.client(streaming=False)
    config = ClientConfig(streaming=False, polling=True, httpx_client=door.http)
    polling = ClientFactory(config).create(door.card)
    door.clients.append(polling)

    async def send_now(text):
        """A send that returns at once: the task as the door took it, or the error."""
        try:
            return [view(e) async for e in polling.send_message(user_message(text))][0]
        except A2AError as error:
            return error_view(error)

    obs["a"] = []
    running = streaming.send_message(user_message("task A"))
    async for event in running:
        obs["a"].append(view(event))
        if event_state(event) == TaskState.TASK_STATE_WORKING:
            break
    # A runs; B waits in the queue (one place); C finds it full.
    obs["b"] = await send_now("task B")
    obs["c"] = await send_now("task C")
    b = obs["b"]["task"]["id"]
    obs["cancelB"] = view(await blocking.cancel_task(CancelTaskRequest(id=b)))
    await collect(running, obs["a"])
    obs["getB"] = view(await blocking.get_task(GetTaskRequest(id=b)))
    # D fails: the model's turn is an error.
    obs["d"] = [view(e) async for e in blocking.send_message(user_message("task D"))][0]
    obs["list"] = view(await blocking.list_tasks(ListTasksRequest()))


async def blocking_input(door, obs):
    await door.resolve()
    client = door.client(streaming=False)

    async def send(text, task_id=None):
        return [view(e.task) async for e in client.send_message(user_message(text, None, task_id))][0]

    # A blocking send returns when the task stops to ask, not only when it ends.
    obs["first"] = await send("ask me something")
    first = obs["first"]["id"]
    obs["cancelFirst"] = view(await client.cancel_task(CancelTaskRequest(id=first)))
    obs["getFirst"] = view(await client.get_task(GetTaskRequest(id=first)))
    obs["second"] = await send("ask me again")
    obs["answered"] = await send("42", obs["second"]["id"])


class Token(CredentialService):
    """The capsule's token, for the security scheme the card names `bearer`."""

    async def get_credentials(self, security_scheme_name, context):
        return os.environ.get("A2A_TOKEN") if security_scheme_name == "bearer" else None


async def auth(door, obs):
    # A client that knows only the address and holds a token: no header of its own.
    http = httpx.AsyncClient(timeout=HTTP_TIMEOUT_SECONDS)
    door.clients.append(http)
    card = await A2ACardResolver(http, door.address).get_agent_card()
    obs["card"] = view(card)
    plain = ClientFactory(ClientConfig(streaming=False, httpx_client=http)).create(card)
    obs["without"] = await error_of(first_event(plain.send_message(user_message("hello?"))))
    # The SDK's AuthInterceptor puts the token where the card's scheme says.
    config = ClientConfig(streaming=True, httpx_client=http)
    client = ClientFactory(config).create(card, interceptors=[AuthInterceptor(Token())])
    obs["events"] = []
    await collect(client.send_message(user_message("say hello")), obs["events"])


SCENARIOS = {
    "auth": auth,
    "blocking_input": blocking_input,
    "queue": queue,
    "late": late,
    "poll": poll,
    "subscribe": subscribe,
    "card": card,
    "send": send,
    "stream_tool": stream_tool,
    "cancel": cancel,
    "input": input_required,
    "tasks": tasks,
    "resubscribe": resubscribe,
}


async def run(scenario, address, obs):
    door = Door(address)
    try:
        await asyncio.wait_for(SCENARIOS[scenario](door, obs), DEADLINE_SECONDS)
    finally:
        await door.close()


def main():
    scenario, address = sys.argv[1], sys.argv[2]
    obs = {"sdk": "python", "scenario": scenario}
    status = 0
    try:
        asyncio.run(run(scenario, address, obs))
    except BaseException as error:  # noqa: BLE001 - every failure is reported the same way
        obs["error"] = f"{type(error).__name__}: {error}"
        obs["traceback"] = traceback.format_exc()
        status = 1
    print(json.dumps(obs), flush=True)
    sys.exit(status)


if __name__ == "__main__":
    main()
