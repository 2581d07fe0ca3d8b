"""What the cross-silo server and silos share: a FedML comm manager with an inbox.

FedML calls a manager's handlers on its receive thread (gRPC's loop, paho's network
loop). Training there would stall MQTT keepalives and leave nothing to enforce round
deadlines, so here the receive thread only queues messages, and the role's logic runs on
the main thread, reading the inbox with timeouts: a dropped silo or a silent server is a
timeout in plain code, not a watchdog racing the handlers.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from typing import Any, Callable

from fedml_fes.errors import one_line
from fedml_fes_plugins.adapters.offline import import_fedml
from fedml_fes_plugins.cross_silo.config import CrossSiloSettings
from fedml_fes_plugins.cross_silo.transport import flush_then_stop, make_grpc_manager

import_fedml()  # quiet import: FedML warns about pkg_resources/urllib3 at import time
from fedml.core.distributed.communication.constants import CommunicationConstants
from fedml.core.distributed.communication.message import Message
from fedml.core.distributed.fedml_comm_manager import FedMLCommManager

log = logging.getLogger(__name__)
CONNECTED = CommunicationConstants.MSG_TYPE_CONNECTION_IS_READY


class QueuedCommManager(FedMLCommManager):
    """A FedMLCommManager whose receive thread only fills `inbox`."""

    def __init__(self, args: Any, settings: CrossSiloSettings, rank: int):
        self.settings = settings
        self.inbox: "queue.Queue[tuple[Any, Message]]" = queue.Queue()
        self._finished = False
        super().__init__(args, comm=None, rank=rank, size=settings.silo_num, backend=settings.backend)

    def _init_manager(self) -> None:
        if self.backend == "GRPC":
            self.com_manager = make_grpc_manager(self.args, self.rank, self.size + 1)
            self.com_manager.add_observer(self)
        else:
            super()._init_manager()

    def register_message_receive_handlers(self) -> None:
        """Nothing to register: every message goes to the inbox."""

    def receive_message(self, msg_type, msg_params) -> None:
        self.inbox.put((msg_type, msg_params))

    def next_message(self, timeout_s: float) -> tuple[Any, Message] | None:
        try:
            return self.inbox.get(timeout=max(timeout_s, 0.0))
        except queue.Empty:
            return None

    def send(self, msg: Message) -> str | None:
        """Send; the error as one line instead of an exception (a peer may be gone)."""
        try:
            self.com_manager.send_message(msg)
            return None
        except Exception as e:
            return one_line(e)

    def message(self, msg_type: str, receiver_rank: int, **params: Any) -> Message:
        msg = Message(msg_type, self.settings.wire_id(self.rank), self.settings.wire_id(receiver_rank))
        for key, value in params.items():
            msg.add_params(key, value)
        return msg

    def run_role(self, logic: Callable[[], None]) -> None:
        """FedML's receive loop on a daemon thread, the role's logic here; always ends both."""
        receiver = threading.Thread(target=self._receive, name="fedml-receive", daemon=True)
        receiver.start()
        try:
            logic()
        finally:
            self.close()
            receiver.join(timeout=5.0)

    def _receive(self) -> None:
        try:
            self.com_manager.handle_receive_message()
        except Exception as e:  # a dead receive loop surfaces as timeouts in the logic
            log.error("receive loop ended: %s", one_line(e))

    def close(self) -> None:
        if self._finished:
            return
        self._finished = True
        try:
            flush_then_stop(self.com_manager, self.finish)  # the receive thread closes its own socket
        except Exception as e:
            log.warning("closing the %s connection: %s", self.backend, one_line(e))
        time.sleep(0.05)
