"""Kuhn Poker's learning test: the tiny config from nothing, on CPU, seeded. M3 must win
more chips per hand than M0 against the uniform-random player, computed exactly from
each model's strategy; both models' exploitability is reported."""

from __future__ import annotations

import pytest
import yaml
from workflow_utils import REPO, make_workdir, snakemake

from spag.evaluation.strategy import summarize_strategies

pytestmark = pytest.mark.e2e


def test_spag_on_kuhn_poker_wins_more_chips_than_m0(tmp_path):
    overlay = yaml.safe_load((REPO / "configs/kuhn-poker-tiny.yaml").read_text())
    # One self-play job per epoch instead of three: the same 768 hands, drawn under one
    # shard's seed. Shards prove nothing here (test_workflow_e2e.py and test_slurm.py
    # check them), and each job pays about 9 CPU-seconds of imports on 2 cores.
    overlay["selfplay"]["num_shards"] = 1
    # No reasoning benchmark: the tiny model's reasoning task says nothing about poker, and
    # the shared tiny run covers those rules. So this run is also the one without them (5
    # model processes fewer).
    overlay["evaluation"]["reasoning"] = {"tasks": []}
    wd = make_workdir(tmp_path / "run", overlay)
    res = snakemake(wd, "all", "-c2", timeout=1500)
    assert res.returncode == 0, res.stderr[-3000:]
    strategies = {m: wd / f"results/eval/strategy/{m}.tsv" for m in ("imitation", "epoch3")}
    rows = {r["model"]: r for r in summarize_strategies(strategies)}
    m0, m3 = rows["imitation"], rows["epoch3"]
    print(
        f"\nM0: exploitability {m0['exploitability']:.4f}, vs random {m0['ev_vs_random']:+.4f}"
        f"\nM3: exploitability {m3['exploitability']:.4f}, vs random {m3['ev_vs_random']:+.4f}"
    )
    assert m3["ev_vs_random"] > m0["ev_vs_random"]
    # The run's table holds the same figures, a row per model, base and M0 included.
    table = (wd / "results/summary/poker.tsv").read_text().splitlines()
    assert table[0].split("\t") == [
        "model", "exploitability", "ev_vs_random", "ev_vs_equilibrium", "illegal_mass",
    ]  # fmt: skip
    assert [line.split("\t")[0] for line in table[1:]] == [
        "base", "imitation", "epoch1", "epoch2", "epoch3",
    ]  # fmt: skip
    assert (wd / "results/plots/exploitability.png").stat().st_size > 0
    # Without reasoning tasks: no reasoning job ran, the table is its header.
    assert not (wd / "results/eval/reasoning").exists()
    reasoning = (wd / "results/summary/reasoning.tsv").read_text().splitlines()
    assert len(reasoning) == 1 and reasoning[0].startswith("model\tepoch\ttask\t")
    # No game-specific file of Taboo is read: no target words, no Taboo prompts.
    words = (wd / "results/words/train.txt").read_text().split()
    assert sorted(words) == ["jk", "jq", "kj", "kq", "qj", "qk"]
