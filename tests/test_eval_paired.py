"""Paired comparison of two models' evaluation games on the same words and roles:
the exact McNemar test, the seeded word bootstrap, and the summary table's columns."""

from __future__ import annotations

import csv

import pyarrow as pa
import pytest
from test_eval_games import GUESS_BAD, _row
from test_summarize import make_epoch_files, summarize_argv

from spag.cli import main
from spag.data.tables import write_parquet
from spag.errors import SpagInputError
from spag.evaluation.paired import PAIRED_COLUMNS, mcnemar_p, paired_rows
from spag.game.selfplay import SHARD_SCHEMA
from spag.game.taboo import TABOO
from spag.judge import ATTACKER_BROKE_RULES, ATTACKER_WINS, DEFENDER_WINS, TIE


@pytest.mark.parametrize(
    "b,c,p",
    [(0, 0, 1.0), (3, 3, 1.0), (0, 5, 0.0625), (1, 9, 22 / 1024), (2, 0, 0.5), (10, 0, 2 / 1024)],
)
def test_exact_mcnemar_known_values(b, c, p):
    assert mcnemar_p(b, c) == pytest.approx(p) and mcnemar_p(c, b) == pytest.approx(p)


def _games(outcomes: dict[tuple[str, str], str]) -> list[dict]:
    return [dict(word=w, role=r, outcome=o) for (w, r), o in outcomes.items()]


WORDS = [f"w{i:02d}" for i in range(40)]


def test_a_clear_gain_as_attacker_and_none_as_defender():
    # M(e) wins all 40 attacker games, M0 10 of them; as defender both the same.
    ref = {(w, "attacker"): ATTACKER_WINS if i < 10 else ATTACKER_BROKE_RULES
           for i, w in enumerate(WORDS)}  # fmt: skip
    new = {(w, "attacker"): ATTACKER_WINS for w in WORDS}
    for i, w in enumerate(WORDS):
        ref[(w, "defender")] = new[(w, "defender")] = DEFENDER_WINS if i % 2 else TIE
    rows = paired_rows(_games(new), _games(ref), game=TABOO)
    att, dfd, both = rows["attacker"], rows["defender"], rows["all"]
    assert att["pairs"] == 40 and both["pairs"] == 80
    assert att["win_diff"] == pytest.approx(0.75)
    assert 0.5 < att["win_diff_lo"] < 0.75 < att["win_diff_hi"] <= 1.0
    assert att["win_diff_p"] == pytest.approx(mcnemar_p(30, 0)) and att["win_diff_p"] < 1e-8
    assert att["broke_rules_diff"] == pytest.approx(-0.75) and att["broke_rules_diff_hi"] < 0
    assert att["decisive_diff"] == pytest.approx(0.75)
    assert dfd["win_diff"] == dfd["win_diff_lo"] == dfd["win_diff_hi"] == 0.0
    assert dfd["win_diff_p"] == 1.0
    assert both["win_diff"] == pytest.approx(30 / 80)
    assert both["win_diff_lo"] > 0  # the words' two roles resampled together
    assert paired_rows(_games(new), _games(ref), game=TABOO) == rows  # seeded: the same every time


def test_an_even_exchange_has_an_interval_across_zero():
    # M(e) wins 10 words M0 lost and loses 10 that M0 won: no difference, and chance.
    ref = {(w, "attacker"): ATTACKER_WINS if i < 20 else ATTACKER_BROKE_RULES
           for i, w in enumerate(WORDS)}  # fmt: skip
    new = {(w, "attacker"): ATTACKER_WINS if 10 <= i < 30 else ATTACKER_BROKE_RULES
           for i, w in enumerate(WORDS)}  # fmt: skip
    row = paired_rows(_games(new), _games(ref), game=TABOO)["attacker"]
    assert row["win_diff"] == 0.0 and row["win_diff_lo"] < 0 < row["win_diff_hi"]
    assert row["win_diff_p"] == 1.0


def test_games_that_do_not_pair_are_refused():
    ref = {(w, "attacker"): ATTACKER_WINS for w in WORDS}
    new = {(w, "attacker"): ATTACKER_WINS for w in WORDS[:-1]}
    with pytest.raises(SpagInputError, match="did not play the same words"):
        paired_rows(_games(new), _games(ref), game=TABOO)
    # A second game of one word and role pairs with nothing on the other side.
    with pytest.raises(SpagInputError, match="did not play the same words"):
        paired_rows(_games(ref) + _games(ref)[:1], _games(ref), game=TABOO)


def test_sampled_games_pair_by_index_and_a_word_moves_as_one():
    """Three sampled games per word and role: the k-th pairs with the reference's k-th,
    rates are over all games, and the bootstrap resamples words (a word's games
    together), so the interval is that of 40 words, not of 120 games."""
    ref = [g for _ in range(3) for g in _games({(w, "attacker"): ATTACKER_BROKE_RULES
                                                for w in WORDS})]  # fmt: skip
    # The model wins the first of its three games on every word, the others as M0.
    new = [
        {**g, "outcome": ATTACKER_WINS if k == 0 else g["outcome"]}
        for k in range(3)
        for g in _games({(w, "attacker"): ATTACKER_BROKE_RULES for w in WORDS})
    ]
    row = paired_rows(new, ref, game=TABOO)["attacker"]
    assert row["pairs"] == 3 * len(WORDS)
    assert row["win_diff"] == pytest.approx(1 / 3)
    # Every word gains exactly 1 of 3: resampling words cannot move the difference.
    assert row["win_diff_lo"] == pytest.approx(1 / 3) == row["win_diff_hi"]
    assert row["win_diff_p"] < 1e-6


def _episodes(path, model: str, epoch: int, wins_as_attacker: int):
    """Evaluation games of ``model`` on 12 words, both roles: it wins ``wins_as_attacker``
    attacker games (the opponent guesses wrong), breaks the rules in the others, and
    as defender guesses right on every word."""
    rows = []
    for i in range(12):
        word = f"word{i}"
        said = "hello" if i < wins_as_attacker else f"it is {word}"
        rows.append(_row(f"a{i}", "attacker", [said, GUESS_BAD], word=word, epoch=epoch))
        rows.append(_row(f"d{i}", "defender", ["hi", f"I know the word! It is {word}!"],
                         word=word, epoch=epoch))  # fmt: skip
    for r in rows:
        r[f"{r['policy_role']}_model"] = model
    write_parquet(pa.Table.from_pylist(rows, schema=SHARD_SCHEMA), path)
    return path


def test_summarize_run_puts_each_models_paired_difference_on_its_rows(
    tmp_path, capsys, monkeypatch
):
    games = {}
    for name, epoch, wins in (("base", -1, 0), ("imitation", 0, 3), ("epoch1", 1, 12)):
        episodes = _episodes(tmp_path / f"{name}.parquet", name, epoch, wins)
        table = tmp_path / f"{name}.tsv"
        assert main(["eval-games", "--episodes", str(episodes), "--output", str(table)]) == 0
        games[name] = (episodes, table)
    summary = tmp_path / "summary.tsv"
    assert main(summarize_argv(1, make_epoch_files(tmp_path, 1), summary)) == 0
    out = tmp_path / "eval_games.tsv"
    argv = ["summarize-run", "--epoch-summaries", str(summary), "--output", str(tmp_path / "e"),
            "--eval-games", *(str(t) for _, t in games.values()), "--eval-games-output", str(out),
            "--eval-episodes", *(str(e) for e, _ in games.values())]  # fmt: skip
    assert main(argv) == 0
    with out.open() as fh:
        rows = {(r["model"], r["role"]): r for r in csv.DictReader(fh, delimiter="\t")}
    assert set(PAIRED_COLUMNS) <= set(next(iter(rows.values())))
    assert rows[("imitation", "attacker")]["win_diff"] == ""  # the reference itself
    e1 = rows[("epoch1", "attacker")]
    assert e1["reference"] == "imitation" and e1["pairs"] == "12"
    assert float(e1["win_diff"]) == pytest.approx(9 / 12) and float(e1["win_diff_lo"]) > 0
    assert float(e1["broke_rules_diff"]) == pytest.approx(-9 / 12)
    assert float(rows[("epoch1", "defender")]["win_diff"]) == 0.0
    assert float(rows[("base", "attacker")]["win_diff"]) == pytest.approx(-3 / 12)
    _check_paired_plot(out, monkeypatch)
    # the games of a model missing: refused, naming it, nothing written
    out.unlink()
    argv.remove(str(games["base"][0]))
    assert main(argv) == 2
    assert "no evaluation games given for base" in capsys.readouterr().err
    assert not out.exists()


def _check_paired_plot(table_path, monkeypatch):
    """The report's paired plot drawn from that table: per metric, each model's
    difference with its interval, M0 left out (it is the zero line)."""
    import pandas as pd
    from matplotlib.container import ErrorbarContainer

    import spag.report.plots as plots

    figures = []
    monkeypatch.setattr(plots, "save", lambda fig, path: figures.append(fig))
    plots.plot_paired(pd.read_csv(table_path, sep="\t"), "unused.png", game=TABOO)
    (fig,) = figures
    win, broke, _ = fig.axes
    assert [t.get_text() for t in win.get_xticklabels()] == ["base", "M1"]
    bars = [c for c in win.containers if isinstance(c, ErrorbarContainer)]
    assert len(bars) == 3  # as attacker, as defender, both roles
    _, ys = bars[0][0].get_data()
    assert list(ys) == pytest.approx([-3 / 12, 9 / 12])  # base, M1 as attacker
    assert "rule breaks" in broke.get_title()
