"""Errors that the command line reports as a clear message instead of a traceback."""


class SpagInputError(ValueError):
    """Bad user input (config, word list, data file, model folder).

    The message must name the file, row, column or key at fault.
    """
