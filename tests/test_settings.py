"""Every setting is declared once: the schema agrees with the declaring dataclass, and no
function of the package writes a setting's default again."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import pkgutil
from pathlib import Path

import pytest

import spag
from spag.config import load_schema
from spag.settings import SECTIONS, cli_flags, field_type

PACKAGE = Path(spag.__file__).parent

# Modules that declare settings (importing them registers their sections).
DECLARING = [
    "spag.game.settings",
    "spag.training.settings",
    "spag.generation.settings",
    "spag.training.scoring",
    "spag.game.rewards",
    "spag.data.words",
    "spag.evaluation.reasoning",
    "spag.evaluation.hints",
]
# Keys of a section that another section declares (a subsection), or the workflow alone
# reads (no step takes them).
OWNED_ELSEWHERE = {("evaluation",): {"reasoning", "hints"}}


def _sections() -> dict[tuple[str, ...], type]:
    for name in DECLARING:
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as err:  # a module that moved: the list must follow
            pytest.fail(f"{name}: {err}")
    return dict(SECTIONS)


def _schema_section(path: tuple[str, ...]) -> dict:
    schema = load_schema()
    node = schema
    for key in path:
        node = node["properties"][key]
        if "$ref" in node:
            node = schema["$defs"][node["$ref"].rsplit("/", 1)[-1]]
    return node["properties"]


def test_the_steps_declare_their_sections():
    declared = _sections()
    expected = {
        ("game",),
        ("selfplay",),
        ("evaluation",),
        ("evaluation", "reasoning"),
        ("evaluation", "hints"),
        ("scoring",),
        ("rewards",),
        ("words",),
    }
    assert expected <= set(declared), sorted(expected - set(declared))


@pytest.mark.parametrize("path", sorted(_sections()), ids=".".join)
def test_schema_defaults_are_the_declared_defaults(path):
    cls = _sections()[path]
    props = _schema_section(path)
    fields = {f.name: f for f in dataclasses.fields(cls) if "key" not in f.metadata}
    section_keys = set(props) - OWNED_ELSEWHERE.get(path, set())
    missing = section_keys - set(fields)
    assert not missing, f"{'.'.join(path)}: schema keys without a declaration: {missing}"
    for key in section_keys:
        f = fields[key]
        declared = f.default
        if f.default_factory is not dataclasses.MISSING:
            declared = f.default_factory()
        if isinstance(declared, tuple):
            declared = list(declared)
        assert props[key].get("default") == declared, f"{'.'.join(path)}.{key}"
        assert f.metadata.get("help"), f"{'.'.join(path)}.{key} has no help text"


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
    # The declarations above are only found in modules that import cleanly.
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
    monkeypatch.setitem(rewards.REWARD_SCHEMES, "losers_too", rewards.zero_sum)
    monkeypatch.setitem(objectives.OBJECTIVES, "offline_po_copy", objectives.OfflinePO)
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
