"""``spag target-words``: the training and held-out target word lists."""

from __future__ import annotations

import argparse
import logging
from dataclasses import dataclass

from spag.data.words import WORDFREQ_LANG, WORDFREQ_TOP_N, WordsSettings
from spag.settings import add_arguments as add_setting_arguments
from spag.settings import from_arguments, opt, req

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class TargetWordsConfig(WordsSettings):
    """One ``spag target-words`` job: its files, seed and the config's ``words``."""

    output_train: str = req("training word list to write")
    output_test: str = req("held-out word list to write")
    # Given on every command line: a word count is never left to chance.
    num_train: int = req("number of training words")
    num_test: int = req("number of held-out words")
    seed: int = opt(0, "seed of the shuffle before the split")
    lang: str = opt(WORDFREQ_LANG, "wordfreq: language code")
    top_n: int = opt(WORDFREQ_TOP_N, "wordfreq: candidates")


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_setting_arguments(p, TargetWordsConfig)


def run(args: argparse.Namespace) -> int:
    from spag.data.words import split_words, usable_words, write_word_list

    job: TargetWordsConfig = from_arguments(TargetWordsConfig, args)
    words, source = usable_words(
        job.source,
        stopwords=job.stopwords or None,
        min_length=job.min_length,
        max_length=job.max_length,
        lang=job.lang,
        top_n=job.top_n,
    )
    train, test = split_words(words, job.num_train, job.num_test, job.seed, source=source)
    write_word_list(train, job.output_train)
    write_word_list(test, job.output_test)
    log.info(
        "wrote %d words to %s, %d to %s", len(train), job.output_train, len(test), job.output_test
    )
    return 0
