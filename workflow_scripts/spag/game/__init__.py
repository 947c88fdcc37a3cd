"""The game: prompts and their rendering, the self-play loop, episodes and rewards (the judge is ``spag.judge``, the contract's path)."""
