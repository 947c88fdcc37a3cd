"""rewards.scheme rae: role-conditioned advantages (a per-role baseline, an exponential
moving average of that role's results), carried from epoch to epoch in the run folder."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest
from test_rewards import GAMES, assign_rewards, episodes_table
from workflow_utils import make_workdir, snakemake

from spag.cli import main
from spag.config import validate_config
from spag.errors import SpagInputError
from spag.game.rewards import RoleBaselines
from spag.game.taboo import TABOO

# GAMES judged: g1 attacker wins, g2 defender wins, g3 attacker breaks the rules,
# g4 tie, g5 attacker wins (the defender's wrong guess).
RESULTS = [(1, -1), (-1, 1), (-1, 1), (0, 0), (1, -1)]  # (attacker, defender)


def by_hand(decay: float) -> list[tuple[float, float]]:
    """Each game's (attacker, defender) advantage: b <- d b + (1 - d) r, then r - b."""
    b = [0.0, 0.0]
    out = []
    for results in RESULTS:
        adv = []
        for i, r in enumerate(results):
            b[i] = decay * b[i] + (1 - decay) * r
            adv.append(r - b[i])
        out.append(tuple(adv))
    return out


def test_advantages_and_baselines_by_hand():
    baselines = RoleBaselines(0.5)
    table = assign_rewards(episodes_table(GAMES), scheme="rae", game=TABOO, baselines=baselines)
    rows = table.to_pylist()
    for (eid, *_), (attacker, defender) in zip(GAMES, by_hand(0.5), strict=True):
        for role, advantage in (("attacker", attacker), ("defender", defender)):
            mine = [r["reward"] for r in rows if r["episode_id"] == eid and r["role"] == role]
            # A role's messages share its advantage (the paper's discounted shares); g3's
            # defender has no message before the attacker's rule break, so no sample,
            # but its baseline moved all the same.
            assert sum(mine) == pytest.approx(advantage if mine else 0), (eid, role)
            assert bool(mine) == ((eid, role) != ("g3", "defender"))
    assert baselines.games == {"attacker": 5, "defender": 5}
    # Both roles learn: the defender's moves have samples of non-zero weight.
    assert {r["role"] for r in rows if r["weight"] > 0 and r["reward"] != 0} == {
        "attacker",
        "defender",
    }


def test_zero_advantages_can_be_dropped():
    # A tie (0 for both roles) against new baselines (0): both advantages are 0.
    kept = assign_rewards(episodes_table(GAMES[3:4]), scheme="rae", game=TABOO,
                          baselines=RoleBaselines(0.9))  # fmt: skip
    dropped = assign_rewards(episodes_table(GAMES[3:4]), scheme="rae", game=TABOO,
                             baselines=RoleBaselines(0.9), drop_zero_advantage=True)  # fmt: skip
    assert kept.num_rows == 2 and dropped.num_rows == 0


def test_a_rule_break_costs_what_is_configured():
    rows = assign_rewards(episodes_table(GAMES[2:3]), scheme="rae", game=TABOO,
                          baselines=RoleBaselines(0.5), rule_break_cost=3.0).to_pylist()  # fmt: skip
    # The attacker broke the rules: -3 against a baseline of -1.5.
    assert sum(r["reward"] for r in rows if r["role"] == "attacker") == pytest.approx(-1.5)


def test_baselines_carried_between_epochs_give_one_pass(tmp_path):
    """Two epochs with the first's baselines carried: the same rewards as one pass over
    all the games, and a rerun of the second epoch gives the same samples."""
    whole = assign_rewards(episodes_table(GAMES), scheme="rae", game=TABOO,
                           baselines=RoleBaselines(0.8)).to_pylist()  # fmt: skip
    first = RoleBaselines(0.8)
    head = assign_rewards(episodes_table(GAMES[:2]), scheme="rae", game=TABOO, baselines=first)
    first.save(tmp_path / "b.json")
    tail = [
        assign_rewards(episodes_table(GAMES[2:]), scheme="rae", game=TABOO,
                       baselines=RoleBaselines.load(tmp_path / "b.json", 0.8))
        for _ in range(2)
    ]  # fmt: skip
    assert tail[0].equals(tail[1])
    rewards = [r["reward"] for r in head.to_pylist() + tail[0].to_pylist()]
    assert rewards == pytest.approx([r["reward"] for r in whole])
    with pytest.raises(SpagInputError, match="baseline_decay 0.8, this epoch asks 0.9"):
        RoleBaselines.load(tmp_path / "b.json", 0.9)
    (tmp_path / "bad.json").write_text("[]")
    with pytest.raises(SpagInputError, match="bad.json: not a file of role baselines"):
        RoleBaselines.load(tmp_path / "bad.json", 0.8)


def test_command_reads_and_writes_the_baselines(tmp_path, capsys):
    episodes = tmp_path / "episodes.parquet"
    pq.write_table(episodes_table(GAMES), episodes)
    common = ["assign-rewards", "--episodes", str(episodes), "--game", "taboo"]
    assert main([*common, "--output", str(tmp_path / "e1.parquet"), "--scheme", "rae",
                 "--baseline-out", str(tmp_path / "e1.json")]) == 0  # fmt: skip
    saved = json.loads((tmp_path / "e1.json").read_text())
    assert saved["decay"] == 0.95 and saved["games"] == {"attacker": 5, "defender": 5}
    assert main([*common, "--output", str(tmp_path / "e2.parquet"), "--scheme", "rae",
                 "--baseline-in", str(tmp_path / "e1.json"),
                 "--baseline-out", str(tmp_path / "e2.json")]) == 0  # fmt: skip
    assert json.loads((tmp_path / "e2.json").read_text())["games"]["defender"] == 10
    assert main([*common, "--output", str(tmp_path / "w.parquet"), "--baseline-in",
                 str(tmp_path / "e1.json")]) != 0  # fmt: skip
    assert "rae's; the scheme is winners" in capsys.readouterr().err
    assert not (tmp_path / "w.parquet").exists()


@pytest.mark.parametrize("key", ["baseline_decay", "drop_zero_advantage", "rule_break_cost"])
def test_rae_settings_under_another_scheme_are_refused(key):
    value = {"baseline_decay": 0.9, "drop_zero_advantage": True, "rule_break_cost": 2.0}[key]
    refused = f"'rewards.{key}' is not read by rewards.scheme winners \\(it is a setting of rae\\)"
    with pytest.raises(SpagInputError, match=refused):
        validate_config({"rewards": {key: value}}, source="c.yaml")
    validate_config({"rewards": {"scheme": "rae", key: value}}, source="c.yaml")
    with pytest.raises(SpagInputError, match="rewards.baseline_decay"):
        validate_config({"rewards": {"scheme": "rae", "baseline_decay": 1.0}}, source="c.yaml")


def test_a_setting_no_scheme_reads_is_refused(monkeypatch):
    """A scheme declares the keys it reads: one that does not read the decay refuses it."""
    from spag.game import rewards

    def flat(game, episode, outcome, n, settings):
        return [(k, 1.0) for k, _ in rewards.winners(game, episode, outcome, n, settings)]

    monkeypatch.setitem(rewards.REWARD_SCHEMES, "flat", rewards.Scheme(flat, ()))
    validate_config({"rewards": {"scheme": "flat"}}, source="c.yaml")
    refused = "'rewards.decay_weight' is not read by rewards.scheme flat"
    with pytest.raises(SpagInputError, match=refused):
        validate_config({"rewards": {"scheme": "flat", "decay_weight": 0.5}}, source="c.yaml")


def test_each_epoch_reads_the_baselines_the_one_before_left(tmp_path):
    wd = make_workdir(tmp_path / "run", {"epochs": 2, "rewards": {"scheme": "rae"}})
    res = snakemake(wd, "spag_epoch2", "-n", "-p")
    assert res.returncode == 0, res.stderr
    lines = [line for line in res.stdout.splitlines() if "spag assign-rewards" in line]
    assert len(lines) == 2
    first, second = sorted(lines, key=lambda line: "epoch2" in line)
    assert "--baseline-in" not in first and "epoch1/role_baselines.json" in first
    assert "--baseline-in results/epoch1/role_baselines.json" in second
    assert "--baseline-out results/epoch2/role_baselines.json" in second
    # Other schemes' command lines carry none of it.
    plain = snakemake(make_workdir(tmp_path / "plain"), "spag_epoch1", "-n", "-p")
    assert plain.returncode == 0, plain.stderr
    assert "role_baselines" not in plain.stdout and "--baseline-" not in plain.stdout
