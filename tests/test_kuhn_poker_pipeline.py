"""Kuhn Poker through the pipeline's parts: its deals and scripted demonstrations, the
zero-sum reward scheme, the config's game-specific keys and defaults, and the exact
read-out of a model's strategy and the table built from it."""

from __future__ import annotations

import copy
import math
from fractions import Fraction

import pytest
import yaml
from workflow_utils import REPO

from spag.config import validate_config
from spag.errors import SpagInputError
from spag.evaluation.strategy import (
    STRATEGY_COLUMNS,
    load_strategy,
    read_strategy,
    strategy_metrics,
    summarize_strategies,
    write_tsv,
)
from spag.game import kuhn_poker as kuhn
from spag.game.base import load_game
from spag.game.imitation import imitation_samples
from spag.game.kuhn_poker import KUHN_POKER, infoset_prompt, play_hand
from spag.game.rewards import REWARD_SCHEMES, RewardsSettings, assign_rewards
from spag.game.scripted import scripted_games
from spag.game.taboo import TABOO

DEFAULT = yaml.safe_load((REPO / "config.yaml").read_text())


def hand(*contents: str) -> list[dict[str, str]]:
    return [{"role": KUHN_POKER.roles[i % 2], "content": c} for i, c in enumerate(contents)]


class _Episode:
    def __init__(self, history, secret="kq"):
        self.history, self.secret, self.max_turns = history, secret, 2


# ------------------------------------------------------------------ deals, scripted player
def test_the_game_is_registered_with_its_six_deals():
    game = load_game("kuhn_poker")
    assert sorted(game.deals) == sorted(["jq", "jk", "qj", "qk", "kj", "kq"])
    assert game.prompts_file == "data/kuhn_poker_prompts.yaml"
    assert (REPO / game.prompts_file).is_file()


def test_scripted_games_are_legal_seeded_and_cover_every_deal():
    table = scripted_games(KUHN_POKER, KUHN_POKER.deals, 50, seed=3, max_turns=2)
    again = scripted_games(KUHN_POKER, KUHN_POKER.deals, 50, seed=3, max_turns=2)
    other = scripted_games(KUHN_POKER, KUHN_POKER.deals, 50, seed=4, max_turns=2)
    assert table.equals(again) and not table.equals(other)
    assert table.num_rows == 300
    histories = table.column("history").to_pylist()
    secrets = table.column("target_word").to_pylist()
    assert {s: secrets.count(s) for s in set(secrets)} == dict.fromkeys(KUHN_POKER.deals, 50)
    for history, secret in zip(histories, secrets, strict=True):
        moves, breaker = play_hand(history)
        assert breaker is None and kuhn.to_act(moves) is None  # legal and finished
        outcome, _ = KUHN_POKER.judge(history, secret, 2)
        assert KUHN_POKER.winner(outcome) is not None
    # Uniformly random: the first move is a bet about half the time.
    first = [h[0]["content"] for h in histories]
    assert 0.4 < first.count("bet") / len(first) < 0.6


def test_taboo_has_no_scripted_player():
    with pytest.raises(SpagInputError, match="no scripted player"):
        scripted_games(TABOO, ["apple"], 1, seed=0, max_turns=5)


# ------------------------------------------------------------------ zero-sum rewards
def test_zero_sum_gives_each_seat_its_chips():
    scheme = REWARD_SCHEMES["zero_sum"].pick
    # qk: bet, call -> the second player wins 2 chips.
    history = hand("bet", "call")
    outcome, n = KUHN_POKER.judge(history, "qk", 2)
    assert scheme(KUHN_POKER, _Episode(history, "qk"), outcome, n, RewardsSettings()) == [
        (0, -2.0),
        (1, 2.0),
    ]
    # kj: check, bet, fold -> the second wins 1; the first's two moves share -1,
    # the later one weighted 1/0.8 as much (the paper's decay).
    history = hand("check", "bet", "fold")
    outcome, n = KUHN_POKER.judge(history, "kj", 2)
    picked = dict(scheme(KUHN_POKER, _Episode(history, "kj"), outcome, n, RewardsSettings()))
    assert picked[1] == pytest.approx(1.0)
    assert picked[0] + picked[2] == pytest.approx(-1.0)
    assert picked[2] / picked[0] == pytest.approx(1 / 0.8)
    # A rule break: its author's move is pushed down, the other seat's up.
    history = hand("check", "call")
    outcome, n = KUHN_POKER.judge(history, "kj", 2)
    assert scheme(KUHN_POKER, _Episode(history, "kj"), outcome, n, RewardsSettings()) == [
        (0, 1.0),
        (1, -1.0),
    ]


def test_zero_sum_for_taboo_and_winners_unchanged():
    history = [
        {"role": "attacker", "content": "a fruit"},
        {"role": "defender", "content": "I know the word! It is pear!"},
    ]
    outcome, n = TABOO.judge(history, "apple", 5)
    assert outcome == "attacker_wins"
    assert REWARD_SCHEMES["zero_sum"].pick(TABOO, _Episode(history), outcome, n, RewardsSettings()) == [
        (0, 1.0), (1, -1.0),
    ]  # fmt: skip
    assert REWARD_SCHEMES["winners"].pick(
        TABOO, _Episode(history), outcome, n, RewardsSettings()
    ) == [(0, 1.0)]


def test_assign_rewards_with_zero_sum_on_poker_hands():
    table = scripted_games(KUHN_POKER, KUHN_POKER.deals, 10, seed=0, max_turns=2)
    winners = assign_rewards(table, RewardsSettings(), seed=0, source="t", game=KUHN_POKER)
    zero = assign_rewards(table, RewardsSettings(scheme="zero_sum"), seed=0, source="t",
                          game=KUHN_POKER)  # fmt: skip
    assert min(winners.column("reward").to_pylist()) > 0
    rewards = zero.column("reward").to_pylist()
    assert min(rewards) < 0 < max(rewards)
    assert zero.num_rows > winners.num_rows  # the losers' moves too
    assert sum(rewards) == pytest.approx(0.0, abs=1e-9)  # zero-sum, hand by hand


def test_m0_imitates_every_scripted_move_or_only_the_winners():
    """Folding never wins a hand: the winners' moves hold no fold, so an M0 imitating
    them never folds; every move of the scripted hands holds each legal move."""
    table = scripted_games(KUHN_POKER, KUHN_POKER.deals, 20, seed=1, max_turns=2)
    messages = sum(len(h) for h in table.column("history").to_pylist())
    winners = imitation_samples(table, seed=0, source="t", game=KUHN_POKER, imitate="winners")
    every = imitation_samples(table, seed=0, source="t", game=KUHN_POKER, imitate="every")
    assert "fold" not in winners.column("move").to_pylist()
    assert every.num_rows == messages  # no hand breaks a rule
    moves = every.column("move").to_pylist()
    assert set(moves) == set(KUHN_POKER.move_set)
    assert set(every.column("reward").to_pylist()) == {1.0}
    assert set(every.column("weight").to_pylist()) == {1.0}
    with pytest.raises(SpagInputError, match="imitate 'all'"):
        imitation_samples(table, seed=0, source="t", game=KUHN_POKER, imitate="all")


def test_scripted_settings_without_scripted_demonstrations_are_refused():
    layers = {"game": {"name": "kuhn_poker"}, "data": {"imitation": "data/demo_games.json",
              "scripted": {"imitate": "every"}}}  # fmt: skip
    with pytest.raises(SpagInputError, match=r"data\.scripted\.imitate' means nothing unless"):
        validate_config(_config(**copy.deepcopy(layers)), given=layers)


# ------------------------------------------------------------------ config
def _config(**layers):
    config = copy.deepcopy(DEFAULT)
    for key, value in layers.items():
        config.setdefault(key, {}).update(value)
    return config


def test_poker_defaults_come_from_the_game():
    config = _config(game={"name": "kuhn_poker"})
    given = {"game": {"name": "kuhn_poker"}}
    validate_config(config, given=given)
    assert config["game"]["prompts"] == "data/kuhn_poker_prompts.yaml"
    assert config["data"]["imitation"] == "scripted"
    taboo = validate_config(_config())
    assert taboo["game"]["prompts"] == "data/prompts.yaml"
    assert taboo["data"]["imitation"] == "data/demo_games.json"


def test_a_move_game_takes_replies_of_one_token_unless_set():
    """Kuhn Poker's replies are one word, which a tokenizer may have as one token: the
    end of the turn may follow it. Taboo keeps the project's two-token minimum."""
    kuhn = validate_config(
        _config(game={"name": "kuhn_poker"}), given={"game": {"name": "kuhn_poker"}}
    )
    assert kuhn["selfplay"]["min_new_tokens"] == 1
    assert validate_config(_config())["selfplay"]["min_new_tokens"] == 2
    layers = {"game": {"name": "kuhn_poker"}, "selfplay": {"min_new_tokens": 2}}
    kept = validate_config(_config(**copy.deepcopy(layers)), given=layers)
    assert kept["selfplay"]["min_new_tokens"] == 2


@pytest.mark.parametrize(
    "layers, key",
    [
        ({"game": {"name": "kuhn_poker"}, "words": {"num_train": 10}}, "words.num_train"),
        ({"data": {"imitation": "scripted"}}, "data.imitation"),
        ({"data": {"scripted": {"games_per_secret": 5}}}, "data.scripted.games_per_secret"),
        ({"game": {"name": "kuhn_poker"}, "selfplay": {"num_shards": 7}}, "selfplay.num_shards"),
        ({"game": {"name": "holdem"}}, "game.name"),
    ],
)
def test_keys_the_game_cannot_use_are_refused_by_name(layers, key):
    with pytest.raises(SpagInputError, match=key.replace(".", r"\.")):
        validate_config(_config(**copy.deepcopy(layers)), given=layers)


def test_word_keys_of_the_workflow_file_are_not_the_users():
    # config.yaml's Taboo words sit under every --configfile; only the user's count.
    validate_config(_config(game={"name": "kuhn_poker"}), given={"game": {"name": "kuhn_poker"}})


# ------------------------------------------------------------------ the exact read-out
def _table(strategy, illegal=0.0):
    rows = []
    for infoset in kuhn.INFOSETS:
        passive, aggressive = kuhn.legal_moves(infoset[2])
        p = float(strategy[infoset][aggressive])
        rows.append(dict(seat=infoset[0], card=infoset[1], history=" ".join(infoset[2]) or "-",
                         passive=passive, aggressive=aggressive, p_passive=1 - p,
                         p_aggressive=p, aggressive_probability=p, illegal_mass=illegal))  # fmt: skip
    return rows


def test_strategy_tables_give_the_known_values(tmp_path):
    paths = {}
    for name, strategy in (("eq", kuhn.equilibrium()), ("uniform", kuhn.uniform_random())):
        paths[name] = tmp_path / f"{name}.tsv"
        write_tsv(_table(strategy, 0.25), STRATEGY_COLUMNS, paths[name])
    rows = {r["model"]: r for r in summarize_strategies(paths)}
    assert rows["eq"]["exploitability"] == pytest.approx(0.0, abs=1e-5)
    assert rows["eq"]["ev_vs_equilibrium"] == pytest.approx(0.0, abs=1e-5)
    assert rows["uniform"]["exploitability"] == pytest.approx(11 / 24, abs=1e-5)
    assert rows["uniform"]["ev_vs_random"] == pytest.approx(0.0, abs=1e-9)
    # The equilibrium wins against the random player; the random player loses to it.
    assert rows["eq"]["ev_vs_random"] > 0 > rows["uniform"]["ev_vs_equilibrium"]
    assert rows["eq"]["illegal_mass"] == pytest.approx(0.25)


def test_a_strategy_table_missing_a_set_is_refused(tmp_path):
    path = tmp_path / "s.tsv"
    write_tsv(_table(kuhn.uniform_random())[:-1], STRATEGY_COLUMNS, path)
    with pytest.raises(SpagInputError, match="information set"):
        load_strategy(path)


def test_infoset_prompts_show_the_seat_its_card_and_moves():
    prompts = KUHN_POKER.load_prompts()
    for infoset in kuhn.INFOSETS:
        history, role, secret = infoset_prompt(infoset)
        text = KUHN_POKER.play_prompt(prompts, history, role, secret, 2)
        assert f"your card is {infoset[1]}" in text
        assert " or ".join(kuhn.legal_moves(infoset[2])) in text
        assert play_hand(history) == (infoset[2], None)


def test_read_strategy_matches_the_models_own_next_token_probabilities(tiny_model_dir):
    """The read-out against an independent computation: the model's probability that
    the whole reply is a move form (its tokens, then EOS), summed over the forms, by a
    plain forward pass per prompt."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    prompts = KUHN_POKER.load_prompts()
    rows = read_strategy(
        tiny_model_dir,
        KUHN_POKER,
        prompts,
        prompt_format="raw",
        max_turns=2,
        dtype="float32",
        device="cpu",
        trust_remote_code=False,
    )
    assert len(rows) == 12
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    for row, infoset in zip(rows, kuhn.INFOSETS, strict=True):
        history, role, secret = infoset_prompt(infoset)
        text = KUHN_POKER.play_prompt(prompts, history, role, secret, 2)
        ids = tok(text).input_ids
        probs = {}
        for move in (row["passive"], row["aggressive"]):
            total = 0.0
            for form in (move, move.capitalize(), f" {move}", f" {move.capitalize()}"):
                target = [*tok(form, add_special_tokens=False).input_ids, tok.eos_token_id]
                seq = torch.tensor([ids + target])
                with torch.no_grad():
                    logp = torch.log_softmax(model(seq).logits[0].float(), -1)
                total += math.exp(
                    sum(float(logp[len(ids) - 1 + i, t]) for i, t in enumerate(target))
                )
            probs[move] = total
        legal = sum(probs.values())
        assert row["p_aggressive"] == pytest.approx(probs[row["aggressive"]], rel=1e-4)
        assert row["aggressive_probability"] == pytest.approx(
            probs[row["aggressive"]] / legal, rel=1e-4
        )
        assert row["illegal_mass"] == pytest.approx(1 - legal, abs=1e-6)
    # An untrained model spreads its mass: most of it is outside the legal moves.
    assert sum(r["illegal_mass"] for r in rows) / 12 > 0.5


def test_metrics_of_a_pure_strategy_are_exact():
    always_bet = {s: {m: float(i == 1) for i, m in enumerate(kuhn.legal_moves(s[2]))}
                  for s in kuhn.INFOSETS}  # fmt: skip
    m = strategy_metrics(always_bet)
    assert m["exploitability"] == pytest.approx(1 / 3)
    assert m["ev_vs_equilibrium"] == pytest.approx(
        kuhn.value_against(always_bet, kuhn.equilibrium(Fraction(1, 6)))
    )


def test_a_prompts_file_without_a_seats_prompt_is_refused_at_plan_time(tmp_path, monkeypatch):
    from spag.config import check_prompts

    shipped = yaml.safe_load((REPO / "data/kuhn_poker_prompts.yaml").read_text())
    del shipped["play"]["instruction"]
    path = tmp_path / "prompts.yaml"
    path.write_text(yaml.safe_dump(shipped))
    layers = {"game": {"name": "kuhn_poker", "prompts": str(path)}}
    config = validate_config(_config(**copy.deepcopy(layers)), given=layers)
    monkeypatch.chdir(REPO)
    with pytest.raises(SpagInputError, match=r"game\.prompts.*play\.instruction"):
        check_prompts(config)
