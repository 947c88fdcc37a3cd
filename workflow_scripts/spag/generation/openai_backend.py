"""The ``openai`` backend: an OpenAI-compatible HTTP endpoint as a game player.

Used as the fixed opponent of evaluation games (the paper's games against
GPT-4), as the teacher of imitation games, or any server speaking the OpenAI API
(``vllm serve``, SGLang, llama.cpp's server, hosted APIs). An endpoint is named by
a spec string::

    openai:http://host:8000/v1?model=NAME[&api=completions|chat][&timeout=60][&retries=3]
        [&workers=4][&key_env=OPENAI_API_KEY][&top_k=on|off]

``api=completions`` (default) posts the play prompt as it is to ``/completions``;
``api=chat`` sends it as one user message to ``/chat/completions``. Sampled
requests carry ``top_k`` (vLLM, llama.cpp and SGLang take it); ``top_k=off`` leaves
it out for servers that refuse unknown fields (OpenAI's, ``transformers serve``).

What the client promises (``httpx``, one pooled client per backend):

- **Keys only from the environment**: the key is read from ``key_env`` (default
  ``OPENAI_API_KEY``) and sent only to the spec's own origin. A spec with user
  info (``http://user:secret@host``) or an unknown query option is refused, and
  no message repeats it: errors name the endpoint by scheme, host and path. What a
  server echoes back is shown with the key masked.
- **No redirect followed**: a 3xx answer is an error naming where it pointed (the
  key would go there); point the spec at the final URL.
- **A total deadline per request** (``timeout``, seconds) whatever the server's
  pace: a server that trickles bytes is cut off at the deadline, like one that
  says nothing.
- **Capped replies**: at most :data:`MAX_REPLY_BYTES` + 64 bytes a requested token
  are read; a server counting more completion tokens than ``max_tokens`` asked
  for is refused.
- **Retries with back-off** (``retries``): HTTP 408/409/429/5xx, connection
  failures, a dropped connection or cut body, and the deadline. Other HTTP errors
  and malformed replies are not retried.
- **Malformed replies** (not JSON, wrong types, missing fields) are errors naming
  the endpoint and the field.
"""

from __future__ import annotations

import json
import logging
import os
import time
import urllib.parse
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from spag.errors import SpagInputError
from spag.generation.base import Backend, Reply
from spag.generation.settings import Sampling

log = logging.getLogger(__name__)

SPEC_PREFIX = "openai:"
APIS = ("completions", "chat")
RETRY_STATUS = {408, 409, 429, 500, 502, 503, 504}
SPEC_OPTIONS = ("model", "api", "timeout", "retries", "workers", "key_env", "top_k")
# The sampling parameters of the OpenAI API itself (every server takes them).
OPENAI_SAMPLING = ("max_tokens", "temperature", "top_p")
# A reply may take this many bytes, plus BYTES_PER_TOKEN for each requested token.
MAX_REPLY_BYTES = 64 * 1024
BYTES_PER_TOKEN = 64


class EndpointError(SpagInputError):
    """The endpoint did not answer, or answered with an error or an unreadable reply."""


class _Retryable(Exception):
    """A failed attempt worth another try (its message says why)."""


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


def safe_spec(spec: str) -> str:
    """The spec as it may be shown: scheme, host, port and path; no user info, no query."""
    try:
        parsed = urllib.parse.urlsplit(str(spec)[len(SPEC_PREFIX) :])
        host = parsed.hostname or "?"
        port = f":{parsed.port}" if parsed.port else ""
    except ValueError:
        return f"{SPEC_PREFIX}<unreadable URL>"
    return f"{SPEC_PREFIX}{parsed.scheme}://{host}{port}{parsed.path}"


def parse_spec(spec: str) -> EndpointSpec:
    """Parse ``openai:http://host:port/v1?model=NAME&...`` (see the module doc)."""
    if not is_endpoint_spec(spec):
        raise SpagInputError(
            f"endpoint '{safe_spec(spec) if str(spec).startswith(SPEC_PREFIX) else spec}': "
            "expected openai:http(s)://host:port/v1?model=NAME"
        )
    shown = safe_spec(spec)
    try:
        parsed = urllib.parse.urlsplit(spec[len(SPEC_PREFIX) :])
        parsed.port  # noqa: B018 - a bad port raises here
    except ValueError as exc:
        raise SpagInputError(f"endpoint '{shown}': not a URL ({type(exc).__name__})") from None
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise SpagInputError(f"endpoint '{shown}': the URL must start with http:// or https://")
    if parsed.username is not None or parsed.password is not None:
        # A secret in the URL ends up in plans, command lines and logs.
        raise SpagInputError(
            f"endpoint '{shown}': user info in the URL is refused (it would be shown in "
            "plans, command lines and logs); put the key in an environment variable and "
            "name it with key_env=VAR"
        )
    query = dict(urllib.parse.parse_qsl(parsed.query, keep_blank_values=True))
    unknown = sorted(set(query) - set(SPEC_OPTIONS))
    if unknown:
        # Names only: an unknown option may be a key (api_key=sk-...).
        raise SpagInputError(
            f"endpoint '{shown}': unknown option(s) {', '.join(unknown)} (known: "
            f"{', '.join(sorted(SPEC_OPTIONS))}; a key goes in the environment, named by key_env)"
        )
    if not query.get("model"):
        raise SpagInputError(f"endpoint '{shown}': missing ?model=NAME")
    api = query.get("api", "completions")
    if api not in APIS:
        raise SpagInputError(f"endpoint '{shown}': api={api} (choose from {', '.join(APIS)})")
    try:
        timeout = float(query.get("timeout", 60))
        retries = int(query.get("retries", 3))
        workers = int(query.get("workers", 4))
    except ValueError as exc:
        raise SpagInputError(f"endpoint '{shown}': bad number in the options: {exc}") from exc
    top_k = query.get("top_k", "on")
    if top_k not in ("on", "off"):
        raise SpagInputError(f"endpoint '{shown}': top_k={top_k} (choose on or off)")
    if not timeout > 0 or timeout == float("inf") or retries < 0 or workers < 1:
        raise SpagInputError(
            f"endpoint '{shown}': a finite timeout > 0, retries >= 0, workers >= 1 needed"
        )
    key_env = query.get("key_env", "OPENAI_API_KEY")
    if not key_env.replace("_", "").isalnum():
        raise SpagInputError(f"endpoint '{shown}': key_env must name an environment variable")
    base = urllib.parse.urlunsplit((parsed.scheme, parsed.netloc, parsed.path, "", ""))
    return EndpointSpec(
        base_url=base,
        model=query["model"],
        api=api,
        timeout=timeout,
        retries=retries,
        workers=workers,
        key_env=key_env,
        send_top_k=top_k == "on",
    )


def _field(value: Any, path: str, kind: type | tuple[type, ...], where: str) -> Any:
    if not isinstance(value, kind):
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise EndpointError(
            f"endpoint {where}: reply field {path} is {type(value).__name__}, expected {names}"
        )
    return value


class OpenAIBackend(Backend):
    """Replies from an OpenAI-compatible endpoint, one request per prompt, a few at a time."""

    name = "openai"

    def __init__(self, spec: EndpointSpec | str, *, backoff: float = 1.0) -> None:
        import httpx

        self.spec = parse_spec(spec) if isinstance(spec, str) else spec
        self.backoff = float(backoff)
        self._key = os.environ.get(self.spec.key_env) or None
        # No redirects: the key must not follow one to another origin. The pool holds a
        # connection per worker.
        self._client = httpx.Client(
            follow_redirects=False,
            limits=httpx.Limits(
                max_connections=self.spec.workers, max_keepalive_connections=self.spec.workers
            ),
            headers={"Accept": "application/json"},
            trust_env=False,  # no proxy or netrc credentials from the environment
        )

    def __repr__(self) -> str:  # no key in reprs or logs
        return f"OpenAIBackend({self.spec.url}, model={self.spec.model}, api={self.spec.api})"

    def close(self) -> None:
        self._client.close()

    def list_models(self) -> list[str]:
        """``GET <base>/models``: the names the server serves (the preflight's check).

        The same client rules as a request: the key only to this origin, no redirect,
        the spec's deadline, a capped body.
        """
        import httpx

        where = self.spec.base_url.rstrip("/") + "/models"
        headers = {"Authorization": f"Bearer {self._key}"} if self._key else {}
        try:
            resp = self._client.get(
                where, headers=headers, timeout=httpx.Timeout(self.spec.timeout)
            )
        except httpx.HTTPError as exc:
            raise EndpointError(
                f"endpoint {where}: {type(exc).__name__}: {self._mask(str(exc))}"
            ) from None
        if resp.status_code != 200:
            raise EndpointError(
                f"endpoint {where}: HTTP {resp.status_code} (a redirect is not followed; "
                f"a 401/403 needs the key in {self.spec.key_env})"
            )
        if len(resp.content) > MAX_REPLY_BYTES * 16:
            raise EndpointError(f"endpoint {where}: a model list of {len(resp.content)} bytes")
        try:
            data = _field(resp.json(), "(the reply)", dict, where)
        except ValueError:
            raise EndpointError(f"endpoint {where}: a body that is not JSON") from None
        models = _field(data.get("data"), "data", list, where)
        return [str(m.get("id")) for m in models if isinstance(m, dict)]

    def _mask(self, text: str) -> str:
        """``text`` (a server's words) with the key masked, shortened for a message."""
        if self._key:
            text = text.replace(self._key, "***")
        return text[:300]

    # -------------------------------------------------------------- requests
    def _payload(self, prompt: str, sampling: Sampling, seed: int) -> dict[str, Any]:
        # The knobs by the servers' names; greedy decoding is temperature 0. A knob the
        # OpenAI API does not define goes only where it does something (top_k: where
        # it filters and the endpoint takes it; any other: away from its default),
        # since OpenAI's own API refuses parameters it does not know.
        params = sampling.engine_params()
        unset = type(sampling)().engine_params()
        body: dict[str, Any] = {"model": self.spec.model}
        for name, value in params.items():
            if name == "top_k":
                if value > 0 and self.spec.send_top_k:
                    body[name] = value
            elif name in OPENAI_SAMPLING or value != unset[name]:
                body[name] = value
        # top_p as given, greedy too: at temperature 0 a hosted API is not strictly argmax.
        body.update(top_p=float(sampling.top_p), seed=int(seed), n=1)
        if self.spec.api == "chat":
            body["messages"] = [{"role": "user", "content": prompt}]
        else:
            body["prompt"] = prompt
        return body

    def _attempt(self, body: Mapping[str, Any], cap: int) -> dict[str, Any]:
        """One request within the total deadline; the parsed JSON reply."""
        import httpx

        deadline = time.monotonic() + self.spec.timeout
        headers = {"Content-Type": "application/json"}
        if self._key:
            headers["Authorization"] = f"Bearer {self._key}"
        where = self.spec.url
        try:
            with self._client.stream(
                "POST",
                self.spec.url,
                content=json.dumps(body).encode("utf-8"),
                headers=headers,
                timeout=httpx.Timeout(self.spec.timeout),
            ) as resp:
                chunks, size = [], 0
                for chunk in resp.iter_bytes():
                    size += len(chunk)
                    if size > cap:
                        raise EndpointError(
                            f"endpoint {where}: reply over {cap} bytes for max_tokens "
                            f"{body['max_tokens']}; not read further"
                        )
                    chunks.append(chunk)
                    if time.monotonic() > deadline:
                        raise _Retryable(f"no complete reply within {self.spec.timeout:g} s")
                raw = b"".join(chunks)
                status = resp.status_code
                location = resp.headers.get("location", "")
        except httpx.TimeoutException:
            raise _Retryable(f"no complete reply within {self.spec.timeout:g} s") from None
        except httpx.TransportError as exc:  # refused, reset, dropped mid-body
            raise _Retryable(f"{type(exc).__name__}: {self._mask(str(exc))}") from None
        if 300 <= status < 400:
            target = urllib.parse.urlsplit(location)
            raise EndpointError(
                f"endpoint {where} answered HTTP {status}, a redirect to "
                f"{target.scheme}://{target.hostname or '?'}{target.path}: not followed (the "
                "key would go there); put the final URL in the spec"
            )
        if status != 200:
            detail = self._mask(raw.decode("utf-8", "replace"))
            if status in RETRY_STATUS:
                raise _Retryable(f"HTTP {status}: {detail}")
            hint = ""
            if status == 404 or (status == 400 and "model" in detail.lower()):
                # The two mistakes a user makes: the URL's path, the model's name.
                hint = (
                    " (is the URL the server's API root, e.g. http://host:8000/v1, and does "
                    f"it serve a model named '{self.spec.model}'? GET {self.spec.base_url}"
                    "/models lists them)"
                )
            elif status in (400, 422) and "top_k" in body and "top_k" in detail:
                # The third: a server that takes only the OpenAI API's fields.
                hint = " (the server does not take top_k: add top_k=off to the endpoint spec)"
            raise EndpointError(
                f"endpoint {where} (model {self.spec.model}) refused the request: "
                f"HTTP {status}: {detail}{hint}"
            )
        try:
            answer = json.loads(raw.decode("utf-8"))
        except ValueError:
            raise EndpointError(
                f"endpoint {where} answered with a body that is not JSON: "
                f"{self._mask(raw[:200].decode('utf-8', 'replace'))!r}"
            ) from None
        return _field(answer, "(the reply)", dict, where)

    def _post(self, body: Mapping[str, Any]) -> dict[str, Any]:
        cap = MAX_REPLY_BYTES + BYTES_PER_TOKEN * int(body["max_tokens"])
        attempts = self.spec.retries + 1
        last = "no attempt"
        for attempt in range(1, attempts + 1):
            try:
                return self._attempt(body, cap)
            except _Retryable as exc:
                last = str(exc)
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
            f"attempt(s) (deadline {self.spec.timeout:g} s each): {last}"
        )

    def _reply(self, answer: Mapping[str, Any], max_new_tokens: int) -> Reply:
        where = self.spec.url
        choices = _field(answer.get("choices"), "choices", list, where)
        if not choices:
            raise EndpointError(f"endpoint {where}: reply field choices is empty")
        choice = _field(choices[0], "choices[0]", dict, where)
        if self.spec.api == "chat":
            message = _field(choice.get("message"), "choices[0].message", dict, where)
            text = _field(
                message.get("content"), "choices[0].message.content", (str, type(None)), where
            )
        else:
            text = _field(choice.get("text"), "choices[0].text", str, where)
        reason = _field(
            choice.get("finish_reason"), "choices[0].finish_reason", (str, type(None)), where
        )
        usage = _field(answer.get("usage") or {}, "usage", dict, where)
        tokens = usage.get("completion_tokens")
        if tokens is not None:
            _field(tokens, "usage.completion_tokens", int, where)
            if tokens > max_new_tokens:
                raise EndpointError(
                    f"endpoint {where}: reply of {tokens} tokens for max_tokens "
                    f"{max_new_tokens} (the server ignores the limit)"
                )
        text = (text or "").strip()
        if tokens is None:
            tokens = len(text.split())  # the server did not count: words as an estimate
        return Reply(text=text, num_tokens=int(tokens), finished_by_eos=reason != "length")

    def draw(
        self, prompts: list[str], sampling: Sampling, seeds: list[int], game_ids: list[str] | None
    ) -> list[Reply]:
        """Greedy decoding is temperature 0. Each request carries the seed of its game;
        the server keeps its own cache."""

        def one(i: int) -> Reply:
            body = self._payload(prompts[i], sampling, seeds[i])
            return self._reply(self._post(body), sampling.max_new_tokens)

        with ThreadPoolExecutor(max_workers=min(self.spec.workers, len(prompts))) as pool:
            return list(pool.map(one, range(len(prompts))))
