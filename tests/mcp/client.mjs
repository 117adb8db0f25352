// An MCP client made with the official TypeScript SDK (@modelcontextprotocol/sdk),
// driven by the Rust tests: it connects as the plan in CHORUS_TEST_MCP_PLAN says, runs its
// steps, and prints what it got as one JSON object on stdout.
//
// plan: {
//   "transport": {"stdio": {"command", "args", "env"}} | {"http": {"url", "headers"}},
//   "steps": [{"list": true} | {"call": NAME, "arguments": {...}, "progress": bool,
//              "abort_when_exists": PATH, "timeout_ms": N (default 120000),
//              "progress_file": PATH (each progress message appended as a line)}]
// }
// output: {"results": [ {"tools": [...]} | {"result": CallToolResult, "progress": [...]}
//                       | {"error": {"code", "message"}} ]}
//         or {"connect_error": "..."} when the session could not begin.
import { appendFileSync, existsSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

const modules = process.env.CHORUS_TEST_NODE_MODULES;
const sdk = (path) => import(pathToFileURL(join(modules, '@modelcontextprotocol/sdk/dist/esm', path)).href);
const { Client } = await sdk('client/index.js');
const plan = JSON.parse(process.env.CHORUS_TEST_MCP_PLAN);

let transport;
if (plan.transport.stdio) {
  const { StdioClientTransport } = await sdk('client/stdio.js');
  const { command, args, env } = plan.transport.stdio;
  transport = new StdioClientTransport({ command, args, env, stderr: 'inherit' });
} else {
  const { StreamableHTTPClientTransport } = await sdk('client/streamableHttp.js');
  const { url, headers } = plan.transport.http;
  transport = new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers } });
}

// What the client sent is delivered before it closes: a cancellation the SDK
// sends without waiting (an aborted call) reaches the server as it would
// from a client that goes on running.
const sending = new Set();
const send = transport.send.bind(transport);
transport.send = (message, options) => {
  const sent = send(message, options);
  sending.add(sent);
  sent.finally(() => sending.delete(sent)).catch(() => {});
  return sent;
};

const client = new Client({ name: 'chorus-tests', version: '1.0.0' });
try {
  await client.connect(transport);
} catch (e) {
  console.log(JSON.stringify({ connect_error: String(e && e.message || e) }));
  process.exit(0);
}

const results = [];
for (const step of plan.steps) {
  try {
    if (step.list) {
      const { tools } = await client.listTools();
      results.push({ tools });
    } else {
      const progress = [];
      const timeout = step.timeout_ms ?? 120000;
      const heard = (p) => {
        progress.push(p.message ?? '');
        if (step.progress_file) appendFileSync(step.progress_file, `${p.message ?? ''}\n`);
      };
      const options = step.progress
        ? { onprogress: heard, resetTimeoutOnProgress: true, timeout }
        : { timeout };
      // abort_when_exists: the client cancels the call once that file exists.
      let watch;
      if (step.abort_when_exists) {
        const controller = new AbortController();
        options.signal = controller.signal;
        watch = setInterval(() => {
          if (existsSync(step.abort_when_exists)) controller.abort('cancelled by the test');
        }, 10);
      }
      try {
        const result = await client.callTool({ name: step.call, arguments: step.arguments ?? {} }, undefined, options);
        results.push({ result, progress });
      } finally {
        clearInterval(watch);
      }
    }
  } catch (e) {
    results.push({ error: { code: e.code ?? null, message: String(e.message ?? e) } });
  }
}
console.log(JSON.stringify({ results }));
await Promise.allSettled([...sending]);
// A client done with an HTTP session ends it (DELETE), as the spec asks.
if (plan.transport.http) await transport.terminateSession().catch(() => {});
await client.close();
