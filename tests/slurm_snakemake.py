"""Snakemake as the SLURM tests start it: the real SLURM executor plugin, polling at the
test profile's interval.

snakemake-executor-plugin-slurm 2.8.0 adds 10 s to its polling interval after every status
check that sees no job finish (up to 180 s), whatever `seconds-between-status-checks` says.
On a real cluster jobs last minutes to hours and that saves `squeue` calls; the test
cluster's jobs last 5-60 s, and each job's end was seen 6-16 s late (one-node faulty run:
about 100 s of its 167). Here the interval goes back to the profile's after every check;
what the plugin submits, reads and reports is unchanged.

Usage: python tests/slurm_snakemake.py SNAKEMAKE_ARGS...
"""

from __future__ import annotations

import sys

from snakemake_executor_plugin_slurm import Executor

_check_active_jobs = Executor.check_active_jobs


async def _check_at_the_profiles_interval(self, active_jobs):
    async for job in _check_active_jobs(self, active_jobs):
        yield job
    # None: the remote executor then sleeps `seconds_between_status_checks`.
    self.next_seconds_between_status_checks = None


Executor.check_active_jobs = _check_at_the_profiles_interval

if __name__ == "__main__":
    from snakemake.cli import main

    sys.exit(main())
