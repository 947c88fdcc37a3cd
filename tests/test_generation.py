"""The generation backends: prompt encoding, the hf backend's batching and stopping rules."""

from __future__ import annotations

import shutil

import pytest

from spag.errors import SpagInputError
from spag.game.settings import GameSettings
from spag.generation.base import check_model_dir, check_moves_fit, context_budget, derive_seed
from spag.generation.registry import BACKENDS, MODEL_BACKENDS, backend_options, load_backend
from spag.generation.settings import Sampling
from spag.models.rendering import PromptRenderer

# What spag play always gives a local backend.
LOCAL = dict(prompt_format=GameSettings.prompt_format, trust_remote_code=False)

PROMPTS = [
    "The game has just started. You are the attacker.",
    "hi",
    "A much longer prompt about a river, a bridge and a forest, with more words in it than the others.",
]


def _texts(replies) -> list[str]:
    return [r.text for r in replies]


@pytest.fixture(scope="module")
def backend(tiny_model_dir):
    return load_backend("hf", tiny_model_dir, **LOCAL, batch_size=2)


def _gen(backend, prompts, *, seed=7, game_ids=None, **kw):
    sampling = Sampling(**{**dict(max_new_tokens=6, top_k=0), **kw})
    return backend.generate(prompts, sampling, seed=seed, game_ids=game_ids)


def _bias_logits(backend, token_bias: dict[int, float]):
    """Add fixed biases to the model's logits (a model that always / never says EOS)."""
    import torch

    bias = torch.zeros(backend.model.config.vocab_size)
    for tok, b in token_bias.items():
        bias[tok] = b
    return backend.model.lm_head.register_forward_hook(lambda m, i, out: out + bias)


def test_derive_seed_is_stable_and_distinguishes_parts():
    assert derive_seed(1, 2, "policy") == derive_seed(1, 2, "policy")
    assert derive_seed(1, 2, "policy") != derive_seed(1, 2, "opponent")
    assert derive_seed(12, 3) != derive_seed(1, 23)
    assert 0 <= derive_seed("x") < 2**31


def test_encoder_adds_exactly_one_bos(tiny_model_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    enc = PromptRenderer(tok, "raw")
    assert enc.bos_id == tok.bos_token_id
    (ids, truncated), (ids2, _) = enc.encode(["hello there", "<s><s>hello there"], 100)
    assert ids[0] == tok.bos_token_id and tok.bos_token_id not in ids[1:]
    assert ids2 == ids  # a BOS string in the text is not doubled
    assert not truncated


def test_encoder_left_truncates_and_keeps_bos(tiny_model_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    enc = PromptRenderer(tok, "raw")
    text = " ".join(["word"] * 50) + " the end"
    ((full, _),) = enc.encode([text], 10_000)
    ((cut, truncated),) = enc.encode([text], 8)
    assert truncated and len(cut) == 8
    assert cut[0] == tok.bos_token_id
    assert cut[1:] == full[-7:]  # the last tokens survive
    with pytest.raises(SpagInputError, match="too small"):
        enc.encode([text], 1)


def test_encoder_without_bos_tokenizer():
    class NoBos:
        bos_token_id = None

        def __call__(self, texts, add_special_tokens=True):
            class R:
                pass

            r = R()
            r.input_ids = [list(range(len(t))) for t in texts] if isinstance(texts, list) else [0]
            return r

    enc = PromptRenderer(NoBos(), "raw")
    assert enc.bos_id is None
    assert enc.encode(["abc"], 10) == [([0, 1, 2], False)]


def test_model_dir_without_tokenizer_is_a_clear_error(tiny_model_dir, tmp_path):
    bare = tmp_path / "bare"
    bare.mkdir()
    for f in tiny_model_dir.iterdir():
        if f.name.startswith(("config", "model", "generation")):
            shutil.copy(f, bare / f.name)
    with pytest.raises(SpagInputError, match="no tokenizer"):
        check_model_dir(bare)
    with pytest.raises(SpagInputError, match="not found"):
        check_model_dir(tmp_path / "missing")
    with pytest.raises(SpagInputError, match="unknown generation backend"):
        load_backend("tgi", tiny_model_dir)


def test_registry_refuses_an_option_a_backend_does_not_take(tiny_model_dir):
    # A misspelt option is an error, not silently dropped.
    with pytest.raises(SpagInputError, match="does not take max_lenght"):
        load_backend("hf", tiny_model_dir, max_lenght=64)
    with pytest.raises(SpagInputError, match="does not take batch_size"):
        load_backend("openai", "openai:http://127.0.0.1:9/v1?model=m", batch_size=2)


def test_every_backend_is_in_the_registry_and_the_schema_lists_the_model_backends():
    from spag.config import load_schema

    schema = load_schema()["properties"]["selfplay"]["properties"]["backend"]
    assert tuple(schema["enum"]) == MODEL_BACKENDS
    assert set(MODEL_BACKENDS) < set(BACKENDS)
    for name in ("hf", "openai"):
        assert backend_options(name)


def test_model_dir_without_safetensors_is_refused(tiny_model_dir, tmp_path):
    other = tmp_path / "bin"
    shutil.copytree(tiny_model_dir, other)
    for f in other.glob("*.safetensors"):
        f.unlink()
    with pytest.raises(SpagInputError, match="safetensors"):
        check_model_dir(other)


def test_context_budget_caps_at_the_model_context(tiny_model_dir):
    assert context_budget(tiny_model_dir, None) == 2048
    assert context_budget(tiny_model_dir, 512) == 512
    assert context_budget(tiny_model_dir, 10**6) == 2048  # max_position_embeddings


def test_hf_one_bos_in_model_input(backend):
    seen = []
    original = backend._prompt_pass

    def spy(seqs, keys, shared_len):
        seen.extend(seqs)
        return original(seqs, keys, shared_len)

    backend._prompt_pass = spy
    try:
        _gen(backend, PROMPTS)
    finally:
        del backend._prompt_pass
    bos = backend.tokenizer.bos_token_id
    assert len(seen) == len(PROMPTS)
    for ids in seen:
        assert ids[0] == bos and ids.count(bos) == 1


def test_hf_greedy_equals_plain_generate_one_at_a_time(backend):
    """The batched decoder (shared prefix, padding, static cache) changes no token."""
    import torch
    from transformers import GenerationConfig

    from spag.game.taboo import TABOO

    prompts = TABOO.load_prompts()
    history = [{"role": "attacker", "content": "a sweet red fruit"}]
    texts = [
        prompts.play_prompt([], "attacker", "apple", 5),
        prompts.play_prompt(history, "defender", "apple", 5),
        prompts.play_prompt(history * 3, "defender", "apple", 5),
        "hi",
    ]
    replies = _gen(backend, texts, temperature=0.0, max_new_tokens=8)
    config = GenerationConfig(
        max_new_tokens=8,
        min_new_tokens=Sampling().min_new_tokens,
        do_sample=False,
        eos_token_id=backend.eos_ids,
        pad_token_id=backend.pad_id,
    )
    for text, reply in zip(texts, replies, strict=True):
        ids = torch.tensor([backend.tokenizer(text).input_ids])
        out = backend.model.generate(
            input_ids=ids, attention_mask=torch.ones_like(ids), generation_config=config
        )[0, ids.shape[1] :].tolist()
        eos = [k for k, t in enumerate(out) if t in backend.eos_ids]
        expected = backend.tokenizer.decode(
            out[: eos[0]] if eos else out, skip_special_tokens=True
        ).strip()
        assert reply.text == expected


def test_hf_same_seed_same_replies_and_order_kept(backend):
    a = _gen(backend, PROMPTS)
    b = _gen(backend, PROMPTS)
    c = _gen(backend, PROMPTS, seed=8)
    assert a == b
    assert a != c
    # Greedy batched replies equal one-at-a-time replies, in the caller's order.
    batched = _gen(backend, PROMPTS, temperature=0.0)
    single = [_gen(backend, [p], temperature=0.0)[0] for p in PROMPTS]
    assert [r.text for r in batched] == [r.text for r in single]


@pytest.mark.parametrize("minimum", [2, 1, 0])
def test_hf_eos_stops_a_reply_but_not_before_its_minimum(backend, minimum):
    eos = backend.eos_ids[0]
    hook = _bias_logits(backend, {eos: 1e4})
    try:
        replies = _gen(backend, PROMPTS, max_new_tokens=20, min_new_tokens=minimum)
    finally:
        hook.remove()
    for r in replies:
        assert r.finished_by_eos
        assert r.num_tokens == minimum + 1  # the forced tokens, then EOS


def test_a_minimum_a_move_cannot_meet_is_refused_naming_the_replies(tiny_model_dir):
    from transformers import AutoTokenizer

    from spag.game.kuhn_poker import KUHN_POKER
    from spag.game.taboo import TABOO

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    lengths = {
        f: len(tok.encode(f, add_special_tokens=False)) for f in KUHN_POKER.move_forms("bet")
    }
    assert lengths == {"bet": 2, "Bet": 2, " bet": 2, " Bet": 3}  # the tiny tokenizer's
    with pytest.raises(SpagInputError, match=r"selfplay\.min_new_tokens is 3.*'bet' \(2\)") as err:
        check_moves_fit(KUHN_POKER, tok, 3, "tiny")
    assert "' Bet'" not in str(err.value)  # three tokens: it can end
    check_moves_fit(KUHN_POKER, tok, 2, "tiny")
    check_moves_fit(TABOO, tok, 5, "tiny")  # free text: no move to fit


def test_hf_endless_reply_is_cut_and_marked(backend):
    eos = backend.eos_ids[0]
    hook = _bias_logits(backend, {eos: -1e4})
    try:
        replies = _gen(backend, PROMPTS, max_new_tokens=9)
    finally:
        hook.remove()
    assert all(r.num_tokens == 9 and not r.finished_by_eos for r in replies)


def test_hf_reply_of_special_tokens_only_is_empty_text(backend):
    tok = backend.tokenizer
    eos, unk = backend.eos_ids[0], tok.unk_token_id
    # Two unknown-token ids (dropped when decoding), then EOS: an empty reply.
    hook = _bias_logits(backend, {unk: 1e3, eos: 2e3})
    try:
        replies = _gen(backend, PROMPTS[:2], max_new_tokens=10)
    finally:
        hook.remove()
    assert [r.text for r in replies] == ["", ""]
    assert all(r.num_tokens == 3 and r.finished_by_eos for r in replies)


def test_hf_prompt_truncation_is_reported(tiny_model_dir):
    small = load_backend("hf", tiny_model_dir, **LOCAL, max_length=24)
    long_prompt = " ".join(["forest"] * 100)
    (r,) = _gen(small, [long_prompt], max_new_tokens=4)
    (s,) = _gen(small, ["hi"], max_new_tokens=4)
    assert r.prompt_truncated and not s.prompt_truncated
    with pytest.raises(SpagInputError, match="too small"):
        _gen(small, ["hi"], max_new_tokens=23)


def test_hf_reused_keys_values_change_no_reply(tiny_model_dir):
    """Games that keep their prompt's keys/values between calls play the same games."""
    from spag.game.selfplay import POLICY, play_games, selfplay_specs
    from spag.game.taboo import TABOO
    from spag.generation.hf_backend import HFBackend

    prompts = TABOO.load_prompts()
    specs = selfplay_specs(["apple", "river", "candle"], epoch=0, shard_index=0, games_per_word=1)
    histories = []
    for reuse in (True, False):
        b = HFBackend(tiny_model_dir, **LOCAL, batch_size=2, reuse_kv=reuse)
        for greedy in (True, False):
            settings = dict(
                max_turns=2,
                sampling=Sampling(max_new_tokens=4, temperature=0.0 if greedy else 1.2),
                seed=4,
            )
            games = play_games(specs, {POLICY: b}, prompts, game=TABOO, **settings)
            histories.append([g.history for g in games])
        assert b._kv_store == {} and b._kv_stored_bytes == 0  # finished games forgotten
    assert histories[0] == histories[2]
    assert histories[1] == histories[3]


def test_hf_counts_the_tokens_it_runs(tiny_model_dir):
    """The counters in spag play's log: prompt tokens, those run through the model
    (kept keys/values cover the rest), rows x decoding steps."""
    from spag.game.selfplay import POLICY, play_games, selfplay_specs
    from spag.game.taboo import TABOO
    from spag.generation.hf_backend import HFBackend

    specs = selfplay_specs(["apple", "river", "candle"], epoch=0, shard_index=0, games_per_word=1)
    # Sampled: the games' histories differ (greedy tiny-model games repeat one
    # another, and their common prefix would cover the histories).
    settings = dict(max_turns=2, sampling=Sampling(max_new_tokens=4), seed=4)
    # One slot: every prompt pass has one row, and the last game's calls one prompt.
    for batch_size in (8, 1):
        counted = {}
        for reuse in (True, False):
            b = HFBackend(tiny_model_dir, **LOCAL, batch_size=batch_size, reuse_kv=reuse)
            games = play_games(specs, {POLICY: b}, TABOO.load_prompts(), game=TABOO, **settings)
            counted[reuse] = b.stats
            messages = sum(len(g.message_tokens) for g in games)
            generated = sum(sum(g.message_tokens) for g in games)
            assert generated <= b.stats["decode_row_steps"] <= messages * 4
            assert 0 < b.stats["prompt_tokens_computed"] < b.stats["prompt_tokens"]
        assert counted[True]["prompt_tokens"] == counted[False]["prompt_tokens"]
        # Kept keys/values spare the later turns' histories.
        computed = {k: v["prompt_tokens_computed"] for k, v in counted.items()}
        assert computed[True] < computed[False], (batch_size, computed)


def test_top_k_sampling_draws_only_from_the_k_most_likely_tokens():
    import torch

    from spag.generation.hf_backend import HFBackend

    vocab, k, n = 1000, 5, 20_000
    g = torch.Generator().manual_seed(0)
    row = torch.randn(vocab, generator=g) * 3
    logits = row.expand(n, vocab).clone()
    gen = [torch.Generator().manual_seed(1 + i) for i in range(n)]  # one stream per row
    drawn = HFBackend._pick(logits, Sampling(temperature=1.0, top_k=k), gen)
    top = torch.topk(row, k).indices
    assert set(drawn.tolist()) == set(top.tolist())  # only the top k, and each of them
    # Frequencies follow the renormalised top-k distribution.
    want = torch.softmax(row[top], -1)
    got = torch.stack([(drawn == t).float().mean() for t in top])
    assert torch.allclose(got, want, atol=0.015), (got, want)
    # Without a limit, tokens outside the top k appear.
    flat = torch.zeros(n, vocab)
    free = HFBackend._pick(flat, Sampling(temperature=1.0, top_k=0), gen)
    assert len(set(free.tolist())) > k
    # top-p after top-k keeps a prefix of the k best.
    nucleus = HFBackend._pick(
        logits, Sampling(temperature=1.0, top_p=float(want[0]) - 1e-6, top_k=k), gen
    )
    assert set(nucleus.tolist()) == {int(top[0])}


def test_top_k_of_one_is_greedy_decoding(backend):
    sampled = _gen(backend, PROMPTS, top_k=1)
    greedy = _gen(backend, PROMPTS, temperature=0.0)
    assert [r.text for r in sampled] == [r.text for r in greedy]


def test_hf_game_replies_do_not_depend_on_the_other_games_of_the_batch(tiny_model_dir):
    hf = load_backend("hf", tiny_model_dir, **LOCAL, batch_size=8, max_length=256)
    prompts = PROMPTS[:3]
    ids = ["game-a", "game-b", "game-c"]
    opts = dict(max_new_tokens=12, temperature=1.2, top_p=0.95, top_k=50, seed=11)
    together = _texts(_gen(hf, prompts, game_ids=ids, **opts))
    alone = [
        _texts(_gen(hf, [p], game_ids=[g], **opts))[0] for p, g in zip(prompts, ids, strict=True)
    ]
    reordered = _texts(_gen(hf, prompts[::-1], game_ids=ids[::-1], **opts))[::-1]
    assert together == alone == reordered
    # Another game id draws another stream (the seed is not shared by position).
    other = _texts(_gen(hf, prompts, game_ids=["x", "y", "z"], **opts))
    assert other != together


def test_row_memory_counts_slots_prompt_passes_and_scores_only_where_stored():
    from transformers import LlamaConfig

    from spag.generation.hf_backend import PASS_SHARE, RowMemory

    # Llama-2-7B in bf16, 1.5k-token prompts, 256 new tokens, kept keys/values.
    config = LlamaConfig(
        hidden_size=4096, intermediate_size=11008, num_hidden_layers=32, num_attention_heads=32
    )
    per_token = 2 * 32 * 32 * 128 * 2
    fused = RowMemory.of(config, 2, fused_attention=True)
    stored = RowMemory.of(config, 2, fused_attention=False)
    # A slot holds its prompt and reply only: no padding, whatever kept keys/values do.
    assert fused.slot_bytes(1500, 256) == (1500 + 256) * per_token
    assert fused.slot_bytes(1500, 256) / 2**30 == pytest.approx(0.86, abs=0.01)
    # A prompt pass pads the known and own parts apart (kept keys/values) and holds the
    # MLP's activations; scores only where the attention stores them (CPU, eager).
    activations = 1500 * (3 * 11008 + 4 * 4096) * 2
    assert fused.pass_bytes(1500, reuse_kv=True) == 2 * 1500 * per_token + activations
    assert fused.pass_bytes(1500, reuse_kv=False) == 1500 * per_token + activations
    assert stored.pass_bytes(1500, True) == fused.pass_bytes(1500, True) + 2 * 1500 * 32 * 4 * 1500
    # Slots and a prompt pass of a quarter of them fit the budget, one more slot does not.
    budget = 60 * 2**30
    rows, pass_rows = fused.batch_rows(1500, 256, True, budget, most=1000)
    slot, row = fused.slot_bytes(1500, 256), fused.pass_bytes(1500, True)
    assert pass_rows >= -(-rows // PASS_SHARE)
    assert rows * slot + pass_rows * row <= budget
    assert (rows + 1) * slot + (-(-(rows + 1) // PASS_SHARE)) * row > budget
    # Fewer slots (batch_size): the prompt pass takes what they leave, up to every slot.
    assert fused.batch_rows(1500, 256, True, budget, most=8) == (8, 8)
    few, part = fused.batch_rows(1500, 256, True, budget, most=rows - 2)
    assert few == rows - 2 and part == min(few, (budget - few * slot) // row)
    assert fused.batch_rows(1500, 256, True, slot + row - 1, most=8) == (0, 1)


def test_llama2_7b_slots_on_an_80gb_card():
    """The paper's model in bf16 on an 80 GB card (80% of what the weights and CUDA's
    context leave): 500-token prompts (250 of them the shared rules) and 256 new tokens
    fit at least 100 slots, where rows padded to twice the prompt gave about 70; 2 GiB
    of kept keys/values would hold 8 of those prompts, so keeping does not pay."""
    from transformers import LlamaConfig

    from spag.generation.hf_backend import RowMemory

    config = LlamaConfig(
        hidden_size=4096, intermediate_size=11008, num_hidden_layers=32, num_attention_heads=32
    )
    memory = RowMemory.of(config, 2, fused_attention=True)
    free = 80 * 10**9 - 6_738_415_616 * 2 - int(1.5 * 2**30)
    budget, kept = int(0.8 * free), 2 * 2**30
    old_row = (2 * 500 + 256) * memory.kv_bytes_per_token + 500 * memory.activation_bytes_per_token
    assert 65 <= (budget - kept) // old_row <= 75
    with_kept, _ = memory.batch_rows(500, 256, True, budget - kept, 1000, shared_len=250)
    assert with_kept >= 100
    assert not memory.keeping_pays(kept, with_kept, 500)
    without, _ = memory.batch_rows(500, 256, False, budget, 1000, shared_len=250)
    assert without > with_kept
    # The tiny model on CPU keeps them: its prompts are small beside the 2 GiB.
    tiny = RowMemory.of(
        LlamaConfig(hidden_size=64, intermediate_size=192, num_hidden_layers=2,
                    num_attention_heads=4), 4, fused_attention=False,
    )  # fmt: skip
    assert tiny.keeping_pays(kept, 64, 400)


def test_hf_batch_memory_sets_the_slots_with_the_same_replies(tiny_model_dir):
    whole = load_backend("hf", tiny_model_dir, **LOCAL, batch_size=64, max_length=256)
    longest = max(len(ids) for ids, _ in whole.encoder.encode(PROMPTS, 256))
    memory = whole._memory
    one_row = memory.slot_bytes(longest, 10) + memory.pass_bytes(longest, whole.reuse_kv)
    split = load_backend(
        "hf",
        tiny_model_dir,
        **LOCAL,
        batch_size=64,
        max_length=256,
        batch_memory_gib=(one_row + 1) / 2**30,
    )
    assert split.batch_rows(longest, 10) == (1, 1)
    sizes = []
    real = split._prompt_pass
    split._prompt_pass = lambda seqs, *a: (sizes.append(len(seqs)), real(seqs, *a))[1]
    ids = [f"g{i}" for i in range(len(PROMPTS))]
    for opts in (
        dict(temperature=0.0, top_p=1.0, top_k=0),
        dict(temperature=1.2, top_p=1.0, top_k=50),
    ):
        sizes.clear()
        a = _texts(_gen(whole, PROMPTS, max_new_tokens=10, seed=5, game_ids=ids, **opts))
        b = _texts(_gen(split, PROMPTS, max_new_tokens=10, seed=5, game_ids=ids, **opts))
        assert a == b
        assert sizes == [1] * len(PROMPTS)  # one slot: the prompts went one by one
    tiny = load_backend(
        "hf", tiny_model_dir, **LOCAL, max_length=256, batch_memory_gib=(one_row // 4) / 2**30
    )
    with pytest.raises(SpagInputError, match="selfplay.batch_memory_gib"):
        _gen(tiny, PROMPTS, max_new_tokens=10, seed=5, temperature=0, top_p=1)


def test_cgroup_memory_limits_of_the_job_and_its_parents(tmp_path):
    """A SLURM job's cgroup is not the root: its own limit (and its parents') count,
    page cache that can be dropped does not."""
    from spag.generation.base import cgroup_limits

    fs = tmp_path / "cgroup"
    job = fs / "system.slice" / "slurmstepd.scope" / "job_7"
    job.mkdir(parents=True)
    (fs / "system.slice" / "memory.max").write_text("max\n")
    (fs / "system.slice" / "memory.current").write_text("999\n")
    (job / "memory.max").write_text(f"{8 * 2**30}\n")
    (job / "memory.current").write_text(f"{3 * 2**30}\n")
    (job / "memory.stat").write_text(f"anon 1\ninactive_file {2**30}\n")
    proc = tmp_path / "cgroup.txt"
    proc.write_text("0::/system.slice/slurmstepd.scope/job_7\n")
    assert cgroup_limits(proc, fs) == [(8 * 2**30, 2 * 2**30)]
    v1 = fs / "memory" / "slurm" / "uid_0"
    v1.mkdir(parents=True)
    (v1 / "memory.limit_in_bytes").write_text(f"{2**30}\n")
    (v1 / "memory.usage_in_bytes").write_text("100\n")
    proc.write_text("4:memory:/slurm/uid_0\n1:cpu:/\n")
    assert cgroup_limits(proc, fs) == [(2**30, 100)]
    proc.write_text("4:memory:/\n")
    assert cgroup_limits(proc, fs) == []  # no limit set


def test_hf_slots_are_refilled_as_replies_end_with_the_same_replies(tiny_model_dir):
    """Two slots, six prompts: each prompt enters a slot as soon as a reply ends, no
    row-step is spent on an empty slot (on CPU finished rows are seen at every step),
    and each reply is the one the prompt gets alone."""
    prompts = [f"{PROMPTS[i % 3]} (game {i})" for i in range(6)]
    hf = load_backend("hf", tiny_model_dir, **LOCAL, batch_size=2, max_length=256)
    alone = load_backend("hf", tiny_model_dir, **LOCAL, batch_size=1, max_length=256)
    ids = [f"g{i}" for i in range(6)]
    opts = dict(max_new_tokens=16, temperature=1.5, top_k=50, seed=3)
    passes = []
    real = hf._prompt_pass
    hf._prompt_pass = lambda seqs, *a: (passes.append(len(seqs)), real(seqs, *a))[1]
    # EOS made likely enough that replies end at different steps.
    hooks = [_bias_logits(b, {b.eos_ids[0]: 4.0}) for b in (hf, alone)]
    try:
        together = _gen(hf, prompts, game_ids=ids, **opts)
        single = [
            _gen(alone, [p], game_ids=[g], **opts)[0] for p, g in zip(prompts, ids, strict=True)
        ]
    finally:
        for hook in hooks:
            hook.remove()
    assert together == single
    assert len({r.num_tokens for r in together}) > 1  # replies of several lengths
    assert passes[0] == 2 and sum(passes) == 6  # later prompts entered freed slots
    made = sum(r.num_tokens for r in together)
    assert hf.stats["decode_tokens"] == made == hf.stats["decode_row_steps"]
