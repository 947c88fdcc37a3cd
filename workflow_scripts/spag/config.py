"""Validation of the pipeline configuration against its JSON schema, with defaults.

The schema (``spag/schemas/config.schema.yaml``) arranges the sections; each is named
there by the settings dataclass that declares it (``x-section``), whose fields give its
keys, types, bounds, defaults and help (:func:`spag.settings.section_schema`), the
run-wide keys at the top level being :class:`RunSettings`'s. Errors name the key path
(``selfplay.num_shards``) so a typo fails before any job.
"""

from __future__ import annotations

import copy
import json
import math
import os
import types
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from spag.errors import SpagInputError
from spag.settings import Checked, load_section_class, opt, section_schema
from spag.training.objectives import OBJECTIVES, STAGE_OBJECTIVE, coefficients, paper_defaults


@dataclass(frozen=True, kw_only=True)
class RunSettings(Checked):
    """The run-wide keys (the config's top level, beside its sections)."""

    seed: int = opt(42, "the run's seed: every step's seeds derive from it", ge=0, le=4294967295)
    epochs: int = opt(3, "SPAG epochs after imitation (targets spag_epoch1 .. spag_epoch<N>)", ge=1)
    offline: bool = opt(True, "set HF_HUB_OFFLINE=1 for every job")
    rerun_on_algorithm_edits: bool = opt(
        False,
        "true: the source of the game, the reward scheme and the objective (their modules "
        "and the research core's modules they import) joins the params of the rules that run "
        "them, so that an edit reruns what it changes (editing rewards reruns assign_rewards "
        "and what follows it, not self-play; a backend, the trackers or the docs rerun "
        "nothing). Off by default: a run continued under newer code reruns nothing; turning "
        "it on reruns each of those jobs once (spag.ops.algorithm)",
    )
    cuda_build: str = opt(
        "cu13",
        "CUDA builds of torch and vLLM in the GPU conda envs: cu13 (PyPI's, NVIDIA driver R580 "
        "or newer; envs/*.yaml) or cu12 (PyTorch's and vLLM's CUDA 12.9 indexes, driver R525 "
        "or newer; envs/cuda12/*.yaml). Only with --software-deployment-method conda",
        choices=("cu13", "cu12"),
    )


def load_schema() -> dict[str, Any]:
    """The config schema, its declared sections generated from their classes (a game,
    reward scheme or objective registered is a value they allow)."""
    text = resources.files("spag").joinpath("schemas/config.schema.yaml").read_text()
    schema = yaml.safe_load(text)
    _fill_sections(schema)
    return schema


def _fill_sections(node: Any) -> None:
    """Each ``x-section: module:Class`` node as the section the class declares; the
    node's own keys (a description, subsections under ``properties``) kept after."""
    if isinstance(node, list):
        for value in node:
            _fill_sections(value)
        return
    if not isinstance(node, dict):
        return
    if "x-section" in node:
        declared = section_schema(load_section_class(node.pop("x-section")))
        own = node.pop("properties", {})
        node.update({**declared, **node})
        node["properties"] = {**declared["properties"], **own}
    for value in node.values():
        _fill_sections(value)


def read_config_files(paths: Sequence[str | os.PathLike]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The config files layered as Snakemake layers them (nested sections merge, other
    values replace), and the layers over the first (the keys the user set over the
    workflow's own config.yaml); a missing or malformed file is refused naming it."""
    config: dict[str, Any] = {}
    given: dict[str, Any] = {}
    for i, path in enumerate(paths):
        try:
            layer = yaml.safe_load(Path(path).read_text()) or {}
        except OSError as exc:
            raise SpagInputError(f"--configfile {path}: {exc.strerror}") from None
        except yaml.YAMLError as exc:
            raise SpagInputError(f"--configfile {path}: not YAML ({exc})") from None
        _merge(config, layer)
        if i:
            _merge(given, layer)
    return config, given


def _merge(base: dict[str, Any], layer: dict[str, Any]) -> None:
    for key, value in layer.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            _merge(base[key], value)
        else:
            base[key] = copy.deepcopy(value)


# Keys renamed to the one name their step and the code use: the old name is refused at
# plan time naming the new one.
RENAMED = {
    ("rewards", "decay"): "rewards.decay_weight",
    ("imitation", "gradient_checkpointing"): "imitation.activation_checkpointing",
    ("spag", "gradient_checkpointing"): "spag.activation_checkpointing",
}


def _refuse_renamed(config: dict[str, Any], source: str) -> None:
    for (section, key), new in RENAMED.items():
        if isinstance(config.get(section), dict) and key in config[section]:
            raise SpagInputError(
                f"{source}: key '{section}.{key}' is now '{new}' (the same setting, under the "
                "name its step's flag and the code use)"
            )


def _with_defaults(validator_class):
    validate_properties = validator_class.VALIDATORS["properties"]

    def set_defaults(validator, properties, instance, schema):
        if isinstance(instance, dict):
            for name, sub in properties.items():
                if "default" in sub and name not in instance:
                    instance[name] = copy.deepcopy(sub["default"])
        yield from validate_properties(validator, properties, instance, schema)

    return jsonschema.validators.extend(validator_class, {"properties": set_defaults})


_Validator = _with_defaults(jsonschema.Draft202012Validator)


def _key_path(error: jsonschema.ValidationError) -> str:
    parts = [str(p) for p in error.absolute_path]
    return ".".join(parts) if parts else "(top level)"


_TYPE_CHECKS = {
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    "array": lambda v: isinstance(v, list),
    "object": lambda v: isinstance(v, dict),
}


def _coerce_strings(instance: Any, schema: dict[str, Any], root: dict[str, Any]) -> None:
    """Read as YAML the strings of keys whose schema takes no string.

    Snakemake's ``--config 'selfplay={num_shards: 2}'`` hands nested values over as
    strings (its YAML base loader); top-level ones it converts itself.
    """
    if not isinstance(instance, dict):
        return
    ref = schema.get("$ref", "")
    if ref.startswith("#/"):
        target = root
        for part in ref[2:].split("/"):
            target = target[part]
        schema = {**target, **schema}
    properties = schema.get("properties", {})
    for key, value in instance.items():
        sub = properties.get(key)
        if sub is None and isinstance(schema.get("additionalProperties"), dict):
            sub = schema["additionalProperties"]
        if sub is None:
            continue
        if isinstance(value, dict):
            _coerce_strings(value, sub, root)
            continue
        types = sub.get("type", [])
        types = [types] if isinstance(types, str) else types
        if not isinstance(value, str) or not types or "string" in types:
            continue
        try:
            parsed = yaml.safe_load(value)
        except yaml.YAMLError:
            continue
        if any(_TYPE_CHECKS.get(t, lambda v: False)(parsed) for t in types):
            instance[key] = parsed


def _non_finite(node: Any, path: str = "") -> Iterator[tuple[str, float]]:
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _non_finite(value, f"{path}.{key}" if path else str(key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _non_finite(value, f"{path}[{i}]")
    elif isinstance(node, float) and not math.isfinite(node):
        yield path, node


def validate_config(
    config: dict[str, Any], source: str = "config", given: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Validate ``config`` in place (filling defaults) and return it.

    ``given`` holds the keys the user set over the workflow's own config file (the
    ``--configfile`` files and ``--config``); None: every key of ``config`` is the
    user's. A key that means nothing for the chosen game is refused only where given.
    Raises :class:`SpagInputError` listing every wrong or unknown key by its path.
    """
    given = copy.deepcopy(config if given is None else given)
    _refuse_renamed(config, source)
    schema = load_schema()
    _coerce_strings(config, schema, schema)
    errors = sorted(_Validator(schema).iter_errors(config), key=lambda e: list(e.path))
    # JSON Schema bounds let NaN through (every comparison with it is false) and no
    # setting means anything at infinity.
    non_finite = [
        f"key '{key}': {value} is not a finite number" for key, value in _non_finite(config)
    ]
    if errors or non_finite:
        lines = non_finite
        for err in errors:
            if err.validator == "additionalProperties":
                extra = sorted(set(err.instance) - set(err.schema.get("properties", {})))
                where = _key_path(err)
                for key in extra:
                    full = key if where == "(top level)" else f"{where}.{key}"
                    lines.append(f"unknown key '{full}'")
            else:
                lines.append(f"key '{_key_path(err)}': {err.message}")
        raise SpagInputError(f"{source}: invalid configuration:\n  " + "\n  ".join(lines))
    # The two training stages share one schema but not their paper defaults.
    for stage, objective in STAGE_OBJECTIVE.items():
        config[stage].setdefault("objective", objective)
        for key, value in paper_defaults(config[stage]["objective"]).items():
            config[stage].setdefault(key, value)
    _game_defaults(config, given, source, schema)
    _refuse_unused_coefficients(config, given, source)
    _refuse_unused_reward_settings(config, given, source)
    _check_cross_keys(config, source)
    ev = config["evaluation"]
    from spag.generation.openai_backend import is_endpoint_spec, parse_spec

    endpoint_opponent = is_endpoint_spec(ev["opponent"])
    if endpoint_opponent:
        try:
            parse_spec(ev["opponent"])
        except SpagInputError as exc:
            raise SpagInputError(f"{source}: key 'evaluation.opponent': {exc}") from None
    shared = ev["gpu_memory_utilization"] + ev["opponent_gpu_memory_utilization"]
    if config["selfplay"]["backend"] == "vllm" and not endpoint_opponent and shared > 0.95:
        # vLLM sizes each engine as a share of the GPU's total memory; the second engine
        # starts only if its share is still free (plus each engine's CUDA context).
        raise SpagInputError(
            f"{source}: keys 'evaluation.gpu_memory_utilization' + "
            f"'evaluation.opponent_gpu_memory_utilization' = {shared:g}: two vLLM engines "
            "share one GPU in evaluation games, keep the sum at most 0.95"
        )
    return config


def _folder_has_chat_template(folder: Path) -> bool:
    if any((folder / name).is_file() for name in ("chat_template.jinja", "chat_template.json")):
        return True
    try:
        tok_config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return bool(isinstance(tok_config, dict) and tok_config.get("chat_template"))


def check_run_inputs(config: dict[str, Any]) -> None:
    """Checks of a validated config that need files, made before any job runs.

    The base model's GGUF (present, a GGUF, an architecture transformers loads) and,
    with ``game.prompt_format: chat``, a chat template where it can be known now
    (a hub model is checked by its first job).
    """
    from spag.ops.base_model import PACKAGED_MODELS, check_gguf, packaged_model_file

    base = config["base_model"]
    name = base["name_or_path"]
    has_template: bool | None = None
    if base["gguf_file"]:
        info = check_gguf(base["gguf_file"])
        where, has_template = f"base_model.gguf_file ({info.path})", info.chat_template is not None
    elif name in PACKAGED_MODELS:
        info = check_gguf(packaged_model_file(name)[0])
        where, has_template = f"base_model.name_or_path '{name}'", info.chat_template is not None
    elif name == "tiny":
        where, has_template = "the embedded tiny model (base_model.name_or_path 'tiny')", False
    elif Path(name).expanduser().is_dir():
        folder = Path(name).expanduser()
        where, has_template = f"base_model.name_or_path {folder}", _folder_has_chat_template(folder)
    if config["game"]["prompt_format"] == "chat" and has_template is False:
        raise SpagInputError(
            f"key 'game.prompt_format' is 'chat', but the tokenizer of {where} has no chat "
            "template; use prompt_format 'raw'"
        )
    _check_adapter_targets(config)
    _check_vllm_head_size(config)


def _base_model_config(base: dict[str, Any]) -> Any:
    """The base model's transformers config where it can be read before any job (a GGUF
    file, the tiny model's settings, a local folder, a hub id in the local cache), else
    None: a hub model not yet downloaded is checked when its training starts."""
    from transformers import AutoConfig

    from spag.ops.base_model import PACKAGED_MODELS, packaged_model_file

    name, remote = base["name_or_path"], base["trust_remote_code"]
    if base["gguf_file"] or name in PACKAGED_MODELS:
        path = Path(base["gguf_file"]).expanduser() if base["gguf_file"] else None
        path = path or packaged_model_file(name)[0]
        return AutoConfig.from_pretrained(path.parent, gguf_file=path.name)
    if name == "tiny":
        from spag.models.tiny import tiny_config

        t = base["tiny"]
        return tiny_config(
            vocab_size=t["vocab_size"],
            hidden_size=t["hidden_size"],
            intermediate_size=t["intermediate_size"],
            num_layers=t["num_layers"],
            num_heads=t["num_heads"],
            head_dim=t["head_dim"],
        )
    try:
        return AutoConfig.from_pretrained(
            Path(name).expanduser() if Path(name).expanduser().is_dir() else name,
            revision=base["revision"],
            trust_remote_code=remote,
            local_files_only=True,
        )
    except (OSError, ValueError):
        return None


def _check_adapter_targets(config: dict[str, Any]) -> None:
    """Each stage's adapter targets modules the base model has, none of them a tied
    embedding (checked on the model built on the meta device, without weights)."""
    from spag.training.lora import LoraSettings, check_targets_for_config

    stages = [s for s in STAGE_OBJECTIVE if config[s]["peft"]]
    if not stages:
        return
    model_config = _base_model_config(config["base_model"])
    if model_config is None:
        return
    for stage in stages:
        peft = config[stage]["peft"]
        lora = LoraSettings(**{**peft, "target_modules": tuple(peft["target_modules"])})
        check_targets_for_config(
            model_config, lora, f"key '{stage}.peft'", config["base_model"]["trust_remote_code"]
        )


def check_prompts(config: dict[str, Any]) -> None:
    """The game's prompts file has every key and placeholder each seat's prompt needs."""
    from spag.game.base import load_game

    try:
        load_game(config["game"]["name"]).load_prompts(config["game"]["prompts"])
    except SpagInputError as exc:
        raise SpagInputError(f"key 'game.prompts': {exc}") from None


def check_word_source(config: dict[str, Any], source: str = "config") -> None:
    """The word source gives ``words.num_train + words.num_test`` words (made before the
    target-word job, which would otherwise fail naming its flags, not the keys)."""
    from spag.data.words import usable_words

    if load_game_deals(config) is not None:
        return  # the game deals its secrets: no word source
    w = config["words"]
    need = w["num_train"] + w["num_test"]
    try:
        words, name = usable_words(
            w["source"],
            stopwords=w["stopwords"],
            min_length=w["min_length"],
            max_length=w["max_length"],
        )
    except (SpagInputError, OSError) as exc:
        raise SpagInputError(f"{source}: key 'words.source': {exc}") from None
    if len(words) < need:
        raise SpagInputError(
            f"{source}: keys 'words.num_train' + 'words.num_test' = {need}, but "
            f"'words.source' ({name}) gives only {len(words)} usable words"
        )


def _given_keys(given: dict[str, Any], section: str, schema: dict[str, Any]) -> list[str]:
    """The keys of ``section`` in ``given`` set to something else than the schema's
    default (a config validated once holds every default: validating it again passes)."""
    node: Any = given
    props: Any = schema
    for part in section.split("."):
        node = node.get(part) if isinstance(node, dict) else None
        props = props.get("properties", {}).get(part, {})
    if not isinstance(node, dict):
        return []
    defaults = {k: v.get("default", object()) for k, v in props.get("properties", {}).items()}
    return [f"{section}.{k}" for k, v in node.items() if v != defaults.get(k, object())]


def _game_defaults(
    config: dict[str, Any], given: dict[str, Any], source: str, schema: dict[str, Any]
) -> None:
    """The chosen game's defaults (its prompts, its demonstrations), and the keys it
    cannot use refused by name: word settings for a game that deals its secrets,
    scripted demonstrations for a game without a scripted player."""
    from spag.game.base import load_game

    try:
        game = load_game(config["game"]["name"], config["game"]["settings"])
    except SpagInputError as exc:
        raise SpagInputError(f"{source}: {exc}") from None
    if config["game"]["prompts"] is None:
        config["game"]["prompts"] = game.prompts_file
    if config["data"]["imitation"] is None:
        config["data"]["imitation"] = game.demonstrations
    if game.move_set is not None and "min_new_tokens" not in (given.get("selfplay") or {}):
        # A reply is one move word, and a tokenizer may have it as one token: a longer
        # minimum would forbid the end of the turn after it (spag play checks a minimum
        # set here against the model's tokenizer).
        config["selfplay"]["min_new_tokens"] = 1
    name = f"game.name '{game.name}'"
    if game.deals is not None:
        keys = _given_keys(given, "words", schema)
        if keys:
            raise SpagInputError(
                f"{source}: key '{keys[0]}' means nothing for {name}: it deals its "
                f"{len(game.deals)} secrets itself (selfplay.games_per_secret sets the hands)"
            )
    if game.guess_text is None:
        keys = _given_keys(given, "evaluation.hints", schema)
        if keys:
            raise SpagInputError(
                f"{source}: key '{keys[0]}' means nothing for {name}: it has no guess "
                "to grade hints by"
            )
    else:
        _check_hints(config, source)
    if game.scripted_reply is None:
        keys = _given_keys(given, "data.scripted", schema)
        if config["data"]["imitation"] == "scripted":
            keys.insert(0, "data.imitation")
        if keys:
            raise SpagInputError(
                f"{source}: key '{keys[0]}': {name} has no scripted player; give "
                "demonstration games (data.imitation) or a teacher"
            )
    elif config["data"]["imitation"] != "scripted":
        keys = _given_keys(given, "data.scripted", schema)
        if keys:
            raise SpagInputError(
                f"{source}: key '{keys[0]}' means nothing unless data.imitation is "
                f"'scripted' (it is {config['data']['imitation']!r})"
            )


def _check_hints(config: dict[str, Any], source: str) -> None:
    hints = config["evaluation"]["hints"]
    listener = hints["listener"]
    if listener is None:
        return
    from spag.evaluation.hints import DEFAULT_K

    others = config["words"]["num_test"] - 1
    if others < 1:
        raise SpagInputError(
            f"{source}: key 'evaluation.hints.listener': words.num_test 1 leaves no "
            "held-out word to rank the secret among; set it to null (no graded hints)"
        )
    if hints["k"] is None:
        hints["k"] = max(1, min(DEFAULT_K, others))
    elif hints["k"] > others:
        raise SpagInputError(
            f"{source}: key 'evaluation.hints.k' ({hints['k']}) is above the {others} "
            "held-out words other than a game's secret (words.num_test - 1)"
        )
    if listener not in ("base", "imitation") and not (Path(listener) / "config.json").is_file():
        raise SpagInputError(
            f"{source}: key 'evaluation.hints.listener': {listener!r} is not 'base', "
            "'imitation' or a model folder (no config.json there)"
        )


def load_game_deals(config: dict[str, Any]) -> tuple[str, ...] | None:
    from spag.game.base import load_game

    return load_game(config["game"]["name"], config["game"]["settings"]).deals


def num_secrets(config: dict[str, Any], split: str) -> int:
    """How many secrets a split holds: the deals of a game that deals them, else
    ``words.num_train`` / ``words.num_test``."""
    deals = load_game_deals(config)
    return len(deals) if deals is not None else config["words"][f"num_{split}"]


def _refuse_unused_reward_settings(
    config: dict[str, Any], given: dict[str, Any], source: str
) -> None:
    """A ``rewards`` key the chosen scheme does not read (``Scheme.keys``: rae's
    baseline keys under ``winners``) would be accepted and ignored: refused where set to
    something else than its default."""
    from spag.game.rewards import REWARD_SCHEMES, RewardsSettings

    scheme = config["rewards"]["scheme"]
    reads = {"scheme", "control", *REWARD_SCHEMES[scheme].keys}
    others = [k for k in RewardsSettings.__dataclass_fields__ if k not in reads]
    unused = _set_off_default(given.get("rewards"), RewardsSettings, others)
    if unused:
        readers = [n for n, s in REWARD_SCHEMES.items() if unused[0] in s.keys]
        raise SpagInputError(
            f"{source}: key 'rewards.{unused[0]}' is not read by rewards.scheme {scheme} "
            f"(it is a setting of {', '.join(readers) or 'no scheme'})"
        )


def _set_off_default(set_here: dict[str, Any] | None, cls: type, keys: Iterable[str]) -> list[str]:
    """Which of ``keys`` the user set to something else than ``cls``'s default (a config
    validated once holds every default: validating it again passes)."""
    set_here = set_here or {}
    return sorted(
        k for k in keys if k in set_here and set_here[k] != cls.__dataclass_fields__[k].default
    )


def _refuse_unused_coefficients(config: dict[str, Any], given: dict[str, Any], source: str) -> None:
    """A coefficient the stage's objective has not (``clip_eps`` for ``sft_kl``) would be
    accepted and ignored: refused where the user set it to something else than its
    default (a config validated once holds every default: validating it again passes)."""
    from spag.training.settings import COEFFICIENTS, StageSettings

    for stage in STAGE_OBJECTIVE:
        objective = config[stage]["objective"]
        unused = _set_off_default(
            given.get(stage), StageSettings, COEFFICIENTS - set(coefficients(objective))
        )
        if unused:
            raise SpagInputError(
                f"{source}: key '{stage}.{unused[0]}' means nothing for '{stage}.objective' "
                f"{objective}, whose coefficients are {', '.join(coefficients(objective))}"
            )


def _check_move_objectives(config: dict[str, Any], source: str) -> None:
    """An objective over the legal moves needs a game whose moves form a closed set, and
    packed rows (the moves are read on branches of the packed sample)."""
    from spag.game.base import load_game

    game = load_game(config["game"]["name"])
    for stage in STAGE_OBJECTIVE:
        objective = config[stage]["objective"]
        if not OBJECTIVES[objective].needs_moves:
            continue
        if game.move_set is None:
            raise SpagInputError(
                f"{source}: key '{stage}.objective' {objective} learns over the legal moves, "
                f"but game.name '{game.name}' has no closed set of moves (its replies are "
                "free text); choose offline_po"
            )
        if not config[stage]["padding_free"]:
            raise SpagInputError(
                f"{source}: key '{stage}.objective' {objective} reads the legal moves on "
                f"packed rows: '{stage}.padding_free' must be true"
            )


def _check_cross_keys(config: dict[str, Any], source: str) -> None:
    """Settings that are valid alone but not together, found before any job."""
    words = config["words"]
    secrets = {split: num_secrets(config, split) for split in ("train", "test")}
    what = (
        {"train": "'words.num_train'", "test": "'words.num_test'"}
        if load_game_deals(config) is None
        else {
            s: f"the {n} deals of game.name '{config['game']['name']}'" for s, n in secrets.items()
        }
    )
    if words["min_length"] > words["max_length"]:
        raise SpagInputError(
            f"{source}: key 'words.min_length' ({words['min_length']}) is above "
            f"'words.max_length' ({words['max_length']}): no word would qualify"
        )
    shards = config["selfplay"]["num_shards"]
    if shards > secrets["train"]:
        raise SpagInputError(
            f"{source}: key 'selfplay.num_shards' ({shards}) is above {what['train']} "
            f"({secrets['train']}): a shard would have no words to play"
        )
    eval_shards = config["evaluation"]["num_shards"]
    if eval_shards > secrets["test"]:
        raise SpagInputError(
            f"{source}: key 'evaluation.num_shards' ({eval_shards}) is above "
            f"{what['test']} ({secrets['test']}): a shard would have no words to play"
        )
    teacher = config["data"]["teacher"]
    if (
        config["data"]["imitation"] == "teacher"
        and teacher["words"] == "train"
        and teacher["num_shards"] > secrets["train"]
    ):
        raise SpagInputError(
            f"{source}: key 'data.teacher.num_shards' ({teacher['num_shards']}) is above "
            f"{what['train']} ({secrets['train']}): a shard would have no words"
        )
    spag = config["spag"]
    if config["rewards"]["control"] and not OBJECTIVES[spag["objective"]].learns_from_instructions(
        types.SimpleNamespace(**spag)
    ):
        given = ", ".join(f"'spag.{k}' {spag[k]}" for k in coefficients(spag["objective"]))
        raise SpagInputError(
            f"{source}: key 'rewards.control' is true, but 'spag.objective' "
            f"{spag['objective']} with {given} learns nothing from instruction rows: the "
            "control arm's game samples weigh 0, so its SPAG step would train nothing"
        )
    _check_move_objectives(config, source)
    from spag.training.distributed import resolve_deepspeed

    for stage in STAGE_OBJECTIVE:
        try:
            resolve_deepspeed(config[stage]["deepspeed"])
        except SpagInputError as exc:
            raise SpagInputError(f"{source}: key '{stage}.deepspeed': {exc}") from None
        _check_reference_precision(config, stage, source)


def _check_reference_precision(config: dict[str, Any], stage: str, source: str) -> None:
    """The reference log-probs must come from the forward the training step runs: under
    another precision step 0's ratio is not 1 and the KL term shifts, with no error."""
    from spag.training.distributed import resolve_deepspeed, weights_dtype

    bf16, deepspeed = config[stage]["bf16"], config[stage]["deepspeed"]
    scored = config["scoring"]["dtype"]
    # "none" is no DeepSpeed, as for the training step.
    trained = weights_dtype(bf16, resolve_deepspeed(deepspeed), config[stage]["peft"] is not None)
    if trained is None:
        raise SpagInputError(
            f"{source}: key '{stage}.bf16' is true without '{stage}.deepspeed' or "
            f"'{stage}.peft': training would run float32 weights under bfloat16 autocast, "
            "a precision that no 'scoring.dtype' reproduces, so the reference log-probs "
            "would move step 0's ratio away from 1 and shift the KL term; set "
            f"'{stage}.deepspeed' or '{stage}.peft' (bfloat16 weights, scored with "
            f"'scoring.dtype: bfloat16') or '{stage}.bf16: false'"
        )
    if scored != trained:
        raise SpagInputError(
            f"{source}: key 'scoring.dtype' is {scored}, but '{stage}.bf16' is "
            f"{str(bf16).lower()}: training's forward runs in {trained}, and reference "
            "log-probs of another precision move step 0's ratio away from 1 and shift the "
            f"KL term; set 'scoring.dtype: {trained}'"
        )


def check_backend_available(config: dict[str, Any], env_per_rule: bool) -> None:
    """Refuse, before any job, a generation backend that the jobs could not import.

    Without a software deployment method (``--sdm conda``) every job runs the ``spag``
    beside Snakemake; ``selfplay.backend: vllm`` would then fail in every shard, each
    retried. With one, the play rules run in envs/vllm.yaml.
    """
    import importlib.util

    if config["selfplay"]["backend"] != "vllm":
        return
    if config["selfplay"]["vllm_env"]:
        _check_vllm_env(config["selfplay"]["vllm_env"])
        return
    if env_per_rule:
        return
    if importlib.util.find_spec("vllm") is None:
        raise SpagInputError(
            "key 'selfplay.backend' is 'vllm', but vllm is not installed beside this "
            "Snakemake and the jobs run in its environment: run with "
            "--software-deployment-method conda (the SLURM profile sets it; the play rules "
            "then use envs/vllm.yaml), name an environment that has it in selfplay.vllm_env "
            "(on CPU: scripts/setup-vllm-cpu.sh makes .venv-vllm), or set selfplay.backend: hf"
        )


def _check_vllm_env(folder: str) -> None:
    """``selfplay.vllm_env`` is an environment whose ``spag`` can import vLLM."""
    import subprocess

    spag = Path(folder).expanduser() / "bin" / "spag"
    python = spag.with_name("python")
    if not (os.access(spag, os.X_OK) and os.access(python, os.X_OK)):
        raise SpagInputError(
            f"key 'selfplay.vllm_env' is {folder}, which has no bin/spag and bin/python: "
            "name the folder of a Python environment with this package and vLLM installed "
            "(scripts/setup-vllm-cpu.sh makes .venv-vllm)"
        )
    found = subprocess.run(
        [str(python), "-c", "import importlib.util as u; print(u.find_spec('vllm') is not None)"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if found.stdout.strip() != "True":
        raise SpagInputError(
            f"key 'selfplay.vllm_env' is {folder}, whose Python cannot import vllm "
            f"({(found.stderr.strip().splitlines() or ['not installed'])[-1]})"
        )


def _check_vllm_head_size(config: dict[str, Any]) -> None:
    """vLLM's CPU attention takes a few head sizes only: a model it refuses is refused
    now, not when the first self-play shard starts its engine after imitation."""
    from spag.generation.vllm_backend import CPU_HEAD_SIZES
    from spag.ops import family_device

    if config["selfplay"]["backend"] != "vllm":
        return
    families = [f for f in ("selfplay", "evaluate") if family_device(config, f) == "cpu"]
    if not families:
        return
    base = config["base_model"]
    model = _base_model_config(base)
    if model is None:  # not readable before its job (an uncached hub id)
        return
    model = getattr(model, "text_config", None) or model
    head = getattr(model, "head_dim", None) or model.hidden_size // model.num_attention_heads
    if head in CPU_HEAD_SIZES:
        return
    if base["name_or_path"] == "tiny":
        fix = (
            f"set base_model.tiny.head_dim to one of them (its head size is {head}: hidden_size "
            f"{base['tiny']['hidden_size']} / num_heads {base['tiny']['num_heads']})"
        )
    else:
        fix = f"base_model.name_or_path {base['name_or_path']} has head size {head}"
    raise SpagInputError(
        f"key 'selfplay.backend' is 'vllm' and resources.{families[0]}.gpus is 0 (CPU), but "
        "vLLM's CPU attention takes head sizes "
        f"{', '.join(map(str, CPU_HEAD_SIZES))} only: {fix}; or play with selfplay.backend: hf"
    )
