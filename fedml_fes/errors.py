"""One exception type for every user-facing problem.

Anything a user can get wrong (a config key, a file, a model path, a launcher flag) raises
`FesError` with a message that fits on one line and names the culprit. The CLI prints it
as `fedml-fes: error: <message>` and exits non-zero, instead of a traceback wall.
"""


class FesError(Exception):
    """A user-facing error whose message is one self-explanatory line."""

    def __init__(self, message: str):
        super().__init__(" ".join(str(message).split()))


def one_line(e: BaseException) -> str:
    """Any exception as one line: a FesError's own message, else `Type: message`."""
    return str(e) if isinstance(e, FesError) else " ".join(f"{type(e).__name__}: {e}".split())
