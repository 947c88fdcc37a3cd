"""Target words: building the training and held-out lists, reading and sharding them.

A target word is one lower-case ASCII word, letters ``a``-``z`` only. Hyphens,
apostrophes, digits, spaces and accented letters are refused everywhere: the
judge builds regular expressions and plurals from the word, prompts quote it and
file names may carry it, so a plain alphabetic word is the only safe form.

Word-list files hold one word a line. :func:`read_word_list` is strict (what
``spag play`` reads); :func:`clean_word_list` is the forgiving clean-up applied
to a user's own list by ``spag target-words --source FILE``.
"""

from __future__ import annotations

import hashlib
import logging
import os
import random
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spag.errors import SpagInputError
from spag.settings import Checked, config_options, opt

log = logging.getLogger(__name__)

WORD_RE = re.compile(r"[a-z]+")
# Characters that mean something to a shell; named in the error so the user sees why.
SHELL_METACHARACTERS = set("|&;<>()$`\\\"'*?[]#~=%!{}")


@dataclass(frozen=True, kw_only=True)
class WordsSettings(Checked):
    """Where the target words come from and how many (config ``words``)."""

    source: str = opt(
        "wordfreq",
        "'wordfreq' (frequent words, filtered) or a word-list FILE, one word a line: "
        "stripped, lower-cased, blank lines and repeats dropped, anything but letters a-z "
        "refused; stop words and length bounds are not applied to a FILE",
    )
    num_train: int = opt(48, "number of training words", ge=1)
    num_test: int = opt(16, "number of held-out words", ge=1)
    min_length: int = opt(3, "wordfreq: shortest word", ge=1)
    max_length: int = opt(12, "wordfreq: longest word", ge=1)
    stopwords: str = opt(
        "data/stopwords.txt", "wordfreq: stop-word list to drop, '#' comments allowed"
    )


# Which wordfreq list is filtered: not config keys (the workflow takes these), `spag
# target-words --lang/--top-n` for another list.
WORDFREQ_LANG = "en"
WORDFREQ_TOP_N = 20000


def words_arguments(config: dict[str, Any]) -> dict[str, Any]:
    """The options the ``target_words`` rule renders with ``cli_flags`` (counts, length
    bounds, the run's seed); ``--source`` and ``--stopwords`` it passes on their own, the
    stop-word list being one of the rule's inputs."""
    options = config_options(WordsSettings, config["words"])
    del options["source"], options["stopwords"]
    return {**options, "seed": config["seed"]}


def check_word(word: str, where: str) -> str:
    """Return ``word`` if it is a valid (lower-case alphabetic) target word.

    ``where`` names the place (``file:line``) for the error message.
    """
    if WORD_RE.fullmatch(word):
        return word
    bad = sorted({c for c in word if c in SHELL_METACHARACTERS})
    if bad:
        raise SpagInputError(
            f"{where}: word {word!r} contains shell metacharacter(s) {', '.join(map(repr, bad))}; "
            "target words must be plain letters a-z"
        )
    if any(c.isspace() for c in word):
        raise SpagInputError(f"{where}: {word!r} holds white space; one word a line")
    if word.lower() != word and WORD_RE.fullmatch(word.lower()):
        raise SpagInputError(f"{where}: word {word!r} is not lower-case")
    raise SpagInputError(
        f"{where}: word {word!r} is not alphabetic; target words must be plain letters a-z"
    )


def _read_lines(path: str | os.PathLike) -> list[str]:
    p = Path(path)
    if not p.is_file():
        raise SpagInputError(f"word list not found: {p}")
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise SpagInputError(f"{p}: not a UTF-8 text file ({exc})") from exc
    return text.splitlines()


def read_word_list(
    path: str | os.PathLike, check: Callable[[str, str], str] = check_word
) -> list[str]:
    """Read a word list strictly: one word a line, no blanks, no repeats.

    Only a line end (``\\n`` or ``\\r\\n``) is tolerated around a word. A missing or
    empty file, a blank line, a duplicate, or a word ``check`` refuses (by default a
    word with anything but ``a``-``z``, a shell metacharacter in particular; a game's
    secrets: its ``check_secret``) raises :class:`SpagInputError` naming the file and
    the line number.
    """
    lines = _read_lines(path)
    if not lines:
        raise SpagInputError(f"{path}: word list is empty")
    seen: dict[str, int] = {}
    words = []
    for lineno, line in enumerate(lines, start=1):
        where = f"{path}:{lineno}"
        if not line.strip():
            raise SpagInputError(f"{where}: blank line in word list")
        word = check(line, where)
        if word in seen:
            raise SpagInputError(f"{where}: duplicate word {word!r} (first on line {seen[word]})")
        seen[word] = lineno
        words.append(word)
    return words


@dataclass
class CleanReport:
    """What :func:`clean_word_list` dropped, for the log."""

    kept: int = 0
    blank: int = 0
    duplicates: int = 0
    changed_case: int = 0


def clean_word_list(path: str | os.PathLike) -> tuple[list[str], CleanReport]:
    """The documented clean-up of a user's word list (``--source FILE``).

    Each line is stripped of surrounding white space and lower-cased; blank lines
    and repeated words are dropped (and counted). Anything else that is not plain
    letters a-z (digits, hyphens, apostrophes, accents, shell metacharacters) is an
    error naming the file and line: a list is fixed by its owner, not silently
    thinned. Order of first appearance is kept.
    """
    lines = _read_lines(path)
    report = CleanReport()
    seen: set[str] = set()
    words = []
    for lineno, line in enumerate(lines, start=1):
        raw = line.strip()
        if not raw:
            report.blank += 1
            continue
        word = raw.lower()
        if word != raw:
            report.changed_case += 1
        check_word(word, f"{path}:{lineno}")
        if word in seen:
            report.duplicates += 1
            continue
        seen.add(word)
        words.append(word)
    report.kept = len(words)
    return words, report


def read_stopwords(path: str | os.PathLike | None) -> set[str]:
    """Read a stop-word list: one word a line, ``#`` comments and blank lines ignored."""
    if path is None:
        return set()
    words = set()
    for line in _read_lines(path):
        line = line.split("#", 1)[0].strip().lower()
        if line:
            words.add(line)
    return words


def filter_candidates(
    candidates: Iterable[str],
    *,
    stopwords: set[str] | frozenset[str],
    min_length: int,
    max_length: int,
) -> list[str]:
    """Lower-case, keep plain ASCII alphabetic words within the length bounds, drop stop
    words and repeats; keep the first-seen order (frequency order for wordfreq)."""
    seen: set[str] = set()
    out = []
    for cand in candidates:
        w = cand.strip().lower()
        if not WORD_RE.fullmatch(w) or not (min_length <= len(w) <= max_length):
            continue
        if w in stopwords or w in seen:
            continue
        seen.add(w)
        out.append(w)
    return out


def wordfreq_candidates(lang: str = WORDFREQ_LANG, top_n: int = WORDFREQ_TOP_N) -> list[str]:
    """The ``top_n`` most frequent words of ``lang`` from the offline wordfreq data."""
    import wordfreq

    try:
        return wordfreq.top_n_list(lang, top_n)
    except (LookupError, ValueError) as exc:
        raise SpagInputError(f"wordfreq has no word list for language {lang!r}: {exc}") from exc


def usable_words(
    source: str,
    *,
    stopwords: str | os.PathLike | None,
    min_length: int,
    max_length: int,
    lang: str = WORDFREQ_LANG,
    top_n: int = WORDFREQ_TOP_N,
) -> tuple[list[str], str]:
    """The words a source offers and a name for it: ``wordfreq`` (filtered by the stop
    words, ``None`` for none, and the length bounds) or a word-list file (cleaned, no
    filter applied)."""
    if source == "wordfreq":
        if min_length < 1 or max_length < min_length:
            raise SpagInputError(f"bad length bounds: min {min_length}, max {max_length}")
        raw = wordfreq_candidates(lang, top_n)
        words = filter_candidates(
            raw, stopwords=read_stopwords(stopwords), min_length=min_length, max_length=max_length
        )
        name = f"wordfreq top {top_n} ({lang})"
        log.info("%s: %d candidates, %d kept after filtering", name, len(raw), len(words))
        return words, name
    words, report = clean_word_list(source)
    log.info(
        "%s: %d words kept; dropped %d blank lines and %d repeats; lower-cased %d",
        source,
        report.kept,
        report.blank,
        report.duplicates,
        report.changed_case,
    )
    return words, str(source)


def split_words(
    words: Sequence[str], num_train: int, num_test: int, seed: int, *, source: str
) -> tuple[list[str], list[str]]:
    """Seeded shuffle, then the first ``num_train`` words train, the next ``num_test`` test
    (``source`` names the words in errors).

    The two lists are disjoint; the same words and seed give the same split.
    """
    if num_train < 1 or num_test < 1:
        raise SpagInputError(
            f"--num-train and --num-test must be >= 1 (got {num_train}, {num_test})"
        )
    if len(set(words)) != len(words):
        raise SpagInputError(f"{source}: words repeat; de-duplicate before splitting")
    need = num_train + num_test
    if len(words) < need:
        raise SpagInputError(
            f"{source}: only {len(words)} usable words, but {num_train} train + {num_test} test "
            f"= {need} were asked for"
        )
    # Sort first, so that the split does not depend on the order of the source.
    pool = sorted(words)
    random.Random(seed).shuffle(pool)
    return pool[:num_train], pool[num_train:need]


def write_word_list(words: Sequence[str], path: str | os.PathLike) -> None:
    """Write one word a line, atomically."""
    from spag.data.tables import atomic_path

    with atomic_path(path, suffix=".txt.tmp") as tmp:
        tmp.write_text("".join(f"{w}\n" for w in words), encoding="utf-8")


def shard_words(words: Sequence[str], shard_index: int, num_shards: int) -> list[str]:
    """The words of one shard: the strided slice ``words[shard_index::num_shards]``.

    Deterministic, disjoint across shards and balanced to within one word.
    """
    if num_shards < 1:
        raise SpagInputError(f"--num-shards must be >= 1 (got {num_shards})")
    if not 0 <= shard_index < num_shards:
        raise SpagInputError(
            f"--shard-index must be in 0..{num_shards - 1} for {num_shards} shards "
            f"(got {shard_index})"
        )
    return list(words[shard_index::num_shards])


def shard_seed(run_seed: int, epoch: int, shard_index: int) -> int:
    """The seed of one shard job, a stable 31-bit hash of the run seed, epoch and shard.

    Uses SHA-256 (not Python's salted ``hash()``), so every process and machine
    derives the same seed; equal to ``spag.game.selfplay.shard_seed``.
    """
    parts = ("shard", run_seed, epoch, shard_index)
    digest = hashlib.sha256("\x1f".join(map(str, parts)).encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % (2**31 - 1)
