"""The one exception type users see: a bad input, named in one line."""


class VfasimError(ValueError):
    """Bad input (unknown name, impossible size, malformed file, non-finite data).

    The CLI prints ``error: <message>`` and exits non-zero without a traceback.
    """
