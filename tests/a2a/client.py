"""The A2A tests' client: the official Python SDK (a2a-sdk[grpc]) driving a
Chorus orchestrator, as any A2A caller would, over the binding the plan
names: "default" (the SDK's default client factory and configuration, which
choose JSON-RPC from the card), "JSONRPC", "HTTP+JSON" or "GRPC" (the
factory told which binding the client supports).

Reads a plan (JSON) on its standard input:
  {"card_url": "http://console/a2a/<workspace>/", "binding": "GRPC",
   "keys": {"operator": "...", ...}, "ops": [{"op": "...", ...}, ...]}
runs its operations in order and prints one JSON document: a result per
operation. An operation that fails records {"error": {"type", "code", "message"}}
instead of stopping the plan. "$task" in an operation stands for the last task
id seen, "$sequence" for the last Chorus sequence seen.
"""

import asyncio
import json
import os
import sys

import grpc
import httpx
from google.protobuf.json_format import MessageToDict
from google.protobuf.struct_pb2 import Struct

from a2a.client import ClientConfig, ClientFactory
from a2a.client.auth.credentials import CredentialService
from a2a.client.auth.interceptor import AuthInterceptor
from a2a.client.card_resolver import A2ACardResolver
from a2a.client.client import ClientCallContext
from a2a.types import a2a_pb2 as pb


class Headers:
    """Keeps the calls made, to read the headers an answer carried. gRPC
    takes an interceptor for one kind of call each: `interceptors` are the
    unary and the server-streaming one, keeping calls in one list."""

    def __init__(self):
        self.calls = []
        calls = self.calls

        class Unary(grpc.aio.UnaryUnaryClientInterceptor):
            async def intercept_unary_unary(self, continuation, details, request):
                call = await continuation(details, request)
                calls.append(call)
                return call

        class Streaming(grpc.aio.UnaryStreamClientInterceptor):
            async def intercept_unary_stream(self, continuation, details, request):
                call = await continuation(details, request)
                calls.append(call)
                return call

        self.interceptors = [Unary(), Streaming()]

        # The answers of the HTTP bindings, for their headers.
        self.http_answers = []

        async def keep(response):
            self.http_answers.append(response)

        self.http_hooks = {"response": [keep]}

    async def last(self, name):
        """The header `name` of the last call's answer, or None."""
        if self.http_answers:
            return self.http_answers[-1].headers.get(name)
        if not self.calls:
            return None
        metadata = await self.calls[-1].initial_metadata()
        return dict(metadata or ()).get(name)


class Key(CredentialService):
    """Gives one API key for every scheme the card asks for."""

    def __init__(self, key):
        self.key = key

    async def get_credentials(self, scheme, context):
        return self.key


def to_dict(message):
    return MessageToDict(message, preserving_proto_field_name=False)


def error_of(e):
    """What failed: the SDK's error type, the gRPC code or the HTTP status
    the binding refused with (none for an A2A error in a JSON-RPC answer),
    and the message."""
    cause = e.__cause__
    code = None
    if isinstance(cause, grpc.aio.AioRpcError):
        code = cause.code().name
    elif isinstance(cause, httpx.HTTPStatusError):
        code = str(cause.response.status_code)
    return {"type": type(e).__name__, "code": code, "message": str(e)}


class Runner:
    def __init__(self, plan):
        self.plan = plan
        self.http = httpx.AsyncClient(timeout=30)
        self.card = None
        self.clients = {}
        self.task = None
        self.context = None
        self.sequence = None
        self.headers = Headers()

    def sub(self, value):
        if value == "$task":
            return self.task
        if value == "$sequence":
            return str(self.sequence)
        if value == "$context":
            return self.context
        return value

    async def public_card(self):
        resolver = A2ACardResolver(self.http, self.plan["card_url"])
        return await resolver.get_agent_card()

    async def client(self, key_name, streaming=True):
        if (key_name, streaming) not in self.clients:
            binding = self.plan.get("binding", "GRPC")
            key = self.plan["keys"].get(key_name)
            interceptors = [AuthInterceptor(Key(key))] if key else []
            if binding == "GRPC":
                if self.card is None:
                    self.card = await self.public_card()
                config = ClientConfig(
                    streaming=streaming,
                    supported_protocol_bindings=["GRPC"],
                    grpc_channel_factory=lambda url: grpc.aio.insecure_channel(url, interceptors=self.headers.interceptors),
                )
                client = ClientFactory(config).create(self.card, interceptors)
            else:
                # The factory resolves the card from the base URL itself.
                config = ClientConfig(
                    streaming=streaming,
                    httpx_client=httpx.AsyncClient(timeout=60, event_hooks=self.headers.http_hooks),
                )
                if binding != "default":
                    config.supported_protocol_bindings = [binding]
                client = await ClientFactory(config).create_from_url(self.plan["card_url"], interceptors)
            self.clients[(key_name, streaming)] = client
        return self.clients[(key_name, streaming)]

    def seen(self, response):
        """Notes the task and the Chorus sequence a stream response carries."""
        d = to_dict(response)
        for kind in ("task", "statusUpdate", "artifactUpdate"):
            if kind in d:
                body = d[kind]
                self.task = body.get("id") or body.get("taskId") or self.task
                self.context = body.get("contextId") or self.context
                chorus = body.get("metadata", {}).get("chorus", {})
                seq = chorus.get("sequence") or chorus.get("lastSequence")
                if kind == "task":
                    history = body.get("history", [])
                    if history:
                        seq = history[-1]["metadata"]["chorus"]["sequence"]
                    elif "after" in chorus:
                        seq = chorus["after"]
                if seq is not None:
                    self.sequence = int(seq)
        return d

    async def run(self, op):
        kind = op["op"]
        key = op.get("key", "operator")
        if kind == "card":
            headers = {}
            if op.get("auth"):
                headers["Authorization"] = f"Bearer {self.plan['keys'][key]}"
            resolver = A2ACardResolver(self.http, self.plan["card_url"])
            card = await resolver.get_agent_card(http_kwargs={"headers": headers})
            return {"card": to_dict(card)}
        if kind == "extended_card":
            client = await self.client(key)
            card = await client.get_extended_agent_card(pb.GetExtendedAgentCardRequest())
            return {"card": to_dict(card)}
        if kind == "send":
            # "blocking": SendMessage, answered once the task ends or needs the client.
            client = await self.client(key, streaming=not op.get("blocking"))
            message = pb.Message(message_id=op.get("message_id", os.urandom(8).hex()), role=pb.ROLE_USER)
            for text in op.get("texts", [op.get("text")] if op.get("text") is not None else []):
                message.parts.add(text=text)
            if "data" in op:
                part = message.parts.add()
                part.data.struct_value.update(op["data"])
            if "raw" in op:
                message.parts.add(raw=op["raw"].encode())
            if op.get("task_id"):
                message.task_id = self.sub(op["task_id"])
            if op.get("context_id"):
                message.context_id = self.sub(op["context_id"])
            if op.get("skill"):
                message.metadata.update({"skill": op["skill"]})
            request = pb.SendMessageRequest(message=message)
            if op.get("push"):
                push = op["push"]
                config = request.configuration.task_push_notification_config
                config.url = push["url"]
                config.token = push.get("token", "")
                if push.get("scheme"):
                    config.authentication.scheme = push["scheme"]
                    config.authentication.credentials = push.get("credentials", "")
            events = []
            stop_after = op.get("stop_after")
            # A deadline of the client's own (seconds), sent as grpc-timeout.
            context = ClientCallContext(timeout=op["timeout"]) if op.get("timeout") else None
            canceler = None
            if op.get("cancel_when_file"):
                # Cancels once the agent's command shows it runs, while the
                # stream is read: the command sends no event while it runs.
                async def cancel_when_started():
                    while not os.path.exists(op["cancel_when_file"]) or self.task is None:
                        await asyncio.sleep(0.01)
                    canceled = await client.cancel_task(pb.CancelTaskRequest(id=self.task))
                    return to_dict(canceled)
                canceler = asyncio.create_task(cancel_when_started())
            async for response in client.send_message(request, context=context):
                events.append(self.seen(response))
                if stop_after and len(events) >= stop_after:
                    break
            result = {
                "events": events,
                "task": self.task,
                "sequence": self.sequence,
                # Which of the SDK's transports the factory chose (under the
                # decorator that adds an interface's tenant).
                "transport": type(getattr(client._transport, "_base", client._transport)).__name__,
            }
            if op.get("push"):
                result["push_secret"] = await self.headers.last("chorus-push-secret")
            if canceler:
                result["canceled"] = await canceler
            return result
        if kind == "subscribe":
            client = await self.client(key)
            context = None
            if op.get("after"):
                context = ClientCallContext(service_parameters={"chorus-after-sequence": self.sub(op["after"])})
            events = []
            async for response in client.subscribe(pb.SubscribeToTaskRequest(id=self.sub(op["task_id"])), context=context):
                events.append(self.seen(response))
            return {"events": events}
        if kind == "get":
            client = await self.client(key)
            request = pb.GetTaskRequest(id=self.sub(op["task_id"]))
            if "history_length" in op:
                request.history_length = op["history_length"]
            return {"task": to_dict(await client.get_task(request))}
        if kind == "list":
            client = await self.client(key)
            request = pb.ListTasksRequest(**{k: v for k, v in op.get("request", {}).items()})
            if "context_id" in request.DESCRIPTOR.fields_by_name and op.get("context_id"):
                request.context_id = self.sub(op["context_id"])
            return {"list": to_dict(await client.list_tasks(request))}
        if kind == "push_create":
            client = await self.client(key)
            config = pb.TaskPushNotificationConfig(task_id=self.sub(op["task_id"]), url=op["url"])
            if op.get("token"):
                config.token = op["token"]
            created = to_dict(await client.create_task_push_notification_config(config))
            return {"config": created, "push_secret": await self.headers.last("chorus-push-secret")}
        if kind == "push_list":
            client = await self.client(key)
            request = pb.ListTaskPushNotificationConfigsRequest(task_id=self.sub(op["task_id"]))
            return {"list": to_dict(await client.list_task_push_notification_configs(request))}
        if kind == "cancel":
            client = await self.client(key)
            return {"task": to_dict(await client.cancel_task(pb.CancelTaskRequest(id=self.sub(op["task_id"]))))}
        raise ValueError(f"unknown op {kind}")


async def main():
    plan = json.loads(sys.stdin.read())
    runner = Runner(plan)
    results = []
    for op in plan["ops"]:
        try:
            results.append(await runner.run(op))
        except Exception as e:  # the test reads what failed and how
            results.append({"error": error_of(e)})
    print(json.dumps(results))


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
