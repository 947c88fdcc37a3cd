"""One information set's first move, read two ways: the next-token probabilities of a
plain forward pass and the replies the ``hf`` backend samples (as self-play does).

    python perf/results/kuhn-poker/decode_probe.py /tmp/kuhn-study/<run>/results/epoch1/model

Prints, for the first seat holding a J: the probability of each move word, then of the
end of the turn after it, and the counts of the backend's sampled replies (``--samples``
draws at ``--temperature``, ``--max-new-tokens`` as the config's, ``--min-new-tokens``
the decoders' reply minimum).
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", help="a model folder (a run's results/<stage>/model)")
    parser.add_argument("--prompt-format", default="chat")
    parser.add_argument("--samples", type=int, default=64)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--max-new-tokens", type=int, default=4)
    parser.add_argument(
        "--min-new-tokens",
        type=int,
        default=1,
        help="the decoders' reply minimum (Kuhn Poker's: 1; 2 before 889edc3)",
    )
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "workflow_scripts"))
    import torch

    from spag.game import kuhn_poker as kuhn
    from spag.game.base import load_game
    from spag.generation.registry import load_backend
    from spag.generation.settings import Sampling
    from spag.models.rendering import PromptRenderer
    from spag.training.scoring import load_model_and_tokenizer

    game = load_game("kuhn_poker")
    history, role, secret = kuhn.infoset_prompt(game.infosets[0])
    prompt = game.play_prompt(game.load_prompts(), history, role, secret, 2)
    model, tok = load_model_and_tokenizer(args.model, "float32", False, "cpu")
    model.eval()
    renderer = PromptRenderer(tok, args.prompt_format, source=args.model)
    with torch.inference_mode():
        for move in kuhn.legal_moves(game.infosets[0][2]):
            ((q, t),) = renderer.encode_pairs([prompt], [move])
            ids = torch.tensor([renderer.lead + q + t])
            probs = torch.softmax(model(input_ids=ids).logits[0].float(), -1)
            start = len(renderer.lead + q)
            word = 1.0
            for k, token in enumerate(t[:-1]):
                word *= float(probs[start - 1 + k, token])
            end = float(probs[-2, t[-1]])
            print(f"{move}: {len(t) - 1} token(s), p(word) {word:.4f}, p(end | word) {end:.4f}")
    backend = load_backend(
        "hf", args.model, prompt_format=args.prompt_format, trust_remote_code=False,
        batch_size=args.samples,
    )  # fmt: skip
    sampling = Sampling(
        temperature=args.temperature,
        top_k=0,
        max_new_tokens=args.max_new_tokens,
        min_new_tokens=args.min_new_tokens,
    )
    replies = backend.generate([prompt] * args.samples, sampling, seed=42,
                               game_ids=[str(i) for i in range(args.samples)])  # fmt: skip
    print("hf backend replies:", Counter(r.text for r in replies).most_common(8))
    return 0


if __name__ == "__main__":
    sys.exit(main())
