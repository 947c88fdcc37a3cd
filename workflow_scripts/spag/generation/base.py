"""The small interface between the game loop and a text generator.

The game loop (``spag.game.selfplay``) is the only caller. A backend takes finished
prompt texts and returns one :class:`Reply` per prompt, in order. Both backends
render and encode prompts the same way (:class:`spag.models.rendering.PromptRenderer`,
shared with training and scoring): the raw or chat rendering, exactly one BOS
where the tokenizer uses one, and left truncation to the prompt budget, so that
a game played with ``hf`` or ``vllm`` sees the same token ids as training.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spag.errors import SpagInputError
from spag.generation.settings import Sampling, SelfplaySettings
from spag.models.tokenizer import TOKENIZER_FILES


@dataclass(frozen=True)
class Reply:
    """One generated reply.

    ``num_tokens`` counts the generated tokens including a final EOS;
    ``finished_by_eos`` is false when the reply was cut at ``max_new_tokens``;
    ``prompt_truncated`` tells that the prompt was left-truncated to fit.
    """

    text: str
    num_tokens: int
    finished_by_eos: bool
    prompt_truncated: bool = False


class Backend:
    """A text generator for the game loop: a backend writes ``draw`` (and ``release``
    where it keeps anything per game); ``generate`` is the call every backend shares."""

    name: str

    def generate(
        self,
        prompts: list[str],
        sampling: Sampling,
        *,
        seed: int,
        game_ids: list[str] | None = None,
    ) -> list[Reply]:
        """Return one reply per prompt, in the order of ``prompts``, drawn as ``sampling``
        says (greedy when its temperature is 0).

        ``seed`` is the call's (the game loop derives one per message and speaker).
        ``game_ids`` names the game of each prompt. A sampled reply draws from its
        own random stream, ``prompt_seeds(seed, game_ids)``, so a game's random
        draws do not depend on which other games share the call or the batch. The
        logits they are drawn from are computed in a batch whose shape and padding
        do depend on the other games: in float32 on CPU the difference is rounding
        (the tests rebuild a shard byte for byte), but on CUDA in bf16 or fp16 the
        kernels differ with the batch's shape, and a near tie can turn a token and
        the rest of the game. A backend may also keep what it computed for a game's
        prompt and reuse it for that game's next, longer prompt, with the same
        caveat.

        Which games share a batch is the backend's schedule. The ``hf`` backend
        keeps a fixed set of slots full: a prompt enters (longest first) as soon as
        enough slots are free, not with the next sub-batch of ``batch_size``, so
        when a call has more prompts than slots a game meets other neighbours than
        it did under sub-batches decoded to their longest reply (up to f4b09b0),
        and the batch shrinks as its last replies end. The schedule depends only on
        the prompts and the replies so far, so a rerun repeats it exactly. The
        embedded default's epoch-1 shards were byte-identical under both schedules
        (16 games a shard, one batch); on the Kuhn Poker tiny config
        (perf/results/selfplay_decoding.md) the changed neighbours and rounding
        turned some replies. So a shard resumed from its journal keeps its finished games exactly,
        and plays the others from the same policy and seeds, but on a GPU not
        necessarily as an uninterrupted run would have (docs/design.md section 8).
        """
        if not prompts:
            return []
        return self.draw(prompts, sampling, prompt_seeds(seed, game_ids, len(prompts)), game_ids)

    def draw(
        self, prompts: list[str], sampling: Sampling, seeds: list[int], game_ids: list[str] | None
    ) -> list[Reply]:
        """The replies to ``prompts`` (at least one), prompt i drawn from ``seeds[i]``."""
        raise NotImplementedError

    def release(self, game_ids: list[str]) -> None:
        """Forget whatever is kept for these games (they have ended): nothing by default."""


def derive_seed(*parts: object) -> int:
    """A stable 31-bit seed from any printable parts (same parts, same seed, any machine)."""
    digest = hashlib.sha256("\x1f".join(map(str, parts)).encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % (2**31 - 1)


def prompt_seeds(seed: int, game_ids: list[str] | None, count: int) -> list[int]:
    """The sampling seed of each prompt of a generate call: from the call's seed and the
    prompt's game (its episode id), or its position when no game is named."""
    if game_ids is not None and len(game_ids) != count:
        raise ValueError(f"game_ids must give one id per prompt ({len(game_ids)} for {count})")
    keys = game_ids if game_ids is not None else range(count)
    return [derive_seed(seed, key) for key in keys]


def check_model_dir(path: str | Path) -> Path:
    """Check that ``path`` is a Hugging Face checkpoint folder with safetensors and a tokenizer."""
    p = Path(path)
    if not p.is_dir():
        raise SpagInputError(f"model folder not found: {p}")
    check_manifest(p)
    if not (p / "config.json").is_file():
        raise SpagInputError(f"{p}: not a model folder (no config.json)")
    if not any((p / name).is_file() for name in TOKENIZER_FILES):
        raise SpagInputError(
            f"{p}: no tokenizer in the model folder (expected one of {', '.join(TOKENIZER_FILES)});"
            " every checkpoint must carry the tokenizer it was trained with"
        )
    if not any(p.glob("*.safetensors")):
        raise SpagInputError(f"{p}: no *.safetensors weights (other weight formats are not loaded)")
    return p


def check_manifest(folder: Path) -> None:
    """A model folder this project wrote must still hold what it wrote; a damaged one is
    renamed aside so that the next run rebuilds it (its rule's output is then missing)."""
    from spag.data.tables import manifest_problem

    problem = manifest_problem(folder)
    if problem is None:
        return
    aside = folder.with_name(f"{folder.name}.damaged")
    try:
        if aside.exists():
            shutil.rmtree(aside)
        folder.rename(aside)
        moved = f"set aside as {aside}: the next run rebuilds it"
    except FileNotFoundError:
        moved = f"set aside as {aside} by another job: the next run rebuilds it"
    except OSError as exc:
        moved = f"not set aside ({exc.strerror}): remove it, and the next run rebuilds it"
    raise SpagInputError(f"model folder {folder} is damaged ({problem}); {moved}")


def model_max_positions(model_dir: str | Path) -> int | None:
    """The model's context length from its config.json, if it states one."""
    import json

    try:
        config = json.loads((Path(model_dir) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise SpagInputError(f"{model_dir}/config.json: unreadable: {exc}") from exc
    for key in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"):
        value = config.get(key)
        if isinstance(value, int) and value > 0:
            return value
    return None


def context_budget(model_dir: str | Path, max_length: int | None) -> int:
    """Prompt + reply token budget: ``max_length`` (default ``selfplay.max_length``), capped
    by the model's context."""
    import logging

    limit = model_max_positions(model_dir)
    wanted = SelfplaySettings.max_length if max_length is None else int(max_length)
    if wanted < 4:
        raise SpagInputError(f"--max-length {wanted} is too small")
    if limit is not None and wanted > limit:
        if max_length is not None:
            logging.getLogger(__name__).warning(
                "--max-length %d exceeds the context of %s (%d); using %d",
                wanted,
                model_dir,
                limit,
                limit,
            )
        wanted = limit
    return wanted


def stop_token_ids(renderer: Any, model_dir: str | Path) -> list[int]:
    """All token ids that end a reply: the rendering's end token (EOS or end of turn),
    the tokenizer's EOS and the generation config's."""
    import json

    ids: list[int] = list(renderer.stop_ids())
    gen_path = Path(model_dir) / "generation_config.json"
    if gen_path.is_file():
        try:
            value = json.loads(gen_path.read_text(encoding="utf-8")).get("eos_token_id")
        except ValueError:
            value = None
        for v in value if isinstance(value, list) else [value]:
            if isinstance(v, int) and v not in ids:
                ids.append(v)
    return ids


def check_moves_fit(game: Any, tokenizer: Any, min_new_tokens: int, model: str) -> None:
    """Refuse a reply minimum that a game's moves cannot meet: with a closed move set,
    each whole reply that names a move (``game.move_forms``) must be able to end there,
    so must be at least ``min_new_tokens`` tokens long (SmolLM2 has ``bet`` as one)."""
    if game.move_set is None or min_new_tokens <= 1:
        return
    short = {
        form: n
        for move in game.move_set
        for form in game.move_forms(move)
        if (n := len(tokenizer.encode(form, add_special_tokens=False))) < min_new_tokens
    }
    if short:
        shown = ", ".join(f"{form!r} ({n})" for form, n in short.items())
        raise SpagInputError(
            f"selfplay.min_new_tokens is {min_new_tokens}, but the {game.name} replies "
            f"{shown} are fewer tokens under the tokenizer of {model}: the end of the turn "
            "is forbidden before the minimum, so such a move could never be played alone "
            "(set selfplay.min_new_tokens: 1)"
        )


def cpu_available_bytes() -> int:
    """MemAvailable, or less where the process's cgroup (v2, or v1 memory) limits it."""
    available = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/meminfo").read_text(encoding="ascii").splitlines():
            if line.startswith("MemAvailable:"):
                available = int(line.split()[1]) * 1024
    for limit, used in cgroup_limits():
        available = min(available, max(limit - used, 0))
    return available


def cgroup_limits(
    proc_cgroup: Path = Path("/proc/self/cgroup"), fs: Path = Path("/sys/fs/cgroup")
) -> list[tuple[int, int]]:
    """(limit, used) of this process's memory cgroup and its ancestors; page cache that
    can be dropped (inactive_file) does not count as used."""
    out: list[tuple[int, int]] = []
    try:
        lines = proc_cgroup.read_text(encoding="ascii").splitlines()
    except OSError:
        return out
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":  # cgroup v2
            root, names = fs, ("memory.max", "memory.current")
        elif "memory" in controllers.split(","):  # cgroup v1
            root = fs / "memory"
            names = ("memory.limit_in_bytes", "memory.usage_in_bytes")
        else:
            continue
        here = root / path.lstrip("/")
        while True:
            with contextlib.suppress(OSError, ValueError):
                limit = (here / names[0]).read_text(encoding="ascii").strip()
                if limit.isdigit() and int(limit) < 2**60:
                    used = int((here / names[1]).read_text(encoding="ascii"))
                    out.append((int(limit), used - _inactive_file(here)))
            if here == root or root not in here.parents:
                break
            here = here.parent
    return out


def _inactive_file(folder: Path) -> int:
    with contextlib.suppress(OSError, ValueError):
        for line in (folder / "memory.stat").read_text(encoding="ascii").splitlines():
            key, _, value = line.partition(" ")
            if key in ("inactive_file", "total_inactive_file"):
                return int(value)
    return 0
