"""Evaluation: win/loss tables of evaluation games and reasoning benchmarks."""
