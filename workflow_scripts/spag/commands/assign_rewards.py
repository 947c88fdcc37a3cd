"""``spag assign-rewards``: judge episodes, assign rewards, mix in SFT rows."""

from __future__ import annotations

import argparse
import logging
from dataclasses import dataclass

from spag.game.rewards import RewardsSettings
from spag.game.settings import GameSettings
from spag.settings import add_arguments as add_setting_arguments
from spag.settings import from_arguments, opt, req

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class AssignRewardsConfig(RewardsSettings):
    """One ``spag assign-rewards`` job: its files, seed and the config's ``rewards``."""

    episodes: str = req("episodes Parquet (raw or judged)")
    output: str = req("samples Parquet to write")
    sft_data: str | None = opt(None, "instruction Parquet (query, target) to append")
    # The workflow passes each epoch's own seed (run seed x 1000 + epoch).
    seed: int = opt(0, "seed of the randomised prompts")
    prompts: str | None = opt(None, "prompts YAML (default: the game's shipped one)")
    game: str = opt(GameSettings.name, "the game (config game.name)")
    baseline_in: str | None = opt(
        None, "rae: the role baselines the previous epoch left (default: every role at 0)"
    )
    baseline_out: str | None = opt(None, "rae: where to write the role baselines after these games")


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_setting_arguments(p, AssignRewardsConfig)


def run(args: argparse.Namespace) -> int:
    from spag.data.tables import read_parquet, write_parquet
    from spag.errors import SpagInputError
    from spag.game.base import load_game
    from spag.game.rewards import RoleBaselines, assign_rewards

    job: AssignRewardsConfig = from_arguments(AssignRewardsConfig, args)
    if job.scheme != "rae" and (job.baseline_in or job.baseline_out):
        raise SpagInputError(f"--baseline-in/--baseline-out are rae's; the scheme is {job.scheme}")
    baselines = None
    if job.scheme == "rae":
        baselines = (
            RoleBaselines.load(job.baseline_in, job.baseline_decay)
            if job.baseline_in
            else RoleBaselines(job.baseline_decay)
        )
    game = load_game(job.game)
    prompts = game.load_prompts(job.prompts)
    episodes = read_parquet(job.episodes, what="episodes")
    sft = read_parquet(job.sft_data, what="SFT data") if job.sft_data else None
    samples = assign_rewards(
        episodes,
        job,  # the config's rewards section, whole
        seed=job.seed,
        prompts=prompts,
        sft=sft,
        source=str(job.episodes),
        sft_source=str(job.sft_data),
        game=game,
        baselines=baselines,
    )
    write_parquet(samples, job.output)
    if baselines is not None:
        if job.baseline_out:
            baselines.save(job.baseline_out)
        log.info("role baselines after these games: %s", baselines.values)
    n_game = samples.num_rows - (sft.num_rows if sft is not None else 0)
    log.info(
        "%s: %d samples (%d from games%s, %d SFT) from %d episodes",
        job.output,
        samples.num_rows,
        n_game,
        ", weighing 0: control arm" if job.control else "",
        samples.num_rows - n_game,
        episodes.num_rows,
    )
    return 0
