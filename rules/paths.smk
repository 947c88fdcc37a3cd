# Where the run's files live: result paths, the models of the run,
# and the targets of `all`, `imitation` and spag_epoch<N>. No rules.

from pathlib import Path

from spag.game.base import load_game
from spag.game.teacher import uses_teacher

GAME = load_game(config["game"]["name"], config["game"]["settings"])
EPOCHS = config["epochs"]
NUM_SHARDS = config["selfplay"]["num_shards"]
EVAL_NUM_SHARDS = config["evaluation"]["num_shards"]
# With data.imitation "teacher", M0 imitates games played by data.teacher.
TEACHER = uses_teacher(config)
# With data.imitation "scripted", M0 imitates games of the game's scripted player.
SCRIPTED = config["data"]["imitation"] == "scripted"
# A solved game (Kuhn Poker): each model's strategy is read out exactly.
SOLVED = GAME.infosets is not None
# A game with a guess (Taboo): a fixed listener grades the hints of every evaluation game.
GRADED = (
    GAME.guess_text is not None
    and config["evaluation"]["hints"]["listener"] is not None
)

# Sampled evaluation games besides the greedy ones: games per secret and role (0: none).
SAMPLED = config["evaluation"]["sampled_games_per_secret"]
# evaluation.reasoning.tasks: [] runs no reasoning benchmark (no eval_reasoning job; the
# epoch summaries leave reasoning_gmean empty, the reasoning table has its header only).
REASONED = bool(config["evaluation"]["reasoning"]["tasks"])

RESULTS = Path("results")
CHECKPOINTS = Path(
    "checkpoints"
)  # trainer checkpoints: outside declared outputs, for resume


def result(*parts):
    return str(RESULTS.joinpath(*parts))


def log_path(*parts):
    return str(RESULTS.joinpath("logs", *parts))


def bench_path(*parts):
    return str(RESULTS.joinpath("benchmarks", *parts))


def epoch_path(*parts):
    """A path under results/epoch{epoch}/ (the wildcard is left for Snakemake)."""
    return str(RESULTS.joinpath("epoch{epoch}", *parts))


WORDS_TRAIN = result("words", "train.txt")
WORDS_TEST = result("words", "test.txt")
BASE_MODEL = result("base_model")
SFT_DATA = result("data", "sft.parquet")
IMITATION_SAMPLES = result("imitation", "samples.parquet")
TEACHER_SHARD = result("teacher", "shard_{shard}.parquet")
TEACHER_EPISODES = result("teacher", "episodes.parquet")
TEACHER_OUTCOMES = result("teacher", "outcomes.tsv")
SCRIPTED_GAMES = result("imitation", "scripted_games.parquet")
IMITATION_SCORED = result("imitation", "scored.parquet")
IMITATION_MODEL = result("imitation", "model")
IMITATION_LOSS = result("imitation", "loss.tsv")
SHARD = epoch_path("selfplay", "shard_{shard}.parquet")
SHARD_BENCHMARK = bench_path("epoch{epoch}", "selfplay", "shard_{shard}.tsv")
EPISODES = epoch_path("episodes.parquet")
OUTCOMES = epoch_path("outcomes.tsv")
SAMPLES = epoch_path("samples.parquet")
# rewards.scheme rae: each role's baseline after the epoch's games, read by the next epoch.
RAE = config["rewards"]["scheme"] == "rae"
ROLE_BASELINES = epoch_path("role_baselines.json")
SCORED = epoch_path("scored.parquet")
MODEL = epoch_path("model")
LOSS = epoch_path("loss.tsv")
EVAL_SHARD = epoch_path("eval", "shard_{shard}.parquet")
EVAL_SHARD_BENCHMARK = bench_path("epoch{epoch}", "eval_play", "shard_{shard}.tsv")
EVAL_GAMES = epoch_path("eval", "games.parquet")
EVAL_TABLE = epoch_path("eval", "games.tsv")
EPOCH_SUMMARY = epoch_path("summary.tsv")
REASONING = result("eval", "reasoning", "{model}.json")
# The base model and M0 play the same evaluation games as M(e): the rows that M(e) is
# read against (M0 against itself with the default opponent, `imitation`).
BASELINE_MODELS = ("base", "imitation")
BASELINE_SHARD = result("eval", "games", "{model}", "shard_{shard}.parquet")
BASELINE_SHARD_BENCHMARK = bench_path("eval", "play_{model}", "shard_{shard}.tsv")
BASELINE_GAMES = result("eval", "games", "{model}.parquet")
BASELINE_TABLE = result("eval", "games", "{model}.tsv")
# Sampled evaluation games (evaluation.sampled_games_per_secret), the same layout.
SAMPLED_SHARD = epoch_path("eval", "sampled", "shard_{shard}.parquet")
SAMPLED_GAMES = epoch_path("eval", "sampled", "games.parquet")
SAMPLED_TABLE = epoch_path("eval", "sampled", "games.tsv")
SAMPLED_BASELINE_SHARD = result("eval", "sampled", "{model}", "shard_{shard}.parquet")
SAMPLED_BASELINE_GAMES = result("eval", "sampled", "{model}.parquet")
SAMPLED_BASELINE_TABLE = result("eval", "sampled", "{model}.tsv")
# Models of the reasoning evaluation: the base model, M0 and M1 ... M(EPOCHS).
REASONING_MODELS = [*BASELINE_MODELS, *(f"epoch{e}" for e in range(1, EPOCHS + 1))]
SUMMARY_EPOCHS = result("summary", "epochs.tsv")
SUMMARY_REASONING = result("summary", "reasoning.tsv")
SUMMARY_EVAL_GAMES = result("summary", "eval_games.tsv")
SUMMARY_EVAL_SAMPLED = result("summary", "eval_sampled.tsv")
STRATEGY = result("eval", "strategy", "{model}.tsv")
HINTS = result("eval", "hints", "{model}.parquet")
SUMMARY_HINTS = result("summary", "hints.tsv")
INFERENCE = result("eval", "inference", "{model}.parquet")
SUMMARY_INFERENCE = result("summary", "inference.tsv")
SUMMARY_STRATEGIES = result("summary", "poker.tsv")
PLOTS_DIR = result("plots")
RUN_INFO = result("run_info.json")


def shard_name(shard):
    return f"{shard:03d}"


def model_of_epoch(epoch):
    """M(e): the imitation model for e = 0, else epoch e's SPAG model."""
    epoch = int(epoch)
    return IMITATION_MODEL if epoch == 0 else MODEL.format(epoch=epoch)


def previous_baselines(wildcards):
    """rae: the role baselines epoch e - 1 left (none before epoch 1)."""
    epoch = int(wildcards.epoch)
    return ROLE_BASELINES.format(epoch=epoch - 1) if RAE and epoch > 1 else []


def previous_model(wildcards):
    return model_of_epoch(int(wildcards.epoch) - 1)


def current_model(wildcards):
    return model_of_epoch(wildcards.epoch)


def named_model(wildcards):
    """Model folder for the reasoning evaluation's {model} wildcard."""
    if wildcards.model == "base":
        return BASE_MODEL
    if wildcards.model == "imitation":
        return IMITATION_MODEL
    return model_of_epoch(wildcards.model.removeprefix("epoch"))


def shards_of_epoch(wildcards):
    return expand(
        SHARD, epoch=wildcards.epoch, shard=map(shard_name, range(NUM_SHARDS))
    )


def shard_benchmarks_of_epoch(wildcards):
    shards = map(shard_name, range(NUM_SHARDS))
    return expand(SHARD_BENCHMARK, epoch=wildcards.epoch, shard=shards)


def eval_shards(wildcards):
    """The evaluation games shards of M(e) ({epoch}) or of a baseline ({model})."""
    shards = map(shard_name, range(EVAL_NUM_SHARDS))
    if "model" in wildcards.keys():
        return expand(BASELINE_SHARD, model=wildcards.model, shard=shards)
    return expand(EVAL_SHARD, epoch=wildcards.epoch, shard=shards)


def sampled_shards(wildcards):
    """The sampled evaluation games shards of M(e) ({epoch}) or of a baseline ({model})."""
    shards = map(shard_name, range(EVAL_NUM_SHARDS))
    if "model" in wildcards.keys():
        return expand(SAMPLED_BASELINE_SHARD, model=wildcards.model, shard=shards)
    return expand(SAMPLED_SHARD, epoch=wildcards.epoch, shard=shards)


def teacher_shards(wildcards=None):
    shards = range(config["data"]["teacher"]["num_shards"])
    return expand(TEACHER_SHARD, shard=map(shard_name, shards))


def imitation_targets():
    """M0 and every file it is built from (with teacher games their shards): like
    self-play files, a removed one is rebuilt (Snakemake does not rebuild an
    intermediate file on its own)."""
    inputs = [BASE_MODEL, IMITATION_SAMPLES, IMITATION_SCORED, IMITATION_LOSS]
    if TEACHER:
        inputs += [*teacher_shards(), TEACHER_EPISODES, TEACHER_OUTCOMES]
    if SCRIPTED:
        inputs.append(SCRIPTED_GAMES)
    return [IMITATION_MODEL, *inputs]


def epoch_targets(epoch):
    """What spag_epoch{N} builds: M(N), and the evaluations of the base model, M0 ... M(N).

    Earlier epochs' evaluations are cheap next to their training and give the curve
    that the paper's claim is about. Every intermediate file of those epochs is a
    target too: Snakemake does not rebuild a removed intermediate whose dependents are
    up to date, and a user who removes one (a shard, the episodes) wants it rebuilt,
    with what depends on it.
    """
    targets = [
        model_of_epoch(epoch),
        *imitation_targets(),
        WORDS_TRAIN,
        WORDS_TEST,
        SFT_DATA,
    ]
    models = REASONING_MODELS[: len(BASELINE_MODELS) + int(epoch)]
    if REASONED:
        targets += expand(REASONING, model=models)
    eval_shard_names = list(map(shard_name, range(EVAL_NUM_SHARDS)))
    targets += expand(BASELINE_SHARD, model=BASELINE_MODELS, shard=eval_shard_names)
    targets += expand([BASELINE_GAMES, BASELINE_TABLE], model=BASELINE_MODELS)
    for e in range(1, int(epoch) + 1):
        targets += expand(SHARD, epoch=e, shard=map(shard_name, range(NUM_SHARDS)))
        targets += expand(EVAL_SHARD, epoch=e, shard=eval_shard_names)
        targets += [
            p.format(epoch=e)
            for p in (EPISODES, OUTCOMES, SAMPLES, SCORED, LOSS, EVAL_GAMES)
        ]
        if RAE:
            # A target too: a finished run switched to rae has none, and Snakemake then
            # neither plans the rewards again nor can compare their params.
            targets.append(ROLE_BASELINES.format(epoch=e))
        targets += [EVAL_TABLE.format(epoch=e), EPOCH_SUMMARY.format(epoch=e)]
    if SAMPLED:
        targets += expand(
            SAMPLED_BASELINE_SHARD, model=BASELINE_MODELS, shard=eval_shard_names
        )
        targets += expand(
            [SAMPLED_BASELINE_GAMES, SAMPLED_BASELINE_TABLE], model=BASELINE_MODELS
        )
        for e in range(1, int(epoch) + 1):
            targets += expand(SAMPLED_SHARD, epoch=e, shard=eval_shard_names)
            targets += [SAMPLED_GAMES.format(epoch=e), SAMPLED_TABLE.format(epoch=e)]
    if SOLVED:
        targets += expand(STRATEGY, model=models)
    if GRADED:
        targets += expand([HINTS, INFERENCE], model=models)
    return targets
