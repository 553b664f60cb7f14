// Issue 15's A2A scenarios, driven by the official JS SDK (@a2a-js/sdk 1.3.0) as a
// client of a capsule's address. `tests/all/a2a_sdk.rs` runs one scenario per process:
//
//     node scenarios.mjs <scenario> <address>        # the address ends with '/'
//
// with the capsule's token in A2A_TOKEN when its address wants one. The script prints
// one JSON line of what the SDK saw, every event re-serialized with the SDK's own
// ProtoJSON (`StreamResponse.toJSON`, ...), so the Rust test asserts on exactly what a
// user of the SDK gets and its failure message shows it. A failure prints the same line
// with an "error" key (and what was seen so far) and exits 1.
//
// The harness runs this file through a link inside its scratch npm folder, so that
// `@a2a-js/sdk` resolves there as it would in a user's project.
//
// The capsule answers from a script (the scripted driver), so the texts sent here do
// not steer it: each Rust test writes the turns its scenario needs.

import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';

import {
  AgentCard,
  GetTaskRequest,
  ListTasksRequest,
  ListTasksResponse,
  Message,
  SendMessageRequest,
  StreamResponse,
  Task,
  TaskState,
} from '@a2a-js/sdk';
import {
  ClientFactory,
  ClientFactoryOptions,
  DefaultAgentCardResolver,
  JsonRpcTransportFactory,
  createAuthenticatingFetchWithRetry,
} from '@a2a-js/sdk/client';

// Every scenario ends well within this; a hang fails with what was seen so far.
const DEADLINE_MS = Number(process.env.A2A_SCENARIO_DEADLINE ?? '25') * 1000;

const view = (event) => StreamResponse.toJSON(event);

// A sendMessage result: a Task or a Message, told apart as the SDK itself does.
const resultView = (result) =>
  'messageId' in result ? { message: Message.toJSON(result) } : { task: Task.toJSON(result) };

function userMessage(text, contextId, taskId) {
  const message = { messageId: randomUUID(), role: 'ROLE_USER', parts: [{ text }] };
  if (contextId) message.contextId = contextId;
  if (taskId) message.taskId = taskId;
  // From ProtoJSON, so every field the SDK's serializer reads has its default.
  return SendMessageRequest.fromJSON({ message });
}

function eventState(event) {
  const { $case, value } = event.payload ?? {};
  if ($case === 'task' || $case === 'statusUpdate') return value.status?.state;
  return undefined;
}

function eventTaskId(event) {
  const { $case, value } = event.payload ?? {};
  if ($case === 'task') return value.id;
  if ($case === 'statusUpdate' || $case === 'artifactUpdate') return value.taskId;
  return '';
}

function eventSeq(event) {
  return event.payload?.value?.metadata?.murmur?.seq;
}

// What a user sees of an SDK error: its class (mapped from the JSON-RPC code) and the
// code. An error inside an event stream arrives wrapped, the A2A error as its cause.
function errorView(error) {
  const a2a = error?.envelopeCode !== undefined ? error : (error?.cause ?? error);
  return {
    error: a2a?.name,
    code: a2a?.envelopeCode,
    message: String(error?.message),
    data: a2a?.data,
  };
}

// The SDK error a call rejects with, or `{ error: null }` if it succeeds.
async function errorOf(call) {
  try {
    await call;
    return { error: null };
  } catch (error) {
    return errorView(error);
  }
}

// A stream's first event (undefined if it has none), the stream then closed.
async function firstEvent(stream) {
  for await (const event of stream) return event;
  return undefined;
}

// The SDK's own way to send a token: an authentication handler around fetch.
function fetchWithToken() {
  const token = process.env.A2A_TOKEN;
  if (!token) return fetch;
  return createAuthenticatingFetchWithRetry(fetch, {
    headers: async () => ({ Authorization: `Bearer ${token}` }),
    shouldRetryWithHeaders: async () => undefined,
  });
}

// One capsule address: a card resolver and a client factory that share the fetch.
class Door {
  constructor(address) {
    const fetchImpl = fetchWithToken();
    this.address = address;
    this.resolver = new DefaultAgentCardResolver({ fetchImpl });
    this.factory = new ClientFactory(
      ClientFactoryOptions.createFrom(ClientFactoryOptions.default, {
        transports: [new JsonRpcTransportFactory({ fetchImpl })],
        cardResolver: this.resolver,
      }),
    );
  }

  // A client from the card at the address, as `createFromUrl` makes one.
  client() {
    return this.factory.createFromUrl(this.address);
  }
}

// Every event of a stream to its close, each also pushed to `seen` as it comes (so a
// failure shows how far it got).
async function collect(stream, seen) {
  const events = [];
  for await (const event of stream) {
    events.push(event);
    seen.push(view(event));
  }
  return events;
}

// GetTask until `done(task)` holds, for at most `withinMs`.
async function pollTask(client, id, done, withinMs = 10_000) {
  const until = Date.now() + withinMs;
  for (;;) {
    const task = await client.getTask(GetTaskRequest.fromJSON({ id }));
    if (done(task) || Date.now() > until) return task;
    await sleep(100);
  }
}

// -----------------------------------------------------------------------------------
// The scenarios. Each fills `obs` (printed whatever happens).

// The resolver hands back ProtoJSON as fetched unless it had to parse the card (a card
// with security schemes), then the SDK's objects: shown as ProtoJSON either way.
function cardView(card) {
  const parsed = Object.values(card.securitySchemes ?? {}).some((s) => s?.scheme?.$case);
  return parsed ? AgentCard.toJSON(card) : card;
}

// A client factory whose transport fetches with `fetchImpl`.
function factoryWith(fetchImpl) {
  return new ClientFactory(
    ClientFactoryOptions.createFrom(ClientFactoryOptions.default, {
      transports: [new JsonRpcTransportFactory({ fetchImpl })],
    }),
  );
}

async function card(door, obs) {
  const resolved = await door.resolver.resolve(door.address);
  obs.card = cardView(resolved);
  // The card must be one the SDK can build a client from.
  await door.factory.createFromAgentCard(resolved);
  obs.client = 'created';
}

async function send(door, obs) {
  const client = await door.client();
  obs.events = [resultView(await client.sendMessage(userMessage('say hello')))];
}

async function streamTool(door, obs) {
  const client = await door.client();
  obs.events = [];
  await collect(client.sendMessageStream(userMessage('run the tool')), obs.events);
}

async function cancel(door, obs) {
  const client = await door.client();
  obs.events = [];
  const started = Date.now();
  let taskId;
  for await (const event of client.sendMessageStream(userMessage('sleep a long time'))) {
    obs.events.push(view(event));
    taskId ||= eventTaskId(event);
    if (obs.cancel === undefined && eventState(event) === TaskState.TASK_STATE_WORKING) {
      // Give the slow tool a moment to start, so the cancel stops it running.
      await sleep(500);
      // A running task that is not waiting for input takes no follow-up.
      const followUp = userMessage('hurry up', undefined, taskId);
      followUp.configuration = { acceptedOutputModes: [], returnImmediately: true };
      obs.followUp = await errorOf(client.sendMessage(followUp));
      obs.cancel = Task.toJSON(await client.cancelTask({ tenant: '', id: taskId }));
    }
  }
  obs.streamClosedAfter = (Date.now() - started) / 1000;
  const task = await pollTask(
    client,
    taskId,
    (t) => t.status?.state === TaskState.TASK_STATE_CANCELED,
  );
  obs.task = Task.toJSON(task);
  obs.seconds = (Date.now() - started) / 1000;
  // An ended task cannot be canceled again.
  obs.cancelAgain = await errorOf(client.cancelTask({ tenant: '', id: taskId }));
}

async function inputRequired(door, obs) {
  const client = await door.client();
  const contextId = `sdk-js-${randomUUID().slice(0, 8)}`;
  obs.contextId = contextId;
  obs.asked = [];
  const asked = await collect(
    client.sendMessageStream(userMessage('summarise a file', contextId)),
    obs.asked,
  );
  const waiting = asked.filter((e) => eventState(e) === TaskState.TASK_STATE_INPUT_REQUIRED);
  if (waiting.length === 0) throw new Error('the stream closed without TASK_STATE_INPUT_REQUIRED');
  const taskId = eventTaskId(waiting.at(-1));
  obs.waiting = Task.toJSON(await client.getTask(GetTaskRequest.fromJSON({ id: taskId })));
  // The answer goes on the same task, in its context: a blocking SendMessage, which
  // returns the task once it has ended.
  obs.answered = [resultView(await client.sendMessage(userMessage('README.md', contextId, taskId)))];
  obs.task = Task.toJSON(await client.getTask(GetTaskRequest.fromJSON({ id: taskId })));
}

async function tasks(door, obs) {
  const client = await door.client();
  const suffix = randomUUID().slice(0, 8);
  const [contextA, contextB] = [`sdk-a-${suffix}`, `sdk-b-${suffix}`];
  obs.contexts = [contextA, contextB];
  const sent = [];
  for (const [text, contextId] of [['first', contextA], ['second', contextA], ['third', contextB]]) {
    sent.push(await client.sendMessage(userMessage(text, contextId)));
  }
  obs.sent = sent.map((t) => Task.toJSON(t));
  const first = sent[0].id;
  const get = async (json) => Task.toJSON(await client.getTask(GetTaskRequest.fromJSON(json)));
  const list = async (json) =>
    ListTasksResponse.toJSON(await client.listTasks(ListTasksRequest.fromJSON(json)));
  obs.full = await get({ id: first });
  obs.last1 = await get({ id: first, historyLength: 1 });
  obs.none = await get({ id: first, historyLength: 0 });
  obs.all = await list({});
  obs.inA = await list({ contextId: contextA });
  obs.completed = await list({ status: 'TASK_STATE_COMPLETED' });
  const page1 = await client.listTasks(ListTasksRequest.fromJSON({ pageSize: 2 }));
  obs.page1 = ListTasksResponse.toJSON(page1);
  obs.page2 = await list({ pageSize: 2, pageToken: page1.nextPageToken });
  const missing = GetTaskRequest.fromJSON({ id: 'tsk_00000000000000000000000000000000' });
  obs.missing = await errorOf(client.getTask(missing));
  obs.cancelMissing = await errorOf(client.cancelTask({ tenant: '', id: missing.id }));
  obs.subscribeMissing = await errorOf(firstEvent(client.resubscribeTask({ tenant: '', id: missing.id })));
  obs.sendToUnknown = await errorOf(client.sendMessage(userMessage('hello?', undefined, missing.id)));
  // An ended task takes no more messages.
  obs.sendToEnded = await errorOf(client.sendMessage(userMessage('more', contextA, first)));
}

async function resubscribe(door, obs) {
  const client = await door.client();
  obs.first = [];
  const dropped = new AbortController();
  let taskId;
  let seq;
  for await (const event of client.sendMessageStream(userMessage('a long task'), {
    signal: dropped.signal,
  })) {
    obs.first.push(view(event));
    taskId ||= eventTaskId(event);
    // Drop the connection mid-task, after the first tool's artifact.
    if (event.payload?.$case === 'artifactUpdate') {
      seq = eventSeq(event);
      break;
    }
  }
  dropped.abort();
  obs.lastEventId = seq;
  // Long enough to miss the next tool's events while away.
  await sleep(1000);
  obs.second = [];
  await collect(
    client.resubscribeTask(
      { tenant: '', id: taskId },
      { serviceParameters: { 'Last-Event-ID': String(seq) } },
    ),
    obs.second,
  );
  // The task has ended: a subscription without a cursor is refused.
  obs.afterEnd = await errorOf(firstEvent(client.resubscribeTask({ tenant: '', id: taskId })));
}

async function poll(door, obs) {
  // `polling`: sendMessage returns at once (returnImmediately) and the caller polls.
  const factory = new ClientFactory(
    ClientFactoryOptions.createFrom(door.factory.options, { clientConfig: { polling: true } }),
  );
  const client = await factory.createFromUrl(door.address);
  const started = Date.now();
  const returned = await client.sendMessage(userMessage('take your time'));
  obs.returned = resultView(returned).task ?? resultView(returned);
  obs.returnedAfter = (Date.now() - started) / 1000;
  const task = await pollTask(
    client,
    returned.id,
    (t) => t.status?.state === TaskState.TASK_STATE_COMPLETED,
  );
  obs.task = Task.toJSON(task);
}

async function subscribe(door, obs) {
  const client = await door.client();
  obs.sent = [];
  obs.subscribed = [];
  const sent = client.sendMessageStream(userMessage('a task to watch'));
  let taskId;
  for (;;) {
    const { value: event, done } = await sent.next();
    if (done) throw new Error('the stream ended before an artifact');
    obs.sent.push(view(event));
    taskId ||= eventTaskId(event);
    if (event.payload?.$case === 'artifactUpdate') break;
  }
  // A second client joins mid-task, without a cursor, while the first reads on.
  const watcher = client.resubscribeTask({ tenant: '', id: taskId });
  await Promise.all([collect(sent, obs.sent), collect(watcher, obs.subscribed)]);
}

async function late(door, obs) {
  const client = await door.client();
  // Run to its end with a blocking send: only the resumptions below are streams.
  const ended = await client.sendMessage(userMessage('a long reply'));
  obs.task = Task.toJSON(ended);
  const taskId = ended.id;
  const last = ended.metadata?.murmur?.seq;
  const after = (seq) => ({ serviceParameters: { 'Last-Event-ID': String(seq) } });
  const subscribe = (seq) => client.resubscribeTask({ tenant: '', id: taskId }, after(seq));

  // Resuming from far back, after the task ended: those events are gone.
  const gone = await errorOf(firstEvent(subscribe(1)));
  obs.gone = gone;
  // The SDK hands over the JSON-RPC error's data as sent: a google.rpc.ErrorInfo.
  const info = (Array.isArray(gone.data) ? gone.data : []).find((d) => d?.metadata);
  const first = Number(info?.metadata?.firstAvailableSequence ?? last);
  obs.fromFirstKept = (await collect(subscribe(first - 1), [])).map(eventSeq);
  obs.tail = (await collect(subscribe(last - 2), [])).map(view);
}

async function queue(door, obs) {
  const client = await door.client();
  const polling = await new ClientFactory(
    ClientFactoryOptions.createFrom(door.factory.options, { clientConfig: { polling: true } }),
  ).createFromUrl(door.address);
  // A send that returns at once: the task as the door took it, or the error.
  const sendNow = async (text) => {
    try {
      return resultView(await polling.sendMessage(userMessage(text)));
    } catch (error) {
      return errorView(error);
    }
  };

  obs.a = [];
  const running = client.sendMessageStream(userMessage('task A'));
  for (;;) {
    const { value: event, done } = await running.next();
    if (done) throw new Error('task A ended before it worked');
    obs.a.push(view(event));
    if (eventState(event) === TaskState.TASK_STATE_WORKING) break;
  }
  // A runs; B waits in the queue (one place); C finds it full.
  obs.b = await sendNow('task B');
  obs.c = await sendNow('task C');
  const b = obs.b.task.id;
  obs.cancelB = Task.toJSON(await client.cancelTask({ tenant: '', id: b }));
  await collect(running, obs.a);
  obs.getB = Task.toJSON(await client.getTask(GetTaskRequest.fromJSON({ id: b })));
  // D fails: the model's turn is an error.
  obs.d = resultView(await client.sendMessage(userMessage('task D')));
  obs.list = ListTasksResponse.toJSON(await client.listTasks(ListTasksRequest.fromJSON({})));
}

async function blockingInput(door, obs) {
  const client = await door.client();
  const send = async (text, taskId) =>
    resultView(await client.sendMessage(userMessage(text, undefined, taskId))).task;
  const get = async (id) => Task.toJSON(await client.getTask(GetTaskRequest.fromJSON({ id })));

  // A blocking send returns when the task stops to ask, not only when it ends.
  obs.first = await send('ask me something');
  const first = obs.first.id;
  obs.cancelFirst = Task.toJSON(await client.cancelTask({ tenant: '', id: first }));
  obs.getFirst = await get(first);
  obs.second = await send('ask me again');
  obs.answered = await send('42', obs.second.id);
}

async function auth(door, obs) {
  // A client that knows only the address and holds a token: no header of its own.
  const card = await new DefaultAgentCardResolver({ fetchImpl: fetch }).resolve(door.address);
  obs.card = cardView(card);
  const plain = await factoryWith(fetch).createFromAgentCard(card);
  obs.without = await errorOf(plain.sendMessage(userMessage('hello?')));
  // The SDK's authentication handler: asked by a 401 naming the Bearer scheme, it
  // retries with the token, and sends it from then on.
  let learned = {};
  const fetchImpl = createAuthenticatingFetchWithRetry(fetch, {
    headers: async () => learned,
    shouldRetryWithHeaders: async (_request, response) =>
      response.status === 401 && /^Bearer\b/i.test(response.headers.get('www-authenticate') ?? '')
        ? { Authorization: `Bearer ${process.env.A2A_TOKEN}` }
        : undefined,
    onSuccessfulRetry: async (headers) => {
      learned = headers;
      obs.retriedWithToken = true;
    },
  });
  const client = await factoryWith(fetchImpl).createFromAgentCard(card);
  obs.events = [];
  await collect(client.sendMessageStream(userMessage('say hello')), obs.events);
}

const SCENARIOS = {
  auth,
  blocking_input: blockingInput,
  queue,
  late,
  poll,
  subscribe,
  card,
  send,
  stream_tool: streamTool,
  cancel,
  input: inputRequired,
  tasks,
  resubscribe,
};

async function main() {
  const [scenario, address] = process.argv.slice(2);
  const obs = { sdk: 'js', scenario };
  const report = (status) => {
    process.stdout.write(`${JSON.stringify(obs)}\n`, () => process.exit(status));
  };
  const deadline = setTimeout(() => {
    obs.error = `deadline: the scenario did not end within ${DEADLINE_MS} ms`;
    report(1);
  }, DEADLINE_MS);
  try {
    await SCENARIOS[scenario](new Door(address), obs);
    clearTimeout(deadline);
    report(0);
  } catch (error) {
    clearTimeout(deadline);
    obs.error = `${error?.name}: ${error?.message}`;
    obs.errorDetail = errorView(error);
    obs.stack = String(error?.stack);
    report(1);
  }
}

main();
