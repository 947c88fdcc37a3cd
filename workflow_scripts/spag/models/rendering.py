"""Prompt text -> token ids, one rendering for play, training, scoring and evaluation.

Two prompt formats (config ``game.prompt_format``, docs/design.md "Prompts"):

- ``raw``: the prompt text as it is (the paper's layout, for base models); a
  reply or a training target ends with the tokenizer's EOS;
- ``chat``: the prompt is the user turn of the tokenizer's chat template, with
  the template's assistant cue after it; a reply or target ends with the
  template's end-of-turn token (``<|im_end|>``, ``<|eot_id|>``, ...).

Either way a sequence starts with exactly one BOS where the tokenizer puts one
in front of a text itself (or the chat template writes one), and none
otherwise. A mismatch between the tokens a model is trained on and those it
plays with gives empty or runaway replies, so every step encodes through
:class:`PromptRenderer` and nothing else.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from spag.errors import SpagInputError

PROMPT_FORMATS = ("raw", "chat")
_PROBE = "zq"  # a short text whose rendering shows what the template adds around a turn


class PromptRenderer:
    """Renders and encodes prompts (and prompt + target pairs) for one tokenizer and format.

    ``source`` names where the tokenizer comes from, for error messages.
    """

    def __init__(self, tokenizer: Any, prompt_format: str, source: str = "tokenizer"):
        if prompt_format not in PROMPT_FORMATS:
            raise SpagInputError(
                f"unknown prompt format {prompt_format!r} (key game.prompt_format; "
                f"choose from {', '.join(PROMPT_FORMATS)})"
            )
        self.tokenizer = tokenizer
        self.format = prompt_format
        self.source = source
        bos = getattr(tokenizer, "bos_token_id", None)
        probe = tokenizer("a").input_ids
        adds_bos = bos is not None and bool(probe) and probe[0] == bos
        if prompt_format == "chat":
            if not getattr(tokenizer, "chat_template", None):
                raise SpagInputError(
                    f"{source}: game.prompt_format is 'chat' but the tokenizer has no chat "
                    "template; use prompt_format 'raw' or a model whose tokenizer has one"
                )
            bos_text = getattr(tokenizer, "bos_token", None)
            template_bos = (
                bos is not None and bool(bos_text) and self.render(_PROBE).startswith(bos_text)
            )
            self.bos_id: int | None = bos if adds_bos or template_bos else None
        else:
            self.bos_id = bos if adds_bos else None
        self._end_id: int | None = None

    # ------------------------------------------------------------ text
    def render(self, prompt: str) -> str:
        """The text the model continues: the prompt itself, or its chat rendering."""
        if self.format == "raw":
            return prompt
        return self.tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True
        )

    @property
    def end_id(self) -> int:
        """The token that ends a reply: EOS (raw) or the template's end-of-turn token (chat)."""
        if self._end_id is None:
            self._end_id = self._find_end_id()
        return self._end_id

    def stop_ids(self) -> list[int]:
        """Token ids that end a reply in play: the end token, then EOS if different."""
        ids = [self.end_id]
        eos = getattr(self.tokenizer, "eos_token_id", None)
        if eos is not None and int(eos) not in ids:
            ids.append(int(eos))
        return ids

    def _find_end_id(self) -> int:
        tok = self.tokenizer
        eos = getattr(tok, "eos_token_id", None)
        if self.format == "chat":
            # What the template writes right after an assistant turn's text.
            user = {"role": "user", "content": _PROBE}
            cue = self.render(_PROBE)
            full = tok.apply_chat_template(
                [user, {"role": "assistant", "content": _PROBE}], tokenize=False
            )
            rest = full[len(cue) :] if full.startswith(cue) else ""
            if not rest.startswith(_PROBE):
                raise SpagInputError(
                    f"{self.source}: the chat template's generation prompt is not a prefix of "
                    "the rendered conversation, so replies cannot be continued from it"
                )
            after = tok(rest[len(_PROBE) :], add_special_tokens=False).input_ids
            special = set(getattr(tok, "all_special_ids", []) or [])
            special |= set(getattr(tok, "added_tokens_decoder", {}) or {})
            for t in after:
                if t in special:
                    return int(t)
        if eos is None:
            raise SpagInputError(
                f"{self.source}: the tokenizer has no EOS token; a reply could not end"
            )
        return int(eos)

    # ------------------------------------------------------------ ids
    @property
    def lead(self) -> list[int]:
        """What every sequence starts with: the BOS in use, or nothing."""
        return [] if self.bos_id is None else [self.bos_id]

    def _ids(self, texts: Sequence[str]) -> list[list[int]]:
        """Rendered texts -> ids without any leading BOS (it is added once, by the caller)."""
        if not texts:
            return []
        raw = self.tokenizer([self.render(t) for t in texts], add_special_tokens=False).input_ids
        bos = self.bos_id
        out = []
        for ids in raw:
            ids = list(ids)
            # A text (or template) that starts with the BOS string must not give a second BOS.
            start = 0
            while bos is not None and start < len(ids) and ids[start] == bos:
                start += 1
            out.append(ids[start:])
        return out

    def encode(
        self, prompts: Sequence[str], max_prompt_tokens: int
    ) -> list[tuple[list[int], bool]]:
        """Play prompts -> ``(ids, truncated)``; too long a prompt keeps BOS and its last tokens.

        Left truncation, as the research code: the most recent messages and the
        instruction survive.
        """
        if max_prompt_tokens < 2:
            raise SpagInputError(
                f"prompt budget of {max_prompt_tokens} tokens is too small:"
                " raise --max-length or lower --max-new-tokens"
            )
        lead = self.lead
        budget = max_prompt_tokens - len(lead)
        out = []
        for ids in self._ids(list(prompts)):
            truncated = len(ids) > budget
            if truncated:
                ids = ids[len(ids) - budget :]
            out.append((lead + ids, truncated))
        return out

    def encode_pairs(
        self, queries: Sequence[str], targets: Sequence[str]
    ) -> list[tuple[list[int], list[int]] | None]:
        """Training pairs -> ``(prompt ids, target ids + end token)``, not yet fitted.

        The prompt ids are what :meth:`encode` gives for play before any truncation,
        without the leading :attr:`lead` (the caller puts it in front once it has
        fitted the rest); an empty target gives None.
        """
        q_ids = self._ids(list(queries))
        t_ids = self.tokenizer(list(targets), add_special_tokens=False).input_ids
        end = [self.end_id]
        out: list[tuple[list[int], list[int]] | None] = []
        for target, q, t in zip(targets, q_ids, t_ids, strict=True):
            out.append(None if not target.strip() or not t else (q, list(t) + end))
        return out
