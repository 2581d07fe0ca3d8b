"""Tensors on the wire: numpy arrays, for every transport that pickles.

A numpy array pickles and unpickles faster than a torch tensor, which goes through torch's
own storage serialization, and only a numpy array's memory can go out of band
(`mpi_transport`). Measured on the 105 tensors of a 90.9 MB FedCLS update, one process: as
tensors 0.07-0.08 s to pickle and 0.05-0.09 s to unpickle, as arrays 0.06 s and 0.025 s (torch
2.15; an earlier torch build took 0.148 s / 0.116 s as tensors). The MPI managers
and the cross-silo server and silos (whose gRPC and MQTT_S3 transports pickle a message's
parameters) send numpy views of the tensors and take them back with `torch.from_numpy` (no
copy); the values are bit for bit the same.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import numpy as np
import torch


def tensors_to_wire(params: Any) -> Any:
    """numpy views of a named-tensor dict's CPU tensors (others, e.g. bfloat16, as they are)."""
    if not isinstance(params, dict):
        return params
    return OrderedDict(
        (k, v.detach().cpu().numpy() if isinstance(v, torch.Tensor) and v.dtype != torch.bfloat16 else v)
        for k, v in params.items()
    )


def tensors_from_wire(params: Any) -> Any:
    """The tensors again (sharing the arrays' memory); anything else untouched, for the
    receiver's checks to judge."""
    if not isinstance(params, dict):
        return params
    return OrderedDict((k, torch.from_numpy(v) if isinstance(v, np.ndarray) else v) for k, v in params.items())
