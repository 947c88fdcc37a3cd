"""A small OpenAI-compatible HTTP server for tests: scripted answers, recorded requests,
failures on purpose (HTTP 503 first, a status, a body that is not JSON, no choices)."""

from __future__ import annotations

import json
import threading
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
                answer = {"choices": [choice], "usage": {"completion_tokens": 7}}
                if owner.empty_choices:
                    answer["choices"] = []
                data = b"<html>oops</html>" if owner.malformed else json.dumps(answer).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
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
