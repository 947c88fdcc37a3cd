"""The run's summaries and plots for the Snakemake report.

- :mod:`spag.report.names`: which plot files there are (the rules import them);
- :mod:`spag.report.inputs`: reading the report's inputs (TSV, samples, benchmark
  files) with errors that name the file, and ``LABEL=PATH`` arguments;
- :mod:`spag.report.summary`: the summary tables' rows and columns, tokens/s;
- :mod:`spag.report.plots`: drawing the plots.
"""
