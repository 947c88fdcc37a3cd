# Input functions of the evaluation rules: the opponent of the evaluation games
# (evaluation.opponent: a built-in model, a model folder or an OpenAI-compatible
# endpoint), each model's games and the hints' listener. Included by evaluate.smk;
# no rules.

from spag.generation.openai_backend import is_endpoint_spec
from spag.models.names import model_order

# The evaluation's built-in opponents: M0, or the base model under the run's prompt format.
BUILTIN_OPPONENTS = {"imitation": IMITATION_MODEL, "base": BASE_MODEL}


def opponent_model(wildcards):
    """The opponent's model folder (an input); none for an OpenAI-compatible endpoint."""
    opponent = config["evaluation"]["opponent"]
    if opponent in BUILTIN_OPPONENTS:
        return BUILTIN_OPPONENTS[opponent]
    return [] if is_endpoint_spec(opponent) else opponent


def opponent_name_arg():
    """A built-in opponent is named as in the config; a folder or an endpoint gets the
    name `spag play` gives it (the folder's, the endpoint's model)."""
    opponent = config["evaluation"]["opponent"]
    return f"--opponent-name {opponent}" if opponent in BUILTIN_OPPONENTS else ""


def opponent_arg(wildcards, input):
    # A folder comes from the rule's input; an endpoint spec is passed as it is.
    return input.opponent if input.opponent else config["evaluation"]["opponent"]


def evaluated_name(wildcards):
    """The evaluated model's name: a baseline's {model}, else epoch{epoch} for M(e)."""
    if "model" in wildcards.keys():
        return wildcards.model
    return f"epoch{wildcards.epoch}"


def epoch_arg(wildcards):
    """The games' epoch column: e for M(e), -1 for the base model and 0 for M0 (after
    "=", which keeps -1 from reading as a flag)."""
    if "model" in wildcards.keys():
        return f"--epoch={model_order(wildcards.model)}"
    return f"--epoch {wildcards.epoch}"


def games_of_model(wildcards):
    """The merged evaluation games of {model}: a baseline's, or M(e)'s."""
    if wildcards.model in BASELINE_MODELS:
        return BASELINE_GAMES.format(model=wildcards.model)
    return EVAL_GAMES.format(epoch=wildcards.model.removeprefix("epoch"))


def hints_listener(wildcards):
    listener = config["evaluation"]["hints"]["listener"]
    return {"base": BASE_MODEL, "imitation": IMITATION_MODEL}.get(listener, listener)


def inference_dialogues(wildcards):
    """The fixed dialogues every model reads as the defender, by
    evaluation.hints.inference_sources: the demonstrations (M0's imitation input;
    instruction data is skipped) and M0's evaluation games."""
    files = {
        "demonstrations": imitation_input(wildcards),
        "m0_games": BASELINE_GAMES.format(model="imitation"),
    }
    return [files[s] for s in config["evaluation"]["hints"]["inference_sources"]]
