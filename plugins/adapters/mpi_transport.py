"""FedML's MPI transport without its polling loop.

FedML 0.9.6 `core/distributed/communication/mpi/com_manager.py`, lines 86-94
(`MpiCommunicationManager.handle_receive_message`): `while not stopped: if q.qsize() > 0:
...; time.sleep(0.0001)` wakes 10,000 times a second in every rank, each wake-up taking the
GIL from the training thread and, with more ranks than cores, a core from another rank.
This subclass blocks on the same queue instead and wakes when a message arrives (or every
0.1 s to notice a stop); messages, their order and the observers are FedML's.
"""
from __future__ import annotations

import queue
from collections import OrderedDict
from typing import Any

import numpy as np
import torch

from fedml_fes_plugins.adapters.offline import import_fedml

import_fedml()  # quiet import: FedML warns about pkg_resources/urllib3 at import time
from fedml.core.distributed.communication.mpi.com_manager import MpiCommunicationManager

STOP_CHECK_S = 0.1


class BlockingMpiCommManager(MpiCommunicationManager):
    def handle_receive_message(self) -> None:
        self._notify_connection_ready()
        while not self._stop_running:
            try:
                msg_params = self.q_receiver.get(timeout=STOP_CHECK_S)
            except queue.Empty:
                continue
            self.notify(msg_params)


def use_blocking_mpi(manager) -> None:
    """Call from a FedMLCommManager subclass's `_init_manager` for the MPI backend (the same
    construction and observer as FedML's `_init_manager`, fedml_comm_manager.py:133-136, 209)."""
    manager.com_manager = BlockingMpiCommManager(manager.comm, manager.rank, manager.size)
    manager.com_manager.add_observer(manager)


# Tensors on the wire. mpi4py pickles each message; a torch tensor pickles through torch's own
# storage serialization, 2-4x slower than a numpy array, which pickles as one buffer copy
# (measured on a 90.9 MB FedCLS update, one thread: 0.148 s / 0.116 s to pickle / unpickle as
# tensors, 0.065 s / 0.026 s as arrays). The MPI managers send numpy views of the tensors and
# take them back with `torch.from_numpy` (no copy); the values are bit for bit the same.
def tensors_to_wire(params: Any) -> Any:
    """numpy views of a named-tensor dict's CPU tensors (others, e.g. bfloat16, as they are)."""
    if not isinstance(params, dict):
        return params
    return OrderedDict((k, v.detach().cpu().numpy() if isinstance(v, torch.Tensor) and v.dtype != torch.bfloat16
                        else v) for k, v in params.items())


def tensors_from_wire(params: Any) -> Any:
    """The tensors again (sharing the arrays' memory); anything else untouched, for the
    aggregator's checks to judge."""
    if not isinstance(params, dict):
        return params
    return OrderedDict((k, torch.from_numpy(v) if isinstance(v, np.ndarray) else v) for k, v in params.items())
