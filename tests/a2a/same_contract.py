"""Compares the A2A contract Chorus compiles (a FileDescriptorProto, base64
on standard input) with the official SDK's: every message's fields (name,
number, type, label, oneof), every enum value and every method must be the
same, or an A2A client and Chorus would not understand each other. Prints
the differences as JSON (an empty list when there is none)."""

import base64
import json
import sys

from google.protobuf import descriptor_pb2

from a2a.types import a2a_pb2


def shape(fd):
    out = {}

    def walk(message, prefix):
        for nested in message.nested_type:
            walk(nested, prefix + message.name + ".")
        out[prefix + message.name] = sorted(
            [
                f.name,
                f.number,
                f.type,
                f.type_name,
                f.label,
                f.proto3_optional,
                f.oneof_index if f.HasField("oneof_index") else -1,
            ]
            for f in message.field
        )

    for message in fd.message_type:
        walk(message, "")
    for enum in fd.enum_type:
        out["enum " + enum.name] = sorted([v.name, v.number] for v in enum.value)
    for service in fd.service:
        for method in service.method:
            out["rpc " + method.name] = [
                method.input_type,
                method.output_type,
                method.client_streaming,
                method.server_streaming,
            ]
    return out


theirs = descriptor_pb2.FileDescriptorProto()
a2a_pb2.DESCRIPTOR.CopyToProto(theirs)
ours = descriptor_pb2.FileDescriptorProto()
ours.ParseFromString(base64.b64decode(sys.stdin.read()))
a, b = shape(theirs), shape(ours)
differences = [
    {"what": k, "sdk": a.get(k), "chorus": b.get(k)}
    for k in sorted(set(a) | set(b))
    if a.get(k) != b.get(k)
]
print(json.dumps({"package": ours.package, "sdk_package": theirs.package, "differences": differences}))
