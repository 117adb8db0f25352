"""Opens server-reflection streams with grpcio (as the A2A SDK's gRPC
transport uses it), the way a Python client
does, until the server refuses one; prints what the client saw of the
refusal as JSON: {"code": <grpc.StatusCode name>, "details": <message>}.

Input (stdin, JSON): {"addr": "127.0.0.1:PORT", "hold": N} - N streams are
opened and held (each has had its first answer) before one more is opened.
"""

import json
import sys
import threading

import grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc


def held_requests(release):
    yield reflection_pb2.ServerReflectionRequest(list_services="")
    release.wait()


def main():
    plan = json.load(sys.stdin)
    channel = grpc.insecure_channel(plan["addr"])
    stub = reflection_pb2_grpc.ServerReflectionStub(channel)
    release = threading.Event()
    held = []
    try:
        for _ in range(plan["hold"]):
            answers = stub.ServerReflectionInfo(held_requests(release), timeout=60)
            next(answers)
            held.append(answers)
        extra = stub.ServerReflectionInfo(held_requests(release), timeout=60)
        try:
            next(extra)
            seen = {"code": "OK", "details": "the stream was answered"}
        except grpc.RpcError as refused:
            seen = {"code": refused.code().name, "details": refused.details()}
    finally:
        release.set()
        for answers in held:
            answers.cancel()
        channel.close()
    print(json.dumps(seen))


main()
