"""The OpenAI-compatible endpoint backend, against a small HTTP server run by the test."""

from __future__ import annotations

import socket

import pytest
from fake_endpoint import FakeEndpoint

from spag.errors import SpagInputError
from spag.generation.base import Reply
from spag.generation.openai_backend import (
    EndpointError,
    OpenAIBackend,
    is_endpoint_spec,
    parse_spec,
)


@pytest.fixture()
def endpoint():
    ep = FakeEndpoint()
    ep.thread.start()
    yield ep
    ep.server.shutdown()
    ep.server.server_close()


def _generate(backend, prompts, **kw):
    opts = dict(max_new_tokens=16, temperature=1.2, top_p=0.9, top_k=0, greedy=True, seed=5)
    opts.update(kw)
    return backend.generate(prompts, **opts)


def test_completions_in_order(endpoint, monkeypatch):
    monkeypatch.setenv("SPAG_TEST_KEY", "sk-test")
    backend = OpenAIBackend(endpoint.spec(key_env="SPAG_TEST_KEY", workers=3))
    prompts = ["a" * n for n in (3, 10, 1, 25)]
    replies = _generate(backend, prompts, game_ids=[f"g{i}" for i in range(4)])
    backend.release(["g0"])
    assert [r.text for r in replies] == [f"reply to {len(p)} chars" for p in prompts]
    assert all(isinstance(r, Reply) and r.num_tokens == 7 for r in replies)
    assert not any(r.finished_by_eos for r in replies)  # finish_reason "length"
    req = endpoint.requests[0]
    assert req["path"] == "/v1/completions"
    assert req["model"] == "judge-7b" and req["max_tokens"] == 16
    assert req["temperature"] == 0.0  # greedy
    assert sorted(r["prompt"] for r in endpoint.requests) == sorted(prompts)
    assert endpoint.headers[0]["Authorization"] == "Bearer sk-test"
    assert "sk-test" not in repr(backend)


def test_chat_api_and_sampling(endpoint):
    backend = OpenAIBackend(endpoint.spec(api="chat"))
    (reply,) = _generate(backend, ["hello there"], greedy=False)
    assert reply.text == "reply to 11 chars" and reply.finished_by_eos
    req = endpoint.requests[0]
    assert req["path"] == "/v1/chat/completions"
    assert req["messages"] == [{"role": "user", "content": "hello there"}]
    assert req["temperature"] == 1.2 and req["top_p"] == 0.9
    assert "Authorization" not in endpoint.headers[0]


def test_retries_server_errors(endpoint):
    endpoint.fail_first = 2
    backend = OpenAIBackend(endpoint.spec(retries=2), backoff=0.01)
    (reply,) = _generate(backend, ["x"])
    assert reply.text == "reply to 1 chars"
    assert len(endpoint.requests) == 3


def test_gives_up_after_retries(endpoint):
    endpoint.fail_first = 10
    backend = OpenAIBackend(endpoint.spec(retries=1), backoff=0.01)
    with pytest.raises(EndpointError, match=r"did not answer after 2 attempt\(s\).*HTTP 503"):
        _generate(backend, ["x"])


def test_client_error_is_not_retried(endpoint):
    endpoint.status = 404
    backend = OpenAIBackend(endpoint.spec(retries=3), backoff=0.01)
    with pytest.raises(EndpointError, match="refused the request: HTTP 404"):
        _generate(backend, ["x"])
    assert len(endpoint.requests) == 1


def test_endpoint_that_does_not_answer():
    # A port that was free a moment ago: nothing listens there.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    backend = OpenAIBackend(
        f"openai:http://127.0.0.1:{port}/v1?model=m&retries=1&timeout=2", backoff=0.01
    )
    with pytest.raises(EndpointError, match=rf"127.0.0.1:{port}/v1/completions.*did not answer"):
        _generate(backend, ["x"])
    assert issubclass(EndpointError, SpagInputError)  # the CLI reports it without a traceback


def test_silent_endpoint_times_out():
    # Accepts the connection, never answers.
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(4)
        port = listener.getsockname()[1]
        backend = OpenAIBackend(
            f"openai:http://127.0.0.1:{port}/v1?model=m&retries=0&timeout=0.5", backoff=0.01
        )
        with pytest.raises(EndpointError, match="did not answer after 1 attempt"):
            _generate(backend, ["x"])


def test_spec_parsing():
    spec = parse_spec("openai:https://api.example.org/v1/?model=gpt-4&api=chat&timeout=5&retries=0")
    assert spec.url == "https://api.example.org/v1/chat/completions"
    assert (spec.model, spec.timeout, spec.retries) == ("gpt-4", 5.0, 0)
    assert is_endpoint_spec("openai:http://h/v1?model=m")
    assert not is_endpoint_spec("results/imitation/model")
    for bad, why in [
        ("openai:http://h/v1", "missing \\?model"),
        ("openai:ftp://h/v1?model=m", "http:// or https://"),
        ("openai:http://h/v1?model=m&api=x", "api=x"),
        ("openai:http://h/v1?model=m&colour=red", "unknown option"),
        ("openai:http://h/v1?model=m&timeout=soon", "bad number"),
        ("results/model", "expected openai:"),
    ]:
        with pytest.raises(SpagInputError, match=why):
            parse_spec(bad)


def test_plays_games_as_the_opponent(endpoint):
    """The game loop runs with the endpoint as the opponent of a local player."""
    from spag.game.prompts import load_prompts
    from spag.game.selfplay import OPPONENT, POLICY, PlaySettings, evaluation_specs, play_games

    class Local:
        name = "scripted"

        def generate(self, prompts, **_):
            return [Reply("a fruit that grows on trees", 6, True) for _ in prompts]

    backends = {POLICY: Local(), OPPONENT: OpenAIBackend(endpoint.spec())}
    specs = evaluation_specs(["apple", "river"], epoch=1, shard_index=0)
    games = play_games(specs, backends, load_prompts(None), PlaySettings(max_turns=2, greedy=True))
    assert len(games) == 4
    for g in games:
        assert len(g.history) == 4
        opponent_role = "defender" if g.spec.policy_role == "attacker" else "attacker"
        for msg in g.history:
            if msg["role"] == opponent_role:
                assert msg["content"].startswith("reply to")
    assert len(endpoint.requests) == 8


def test_spag_play_uses_an_endpoint_opponent(endpoint, tiny_model_dir, tmp_path):
    """`spag play --opponent openai:...` plays the local model against the endpoint."""
    import pyarrow.parquet as pq

    from spag.cli import main

    words = tmp_path / "words.txt"
    words.write_text("apple\nriver\n")
    out = tmp_path / "eval.parquet"
    rc = main(
        ["play", "--model", str(tiny_model_dir), "--opponent", endpoint.spec(),
         "--words", str(words), "--output", str(out), "--max-turns", "1",
         "--max-new-tokens", "4", "--no-progress"]
    )  # fmt: skip
    assert rc == 0
    rows = pq.read_table(out).to_pylist()
    assert len(rows) == 4
    opponents = {r["attacker_model"] if r["policy_role"] == "defender" else r["defender_model"]
                 for r in rows}  # fmt: skip
    assert opponents == {parse_spec(endpoint.spec()).model}
    assert len(endpoint.requests) == 4


def test_top_k_is_sent_when_sampling_unless_turned_off(endpoint):
    backend = OpenAIBackend(endpoint.spec())
    _generate(backend, ["a"], greedy=False, top_k=50)
    _generate(backend, ["b"], greedy=True, top_k=50)
    off = OpenAIBackend(endpoint.spec(top_k="off"))
    _generate(off, ["c"], greedy=False, top_k=50)
    sent = {r["prompt"]: r.get("top_k") for r in endpoint.requests}
    assert sent == {"a": 50, "b": None, "c": None}
    with pytest.raises(SpagInputError, match="top_k=maybe"):
        parse_spec(endpoint.spec(top_k="maybe"))
