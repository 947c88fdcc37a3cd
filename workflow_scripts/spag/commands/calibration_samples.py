"""``spag calibration-samples``: a seeded sample of a samples table's rows, in their
order, for the calibration's scoring and training (``snakemake calibrate``)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from spag.settings import Checked, from_arguments, opt, req
from spag.settings import add_arguments as add_setting_arguments


@dataclass(frozen=True, kw_only=True)
class CalibrationSamplesConfig(Checked):
    input: str = req("the samples table (Parquet)")
    output: str = req("the sampled table (Parquet)")
    rows: int = opt(256, "rows kept (all where the table has fewer)", ge=1)
    seed: int = opt(0, "the sample's seed", ge=0)


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_setting_arguments(p, CalibrationSamplesConfig)


def run(args: argparse.Namespace) -> int:
    import random

    from spag.data.tables import read_parquet, write_parquet

    c: CalibrationSamplesConfig = from_arguments(CalibrationSamplesConfig, args)
    table = read_parquet(c.input, "samples")
    if table.num_rows > c.rows:
        keep = sorted(random.Random(c.seed).sample(range(table.num_rows), c.rows))
        table = table.take(keep)
    write_parquet(table, c.output)
    print(f"{c.output}: {table.num_rows} rows of {c.input}")
    return 0
