// The A2A tests' JavaScript client: the official JS SDK (@a2a-js/sdk) driving
// a Chorus orchestrator with its *default* client factory — the transports it
// has by default, the card resolved from the base URL — over the binding the
// plan names: "default" (the factory picks, from the card: JSON-RPC) or
// "HTTP+JSON" (the factory's preferred transport). The same plan format as
// client.py:
//   {"card_url": ".../a2a/<workspace>/", "binding": "default",
//    "keys": {"operator": "...", ...}, "ops": [{"op": "...", ...}, ...]}
// Prints one JSON document: a result per operation, messages in A2A's JSON
// (as client.py prints them); a failed one is {"error": {"type", "message"}}.

import { existsSync } from "node:fs";
import { createRequire } from "node:module";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";

// The SDK from the node_modules .ci/run installs it in (CHORUS_TEST_NODE_MODULES).
const require = createRequire(join(process.env.CHORUS_TEST_NODE_MODULES, "noop.js"));
const {
  CancelTaskRequest,
  GetTaskRequest,
  ListTaskPushNotificationConfigsRequest,
  ListTaskPushNotificationConfigsResponse,
  ListTasksRequest,
  ListTasksResponse,
  SendMessageRequest,
  StreamResponse,
  SubscribeToTaskRequest,
  Task,
  TaskPushNotificationConfig,
} = require("@a2a-js/sdk");
const { ClientFactory, ClientFactoryOptions } = require("@a2a-js/sdk/client");

const plan = JSON.parse(await new Response(process.stdin).text());

const clients = new Map();
let task = null;
let context = null;
let sequence = null;

async function client() {
  if (!clients.has("client")) {
    const options =
      plan.binding === "default"
        ? ClientFactoryOptions.default
        : ClientFactoryOptions.createFrom(ClientFactoryOptions.default, {
            preferredTransports: [plan.binding],
          });
    clients.set("client", await new ClientFactory(options).createFromUrl(plan.card_url));
  }
  return clients.get("client");
}

/** Call options carrying the key of `name` and `more` service parameters. */
function as(name, more = {}) {
  const key = plan.keys[name];
  const serviceParameters = { ...more };
  if (key) serviceParameters.authorization = `Bearer ${key}`;
  return { serviceParameters };
}

function sub(value) {
  if (value === "$task") return task;
  if (value === "$context") return context;
  if (value === "$sequence") return String(sequence);
  return value;
}

/** Notes the task and the Chorus sequence a stream response carries. */
function seen(json) {
  for (const kind of ["task", "statusUpdate", "artifactUpdate"]) {
    const body = json[kind];
    if (!body) continue;
    task = body.id ?? body.taskId ?? task;
    context = body.contextId ?? context;
    const chorus = body.metadata?.chorus ?? {};
    let seq = chorus.sequence ?? chorus.lastSequence;
    if (kind === "task") {
      const history = body.history ?? [];
      if (history.length) seq = history[history.length - 1].metadata.chorus.sequence;
      else if ("after" in chorus) seq = chorus.after;
    }
    if (seq !== undefined) sequence = Number(seq);
  }
  return json;
}

function message(op) {
  const parts = (op.texts ?? (op.text !== undefined ? [op.text] : [])).map((text) => ({ text }));
  const json = {
    message: {
      messageId: op.message_id ?? crypto.randomUUID(),
      role: "ROLE_USER",
      parts,
    },
  };
  if (op.task_id) json.message.taskId = sub(op.task_id);
  if (op.context_id) json.message.contextId = sub(op.context_id);
  if (op.skill) json.message.metadata = { skill: op.skill };
  return SendMessageRequest.fromJSON(json);
}

async function run(op) {
  const key = op.key ?? "operator";
  const c = await client();
  switch (op.op) {
    case "send": {
      if (op.blocking) {
        const answer = await c.sendMessage(message(op), as(key));
        const json = seen({ task: Task.toJSON(answer) });
        return { events: [json], task, sequence };
      }
      const events = [];
      let canceled = null;
      let canceler = null;
      if (op.cancel_when_file) {
        canceler = (async () => {
          while (!existsSync(op.cancel_when_file) || task === null) await sleep(10);
          canceled = Task.toJSON(await c.cancelTask(CancelTaskRequest.fromJSON({ id: task }), as(key)));
        })();
      }
      for await (const response of c.sendMessageStream(message(op), as(key))) {
        events.push(seen(StreamResponse.toJSON(response)));
        if (op.stop_after && events.length >= op.stop_after) break;
      }
      if (canceler) await canceler;
      // Which of the SDK's transports the factory chose.
      const result = { events, task, sequence, transport: c.transport.constructor.name };
      if (canceled) result.canceled = canceled;
      return result;
    }
    case "subscribe": {
      const more = op.after ? { "chorus-after-sequence": sub(op.after) } : {};
      const events = [];
      const request = SubscribeToTaskRequest.fromJSON({ id: sub(op.task_id) });
      for await (const response of c.resubscribeTask(request, as(key, more))) {
        events.push(seen(StreamResponse.toJSON(response)));
      }
      return { events };
    }
    case "get": {
      const json = { id: sub(op.task_id) };
      if ("history_length" in op) json.historyLength = op.history_length;
      return { task: Task.toJSON(await c.getTask(GetTaskRequest.fromJSON(json), as(key))) };
    }
    case "list": {
      const json = { ...(op.request ?? {}) };
      if (op.context_id) json.contextId = sub(op.context_id);
      const list = await c.listTasks(ListTasksRequest.fromJSON(json), as(key));
      return { list: ListTasksResponse.toJSON(list) };
    }
    case "cancel": {
      const request = CancelTaskRequest.fromJSON({ id: sub(op.task_id) });
      return { task: Task.toJSON(await c.cancelTask(request, as(key))) };
    }
    case "push_create": {
      const config = TaskPushNotificationConfig.fromJSON({ taskId: sub(op.task_id), url: op.url });
      const created = await c.createTaskPushNotificationConfig(config, as(key));
      return { config: TaskPushNotificationConfig.toJSON(created) };
    }
    case "push_list": {
      const request = ListTaskPushNotificationConfigsRequest.fromJSON({ taskId: sub(op.task_id) });
      const list = await c.listTaskPushNotificationConfig(request, as(key));
      return { list: ListTaskPushNotificationConfigsResponse.toJSON(list) };
    }
    default:
      throw new Error(`unknown op ${op.op}`);
  }
}

const results = [];
for (const op of plan.ops) {
  try {
    results.push(await run(op));
  } catch (e) {
    // The test reads what failed and how.
    results.push({ error: { type: e?.constructor?.name ?? "Error", message: String(e?.message ?? e) } });
  }
}
process.stdout.write(JSON.stringify(results) + "\n");
