"""Rewards, role weights and the samples table (docs/design.md section 3 and 6)."""

from __future__ import annotations

import dataclasses
import math
import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spag.cli import main
from spag.data.tables import EPISODE_FIELDS, SAMPLE_SCHEMA
from spag.errors import SpagInputError
from spag.game import imitation, rewards
from spag.game.rewards import RewardsSettings, role_weights
from spag.game.taboo import TABOO
from spag.judge import judge_game

ROLES = ("attacker", "defender")


def assign_rewards(table: pa.Table, **given) -> pa.Table:
    """The step's function with the config's rewards section (its keys among ``given``,
    the rest at their defaults), seed 0 and a plain source name."""
    keys = {f.name for f in dataclasses.fields(RewardsSettings)}
    settings = RewardsSettings(**{k: given.pop(k) for k in list(given) if k in keys})
    return rewards.assign_rewards(table, settings, **{"seed": 0, "source": "episodes", **given})


def imitation_samples(*tables: pa.Table | None, **given) -> pa.Table:
    return imitation.imitation_samples(
        *tables, **{"seed": 0, "source": "episodes", "imitate": "winners", **given}
    )


def episodes_table(games: list[tuple[str, str, int, list[str]]]) -> pa.Table:
    """games: (episode_id, target_word, max_turns, contents in turn order)."""
    return pa.Table.from_pylist(
        [
            {
                "episode_id": eid,
                "target_word": word,
                "max_turns": t,
                "history": [{"role": ROLES[i % 2], "content": c} for i, c in enumerate(msgs)],
            }
            for eid, word, t, msgs in games
        ],
        schema=pa.schema(EPISODE_FIELDS),
    )


GAMES = [
    # attacker wins at message 6: attacker messages 0, 2, 4
    ("g1", "cat", 5, ["hi", "hello", "pets?", "dogs", "purring animal?", "a cat"]),
    # defender wins at message 4: defender messages 1, 3
    ("g2", "tree", 5, ["forest", "leaves?", "tall and green", "I know the word! It is tree!"]),
    ("g3", "bus", 5, ["I ride a bus"]),  # broke the rules
    ("g4", "city", 1, ["hello", "hi", "city"]),  # tie at 2 (cut-off before the mention)
    ("g5", "knife", 5, ["cut?", "  I know the word! It is fork!  "]),  # wrong guess: attacker
]


def test_samples_contract_rewards_and_weights():
    out = assign_rewards(episodes_table(GAMES), decay_weight=0.8, seed=1, game=TABOO)
    assert out.schema == SAMPLE_SCHEMA
    rows = out.to_pylist()
    assert [(r["episode_id"], r["turn"], r["role"]) for r in rows] == [
        ("g1", 0, "attacker"),
        ("g1", 2, "attacker"),
        ("g1", 4, "attacker"),
        ("g2", 1, "defender"),
        ("g2", 3, "defender"),
        ("g5", 0, "attacker"),
    ]
    assert {r["type"] for r in rows} == {"game"}
    assert rows[5]["target"] == "cut?"
    # g1: coefficients 1.25, 1.5625, 1.953125 normalised
    c = [1.25, 1.25**2, 1.25**3]
    for r, ci in zip(rows[:3], c, strict=True):
        assert r["reward"] == pytest.approx(ci / sum(c), abs=1e-12)
    assert rows[5]["reward"] == 1.0
    # 3 decisive games: 2 attacker wins, 1 defender win
    for r in rows:
        expected = 3 / (2 * 2) if r["role"] == "attacker" else 3 / (2 * 1)
        assert r["weight"] == pytest.approx(expected)
    # The query is the prompt before the message, ending with a cue.
    assert "hello" in rows[1]["query"] and "pets?" not in rows[1]["query"]
    assert "`cat`" in rows[0]["query"] or "cat" in rows[0]["query"]


def test_target_is_stripped_and_reward_sums_to_one():
    games = [
        ("e", "knife", 5, ["  a tool  ", "\tspoon\n", " sharp ", " I know the word! It is knife "])
    ]
    rows = assign_rewards(episodes_table(games), game=TABOO).to_pylist()
    assert [r["target"] for r in rows] == ["spoon", "I know the word! It is knife"]
    assert math.fsum(r["reward"] for r in rows) == pytest.approx(1.0, abs=1e-12)
    assert rows[1]["reward"] / rows[0]["reward"] == pytest.approx(1 / 0.8)


def test_role_weights():
    assert role_weights({"attacker": 3, "defender": 1}, game=TABOO) == {
        "attacker": 4 / 6,
        "defender": 2.0,
    }
    assert role_weights({"defender": 5}, game=TABOO) == {"attacker": 0.0, "defender": 0.5}
    assert role_weights({}, game=TABOO) == {"attacker": 0.0, "defender": 0.0}


def test_seed_makes_prompts_deterministic():
    t = episodes_table(GAMES)
    a = assign_rewards(t, seed=3, game=TABOO)
    assert a.equals(assign_rewards(t, seed=3, game=TABOO))
    queries = [assign_rewards(t, seed=s, game=TABOO).column("query").to_pylist() for s in range(6)]
    assert len({tuple(q) for q in queries}) > 1


def test_control_arm_keeps_every_row_and_weighs_the_games_0():
    sft = pa.table({"query": ["What is 2+2?"], "target": ["4"]})
    t = episodes_table(GAMES)
    spag = assign_rewards(t, seed=3, sft=sft, game=TABOO).to_pandas()
    control = assign_rewards(t, seed=3, sft=sft, control=True, game=TABOO).to_pandas()
    games = spag["type"] == "game"
    assert games.sum() > 0 and (spag.loc[games, "weight"] > 0).all()
    assert (control.loc[games, "weight"] == 0).all()
    assert (control.loc[~games, "weight"] == 1.0).all()
    assert spag.drop(columns="weight").equals(control.drop(columns="weight"))


def test_sft_rows_appended():
    sft = pa.table({"query": ["What is 2+2?", "Name a colour."], "target": ["4", "Blue"]})
    out = assign_rewards(episodes_table(GAMES), sft=sft, game=TABOO).to_pylist()
    tail = out[-2:]
    assert [r["type"] for r in tail] == ["sft", "sft"]
    assert [(r["query"], r["target"]) for r in tail] == [
        ("What is 2+2?", "4"),
        ("Name a colour.", "Blue"),
    ]
    assert all(r["role"] is None and r["episode_id"] is None and r["turn"] is None for r in tail)
    assert all(r["reward"] == 1.0 and r["weight"] == 1.0 for r in tail)


def test_imitation_samples():
    sft = pa.table({"query": ["q"], "target": ["t"]})
    out = imitation_samples(episodes_table(GAMES), sft, seed=0, game=TABOO)
    assert out.schema == SAMPLE_SCHEMA
    rows = out.to_pylist()
    assert len(rows) == 7
    assert all(r["weight"] == 1.0 and r["reward"] == 1.0 for r in rows)
    assert [r["type"] for r in rows] == ["game"] * 6 + ["sft"]


# --- Property: rewards against a literal restatement of section 3 ---------------------


@st.composite
def random_games(draw):
    n = draw(st.integers(1, 12))
    pieces = st.sampled_from(
        [
            "hi",
            "cat",
            "cats",
            "I know the word! It is cat!",
            "I know the word! It is dog!",
            "tell me more",
            "category",
        ]
    )
    games = []
    for i in range(n):
        msgs = draw(st.lists(pieces, max_size=10))
        games.append((f"ep{i}", "cat", draw(st.integers(1, 5)), msgs))
    return games


def reference_samples(games, decay):
    out, n_a, n_d = [], 0, 0
    for eid, word, t, msgs in games:
        history = [{"role": ROLES[i % 2], "content": c} for i, c in enumerate(msgs)]
        outcome, n = judge_game(history, word, t)
        if outcome == "attacker_wins":
            winner, n_a = "attacker", n_a + 1
        elif outcome == "defender_wins":
            winner, n_d = "defender", n_d + 1
        else:
            continue
        turns = [i for i in range(n) if history[i]["role"] == winner]
        coeffs = [(1 / decay) ** (k + 1) for k in range(len(turns))]
        for i, c in zip(turns, coeffs, strict=True):
            out.append((eid, i, winner, history[i]["content"].strip(), c / sum(coeffs)))
    n = n_a + n_d
    w = {"attacker": n / (2 * n_a) if n_a else 0.0, "defender": n / (2 * n_d) if n_d else 0.0}
    return [(*r, w[r[2]]) for r in out]


@settings(max_examples=80, deadline=None)
@given(random_games(), st.sampled_from([0.5, 0.8, 0.9, 1.0]))
def test_rewards_match_reference(games, decay):
    expected = reference_samples(games, decay)
    out = assign_rewards(episodes_table(games), decay_weight=decay, seed=0, game=TABOO).to_pylist()
    got = [
        (r["episode_id"], r["turn"], r["role"], r["target"], r["reward"], r["weight"]) for r in out
    ]
    assert len(got) == len(expected)
    for g, e in zip(got, expected, strict=True):
        assert g[:4] == e[:4]
        assert abs(g[4] - e[4]) <= 1e-9 and abs(g[5] - e[5]) <= 1e-12
    if expected:
        # Each role carries half of the total weight when both roles won at least once.
        by_game: dict[str, list] = {}
        for r in out:
            by_game.setdefault(r["episode_id"], []).append(r)
        for rows in by_game.values():
            assert math.fsum(r["reward"] for r in rows) == pytest.approx(1.0, abs=1e-9)
            for a, b in zip(rows, rows[1:], strict=False):
                assert b["reward"] / a["reward"] == pytest.approx(1 / decay)
        per_game_weight = {}
        for r in out:
            per_game_weight[r["episode_id"]] = (r["role"], r["weight"])
        roles = [v[0] for v in per_game_weight.values()]
        if "attacker" in roles and "defender" in roles:
            att = sum(w for role, w in per_game_weight.values() if role == "attacker")
            dfd = sum(w for role, w in per_game_weight.values() if role == "defender")
            assert att == pytest.approx(dfd) == pytest.approx(len(per_game_weight) / 2)


# --- The command ----------------------------------------------------------------------


def test_command_end_to_end(tmp_path):
    ep = tmp_path / "episodes.parquet"
    pq.write_table(episodes_table(GAMES), ep)
    sft = tmp_path / "sft.parquet"
    pq.write_table(pa.table({"query": ["q"], "target": ["t"]}), sft)
    out = tmp_path / "samples.parquet"
    args = [
        "assign-rewards",
        "--episodes",
        str(ep),
        "--output",
        str(out),
        "--sft-data",
        str(sft),
        "--decay-weight",
        "0.8",
        "--seed",
        "7",
    ]
    assert main(args) == 0
    table = pq.read_table(out)
    assert table.schema == SAMPLE_SCHEMA
    assert table.num_rows == 7
    first = out.read_bytes()
    assert main(args) == 0
    assert out.read_bytes() == first  # same seed, same file


def test_command_accepts_judged_episodes(tmp_path):
    from spag.game.episodes import judge_table

    ep = tmp_path / "episodes.parquet"
    pq.write_table(judge_table(episodes_table(GAMES), game=TABOO), ep)
    out = tmp_path / "samples.parquet"
    assert main(["assign-rewards", "--episodes", str(ep), "--output", str(out)]) == 0
    assert pq.read_table(out).num_rows == 6


def test_rewards_read_the_stored_verdict_of_a_judged_table():
    """The merge step judges; rewards read its verdict instead of judging again: a judged
    table whose stored outcome says otherwise is rewarded by what it says."""
    from spag.game.episodes import judge_table

    judged = judge_table(episodes_table(GAMES), game=TABOO)
    assert assign_rewards(judged, game=TABOO) == assign_rewards(episodes_table(GAMES), game=TABOO)
    outcomes = judged.column("outcome").to_pylist()
    assert outcomes[1] == "defender_wins"  # g2: the defender guessed at message 4
    outcomes[1] = "attacker_wins"
    stored = judged.set_column(judged.schema.get_field_index("outcome"), "outcome",
                               pa.array(outcomes))  # fmt: skip
    rows = assign_rewards(stored, game=TABOO).to_pylist()
    assert [(r["turn"], r["role"]) for r in rows if r["episode_id"] == "g2"] == [
        (0, "attacker"),
        (2, "attacker"),
    ]
    n = judged.column("num_messages").to_pylist()
    n[0] = 7  # g1 has 6 messages
    bad = judged.set_column(judged.schema.get_field_index("num_messages"), "num_messages",
                            pa.array(n, judged.schema.field("num_messages").type))  # fmt: skip
    with pytest.raises(SpagInputError, match="'num_messages' must be between 0 and.*6.*'g1'"):
        assign_rewards(bad, game=TABOO)


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda t: t.drop_columns(["target_word"]), "missing column 'target_word'"),
        (lambda t: t.slice(0, 0), "empty"),
        (lambda t: t.set_column(2, "max_turns", pa.array([0, 5, 5, 1, 5])), "max_turns"),
        (lambda t: t.set_column(0, "episode_id", pa.array(["a", "b", "a", "c", "d"])), "'a'"),
        (lambda t: t.set_column(2, "max_turns", pa.array(["x"] * 5)), "max_turns"),
    ],
)
def test_command_bad_input_leaves_no_output(tmp_path, capsys, mutate, message):
    ep = tmp_path / "episodes.parquet"
    pq.write_table(mutate(episodes_table(GAMES)), ep)
    out = tmp_path / "samples.parquet"
    assert main(["assign-rewards", "--episodes", str(ep), "--output", str(out)]) == 2
    err = capsys.readouterr().err
    assert message in err and str(ep) in err
    assert list(tmp_path.iterdir()) == [ep]


def test_bad_history_named_by_episode(tmp_path):
    bad_roles = pa.Table.from_pylist(
        [
            {
                "episode_id": "x1",
                "target_word": "cat",
                "max_turns": 5,
                "history": [
                    {"role": "attacker", "content": "a"},
                    {"role": "attacker", "content": "b"},
                ],
            }
        ],
        schema=pa.schema(EPISODE_FIELDS),
    )
    with pytest.raises(SpagInputError, match=r"alternate.*message 1 of episode 'x1'"):
        assign_rewards(bad_roles, game=TABOO)
    unknown = bad_roles.set_column(
        3, "history", pa.array([[{"role": "judge", "content": "a"}]], type=EPISODE_FIELDS[3].type)
    )
    with pytest.raises(SpagInputError, match=r"message 0 of episode 'x1' has role 'judge'"):
        assign_rewards(unknown, game=TABOO)
    null_content = bad_roles.set_column(
        3,
        "history",
        pa.array([[{"role": "attacker", "content": None}]], type=EPISODE_FIELDS[3].type),
    )
    with pytest.raises(SpagInputError, match=r"message 0 of episode 'x1' has null content"):
        assign_rewards(null_content, game=TABOO)
    null_message = bad_roles.set_column(
        3,
        "history",
        pa.array([[{"role": "attacker", "content": "a"}, None]], type=EPISODE_FIELDS[3].type),
    )
    with pytest.raises(SpagInputError, match=r"message 1 of episode 'x1' is null"):
        assign_rewards(null_message, game=TABOO)
    int_content = bad_roles.set_column(
        3, "history", pa.array([[{"role": "attacker", "content": 3}]])
    )
    with pytest.raises(SpagInputError, match=r"'content' has type int64"):
        assign_rewards(int_content, game=TABOO)
    with pytest.raises(SpagInputError, match="sft"):
        assign_rewards(
            episodes_table(GAMES), sft=pa.table({"query": ["q"]}), sft_source="sft", game=TABOO
        )


def test_random_module_state_is_not_used():
    t = episodes_table(GAMES)
    random.seed(1)
    a = assign_rewards(t, seed=0, game=TABOO)
    random.seed(2)
    assert a.equals(assign_rewards(t, seed=0, game=TABOO))


def test_sliced_and_chunked_episodes_read_as_their_rows():
    from spag.game.episodes import load_episodes

    table = episodes_table(GAMES)
    _, whole = load_episodes(table, "t", game=TABOO)
    for start in range(1, len(GAMES)):
        assert load_episodes(table.slice(start), "t", game=TABOO)[1] == whole[start:]
    chunked = pa.concat_tables([table.slice(0, 2), table.slice(2)])
    assert load_episodes(chunked, "t", game=TABOO)[1] == whole
