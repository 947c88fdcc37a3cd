"""The objective over the legal moves (``legal_po``, docs/design.md section 4): the samples
carry their move and the legal moves, the moves' forms are read on branches of the packed
row (exactly the log-probs of separate forward passes), the loss against values worked out
by hand, scoring and one training step on the tiny model, and the plan's refusals."""

from __future__ import annotations

import math

import pyarrow as pa
import pytest
import torch

from spag.data.tables import EPISODE_FIELDS, META_GAME, read_parquet, write_parquet
from spag.errors import SpagInputError
from spag.game.kuhn_poker import KUHN_POKER
from spag.game.rewards import RewardsSettings, assign_rewards
from spag.training.losses import legal_po_loss, segment_logsumexp

COEFFS = {"kl_coeff": 0.2, "sft_coeff": 0.5, "clip_eps": 0.2, "legal_mass_coeff": 1.0}


def hand(*contents: str) -> list[dict[str, str]]:
    return [{"role": KUHN_POKER.roles[i % 2], "content": c} for i, c in enumerate(contents)]


def kuhn_samples(scheme: str = "zero_sum") -> pa.Table:
    episodes = pa.Table.from_pylist(
        [
            {"episode_id": eid, "target_word": deal, "max_turns": 2, "history": hand(*moves)}
            for eid, deal, moves in [
                ("a", "kj", ["Bet", "fold"]),  # first wins 1
                ("b", "jq", ["check", "bet", "fold"]),  # second wins 1
                ("c", "qj", ["check", "I call"]),  # call is illegal after a check
            ]
        ],
        schema=pa.schema(EPISODE_FIELDS),
    )
    sft = pa.table({"query": ["What is 2 + 2?"], "target": ["4"]})
    return assign_rewards(
        episodes, RewardsSettings(scheme=scheme), seed=0, source="t", game=KUHN_POKER, sft=sft
    )


def test_samples_carry_their_move_and_the_legal_moves():
    table = kuhn_samples()
    rows = table.to_pylist()
    got = [(r["episode_id"], r["turn"], r["move"], r["legal_moves"]) for r in rows]
    assert got == [
        ("a", 0, "bet", ["check", "bet"]),
        ("a", 1, "fold", ["fold", "call"]),
        ("b", 0, "check", ["check", "bet"]),
        ("b", 1, "bet", ["check", "bet"]),
        ("b", 2, "fold", ["fold", "call"]),
        ("c", 0, "check", ["check", "bet"]),
        ("c", 1, "call", ["check", "bet"]),  # named, but not legal there
        (None, None, None, None),  # the instruction row
    ]
    assert table.schema.metadata[META_GAME] == b"kuhn_poker"


def test_segment_logsumexp_is_stable_and_exact():
    values = torch.tensor([-1000.0, -1001.0, 0.5, math.log(2.0), -3.0])
    segment = torch.tensor([0, 0, 1, 1, 3])
    got = segment_logsumexp(values, segment, 4)
    assert got[0].item() == pytest.approx(-1000.0 + math.log(1 + math.exp(-1)))
    assert got[1].item() == pytest.approx(math.log(math.exp(0.5) + 2.0))
    assert got[2].item() == float("-inf")
    assert got[3].item() == pytest.approx(-3.0)


def test_the_loss_against_values_worked_out_by_hand():
    """Rows: an instruction row, a game row with a legal move (the move term), a rule
    break (the sequence term), a legal move whose ratio leaves the clip range."""
    lp = torch.tensor([-1.0, -2.0, -0.5, -1.5], requires_grad=True)
    ref = torch.tensor([-1.2, -2.2, -0.4, -1.5])
    move = torch.tensor([0.0, math.log(0.55), 0.0, math.log(0.9)], requires_grad=True)
    ref_move = torch.tensor([0.0, math.log(0.5), 0.0, math.log(0.5)])
    legal = torch.tensor([0.0, math.log(0.8), math.log(0.5), math.log(0.9)], requires_grad=True)
    has_move = torch.tensor([False, True, False, True])
    has_legal = torch.tensor([False, True, True, True])
    reward = torch.tensor([1.0, -1.0, -1.0, 0.5])
    weight = torch.tensor([1.0, 1.0, 2.0, 1.0])
    is_sft = torch.tensor([True, False, False, False])
    loss, stats = legal_po_loss(
        lp, ref, move, ref_move, legal, has_move, has_legal, reward, weight, is_sft, **COEFFS
    )
    # Row 1: ratio 1.1 (in range), adv = -1 - 0.2 log 1.1; term -adv * ratio.
    r1, a1 = 1.1, -1.0 - 0.2 * math.log(1.1)
    ppo1 = -min(a1 * r1, a1 * 1.1)
    # Row 2: the sequence, ratio e^-0.1, adv = -1 + 0.02; weight 2.
    r2 = math.exp(-0.1)
    a2 = -1.0 - 0.2 * (-0.1)
    ppo2 = -min(a2 * r2, a2 * max(r2, 0.8))
    # Row 3: ratio 1.8, clipped at 1.2 for a positive advantage.
    r3, a3 = 1.8, 0.5 - 0.2 * math.log(1.8)
    ppo3 = -min(a3 * r3, a3 * 1.2)
    mass = -(math.log(0.8) + 2 * math.log(0.5) + math.log(0.9))
    expected = 0.5 * 1.0 + (ppo1 + 2 * ppo2 + ppo3) / 3 + mass / 3
    assert loss.item() == pytest.approx(expected, rel=1e-6)
    assert stats["clipped"].item() == 1.0
    loss.backward()
    # The move rows' gradient goes to the move log-prob, not to the sequence's.
    assert lp.grad[1].item() == 0.0 and lp.grad[3].item() == 0.0
    assert move.grad[1].item() != 0.0
    # Clipped: no gradient through the ratio, only through the KL in the advantage,
    # d/dx -(r - b x) (1 + eps) / n_game.
    assert move.grad[3].item() == pytest.approx(0.2 * 1.2 / 3)
    # Every game row with legal moves pulls its legal mass up by 1/n_game x weight.
    assert legal.grad.tolist() == pytest.approx([0.0, -1 / 3, -2 / 3, -1 / 3])


def test_a_negative_advantage_moves_mass_between_legal_moves_only():
    """At one softmax over four words (two legal), the move term's gradient leaves the
    illegal words' logits untouched: the invalid-action masking of policy gradients."""
    logits = torch.tensor([1.0, 0.5, 2.0, -1.0], requires_grad=True)
    logp = torch.log_softmax(logits, 0)
    legal_lp = torch.logsumexp(logp[:2], 0)
    move = (logp[0] - legal_lp).reshape(1)
    coeffs = dict(COEFFS, legal_mass_coeff=0.0)
    one = torch.ones(1)
    loss, _ = legal_po_loss(
        move.detach(), move.detach(), move, move.detach(), legal_lp.reshape(1),
        torch.tensor([True]), torch.tensor([True]), -one, one, torch.tensor([False]), **coeffs,
    )  # fmt: skip
    loss.backward()
    assert logits.grad[2].item() == 0.0 and logits.grad[3].item() == 0.0
    assert logits.grad[0].item() > 0 > logits.grad[1].item()  # descent: move 0 down
    assert logits.grad[:2].sum().item() == pytest.approx(0.0, abs=1e-7)


def _features(table, tokenizer, with_ref=False):
    from spag.training.collate import build_features

    return build_features(table, tokenizer, 256, "t", with_ref=with_ref, moves=True)[0]


def test_branches_give_the_log_probs_of_separate_forward_passes(tiny_model_dir):
    """Each legal move's probability read on the branches of the packed row equals the
    sum over its forms of the probability that the whole reply is the form (its tokens,
    then EOS: the raw format's end of turn) after the query, each scored in a forward
    pass of its own; the samples' own log-probs are those without branches."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from spag.training.packing import PackedCollator, packed_logprobs, use_packed_attention

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    use_packed_attention(model)
    model.eval()
    table = kuhn_samples()
    features = _features(table, tokenizer)
    batch = PackedCollator()(features)
    plain = PackedCollator()([{k: f[k] for k in ("input_ids", "target_start", "reward",
                              "weight", "is_sft", "episode")} for f in features])  # fmt: skip
    with torch.no_grad():
        lp, moves = packed_logprobs(model, batch)
        lp_plain, none = packed_logprobs(model, plain)
    assert none is None
    assert lp.tolist() == pytest.approx(lp_plain.tolist(), abs=1e-5)
    rows = table.to_pylist()
    for i, f in enumerate(features):
        row = rows[f["row"]]
        if row["type"] == "sft":
            assert not moves.has_legal[i] and not moves.has_move[i]
            continue
        trunk = f["input_ids"][: f["target_start"]]
        probs = []
        for m in row["legal_moves"]:
            total = 0.0
            for form in KUHN_POKER.move_forms(m):
                ids = tokenizer(form, add_special_tokens=False).input_ids
                ids = [*ids, tokenizer.eos_token_id]
                with torch.no_grad():
                    out = model(input_ids=torch.tensor([trunk + ids])).logits[0]
                logp = torch.log_softmax(out[len(trunk) - 1 : -1], -1)
                total += math.exp(float(logp.gather(1, torch.tensor(ids)[:, None]).sum()))
            probs.append(total)
        assert moves.legal[i].item() == pytest.approx(math.log(sum(probs)), abs=1e-5)
        if row["move"] in row["legal_moves"]:
            k = row["legal_moves"].index(row["move"])
            assert moves.has_move[i]
            assert moves.move[i].item() == pytest.approx(math.log(probs[k] / sum(probs)), abs=1e-5)
        else:
            assert not moves.has_move[i]


def test_scoring_and_a_training_step_start_at_ratio_one(tiny_model_dir, tmp_path):
    """``spag score-ref`` writes the reference's move log-probs on packed rows; a
    ``legal_po`` step from the same model starts with every ratio at 1."""
    from spag.training.run import train
    from spag.training.scoring import score_file
    from spag.training.settings import TrainConfig

    samples = tmp_path / "samples.parquet"
    write_parquet(kuhn_samples(), samples)
    scored = tmp_path / "scored.parquet"
    table = score_file(tiny_model_dir, samples, scored, max_length=256, device="cpu")
    rows = table.to_pylist()
    legal = [r["ref_move_logprob"] for r in rows if r["move"] in (r["legal_moves"] or ())]
    assert len(legal) == 6 and all(v is not None and v < 0 for v in legal)
    assert rows[6]["ref_move_logprob"] is None  # the illegal call
    assert read_parquet(scored).schema.metadata[META_GAME] == b"kuhn_poker"
    cfg = TrainConfig(
        model=str(tiny_model_dir),
        samples=str(scored),
        output=str(tmp_path / "out"),
        checkpoint_dir=str(tmp_path / "ckpt"),
        loss_log=str(tmp_path / "loss.tsv"),
        objective="legal_po",
        max_steps=1,
        per_device_batch_size=8,
        gradient_accumulation_steps=1,
        max_length=256,
        device="cpu",
    )
    train(cfg)
    header, first = (tmp_path / "loss.tsv").read_text().splitlines()[:2]
    step = dict(zip(header.split("\t"), first.split("\t"), strict=True))
    assert float(step["ratio_min"]) == pytest.approx(1.0, abs=1e-5)
    assert float(step["ratio_max"]) == pytest.approx(1.0, abs=1e-5)
    assert float(step["n_game"]) == 7

    # A batch whose only game row breaks the rules (no legal move named) trains too.
    keep = [i for i, r in enumerate(rows) if r["type"] == "sft" or r["move"] == "call"]
    assert len(keep) == 2
    write_parquet(read_parquet(scored).take(keep), scored)
    cfg.output, cfg.checkpoint_dir = str(tmp_path / "out2"), str(tmp_path / "ckpt2")
    train(cfg)
    last = (tmp_path / "loss.tsv").read_text().splitlines()[-1]
    step = dict(zip(header.split("\t"), last.split("\t"), strict=True))
    assert float(step["n_game"]) == 1 and math.isfinite(float(step["loss"]))


def test_samples_of_a_game_without_moves_are_refused_by_the_objective(tiny_model_dir):
    from training_samples import sample_rows
    from transformers import AutoTokenizer

    from spag.data.tables import SAMPLE_SCHEMA

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    table = pa.Table.from_pylist(sample_rows(4), schema=SAMPLE_SCHEMA)
    with pytest.raises(SpagInputError, match="carry no legal moves"):
        _features(table, tokenizer)


@pytest.mark.parametrize(
    "overlay, match",
    [
        ({"spag": {"objective": "legal_po"}}, "has no closed set of moves"),
        (
            {
                "game": {"name": "kuhn_poker"},
                "spag": {"objective": "legal_po", "padding_free": False},
            },
            "'spag.padding_free' must be true",
        ),
        ({"game": {"name": "kuhn_poker"}, "spag": {"legal_mass_coeff": 2.0}}, "means nothing"),
    ],
)
def test_the_plan_refuses_what_cannot_read_moves(overlay, match):
    with pytest.raises(SpagInputError, match=match):
        _config(overlay)


def test_the_plan_accepts_legal_po_on_kuhn_poker():
    config = _config({"game": {"name": "kuhn_poker"}, "spag": {"objective": "legal_po"}})
    assert config["spag"]["legal_mass_coeff"] == 1.0


def _config(overlay: dict) -> dict:
    """The workflow's config.yaml under ``overlay`` (and the tiny Kuhn Poker config where
    the overlay names that game), validated as the plan validates it."""
    import yaml
    from conftest import REPO

    from spag.config import _merge, read_config_files, validate_config

    files = [REPO / "config.yaml"]
    if overlay.get("game", {}).get("name") == "kuhn_poker":
        files.append(REPO / "configs" / "kuhn-poker-tiny.yaml")
    config, given = read_config_files(files)
    layer = yaml.safe_load(yaml.safe_dump(overlay))
    _merge(config, layer)
    _merge(given, layer)
    return validate_config(config, given=given)


def test_checkpoints_survive_an_upgrade_that_adds_a_setting_at_its_default():
    """A killed run's checkpoint record lacks ``legal_mass_coeff`` (added since): at its
    default it is the same run, at another value it is not."""
    from spag.training.checkpoints import same_run

    new = {"method": "offline_po", "kl_coeff": 0.2, "legal_mass_coeff": 1.0}
    old = {"method": "offline_po", "kl_coeff": 0.2}
    assert same_run(old, new)
    assert not same_run(old, dict(new, legal_mass_coeff=2.0))
    assert not same_run(dict(old, kl_coeff=0.1), new)
    assert not same_run(None, new)
