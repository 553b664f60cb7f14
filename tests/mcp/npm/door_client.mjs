// A client of a capsule's MCP door written as a user of the official TypeScript SDK
// (@modelcontextprotocol/sdk 1.32.2, the SDK Claude Code and most MCP clients are built
// on) writes one. `tests/all/mcp_door/js.rs` runs it, through
// `common::mcp_servers::door_client`:
//
//     node door_client.mjs <door url> <task>
//
// with the capsule's token in MCP_TOKEN when its door wants one (sent as
// `Authorization: Bearer …` through the transport's `requestInit.headers`). It connects
// with `Client` over `StreamableHTTPClientTransport`, lists the tools, calls the one
// tool with `{task}` and an `onprogress` callback, ends its session, and prints ONE
// JSON line of what it saw:
//
//     {"tools": [names], "answer": text, "isError": bool, "progress": [{progress, total, message}], ...}
//
// (with `tool`, the first tool as listed; `content`, the result's content types;
// `protocol`, `session`, `server`, `terminated` and `transportErrors`),
//
// or, on a failure, `{"error": message, "code": HTTP status or JSON-RPC code, ...}` with
// what it saw so far, and exits 1. It stops itself at 25 s, reporting that as its error.
//
// The harness runs this file through the link `target/mcp/npm/scripts`, so that the
// SDK resolves from the `node_modules` beside it, as in a user's project.

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

const DEADLINE_MS = 25_000;

async function main(seen) {
  const [url, task] = process.argv.slice(2);
  const headers = {};
  if (process.env.MCP_TOKEN) headers.Authorization = `Bearer ${process.env.MCP_TOKEN}`;
  const transport = new StreamableHTTPClientTransport(new URL(url), {
    requestInit: { headers },
  });
  // Errors the transport reports beside the calls (a refused GET stream, a stream cut
  // short): not a failure by themselves, but worth seeing when something is wrong.
  const client = new Client({ name: 'mur-door-test', version: '1.0.0' });
  client.onerror = (error) => seen.transportErrors.push(String(error?.message ?? error));
  await client.connect(transport);
  seen.protocol = transport.protocolVersion ?? null;
  seen.session = transport.sessionId !== undefined;
  seen.server = client.getServerVersion() ?? null;

  const listed = await client.listTools();
  seen.tools = listed.tools.map((t) => t.name);
  seen.tool = listed.tools[0] ?? null;

  const result = await client.callTool(
    { name: listed.tools[0].name, arguments: { task } },
    undefined,
    {
      onprogress: ({ progress, total, message }) => {
        seen.progress.push({ progress, total: total ?? null, message: message ?? null });
      },
    },
  );
  seen.isError = result.isError ?? false;
  seen.content = result.content.map((c) => c.type);
  seen.answer = result.content
    .filter((c) => c.type === 'text')
    .map((c) => c.text)
    .join('');

  // A user's client ends its session when done: DELETE with its id.
  await transport.terminateSession();
  seen.terminated = transport.sessionId === undefined;
  await client.close();
}

const seen = { tools: [], progress: [], transportErrors: [] };
const report = (status) => {
  process.stdout.write(`${JSON.stringify(seen)}\n`, () => process.exit(status));
};
const deadline = setTimeout(() => {
  seen.error = `deadline: the client did not end within ${DEADLINE_MS} ms`;
  report(1);
}, DEADLINE_MS);
main(seen).then(
  () => {
    clearTimeout(deadline);
    report(0);
  },
  (error) => {
    clearTimeout(deadline);
    seen.error = `${error?.name}: ${error?.message}`;
    seen.code = error?.code ?? null;
    seen.stack = String(error?.stack);
    report(1);
  },
);
