"""The two engines held to each other on SmolLM2-135M-Instruct in float32 on CPU: the hf
backend (this process) and vLLM's CPU build (tests/vllm_engine.py), the same Taboo play
prompts in the chat format (both roles, several turns) through each backend's own
``generate``.

- Greedy: the replies' tokens are equal, or the first token where they part is a tie:
  under a plain forward pass of the model along vLLM's reply, the two engines' tokens
  there have logits within ``TIE`` of each other (two kernels' float32 rounding), every
  difference listed in the failure message.
- Sampled, with the SmolLM2 run's self-play settings (temperature 0.7, top-k 50): the
  same distribution over N replies each (the prompts x seeds drawn per game), by three
  tests at ``ALPHA`` each: reply lengths (Mann-Whitney U), first tokens (chi-square test
  of homogeneity, tokens seen fewer than 5 times in both pooled), the share ending at a
  stop token (Fisher's exact test). Their power is low: vLLM at temperature 1.0, or
  without top-k, against hf at the test's settings still gave p > 0.1 on all three at
  this N (perf/results/vllm_parity_power.md); the greedy test is the one that holds the
  engines' logits and masking to each other.
"""

from __future__ import annotations

import json

import pytest
from conftest import DATA
from vllm_engine import VLLMEngine, skip_without_vllm_cpu

from spag.generation.settings import Sampling

TIE = 1e-3
ALPHA = 1e-3
# Sampled replies per prompt and engine: 72 each. At twice that the test could not tell
# temperature 1.0 or no top-k from the config's (perf/results/vllm_parity_power.md): it
# guards against gross differences (lengths, stops); the greedy test holds the engines.
SEEDS = 6
GREEDY = Sampling(max_new_tokens=32, temperature=0.0, top_k=0, top_p=1.0)
SAMPLED = Sampling(max_new_tokens=32, temperature=0.7, top_k=50, top_p=1.0)
MAX_LENGTH = 1024


def _game_prompts() -> list[str]:
    """Play prompts of the demonstration games after 0-5 messages: both roles."""
    from spag.game.base import load_game

    game = load_game("taboo")
    prompts = game.load_prompts(None)
    games = json.loads((DATA / "demo_games.json").read_text())[:2]
    return [
        game.play_prompt(prompts, g["history"][:n], ("attacker", "defender")[n % 2],
                         g["target_word"], g["max_turns"])
        for g in games for n in range(6)
    ]  # fmt: skip


@pytest.fixture(scope="module")
def prompts():
    return _game_prompts()


@pytest.fixture(scope="module")
def engines(smollm2_dir):
    skip_without_vllm_cpu()
    from spag.generation import load_backend

    vllm = VLLMEngine()
    vllm.load(
        "smollm2", smollm2_dir, prompt_format="chat", trust_remote_code=False,
        tensor_parallel_size=1, seed=0, device="cpu", threads=1, dtype="float32",
        max_length=MAX_LENGTH, batch_size=64, enforce_eager=True,
    )  # fmt: skip
    hf = load_backend(
        "hf", smollm2_dir, prompt_format="chat", trust_remote_code=False,
        max_length=MAX_LENGTH, dtype="float32", batch_size=64,
    )  # fmt: skip
    yield hf, vllm
    vllm.close()


def _hf_tokens(hf, monkeypatch, prompts, sampling, game_ids=None):
    """The hf backend's replies with their token ids (its reply builder watched)."""
    seen: list[list[int]] = []
    build = type(hf)._reply

    def watched(self, tokens, prompt_truncated):
        seen.append(list(tokens))
        return build(self, tokens, prompt_truncated)

    monkeypatch.setattr(type(hf), "_reply", watched)
    replies = hf.generate(prompts, sampling, seed=0, game_ids=game_ids)
    monkeypatch.undo()
    # A reply's tokens up to and with its stop token, as vLLM returns them.
    return replies, [t[: r.num_tokens] for t, r in zip(seen, replies, strict=True)]


def test_greedy_replies_are_equal_token_for_token_or_part_at_a_tie(
    engines, prompts, smollm2_dir, monkeypatch
):
    import torch

    hf, vllm = engines
    h_replies, h_tokens = _hf_tokens(hf, monkeypatch, prompts, GREEDY)
    v = vllm.generate("smollm2", prompts, GREEDY, seed=0)
    assert [r["text"] for r in v["replies"]] != [""] * len(prompts)
    unexplained = []
    for i, (ht, vt) in enumerate(zip(h_tokens, v["token_ids"], strict=True)):
        if ht == vt:
            assert h_replies[i].text == v["replies"][i]["text"]
            continue
        k = next(
            j
            for j in range(min(len(ht), len(vt)) + 1)
            if j >= len(ht) or j >= len(vt) or ht[j] != vt[j]
        )
        ids = torch.tensor([v["prompt_ids"][i] + vt[:k]])
        with torch.no_grad():
            logits = hf.model(ids).logits[0, -1].float()
        gap = abs(float(logits[ht[k]] - logits[vt[k]])) if k < min(len(ht), len(vt)) else None
        if gap is None or gap > TIE:
            unexplained.append((i, k, gap, h_replies[i].text, v["replies"][i]["text"]))
    assert not unexplained, unexplained
    equal = sum(h == t for h, t in zip(h_tokens, v["token_ids"], strict=True))
    print(f"greedy: {equal} of {len(prompts)} replies equal token for token")


def test_sampled_replies_have_the_same_distribution(engines, prompts, monkeypatch):
    hf, vllm = engines
    batch = [p for p in prompts for _ in range(SEEDS)]
    ids = [f"p{i}-s{k}" for i in range(len(prompts)) for k in range(SEEDS)]
    h_replies, h_tokens = _hf_tokens(hf, monkeypatch, batch, SAMPLED, game_ids=ids)
    v = vllm.generate("smollm2", batch, SAMPLED, seed=0, game_ids=ids)
    v_tokens = v["token_ids"]

    (p_len, p_first, p_stop), (h_stop, v_stop) = distribution_tests(
        h_replies, h_tokens, v, counts=True
    )
    n = len(batch)
    report = (
        f"{n} replies each; lengths p={p_len:.3g}, first tokens p={p_first:.3g}, "
        f"ending at a stop token {h_stop} vs {v_stop} p={p_stop:.3g}"
    )
    print(report)
    assert min(p_len, p_first, p_stop) > ALPHA, report
    # Every reply keeps the game's minimum and maximum in both engines.
    for tokens in (h_tokens, v_tokens):
        assert all(SAMPLED.min_new_tokens <= len(t) <= SAMPLED.max_new_tokens for t in tokens)


def distribution_tests(h_replies, h_tokens, v, counts=False):
    """The three p-values (lengths, first tokens, share ending at a stop token) of the hf
    replies (and their tokens) against the vLLM worker's reply ``v``."""
    from collections import Counter

    from scipy import stats

    v_tokens = v["token_ids"]
    lengths = stats.mannwhitneyu([len(t) for t in h_tokens], [len(t) for t in v_tokens])
    first = Counter(("hf", t[0]) for t in h_tokens) + Counter(("vllm", t[0]) for t in v_tokens)
    pooled = Counter(tok for (_, tok) in first.elements())
    common = sorted(t for t, n in pooled.items() if n >= 5)
    table = [[first[(e, t)] for t in common] + [sum(first[(e, t)] for t in pooled if t not in common)]
             for e in ("hf", "vllm")]  # fmt: skip
    first_tokens = stats.chi2_contingency(table)
    h_stop = sum(r.finished_by_eos for r in h_replies)
    v_stop = sum(r["finished_by_eos"] for r in v["replies"])
    n = len(h_replies)
    stopped = stats.fisher_exact([[h_stop, n - h_stop], [v_stop, n - v_stop]])
    pvalues = (float(lengths.pvalue), float(first_tokens.pvalue), float(stopped.pvalue))
    return (pvalues, (h_stop, v_stop)) if counts else pvalues
