"""A real OpenAI-compatible server: transformers' (`transformers serve`) serving SmolLM2
converted from the GGUF the project installs, on loopback. Teacher and evaluation games
are played against it through the endpoint backend, over the chat and completions APIs,
and the backend's greedy replies are the server's own answers to the same request. It
refuses fields the OpenAI API does not define, as OpenAI's own API does: the endpoint's
``top_k=off`` leaves the knob out.

``scripts/setup.sh --tests`` installs the server (``transformers[serving]``); where it is
missing these tests fail rather than skip, so that CI cannot lose them silently.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pyarrow.parquet as pq
import pytest

from spag.generation.openai_backend import EndpointError, OpenAIBackend
from spag.generation.settings import Sampling

# The server lists the models of a Hugging Face cache (GET /v1/models) and serves one of
# them; the test's cache holds the converted SmolLM2 under this name.
ALIAS = "spag/smollm2-135m-instruct"
START_TIMEOUT_S = 180


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _hub_cache(root: Path, model_dir: Path) -> Path:
    """A Hugging Face cache holding ``model_dir`` as the repository ALIAS (files linked)."""
    repo = root / ("models--" + ALIAS.replace("/", "--"))
    commit = "0" * 40  # any commit hash: the cache maps the ref main to it
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    for f in model_dir.iterdir():
        (snapshot / f.name).symlink_to(f)
    return root


@pytest.fixture(scope="module")
def server(tmp_path_factory, smollm2_dir):
    root = tmp_path_factory.mktemp("serve")
    cache = _hub_cache(root / "hub", smollm2_dir)
    port = _free_port()
    log = root / "server.log"
    cmd = [
        sys.executable, "-m", "transformers.cli.transformers", "serve", ALIAS,
        "--host", "127.0.0.1", "--port", str(port), "--device", "cpu", "--default-seed", "0",
    ]  # fmt: skip
    env = dict(os.environ, HF_HUB_CACHE=str(cache), HF_HUB_OFFLINE="1")
    with open(log, "w") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env)
    base = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            assert proc.poll() is None, log.read_text()[-3000:]
            try:
                if httpx.get(f"{base}/models", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, f"server not up: {log.read_text()[-3000:]}"
            time.sleep(0.5)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _spec(base: str, **opts: str) -> str:
    query = "&".join(f"{k}={v}" for k, v in {"model": ALIAS, "retries": "1", **opts}.items())
    return f"openai:{base}?{query}"


def _play(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    return subprocess.run(
        [sys.executable, "-m", "spag", "play", "--no-progress", *args],
        capture_output=True, text=True, env=env, timeout=900,
    )  # fmt: skip


@pytest.fixture()
def words(tmp_path) -> Path:
    path = tmp_path / "words.txt"
    path.write_text("apple\nriver\n")
    return path


@pytest.mark.parametrize("api", ["chat", "completions"])
def test_backend_replies_are_the_servers_own(server, api):
    """Greedy, the backend's reply is what the server answers to the same request."""
    backend = OpenAIBackend(_spec(server, api=api))
    prompt = "Name one fruit." if api == "chat" else "Apples, pears, plums and"
    greedy = Sampling(max_new_tokens=12, temperature=0.0, top_p=1.0, top_k=0)
    (reply,) = backend.generate([prompt], greedy, seed=3, game_ids=["g0"])
    body = backend._payload(prompt, greedy, backend_seed(3, "g0"))
    path = "/chat/completions" if api == "chat" else "/completions"
    answer = httpx.post(server + path, json=body, timeout=120).json()
    choice = answer["choices"][0]
    text = choice["message"]["content"] if api == "chat" else choice["text"]
    assert reply.text == text.strip()
    assert reply.text  # the model said something
    assert 0 < reply.num_tokens <= 12


def backend_seed(seed: int, game_id: str) -> int:
    from spag.generation.base import prompt_seeds

    return prompt_seeds(seed, [game_id], 1)[0]


def test_evaluation_games_against_the_server(server, tiny_model_dir, words, tmp_path):
    out = tmp_path / "eval.parquet"
    res = _play("--model", str(tiny_model_dir), "--opponent", _spec(server, api="chat"),
                "--words", str(words), "--output", str(out), "--max-turns", "2",
                "--max-new-tokens", "16")  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    table = pq.read_table(out).to_pylist()
    assert len(table) == 4  # two words, each role
    assert {r["defender_model"] for r in table} | {r["attacker_model"] for r in table} >= {ALIAS}
    opponent_said = [
        m["content"]
        for r in table
        for i, m in enumerate(r["history"])
        if (r["attacker_model"] == ALIAS) == (i % 2 == 0)
    ]
    assert any(opponent_said)
    assert not (tmp_path / ".eval.parquet.journal.jsonl").exists()


def test_teacher_games_through_the_completions_api(server, words, tmp_path):
    out = tmp_path / "teacher.parquet"
    # The server refuses top_k (a field the OpenAI API does not define), and the error
    # says so; the endpoint's top_k=off leaves it out.
    sampled = Sampling(max_new_tokens=2, temperature=0.7, top_p=1.0, top_k=40)
    with pytest.raises(EndpointError, match="HTTP 422.*top_k.*add top_k=off to the endpoint"):
        OpenAIBackend(_spec(server, api="completions")).generate(["Apples"], sampled, seed=0)
    res = _play("--model", _spec(server, api="completions", top_k="off"), "--words", str(words),
                "--output", str(out), "--max-turns", "2", "--max-new-tokens", "16",
                "--temperature", "0.7", "--top-k", "40")  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    table = pq.read_table(out).to_pylist()
    assert len(table) == 2
    assert all(r["attacker_model"] == ALIAS == r["defender_model"] for r in table)
    assert all(r["num_generated_tokens"] > 0 for r in table)


def test_preflight_lists_the_servers_model(server):
    from spag.ops.preflight import FamilyPlan, run_checks

    (row,) = [r for r in run_checks(FamilyPlan(family="teacher", endpoints=[_spec(server)]))
              if r.check == "endpoint"]  # fmt: skip
    assert row.status == "ok" and ALIAS in row.detail
