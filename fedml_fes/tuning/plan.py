"""Which parameters train: all of them, or biases only (BitFit, FedFSL-BIAS).

The trainable set is computed from the model and the mode, never implied; it decides what
travels too (`tuning.params.trainable_state` sends exactly the parameters that train).
"""
from __future__ import annotations

from torch import nn

from ..errors import FesError

HEAD_PREFIXES = ("classifier.", "score.")  # a freshly initialised classification head trains fully


def apply_tuning(model: nn.Module, mode: str) -> int:
    """Set requires_grad by mode; returns the number of trainable parameters."""
    if mode not in ("full", "bias"):
        raise FesError(f"tuning mode must be full or bias, got '{mode}'")
    count = 0
    for name, p in model.named_parameters():
        train = mode == "full" or name.endswith("bias") or name.startswith(HEAD_PREFIXES)
        p.requires_grad_(train)
        count += p.numel() if train else 0
    if count == 0:
        raise FesError(f"tuning mode '{mode}' leaves no trainable parameter in {type(model).__name__}")
    return count
