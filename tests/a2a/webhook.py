"""A webhook for the A2A push-notification test, run in a test network
namespace: `webhook.py <ip> <port> <log>`. Logs each request as a JSON line
(its headers, its body as sent and as JSON, what it answered; the test checks
the signatures) and answers 503 to the first request (to be retried), 204 to
the others. Says "ready" once it listens."""

import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ip, port, log = sys.argv[1], int(sys.argv[2]), sys.argv[3]
seen = 0


class Hook(BaseHTTPRequestHandler):
    def do_POST(self):
        global seen
        seen += 1
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        status = 503 if seen == 1 else 204
        entry = {
            "path": self.path,
            "headers": {k.lower(): v for k, v in self.headers.items()},
            "raw": body.decode(),
            "body": json.loads(body or b"null"),
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
