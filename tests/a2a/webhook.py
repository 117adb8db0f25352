"""A webhook for the A2A push-notification test, run in a test network
namespace: `webhook.py <ip> <port> <log> <token>`. Logs each request as a
JSON line (its headers, its body, whether its signature verifies with
<token>, what it answered) and answers 503 to the first request (to be
retried), 204 to the others. Says "ready" once it listens."""

import hashlib
import hmac
import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ip, port, log, token = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
seen = 0


def verifies(header, body):
    fields = dict(f.split("=", 1) for f in header.split(",") if "=" in f)
    mac = hmac.new(token.encode(), f"{fields.get('t', '')}.".encode() + body, hashlib.sha256)
    return hmac.compare_digest(mac.hexdigest(), fields.get("v1", ""))


class Hook(BaseHTTPRequestHandler):
    def do_POST(self):
        global seen
        seen += 1
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        status = 503 if seen == 1 else 204
        entry = {
            "path": self.path,
            "headers": {k.lower(): v for k, v in self.headers.items()},
            "body": json.loads(body or b"null"),
            "signed": verifies(self.headers.get("x-chorus-signature", ""), body),
            "answered": status,
        }
        with open(log, "a") as f:
            f.write(json.dumps(entry) + "\n")
        self.send_response(status)
        self.end_headers()

    def log_message(self, *args):
        pass


server = ThreadingHTTPServer((ip, port), Hook)
print("ready", flush=True)
server.serve_forever()
