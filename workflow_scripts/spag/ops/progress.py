"""A step's progress on its terminal or in its log: games done and tokens a second."""

from __future__ import annotations

import sys
import time


class GameProgress:
    """A bar of finished games with the generated tokens a second; call it with the
    games just finished and the tokens just generated (``play_games``' ``progress``)."""

    def __init__(self, total: int, disabled: bool = False) -> None:
        from tqdm import tqdm

        # In a log file (not a terminal) print a line now and then instead of redrawing.
        tty = sys.stderr.isatty()
        self.bar = tqdm(
            total=total,
            desc="games",
            unit="game",
            file=sys.stderr,
            disable=disabled,
            mininterval=0.5 if tty else 10.0,
            ascii=not tty,
            dynamic_ncols=tty,
        )
        self.started = time.perf_counter()
        self.tokens = 0

    def __call__(self, finished: int, new_tokens: int) -> None:
        self.tokens += new_tokens
        self.bar.set_postfix_str(f"{self.tokens / self.elapsed():.0f} tokens/s", refresh=False)
        self.bar.update(finished)

    def elapsed(self) -> float:
        return max(time.perf_counter() - self.started, 1e-9)

    def close(self) -> None:
        self.bar.close()
