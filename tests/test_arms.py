"""A SPAG run against its control arm: every metric of each model, paired where games
pair, from two run folders (`spag compare-arms`)."""

from __future__ import annotations

import csv

import pytest
from test_eval_paired import _episodes
from test_hints import _table

from spag.cli import main
from spag.data.tables import write_parquet
from spag.errors import SpagInputError
from spag.evaluation.arms import compare_arms
from spag.game.taboo import TABOO


def _arm(root, wins_as_attacker, hint_ranks, exploitability, sampled_wins=None):
    """A run folder whose M1 wins ``wins_as_attacker`` of 12 attacker games (and, given
    ``sampled_wins``, that many of 12 sampled ones) and whose hints rank each secret
    ``hint_ranks[i]`` after its one attacker message."""
    results = root / "results"
    (results / "epoch1" / "eval").mkdir(parents=True)
    _episodes(results / "epoch1" / "eval" / "games.parquet", "epoch1", 1, wins_as_attacker)
    if sampled_wins is not None:
        (results / "epoch1" / "eval" / "sampled").mkdir()
        _episodes(results / "epoch1/eval/sampled/games.parquet", "epoch1", 1, sampled_wins)
    (results / "eval" / "games").mkdir(parents=True)
    _episodes(results / "eval" / "games" / "imitation.parquet", "imitation", 0, 3)
    (results / "eval" / "hints").mkdir()
    rows = [(f"a{i}", f"word{i}", "attacker", 1, r) for i, r in enumerate(hint_ranks)]
    write_parquet(_table(rows), results / "eval" / "hints" / "epoch1.parquet")
    (results / "summary").mkdir()
    (results / "summary" / "poker.tsv").write_text(
        "model\texploitability\tev_vs_random\tev_vs_equilibrium\tillegal_mass\n"
        "imitation\t0.35\t0.2\t-0.12\t0.1\n"
        f"epoch1\t{exploitability}\t0.25\t-0.1\t0.05\n"
    )
    return root


def test_arms_are_paired_metric_by_metric(tmp_path):
    spag = _arm(tmp_path / "spag", 12, [1] * 12, 0.30)
    control = _arm(tmp_path / "control", 2, [5] * 12, 0.40)
    rows = {(r["metric"], r["group"]): r for r in compare_arms(spag, control, TABOO)}
    wins = rows[("win_rate", "attacker")]
    assert (wins["spag"], wins["control"], wins["pairs"]) == (1.0, pytest.approx(2 / 12), 12)
    assert wins["diff"] == pytest.approx(10 / 12) and 0 < wins["lo"] <= wins["hi"] <= 1
    assert wins["p"] == pytest.approx(2 / 1024)  # McNemar: 10 discordant pairs, one way
    assert rows[("win_rate", "defender")]["diff"] == 0.0
    best = rows[("hints_mrr_best", "all")]
    assert (best["spag"], best["control"], best["diff"]) == pytest.approx((1.0, 0.2, 0.8))
    assert best["lo"] == pytest.approx(0.8) and best["pairs"] == 12
    # The calibrated rank under its own name (here equal to the raw one).
    calibrated = rows[("hints_calibrated_mrr_best", "all")]
    assert (calibrated["spag"], calibrated["control"]) == pytest.approx((1.0, 0.2))
    exploit = rows[("exploitability", "all")]
    assert exploit["diff"] == pytest.approx(-0.1)
    assert exploit["lo"] != exploit["lo"]  # exact: no interval (NaN)
    assert not any(metric.startswith("sampled_") for metric, _ in rows)  # none played


def test_sampled_games_are_paired_beside_the_greedy_ones(tmp_path):
    spag = _arm(tmp_path / "spag", 6, [2] * 12, 0.3, sampled_wins=9)
    control = _arm(tmp_path / "control", 6, [2] * 12, 0.3, sampled_wins=3)
    rows = {(r["metric"], r["group"]): r for r in compare_arms(spag, control, TABOO)}
    assert rows[("win_rate", "attacker")]["diff"] == 0.0
    sampled = rows[("sampled_win_rate", "attacker")]
    assert (sampled["spag"], sampled["control"], sampled["pairs"]) == (0.75, 0.25, 12)
    assert sampled["diff"] == pytest.approx(0.5) and sampled["p"] == pytest.approx(2 / 64)


def test_the_command_writes_one_long_table(tmp_path):
    spag = _arm(tmp_path / "spag", 6, [2] * 12, 0.3)
    control = _arm(tmp_path / "control", 6, [2] * 12, 0.3)
    out = tmp_path / "arms.tsv"
    assert main(["compare-arms", "--spag", str(spag), "--control", str(control),
                 "--game", "taboo", "--output", str(out)]) == 0  # fmt: skip
    with open(out, newline="") as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    assert list(rows[0]) == ["model", "metric", "group", "pairs", "spag", "control", "diff",
                             "lo", "hi", "p"]  # fmt: skip
    assert all(float(r["diff"]) == 0.0 for r in rows)


def test_arms_that_did_not_play_the_same_secrets_are_refused(tmp_path):
    spag = _arm(tmp_path / "spag", 6, [2] * 12, 0.3)
    control = tmp_path / "control"
    (control / "results").mkdir(parents=True)
    with pytest.raises(SpagInputError, match="no evaluated model in both"):
        compare_arms(spag, control, TABOO)
    with pytest.raises(SpagInputError, match="--control: .* has no results/ folder"):
        compare_arms(spag, tmp_path / "nowhere", TABOO)


def test_means_cover_the_paired_games_and_m0_can_be_checked(tmp_path):
    spag = _arm(tmp_path / "spag", 12, [1] * 12, 0.30)
    control = _arm(tmp_path / "control", 12, [2] * 6, 0.30)  # hints of 6 games only
    rows = {(r["model"], r["metric"], r["group"]): r
            for r in compare_arms(spag, control, TABOO, models=["imitation", "epoch1"])}  # fmt: skip
    best = rows[("epoch1", "hints_mrr_best", "attacker")]
    assert best["pairs"] == 6 and best["spag"] - best["control"] == pytest.approx(best["diff"])
    m0 = rows[("imitation", "win_rate", "all")]
    assert m0["pairs"] == 24 and m0["diff"] == 0.0 and m0["spag"] == m0["control"]
