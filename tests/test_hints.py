"""Graded hints (spag.evaluation.hints): the listener's scores against a plain forward
pass, the secret's rank among held-out distractors, the per-model summary and its
pairing, and an independent check on hand-made dialogues with a real model."""

from __future__ import annotations

import math

import pyarrow as pa
import pytest

from spag.errors import SpagInputError
from spag.evaluation.hints import (
    HINT_SCHEMA,
    NEUTRAL_MESSAGE,
    Listener,
    chance_rr,
    distractors,
    hint_ranks,
    message_key,
    paired_difference,
    ranks_in,
    reciprocal_rank,
    summarize_hints,
    unique_dialogues,
    variance_shares,
)
from spag.game.taboo import TABOO, is_correct_prediction

WORDS = ["apple", "river", "guitar", "doctor", "window", "garden", "planet", "coffee",
         "bridge", "winter", "pencil", "castle"]  # fmt: skip


def test_distractors_are_seeded_and_exclude_the_secret():
    a = distractors(WORDS, "apple", 5, seed=1)
    assert a == distractors(WORDS, "apple", 5, seed=1)  # every model's games of the word
    assert a != distractors(WORDS, "apple", 5, seed=2)
    assert "apple" not in a and len(set(a)) == 5
    with pytest.raises(SpagInputError, match=r"evaluation\.hints\.k"):
        distractors(WORDS, "apple", 12, seed=1)


def test_the_guess_scored_is_a_correct_guess():
    assert is_correct_prediction(TABOO.guess_text("apple"), "apple")


def test_listener_scores_match_a_plain_forward_pass(tiny_model_dir):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    listener = Listener(
        tiny_model_dir, prompt_format="raw", dtype="float32", device="cpu", trust_remote_code=False
    )
    prompt = "The attacker said: a red fruit that keeps the doctor away.\n### Your message:"
    guesses = [TABOO.guess_text(w) for w in ("apple", "river", "a")]
    got = listener.logprobs(prompt, guesses)
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    ids = tok(prompt).input_ids
    for guess, score in zip(guesses, got, strict=True):
        target = tok(guess, add_special_tokens=False).input_ids
        with torch.no_grad():
            logp = torch.log_softmax(model(torch.tensor([ids + target])).logits[0].float(), -1)
        want = sum(float(logp[len(ids) - 1 + i, t]) for i, t in enumerate(target))
        assert score == pytest.approx(want, abs=1e-4)


def _episode(eid, word, attacker_messages, role="attacker"):
    history = []
    for text in attacker_messages:
        history += [{"role": "attacker", "content": text}, {"role": "defender", "content": "hm"}]
    return {"episode_id": eid, "target_word": word, "history": history, "max_turns": 5,
            "policy_role": role}  # fmt: skip


def test_ranks_one_row_per_attacker_message(tiny_model_dir):
    listener = Listener(
        tiny_model_dir, prompt_format="raw", dtype="float32", device="cpu", trust_remote_code=False
    )
    eps = [
        _episode("g1", "apple", ["a fruit", "red and round"]),
        _episode("g2", "river", ["water"]),
    ]
    table = hint_ranks(listener, TABOO, TABOO.load_prompts(), eps, WORDS, k=5, seed=0)
    assert set(table.column("source").to_pylist()) == {"eval"}
    assert table.schema == HINT_SCHEMA
    rows = table.to_pylist()
    assert [(r["episode_id"], r["attacker_turn"], r["message"]) for r in rows] == [
        ("g1", 1, 0), ("g1", 2, 2), ("g2", 1, 0),
    ]  # fmt: skip
    assert all(1 <= r["rank"] <= 6 and r["candidates"] == 6 for r in rows)
    assert all(1 <= r["calibrated_rank"] <= 6 for r in rows)
    # The message that breaks the rules (it says the word) is not graded.
    broke = _episode("g3", "apple", ["a fruit", "an apple a day"])
    rows = hint_ranks(listener, TABOO, TABOO.load_prompts(), [broke], WORDS, k=5, seed=0)
    assert rows.column("attacker_turn").to_pylist() == [1]


def test_the_calibrated_rank_subtracts_the_neutral_dialogues_log_probability(tiny_model_dir):
    """Each guess's log-probability after the dialogue minus after a neutral one of the
    same shape (every message "..."), as a plain scoring of both prompts computes."""
    listener = Listener(
        tiny_model_dir, prompt_format="raw", dtype="float32", device="cpu", trust_remote_code=False
    )
    prompts = TABOO.load_prompts()
    # g3's secret is not among the held-out words: a demonstration's, as the defender's
    # inference reads them.
    eps = [_episode("g1", "apple", ["a fruit", "red and round"]), _episode("g2", "river", ["sea"]),
           _episode("g3", "orchestra", ["many players", "a conductor"])]  # fmt: skip
    assert "orchestra" not in WORDS
    rows = hint_ranks(listener, TABOO, prompts, eps, WORDS, k=5, seed=0).to_pylist()
    assert {r["episode_id"] for r in rows} == {"g1", "g2", "g3"}
    for ep in eps:
        candidates = [ep["target_word"], *distractors(WORDS, ep["target_word"], 5, 0)]
        guesses = [TABOO.guess_text(w) for w in candidates]
        for r in (r for r in rows if r["episode_id"] == ep["episode_id"]):
            seen = ep["history"][: r["message"] + 1]
            neutral = [{"role": m["role"], "content": NEUTRAL_MESSAGE} for m in seen]
            after, before = (
                listener.logprobs(TABOO.play_prompt(prompts, h, "defender", "x", 5), guesses)
                for h in (seen, neutral)
            )
            lifted = [a - b for a, b in zip(after, before, strict=True)]
            assert r["rank"] == 1 + sum(x > after[0] for x in after[1:])
            assert r["calibrated_rank"] == 1 + sum(x > lifted[0] for x in lifted[1:])


def test_ranks_scored_before_calibration_summarize_raw_only():
    table = _table([("a", "apple", "attacker", 1, 2)], calibrated=[1])
    assert ranks_in(table) == ("calibrated", "raw", "message")
    assert summarize_hints(table, "m")[0]["mrr_first"] == 1.0
    assert summarize_hints(table, "m", rank="raw")[0]["mrr_first"] == 0.5
    old = table.drop_columns(["calibrated_rank", "message_rr", "message_key"])
    assert ranks_in(old, table) == ("raw",)
    assert summarize_hints(old, "m", rank="raw")[0]["rank"] == "raw"
    with pytest.raises(SpagInputError, match="without 'calibrated_rank'"):
        summarize_hints(old, "m")


def test_the_summary_command_writes_both_ranks_and_pairs_each_with_its_own(tmp_path):
    import csv

    from spag.cli import main
    from spag.data.tables import write_parquet

    m0 = _table([("a", "apple", "attacker", 1, 2), ("b", "river", "attacker", 1, 2)],
                calibrated=[4, 4])  # fmt: skip
    m1 = _table([("a", "apple", "attacker", 1, 1), ("b", "river", "attacker", 1, 2)],
                calibrated=[1, 1])  # fmt: skip
    for name, t in (("m0", m0), ("m1", m1)):
        write_parquet(t, tmp_path / f"{name}.parquet")
    out = tmp_path / "hints.tsv"
    assert main(["summarize-hints", "--hints", str(tmp_path / "m0.parquet"),
                 str(tmp_path / "m1.parquet"), "--models", "m0", "m1", "--reference", "m0",
                 "--output", str(out)]) == 0  # fmt: skip
    with out.open() as fh:
        rows = {(r["model"], r["role"], r["rank"]): r for r in csv.DictReader(fh, delimiter="\t")}
    assert float(rows["m1", "all", "raw"]["paired_mrr_best_diff"]) == pytest.approx(0.25)
    assert float(rows["m1", "all", "calibrated"]["paired_mrr_best_diff"]) == pytest.approx(0.75)
    assert float(rows["m0", "all", "calibrated"]["mrr_best"]) == pytest.approx(0.25)
    # A table scored before calibration: the raw rank only, for every model.
    write_parquet(
        m0.drop_columns(["calibrated_rank", "message_rr", "message_key"]), tmp_path / "m0.parquet"
    )
    assert main(["summarize-hints", "--hints", str(tmp_path / "m0.parquet"),
                 str(tmp_path / "m1.parquet"), "--models", "m0", "m1", "--reference", "m0",
                 "--output", str(out)]) == 0  # fmt: skip
    with out.open() as fh:
        assert {r["rank"] for r in csv.DictReader(fh, delimiter="\t")} == {"raw"}


def _table(rows, source="eval", calibrated=None, alone=None):
    """Hint ranks of (episode, word, role, turn, rank) rows; the calibrated rank is
    ``calibrated``'s, else the raw rank; the message rank ``alone``'s (a reciprocal
    rank), else the raw rank's reciprocal; each message's text its episode and turn."""
    cols = {f.name: [] for f in HINT_SCHEMA}
    for i, (eid, word, role, turn, rank) in enumerate(rows):
        cols["source"].append(source)
        for name, v in zip(("episode_id", "target_word", "policy_role", "attacker_turn", "rank"),
                           (eid, word, role, turn, rank), strict=True):  # fmt: skip
            cols[name].append(v)
        cols["message"].append(2 * (turn - 1))
        cols["reciprocal_rank"].append(1 / rank)
        cols["candidates"].append(21)
        cols["calibrated_rank"].append(rank if calibrated is None else calibrated[i])
        cols["message_rr"].append(1 / rank if alone is None else alone[i])
        cols["message_key"].append(message_key(f"{eid}-{turn}"))
    return pa.table(cols, schema=HINT_SCHEMA)


def test_summary_first_last_best_and_pairing():
    table = _table([("a", "apple", "attacker", 1, 4), ("a", "apple", "attacker", 2, 1),
                    ("b", "river", "attacker", 1, 2), ("b", "river", "attacker", 2, 5)])  # fmt: skip
    rows = {r["role"]: r for r in summarize_hints(table, "m")}
    att = rows["attacker"]
    assert att["games"] == 2
    assert att["mrr_first"] == pytest.approx((1 / 4 + 1 / 2) / 2)
    assert att["mrr_last"] == pytest.approx((1 + 1 / 5) / 2)
    assert att["mrr_best"] == pytest.approx((1 + 1 / 2) / 2)
    assert att["top1_best"] == pytest.approx(0.5) and att["top1_first"] == 0.0
    assert att["mrr_best_lo"] < att["mrr_best"] < att["mrr_best_hi"]
    # A percentile bootstrap over words stays inside the reciprocal ranks' range; the
    # normal interval of these three games, 0.37 +- 0.63, went below 0.
    low = _table([("a", "apple", "attacker", 1, 1), ("b", "river", "attacker", 1, 20),
                  ("c", "stone", "attacker", 1, 21)])  # fmt: skip
    row = summarize_hints(low, "m")[0]
    assert 1 / 21 <= row["mrr_first_lo"] < row["mrr_first"] < row["mrr_first_hi"] <= 1
    assert math.isnan(summarize_hints(low.slice(0, 1), "m")[0]["mrr_first_lo"])
    # The top-1 rate's interval is Wilson's: inside [0, 1] even at 0 of 2.
    assert att["top1_first_lo"] == 0.0 and 0.0 < att["top1_first_hi"] < 1.0
    assert 0.0 < att["top1_best_lo"] < 0.5 < att["top1_best_hi"] < 1.0
    reference = _table([("x", "apple", "attacker", 1, 2), ("y", "river", "attacker", 1, 2)])
    diff = paired_difference(table, reference)
    assert diff["pairs"] == 2
    assert diff["mrr_best_diff"] == pytest.approx(((1 - 0.5) + (0.5 - 0.5)) / 2)
    assert diff["lo"] <= diff["mrr_best_diff"] <= diff["hi"]
    assert math.isnan(paired_difference(table, _table([]))["mrr_best_diff"])
    # The defender's inference: the same dialogues, paired dialogue by dialogue.
    same = _table([("a", "apple", None, 1, 1), ("b", "river", None, 1, 3)], "demonstrations")
    ref = _table([("a", "apple", None, 1, 2), ("b", "river", None, 1, 3)], "demonstrations")
    by_source = {r["source"]: r for r in summarize_hints(same, "m", by="source")}
    assert set(by_source) == {"demonstrations", "all"}
    assert by_source["demonstrations"]["mrr_first"] == pytest.approx((1 + 1 / 3) / 2)
    diff = paired_difference(same, ref, ("source", "episode"))
    assert diff["pairs"] == 2 and diff["mrr_best_diff"] == pytest.approx(0.25)
    # Dialogues of one secret share its distractors: they are resampled together, so
    # two dialogues of one secret give no interval.
    one_secret = _table([("a", "apple", None, 1, 1), ("b", "apple", None, 1, 3)], "m0_games")
    row = summarize_hints(one_secret, "m", by="source")[0]
    assert row["games"] == 2 and math.isnan(row["mrr_first_lo"])


def test_unique_dialogues_reads_a_repeated_dialogue_once():
    # M0 against M0: its attacker game and its defender game on a word are one dialogue.
    said = [{"role": "attacker", "content": "A fruit."}, {"role": "defender", "content": "Pear?"}]
    other = [{"role": "attacker", "content": "Red and round."}]
    episodes = [
        {"episode_id": "a", "target_word": "apple", "history": said, "policy_role": "attacker"},
        {"episode_id": "d", "target_word": "apple", "history": said, "policy_role": "defender"},
        {"episode_id": "o", "target_word": "apple", "history": other, "policy_role": "attacker"},
        {"episode_id": "r", "target_word": "river", "history": said, "policy_role": "attacker"},
    ]
    assert [ep["episode_id"] for ep in unique_dialogues(episodes)] == ["a", "o", "r"]


# Ten words, each with a dialogue of synonyms / close clues and one of unrelated words.
HAND_MADE = [
    ("doctor", "Someone who works in a hospital and treats patients.", "A small grey stone on a beach."),
    ("river", "Water that flows from the mountains down to the sea.", "A loud guitar solo at a concert."),
    ("coffee", "A hot dark drink people have in the morning, made from beans.", "A tall ladder in a barn."),
    ("winter", "The cold season of the year, with snow and short days.", "A pencil on a wooden desk."),
    ("guitar", "A string instrument that rock musicians play.", "A bowl of warm soup."),
    ("planet", "A large round body like Mars or Earth that orbits the sun.", "A pair of old shoes."),
    ("bridge", "You cross it to get over a river by car or on foot.", "A cup of green tea."),
    ("castle", "A big stone fortress where a king and queen lived.", "A fast bicycle race."),
    ("window", "A glass pane in a wall that lets the light into a room.", "A plate of spaghetti."),
    ("garden", "A place behind a house where flowers and vegetables grow.", "A broken calculator."),
]  # fmt: skip


def test_clues_rank_the_secret_above_unrelated_words(smollm2_dir):
    """20 hand-made dialogues scored by SmolLM2-135M-Instruct: a dialogue of clues to
    the secret ranks it higher than a dialogue of unrelated words."""
    listener = Listener(
        smollm2_dir, prompt_format="chat", dtype="float32", device="cpu", trust_remote_code=False
    )
    words = [w for w, _, _ in HAND_MADE] + WORDS
    eps = []
    for word, clue, unrelated in HAND_MADE:
        eps += [
            _episode(f"{word}-clue", word, [clue]),
            _episode(f"{word}-other", word, [unrelated]),
        ]
    table = hint_ranks(listener, TABOO, TABOO.load_prompts(), eps, words, k=10, seed=0)
    separated = {}
    for column in ("rank", "calibrated_rank"):
        rows = {r["episode_id"]: r[column] for r in table.to_pylist()}
        separated[column] = [w for w, _, _ in HAND_MADE if rows[f"{w}-clue"] < rows[f"{w}-other"]]
        print(column, {w: (rows[f"{w}-clue"], rows[f"{w}-other"]) for w, _, _ in HAND_MADE})
    # Both ranks separate every clue dialogue from its unrelated one; the calibrated rank
    # by a reciprocal-rank gap at least as wide (0.83 against 0.40 when written).
    assert len(separated["rank"]) == len(HAND_MADE), separated
    assert len(separated["calibrated_rank"]) >= len(separated["rank"]), separated

    def gap(column):
        rr = {r["episode_id"]: 1 / r[column] for r in table.to_pylist()}
        return sum(rr[f"{w}-clue"] - rr[f"{w}-other"] for w, _, _ in HAND_MADE) / len(HAND_MADE)

    assert gap("calibrated_rank") >= gap("rank") > 0


def test_ties_count_at_their_expected_reciprocal_rank():
    """A message that changes nothing (every calibrated score equal) sits at chance."""
    assert reciprocal_rank([0.0] * 12) == pytest.approx(chance_rr(12))
    assert chance_rr(12) == pytest.approx(sum(1 / r for r in range(1, 13)) / 12)
    assert reciprocal_rank([1.0, 0.5, 0.5]) == 1.0
    assert reciprocal_rank([0.5, 1.0, 0.5]) == pytest.approx((1 / 2 + 1 / 3) / 2)


def test_the_message_rank_reads_each_message_alone_once(tiny_model_dir):
    """One (secret, message) gets one message rank wherever it is said (here in two
    dialogues of different contexts, and twice within one), the calibrated rank of the
    message as the only message of a dialogue, computed by plain scoring."""
    listener = Listener(
        tiny_model_dir, prompt_format="raw", dtype="float32", device="cpu", trust_remote_code=False
    )
    prompts = TABOO.load_prompts()
    eps = [_episode("g1", "apple", ["a fruit", "red and round", "a fruit"]),
           _episode("g2", "apple", ["tree", "a fruit"])]  # fmt: skip
    rows = hint_ranks(listener, TABOO, prompts, eps, WORDS, k=5, seed=0).to_pylist()
    fruit = [r for r in rows if r["message_key"] == message_key("a fruit")]
    assert len(fruit) == 3 and len({r["message_rr"] for r in fruit}) == 1
    candidates = ["apple", *distractors(WORDS, "apple", 5, 0)]
    guesses = [TABOO.guess_text(w) for w in candidates]
    alone = [{"role": "attacker", "content": "a fruit"}]
    neutral = [{"role": "attacker", "content": NEUTRAL_MESSAGE}]
    after, before = (
        listener.logprobs(TABOO.play_prompt(prompts, h, "defender", "x", 5), guesses)
        for h in (alone, neutral)
    )
    want = reciprocal_rank([a - b for a, b in zip(after, before, strict=True)])
    assert fruit[0]["message_rr"] == pytest.approx(want)
    # The context ranks of the repeated message may differ; the summary's shares say so.
    table = pa.Table.from_pylist(rows, schema=HINT_SCHEMA)
    assert variance_shares(table, "message")["identical_messages_share"] == pytest.approx(0.0)


def test_variance_shares_and_the_mean_message():
    """Two secrets; apple's first message said twice with different context ranks."""
    table = _table([("a", "apple", "attacker", 1, 1), ("a", "apple", "attacker", 2, 4),
                    ("b", "apple", "attacker", 1, 2), ("c", "river", "attacker", 1, 4)])  # fmt: skip
    keys = table.column("message_key").to_pylist()
    keys[2] = keys[0]  # b's first message is a's first message
    table = table.set_column(table.schema.get_field_index("message_key"), "message_key",
                             pa.array(keys))  # fmt: skip
    rr = [1.0, 0.25, 0.5, 0.25]
    mean = sum(rr) / 4
    total = sum((v - mean) ** 2 for v in rr)
    within_identical = (1.0 - 0.75) ** 2 + (0.5 - 0.75) ** 2
    shares = variance_shares(table, "raw")
    assert shares["identical_messages_share"] == pytest.approx(within_identical / total)
    # Between secrets over the distinct (secret, message) pairs at their means: apple
    # 0.75 and 0.25, river 0.25 (mean 5/12): total 1/6, within apple 1/8, share 1/4;
    # 2 secrets among 3 pairs give 1/2 by chance; excess (1/4 - 1/2) / (1 - 1/2).
    assert shares["between_secrets_share"] == pytest.approx(0.25)
    assert shares["between_secrets_chance"] == pytest.approx(0.5)
    assert shares["between_secrets_excess"] == pytest.approx(-0.5)
    row = summarize_hints(table, "m", rank="raw")[-1]
    assert row["mrr_mean"] == pytest.approx(((1.0 + 0.25) / 2 + 0.5 + 0.25) / 3)
    assert row["mrr_chance"] == pytest.approx(chance_rr(21))


def test_the_between_secrets_chance_is_the_mean_share_over_every_shuffle():
    """(k - 1) / (n - 1) is the mean of the between-secrets share over every way of
    dealing the same values to the same secrets (each message said once); a message said
    three times weighs as one."""
    import itertools

    values = [1.0, 0.5, 0.2, 0.25, 0.1]
    words = ["apple", "apple", "river", "river", "stone"]
    shares = []
    for perm in set(itertools.permutations(values)):
        rows = [(f"e{i}", w, "attacker", 1, 1) for i, w in enumerate(words)]
        shares.append(variance_shares(_table(rows, alone=list(perm)), "message"))
    chance = shares[0]["between_secrets_chance"]
    assert chance == pytest.approx((3 - 1) / (5 - 1))
    assert sum(s["between_secrets_share"] for s in shares) / len(shares) == pytest.approx(chance)
    assert sum(s["between_secrets_excess"] for s in shares) / len(shares) == pytest.approx(0.0)
    once = _table([(f"e{i}", w, "attacker", 1, 1) for i, w in enumerate(words)], alone=values)
    thrice = _table([("e0", "apple", "attacker", t, 1) for t in (1, 2, 3)]
                    + [(f"e{i}", w, "attacker", 1, 1) for i, w in enumerate(words) if i],
                    alone=[1.0, 1.0, 1.0, *values[1:]])  # fmt: skip
    keys = thrice.column("message_key").to_pylist()
    keys[1] = keys[2] = keys[0]  # the first message, said three times in one dialogue
    thrice = thrice.set_column(thrice.schema.get_field_index("message_key"), "message_key",
                               pa.array(keys))  # fmt: skip
    assert variance_shares(thrice, "message") == pytest.approx(variance_shares(once, "message"))
