# Teacher games (data.imitation "teacher"): the plan's check, and where the games'
# words, players and environment come from. Included by imitation.smk; no rules.

import sys
from pathlib import Path

from spag.config import num_secrets
from spag.data.words import read_word_list
from spag.game.teacher import is_folder_player, teacher_plan

# The teacher's plan (games, worst-case requests) is checked against the cost cap
# before any job and shown until the games exist.
if TEACHER:
    _teacher = config["data"]["teacher"]
    _num_words = (
        num_secrets(config, "train")
        if _teacher["words"] == "train"
        else len(read_word_list(_teacher["words"], GAME.check_secret))
    )
    TEACHER_PLAN = teacher_plan(config, _num_words, built=(BASE_MODEL, IMITATION_MODEL))
    if not Path(TEACHER_EPISODES).exists():
        print(TEACHER_PLAN.describe(config), file=sys.stderr)


def imitation_input(wildcards):
    if TEACHER:
        return TEACHER_EPISODES
    return SCRIPTED_GAMES if SCRIPTED else config["data"]["imitation"]


def teacher_inputs(wildcards):
    t = config["data"]["teacher"]
    inputs = {
        "words": WORDS_TRAIN if t["words"] == "train" else t["words"],
        "prompts": config["game"]["prompts"],
    }
    for key in ("model", "partner"):
        if is_folder_player(t[key]):
            inputs[key] = t[key]
    return inputs


def teacher_env():
    return backend_env() if teacher_family() == "selfplay" else "../envs/spag.yaml"
