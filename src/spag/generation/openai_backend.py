"""The ``openai`` backend: an OpenAI-compatible HTTP endpoint as a game player.

Used as the fixed opponent of evaluation games (the paper's games against
GPT-4), or any server speaking the OpenAI API (vLLM's ``vllm serve``, llama.cpp,
TGI). Standard library only (urllib): no client package to install.

An endpoint is named by a spec string::

    openai:http://host:8000/v1?model=NAME[&api=completions|chat][&timeout=60][&retries=3]
        [&workers=4][&key_env=OPENAI_API_KEY][&top_k=on|off]

``api=completions`` (default) posts the play prompt as it is to ``/completions``;
``api=chat`` sends it as one user message to ``/chat/completions``. The API key,
if the server needs one, is read from the environment variable ``key_env``
(default ``OPENAI_API_KEY``); it is never written to logs or episodes.
Sampled requests carry ``top_k`` (vLLM, llama.cpp and TGI servers take it);
``top_k=off`` leaves it out for servers that refuse unknown fields (OpenAI's).

A request that times out, fails to connect, or gets HTTP 429 / 5xx is retried
with exponential back-off; when every attempt failed, :class:`EndpointError`
names the endpoint and the last reason.
"""

from __future__ import annotations

import json
import logging
import os
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from spag.errors import SpagInputError
from spag.generation.base import Reply, prompt_seeds

log = logging.getLogger(__name__)

SPEC_PREFIX = "openai:"
APIS = ("completions", "chat")
RETRY_STATUS = {408, 409, 429, 500, 502, 503, 504}


class EndpointError(SpagInputError):
    """The endpoint did not answer, or answered with an error or an unreadable reply."""


@dataclass(frozen=True)
class EndpointSpec:
    """Where and how to reach an OpenAI-compatible endpoint."""

    base_url: str
    model: str
    api: str = "completions"
    timeout: float = 60.0
    retries: int = 3
    workers: int = 4
    key_env: str = "OPENAI_API_KEY"
    send_top_k: bool = True

    @property
    def url(self) -> str:
        return self.base_url.rstrip("/") + (
            "/chat/completions" if self.api == "chat" else "/completions"
        )


def is_endpoint_spec(value: str | None) -> bool:
    """True for an ``openai:http(s)://...`` opponent (as opposed to a model folder)."""
    return bool(value) and str(value).startswith(SPEC_PREFIX)


def parse_spec(spec: str) -> EndpointSpec:
    """Parse ``openai:http://host:port/v1?model=NAME&...`` (see the module doc)."""
    if not is_endpoint_spec(spec):
        raise SpagInputError(
            f"endpoint '{spec}': expected openai:http(s)://host:port/v1?model=NAME"
        )
    parsed = urllib.parse.urlsplit(spec[len(SPEC_PREFIX) :])
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise SpagInputError(f"endpoint '{spec}': the URL must start with http:// or https://")
    query = dict(urllib.parse.parse_qsl(parsed.query, keep_blank_values=True))
    known = {"model", "api", "timeout", "retries", "workers", "key_env", "top_k"}
    unknown = sorted(set(query) - known)
    if unknown:
        raise SpagInputError(
            f"endpoint '{spec}': unknown option(s) {', '.join(unknown)} (known: {', '.join(sorted(known))})"
        )
    if not query.get("model"):
        raise SpagInputError(f"endpoint '{spec}': missing ?model=NAME")
    api = query.get("api", "completions")
    if api not in APIS:
        raise SpagInputError(f"endpoint '{spec}': api={api} (choose from {', '.join(APIS)})")
    try:
        timeout = float(query.get("timeout", 60))
        retries = int(query.get("retries", 3))
        workers = int(query.get("workers", 4))
    except ValueError as exc:
        raise SpagInputError(f"endpoint '{spec}': bad number in the options: {exc}") from exc
    top_k = query.get("top_k", "on")
    if top_k not in ("on", "off"):
        raise SpagInputError(f"endpoint '{spec}': top_k={top_k} (choose on or off)")
    if timeout <= 0 or retries < 0 or workers < 1:
        raise SpagInputError(f"endpoint '{spec}': timeout > 0, retries >= 0, workers >= 1 needed")
    base = urllib.parse.urlunsplit((parsed.scheme, parsed.netloc, parsed.path, "", ""))
    return EndpointSpec(
        base_url=base,
        model=query["model"],
        api=api,
        timeout=timeout,
        retries=retries,
        workers=workers,
        key_env=query.get("key_env", "OPENAI_API_KEY"),
        send_top_k=top_k == "on",
    )


class OpenAIBackend:
    """Replies from an OpenAI-compatible endpoint, one request per prompt, a few at a time."""

    name = "openai"

    def __init__(
        self,
        spec: EndpointSpec | str,
        *,
        backoff: float = 1.0,
    ) -> None:
        self.spec = parse_spec(spec) if isinstance(spec, str) else spec
        self.backoff = float(backoff)
        self._key = os.environ.get(self.spec.key_env) or None

    def __repr__(self) -> str:  # no key in reprs or logs
        return f"OpenAIBackend({self.spec.url}, model={self.spec.model}, api={self.spec.api})"

    # -------------------------------------------------------------- requests
    def _payload(
        self,
        prompt: str,
        max_new_tokens: int,
        temperature: float,
        top_p: float,
        seed: int,
        top_k: int,
    ) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.spec.model,
            "max_tokens": int(max_new_tokens),
            "temperature": float(temperature),
            "top_p": float(top_p),
            "seed": int(seed),
            "n": 1,
        }
        if top_k > 0 and temperature > 0 and self.spec.send_top_k:
            body["top_k"] = int(top_k)
        if self.spec.api == "chat":
            body["messages"] = [{"role": "user", "content": prompt}]
        else:
            body["prompt"] = prompt
        return body

    def _post(self, body: Mapping[str, Any]) -> dict[str, Any]:
        data = json.dumps(body).encode("utf-8")
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self._key:
            headers["Authorization"] = f"Bearer {self._key}"
        last = "no attempt"
        attempts = self.spec.retries + 1
        for attempt in range(1, attempts + 1):
            request = urllib.request.Request(
                self.spec.url, data=data, headers=headers, method="POST"
            )
            try:
                with urllib.request.urlopen(request, timeout=self.spec.timeout) as resp:
                    raw = resp.read()
                try:
                    return json.loads(raw.decode("utf-8"))
                except ValueError as exc:
                    raise EndpointError(
                        f"endpoint {self.spec.url} answered with a body that is not JSON: "
                        f"{raw[:200]!r}"
                    ) from exc
            except urllib.error.HTTPError as exc:
                detail = exc.read()[:300].decode("utf-8", "replace")
                last = f"HTTP {exc.code}: {detail}"
                if exc.code not in RETRY_STATUS:
                    hint = ""
                    if exc.code == 404 or (exc.code == 400 and "model" in detail.lower()):
                        # The two mistakes a user makes: the URL's path, the model's name.
                        hint = (
                            " (is the URL the server's API root, e.g. http://host:8000/v1, and "
                            f"does it serve a model named '{self.spec.model}'? GET {self.spec.base_url}"
                            "/models lists them)"
                        )
                    raise EndpointError(
                        f"endpoint {self.spec.url} (model {self.spec.model}) refused the request: "
                        f"{last}{hint}"
                    ) from exc
            except (urllib.error.URLError, TimeoutError, ConnectionError, OSError) as exc:
                reason = getattr(exc, "reason", exc)
                last = f"{type(reason).__name__}: {reason}"
            if attempt < attempts:
                delay = self.backoff * 2 ** (attempt - 1)
                log.warning(
                    "endpoint %s: attempt %d/%d failed (%s); retrying in %.1f s",
                    self.spec.url,
                    attempt,
                    attempts,
                    last,
                    delay,
                )
                time.sleep(delay)
        raise EndpointError(
            f"endpoint {self.spec.url} (model {self.spec.model}) did not answer after {attempts} "
            f"attempt(s) (timeout {self.spec.timeout:g} s each): {last}"
        )

    def _reply(self, answer: Mapping[str, Any]) -> Reply:
        try:
            choice = answer["choices"][0]
            text = choice["message"]["content"] if self.spec.api == "chat" else choice["text"]
        except (KeyError, IndexError, TypeError) as exc:
            raise EndpointError(
                f"endpoint {self.spec.url}: reply without choices[0]."
                f"{'message.content' if self.spec.api == 'chat' else 'text'}: "
                f"{json.dumps(answer)[:300]}"
            ) from exc
        text = (text or "").strip()
        usage = answer.get("usage") or {}
        tokens = usage.get("completion_tokens")
        if not isinstance(tokens, int):
            tokens = len(text.split())  # the server did not count: words as an estimate
        finished = choice.get("finish_reason") != "length"
        return Reply(text=text, num_tokens=int(tokens), finished_by_eos=finished)

    def generate(
        self,
        prompts: list[str],
        *,
        max_new_tokens: int,
        temperature: float,
        top_p: float,
        top_k: int,
        greedy: bool,
        seed: int,
        game_ids: list[str] | None = None,
    ) -> list[Reply]:
        """One reply per prompt, in order; greedy decoding is temperature 0.

        Each request carries the seed of its game (``prompt_seeds``); the server
        keeps its own cache.
        """
        if not prompts:
            return []
        seeds = prompt_seeds(seed, game_ids, len(prompts))
        temp = 0.0 if greedy else temperature

        def one(i: int) -> Reply:
            body = self._payload(prompts[i], max_new_tokens, temp, top_p, seeds[i], top_k)
            return self._reply(self._post(body))

        with ThreadPoolExecutor(max_workers=min(self.spec.workers, len(prompts))) as pool:
            return list(pool.map(one, range(len(prompts))))

    def release(self, game_ids: list[str]) -> None:
        """Nothing is kept per game on this side."""
