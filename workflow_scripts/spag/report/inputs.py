"""How the report steps take and read their inputs, one way for all of them.

This module owns:

- :func:`read_tsv`: a TSV table as a DataFrame, or a :class:`SpagInputError` that
  names the file when it is missing or unreadable;
- :func:`check_columns`: the error naming the file and the columns it lacks;
- :func:`read_samples`: the columns of a training samples table that the report uses;
- :func:`benchmark_seconds`: the wall time of one Snakemake benchmark file;
- :func:`labelled_path` and :class:`LabelledPaths`: ``LABEL=PATH`` arguments, so
  that a step is told what each input is (an epoch, a stage, a rule and its
  wildcards) instead of guessing it from the path.

pandas is imported only when a table is read: the argument helpers stay light.
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spag.errors import SpagInputError

if TYPE_CHECKING:
    import pandas as pd

# The columns of a samples table that the summary and the plots read.
SAMPLE_COLUMNS = ("type", "role", "reward", "weight")


def read_tsv(path: str | os.PathLike, what: str) -> pd.DataFrame:
    """Read a TSV table; a missing or unreadable file is a :class:`SpagInputError` naming it."""
    import pandas as pd

    p = Path(path)
    if not p.is_file():
        raise SpagInputError(f"{what} file not found: {p}")
    try:
        return pd.read_csv(p, sep="\t")
    except (ValueError, OSError) as exc:  # pandas' parser errors are ValueErrors
        raise SpagInputError(f"{p}: not a readable TSV {what}: {exc}") from exc


def check_columns(df: pd.DataFrame, columns: Iterable[str], path: str | os.PathLike) -> None:
    """Raise a :class:`SpagInputError` naming ``path`` and every column of ``columns`` it lacks."""
    missing = [c for c in columns if c not in df.columns]
    if missing:
        names = ", ".join(f"'{c}'" for c in missing)
        raise SpagInputError(f"{path}: missing column{'s' if len(missing) > 1 else ''} {names}")


def read_samples(path: str | os.PathLike) -> pd.DataFrame:
    """The :data:`SAMPLE_COLUMNS` of a training samples table (Parquet)."""
    from spag.data.tables import read_parquet

    table = read_parquet(path, "samples")
    for col in SAMPLE_COLUMNS:
        if col not in table.column_names:
            raise SpagInputError(f"{path}: missing column '{col}'")
    return table.select(list(SAMPLE_COLUMNS)).to_pandas()


def benchmark_seconds(path: str | os.PathLike) -> float:
    """Wall time (the last value of column ``s``) of a Snakemake benchmark file; NaN if none."""
    import pandas as pd

    df = read_tsv(path, "benchmark")
    if "s" not in df.columns:
        return math.nan
    s = pd.to_numeric(df["s"], errors="coerce").dropna()
    return float(s.iloc[-1]) if len(s) else math.nan


def labelled_path(text: str) -> tuple[str, str]:
    """argparse type of a ``LABEL=PATH`` argument (the first ``=`` ends the label)."""
    label, sep, path = text.partition("=")
    if not sep or not label.strip() or not path:
        raise argparse.ArgumentTypeError(f"'{text}' is not LABEL=PATH (e.g. 1=results/epoch1/...)")
    return label, path


class LabelledPaths(argparse.Action):
    """Collect ``LABEL=PATH`` arguments into a dict (label -> path) in the order given.

    Use with ``type=labelled_path``; a label given twice is an error naming the option.
    """

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        entries: dict[str, str] = {}
        for label, path in values:
            if label in entries:
                parser.error(f"argument {option_string or self.dest}: label '{label}' given twice")
            entries[label] = path
        setattr(namespace, self.dest, entries)
