"""The one exception type users see: a bad input, named in one line."""


class VfasimError(ValueError):
    """Bad input (unknown name, impossible size, malformed file, non-finite data).

    The CLI prints ``error: <message>`` and exits non-zero without a traceback.
    """


class Interrupted(Exception):
    """The user interrupted a command (Ctrl-C); the message says what was kept.

    The CLI prints the message on one line and exits with status 130.
    """
