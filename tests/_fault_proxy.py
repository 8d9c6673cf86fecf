"""A FAULT INJECTOR for tests: a tiny HTTP proxy in front of a real OpenAI-compatible server.

It is not a model server: every request it does not fail is forwarded as is to the real server behind it
(`transformers serve`, tests/_serving.py) and its answer returned as is. It fails the chat requests it is
told to, chosen by the `seed` field of the request body (kit.rollout.loop seeds every turn, so one seed
picks one turn of one episode) or by a text the body contains (`fail_text`: tau2's user simulator sends
its task's instructions in every request, so one text picks one episode), with:
  - "500":     HTTP 500 and an error text (the SDK retries it, then the kit's EndpointError);
  - "garbage": HTTP 200 with a body that is not JSON.
`hits` counts the failed requests (each retry is one).
"""

from __future__ import annotations

import contextlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx



class FaultProxy:
    def __init__(self, upstream: str, fail_seeds: set[int], mode: str = "500", fail_text: str | None = None):
        assert mode in ("500", "garbage")
        self.upstream = upstream.rstrip("/")  # the real server's URL with /v1
        self.fail_seeds, self.mode, self.fail_text = set(fail_seeds), mode, fail_text
        self.hits = 0
        self.forwarded = 0
        self._lock = threading.Lock()

    def _should_fail(self, path: str, body: bytes) -> bool:
        if not path.endswith("/chat/completions"):
            return False
        if self.fail_text is not None:
            return self.fail_text.encode() in body
        try:
            return json.loads(body).get("seed") in self.fail_seeds
        except ValueError:
            return False

    def handler(self):
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet
                pass

            def _reply(self, code: int, body: bytes, ctype: str) -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _forward(self, method: str) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                path = self.path[len("/v1"):] if self.path.startswith("/v1") else self.path
                if method == "POST" and proxy._should_fail(path, body):
                    with proxy._lock:
                        proxy.hits += 1
                    if proxy.mode == "500":
                        return self._reply(500, b'{"error": "injected fault: internal server error"}',
                                           "application/json")
                    return self._reply(200, b"<html>injected fault: not JSON", "application/json")
                with proxy._lock:
                    proxy.forwarded += 1
                r = httpx.request(method, proxy.upstream + path, content=body or None, timeout=600,
                                  headers={"Content-Type": self.headers.get("Content-Type", "application/json")})
                self._reply(r.status_code, r.content, r.headers.get("content-type", "application/json"))

            def do_GET(self):
                self._forward("GET")

            def do_POST(self):
                self._forward("POST")

        return Handler


@contextlib.contextmanager
def fault_proxy(upstream: str, fail_seeds: set[int], mode: str = "500", fail_text: str | None = None):
    """A FaultProxy on a free loopback port; yields (proxy, its /v1 URL)."""
    proxy = FaultProxy(upstream, fail_seeds, mode, fail_text)
    server = ThreadingHTTPServer(("127.0.0.1", 0), proxy.handler())
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield proxy, f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()
