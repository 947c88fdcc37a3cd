"""The data a run starts from (config ``data``): M0's demonstrations and the instruction
data mixed into SPAG training. Its subsections are declared where they are used:
``data.teacher`` (:class:`spag.game.teacher.TeacherSettings`) and ``data.scripted``
(:class:`spag.game.scripted.ScriptedSettings`)."""

from __future__ import annotations

from dataclasses import dataclass

from spag.settings import Checked, opt


@dataclass(frozen=True, kw_only=True)
class DataSettings(Checked):
    """The imitation input and the SFT data."""

    imitation: str | None = opt(
        None,
        "demonstration games (JSON list or episodes Parquet) or instruction JSON; "
        '"teacher": games played by data.teacher; "scripted": games of the game\'s scripted '
        "player (data.scripted); null: the game's default (Taboo: data/demo_games.json, Kuhn "
        "Poker: scripted)",
    )
    sft: str = opt(
        "data/demo_sft.json",
        "instruction data mixed into SPAG training (query/target or Alpaca JSON)",
    )
    sft_max_rows: int | None = opt(
        None, "a sample of this many instruction rows (seeded by the run's seed); null: all", ge=1
    )
