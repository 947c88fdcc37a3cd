"""How far the sampled-parity test of tests/test_vllm_parity.py moves when one engine's
knob means another thing: the hf backend at the test's settings against vLLM with one
knob changed (temperature 1.0, no top-k, no minimum length), the test's prompts, seeds
and statistics. Usage (from the repository root, .venv-vllm made)::

    python perf/vllm_parity_power.py --model SMOLLM2_DIR
"""

from __future__ import annotations

import argparse
import datetime
import sys
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    args = p.parse_args()
    import test_vllm_parity as t
    from vllm_engine import VLLMEngine

    from spag.generation import load_backend

    prompts = t._game_prompts()
    batch = [q for q in prompts for _ in range(t.SEEDS)]
    ids = [f"p{i}-s{k}" for i in range(len(prompts)) for k in range(t.SEEDS)]
    hf = load_backend("hf", args.model, prompt_format="chat", trust_remote_code=False,
                      max_length=t.MAX_LENGTH, dtype="float32", batch_size=64)  # fmt: skip
    seen: list[list[int]] = []
    build = type(hf)._reply
    type(hf)._reply = lambda self, tokens, cut: (
        seen.append(list(tokens)) or build(self, tokens, cut)
    )
    h_replies = hf.generate(batch, t.SAMPLED, seed=0, game_ids=ids)
    h_tokens = [s[: r.num_tokens] for s, r in zip(seen, h_replies, strict=True)]
    engine = VLLMEngine()
    engine.load("m", args.model, prompt_format="chat", trust_remote_code=False,
                tensor_parallel_size=1, seed=0, device="cpu", threads=1, dtype="float32",
                max_length=t.MAX_LENGTH, batch_size=64, enforce_eager=True)  # fmt: skip
    print(f"# {datetime.date.today()}, {len(batch)} replies each, hf at the test's settings")
    print("| vLLM's knob | lengths p | first tokens p | stop share p |\n|---|---|---|---|")
    for name, sampling in [
        ("as the test (control)", t.SAMPLED),
        ("temperature 1.0", replace(t.SAMPLED, temperature=1.0)),
        ("top-k 0 (no filter)", replace(t.SAMPLED, top_k=0)),
        ("min_new_tokens 0", replace(t.SAMPLED, min_new_tokens=0)),
    ]:
        v = engine.generate("m", batch, sampling, seed=0, game_ids=ids)
        p_len, p_first, p_stop = t.distribution_tests(h_replies, h_tokens, v)
        print(f"| {name} | {p_len:.2g} | {p_first:.2g} | {p_stop:.2g} |", flush=True)
    engine.close()


if __name__ == "__main__":
    main()
