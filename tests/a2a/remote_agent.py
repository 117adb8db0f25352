"""A remote A2A agent made with the official SDK's server side
(DefaultRequestHandler behind its gRPC handler), for the test of the `a2a`
provider: `remote_agent.py <mode> <key>`. Listens on 127.0.0.1 (gRPC on one
port, its agent card over HTTP on another), prints "ready <card base URL>",
and logs each request it takes to stderr.

Modes: "work" streams two working updates, an artifact and completes,
echoing the prompt; "ask" asks for input, and completes with the reply on
the same task; "hang" works and never ends.
Calls without "Authorization: Bearer <key>" are refused."""

import asyncio
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import grpc
from google.protobuf.json_format import MessageToDict

from a2a.server.agent_execution import AgentExecutor
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.request_handlers.grpc_handler import GrpcHandler
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.helpers.proto_helpers import new_task
from a2a.types import a2a_pb2 as pb
from a2a.types import a2a_pb2_grpc

MODE, KEY = sys.argv[1], sys.argv[2]


def text(t):
    return pb.Part(text=t)


class Remote(AgentExecutor):
    async def execute(self, context, event_queue):
        prompt = context.get_user_input()
        print(f"remote got: {prompt!r}", file=sys.stderr, flush=True)
        if context.current_task is None:
            await event_queue.enqueue_event(new_task(context.task_id, context.context_id, pb.TASK_STATE_SUBMITTED))
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        await updater.start_work(updater.new_agent_message([text("remote: reading the prompt")]))
        if MODE == "ask" and context.current_task is None:
            await updater.requires_input(updater.new_agent_message([text("remote: which language?")]))
            return
        if MODE == "ask":
            # The reply to the question, on the same task.
            await updater.add_artifact([text(f"REMOTE RESULT in: {prompt}")], name="answer")
            await updater.complete(updater.new_agent_message([text("remote: done")]))
            return
        if MODE == "hang":
            await updater.update_status(pb.TASK_STATE_WORKING, updater.new_agent_message([text("remote: thinking for ever")]))
            await asyncio.Event().wait()
        await updater.update_status(pb.TASK_STATE_WORKING, updater.new_agent_message([text("remote: halfway")]))
        await updater.add_artifact([text(f"REMOTE RESULT for: {prompt}")], name="answer")
        await updater.complete(updater.new_agent_message([text("remote: done")]))

    async def cancel(self, context, event_queue):
        print("remote canceled", file=sys.stderr, flush=True)
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        await updater.cancel()


class Keyed(grpc.aio.ServerInterceptor):
    async def intercept_service(self, continuation, details):
        if dict(details.invocation_metadata).get("authorization") != f"Bearer {KEY}":
            async def deny(request, context):
                await context.abort(grpc.StatusCode.UNAUTHENTICATED, "a key is needed")
            handler = await continuation(details)
            if handler and handler.unary_stream:
                async def deny_stream(request, context):
                    await context.abort(grpc.StatusCode.UNAUTHENTICATED, "a key is needed")
                    yield
                return grpc.unary_stream_rpc_method_handler(deny_stream)
            return grpc.unary_unary_rpc_method_handler(deny)
        return await continuation(details)


def card(grpc_port):
    return pb.AgentCard(
        name="remote translator",
        description="A remote agent for the test",
        version="1.0.0",
        supported_interfaces=[pb.AgentInterface(url=f"127.0.0.1:{grpc_port}", protocol_binding="GRPC", protocol_version="1.0")],
        capabilities=pb.AgentCapabilities(streaming=True),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[pb.AgentSkill(id="translate", name="translate", description="translates", tags=["text"])],
        security_schemes={"key": pb.SecurityScheme(http_auth_security_scheme=pb.HTTPAuthSecurityScheme(scheme="bearer"))},
        security_requirements=[pb.SecurityRequirement(schemes={"key": pb.StringList()})],
    )


async def main():
    server = grpc.aio.server(interceptors=[Keyed()])
    grpc_port = server.add_insecure_port("127.0.0.1:0")
    agent_card = card(grpc_port)
    handler = DefaultRequestHandler(agent_executor=Remote(), task_store=InMemoryTaskStore(), agent_card=agent_card)
    a2a_pb2_grpc.add_A2AServiceServicer_to_server(GrpcHandler(handler), server)
    await server.start()
    body = json.dumps(MessageToDict(agent_card)).encode()

    class Card(BaseHTTPRequestHandler):
        def do_GET(self):
            if self.path != "/.well-known/agent-card.json":
                self.send_response(404)
                self.end_headers()
                return
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    http = ThreadingHTTPServer(("127.0.0.1", 0), Card)
    threading.Thread(target=http.serve_forever, daemon=True).start()
    print(f"ready http://127.0.0.1:{http.server_address[1]}", flush=True)
    await server.wait_for_termination()


asyncio.run(main())
