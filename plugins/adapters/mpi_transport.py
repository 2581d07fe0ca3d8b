"""FedML's MPI transport without its polling loops and without pickling tensors in-band.

FedML 0.9.6 `core/distributed/communication/mpi/com_manager.py`, lines 86-94
(`MpiCommunicationManager.handle_receive_message`): `while not stopped: if q.qsize() > 0:
...; time.sleep(0.0001)` wakes 10,000 times a second in every rank, each wake-up taking the
GIL from the training thread and, with more ranks than cores, a core from another rank.
This subclass blocks on the same queue instead and wakes when a message arrives (or every
0.1 s to notice a stop); messages, their order and the observers are FedML's.

FedML 0.9.6 `com_manager.py:72` sends a message with `comm.send(msg)` and
`mpi_receive_thread.py:32` takes it with `comm.recv()`: mpi4py pickles the whole message,
tensors included, into one bytes object and unpickles it into new arrays. For a 90.9 MB
update that took 0.16 s to pickle and 0.12 s to unpickle on this host, against 0.02 s for
MPI to move the same bytes as a buffer. `BlockingMpiCommManager.send_message` pickles the
message with protocol 5 and its arrays out of band: a small header (`comm.send`, tag 0), then
each array's memory as it is (`comm.Send`, tag 1); the receive thread takes the header, then
the buffers from the same rank into one allocation, and unpickles the arrays as views of it.
The receiver gets the same message, bit for bit.
"""

from __future__ import annotations

import pickle
import queue
import threading
import time
from typing import Any

import numpy as np

from fedml_fes_plugins.adapters.offline import import_fedml

import_fedml()  # quiet import: FedML warns about pkg_resources/urllib3 at import time
from fedml.core.distributed.communication.message import Message
from fedml.core.distributed.communication.mpi.com_manager import MpiCommunicationManager
from fedml.core.distributed.communication.mpi.mpi_receive_thread import MPIReceiveThread

STOP_CHECK_S = 0.1
PROBE_MIN_S, PROBE_MAX_S = 0.001, 0.02  # the receive thread's probe interval, backing off when idle
HEADER_TAG, BUFFER_TAG = 0, 1  # a message's pickled header, then its out-of-band buffers
ALIGN = 64  # each buffer starts at a multiple of this in the receiver's allocation


def send_out_of_band(comm, obj: Any, dest: int) -> None:
    """`obj` pickled with protocol 5: the header with the buffers' sizes, then each buffer
    (a byte view of an array's memory: mpi4py sends it as MPI_BYTE, no copy)."""
    buffers: list[pickle.PickleBuffer] = []
    header = pickle.dumps(obj, protocol=5, buffer_callback=buffers.append)
    raws = [b.raw() for b in buffers]
    comm.send((header, [r.nbytes for r in raws]), dest=dest, tag=HEADER_TAG)
    for r in raws:
        comm.Send(r, dest=dest, tag=BUFFER_TAG)


def receive_out_of_band(comm, source: int) -> Any:
    """The object `send_out_of_band` sent from `source` (its header is the next message from
    there); its arrays are views of one allocation."""
    header, sizes = comm.recv(source=source, tag=HEADER_TAG)
    offsets, end = [], 0
    for n in sizes:
        offsets.append(end)
        end += -(-n // ALIGN) * ALIGN
    block = np.empty(end + ALIGN, dtype=np.uint8)
    shift = -block.ctypes.data % ALIGN
    memory = memoryview(block[shift : shift + end])
    views = [memory[o : o + n] for o, n in zip(offsets, sizes)]
    for v in views:
        comm.Recv(v, source=source, tag=BUFFER_TAG)
    return pickle.loads(header, buffers=views)


class OutOfBandChannel:
    """What the receive thread needs from MPI: which rank's header is waiting, and the message."""

    def __init__(self, comm):
        from mpi4py import MPI  # here, not at import: importing mpi4py initializes MPI

        self.comm, self._status, self._any = comm, MPI.Status(), MPI.ANY_SOURCE

    def poll(self) -> int | None:
        """The rank whose message is waiting, if any (non-blocking)."""
        if self.comm.Iprobe(source=self._any, tag=HEADER_TAG, status=self._status):
            return self._status.Get_source()
        return None

    def receive(self, source: int) -> Any:
        return receive_out_of_band(self.comm, source)


class BackoffReceiveThread(MPIReceiveThread):
    """FedML 0.9.6 `mpi/mpi_receive_thread.py:27-31` probes for a message every 1 ms for the
    whole run (`while not comm.Iprobe(): time.sleep(0.001)`): 1,000 wake-ups a second in every
    rank, each entering MPI's progress engine and taking the GIL, while the worker ranks train.
    This thread probes as often right after a message and backs off to every 20 ms while
    nothing comes (a round's messages are seconds apart; at most 20 ms is added to one).
    `channel` (FedML's `comm` argument): an `OutOfBandChannel`."""

    def run(self) -> None:
        wait = PROBE_MIN_S
        while not self._stop_event.is_set():
            source = self.comm.poll()
            if source is not None:
                self.q.put(self.comm.receive(source))
                wait = PROBE_MIN_S
                continue
            time.sleep(wait)
            wait = min(wait * 2, PROBE_MAX_S)


class BlockingMpiCommManager(MpiCommunicationManager):
    def __init__(self, comm, rank: int, size: int):
        self._send_lock = threading.Lock()  # a message's header and buffers go out together
        super().__init__(comm, rank, size)

    def send_message(self, msg) -> None:
        """FedML's `com_manager.py:69-73` with the tensors out of band (module docstring)."""
        with self._send_lock:
            send_out_of_band(self.comm, msg, msg.get(Message.MSG_ARG_KEY_RECEIVER))

    def init_server_communication(self):
        return self._start_receiving("ServerReceiveThread", "_server_receive_thread")

    def init_client_communication(self):
        return self._start_receiving("ClientReceiveThread", "_client_receive_thread")

    def _start_receiving(self, name: str, attribute: str):
        """FedML's queues (fedml 0.9.6 `mpi/com_manager.py:37-66`) with the backing-off thread."""
        receive: queue.Queue = queue.Queue(0)
        thread = BackoffReceiveThread(OutOfBandChannel(self.comm), self.rank, self.size, name, receive)
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
