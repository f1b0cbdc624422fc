"""The one exception type the CLI turns into a clean message and a non-zero exit."""


class FractalError(Exception):
    """A problem with the user's input (data, options, files) that they can fix.

    The CLI prints ``error: <message>`` and exits with status 2, without a traceback.
    """
