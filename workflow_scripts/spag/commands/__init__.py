"""One module per ``spag`` step: ``add_arguments(parser)`` and ``run(args) -> int``."""
