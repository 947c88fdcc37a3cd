"""Data in and out: Parquet contracts and atomic writes, input formats, target words, imitation data."""
