"""A small OpenAI-compatible HTTP server for tests: scripted answers, recorded requests,
failures on purpose (HTTP 503 first, a status, a body that is not JSON, no choices) and
hostile servers (a redirect, a trickle, a huge reply, a cut body, wrong types, a key
echoed back, HTTP 500 after a number of good answers)."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class FakeEndpoint:
    """An OpenAI-style server: answers from a script, records requests, can fail on purpose."""

    def __init__(self, answer=None) -> None:
        # answer(prompt) -> reply text; default: a reply naming the prompt's length.
        self.answer = answer or (lambda prompt: f" reply to {len(prompt)} chars ")
        self.malformed = False  # answer 200 with a body that is not JSON
        self.empty_choices = False  # answer 200 with "choices": []
        self.requests: list[dict] = []
        self.headers: list[dict] = []
        self.fail_first = 0  # answer HTTP 503 to this many requests first
        self.status = 200
        self.model = "judge-7b"  # listed by GET /v1/models
        self.usage_tokens = 0  # completion tokens to report (0: min(7, max_tokens))
        self.redirect_to = None  # answer 302 to this URL
        self.trickle = 0.0  # seconds between the bytes of a reply
        self.huge = 0  # answer with a body of this many bytes
        self.cut = False  # announce a body, send half of it, close the connection
        self.wrong_text = None  # put this (not a string) in choices[0].text
        self.echo_auth = False  # answer 400 with the request's Authorization header
        self.fail_after = None  # answer HTTP 500 to every request after this many
        self.lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep the test output clean
                pass

            def do_GET(self):
                # GET /v1/models: the served model, as vLLM and llama.cpp list it
                if not self.path.rstrip("/").endswith("/models"):
                    self.send_response(404)
                    self.end_headers()
                    return
                with owner.lock:
                    owner.headers.append(dict(self.headers))
                data = json.dumps({"object": "list", "data": [{"id": owner.model}]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with owner.lock:
                    owner.requests.append({"path": self.path, **body})
                    owner.headers.append(dict(self.headers))
                    failing = owner.fail_first > 0
                    owner.fail_first -= failing
                    late = owner.fail_after is not None and len(owner.requests) > owner.fail_after
                if late:
                    self.send_response(500)
                    self.end_headers()
                    return
                if owner.redirect_to:
                    self.send_response(302)
                    self.send_header("Location", owner.redirect_to)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if owner.echo_auth:
                    data = json.dumps({"error": f"bad key {self.headers.get('Authorization')}"})
                    self.send_response(400)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data.encode())
                    return
                if owner.huge:
                    self.send_response(200)
                    self.send_header("Content-Length", str(owner.huge))
                    self.end_headers()
                    chunk = b" " * 65536
                    for _ in range(owner.huge // len(chunk)):
                        try:
                            self.wfile.write(chunk)
                        except OSError:  # the client stopped reading: as it should
                            return
                    return
                if failing or owner.status != 200:
                    self.send_response(503 if failing else owner.status)
                    self.end_headers()
                    self.wfile.write(b'{"error": "busy"}')
                    return
                prompt = body.get("prompt") or body["messages"][-1]["content"]
                text = owner.answer(prompt)
                if self.path.endswith("/chat/completions"):
                    choice = {
                        "message": {"role": "assistant", "content": text},
                        "finish_reason": "stop",
                    }
                else:
                    choice = {"text": text, "finish_reason": "length"}
                tokens = owner.usage_tokens or min(7, int(body.get("max_tokens") or 7))
                answer = {"choices": [choice], "usage": {"completion_tokens": tokens}}
                if owner.empty_choices:
                    answer["choices"] = []
                if owner.wrong_text is not None:
                    choice["text"] = owner.wrong_text
                data = b"<html>oops</html>" if owner.malformed else json.dumps(answer).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data) * (2 if owner.cut else 1)))
                self.end_headers()
                if owner.cut:
                    self.wfile.write(data[: len(data) // 2])
                    self.wfile.flush()
                    self.close_connection = True
                    return
                if owner.trickle:
                    for i in range(len(data)):
                        try:
                            self.wfile.write(data[i : i + 1])
                            self.wfile.flush()
                        except OSError:
                            return
                        time.sleep(owner.trickle)
                    return
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def spec(self, **opts) -> str:
        query = "&".join(f"{k}={v}" for k, v in {"model": "judge-7b", **opts}.items())
        return f"openai:http://127.0.0.1:{self.port}/v1?{query}"

    def __enter__(self) -> FakeEndpoint:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
