"""``spag target-words``: the training and held-out target word lists."""

from __future__ import annotations

import argparse
import logging

log = logging.getLogger(__name__)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--output-train", required=True, help="training word list to write")
    p.add_argument("--output-test", required=True, help="held-out word list to write")
    p.add_argument("--num-train", type=int, required=True, help="number of training words")
    p.add_argument("--num-test", type=int, required=True, help="number of held-out words")
    p.add_argument("--seed", type=int, default=0, help="seed of the shuffle before the split")
    p.add_argument(
        "--source",
        default="wordfreq",
        help="'wordfreq' (frequent words, filtered) or a word-list FILE, one word a line: "
        "stripped, lower-cased, blank lines and repeats dropped, anything but letters a-z "
        "refused; stop words and length bounds are not applied to a FILE (default: wordfreq)",
    )
    p.add_argument("--min-length", type=int, default=3, help="wordfreq: shortest word (3)")
    p.add_argument("--max-length", type=int, default=12, help="wordfreq: longest word (12)")
    p.add_argument(
        "--stopwords",
        default="data/stopwords.txt",
        help="wordfreq: stop-word list to drop, '#' comments allowed (data/stopwords.txt)",
    )
    p.add_argument("--lang", default="en", help="wordfreq: language code (en)")
    p.add_argument("--top-n", type=int, default=20000, help="wordfreq: candidates (20000)")


def run(args: argparse.Namespace) -> int:
    from spag.data.words import split_words, usable_words, write_word_list

    words, source = usable_words(
        args.source,
        stopwords=args.stopwords or None,
        min_length=args.min_length,
        max_length=args.max_length,
        lang=args.lang,
        top_n=args.top_n,
    )
    train, test = split_words(words, args.num_train, args.num_test, args.seed, source=source)
    write_word_list(train, args.output_train)
    write_word_list(test, args.output_test)
    log.info(
        "wrote %d words to %s, %d to %s", len(train), args.output_train, len(test), args.output_test
    )
    return 0
