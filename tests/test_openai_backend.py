"""The OpenAI-compatible endpoint backend, against a small HTTP server run by the test."""

from __future__ import annotations

import re
import socket
from pathlib import Path

import pytest
from fake_endpoint import FakeEndpoint

from spag.errors import SpagInputError
from spag.game.taboo import TABOO
from spag.generation.base import Reply
from spag.generation.openai_backend import (
    EndpointError,
    OpenAIBackend,
    is_endpoint_spec,
    parse_spec,
)
from spag.generation.settings import Sampling

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture()
def endpoint():
    ep = FakeEndpoint()
    ep.thread.start()
    yield ep
    ep.server.shutdown()
    ep.server.server_close()


def _generate(backend, prompts, *, seed=5, game_ids=None, **kw):
    sampling = Sampling(**{**dict(max_new_tokens=16, top_p=0.9, top_k=0, temperature=0.0), **kw})
    return backend.generate(prompts, sampling, seed=seed, game_ids=game_ids)


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
    (reply,) = _generate(backend, ["hello there"], temperature=1.2)
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

    from spag.game.selfplay import OPPONENT, POLICY, evaluation_specs, play_games

    class Local:
        name = "scripted"

        def generate(self, prompts, sampling, **_):
            return [Reply("a fruit that grows on trees", 6, True) for _ in prompts]

    backends = {POLICY: Local(), OPPONENT: OpenAIBackend(endpoint.spec())}
    specs = evaluation_specs(["apple", "river"], epoch=1, shard_index=0, game=TABOO)
    settings = dict(max_turns=2, sampling=Sampling(temperature=0.0), seed=0)
    games = play_games(specs, backends, TABOO.load_prompts(), game=TABOO, **settings)
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
    _generate(backend, ["a"], temperature=1.2, top_k=50)
    _generate(backend, ["b"], temperature=0.0, top_k=50)
    off = OpenAIBackend(endpoint.spec(top_k="off"))
    _generate(off, ["c"], temperature=1.2, top_k=50)
    sent = {r["prompt"]: r.get("top_k") for r in endpoint.requests}
    assert sent == {"a": 50, "b": None, "c": None}
    # top_p goes as given, greedy requests too (temperature 0 is not argmax everywhere).
    assert {r["prompt"]: r["top_p"] for r in endpoint.requests} == {"a": 0.9, "b": 0.9, "c": 0.9}
    with pytest.raises(SpagInputError, match="top_k=maybe"):
        parse_spec(endpoint.spec(top_k="maybe"))


def test_a_knob_outside_the_openai_api_is_sent_only_away_from_its_default(endpoint):
    """OpenAI's API refuses parameters it does not know: a sampling knob added to the
    declaration must not reach an endpoint unless the run sets it."""
    from dataclasses import dataclass

    from spag.settings import opt

    @dataclass(frozen=True, kw_only=True)
    class WithPenalty(Sampling):
        repetition_penalty: float = opt(1.0, "a knob the OpenAI API does not define")

    backend = OpenAIBackend(endpoint.spec())
    for prompt, penalty in (("unset", 1.0), ("set", 1.3)):
        knobs = WithPenalty(max_new_tokens=8, repetition_penalty=penalty)
        backend.generate([prompt], knobs, seed=1)
    sent = {r["prompt"]: r for r in endpoint.requests}
    assert "repetition_penalty" not in sent["unset"]
    assert sent["set"]["repetition_penalty"] == 1.3
    # The OpenAI API's own knobs always go.
    assert {"max_tokens", "temperature", "top_p"} <= set(sent["unset"])


# ---------------------------------------------------------------- hostile servers
def test_a_redirect_is_not_followed_and_the_key_stays(endpoint, monkeypatch):
    """A 302 to another host would carry the key there: refused, the other host never
    hears from the client."""
    monkeypatch.setenv("SPAG_TEST_KEY", "sk-secret-123")
    with FakeEndpoint() as elsewhere:
        endpoint.redirect_to = f"http://127.0.0.1:{elsewhere.port}/v1/completions"
        backend = OpenAIBackend(endpoint.spec(key_env="SPAG_TEST_KEY", retries=2))
        with pytest.raises(
            EndpointError, match="a redirect to http://127.0.0.1.*not followed"
        ) as err:
            _generate(backend, ["hello"])
        assert elsewhere.requests == [] and elsewhere.headers == []
    assert len(endpoint.requests) == 1  # not retried
    assert "sk-secret-123" not in str(err.value)


def test_a_trickling_server_meets_the_total_deadline(endpoint):
    endpoint.trickle = 0.2  # one byte every 0.2 s: each read is quick, the reply never ends
    backend = OpenAIBackend(endpoint.spec(timeout=1, retries=1), backoff=0.01)
    with pytest.raises(EndpointError, match=r"did not answer after 2 attempt.*within 1 s"):
        _generate(backend, ["hello"])


def test_a_huge_reply_is_not_read(endpoint):
    endpoint.huge = 300 * 1024 * 1024  # 300 MB for max_tokens 16
    backend = OpenAIBackend(endpoint.spec(retries=0))
    with pytest.raises(EndpointError, match=r"reply over \d+ bytes for max_tokens 16"):
        _generate(backend, ["hello"])


def test_a_cut_body_is_retried_then_named(endpoint):
    endpoint.cut = True
    backend = OpenAIBackend(endpoint.spec(retries=2), backoff=0.01)
    with pytest.raises(
        EndpointError, match=r"did not answer after 3 attempt\(s\).*RemoteProtocolError"
    ):
        _generate(backend, ["hello"])
    assert len(endpoint.requests) == 3
    endpoint.cut = False
    assert _generate(backend, ["hello"])[0].text  # a healthy answer after all


@pytest.mark.parametrize("value,field", [(123, "choices[0].text is int"),
                                         (["a"], "choices[0].text is list")])  # fmt: skip
def test_wrong_types_name_the_field(endpoint, value, field):
    endpoint.wrong_text = value
    backend = OpenAIBackend(endpoint.spec(retries=0))
    with pytest.raises(
        EndpointError, match=rf"{endpoint.port}/v1/completions: reply field {re.escape(field)}"
    ):
        _generate(backend, ["hello"])


def test_more_tokens_than_asked_is_refused(endpoint):
    endpoint.usage_tokens = 500
    backend = OpenAIBackend(endpoint.spec(retries=0))
    with pytest.raises(EndpointError, match="reply of 500 tokens for max_tokens 16"):
        _generate(backend, ["hello"])


def test_a_key_echoed_by_the_server_is_masked(endpoint, monkeypatch):
    monkeypatch.setenv("SPAG_TEST_KEY", "sk-secret-456")
    endpoint.echo_auth = True
    backend = OpenAIBackend(endpoint.spec(key_env="SPAG_TEST_KEY", retries=0))
    with pytest.raises(EndpointError, match=r"HTTP 400.*Bearer \*\*\*") as err:
        _generate(backend, ["hello"])
    assert "sk-secret-456" not in str(err.value)


@pytest.mark.parametrize(
    "spec",
    [
        "openai:http://user:sk-secret-789@127.0.0.1:8000/v1?model=m",
        "openai:http://127.0.0.1:8000/v1?model=m&api_key=sk-secret-789",
        "openai:https://sk-secret-789@api.example.org/v1?model=m",
    ],
)
def test_secrets_in_the_spec_are_refused_without_repeating_them(spec):
    with pytest.raises(SpagInputError) as err:
        parse_spec(spec)
    assert "sk-secret-789" not in str(err.value)
    assert "user" not in str(err.value).split("refused")[0] or "user info" in str(err.value)


def test_an_opponent_spec_with_a_secret_is_refused_before_any_job():
    import copy

    import yaml

    from spag.config import validate_config

    config = yaml.safe_load(open(REPO / "config.yaml").read())
    bad = copy.deepcopy(config)
    bad["evaluation"]["opponent"] = "openai:http://u:sk-secret-000@127.0.0.1:1/v1?model=m"
    with pytest.raises(SpagInputError, match="evaluation.opponent") as err:
        validate_config(bad)
    assert "sk-secret-000" not in str(err.value)


# ---------------------------------------------------------------- no paid request lost
def test_a_failed_shard_resumes_from_its_finished_games(endpoint, tiny_model_dir, tmp_path):
    """Evaluation games against an endpoint that dies mid-shard: the games that ended are
    journaled; the rerun asks only for the others, and the shard equals an uninterrupted
    run's."""
    import pyarrow.parquet as pq

    from spag.cli import main

    words = tmp_path / "words.txt"
    words.write_text("\n".join(["apple", "river", "castle", "garden", "pencil", "window"]) + "\n")

    def play(out, spec):
        return main(["play", "--model", str(tiny_model_dir), "--opponent", spec,
                     "--words", str(words), "--output", str(out), "--max-turns", "3",
                     "--max-new-tokens", "4", "--no-progress"])  # fmt: skip

    # the endpoint ends every game at its first reply for half the words
    def answer(prompt):
        return "I know the word! It is apple!" if "apple" in prompt or "castle" in prompt else "hm"

    endpoint.answer = answer
    whole = tmp_path / "whole.parquet"
    assert play(whole, endpoint.spec(retries=0)) == 0
    calls_whole = len(endpoint.requests)

    endpoint.requests.clear()
    endpoint.fail_after = 6  # the first message of the games it attacks in, then no more
    out = tmp_path / "shard.parquet"
    assert play(out, endpoint.spec(retries=0)) == 2
    journal = tmp_path / ".shard.parquet.journal.jsonl"
    assert not out.exists() and journal.exists()
    journaled = len(journal.read_text().splitlines()) - 1
    assert journaled >= 1

    endpoint.requests.clear()
    endpoint.fail_after = None
    assert play(out, endpoint.spec(retries=0)) == 0
    assert not journal.exists()
    assert len(endpoint.requests) < calls_whole  # the finished games were not asked again
    assert pq.read_table(out).equals(pq.read_table(whole))
