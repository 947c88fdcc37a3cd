"""Every setting is declared once: the schema's sections are generated from the declaring
dataclasses, their bounds hold at plan time and on the command line alike, and no
function of the package writes a setting's default again."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import pkgutil
from pathlib import Path

import pytest
import yaml

import spag
from spag.config import load_schema, validate_config
from spag.errors import SpagInputError
from spag.settings import BOUNDS, cli_flags, field_type, load_section_class

PACKAGE = Path(spag.__file__).parent


def _declared(node: dict | None = None, path: tuple[str, ...] = ()) -> dict:
    """Config section path -> the class the schema file names for it (``x-section``);
    ``$defs`` entries by their name (``training``: both stages)."""
    if node is None:
        node = yaml.safe_load((PACKAGE / "schemas" / "config.schema.yaml").read_text())
    found = {}
    if "x-section" in node:
        found[path] = load_section_class(node["x-section"])
    for name, sub in (node.get("$defs") or {}).items():
        found.update(_declared(sub, ("$defs", name)))
    for name, sub in (node.get("properties") or {}).items():
        if isinstance(sub, dict):
            found.update(_declared(sub, (*path, name)))
    return found


def _sections() -> dict[tuple[str, ...], type]:
    """The config's sections by path (the top level: ``()``); ``$defs`` are used by
    reference (both training stages, every resources family)."""
    return {k: v for k, v in _declared().items() if k[:1] != ("$defs",)}


def test_every_section_is_declared_by_a_class():
    declared = {".".join(k): v.__name__ for k, v in _declared().items()}
    assert declared == {
        "$defs.resources": "ResourceSettings",
        "$defs.training": "StageSettings",
        "": "RunSettings",
        "base_model": "BaseModelSettings",
        "base_model.tiny": "TinyModelSettings",
        "words": "WordsSettings",
        "game": "GameSettings",
        "data": "DataSettings",
        "data.teacher": "TeacherSettings",
        "data.scripted": "ScriptedSettings",
        "selfplay": "SelfplaySettings",
        "rewards": "RewardsSettings",
        "scoring": "ScoringSettings",
        "tracking": "TrackingSettings",
        "calibration": "CalibrationSettings",
        "evaluation": "EvaluationSettings",
        "evaluation.hints": "HintsSettings",
        "evaluation.reasoning": "ReasoningSettings",
    }


def test_no_key_of_the_schema_is_written_by_hand():
    """Every key with a type is a field of a declaring class: the schema file only
    arranges the sections (which class, where, a section's description)."""
    schema = yaml.safe_load((PACKAGE / "schemas" / "config.schema.yaml").read_text())
    found = []

    def walk(node: dict, path: str) -> None:
        for name, sub in (node.get("properties") or {}).items():
            where = f"{path}.{name}".lstrip(".")
            if ("type" in sub or "enum" in sub) and "properties" not in sub:
                found.append(where)  # a key, not a group of sections
            walk(sub, where)
        for sub in (node.get("$defs") or {}).values():
            walk(sub, path)

    walk(schema, "")
    assert not found


def _outside(f: dataclasses.Field, kind: type) -> list[tuple[str, object]]:
    """A value just outside each of a field's bounds (an excluded bound itself)."""
    step = 1 if kind is int else 1e-3
    moved = {"ge": -step, "gt": 0, "le": step, "lt": 0}
    return [(key, f.metadata[key] + moved[key]) for key in BOUNDS if key in f.metadata]


def _bounded_fields():
    for path, cls in sorted(_declared().items()):
        for f in dataclasses.fields(cls):
            if "key" in f.metadata:
                continue
            kind = field_type(cls, f)
            for key, value in _outside(f, kind):
                yield pytest.param(path, cls, f.name, value, id=f"{'.'.join(path)}.{f.name}-{key}")


@pytest.mark.parametrize(("path", "cls", "name", "value"), list(_bounded_fields()))
def test_a_bound_holds_at_plan_time_and_on_the_command_line(path, cls, name, value):
    """One declaration, two checks: the config refuses the value naming its key, the
    step's settings refuse it naming its flag."""
    used_at = {
        ("$defs", "training"): [("imitation",), ("spag",)],
        ("$defs", "resources"): [("resources", "train"), ("resources", "teacher")],
    }
    for where in used_at.get(path, [path]):
        config: dict = {}
        node = config
        for part in where:
            node = node.setdefault(part, {})
        node[name] = value
        with pytest.raises(SpagInputError, match=rf"key '{'.'.join((*where, name))}'"):
            validate_config(config)
    f = next(f for f in dataclasses.fields(cls) if f.name == name)
    flag = "--" + f.metadata.get("flag", name).replace("_", "-")
    given = {name: value}
    if cls.__name__ == "StageSettings":
        from spag.training.settings import TrainConfig

        cls = TrainConfig
        files = ("model", "samples", "output", "checkpoint_dir", "loss_log")
        given.update({k: "x" for k in files}, objective="sft_kl")
    with pytest.raises(SpagInputError, match=rf"^{flag} must be "):
        cls(**given)
    # at the bound itself both accept it
    for key in ("ge", "le"):
        if key in f.metadata:
            cls(**{**given, name: f.metadata[key]})


def test_a_section_default_is_its_declared_default():
    config = validate_config({})
    for path, cls in _sections().items():
        node = config
        for part in path:
            node = node[part]
        for f in dataclasses.fields(cls):
            if "key" in f.metadata:
                continue
            default = f.default_factory() if f.default is dataclasses.MISSING else f.default
            if isinstance(default, tuple):
                default = list(default)
            filled = (("evaluation", "hints", "k"), ("game", "prompts"), ("data", "imitation"))
            if (*path, f.name) in filled:
                continue  # filled by validate_config (from words.num_test; the game's own)
            assert node[f.name] == default, (path, f.name)


def _setting_names() -> set[str]:
    names: set[str] = set()
    for cls in _sections().values():
        names |= {f.name for f in dataclasses.fields(cls)}
    from spag.training.settings import StageSettings

    names |= {f.name for f in dataclasses.fields(StageSettings)}
    # Names that the package also uses for other things (where a message's text comes from).
    return names - {"source"}


def _literal(node: ast.expr) -> bool:
    if isinstance(node, ast.Constant):
        return node.value is not None
    if isinstance(node, ast.UnaryOp):
        return _literal(node.operand)
    if isinstance(node, (ast.Tuple, ast.List)):
        return bool(node.elts) and all(_literal(e) for e in node.elts)
    return False


def test_no_function_writes_a_setting_default_again():
    """A parameter named like a setting takes no literal default: the dataclass owns it."""
    names = _setting_names()
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                continue
            a = node.args
            positional = [*a.posonlyargs, *a.args]
            pairs = list(
                zip(positional[len(positional) - len(a.defaults) :], a.defaults, strict=True)
            )
            pairs += [
                (k, d) for k, d in zip(a.kwonlyargs, a.kw_defaults, strict=True) if d is not None
            ]
            for arg, default in pairs:
                if arg.arg in names and _literal(default):
                    where = f"{path.relative_to(PACKAGE.parent)}:{default.lineno}"
                    found.append(f"{where} {arg.arg}={ast.unparse(default)}")
    assert not found, "settings' defaults written outside their declaration:\n" + "\n".join(found)


def test_every_module_of_the_package_imports():
    # Every module imports cleanly (a declaring one is found by the schema's x-section).
    # vLLM has its own env; __main__ runs the command line.
    skipped = {"spag.generation.vllm_backend", "spag.__main__"}
    for info in pkgutil.walk_packages([str(PACKAGE)], prefix="spag."):
        if info.name not in skipped:
            importlib.import_module(info.name)


def test_list_settings_have_list_types():
    for cls in _sections().values():
        for f in dataclasses.fields(cls):
            kind = field_type(cls, f)
            if isinstance(f.default, (list, tuple)):
                assert getattr(kind, "__origin__", None) in (list, tuple), f.name


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({"seed": None, "greedy": False, "tasks": []}, ""),
        ({"trust_remote_code": True}, "--trust-remote-code"),
        ({"tasks": ["a", "b c"]}, "--tasks a 'b c'"),
        ({"top_p": 1.0, "model_name": "my model"}, "--top-p 1.0 --model-name 'my model'"),
        (
            {"model": "x?y=1", "limit": None, "greedy": True, "num_fewshot": 0},
            "--model 'x?y=1' --greedy --num-fewshot 0",
        ),
    ],
)
def test_cli_flags_render_a_shell_command_line(options, expected):
    # None, False and [] leave the flag out; True is a bare flag; a list is one flag then
    # its values; values are shell-quoted; underscores become dashes.
    assert cli_flags(**options) == expected


def test_schema_names_what_the_registries_hold():
    """The config keys that pick by name (a game, a reward scheme, an objective) allow
    exactly the registered names, read from the registries themselves."""
    from spag.game.base import GAMES
    from spag.game.rewards import REWARD_SCHEMES
    from spag.training.objectives import OBJECTIVES

    schema = load_schema()
    props = schema["properties"]
    assert props["game"]["properties"]["name"]["enum"] == list(GAMES)
    assert props["rewards"]["properties"]["scheme"]["enum"] == list(REWARD_SCHEMES)
    assert schema["$defs"]["training"]["properties"]["objective"]["enum"] == list(OBJECTIVES)


def test_a_registered_name_is_a_valid_config_value_with_no_schema_edit(monkeypatch):
    """Registering is the one step: the schema's allowed names follow the registry."""
    from spag.config import validate_config
    from spag.errors import SpagInputError
    from spag.game import rewards
    from spag.training import objectives

    with pytest.raises(SpagInputError, match="key 'rewards.scheme'"):
        validate_config({"rewards": {"scheme": "losers_too"}})
    monkeypatch.setitem(rewards.REWARD_SCHEMES, "losers_too", rewards.Scheme(rewards.zero_sum))
    monkeypatch.setitem(objectives.OBJECTIVES, "offline_po_copy", objectives.OfflinePO())
    config = validate_config(
        {"rewards": {"scheme": "losers_too"}, "spag": {"objective": "offline_po_copy"}}
    )
    assert config["rewards"]["scheme"] == "losers_too"
    assert config["spag"]["objective"] == "offline_po_copy"


@pytest.mark.parametrize(
    "overlay, key",
    [
        ({"game": {"name": "chess"}}, "game.name"),
        ({"rewards": {"scheme": "losers"}}, "rewards.scheme"),
        ({"spag": {"objective": "dpo"}}, "spag.objective"),
    ],
)
def test_an_unregistered_name_is_refused_naming_its_key(overlay, key):
    from spag.config import validate_config
    from spag.errors import SpagInputError

    with pytest.raises(SpagInputError, match=f"key '{key}'"):
        validate_config(overlay)
