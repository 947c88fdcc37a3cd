"""``spag play``'s settings, declared once: :class:`PlayConfig` generates the step's
flags, defaults and help, and the functions below give the rules' flags from the
validated config (self-play, evaluation and teacher games).

The sampling knobs and the engine's settings are inherited from their one declaration
(:class:`SamplingSettings`, :class:`EngineSettings`); the game's defaults are
:class:`GameSettings`'s. A few flags keep a default of their own where the step decides
without the config: ``--batch-size`` and ``--max-length`` (the backend's choice),
``--greedy`` (on with ``--opponent``), ``--tensor-parallel-size`` 1,
``--opponent-gpu-memory-utilization`` (half each) and ``--prompts`` (the shipped texts).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from spag.errors import SpagInputError
from spag.game.settings import GameSettings
from spag.generation.settings import (
    SHARE,
    EngineSettings,
    Sampling,
    SamplingSettings,
    SelfplaySettings,
    sampling_knobs,
)
from spag.models.rendering import PROMPT_FORMATS
from spag.models.settings import ModelLoading
from spag.ops import DEVICES, family_device
from spag.settings import opt, req

_PLAYER = (
    "model folder (Hugging Face checkpoint), or an OpenAI-compatible endpoint "
    "'openai:http://host:port/v1?model=NAME'"
)


@dataclass(frozen=True, kw_only=True)
class PlayConfig(EngineSettings, SamplingSettings):
    """One ``spag play`` job: a shard of target words played to a Parquet file (the
    sampling knobs and the engine's settings inherited)."""

    model: str = req(f"{_PLAYER} (e.g. a teacher playing demonstrations)")
    words: str = req("target words, one a line")
    output: str = req("shard Parquet file to write")
    opponent: str | None = opt(None, f"opponent {_PLAYER}: play evaluation games against it")
    shard_index: int = opt(0, "this job's shard", ge=0)
    num_shards: int = opt(1, "number of shards", ge=1)
    seed: int = opt(0, "run seed")
    epoch: int = opt(0, "epoch: part of the shard seed and of episode ids")
    game: str = opt(GameSettings.name, "the game (config game.name)")
    max_turns: int = opt(GameSettings.max_turns, "turns per player", ge=1)
    # The engine settings whose by-hand default differs from the config's: unset, the
    # backend decides (a default of their own keeps the rules' command lines).
    max_length: int | None = opt(
        None,
        "prompt + reply token budget; longer prompts are left-truncated "
        f"(default {SelfplaySettings.max_length}, capped by the model's context)",
        ge=16,
    )
    prompt_format: str = opt(
        GameSettings.prompt_format,
        "raw: the prompt text as it is (paper); chat: through the tokenizer's chat template",
        choices=PROMPT_FORMATS,
    )
    greedy: bool | None = opt(
        None,
        "greedy decoding: temperature 0 whatever --temperature says (default: on with "
        "--opponent, off in self-play)",
    )
    batch_size: int | None = opt(
        None,
        f"hf: sequences per generate call (default {SelfplaySettings.batch_size}); "
        "vllm: max_num_seqs (default vLLM's)",
        ge=1,
    )
    games_per_word: int = opt(
        1,
        "games per secret (target word, deal); with --opponent per secret and role "
        "(sampled evaluation games)",
        ge=1,
    )
    prompts: str | None = opt(None, "prompts YAML (default: the shipped data/prompts.yaml)")
    tensor_parallel_size: int = opt(1, "vllm: GPUs one engine spans", ge=1)
    opponent_gpu_memory_utilization: float | None = opt(
        None,
        "vllm: share of the GPU's total memory for the opponent's engine (default: with a "
        "local --opponent, half of --gpu-memory-utilization each)",
        **SHARE,
    )
    trust_remote_code: bool = opt(
        ModelLoading.trust_remote_code, "allow model code from the model folder (off by default)"
    )
    model_name: str | None = opt(None, "name recorded in the episodes (default: the folder name)")
    opponent_name: str | None = opt(
        None, "opponent name recorded in the episodes (default: the folder name)"
    )
    threads: int | None = opt(
        None, "torch CPU threads (default: torch's choice; set it to the job's cores)", ge=1
    )
    device: str = opt(
        ModelLoading.device,
        "cuda: stop at once without working CUDA; cpu; auto: CUDA where it works",
        choices=DEVICES,
    )
    no_journal: bool = opt(
        False,
        "do not journal finished games beside the output (by default a failed or "
        "killed shard resumes from its finished games)",
    )
    no_progress: bool = opt(False, "no progress bar")

    def __post_init__(self) -> None:
        super().__post_init__()
        _check(self)

    @property
    def sampling(self) -> Sampling:
        """How replies are drawn: greedily (temperature 0) against an opponent unless
        ``greedy`` says."""
        greedy = self.greedy if self.greedy is not None else self.opponent is not None
        knobs = {k: getattr(self, k) for k in sampling_knobs()}
        return Sampling(**{**knobs, "temperature": 0.0} if greedy else knobs)


def _check(c: PlayConfig) -> None:
    # The fields' own bounds are checked by SamplingSettings (spag.settings.check_bounds).
    if c.shard_index >= c.num_shards:
        raise SpagInputError(
            f"--shard-index {c.shard_index} is out of range for --num-shards {c.num_shards}"
            f" (valid: 0..{c.num_shards - 1})"
        )
    if c.opponent and c.games_per_word != 1 and not c.sampling.samples:
        raise SpagInputError(
            "--games-per-word with --opponent plays sampled games: greedy ones would repeat"
            " (add --no-greedy and a temperature above 0)"
        )


# ------------------------------------------------------------------ the rules' flags
# Each function returns a rule's ``spag play`` options (keys are flag names with ``_``),
# rendered by ``spag.settings.cli_flags``. Values equal to a default are passed too,
# so a job's command line shows every value it plays with.


def engine_arguments(config: dict[str, Any], family: str) -> dict[str, Any]:
    """Options of the generation engine, shared by self-play, evaluation and teacher games;
    ``family`` is the rule family whose GPUs a vLLM engine spans by default."""
    s = config["selfplay"]
    options: dict[str, Any] = dict(
        backend=s["backend"],
        game=config["game"]["name"],
        max_turns=config["game"]["max_turns"],
        prompt_format=config["game"]["prompt_format"],
        max_length=s["max_length"],
        dtype=s["dtype"],
        trust_remote_code=config["base_model"]["trust_remote_code"],
        device=family_device(config, family),
    )
    if s["backend"] == "vllm":
        gpus = config["resources"][family]["gpus"]
        options["tensor_parallel_size"] = s["tensor_parallel_size"] or max(gpus, 1)
        options["vllm_batch_invariant"] = s["vllm_batch_invariant"]
        options["vllm_enforce_eager"] = s["vllm_enforce_eager"]
        options["batch_memory_gib"] = s["batch_memory_gib"]  # the KV cache on CPU
    else:
        options.update(kv_reuse_gib=s["kv_reuse_gib"], batch_memory_gib=s["batch_memory_gib"])
        if not s["cuda_graphs"]:  # at the default the command stays that of earlier runs
            options["no_cuda_graphs"] = True
    return options


def vllm_memory_arguments(
    config: dict[str, Any], model: float, opponent: float | None = None
) -> dict[str, Any]:
    """vLLM engines' shares of the GPU's total memory (no options for other backends)."""
    if config["selfplay"]["backend"] != "vllm":
        return {}
    return dict(gpu_memory_utilization=model, opponent_gpu_memory_utilization=opponent)


def selfplay_arguments(config: dict[str, Any]) -> dict[str, Any]:
    """Options of a self-play shard (config ``selfplay``)."""
    s = config["selfplay"]
    return {
        **engine_arguments(config, "selfplay"),
        **vllm_memory_arguments(config, s["gpu_memory_utilization"]),
        **{k: s[k] for k in sampling_knobs()},
        "batch_size": s["batch_size"],
        # Only where set: at 1 the command stays that of earlier runs (no rerun of play).
        **({"games_per_word": s["games_per_secret"]} if s["games_per_secret"] != 1 else {}),
    }


def eval_play_arguments(config: dict[str, Any]) -> dict[str, Any]:
    """Options of an evaluation games shard (config ``evaluation``): greedy, both engines."""
    e = config["evaluation"]
    return {
        **engine_arguments(config, "evaluate"),
        **vllm_memory_arguments(
            config, e["gpu_memory_utilization"], e["opponent_gpu_memory_utilization"]
        ),
        "max_new_tokens": e["max_new_tokens"],
        # A reply's shortest length is the game's, the same in self-play and evaluation.
        "min_new_tokens": config["selfplay"]["min_new_tokens"],
        "batch_size": e["batch_size"],
        "greedy": True,
    }


def eval_sampled_play_arguments(config: dict[str, Any]) -> dict[str, Any]:
    """Options of a sampled evaluation games shard: the evaluation's engines and reply
    length, ``evaluation.sampled_games_per_secret`` games per secret and role, drawn as
    self-play draws (config ``selfplay``'s sampling knobs but the reply length)."""
    s = config["selfplay"]
    options = eval_play_arguments(config)
    del options["greedy"]  # sampled: --no-greedy below
    return {
        **options,
        **{k: s[k] for k in sampling_knobs() if k != "max_new_tokens"},
        "no_greedy": True,
        "games_per_word": config["evaluation"]["sampled_games_per_secret"],
    }


def teacher_play_arguments(config: dict[str, Any]) -> dict[str, Any]:
    """Options of a teacher games shard (config ``data.teacher``), without ``--threads``:
    where :func:`spag.game.teacher.teacher_plays_locally` is true the rule adds it (its
    job's CPUs)."""
    from spag.game.teacher import teacher_plays_locally

    t = config["data"]["teacher"]
    options: dict[str, Any] = dict(
        model=t["model"],
        model_name="teacher",
        **{k: t[k] for k in sampling_knobs()},
        greedy=t["temperature"] == 0,
        game=config["game"]["name"],
        max_turns=config["game"]["max_turns"],
    )
    if t["partner"]:
        options.update(opponent=t["partner"], opponent_name="partner")
        options["no_greedy"] = t["temperature"] > 0
    else:
        options["games_per_word"] = t["games_per_word"]
    if teacher_plays_locally(config):
        # Engine options only where a local model plays: for endpoints they would do
        # nothing but rerun (and pay for) the games whenever self-play settings change.
        options.update(
            engine_arguments(config, "selfplay"),
            **vllm_memory_arguments(config, config["selfplay"]["gpu_memory_utilization"]),
            batch_size=config["selfplay"]["batch_size"],
        )
    return options
