"""FedML's MPI transport without its polling loops.

FedML 0.9.6 `core/distributed/communication/mpi/com_manager.py`, lines 86-94
(`MpiCommunicationManager.handle_receive_message`): `while not stopped: if q.qsize() > 0:
...; time.sleep(0.0001)` wakes 10,000 times a second in every rank, each wake-up taking the
GIL from the training thread and, with more ranks than cores, a core from another rank.
This subclass blocks on the same queue instead and wakes when a message arrives (or every
0.1 s to notice a stop); messages, their order and the observers are FedML's.
"""
from __future__ import annotations

import queue
import time
from collections import OrderedDict
from typing import Any

import numpy as np
import torch

from fedml_fes_plugins.adapters.offline import import_fedml

import_fedml()  # quiet import: FedML warns about pkg_resources/urllib3 at import time
from fedml.core.distributed.communication.mpi.com_manager import MpiCommunicationManager
from fedml.core.distributed.communication.mpi.mpi_receive_thread import MPIReceiveThread

STOP_CHECK_S = 0.1
PROBE_MIN_S, PROBE_MAX_S = 0.001, 0.02  # the receive thread's probe interval, backing off when idle


class BackoffReceiveThread(MPIReceiveThread):
    """FedML 0.9.6 `mpi/mpi_receive_thread.py:27-31` probes for a message every 1 ms for the
    whole run (`while not comm.Iprobe(): time.sleep(0.001)`): 1,000 wake-ups a second in every
    rank, each entering MPI's progress engine and taking the GIL, while the worker ranks train.
    This thread probes as often right after a message and backs off to every 20 ms while
    nothing comes (a round's messages are seconds apart; at most 20 ms is added to one)."""

    def run(self) -> None:
        wait = PROBE_MIN_S
        while not self._stop_event.is_set():
            if self.comm.Iprobe():
                self.q.put(self.comm.recv())
                wait = PROBE_MIN_S
                continue
            time.sleep(wait)
            wait = min(wait * 2, PROBE_MAX_S)


class BlockingMpiCommManager(MpiCommunicationManager):
    def init_server_communication(self):
        return self._start_receiving("ServerReceiveThread", "_server_receive_thread")

    def init_client_communication(self):
        return self._start_receiving("ClientReceiveThread", "_client_receive_thread")

    def _start_receiving(self, name: str, attribute: str):
        """FedML's queues (fedml 0.9.6 `mpi/com_manager.py:37-66`) with the backing-off thread."""
        receive: queue.Queue = queue.Queue(0)
        thread = BackoffReceiveThread(self.comm, self.rank, self.size, name, receive)
        setattr(self, attribute, thread)
        thread.start()
        return queue.Queue(0), receive

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
