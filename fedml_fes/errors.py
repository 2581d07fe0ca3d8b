"""One exception type for every user-facing problem.

Anything a user can get wrong (a config key, a file, a model path, a launcher flag) raises
`FesError` with a message that fits on one line and names the culprit. The CLI prints it
as `fedml-fes: error: <message>` and exits non-zero, instead of a traceback wall.
"""

from __future__ import annotations

import logging
from typing import Callable


class FesError(Exception):
    """A user-facing error whose message is one self-explanatory line."""

    def __init__(self, message: str):
        super().__init__(" ".join(str(message).split()))


def one_line(e: BaseException) -> str:
    """Any exception as one line: a FesError's own message, else `Type: message`."""
    return str(e) if isinstance(e, FesError) else " ".join(f"{type(e).__name__}: {e}".split())


def exit_status(run: Callable[[], int], emit: Callable[[str], None], unexpected: str | None = None) -> int:
    """A process main's exit status: `run()`'s, or one `error: ...` line through `emit` and 1
    (130 on Ctrl-C). With `unexpected` (what to call this process), any other exception is
    one line too (its traceback goes to the log); without, it propagates."""
    try:
        return run()
    except FesError as e:
        emit(f"error: {e}")
    except KeyboardInterrupt:
        emit("error: interrupted")
        return 130
    except Exception as e:
        if unexpected is None:
            raise
        logging.getLogger(__name__).exception("%s failed", unexpected)
        emit(f"error: {unexpected}: {one_line(e)}")
    return 1
