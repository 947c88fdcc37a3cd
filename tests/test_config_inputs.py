"""Configuration errors caught before any job runs: sampling, prompt format, GGUF inputs."""

from __future__ import annotations

import copy

import pytest
import yaml
from conftest import REPO

from spag.config import check_run_inputs, validate_config
from spag.errors import SpagInputError

BASE = yaml.safe_load((REPO / "config.yaml").read_text())


def _config(**sections):
    cfg = copy.deepcopy(BASE)
    for section, values in sections.items():
        cfg.setdefault(section, {}).update(values)
    return validate_config(cfg)


def test_defaults_sample_as_the_reference():
    cfg = _config()
    assert cfg["selfplay"]["top_k"] == 50 and cfg["game"]["prompt_format"] == "raw"
    paper = yaml.safe_load((REPO / "configs/paper-llama2-7b.yaml").read_text())
    assert paper["selfplay"]["top_k"] == 50 and paper["selfplay"]["temperature"] == 1.2


def test_reference_scores_in_another_precision_than_training_are_refused():
    """Step 0's ratio is 1 only if the reference was scored as training computes."""
    bf16 = {"bf16": True, "deepspeed": "zero3"}
    NEITHER = r"key 'spag.bf16' is true without 'spag.deepspeed' or 'spag.peft'"  # noqa: N806
    with pytest.raises(SpagInputError, match=r"'scoring.dtype' is bfloat16, but 'imitation.bf16'"):
        _config(scoring={"dtype": "bfloat16"})
    with pytest.raises(
        SpagInputError, match=r"'scoring.dtype' is float32, but 'spag.bf16' is true"
    ):
        _config(spag=bf16)
    with pytest.raises(SpagInputError, match=NEITHER):
        _config(imitation=bf16, spag={"bf16": True}, scoring={"dtype": "bfloat16"})
    with pytest.raises(SpagInputError, match=NEITHER):
        _config(
            imitation=bf16, spag={"bf16": True, "deepspeed": "none"}, scoring={"dtype": "bfloat16"}
        )
    # Under an adapter the frozen base is loaded in bfloat16, DeepSpeed or not.
    lora = {"bf16": True, "peft": {"r": 8}}
    assert _config(imitation=lora, spag=lora, scoring={"dtype": "bfloat16"})
    with pytest.raises(SpagInputError, match=r"'scoring.dtype' is float32, but 'spag.bf16'"):
        _config(spag=lora)
    paper = yaml.safe_load((REPO / "configs/paper-llama2-7b.yaml").read_text())
    assert validate_config(paper)["scoring"]["dtype"] == "bfloat16"  # bf16 under ZeRO-3
    assert _config(imitation=bf16, spag=bf16, scoring={"dtype": "bfloat16"})


def test_negative_top_k_names_the_key():
    with pytest.raises(SpagInputError, match=r"key 'selfplay.top_k'"):
        _config(selfplay={"top_k": -1})


def test_chat_with_the_tiny_model_is_refused_before_any_job():
    with pytest.raises(SpagInputError, match=r"game.prompt_format.*no chat template"):
        check_run_inputs(_config(game={"prompt_format": "chat"}))


def test_chat_with_a_local_folder_without_template_is_refused(tiny_model_dir):
    cfg = _config(game={"prompt_format": "chat"}, base_model={"name_or_path": str(tiny_model_dir)})
    with pytest.raises(SpagInputError, match=str(tiny_model_dir)):
        check_run_inputs(cfg)


def test_missing_or_corrupt_gguf_is_refused_before_any_job(tmp_path):
    with pytest.raises(SpagInputError, match="GGUF file not found: .*nope.gguf"):
        check_run_inputs(_config(base_model={"gguf_file": str(tmp_path / "nope.gguf")}))
    bad = tmp_path / "bad.gguf"
    bad.write_text("hello")
    with pytest.raises(SpagInputError, match="bad.gguf: not a GGUF file"):
        check_run_inputs(_config(base_model={"gguf_file": str(bad)}))


def test_the_packaged_model_with_chat_passes():
    check_run_inputs(
        _config(
            base_model={"name_or_path": "smollm2-135m-instruct"}, game={"prompt_format": "chat"}
        )
    )


@pytest.mark.parametrize(
    "sections,message",
    [
        ({"spag": {"lr_scheduler": "bogus"}}, r"key 'spag.lr_scheduler'"),
        ({"seed": -5}, r"key 'seed'"),
        ({"imitation": {"deepspeed": "/no/such/ds.json"}}, r"key 'imitation.deepspeed'.*nor a file"),
        ({"words": {"num_train": 2}, "selfplay": {"num_shards": 3}},
         r"'selfplay.num_shards' \(3\) is above 'words.num_train' \(2\)"),
        ({"selfplay": {"num_shards": 1001}}, r"key 'selfplay.num_shards'"),
        ({"words": {"num_test": 2}, "evaluation": {"num_shards": 3}},
         r"'evaluation.num_shards' \(3\) is above 'words.num_test' \(2\)"),
        ({"evaluation": {"num_shards": 0}}, r"key 'evaluation.num_shards'"),
        ({"words": {"min_length": 9, "max_length": 4}}, r"'words.min_length' \(9\) is above"),
        ({"evaluation": {"opponent": "openai:ftp://h/v1?model=m"}},
         r"key 'evaluation.opponent'.*http:// or https://"),
        ({"evaluation": {"opponent": "openai:http://127.0.0.1:9/v1?model=m&timeout=nan"}},
         r"key 'evaluation.opponent'.*finite timeout"),
        ({"spag": {"learning_rate": float("nan")}}, r"key 'spag.learning_rate': nan is not a finite"),
        ({"selfplay": {"temperature": float("inf")}}, r"key 'selfplay.temperature': inf is not"),
        ({"rewards": {"decay_weight": float("nan")}}, r"key 'rewards.decay_weight': nan"),
        ({"rewards": {"control": True}, "spag": {"sft_coeff": 0}},
         r"key 'rewards.control' is true, but 'spag.objective' offline_po with .*'spag.sft_coeff' "
         r"0, .* learns nothing from instruction rows"),
    ],
)  # fmt: skip
def test_settings_that_fail_hours_in_are_refused_before_any_job(sections, message):
    cfg = copy.deepcopy(BASE)
    for section, values in sections.items():
        if isinstance(values, dict):
            cfg.setdefault(section, {}).update(values)
        else:
            cfg[section] = values
    with pytest.raises(SpagInputError, match=message):
        validate_config(cfg)


@pytest.mark.parametrize(
    "words,lines,message",
    [
        ({"num_train": 19000, "num_test": 100},
         None, r"'words.num_train' \+ 'words.num_test' = 19100, but 'words.source' \(wordfreq"),
        ({"num_train": 4, "num_test": 2, "source": "{list}"},
         ["apple", "pear", "plum", "fig", "kiwi"], r"gives only 5 usable words"),
        ({"source": "{list}"}, ["apple", "new york"], r"key 'words.source': .*new york"),
        ({"source": "/no/such/words.txt"}, None, r"key 'words.source'"),
    ],
)  # fmt: skip
def test_a_word_source_too_small_is_refused_before_any_job(tmp_path, words, lines, message):
    from spag.config import check_word_source

    cfg = copy.deepcopy(BASE)
    listed = tmp_path / "words.txt"
    if lines is not None:
        listed.write_text("\n".join(lines) + "\n")
    cfg["words"].update({k: str(v).format(list=listed) if k == "source" else v
                         for k, v in words.items()})  # fmt: skip
    cfg["words"]["stopwords"] = str(REPO / "data" / "stopwords.txt")
    with pytest.raises(SpagInputError, match=message):
        check_word_source(validate_config(cfg))


def test_nested_command_line_values_are_read_as_yaml():
    """Snakemake's --config 'selfplay={num_shards: 2}' hands nested values over as strings."""
    cfg = copy.deepcopy(BASE)
    cfg["selfplay"].update({"num_shards": "2", "top_p": "0.9", "tensor_parallel_size": "null"})
    cfg["resources"] = {"selfplay": {"cpus": "2", "max_mem_mb": "~", "qos": "123"}}
    cfg["offline"] = "false"
    validate_config(cfg)
    assert cfg["selfplay"]["num_shards"] == 2 and cfg["selfplay"]["top_p"] == 0.9
    assert cfg["selfplay"]["tensor_parallel_size"] is None and cfg["offline"] is False
    assert cfg["resources"]["selfplay"]["cpus"] == 2
    assert cfg["resources"]["selfplay"]["max_mem_mb"] is None
    assert cfg["resources"]["selfplay"]["qos"] == "123"  # a string key stays a string
    cfg["selfplay"]["num_shards"] = "two"
    with pytest.raises(SpagInputError, match=r"key 'selfplay.num_shards': 'two'"):
        validate_config(cfg)


@pytest.mark.parametrize(
    ("given", "old", "new"),
    [
        ({"rewards": {"decay": 0.7}}, "rewards.decay", "rewards.decay_weight"),
        (
            {"spag": {"gradient_checkpointing": True}},
            "spag.gradient_checkpointing",
            "spag.activation_checkpointing",
        ),
    ],
)
def test_a_renamed_key_is_refused_naming_its_new_name(given, old, new):
    with pytest.raises(SpagInputError, match=rf"key '{old}' is now '{new}'"):
        validate_config(given)


def test_a_coefficient_the_objective_has_not_is_refused():
    with pytest.raises(SpagInputError, match=r"key 'imitation.clip_eps' means nothing for "
                       r"'imitation.objective' sft_kl, whose coefficients are kl_coeff"):  # fmt: skip
        validate_config({"imitation": {"clip_eps": 0.3}})
    with pytest.raises(SpagInputError, match=r"key 'spag.sft_coeff' means nothing"):
        validate_config({"spag": {"objective": "sft_kl", "sft_coeff": 0.6}})
    # the shipped configs set offline_po's coefficients for the SPAG stage only
    validate_config({"spag": {"clip_eps": 0.3, "sft_coeff": 0.4}})
    # a validated config (every default filled) validates again
    config = validate_config({"imitation": {"kl_coeff": 0.05}})
    validate_config(config)


def test_a_head_size_vllms_cpu_attention_refuses_is_refused_before_any_job():
    """The embedded tiny model's heads of 16 on vLLM's CPU build would fail in the first
    self-play shard, after imitation: refused now, naming the key to set."""
    vllm = {"backend": "vllm"}
    with pytest.raises(SpagInputError, match=r"base_model\.tiny\.head_dim") as err:
        check_run_inputs(_config(selfplay=vllm))
    assert "resources.selfplay.gpus is 0" in str(err.value) and "16" in str(err.value)
    tiny = {**BASE["base_model"]["tiny"], "head_dim": 64}
    check_run_inputs(_config(selfplay=vllm, base_model={"name_or_path": "tiny", "tiny": tiny}))
    # On GPUs the CPU attention's sizes do not apply (the GPU kernels take 16).
    gpus = {**BASE["resources"]["selfplay"], "gpus": 1}
    check_run_inputs(_config(selfplay=vllm, resources={
        **BASE["resources"], "selfplay": gpus,
        "evaluate": {**BASE["resources"]["evaluate"], "gpus": 1},
    }))  # fmt: skip
    check_run_inputs(_config())  # the hf backend takes any head size


def test_a_vllm_env_without_vllm_is_named(tmp_path):
    from spag.config import check_backend_available

    cfg = _config(selfplay={"backend": "vllm", "vllm_env": str(tmp_path)})
    with pytest.raises(SpagInputError, match=r"selfplay\.vllm_env.*no bin/spag"):
        check_backend_available(cfg, env_per_rule=False)
    # This environment has spag and python but no vLLM.
    import sys
    from pathlib import Path

    cfg["selfplay"]["vllm_env"] = str(Path(sys.executable).parent.parent)
    with pytest.raises(SpagInputError, match=r"selfplay\.vllm_env.*cannot import vllm"):
        check_backend_available(cfg, env_per_rule=False)
