"""transformers' own output, silenced where it would land in the middle of a run's lines.

A leaf module: `models` and `packaged_models` both use it, and neither imports the other's
caller (models -> packaged_models -> quiet).
"""

from __future__ import annotations

import contextlib
from typing import Iterator

from transformers.utils import logging as hf_logging


@contextlib.contextmanager
def quiet_transformers() -> Iterator[None]:
    """Silence the 'newly initialized weights' report (new heads are expected here) and the
    weight-loading bar, which would land in the middle of a run's round lines."""
    before = hf_logging.get_verbosity()
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.set_verbosity(before)
        if bars:
            hf_logging.enable_progress_bar()
