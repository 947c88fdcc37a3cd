"""Errors that the command line reports as a clear message instead of a traceback."""


class SpagInputError(ValueError):
    """Bad user input (config, word list, data file, model folder).

    The message must name the file, row, column or key at fault.
    """


class SpagRunError(RuntimeError):
    """A run that cannot go on (a diverged loss, an output that cannot be written).

    The message must say where (step, file) and what to change.
    """
