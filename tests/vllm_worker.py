"""A real vLLM engine (the CPU build in .venv-vllm) serving the tests, one JSON line a
request on stdin, one a reply on stdout; run by ``vllm_engine.VLLMEngine``.

The test process cannot import vLLM (its env has transformers 5.23, vLLM's CPU build
takes <5.20), so ``VLLMBackend`` runs here, where the engine is started once and shared.
Besides the backend's replies, each ``generate`` returns what the engine saw and made
(its prompt token ids, the replies' token ids, finish reasons) and how many
``LLM.generate`` calls (cache waves) the call took.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys


def serve() -> None:
    from spag.generation import load_backend
    from spag.generation.settings import Sampling

    backends: dict = {}
    seen: dict = {}
    # Replies on a copy of fd 1; fd 1 itself goes to stderr, so that what vLLM and its
    # spawned processes print stays off the reply channel.
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    for line in sys.stdin:
        req = json.loads(line)
        try:
            if req["op"] == "load":
                backend = load_backend("vllm", req["model"], **req["opts"])
                record = seen.setdefault(req["name"], {"calls": []})
                generate = backend.llm.generate

                def recording(prompts, params, use_tqdm=False, _g=generate, _r=record):
                    outputs = _g(prompts, params, use_tqdm=use_tqdm)
                    _r["calls"].append(outputs)
                    return outputs

                backend.llm.generate = recording
                backends[req["name"]] = backend
                cache = backend._cache_blocks()
                reply = {"cache": list(cache) if cache else None}
            elif req["op"] == "generate":
                backend, record = backends[req["name"]], seen[req["name"]]
                record["calls"] = []
                sampling = Sampling(**req["sampling"])
                replies = backend.generate(
                    req["prompts"], sampling, seed=req["seed"], game_ids=req.get("game_ids")
                )
                outputs = [o for call in record["calls"] for o in call]
                reply = {
                    "replies": [dataclasses.asdict(r) for r in replies],
                    "waves": [len(call) for call in record["calls"]],
                    "prompt_ids": [list(o.prompt_token_ids) for o in outputs],
                    "token_ids": [list(o.outputs[0].token_ids) for o in outputs],
                    "finish_reasons": [o.outputs[0].finish_reason for o in outputs],
                }
            else:
                reply = {"error": f"unknown op {req['op']}"}
        except Exception as exc:  # reported to the test, which fails with it
            import traceback

            reply = {"error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()}
        out.write(json.dumps(reply) + "\n")
        out.flush()


if __name__ == "__main__":  # vLLM spawns its engine core: this module is re-imported there
    serve()
